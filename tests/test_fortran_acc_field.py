"""The Fortran module's whole-field offload branches (rosenna/emit/whole_fortran.py): the OpenACC
one, and the OpenMP one rendered from the same code by the other table entry. ``<name>_infer_one``
and the batched ``<name>_infer_batch`` (one region per op over the samples) run through the
compilers' host fallback with the branch forced (``-DROSENNA_ACC_DEVICE=.true.``,
``-DROSENNA_OMP_DEVICE=.true.``) and are compared with onnxruntime under rosenna.compare's rule,
on the tests' conv net and on a residual conv net with odd names (the longest model name, tensors
named like the routines' own variables, opset 11, double precision, chunks of two samples). A
build whose OpenACC regions are wrong (one sample offset dropped, one region dropped) must fail
the same comparison. All builds compile in one batch."""

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import op_models
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_infer_one import F_MAIN, reference

from rosenna import generate as gen
from rosenna.compare import compare
from rosenna.emit.fortran_wrap import wrap
from rosenna.emit.whole import batch_samples
from rosenna.generate import MAX_NAME
from rosenna.strategy import Tuning

#: The forced builds: (flags) per offload model.
BUILDS = {"acc": ["-fopenacc", "-DROSENNA_ACC_DEVICE=.true."], "omp": ["-fopenmp", "-DROSENNA_OMP_DEVICE=.true."]}
ODD_NAME = ("Field_Net_2d_Odd_Names_" + "x9" * MAX_NAME)[:MAX_NAME]


def odd_convnet(path, size=24, channels=6, seed=3):
    """count[1, 3, S, S] -> Conv+Relu -> Conv, + the Relu (residual) -> Sigmoid -> 1x1 Conv -> start,
    its tensors and nodes named like the generated routines' variables (count, s, x, y, acc, wsb0)."""
    rng = np.random.default_rng(seed)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)

    inits = [weight("wsb0", channels, 3, 3, 3), weight("s", channels), weight("acc", channels, channels, 3, 3),
             weight("ws0", 2, channels, 1, 1)]
    nodes = [helper.make_node("Conv", ["count", "wsb0", "s"], ["y"], name="x", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["y"], ["x"], name="s"),
             helper.make_node("Conv", ["x", "acc"], ["i0"], name="count", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["i0", "x"], ["present"], name="acc serial"),
             helper.make_node("Sigmoid", ["present"], ["rk"], name="start"),
             helper.make_node("Conv", ["rk", "ws0"], ["start"], name="end do")]
    f = TensorProto.FLOAT
    return op_models._save(nodes, [helper.make_tensor_value_info("count", f, [1, 3, size, size])],
                           [helper.make_tensor_value_info("start", f, [1, 2, size, size])], inits, path, opset=11,
                           name="odd field net")


def _sections(text, start, end):
    """``text`` from the first ``start`` to the following ``end`` (inclusive)."""
    a = text.index(start)
    return a, text.index(end, a) + len(end)


def break_acc(text, plan):
    """The module with its OpenACC regions wrong: the batch's x subscripts lose their sample
    offset, and infer_one's OpenACC branch loses its first region."""
    a, b = _sections(text, "subroutine samples_acc(", "end subroutine samples_acc")
    routine = text[a:b].replace(f" + {plan.nx}*s + ", " + ")
    assert routine != text[a:b]
    text = text[:a] + routine + text[b:]
    a, _ = _sections(text, f"subroutine {plan.name}_infer_one(", f"end subroutine {plan.name}_infer_one")
    first = text.index("!$acc parallel loop", a)
    region_end = text.index("!$acc end parallel loop", first) + len("!$acc end parallel loop")
    return text[:first] + "! (region removed)" + text[region_end:]


