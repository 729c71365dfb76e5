"""A model rosenna accepts never yields C that reads or writes out of bounds.

The corpus: the zoo, the shared test models, the operator-test models, one ONNX node test per
lowered op (as given, or with its parameters frozen into initializers, as conformance does), and
hostile or edge-case models (scalar inputs and outputs, 200-character names, size-1 axes,
broadcasting corners, negative indices and steps). Every model rosenna accepts is generated (C,
embedded weights) under a distinct name into one folder, compiled with one driver in ONE gcc call
under ``-fsanitize=address,undefined -fno-sanitize-recover=all`` and run over three points through
``<name>_infer_batch`` with exactly-sized heap buffers, so any stray index aborts the run.

Fortran: a representative subset (every edge-case model, the zoo, and the first accepted model of
each lowered op) is generated as Fortran modules too and built in ONE gfortran call under
``-fcheck=all -fsanitize=address,undefined -finit-real=snan``, then run through ``<name>_infer``
per point and ``<name>_infer_batch`` (the SIMD-block path). Models whose outputs are finite on the
driver's inputs (no op of :data:`NAN_OPS`) also run under ``-ffpe-trap=invalid``, so a read of
scratch never written (a signalling NaN) traps; the others run in a second driver without the trap.
"""

import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import models
import op_models
from rosenna import conformance, ops, zoo
from rosenna.errors import ModelError
from rosenna.generate import Options, build_plan, generate

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

F = TensorProto.FLOAT
POINTS = 3
LONG = "n" * 100 + "'\"*/!&é" + "m" * 93  # 200 characters


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "edge", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name=LONG)
    m.ir_version = 8
    return m


def vi(name, shape):
    return helper.make_tensor_value_info(name, F, shape)


def arr(name, values, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(values, dtype), name)


