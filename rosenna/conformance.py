"""Conformance against the ONNX backend node tests: every case of every op rosenna lowers.

The cases are the ones ``onnx.backend.test`` ships (``data/node/test_*/model.onnx`` with
``test_data_set_0/{input,output}_*.pb``). Wheels of onnx do not always include the data
directory; then the cases are written once from onnx's own case generators into a cache
(``$ROSENNA_ONNX_NODE_DATA``, default ``~/.cache/rosenna/onnx-node-<onnx version>``), under a
file lock so parallel test workers share one copy.

Each case is tried as given. rosenna takes weights, indices, pads and the like only as constants,
and the node tests pass them as graph inputs, so a case refused as given is tried once more with
every graph input but the first turned into an initializer holding the test's own data (the
"frozen" variant). A case then ends as:

- passed: generated, compiled and run in C and Fortran, every output within the ONNX runner's
  tolerance (rtol 1e-3, atol 1e-7) of the expected output; for Cast and CastLike (:data:`EXACT_OPS`)
  equal to it, bit for bit;
- refused: both forms raise :class:`rosenna.errors.ModelError` (UnsupportedOp, or a value type
  rosenna does not compute) with the reason recorded;
- failed: anything else: a wrong number, a crash, a compile error. There must be none.

Compiles are batched: the generated files of many cases are compiled as one translation unit per
language (a file that includes them; every name in them carries the case's own prefix), a few such
units in parallel, then one C and one Fortran driver program run every case. A case whose files
define a macro outside its prefix is compiled on its own, and so is every case of a unit that fails
to compile, so that a compile error is reported for the case that has it.

``rosenna conformance --write docs/conformance.md`` runs everything and writes the table;
``--update --op X --op Y`` reruns only those ops and keeps the file's other rows.

Long on purpose: the node-test loader, the batched build, the driver programs and the report
table share the case records and are read together when a case fails.
"""

import concurrent.futures
import fcntl
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import numpy as np

from rosenna.compare import Tolerance, compare

#: The ONNX backend runner's tolerance for node tests.
RTOL, ATOL = 1e-3, 1e-7
#: Ops whose every result is exactly defined (a rounding to a narrower type, or none): their cases
#: must match the expected outputs bit for bit (NaN where NaN is expected), not within RTOL/ATOL.
EXACT_OPS = ("Cast", "CastLike")
#: The compile flags of every case and driver; ``run(..., optimize=...)`` replaces the -O level
#: (the test suite builds at -O0: the drivers call the per-point ``<name>_infer``, which -O1
#: does not vectorise either, so the numbers are the same and gcc takes half the time).
OPTIMIZE = "-O1"
CFLAGS = ["-fopenmp"]
FFLAGS = ["-fopenmp"]
#: At least this many cases share a translation unit: the compilers' start-up and the system headers
#: are paid once a unit (the ~1,400 one-case compiles of the node tests took twice the CPU).
BATCH_MIN = 16


@dataclass
class Case:
    op: str
    name: str
    path: str


@dataclass
class Outcome:
    case: Case
    status: str  # passed | refused | failed
    detail: str = ""
    variant: str = "as given"
    errors: dict = field(default_factory=dict)


# -- the cases --------------------------------------------------------------------------------------
def _installed_data_dir():
    import onnx.backend.test

    path = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "node")
    return path if os.path.isdir(path) and os.listdir(path) else None


def cache_dir():
    import onnx

    return os.environ.get("ROSENNA_ONNX_NODE_DATA") or os.path.join(
        os.path.expanduser("~"), ".cache", "rosenna", f"onnx-node-{onnx.__version__}")


