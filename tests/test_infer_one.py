"""The whole-field path: <name>_infer_one (and <name>_infer_batch over it) on the host, C and Fortran,
against onnxruntime; which plans take it; and that LSTM/GRU plans have none."""

import os
import subprocess

import numpy as np
import onnxruntime as ort
import op_models
import pytest

from rosenna import generate as gen
from rosenna.commands.info import describe
from rosenna import parallel
from rosenna import strategy
from rosenna.emit.cuda import field_fuse, whole_field
from rosenna.strategy.field import fusion
from rosenna.plan import WHOLE_THRESHOLD

C_MAIN = """#include <stdio.h>
#include <stdlib.h>
#include "{n}.h"

int main(int argc, char **argv)
{{
    int n = atoi(argv[1]), status = 0;
    {t} *x = malloc(sizeof({t}) * (size_t)n * {NX});
    {t} *one = malloc(sizeof({t}) * (size_t)n * {NY});
    {t} *batch = malloc(sizeof({t}) * (size_t)n * {NY});
    FILE *f = fopen(argv[2], "rb");
    if (!x || !one || !batch || !f || fread(x, sizeof({t}), (size_t)n * {NX}, f) != (size_t)n * {NX}) return 3;
    fclose(f);
    for (int i = 0; i < n; ++i)
        status |= {n}_infer_one(x + (size_t)i * {NX}, one + (size_t)i * {NY}, NULL);
    status |= {n}_infer_batch(n, x, batch, NULL);
    f = fopen(argv[3], "wb");
    fwrite(one, sizeof({t}), (size_t)n * {NY}, f);
    fwrite(batch, sizeof({t}), (size_t)n * {NY}, f);
    fclose(f);
    (void)argc;
    return status;
}}
"""

F_MAIN = """program main
  use {n}_model
  implicit none
  integer :: n, i, unit, status, total
  character(len=4096) :: arg
  real({n}_rk), allocatable :: x(:, :), one(:, :), batch(:, :)

  call get_command_argument(1, arg)
  read (arg, *) n
  allocate (x({n}_nx, n), one({n}_ny, n), batch({n}_ny, n))
  call get_command_argument(2, arg)
  open (newunit=unit, file=trim(arg), access='stream', form='unformatted', status='old', action='read')
  read (unit) x
  close (unit)
  total = 0
  do i = 1, n
    call {n}_infer_one(x(:, i), one(:, i), status)
    total = total + status
  end do
  call {n}_infer_batch(n, x, batch, status)
  total = total + status
  call get_command_argument(3, arg)
  open (newunit=unit, file=trim(arg), access='stream', form='unformatted', status='replace', action='write')
  write (unit) one
  write (unit) batch
  close (unit)
  if (total /= 0) error stop 1
end program main
"""


def run_whole(model_path, out, lang, samples=2, seed=0, embed=True):
    """Generate, build and run infer_one and infer_batch; return (plan, x, y_one, y_batch)."""
    plan, _ = gen.generate(model_path, str(out), gen.Options(lang="both", embed=embed, infer_one=True))
    n = plan.name
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (samples, plan.nx)).astype(np.float32)
    x.tofile(out / "x.bin")
    fmt = {"n": n, "t": plan.ctype, "NX": plan.nx, "NY": plan.ny}
    if lang in ("c", "c_acc"):
        (out / "main.c").write_text(C_MAIN.format(**fmt))
        # c_acc: the OpenACC compute regions, run by GCC's host fallback (ROSENNA_ACC_DEVICE forced)
        flags = ["-fopenmp"] if lang == "c" else ["-fopenacc", "-DROSENNA_ACC_DEVICE()=1"]
        cmd = ["gcc", "-O1", *flags, "-I", str(out), "main.c", f"{n}.c", "-o", "main", "-lm"]
    else:
        (out / "main.f90").write_text(F_MAIN.format(**fmt))
        cmd = ["gfortran", "-O1", "-fopenmp", f"{n}_model.F90", "main.f90", "-o", "main"]
    subprocess.run(cmd, cwd=out, check=True, capture_output=True)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    subprocess.run([str(out / "main"), str(samples), "x.bin", "y.bin"], cwd=out, check=True, env=env)
    y = np.fromfile(out / "y.bin", np.float32).reshape(2, samples, plan.ny)
    return plan, x, y[0], y[1]