def hostile():
    """Edge-case models, each small, each a corner of shapes or names."""
    rng = np.random.default_rng(3)
    yield "scalar_io", _model([helper.make_node("Log", ["s"], ["l"]), helper.make_node("Mul", ["l", "k"], ["t"])],
                              [vi("s", [])], [vi("t", [])], [arr("k", 2.5)])
    yield "long_names", _model([helper.make_node("Gemm", [LONG, "W" + LONG], ["h" + LONG], name=LONG, transB=1),
                                helper.make_node("Tanh", ["h" + LONG], [LONG[::-1]], name=LONG[::-1])],
                               [vi(LONG, [1, 3])], [vi(LONG[::-1], [1, 4])], [arr("W" + LONG, rng.random((4, 3)))])
    yield "size_one_axes", _model([helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1, 3]),
                                   helper.make_node("Softmax", ["t"], ["y"], axis=-1)],
                                  [vi("x", [1, 1, 1, 5])], [vi("y", [1, 1, 1, 5])])
    yield "broadcast_corners", _model([helper.make_node("Add", ["x", "a"], ["p"]),
                                       helper.make_node("Mul", ["p", "b"], ["q"]),
                                       helper.make_node("Sub", ["c", "q"], ["y"])],
                                      [vi("x", [1, 3, 1])], [vi("y", [2, 3, 4])],
                                      [arr("a", rng.random((2, 1, 4))), arr("b", 3.0), arr("c", rng.random((4,)))])
    yield "gather_negative", _model([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
                                    [vi("x", [1, 6])], [vi("y", [1, 2, 2])],
                                    [numpy_helper.from_array(np.array([[-1, 0], [-6, 5]], np.int64), "i")])
    yield "slice_backwards", _model([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
                                    [vi("x", [1, 7])], [vi("y", [1, 3])],
                                    [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
                                     (("st", [-1]), ("en", [-8]), ("ax", [1]), ("sp", [-3]))])
    yield "concat_slivers", _model([helper.make_node("Concat", ["x", "c", "x"], ["y"], axis=-1)],
                                   [vi("x", [1, 2, 1])], [vi("y", [1, 2, 3])], [arr("c", rng.random((1, 2, 1)))])
    yield "pool_pads", _model([helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[3, 3], pads=[1, 2, 2, 1],
                                                strides=[2, 3]),
                               helper.make_node("AveragePool", ["m"], ["y"], kernel_shape=[2, 2], pads=[1, 1, 1, 1],
                                                count_include_pad=0)],
                              [vi("x", [1, 2, 5, 7])], [vi("y", ["a", "b", "c", "d"])])
    yield "conv_groups_dilated", _model([helper.make_node("Conv", ["x", "w", "bias"], ["y"], group=2,
                                                          dilations=[2, 1], pads=[2, 0, 1, 1], strides=[1, 2])],
                                        [vi("x", [1, 4, 6, 5])], [vi("y", ["a", "b", "c", "d"])],
                                        [arr("w", rng.random((6, 2, 3, 2))), arr("bias", rng.random(6))])
    yield "reduce_to_scalar", _model([helper.make_node("ReduceMean", ["x"], ["y"], keepdims=0)],
                                     [vi("x", [1, 3, 2])], [vi("y", [])])
    yield "pad_reflect", _model([helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")],
                                [vi("x", [1, 3, 4])], [vi("y", [1, 5, 7])],
                                [numpy_helper.from_array(np.array([0, 1, 2, 0, 1, 1], np.int64), "p")])


def invalid():
    """Models whose shapes contradict each other: onnxruntime refuses them at load, and rosenna
    generated C from them that indexed out of bounds (issue 12); they must be refused."""
    yield "gemm_inner", _model([helper.make_node("Gemm", ["x", "w"], ["y"])], [vi("x", [1, 3])], [vi("y", [1, 4])],
                               [arr("w", np.ones((7, 4)))])
    yield "conv_channels", _model([helper.make_node("Conv", ["x", "w"], ["y"])], [vi("x", [1, 2, 5, 5])],
                                  [vi("y", ["a", "b", "c", "d"])], [arr("w", np.ones((4, 3, 3, 3)))])
    yield "reshape_count", _model([helper.make_node("Reshape", ["x", "s"], ["y"])], [vi("x", [1, 3])],
                                  [vi("y", ["a", "b"])], [numpy_helper.from_array(np.array([2, 5], np.int64), "s")])


def corpus(folder):
    """``[(label, path)]`` of every model in the corpus, written under ``folder``."""
    found = []

    def add(label, proto):
        path = str(folder / f"{len(found):03d}.onnx")
        onnx.save(proto, path)
        found.append((label, path))

    for name in zoo.MODELS:
        add(f"zoo {name}", zoo.MODELS[name]())
    for name, build in sorted(models.BUILDERS.items()):
        add(f"models {name}", build())
    for label, proto in hostile():
        add(f"edge {label}", proto)
    for label, proto in invalid():
        add(f"invalid {label}", proto)
    for label, write in (("convnet", lambda p: op_models.convnet(p, height=6, width=5, channels=3)),
                         ("lstm_cell", op_models.lstm_cell),
                         ("lstm_sequence", lambda p: op_models.lstm_sequence(p, steps=3))):
        path = str(folder / f"{len(found):03d}.onnx")
        write(path)
        found.append((f"op_models {label}", path))
    for op, cases in sorted(conformance.collect(ops.lowered_ops()).items()):
        for case in cases[:2]:
            model = onnx.load(os.path.join(case.path, "model.onnx"))
            add(f"node {case.name}", model)
            if len(model.graph.input) > 1:
                add(f"node {case.name} (frozen)", conformance._frozen(model, conformance._load_data(case)[0]))
    return found


#: Ops that yield NaN on some of the driver's inputs in [-1, 1) by their definition (log of a
#: negative, 0/0, ...): their models run without -ffpe-trap=invalid.
NAN_OPS = {"Log", "Sqrt", "Pow", "Div", "Acos", "Asin", "Acosh", "Atanh", "Mod", "Reciprocal", "Einsum",
           "ReduceLogSum", "ReduceLogSumExp", "LpNormalization", "ReduceL2", "InstanceNormalization",
           "LayerNormalization", "GroupNormalization", "MeanVarianceNormalization", "Selu", "Elu", "Celu",
           "QuantizeLinear", "NegativeLogLikelihoodLoss"}

DRIVER_CASE = """    {{
        {t} *x = filled_{t}((size_t){points} * {nx}), *y = malloc(sizeof({t}) * (size_t){points} * {ny});
        if (!x || !y || {name}_infer_batch({points}, x, y, NULL) != 0) {{ printf("FAILED {name}\\n"); return 1; }}
        free(x);
        free(y);
        printf("ran {name}\\n");
    }}
"""


@pytest.fixture(scope="module")
def sanitized_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("sanitize")
    (root / "models").mkdir()
    out = root / "gen"
    accepted, refused, fortran, seen = [], [], [], set()
    for i, (label, path) in enumerate(corpus(root / "models")):
        options = Options(lang="c", embed=True, name=f"m{i:03d}")
        try:
            _, plan = build_plan(path, options)
        except ModelError as exc:
            refused.append((label, str(exc)))
            continue
        lowered = {planned.op for planned in plan.ops}
        if label.startswith(("edge ", "zoo ")) or lowered - seen:  # the Fortran subset
            options.lang = "both"
            seen |= lowered
        plan, _ = generate(path, str(out), options)
        accepted.append((label, plan))
        if options.lang == "both":
            fortran.append(plan)
    includes = "".join(f'#include "{plan.name}.h"\n' for _, plan in accepted)
    cases = "".join(DRIVER_CASE.format(t=plan.ctype, nx=plan.nx, ny=plan.ny, name=plan.name, points=POINTS)
                    for _, plan in accepted)
    driver = f"""#include <stdio.h>
#include <stdlib.h>
{includes}
static unsigned long long state = 12345;

/* uniform in [-1, 1), a 64-bit LCG: the same inputs on every run */
static double next(void)
{{
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}}

static float *filled_float(size_t n)
{{
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; p && i < n; ++i) p[i] = (float)next();
    return p;
}}

static double *filled_double(size_t n)
{{
    double *p = malloc(sizeof(double) * n);
    for (size_t i = 0; p && i < n; ++i) p[i] = next();
    return p;
}}

int main(void)
{{
{cases}    (void)filled_float;
    (void)filled_double;
    return 0;
}}
"""
    (out / "driver.c").write_text(driver)
    sources = ["driver.c"] + [f"{plan.name}.c" for _, plan in accepted]
    build = subprocess.run(["gcc", "-O0", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                            "-w", "-I.", *sources, "-o", "driver", "-lm"], cwd=out, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    runs = subprocess.run(["./driver"], cwd=out, capture_output=True, text=True, env=env, timeout=300)
    return accepted, refused, runs, (out, fortran)


F_CASE = """  subroutine run_{n}()
    real({n}_rk), allocatable :: x(:, :), y(:, :), yb(:, :)
    integer :: i, k, status
    allocate (x({n}_nx, {points}), y({n}_ny, {points}), yb({n}_ny, {points}))
    do i = 1, {points}
      do k = 1, {n}_nx
        x(k, i) = real(mod((i - 1) * 37 + (k - 1) * 11, 200), {n}_rk) / 100 - 1
      end do
      call {n}_infer(x(:, i), y(:, i))
    end do
    call {n}_infer_batch({points}, x, yb, status)
    if (status /= 0) error stop 'FAILED {n}'
    print '(a)', 'ran {n}'
  end subroutine run_{n}
"""


def fortran_driver(plans):
    uses = "".join(f"  use {p.name}_model, only: {p.name}_infer, {p.name}_infer_batch, {p.name}_nx, "
                   f"{p.name}_ny, {p.name}_rk\n" for p in plans)
    calls = "".join(f"  call run_{p.name}()\n" for p in plans)
    cases = "".join(F_CASE.format(n=p.name, points=POINTS) for p in plans)
    return f"program driver\n{uses}  implicit none\n{calls}contains\n{cases}end program driver\n"


@pytest.fixture(scope="module")
def fortran_run(sanitized_run):
    """The Fortran subset (generated with the C, in the same folder) built in one gfortran call, run as two drivers: with and without
    -ffpe-trap=invalid. Returns ``(plans, {driver: CompletedProcess})``."""
    out, plans = sanitized_run[3]
    trapped = [p for p in plans if not {planned.op for planned in p.ops} & NAN_OPS]
    untrapped = [p for p in plans if p not in trapped]
    (out / "trapped.f90").write_text(fortran_driver(trapped))
    (out / "untrapped.f90").write_text(fortran_driver(untrapped))
    flags = ["-O0", "-g", "-fcheck=all", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
             "-finit-real=snan", "-w"]
    modules = [f"{p.name}_model.F90" for p in plans]
    build = subprocess.run(["gfortran", *flags, "-c", *modules], cwd=out, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    objects = [f"{p.name}_model.o" for p in plans]
    for driver, extra in (("trapped", ["-ffpe-trap=invalid"]), ("untrapped", [])):
        link = subprocess.run(["gfortran", *flags, *extra, f"{driver}.f90", *objects, "-o", driver],
                              cwd=out, capture_output=True, text=True)
        assert link.returncode == 0, link.stderr[-3000:]
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1")
    runs = {d: subprocess.run([f"./{d}"], cwd=out, capture_output=True, text=True, env=env, timeout=300)
            for d in ("trapped", "untrapped")}
    return (trapped, untrapped), runs


def test_corpus_is_broad(sanitized_run):
    accepted, refused, _, _ = sanitized_run
    labels = [label for label, _ in accepted]
    assert sum(label.startswith("node ") for label in labels) >= 40, labels
    assert sum(label.startswith("edge ") for label in labels) == len(list(hostile())), refused
    assert sorted(label for label, _ in refused if label.startswith("invalid ")) == \
        sorted(f"invalid {label}" for label, _ in invalid())
    lowered = {planned.op for _, plan in accepted for planned in plan.ops}
    assert len(lowered & set(ops.lowered_ops())) >= 35, sorted(lowered)


def test_no_out_of_bounds_access(sanitized_run):
    accepted, _, runs, _ = sanitized_run
    report = (runs.stdout + runs.stderr)[-4000:]
    assert runs.returncode == 0, report
    ran = {line.split()[1] for line in runs.stdout.splitlines() if line.startswith("ran ")}
    assert ran == {plan.name for _, plan in accepted}, report
    assert "runtime error" not in runs.stderr and "AddressSanitizer" not in runs.stderr, report


@pytest.mark.skipif(shutil.which("gfortran") is None, reason="needs gfortran")
def test_fortran_no_out_of_bounds_access_or_unset_scratch(fortran_run):
    (trapped, untrapped), runs = fortran_run
    assert len(trapped) + len(untrapped) >= 30 and len(trapped) >= 20, (len(trapped), len(untrapped))
    for driver, plans in (("trapped", trapped), ("untrapped", untrapped)):
        run = runs[driver]
        report = (run.stdout + run.stderr)[-4000:]
        assert run.returncode == 0, (driver, report)
        ran = {line.split()[1] for line in run.stdout.splitlines() if line.startswith("ran ")}
        assert ran == {p.name for p in plans}, (driver, report)
        assert "runtime error" not in run.stderr and "AddressSanitizer" not in run.stderr, report