def _write_cases(target, wanted=None):
    """Write the node cases whose single node is one of ``wanted`` ops (every op of the default
    domain when None) into ``target``."""
    import warnings

    from onnx import numpy_helper
    from onnx.backend.test.case import node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases()
    for case in cases:
        if case.kind != "node" or len(case.model.graph.node) != 1:
            continue
        if (wanted is not None and case.model.graph.node[0].op_type not in wanted) or \
                case.model.graph.node[0].domain not in ("", "ai.onnx"):
            continue
        out = os.path.join(target, case.name)
        data = os.path.join(out, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        with open(os.path.join(out, "model.onnx"), "wb") as fh:
            fh.write(case.model.SerializeToString())
        inputs, outputs = case.data_sets[0]
        try:
            for kind, arrays, infos in (("input", inputs, case.model.graph.input),
                                        ("output", outputs, case.model.graph.output)):
                for j, (array, info) in enumerate(zip(arrays, infos)):
                    tensor = array if hasattr(array, "SerializeToString") and not isinstance(array, np.ndarray) \
                        else numpy_helper.from_array(np.asarray(array), info.name)
                    with open(os.path.join(data, f"{kind}_{j}.pb"), "wb") as fh:
                        fh.write(tensor.SerializeToString())
        except (ValueError, TypeError, NotImplementedError):  # sequences and optionals: not tensors, not rosenna's inputs
            shutil.rmtree(out)


#: What the cache holds: every single-node case of the default domain, so that adding an op to the
#: registry (or two checkouts with different registries sharing the cache) never rewrites it.
CACHE_KEY = "every default-domain single-node case, v2"


def data_dir(wanted=None):
    """The directory of node cases (installed, or generated once into the cache)."""
    installed = _installed_data_dir()
    if installed:
        return installed
    target = cache_dir()
    done = os.path.join(target, ".complete")
    if os.path.exists(done) and open(done).read() == CACHE_KEY:
        return target
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(done) and open(done).read() == CACHE_KEY:
            return target
        staging = tempfile.mkdtemp(prefix=".staging-", dir=os.path.dirname(target))
        _write_cases(staging)
        with open(os.path.join(staging, ".complete"), "w") as fh:
            fh.write(CACHE_KEY)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
    return target


def collect(ops=None):
    """``{op: [Case]}`` for the ops rosenna lowers (or only ``ops``)."""
    import onnx

    from rosenna import ops as registry

    wanted = list(registry.lowered_ops())
    root = data_dir()
    found = {}
    for path in sorted(glob.glob(os.path.join(root, "test_*", "model.onnx"))):
        model = onnx.load(path, load_external_data=False)
        if len(model.graph.node) != 1:
            continue
        op = model.graph.node[0].op_type
        if op in wanted and (ops is None or op in ops):
            found.setdefault(op, []).append(Case(op, os.path.basename(os.path.dirname(path)), os.path.dirname(path)))
    return found


# -- one case -----------------------------------------------------------------------------------------
def _load_data(case):
    import onnx
    from onnx import numpy_helper

    def read(kind):
        arrays = []
        for j in range(len(glob.glob(os.path.join(case.path, "test_data_set_0", f"{kind}_*.pb")))):
            tensor = onnx.TensorProto()
            with open(os.path.join(case.path, "test_data_set_0", f"{kind}_{j}.pb"), "rb") as fh:
                tensor.ParseFromString(fh.read())
            arrays.append(numpy_helper.to_array(tensor))
        return arrays

    return read("input"), read("output")


def _frozen(model, inputs):
    """The model with every graph input but the first turned into an initializer."""
    import onnx
    from onnx import numpy_helper

    frozen = onnx.ModelProto()
    frozen.CopyFrom(model)
    keep = [frozen.graph.input[0]]
    for info, array in zip(list(frozen.graph.input)[1:], inputs[1:]):
        frozen.graph.initializer.append(numpy_helper.from_array(array, info.name))
    del frozen.graph.input[:]
    frozen.graph.input.extend(keep)
    return frozen


def _prepare(case, index, work, profile):
    """Generate the case's code into ``work`` with the toolchain ``profile``; return (Outcome or
    None, job) where a job is what the drivers need: name, plan, x values, expected outputs."""
    import onnx

    from rosenna import generate as gen
    from rosenna.errors import ModelError

    model = onnx.load(os.path.join(case.path, "model.onnx"))
    inputs, outputs = _load_data(case)
    name = f"k{index:04d}"
    reasons = []
    for variant, proto, feed in (("as given", model, inputs), ("frozen", None, inputs[:1])):
        if variant == "frozen":
            if len(model.graph.input) < 2:
                break
            proto = _frozen(model, inputs)
        path = os.path.join(work, f"{name}.onnx")
        onnx.save(proto, path)
        try:
            options = gen.Options(lang="both", name=name, embed=True, toolchain=profile)
            plan, _ = gen.generate(path, work, options)
        except ModelError as exc:
            lines = str(exc).splitlines()
            reasons.append("; ".join(line.strip() for line in lines[1:-1]) if len(lines) > 2 else lines[0])
            continue
        except Exception as exc:  # a crash of the generator is a failure, never a refusal
            return Outcome(case, "failed", f"generate crashed: {type(exc).__name__}: {exc}", variant), None
        return None, {"name": name, "plan": plan, "case": case, "variant": variant,
                      "x": feed, "want": outputs}
    reasons = [re.sub(r"^\S+\.onnx: ", "", r) for r in reasons] or ["refused"]
    detail = f"frozen: {reasons[-1]}" if len(reasons) > 1 else reasons[0]
    return Outcome(case, "refused", detail), None


def _write_x(job, work):
    plan = job["plan"]
    dtype = np.float64 if plan.precision == "double" else np.float32
    x = np.zeros(plan.nx, dtype)
    for s, array in zip(plan.inputs, job["x"]):
        if array.size != s.size:
            raise ValueError(f"input {s.name}: {array.size} values for a slice of {s.size}")
        x[s.offset:s.offset + s.size] = np.asarray(array, dtype).reshape(-1)
    x.tofile(os.path.join(work, f"{job['name']}.x"))


def _c_driver(jobs):
    lines = ["#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>"]
    lines += [f'#include "{j["name"]}.h"' for j in jobs]
    lines.append("")
    for j in jobs:
        n, plan = j["name"], j["plan"]
        t = plan.ctype
        lines.append(f"""static int run_{n}(void)
{{
    {t} *x = calloc({plan.nx} + 1, sizeof({t})), *y = calloc({plan.ny} + 1, sizeof({t}));
    FILE *f = fopen("{n}.x", "rb");
    if (!x || !y || !f || fread(x, sizeof({t}), {plan.nx}, f) != {plan.nx}) return 1;
    fclose(f);
    {n}_infer(x, y);
    f = fopen("{n}.yc", "wb");
    if (!f || fwrite(y, sizeof({t}), {plan.ny}, f) != {plan.ny}) return 1;
    fclose(f);
    free(x);
    free(y);
    return 0;
}}
""")
    lines.append("int main(void)\n{\n    int bad = 0;")
    lines += [f"    bad |= run_{j['name']}();" for j in jobs]
    lines.append("    return bad;\n}\n")
    return "\n".join(lines)


def _f_driver(jobs):
    subs = []
    for j in jobs:
        n = j["name"]
        subs.append(f"""  subroutine run_{n}()
    use {n}_model, only: {n}_infer, {n}_rk, {n}_nx, {n}_ny
    real({n}_rk), allocatable :: x(:), y(:)
    integer :: unit
    allocate (x({n}_nx), y({n}_ny))
    open (newunit=unit, file='{n}.x', access='stream', form='unformatted', status='old', action='read')
    read (unit) x
    close (unit)
    call {n}_infer(x, y)
    open (newunit=unit, file='{n}.yf', access='stream', form='unformatted', status='replace', action='write')
    write (unit) y
    close (unit)
  end subroutine run_{n}
""")
    calls = "\n".join(f"  call run_{j['name']}()" for j in jobs)
    return f"program conformance\n  implicit none\n{calls}\ncontains\n{''.join(subs)}end program conformance\n"


def _compile(cmd, work):
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    return proc.returncode, (proc.stdout + proc.stderr)[-2000:]


_MACRO = re.compile(r"^[ \t]*#[ \t]*(?:define|undef)[ \t]+(\w+)", re.M)


def _sources(name, lang):
    return [f"{name}.c", f"{name}.h"] if lang == "c" else [f"{name}_model.F90"]


def _own_macros_only(name, lang, work):
    """Whether the case's files define (or undefine) only macros under its own name: the one thing
    that could pass silently from one case to the next in a shared translation unit. Any other clash
    of names there is a compile error, and the unit's cases are then compiled alone."""
    for source in _sources(name, lang):
        with open(os.path.join(work, source), encoding="utf-8") as fh:
            macros = _MACRO.findall(fh.read())
        if any(not (m.startswith(name + "_") or m.upper().startswith(name.upper() + "_")) for m in macros):
            return False
    return True


def _units(names, lang, work):
    """The translation units of one language: ``(object, [case names], command-line source)``, the
    shared ones a file that includes each case's source, the others one case's file."""
    shared = [n for n in names if _own_macros_only(n, lang, work)]
    count = max(1, min(os.cpu_count() or 2, len(shared) // BATCH_MIN))
    units = []
    for k in range(count):
        part = shared[k::count]
        if len(part) < 2:
            units += [(f"{n}_{lang[0]}.o", [n], _sources(n, lang)[0]) for n in part]
            continue
        source = f"unit{k}_{lang[0]}." + ("c" if lang == "c" else "F90")
        with open(os.path.join(work, source), "w", encoding="utf-8") as fh:
            fh.write("".join(f'#include "{_sources(n, lang)[0]}"\n' for n in part))
        units.append((f"unit{k}_{lang[0]}.o", part, source))
    return units + [(f"{n}_{lang[0]}.o", [n], _sources(n, lang)[0]) for n in names if n not in shared]


def _compile_units(jobs, work, langs, cc, fc, cflags, fflags):
    """Compile every case: ``{lang: {name: (object, rc, log)}}``. A shared unit that fails is
    compiled again case by case, so that the error is the case's own."""
    command = {"c": lambda src, obj: [cc, *cflags, "-c", src, "-o", obj],
               "fortran": lambda src, obj: [fc, *fflags, "-c", src, "-o", obj]}
    result = {lang: {} for lang in langs}
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        names = [j["name"] for j in jobs]
        pending = [(lang, unit, pool.submit(_compile, command[lang](unit[2], unit[0]), work))
                   for lang in langs for unit in _units(names, lang, work)]
        retry = []
        for lang, (obj, part, _), future in pending:
            rc, log = future.result()
            if rc != 0 and len(part) > 1:
                retry += [(lang, n, pool.submit(_compile, command[lang](_sources(n, lang)[0], f"{n}_{lang[0]}.o"), work))
                          for n in part]
                continue
            for n in part:
                result[lang][n] = (obj, rc, log)
        for lang, n, future in retry:
            result[lang][n] = (f"{n}_{lang[0]}.o", *future.result())
    return result


def _build_and_run(jobs, work, langs, outcomes_by_name, optimize=OPTIMIZE):
    cc, fc = os.environ.get("CC", "gcc"), os.environ.get("FC", "gfortran")
    cflags, fflags = [optimize, *CFLAGS], [optimize, *FFLAGS]
    compiled = _compile_units(jobs, work, langs, cc, fc, cflags, fflags)
    built = {lang: [] for lang in langs}
    for j in jobs:
        for lang in langs:
            _, rc, log = compiled[lang][j["name"]]
            if rc == 0:
                built[lang].append(j)
            else:
                outcomes_by_name[j["name"]].errors[lang] = f"compile failed: {log.strip().splitlines()[-1:]}"
    for lang in langs:
        ok = built[lang]
        if not ok:
            continue
        objects = list(dict.fromkeys(compiled[lang][j["name"]][0] for j in ok))
        if lang == "c":
            with open(os.path.join(work, "driver_c.c"), "w") as fh:
                fh.write(_c_driver(ok))
            cmd = [cc, *cflags, "driver_c.c", *objects, "-o", "driver_c", "-lm"]
        else:
            with open(os.path.join(work, "driver_f.f90"), "w") as fh:
                fh.write(_f_driver(ok))
            cmd = [fc, *fflags, "driver_f.f90", *objects, "-o", "driver_f"]
        rc, log = _compile(cmd, work)
        if rc != 0:
            for j in ok:
                outcomes_by_name[j["name"]].errors[lang] = f"driver build failed: {log[-300:]}"
            continue
        proc = subprocess.run([os.path.join(work, f"driver_{'c' if lang == 'c' else 'f'}")], cwd=work,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            for j in ok:
                outcomes_by_name[j["name"]].errors.setdefault(
                    lang, f"driver exited {proc.returncode}: {(proc.stdout + proc.stderr)[-300:]}")


def _compare(job, work, lang, rtol=RTOL, atol=ATOL):
    plan = job["plan"]
    dtype = np.float64 if plan.precision == "double" else np.float32
    path = os.path.join(work, f"{job['name']}.y{'c' if lang == 'c' else 'f'}")
    if not os.path.exists(path):
        return "no output written"
    y = np.fromfile(path, dtype=dtype)
    for s, want in zip(plan.outputs, job["want"]):
        want = np.asarray(want)
        cmp = compare(y[s.offset:s.offset + s.size], want, output=s.name, tolerance=Tolerance(rtol, atol))
        if not cmp.passed:
            return cmp.message(want_label="expected")
    return ""


def run(cases, work, langs=("c", "fortran"), rtol=RTOL, atol=ATOL, optimize=OPTIMIZE):
    """Run ``cases`` (a list of :class:`Case`) in the directory ``work``; return their Outcomes.
    ``optimize``: the compilers' -O flag for the cases and the drivers."""
    os.makedirs(work, exist_ok=True)
    from rosenna.generate import Options

    outcomes, jobs = [], []
    profile = Options().profile()  # the default one, resolved once for all the cases
    for index, case in enumerate(cases):
        outcome, job = _prepare(case, index, work, profile)
        if job is not None:
            try:
                _write_x(job, work)
            except ValueError as exc:
                outcome, job = Outcome(case, "failed", str(exc), job["variant"]), None
        if job is not None:
            outcome = Outcome(case, "passed", "", job["variant"])
            jobs.append(job)
            job["outcome"] = outcome
        outcomes.append(outcome)
    by_name = {j["name"]: j["outcome"] for j in jobs}
    if jobs:
        _build_and_run(jobs, work, langs, by_name, optimize)
    for j in jobs:
        outcome = j["outcome"]
        for lang in langs:
            if lang not in outcome.errors:
                exact = j["case"].op in EXACT_OPS
                problem = _compare(j, work, lang, 0.0 if exact else rtol, 0.0 if exact else atol)
                if problem:
                    outcome.errors[lang] = problem
        if outcome.errors:
            outcome.status = "failed"
            outcome.detail = "; ".join(f"{lang}: {msg}" for lang, msg in sorted(outcome.errors.items()))
    return outcomes


# -- the report -------------------------------------------------------------------------------------
def _summaries(results):
    """``{op: (row, reason_lines)}``: the table row ``(cases, passed, frozen, refused, failed)`` and
    the op's section of reasons (empty when every case passed)."""
    out = {}
    for op, outs in results.items():
        passed = [o for o in outs if o.status == "passed"]
        row = (len(outs), len(passed), sum(1 for o in passed if o.variant == "frozen"),
               sum(o.status == "refused" for o in outs), sum(o.status == "failed" for o in outs))
        groups = {}
        for o in sorted((o for o in outs if o.status != "passed"), key=lambda o: o.case.name):
            groups.setdefault((o.status, _one_line(o.detail)), []).append(o.case.name)
        reasons = [f"- {status}: {', '.join(f'`{n}`' for n in names)}: {detail}"
                   for (status, detail), names in groups.items()]
        out[op] = (row, reasons)
    return out


_ROW = re.compile(r"^\| (\w+) \| (\d+) \| (\d+) \((\d+)\) \| (\d+) \| (\d+) \|$")


def parse_markdown(text):
    """The ``{op: (row, reason_lines)}`` of a report written by :func:`markdown` (for --update)."""
    out, section = {}, None
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            out[match.group(1)] = (tuple(int(g) for g in match.groups()[1:]), [])
        elif line.startswith("### "):
            section = line[4:].strip()
        elif section in out and line.startswith("- "):
            out[section][1].append(line)
    return out


def markdown(results, previous=None):
    """docs/conformance.md from ``{op: [Outcome]}``, and from ``previous`` (parse_markdown's form)
    for the ops not run this time."""
    import onnx

    summaries = dict(previous or {})
    summaries.update(_summaries(results))
    rows = {op: row for op, (row, _) in summaries.items()}
    total = {k: sum(row[i] for row in rows.values()) for k, i in (("passed", 1), ("refused", 3), ("failed", 4))}
    lines = [
        "# Conformance: the ONNX backend node tests",
        "",
        "Generated by `rosenna conformance --write docs/conformance.md` "
        f"(onnx {onnx.__version__}); `tests/test_conformance.py` runs the same cases.",
        "",
        "Every node test case of every op rosenna lowers is generated, compiled and run in C and in",
        "Fortran, and compared with the expected outputs at the ONNX runner's tolerance",
        f"(rtol {RTOL}, atol {ATOL}); {' and '.join(EXACT_OPS)}, whose results are exactly defined, bit for bit.",
        "Outputs of narrow types (float16, bfloat16, float8, int4, ...) are held in the working float type as",
        "the value the narrow type would hold (README, Operators). rosenna takes conv weights, pads, indices",
        "and the like only as constants, while the node tests feed them as graph inputs; a case refused as",
        "given is tried again with every graph input but the first frozen into an initializer holding the",
        "test's data (\"frozen\" below). Refused means rosenna raised its clear unsupported error for both forms;",
        "failed (a wrong number, a crash, a compile error) must never happen.",
        "",
        f"Totals: {sum(total.values())} cases, {total['passed']} passed, {total['refused']} refused, "
        f"{total['failed']} failed.",
        "",
        "| op | cases | passed (frozen) | refused | failed |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for op in sorted(rows):
        cases, passed, frozen, refused, failed = rows[op]
        lines.append(f"| {op} | {cases} | {passed} ({frozen}) | {refused} | {failed} |")
    lines += ["", "## Refused and failed cases, with the reason", "",
              "\"frozen:\" gives the reason of the frozen form when the case was refused as given too.", ""]
    for op in sorted(summaries):
        reasons = summaries[op][1]
        if reasons:
            lines += [f"### {op}", ""] + reasons + [""]
    return "\n".join(lines).rstrip() + "\n"


def _one_line(text):
    text = " ".join(text.split())
    for prefix in ("the model uses 1 unsupported construct(s): ",):
        text = text.replace(prefix, "")
    return text.replace("|", "/")


def main(argv=None):
    """``python -m rosenna.conformance ARGS``: the same as ``rosenna conformance ARGS``."""
    from rosenna.cli import main as cli_main

    return cli_main(["conformance"] + list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