def reference(model_path, plan, x):
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    outs = []
    for sample in x:
        feed = {s.name: sample[s.offset:s.offset + s.size].reshape(s.shape) for s in plan.inputs}
        outs.append(np.concatenate([np.asarray(v).reshape(-1) for v in sess.run(None, feed)]))
    return np.stack(outs)


def assert_close(got, want, rtol=1e-5, atol=1e-5, what=""):
    err = np.abs(got.astype(np.float64) - want)
    worst = int(np.argmax(err - rtol * np.abs(want)))
    assert np.all(err <= atol + rtol * np.abs(want)), (
        f"{what}: worst element {worst}: got {got.reshape(-1)[worst]!r}, onnxruntime {want.reshape(-1)[worst]!r} "
        f"(rtol {rtol}, atol {atol})")


def test_convnet_openacc_whole_field_regions(tmp_path):
    """The OpenACC branch of infer_one and infer_batch (one ``acc parallel loop`` per region, the
    sample loop collapsed in the batch), run through GCC's host fallback, against onnxruntime."""
    path = op_models.convnet(tmp_path / "convnet.onnx")
    plan, x, y_one, y_batch = run_whole(str(path), tmp_path, "c_acc", samples=3)
    src = (tmp_path / f"{plan.name}.c").read_text()
    batch = src[src.index(f"int {plan.name}_infer_batch("):src.index(f"int {plan.name}_infer_one(")]
    one = src[src.index(f"int {plan.name}_infer_one("):]
    assert batch.count("#pragma acc parallel loop gang vector") == 27  # every region over the samples
    assert one.count("#pragma acc parallel loop gang vector") + one.count("#pragma acc serial") == 27
    assert "#pragma acc declare create(" in src
    want = reference(str(path), plan, x)
    assert_close(y_one, want, what="OpenACC infer_one")
    assert_close(y_batch, want, what="OpenACC infer_batch")


@pytest.mark.parametrize("lang", ["c", "fortran"])
def test_convnet_64x64_through_infer_one(tmp_path, lang):
    path = op_models.convnet(tmp_path / "convnet.onnx")
    plan, x, one, batch = run_whole(path, tmp_path / "gen", lang)
    assert plan.path == "whole" and plan.scratch_bytes > WHOLE_THRESHOLD
    want = reference(path, plan, x)
    assert_close(one, want, what=f"{lang} infer_one")
    assert_close(batch, want, what=f"{lang} infer_batch (whole-field path)")


def test_convnet_file_loaded_infer_one(tmp_path):
    path = op_models.convnet(tmp_path / "convnet.onnx", height=16, width=16)
    out = tmp_path / "gen"
    plan, _ = gen.generate(path, str(out), gen.Options(lang="c", embed=False, infer_one=True))
    text = (out / f"{plan.name}.c").read_text()
    assert f"int {plan.name}_infer_one(" in text and "return ROSENNA_STATUS_DEVICE" in text.split("_infer_one(")[-1]


def test_small_plan_keeps_the_per_point_batch_and_has_infer_one(tmp_path):
    from rosenna import zoo

    path = zoo.save("gemm_big", str(tmp_path / "gemm_big.onnx"))
    plan, x, one, batch = run_whole(path, tmp_path / "gen", "c", samples=5)
    assert plan.path == "point"
    want = reference(path, plan, x)
    assert_close(one, want, what="gemm_big infer_one")
    assert_close(batch, want, what="gemm_big infer_batch")
    assert "for (int start = 0; start < n;" in (tmp_path / "gen" / "gemm_big.c").read_text()


def test_per_point_plans_get_infer_one_only_on_request(tmp_path):
    """A per-point MLP's files hold no infer_one (its kernels, buffers and a second copy of the
    weights in the kernel file) unless generate is given --infer-one; a whole-field plan always."""
    from rosenna import zoo
    from rosenna.cli import main

    path = zoo.save("gemm_big", str(tmp_path / "gemm_big.onnx"))
    sizes = {}
    for flag in ([], ["--infer-one"]):
        out = tmp_path / ("with" if flag else "without")
        assert main(["generate", path, "--out", str(out)] + flag) == 0
        texts = {f: (out / f).read_text() for f in ("gemm_big.h", "gemm_big.c", "gemm_big_kernel.cu", "gemm_big_model.F90")}
        assert all(("gemm_big_infer_one" in text) is bool(flag) for text in texts.values()), flag
        sizes[bool(flag)] = sum(text.count("\n") for text in texts.values())
    assert sizes[False] < sizes[True]
    conv = op_models.convnet(tmp_path / "convnet.onnx")
    assert "convnet_infer_one" in gen.generate(conv, str(tmp_path / "conv"), gen.Options(lang="c"))[0].name + \
        (tmp_path / "conv" / "convnet.h").read_text()


