"""The host batch path (<name>_infer_batch without a device, C and Fortran): SIMD blocks of points
against onnxruntime and the per-point routine, for MLPs with every activation, float64, a count of
points that leaves a partial block, and a reduction the outer-loop form must not take; and that GCC
vectorises each dot product over the points with the accumulators in registers (the form that
bench/host_batch.py measures)."""

import re
import subprocess

import numpy as np
import onnxruntime as ort
import pytest
from mlp_reference import ALL_ACTIVATIONS, activation_mlp

from rosenna import ops, zoo
from rosenna.compare import compare
from rosenna.strategy import Tuning
from rosenna.strategy.point import host_block
from rosenna.generate import Options, generate

pytestmark = pytest.mark.skipif(subprocess.run(["which", "gfortran"], capture_output=True).returncode != 0,
                                reason="needs gcc and gfortran")

POINTS = 77  # two full blocks of 32 and a partial one

C_DRIVER = r"""#include <stdio.h>
#include <stdlib.h>
#include "{n}.h"

int main(int argc, char **argv)
{{
    int n = atoi(argv[1]);
    {t} *x = malloc(sizeof({t}) * (size_t)n * {NX}), *y = malloc(sizeof({t}) * (size_t)n * {NY} * 2);
    FILE *f = fopen(argv[2], "rb");
    if (!x || !y || !f || fread(x, sizeof({t}), (size_t)n * {NX}, f) != (size_t)n * {NX}) return 3;
    fclose(f);
    if ({n}_infer_batch(n, x, y, NULL) != 0) return 4;
    for (int i = 0; i < n; ++i)
        {n}_infer(x + (size_t)i * {NX}, y + (size_t)(n + i) * {NY});
    fwrite(y, sizeof({t}), (size_t)n * {NY} * 2, stdout);
    (void)argc;
    return 0;
}}
"""

F_DRIVER = """program main
  use, intrinsic :: iso_fortran_env, only: output_unit
  use {n}_model
  implicit none
  integer :: n, unit, status
  character(len=4096) :: arg
  real({n}_rk), allocatable :: x(:, :), y(:, :)
  call get_command_argument(1, arg)
  read (arg, *) n
  allocate (x({n}_nx, n), y({n}_ny, n))
  call get_command_argument(2, arg)
  open (newunit=unit, file=trim(arg), access='stream', form='unformatted', status='old', action='read')
  read (unit) x
  close (unit)
  call {n}_infer_batch(n, x, y, status)
  if (status /= 0) error stop 4
  call get_command_argument(3, arg)
  open (newunit=unit, file=trim(arg), access='stream', form='unformatted', status='replace', action='write')
  write (unit) y
  close (unit)
end program main
"""

FLAGS = ["-O3", "-march=native", "-fopenmp"]


