"""The host branch of <name>_infer_one (no offload device): one OpenMP team per call, SIMD inner
loops, output channels unrolled and jammed (rosenna/emit/host_field.py). C and Fortran built and
run with 2 threads against onnxruntime with verify's tolerance, also when called from inside the
caller's own parallel region."""

import os
import re
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rosenna import generate as gen
from rosenna.compare import compare
from rosenna.emit import host_field
from rosenna.loopir import Assign, Idx, Loop, Num, Ref, Var, add, mul


def _model(path, size=12, seed=0):
    """Every op kind the host form transforms, over a small field: a conv with 7 output channels
    (jammed 7 at a time), ReLU, MaxPool with padding, a strided depthwise conv with a channel
    multiplier, nearest Resize, a skip Add, a constant Pad, ConvTranspose, AveragePool and a 1x1
    conv with 12 outputs (jammed 6 at a time)."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def w(name, *shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32),
                                             name))
        return name

    node = helper.make_node
    h = size // 2
    nodes += [
        node("Conv", ["x", w("w0", 7, 2, 3, 3), w("b0", 7)], ["c0"], pads=[1, 1, 1, 1]),
        node("Relu", ["c0"], ["r0"]),
        node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
        node("Conv", ["p0", w("w1", 14, 1, 3, 3), w("b1", 14)], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2], group=7),
        node("Resize", ["c1", "", "scales"], ["u1"], mode="nearest"),
        node("Conv", ["u1", w("w2", 7, 14, 1, 1), w("b2", 7)], ["c2"]),
        node("Add", ["c2", "r0"], ["a2"]),
        node("Pad", ["a2", "pads"], ["q2"], mode="constant"),
        node("ConvTranspose", ["q2", w("w3", 7, 3, 2, 2), w("b3", 3)], ["t3"], strides=[1, 1], pads=[1, 1, 1, 1]),
        node("AveragePool", ["t3"], ["p3"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["p3", w("w4", 12, 3, 1, 1), w("b4", 12)], ["y"]),
    ]
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    inits.append(numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"))
    graph = helper.make_graph(nodes, "hostfield", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, h, h])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


C_MAIN = r"""#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include "{n}.h"

int main(void)
{{
    static {t} x[{NX}], y[3][{NY}];
    int status = 0, threads = 0;
    FILE *f = fopen("x.bin", "rb");
    if (!f || fread(x, sizeof({t}), {NX}, f) != {NX}) return 3;
    fclose(f);
    status |= {n}_infer_one(x, y[0], NULL);
    /* from inside the caller's parallel region: one thread calls, the others wait */
#pragma omp parallel
    {{
#pragma omp single
        {{
            threads = omp_get_num_threads();
            status |= {n}_infer_one(x, y[1], NULL);
        }}
    }}
    /* every thread of the caller's team in turn */
#pragma omp parallel
    for (int turn = 0; turn < omp_get_num_threads(); ++turn) {{
#pragma omp barrier
        if (turn == omp_get_thread_num())
            status |= {n}_infer_one(x, y[2], NULL);
    }}
    f = fopen("y.bin", "wb");
    fwrite(y, sizeof({t}), 3 * {NY}, f);
    fclose(f);
    return status || threads != 2;
}}
"""

F_MAIN = """program main
  use {n}_model
  implicit none
  real({n}_rk) :: x({n}_nx), y({n}_ny)
  integer :: unit, status
  open (newunit=unit, file='x.bin', access='stream', form='unformatted', status='old')
  read (unit) x
  close (unit)
  call {n}_infer_one(x, y, status)
  if (status /= 0) error stop 1
  open (newunit=unit, file='y.bin', access='stream', form='unformatted', status='replace')
  write (unit) y
  close (unit)
end program main
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The model generated once (C and Fortran), x, and onnxruntime's y."""
    out = tmp_path_factory.mktemp("hostfield")
    path = _model(out / "hostfield.onnx")
    plan, _ = gen.generate(path, str(out), gen.Options(lang="both", embed=True, infer_one=True))
    x = np.random.default_rng(1).uniform(-1, 1, plan.nx).astype(np.float32)
    x.tofile(out / "x.bin")
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x.reshape(1, 2, 12, 12)})[0].reshape(-1)
    return plan, out, want


