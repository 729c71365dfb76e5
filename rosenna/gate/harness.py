"""The gate's harness programs, one per way a solver calls a generated model.

The programs are data files in ``rosenna/gate/templates/`` (real C, Fortran and CUDA, readable and
diffable as such); what differs between OpenMP and OpenACC is the table :data:`MODELS`. One
placeholder syntax, ``@name@``, is filled by :func:`render`; an unknown or unfilled name is an error.

Every harness takes ``N REPS STEPS XFILE YFILE [PLANT]`` (a file-loaded model, built with
-DROSENNA_WEIGHTS, reads its weights file from $ROSENNA_GATE_WEIGHTS): it reads N points of x from XFILE,
maps or copies them to the device outside any timed window, times REPS passes over the N points
(median reported, ns per point), then runs STEPS further passes over the resident data (the
loop whose host-device transfers the gate counts: it runs each harness at STEPS=0 and STEPS=4
and takes the difference), and writes the first points of y to YFILE. PLANT=1 makes each of those
steps copy one value back to the host on purpose, so that the gate can show its counter sees a
transfer. Output lines: ``ON_DEVICE 0|1`` (checked inside the offload region: libgomp falls back
to the host silently) and ``NS_PER_POINT x``.

Placeholders every template takes: ``@n@`` the model name, ``@N@`` its upper-case form, ``@check@``
points written back, ``@real@`` the C type of x and y (``float`` or ``double``, the model's
precision; the Fortran harness uses the module's kind ``<name>_rk``).
"""

import re
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent / "templates"
_PLACEHOLDER = re.compile(r"@([A-Za-z_]+)@")

#: Where the per-point harnesses differ between the offload models: their directives, as data.
MODELS = {
    "omp": {
        "c": {
            "title": "1: @n@_infer per point inside the harness's own OpenMP target loop.",
            "includes": "#include <omp.h>",
            "clock": "",
            "loop": "#pragma omp target teams distribute parallel for",
            "on_device": "#pragma omp target map(from : on_device)\n    on_device = !omp_is_initial_device();",
            "enter": "#pragma omp target enter data map(to : x[0:n * NX]) map(alloc : y[0:n * NY])",
            "now": "omp_get_wtime()",
            "plant": "#pragma omp target update from(y[0:1])",
            "exit": "#pragma omp target exit data map(from : y[0:n * NY]) map(release : x[0:n * NX])",
        },
        "fortran": {
            "title": "2: @n@_infer per point inside the harness's own OpenMP target loop",
            "runtime_module": "omp_lib",
            "clock_declarations": "  double precision :: t0, tmp",
            "on_device": "  !$omp target map(from: on_device)\n  if (.not. omp_is_initial_device()) on_device = 1\n"
                         "  !$omp end target",
            "enter": "  !$omp target enter data map(to: x) map(alloc: y)",
            "tic": "    t0 = omp_get_wtime()",
            "toc": "    t(r) = omp_get_wtime() - t0",
            "plant": "      !$omp target update from(y(1:1, 1:1))",
            "exit": "  !$omp target exit data map(from: y) map(delete: x)",
            "loop_begin": "    !$omp target teams distribute parallel do",
            "loop_end": "    !$omp end target teams distribute parallel do",
        },
    },
    "acc": {
        "c": {
            "title": "1b: @n@_infer per point inside the harness's own OpenACC parallel loop.",
            "includes": "#include <time.h>\n#include <openacc.h>",
            "clock": ("static double now(void)\n{\n    struct timespec ts;\n    clock_gettime(CLOCK_MONOTONIC, &ts);\n"
                      "    return ts.tv_sec + 1e-9 * ts.tv_nsec;\n}\n"),
            "loop": "#pragma acc parallel loop gang vector present(x[0:n * NX], y[0:n * NY])",
            "on_device": "#pragma acc serial copyout(on_device)\n    on_device = !acc_on_device(acc_device_host);",
            "enter": "#pragma acc enter data copyin(x[0:n * NX]) create(y[0:n * NY])",
            "now": "now()",
            "plant": "#pragma acc update self(y[0:1])",
            "exit": "#pragma acc exit data copyout(y[0:n * NY]) delete(x[0:n * NX])",
        },
        "fortran": {
            "title": "2b: @n@_infer per point inside the harness's own OpenACC parallel loop",
            "runtime_module": "openacc",
            "clock_declarations": "  double precision :: tmp\n  integer(8) :: clock0, clock1, rate",
            "on_device": "  !$acc serial copyout(on_device)\n  if (.not. acc_on_device(acc_device_host)) on_device = 1\n"
                         "  !$acc end serial",
            "enter": "  !$acc enter data copyin(x) create(y)",
            "tic": "    call system_clock(clock0, rate)",
            "toc": "    call system_clock(clock1)\n    t(r) = dble(clock1 - clock0) / dble(rate)",
            "plant": "      !$acc update self(y(1:1, 1:1))",
            "exit": "  !$acc exit data copyout(y) delete(x)",
            "loop_begin": "    !$acc parallel loop gang vector present(x, y)",
            "loop_end": "",
        },
    },
}