def _models(tmp):
    """name -> (model path, precision, input range)."""
    acts = [a for a in ALL_ACTIVATIONS if ops.get(a[0]) or a[0] in ("SiLU", "Mish", "HardSwishPattern", "GeluErf")]
    widths = [3] + [9 + 2 * (i % 4) for i in range(len(acts))] + [5]
    models = {
        "gemm_big": (zoo.save("gemm_big", str(tmp / "gemm_big.onnx")), "single", 1.0),
        "acts": (activation_mlp(tmp / "acts.onnx", widths, list(acts) + [None]), "single", 3.0),
        "acts64": (activation_mlp(tmp / "acts64.onnx", [4, 24, 17, 3], [("Tanh", {}), ("SiLU", {}), None],
                                  dtype=np.float64, name="acts64"), "double", 3.0),
    }
    import onnx
    from onnx import helper

    m = onnx.load(models["gemm_big"][0])  # a Softmax tail: reductions with selects and exp
    m.graph.node[-1].CopyFrom(helper.make_node("Softmax", ["act4_out"], ["output"], name="out", axis=1))
    last = m.graph.node[-3]  # fc4 -> 3 outputs, so that the Softmax has something to do
    w = next(t for t in m.graph.initializer if t.name == "fc4.weight")
    b = next(t for t in m.graph.initializer if t.name == "fc4.bias")
    rng = np.random.default_rng(3)
    w.CopyFrom(onnx.numpy_helper.from_array(rng.standard_normal((3, 40)).astype(np.float32), "fc4.weight"))
    b.CopyFrom(onnx.numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "fc4.bias"))
    m.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 3
    assert last.name == "fc4"
    path = str(tmp / "softmax_tail.onnx")
    onnx.save(m, path)
    models["softmax_tail"] = (path, "single", 1.0)
    return models


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> (plan, dir, x, onnxruntime's y), each model generated and built on first use."""
    tmp = tmp_path_factory.mktemp("host_batch")
    models, cache = _models(tmp), {}

    def build(name):
        if name not in cache:
            cache[name] = _build(tmp, name, *models[name])
        return cache[name]

    return build


def _build(tmp, name, path, precision, scale, tuning=None):
    d = tmp / name
    plan, _ = generate(path, str(d), Options(name=name, precision=precision, tuning=tuning))
    dtype = np.float64 if precision == "double" else np.float32
    x = np.random.default_rng(1).uniform(-scale, scale, (POINTS, plan.nx)).astype(dtype)
    x.tofile(d / "x.bin")
    fmt = {"n": name, "t": plan.ctype, "NX": plan.nx, "NY": plan.ny}
    (d / "drv.c").write_text(C_DRIVER.format(**fmt))
    (d / "drv.f90").write_text(F_DRIVER.format(**fmt))
    subprocess.run(["gcc", *FLAGS, "-I", str(d), str(d / "drv.c"), str(d / f"{name}.c"), "-o", str(d / "c"), "-lm"],
                   check=True)
    subprocess.run(["gfortran", *FLAGS, "-J", str(d), str(d / f"{name}_model.F90"), str(d / "drv.f90"),
                    "-o", str(d / "f")], check=True)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    return plan, d, x, want


@pytest.mark.parametrize("name", ["gemm_big", "acts", "acts64", "softmax_tail"])
def test_host_batch_matches_onnxruntime_and_the_per_point_routine(built, name):
    plan, d, x, want = built(name)
    dtype = x.dtype
    raw = subprocess.run([str(d / "c"), str(POINTS), str(d / "x.bin")], capture_output=True, check=True).stdout
    both = np.frombuffer(raw, dtype).reshape(2, POINTS, plan.ny)
    subprocess.run([str(d / "f"), str(POINTS), str(d / "x.bin"), str(d / "yf.bin")], check=True)
    fortran = np.fromfile(d / "yf.bin", dtype).reshape(POINTS, plan.ny)
    for label, got in (("C batch", both[0]), ("C per point", both[1]), ("Fortran batch", fortran)):
        result = compare(got, want, dtype, output=f"{name} {label}")
        assert result.passed, result.message("rosenna", "onnxruntime")
    # The batch and the per-point routine compute the same sums in the same order: only exp/tanh
    # (the batch path's vectorisable ones, within 2 ulp) and FMA contraction may differ.
    result = compare(both[0], both[1], dtype, output=f"{name} batch vs per point")
    assert result.passed, result.message("batch", "per point")


def _run(plan, d, x):
    """(C batch and C per point, Fortran batch) on x, as raw arrays."""
    raw = subprocess.run([str(d / "c"), str(len(x)), str(d / "x.bin")], capture_output=True, check=True).stdout
    subprocess.run([str(d / "f"), str(len(x)), str(d / "x.bin"), str(d / "yf.bin")], check=True)
    return np.frombuffer(raw, x.dtype).reshape(2, len(x), plan.ny), np.fromfile(d / "yf.bin", x.dtype)


@pytest.mark.parametrize("name,columns", [("gemm_big", 3), ("softmax_tail", 16)])
def test_gemm_column_groups_change_no_bit(built, tmp_path, name, columns):
    """The tuning's gemm_columns sets how many outputs share a pass over a Gemm's input (register
    blocking), never an output's sum: the C batch path, the per-point routine and the Fortran
    module give the default build's bits with 3 columns (remainders of 2 and 1 on gemm_big's 20-40
    wide layers) and with 16 (16 + 4, 16 + 14, 2 x 16 + 8 and the Softmax tail's 3)."""
    plan, d, x, _ = built(name)
    assert Tuning().gemm_columns not in (3, 16)
    other, od, _, _ = _build(tmp_path, name, str(d.parent / f"{name}.onnx"), plan.precision, 1.0,
                             tuning=Tuning(gemm_columns=columns))
    src = (od / f"{name}.c").read_text()
    assert f"acc{columns - 1}" in src and f"acc{columns}[" not in src
    x.tofile(od / "x.bin")
    (c_want, f_want), (c_got, f_got) = _run(plan, d, x), _run(other, od, x)
    assert c_got.tobytes() == c_want.tobytes(), f"{name}: the C paths' bits change with gemm_columns={columns}"
    assert f_got.tobytes() == f_want.tobytes(), f"{name}: the Fortran module's bits change with gemm_columns={columns}"


def test_dot_products_vectorise_over_points_outside_the_dot_product(built, tmp_path):
    """Each Gemm column group of the block routine is one `omp simd` loop over half the block around
    the dot product (so the accumulators stay in vector registers, two per weight load), and GCC
    vectorises every one of those loops. The form it replaced (a SIMD loop per statement inside
    the dot product) kept the accumulators on the stack: 0.6x onnxruntime's speed on mlp128."""
    plan, d, _, _ = built("gemm_big")
    src = (d / "gemm_big.c").read_text().splitlines()
    batch = next(i for i, line in enumerate(src) if "Host path of" in line)  # not <name>_infer's SIMD variants
    half = host_block(plan, Tuning()) // 2
    lanes = [i + 2 for i, line in enumerate(src[:-2]) if i > batch and line.strip().startswith("#pragma omp simd")
             and src[i + 1].strip() == f"for (int p = 0; p < {half}; ++p) {{"]
    # gemm_big: 5 layers, column groups of 8 and remainders of 4, 6 and 1; each lane loop
    # holds its dot product's loop, with no SIMD loop inside.
    assert len(lanes) >= 5, "no dot product runs inside a SIMD loop over the points"
    spans = []
    for line in lanes:
        indent = len(src[line - 1]) - len(src[line - 1].lstrip())
        end = next(i for i in range(line, len(src)) if src[i] == " " * indent + "}")
        spans.append((line, end))
        body = src[line:end]
        assert any(re.match(r"\s*for \(int i\d = 0;", text) for text in body), body
        assert not any("omp simd" in text for text in body), body
    report = tmp_path / "vec.txt"
    subprocess.run(["gcc", "-O3", "-fopenmp", "-c", str(d / "gemm_big.c"), "-o", str(tmp_path / "m.o"),
                    f"-fopt-info-vec-optimized={report}"], check=True)
    vectorised = {int(m.group(1)) for m in re.finditer(r"gemm_big\.c:(\d+):\d+: optimized: loop vectorized",
                                                       report.read_text())}
    # GCC names a vectorised loop by a line of its body or header: one inside each span.
    missed = [start for start, end in spans if not any(start <= v <= end for v in vectorised)]
    assert not missed, f"GCC left these SIMD loops over points scalar: lines {missed}"