def _host_branch(text):
    return text.split("No offload device")[1]


def test_host_branch_is_one_team_with_simd_loops_and_jammed_channels(built):
    plan, out, _ = built
    host = _host_branch((out / f"{plan.name}.c").read_text())
    assert host.count("#pragma omp parallel") == 1 and "parallel for" not in host
    assert host.count("#pragma omp simd") >= 4 and "#pragma omp for" in host and " nowait" in host
    # the 7-channel conv jammed 7 at a time, the 12-channel 1x1 conv 6 at a time
    assert "acc_6 = " in host and "acc_7" not in host
    # the fused ReLU applied in a second SIMD loop, in place (GCC vectorises no loop whose body
    # has both a reduction loop and a select)
    assert re.search(r"(\w+\[[^]]+\]) = \(\1 > 0\.0f \? \1 : 0\.0f\);", host)
    fortran = _host_branch((out / f"{plan.name}_model.F90").read_text())
    assert fortran.count("!$omp parallel") == 1 and "!$omp simd" in fortran and "!$omp end do nowait" in fortran


@pytest.mark.parametrize("lang", ["c", "fortran"])
def test_host_branch_matches_onnxruntime(built, lang):
    plan, out, want = built
    n = plan.name
    fmt = {"n": n, "t": plan.ctype, "NX": plan.nx, "NY": plan.ny}
    if lang == "c":
        (out / "main.c").write_text(C_MAIN.format(**fmt))
        cmd = ["gcc", "-O3", "-march=native", "-fopenmp", "-I", str(out), "main.c", f"{n}.c", "-o", "main_c", "-lm"]
    else:
        (out / "main.f90").write_text(F_MAIN.format(**fmt))
        cmd = ["gfortran", "-O3", "-march=native", "-fopenmp", "-J", str(out), f"{n}_model.F90", "main.f90",
               "-o", "main_fortran"]
    subprocess.run(cmd, cwd=out, check=True, capture_output=True)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    subprocess.run([str(out / f"main_{lang}")], cwd=out, check=True, env=env, timeout=60)
    got = np.fromfile(out / "y.bin", np.float32).reshape(-1, plan.ny)
    for i, y in enumerate(got):
        result = compare(y, want, output=f"{lang} call {i}")
        assert result.passed, result.message()


def test_jam_keeps_each_sum_in_order():
    """Unroll-and-jam only interleaves independent output channels: each accumulator gets the
    same terms in the same order as before, so the host form's sums are the scalar loops' sums."""

    class Plan:
        storage = {"w": ("w", "w0", 0), "x": ("x", "x", 0), "y": ("y", "y", 0)}

    acc, i0, i1, i2 = Var("acc"), Idx.of("i0"), Idx.of("i1"), Idx.of("i2")
    body = [Assign(acc, Num(0.0)),
            Loop("i2", 4, [Assign(acc, mul(Ref("w", i0 * 4 + i2), Ref("x", i1 + i2)), accumulate=True)]),
            Assign(Ref("y", i0 * 8 + i1), add(acc, Num(1.0)))]
    chain = [Loop("i0", 6, []), Loop("i1", 8, [])]
    (new_chain, new_body), = host_field.jam(Plan, chain, body)
    assert [loop.var for loop in new_chain] == ["i1"]  # all 6 channels at once: the channel loop is gone
    assert new_body[:6] == [Assign(Var(f"acc_{j}"), Num(0.0)) for j in range(6)]
    loop = new_body[6]
    assert [s.target.name for s in loop.body] == [f"acc_{j}" for j in range(6)]
    assert [s.expr.a.idx for s in loop.body] == [Idx.of("i2") + 4 * j for j in range(6)]
    assert new_body[7 + 5] == Assign(Ref("y", i1 + 40), add(Var("acc_5"), Num(1.0)))
    # 11 channels (no divisor up to JAM): 4 at a time for the FMA latency, the last 3 a second piece
    pieces = host_field.jam(Plan, [Loop("i0", 11, []), Loop("i1", 8, [])], body)
    assert [[loop.extent for loop in chain] for chain, _ in pieces] == [[2, 8], [3, 8]]
    assert pieces[1][1][-1] == Assign(Ref("y", i0 * 8 + i1 + 64), add(acc, Num(1.0)))  # i0 := i0 + 8