def test_recurrent_plans_have_no_infer_one(tmp_path):
    path = op_models.lstm_cell(tmp_path / "cell.onnx")
    plan, _ = gen.generate(path, str(tmp_path / "gen"), gen.Options(lang="both", infer_one=True))
    assert not plan.has_infer_one and plan.path == "point"
    assert "infer_one" not in (tmp_path / "gen" / f"{plan.name}.h").read_text()
    assert "infer_one" not in (tmp_path / "gen" / f"{plan.name}_model.F90").read_text()


def test_info_reports_the_path(tmp_path):
    path = op_models.convnet(tmp_path / "convnet.onnx")
    _, plan = gen.build_plan(path, gen.Options())
    text = describe(plan)
    assert "path: whole-field" in text and f"{WHOLE_THRESHOLD}" in text


def test_whole_field_code_compiles_clean(tmp_path):
    path = op_models.convnet(tmp_path / "convnet.onnx")
    out = tmp_path / "gen"
    plan, _ = gen.generate(path, str(out), gen.Options(lang="both"))
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fopenmp", "-c",
                    f"{plan.name}.c"], cwd=out, check=True)
    subprocess.run(["gfortran", "-std=f2008", "-Wall", "-Werror", "-fopenmp", "-c", f"{plan.name}_model.F90"],
                   cwd=out, check=True)


# -- the CUDA/HIP infer_one's launches, run on the host --------------------------------------------
EMULATE_MAIN = """
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The intermediates of {n}_kernel.cu's batched launches, for every sample at once. */
{buffers}

/* Each launch of {n}_kernel.cu as a function of its global thread index g (over all samples),
   the same lines the kernel holds after its bounds check; run over every g in order, or in
   reverse order. */
{launches}

static void emulate(int count, const {t} *x, {t} *y, int reverse)
{{
{clears}
{calls}
}}

int main(int argc, char **argv)
{{
    int n = atoi(argv[1]);
    {t} *x = malloc(sizeof({t}) * (size_t)n * {NX});
    {t} *y = malloc(sizeof({t}) * (size_t)n * {NY} * 2);
    FILE *f = fopen(argv[2], "rb");
    if (!x || !y || !f || fread(x, sizeof({t}), (size_t)n * {NX}, f) != (size_t)n * {NX}) return 3;
    fclose(f);
    for (int reverse = 0; reverse < 2; ++reverse)
        emulate(n, x, y + (size_t)reverse * n * {NY}, reverse);
    f = fopen(argv[3], "wb");
    fwrite(y, sizeof({t}), (size_t)n * {NY} * 2, f);
    fclose(f);
    (void)argc;
    return 0;
}}
"""