#: What the Fortran harness's ``step`` does: per point, ``<name>_infer`` inside the model's own
#: loop; for a whole-field plan, ``<name>_infer_batch`` on the entered arrays (its regions run
#: over the samples on the device; the data constructs around them copy nothing already there).
FORTRAN_STEPS = {
    "point": "    integer :: i\n@loop_begin@\n    do i = 1, n\n      call @n@_infer(x(:, i), y(:, i))\n    end do\n"
             "@loop_end@",
    "batch": "    integer :: status\n    call @n@_infer_batch(n, x, y, status)\n    if (status /= 0) error stop 6",
}
#: The titles of the Fortran batch harnesses, by offload model.
FORTRAN_BATCH_TITLES = {
    "omp": "3c: @n@_infer_batch of a whole-field plan from Fortran, data entered with OpenMP",
    "acc": "3d: @n@_infer_batch of a whole-field plan from Fortran, data entered with OpenACC",
}

#: The harness files: (template, file name in the build folder). The batch harnesses are a
#: runtime's header (allocation, copies, launch) followed by the shared ``batch_body.c``; the
#: Fortran batch harnesses (``batch-fortran-*``, whole-field plans) are ``per_point.F90`` whose
#: step calls ``<name>_infer_batch``.
FILES = {
    "c-omp": ("per_point.c", "h1_c_omp.c"),
    "fortran-omp": ("per_point.F90", "h2_fortran_omp.F90"),
    "c-acc": ("per_point.c", "h1b_c_acc.c"),
    "fortran-acc": ("per_point.F90", "h2b_fortran_acc.F90"),
    "batch-cuda": ("batch_cuda.c", "h3_batch.c"),
    "batch-omp": ("batch_omp.c", "h3_batch.c"),
    "batch-fortran-omp": ("per_point.F90", "h3c_batch_fortran_omp.F90"),
    "batch-fortran-acc": ("per_point.F90", "h3d_batch_fortran_acc.F90"),
    "cuda-user": ("cuda_user.cu", "h4_cuda_user.cu"),
    "cuda-warp": ("cuda_warp.cu", "h5_cuda_warp.cu"),
}


class TemplateError(ValueError):
    """A template names a placeholder nobody fills, or a value is missing."""


def template(name):
    """The text of ``rosenna/gate/templates/<name>``."""
    return (TEMPLATES / name).read_text(encoding="utf-8")


def fill(text, values):
    """``text`` with every ``@name@`` replaced by ``values[name]``.

    A line holding nothing but a placeholder whose value is empty is dropped, so optional parts
    leave no blank lines. Values may themselves hold placeholders (filled from the same mapping).

    Raises:
        TemplateError: for a placeholder not in ``values``.
    """
    def one(match):
        if match.group(1) not in values:
            raise TemplateError(f"placeholder @{match.group(1)}@ has no value (have: {', '.join(sorted(values))})")
        return str(values[match.group(1)])

    out = text
    for _ in range(3):  # a table value may hold @n@ or an optional line; nothing nests deeper
        lines = [line for line in out.split("\n")
                 if not (_PLACEHOLDER.fullmatch(line.strip()) and values.get(line.strip()[1:-1]) == "")]
        out, before = _PLACEHOLDER.sub(one, "\n".join(lines)), out
        if out == before:
            break
    return out


def render(harness, *, n, check, real):
    """The source of one harness (a key of :data:`FILES`) for model ``n``.

    Args:
        harness: e.g. "c-omp", "fortran-acc", "batch-cuda", "batch-omp", "batch-fortran-acc",
            "cuda-user", "cuda-warp".
        n: the model's C name.
        check: how many points of y the harness writes back.
        real: "float" or "double", the model's precision.
    """
    name, _ = FILES[harness]
    values = {"n": n, "N": n.upper(), "check": check, "real": real}
    *kind, lang, model = harness.split("-")
    if name.startswith("per_point"):
        values.update(MODELS[model][lang], step=FORTRAN_STEPS["batch" if kind else "point"])
        if kind:
            values["title"] = FORTRAN_BATCH_TITLES[model]
    else:
        values["body"] = template("batch_body.c")
    return fill(template(name), values)


#: A CUPTI injection library (CUDA_INJECTION64_PATH) that counts every host<->device copy the
#: program's runtimes make and prints the totals at exit; examples/run_gpu.sh builds the same file.
COUNTER = (Path(__file__).resolve().parent.parent / "data" / "count_transfers.cu").read_text()