def _compile(out, flags, source, exe):
    result = subprocess.run(["gfortran", "-O0", "-std=f2008", "-Wall", "-Werror", *flags, "-J", f"mod_{exe}", source, "main.f90", "-o", exe],
                            cwd=out, capture_output=True, text=True)
    assert result.returncode == 0, f"{exe}: {result.stderr[-3000:]}"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Per model: plan, module text, x, onnxruntime's y and each build's (infer_one, batch) outputs."""
    root = tmp_path_factory.mktemp("fortran_acc_field")
    models = {}
    conv = op_models.convnet(root / "convnet.onnx", height=32, width=32)
    odd = odd_convnet(root / "odd.onnx")
    for key, path, options, samples in (
            ("convnet", conv, gen.Options(lang="fortran"), 3),
            ("odd", odd, gen.Options(lang="fortran", name=ODD_NAME, precision="double",  # chunks of 2 + 2 + 1 samples
                                     tuning=Tuning().replace(whole_batch_samples=2)), 5)):
        out = root / key
        plan, _ = gen.generate(path, str(out), options)
        n = plan.name
        dtype = np.float64 if plan.precision == "double" else np.float32
        x = np.random.default_rng(7).uniform(-1, 1, (samples, plan.nx)).astype(dtype)
        x.tofile(out / "x.bin")
        (out / "main.f90").write_text("\n".join(part for line in F_MAIN.format(n=n).split("\n") for part in wrap(line)))
        text = (out / f"{n}_model.F90").read_text()
        (out / "broken_model.F90").write_text(break_acc(text, plan))
        for exe in (*BUILDS, "broken"):
            (out / f"mod_{exe}").mkdir()
        models[key] = dict(plan=plan, text=text, x=x, out=out, dtype=dtype, samples=samples,
                           want=reference(path, plan, x.astype(np.float32)))
    jobs = [(m["out"], BUILDS[b], f"{m['plan'].name}_model.F90", b) for m in models.values() for b in BUILDS]
    jobs += [(m["out"], BUILDS["acc"], "broken_model.F90", "broken") for m in models.values()]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda job: _compile(*job), jobs))
    for m in models.values():
        m["runs"] = {}
        for exe in (*BUILDS, "broken"):
            subprocess.run([f"./{exe}", str(m["samples"]), "x.bin", f"{exe}.bin"], cwd=m["out"], check=True,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
            y = np.fromfile(m["out"] / f"{exe}.bin", m["dtype"]).reshape(2, m["samples"], m["plan"].ny)
            m["runs"][exe] = (y[0], y[1])
    return models


@pytest.mark.parametrize("model", ["convnet", "odd"])
@pytest.mark.parametrize("build", list(BUILDS))
def test_forced_branch_matches_onnxruntime(built, model, build):
    m = built[model]
    assert m["plan"].path == "whole"
    for what, got in zip(("infer_one", "infer_batch"), m["runs"][build]):
        result = compare(got.astype(np.float64), m["want"], "float32", output=f"{model} {build} {what}")
        assert result.passed, result.message()


@pytest.mark.parametrize("model", ["convnet", "odd"])
def test_wrong_openacc_regions_fail_the_comparison(built, model):
    m = built[model]
    for what, got in zip(("infer_one", "infer_batch"), m["runs"]["broken"]):
        assert not compare(got.astype(np.float64), m["want"], "float32").passed, what


@pytest.mark.parametrize("model", ["convnet", "odd"])
def test_openacc_regions_and_data(built, model):
    """One compute region per op region in infer_one's branch and in the batch's routine (each over
    the samples, x and y present, nothing copied or waited for inside), the intermediates declared
    on the device, the branch guarded as in C."""
    m = built[model]
    plan, text = m["plan"], m["text"]
    from rosenna.parallel import regions

    count = sum(kind != "comment" for kind, _, _ in regions(plan.body))
    a, b = _sections(text, "subroutine samples_acc(", "end subroutine samples_acc")
    routine = text[a:b]
    assert routine.count("!$acc parallel loop gang vector") == count
    assert routine.count("do s = 0, count - 1") == count
    for word in ("copy", "update", "wait", "create", "enter data", "allocate"):
        assert word not in routine.replace("count", "").replace("acc_", ""), word
    a, b = _sections(text, f"subroutine {plan.name}_infer_one(", f"end subroutine {plan.name}_infer_one")
    one = text[a:b]
    acc = one[one.index("#if defined(_OPENACC) && !defined(_OPENMP)"):]
    acc = acc[:acc.index("#endif")]
    assert acc.count("!$acc parallel loop gang vector") + acc.count("!$acc serial") == count
    assert "!$acc data copyin(x) copyout(y)" in acc and "if (ROSENNA_ACC_DEVICE) then" in acc
    samples = 2 if model == "odd" else batch_samples(plan)
    for i, size in enumerate(plan.scratch):
        assert f"real(rk) :: wsb{i}({samples * size})\n  !$omp declare target(wsb{i})\n  !$acc declare create(wsb{i})" in text
    assert max(len(line) for line in text.splitlines()) <= 132


def test_gate_runs_the_fortran_batch_rows_of_a_whole_field_plan(tmp_path):
    """The gate's Fortran OpenACC (and OpenMP) batch rows: for a whole-field plan the harness
    (per_point.F90 whose step calls <name>_infer_batch on arrays entered with the model's data
    directives) builds against the module archive made with -fopenacc, runs (host fallback here,
    an H200 in `bash bench/h200.sh whole-field`) and matches onnxruntime; its launch allowance is
    every region once per chunk of samples per step."""
    from rosenna import gate, parallel
    from rosenna.gate import config, runner
    from rosenna.generate import Options, build_plan

    path = op_models.convnet(tmp_path / "cnn.onnx", height=24, width=24)
    out = tmp_path / "gate"
    report = gate.run(gate.Config(model=str(path), host_fallback=True, points=3, cflags="-O0", fflags="-O0",
                                  out=str(out)))
    rows = {(r["harness"], r["weights"]): r for r in report["rows"]}
    for weights in ("embedded", "file-loaded"):
        for name in ("batch-fortran-omp", "batch-fortran-acc"):
            assert rows[(name, weights)]["status"] == "PASS", rows[(name, weights)]
        assert rows[("fortran-acc", weights)]["status"] == "SKIP"
    assert report["pass"]
    source = (out / "embedded" / "h3d_batch_fortran_acc.F90").read_text()
    assert "!$acc enter data copyin(x) create(y)" in source and "call cnn_infer_batch(n, x, y, status)" in source
    assert "-fopenacc" in (out / "gate-report.md").read_text()
    _, plan = build_plan(str(path), Options(lang="c"))
    regions = sum(kind != "comment" for kind, _, _ in parallel.regions(plan.body))
    device = config.resolved(config.Config(model="x", backend="cuda", points=3 * batch_samples(plan) - 1,
                                           devcc="nvcc", devflags="", cflags="", fflags=""))
    assert runner.launch_allowance("batch-fortran-acc", plan, device) == runner.LAUNCH_ARG_BLOCKS * (regions * 3 + 1) * runner.STEPS


@pytest.mark.parametrize("flags", [[], ["-fopenmp"], ["-fopenacc"]], ids=["no-offload", "openmp", "openacc"])
def test_module_compiles_clean_in_every_build(built, flags, tmp_path):
    """Each build compiles the branches it has and declares only what they use: no warning in
    Fortran 2008 with -Wall, with OpenMP, OpenACC or neither."""
    m = built["odd"]
    source = m["out"] / f"{m['plan'].name}_model.F90"
    result = subprocess.run(["gfortran", "-std=f2008", "-Wall", "-Werror", *flags, "-fsyntax-only", "-J", str(tmp_path),
                             str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