def emulate_launches(model_path, out, samples=3, launches=None, persistent=False, schedule=None, tuning=None, x=None):
    """Run the CUDA/HIP whole-field kernels on the host for ``samples`` samples in one batch, as
    <name>_infer_batch launches them: each phase as a loop over its global thread indices (samples
    x threads per sample), forwards and backwards, into buffers for every sample and the C file's
    weights. The phases are the kernel file's: its launched ones (Schedule.jammed),
    or with ``persistent`` those of its persistent kernel (the strategy's schedule), or the
    given ``launches`` (unfused), or the phases of ``schedule(plan)`` (a function: the plan -> a
    rosenna.strategy.Schedule, its value functions included); ``x``: the samples (else ``samples``
    uniform in [-1, 1)). Returns (plan, x, y forwards, y backwards).
    A launch holding regions that depend on each other gives a wrong answer in at least one order;
    a sample reading another's intermediates, or a value read after its buffer was reused, gives a
    wrong answer."""
    samples = samples if x is None else len(x)
    plan, _ = gen.generate(model_path, str(out), gen.Options(lang="c", embed=True, infer_one=True, tuning=tuning))
    n, t = plan.name, plan.ctype
    kernel_file = (out / f"{n}_kernel.cu").read_text() if launches is None and schedule is None else None
    if launches is not None:
        sched = fusion.Schedule(plan, tuple(launches))
    else:
        field = strategy.decide(plan).field
        sched = schedule(plan) if schedule else field.persistent if persistent else field.launched
        launches = sched.phases if persistent else sched.jammed()
    code = kernel_file or "\n".join("\n".join(whole_field.batch_body(sched, launch)) for launch in launches)
    funcs, calls = [field_fuse.value_functions(sched, code, "static inline")], []
    if kernel_file is not None:  # the kernel's value functions, as the emulation's are
        assert field_fuse.value_functions(sched, kernel_file) in kernel_file
    # phases of the kernel file's form computed in shared-memory tiles (tests/test_conv_smem.py
    # checks those): emulated here through the direct loops they replace
    tiled = field.tiles["persistent" if persistent else "launched"] if kernel_file is not None else {}
    for k, launch in enumerate(launches):
        body = "\n".join(whole_field.batch_body(sched, launch))
        if k in tiled:
            assert f"{n}_smem{k}" in kernel_file  # (a p or c after k where the form's schedule is its own)
        elif kernel_file is not None and persistent:  # the very lines of the kernel's phase k, in its grid-stride loop
            phase = "\n".join(whole_field.batch_body(sched, launch, depth=2))
            assert f"g < count * {launch.threads}l; g += step) {{\n{phase}\n    }}" in kernel_file, \
                f"phase {k} differs from {n}_field's"
        elif kernel_file is not None:  # the very lines of the kernel {n}_phase{k}
            assert f"{n}_phase{k}(const" in kernel_file and \
                f"if (g >= (long)count * {launch.threads}l)\n        return;\n{body}\n" in kernel_file, \
                f"phase {k} differs from {n}_phase{k}'s"
        funcs.append(f"static void launch{k}(const {t} *x, {t} *y, long g)\n{{\n{body}\n"
                     f"    (void)x;\n    (void)y;\n}}")
        total = launch.threads
        calls.append(f"    for (long j = 0; j < count * {total}l; ++j)\n"
                     f"        launch{k}(x, y, reverse ? count * {total}l - 1 - j : j);")
    c_file = (out / f"{n}.c").read_text()  # a whole-field plan's C file has them (its offload batch)
    buffers = "\n".join(f"static {t} {whole_field.buffer_symbol(sched, i)}[{samples} * {size}];"
                         for i, size in enumerate(sched.plan.scratch))
    # NaN in every intermediate before each pass: a value read before it is written shows.
    clears = "\n".join(f"    memset({whole_field.buffer_symbol(sched, i)}, 0xff, sizeof {whole_field.buffer_symbol(sched, i)});"
                       for i in range(len(sched.plan.scratch)))
    text = c_file + EMULATE_MAIN.format(
        n=n, t=t, NX=plan.nx, NY=plan.ny, buffers=buffers, launches="\n\n".join(funcs), calls="\n".join(calls),
        clears=clears)
    (out / "emulate.c").write_text(text)
    subprocess.run(["gcc", "-O1", "-Wall", "-Wno-unknown-pragmas", "-Werror", "-I", str(out), "emulate.c", "-o", "emulate", "-lm"],
                   cwd=out, check=True, capture_output=True)
    if x is None:
        x = np.random.default_rng(1).uniform(-1, 1, (samples, plan.nx))
    x = np.asarray(x, np.float32)
    x.tofile(out / "x.bin")
    subprocess.run([str(out / "emulate"), str(samples), "x.bin", "y.bin"], cwd=out, check=True)
    y = np.fromfile(out / "y.bin", np.float32).reshape(2, samples, plan.ny)
    return plan, x, y[0], y[1]


@pytest.mark.parametrize("name", ["convnet", "gemm_big", "two_in_two_out", "output_aliases"])
def test_cuda_launches_emulated_on_host(tmp_path, name):
    """The fused kernels' code (what each thread of each launch runs) against onnxruntime, with the
    threads of a launch in either order. convnet: one launch per conv of 9 regions; gemm_big: a
    parallel and a serial region in one launch; two_in_two_out: two independent ops in one."""
    import models

    from rosenna import zoo

    if name == "convnet":
        path = op_models.convnet(tmp_path / "convnet.onnx")
    elif name == "gemm_big":
        path = zoo.save(name, str(tmp_path / f"{name}.onnx"))
    else:
        path = str(models.write(name, tmp_path))
    for persistent in (False, True):  # <name>_phase<k> launches, <name>_field's phases
        plan, x, forwards, backwards = emulate_launches(path, tmp_path / f"gen{int(persistent)}", persistent=persistent)
        fused = [launch for launch in parallel.launch_groups(plan) if len(launch.members) > 1]
        assert fused  # each model has a launch of several regions
        want = reference(path, plan, x)
        form = "persistent kernel" if persistent else "launches"
        assert_close(forwards, want, what=f"{name}: {form}, threads in order")
        assert_close(backwards, want, what=f"{name}: {form}, threads in reverse")


def test_emulation_catches_a_wrong_fusion(tmp_path):
    """The check above can fail: every region of the convnet in one launch (conv1 reads conv0's
    output) is right with the threads in order and wrong in reverse."""
    path = op_models.convnet(tmp_path / "convnet.onnx", height=16, width=16)
    _, plan = gen.build_plan(path, gen.Options(lang="c"))
    everything = parallel.Launch([m for launch in parallel.launch_groups(plan) for m in launch.members])
    plan, x, forwards, backwards = emulate_launches(path, tmp_path / "gen", launches=[everything])
    want = reference(path, plan, x)
    assert_close(forwards, want, what="one launch, threads in order")
    with pytest.raises(AssertionError):
        assert_close(backwards, want, what="one launch, threads in reverse")


# -- the OpenMP-offload batched path, its device branch run on the host ---------------------------
OFFLOAD_MAIN = """#include "rosenna_rt.h"
#undef ROSENNA_OMP_DEVICE
#define ROSENNA_OMP_DEVICE() 1 /* take the offload branch: libgomp runs its target regions here */
#include "{n}.c"
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{{
    int n = atoi(argv[1]);
    {t} *x = malloc(sizeof({t}) * (size_t)n * {NX}), *y = malloc(sizeof({t}) * (size_t)n * {NY});
    FILE *f = fopen(argv[2], "rb");
    if (!x || !y || !f || fread(x, sizeof({t}), (size_t)n * {NX}, f) != (size_t)n * {NX}) return 3;
    fclose(f);
    if ({n}_infer_batch(n, x, y, NULL) != ROSENNA_STATUS_OK) return 4;
    f = fopen(argv[3], "wb");
    fwrite(y, sizeof({t}), (size_t)n * {NY}, f);
    fclose(f);
    (void)argc;
    return 0;
}}
"""


def test_offload_batch_runs_each_op_once_for_all_samples(tmp_path):
    """<name>_infer_batch's offload branch for a whole-field plan: one target region per op whose
    parallel loop collapses the samples with the op's output loops (not n x ops regions), each
    sample's intermediates in its slice of <name>_wsb<i>. Run on the host (libgomp executes target
    regions there when no device is configured) for 3 samples against onnxruntime."""
    path = op_models.convnet(tmp_path / "convnet.onnx")  # 64x64: a whole-field plan
    out = tmp_path / "gen"
    plan, _ = gen.generate(path, str(out), gen.Options(lang="c", embed=True))
    assert plan.path == "whole"
    src = (out / f"{plan.name}.c").read_text()
    batch = src[src.index(f"int {plan.name}_infer_batch("):]
    batch = batch[:batch.index("\n}\n")]
    regions = [r for r in parallel.regions(plan.body) if r[0] != "comment"]
    assert batch.count("#pragma omp target teams distribute parallel for") == len(regions)
    assert "for (int s = 0; s < count; ++s) {" in batch and f"{plan.name}_infer_one(" in batch  # host: per sample
    fmt = {"n": plan.name, "t": plan.ctype, "NX": plan.nx, "NY": plan.ny}
    (out / "main.c").write_text(OFFLOAD_MAIN.format(**fmt))
    subprocess.run(["gcc", "-O1", "-fopenmp", "-Wall", "-Werror", "-I", str(out), "main.c", "-o", "main", "-lm"],
                   cwd=out, check=True)
    x = np.random.default_rng(4).uniform(-1, 1, (3, plan.nx)).astype(np.float32)
    x.tofile(out / "x.bin")
    subprocess.run([str(out / "main"), "3", "x.bin", "y.bin"], cwd=out, check=True, env={**os.environ, "OMP_NUM_THREADS": "2"})
    got = np.fromfile(out / "y.bin", np.float32).reshape(3, plan.ny)
    assert_close(got, reference(path, plan, x), what="offload batch, 3 samples")
