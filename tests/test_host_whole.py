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
from rosenna import toolchain
from rosenna import strategy
from rosenna.strategy.field import host_loops
from rosenna.loopir import Assign, Fn, Idx, Loop, Num, Ref, Var, add, mul
from rosenna.strategy import Tuning


def _model(path, size=12, seed=0):
    """Every op kind the host form transforms, over a small field: a conv with 7 output channels
    (jammed 7 at a time), ReLU, MaxPool with padding, a strided depthwise conv with a channel
    multiplier, nearest Resize, a skip Add, a constant Pad, ConvTranspose, AveragePool and a 1x1
    conv with 12 outputs (jammed 12 at a time)."""
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
    # the 7-channel conv jammed 7 at a time, the 12-channel 1x1 conv 12 at a time
    assert "acc_11 = " in host and "acc_12" not in host
    # the fused ReLU applied in a second SIMD loop, in place (GCC vectorises no loop whose body
    # has both a reduction loop and a select)
    assert re.search(r"(\w+\[[^]]+\]) = \(\1 > 0\.0f \? \1 : 0\.0f\);", host)
    # no piece stores one element from two iterations a few apart, as the strided depthwise
    # conv's corners did with its groups jammed (GCC 12's predictive commoning then raced
    # between the threads: 1 run in 15 wrong on 2 threads)
    regions = [(chain, [s for inner in body for s in inner.body])
               for kind, chain, body, _, _ in strategy.of(plan).host_regions if kind == "parallel"]
    assert not any(host_loops.stores_meet(chain, body) for chain, body in regions)
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


def test_host_fma_branch_matches_onnxruntime(built):
    """The tuning's host_fma: the C host branch's multiply-adds written as fmaf, still within
    verify's tolerance of onnxruntime."""
    _, out, want = built
    fused = out / "fma"
    fused.mkdir(exist_ok=True)
    plan, _ = gen.generate(str(out / "hostfield.onnx"), str(fused),
                           gen.Options(name="fused", lang="c", embed=True, infer_one=True,
                                       tuning=Tuning().replace(host_fma=True)))
    assert "fmaf(" in _host_branch((fused / "fused.c").read_text())
    (fused / "x.bin").write_bytes((out / "x.bin").read_bytes())
    (fused / "main.c").write_text(C_MAIN.format(n="fused", t=plan.ctype, NX=plan.nx, NY=plan.ny))
    subprocess.run(["gcc", "-O1", "-march=native", "-ffp-contract=off", "-fopenmp", "-I", str(fused), "main.c",
                    "fused.c", "-o", "main_c", "-lm"], cwd=fused, check=True, capture_output=True)
    subprocess.run([str(fused / "main_c")], cwd=fused, check=True, env=dict(os.environ, OMP_NUM_THREADS="2"), timeout=60)
    for i, y in enumerate(np.fromfile(fused / "y.bin", np.float32).reshape(-1, plan.ny)):
        result = compare(y, want, output=f"fma call {i}")
        assert result.passed, result.message()


def test_jam_keeps_each_sum_in_order():
    """Unroll-and-jam only interleaves independent output channels: each accumulator gets the
    same terms in the same order as before, so the host form's sums are the scalar loops' sums."""

    class Plan:
        storage = {"w": ("w", "w0", 0), "x": ("x", "x", 0), "y": ("y", "y", 0)}
        tuned = Tuning()

    acc, i0, i1, i2 = Var("acc"), Idx.of("i0"), Idx.of("i1"), Idx.of("i2")
    body = [Assign(acc, Num(0.0)),
            Loop("i2", 4, [Assign(acc, mul(Ref("w", i0 * 4 + i2), Ref("x", i1 + i2)), accumulate=True)]),
            Assign(Ref("y", i0 * 8 + i1), add(acc, Num(1.0)))]
    chain = [Loop("i0", 6, []), Loop("i1", 8, [])]
    (new_chain, new_body), = host_loops.jam(Plan, chain, body)
    assert [loop.var for loop in new_chain] == ["i1"]  # all 6 channels at once: the channel loop is gone
    assert new_body[:6] == [Assign(Var(f"acc_{j}"), Num(0.0)) for j in range(6)]
    loop = new_body[6]
    assert [s.target.name for s in loop.body] == [f"acc_{j}" for j in range(6)]
    assert [s.expr.a.idx for s in loop.body] == [Idx.of("i2") + 4 * j for j in range(6)]
    assert new_body[7 + 5] == Assign(Ref("y", i1 + 40), add(Var("acc_5"), Num(1.0)))
    # 11 channels (no divisor up to JAM): 4 at a time for the FMA latency, the last 3 a second piece
    pieces = host_loops.jam(Plan, [Loop("i0", 11, []), Loop("i1", 8, [])], body)
    assert [[loop.extent for loop in chain] for chain, _ in pieces] == [[2, 8], [3, 8]]
    assert pieces[1][1][-1] == Assign(Ref("y", i0 * 8 + i1 + 64), add(acc, Num(1.0)))  # i0 := i0 + 8


# -- the register blocking: channel counts that are no multiple of the block, odd widths -----------

def _blocking_model(path, seed=2):
    """Channel counts 5, 13, 37, 24 and 1 and widths 37, 18 and 9 (no multiple of 8 or 16 lanes,
    one under 8): a 3x3 conv 2->5+ReLU, 1x1 convs 5->13+Tanh (7 + 6 channels a pass; Tanh applied
    twice to an element would show), 13->37 (10 x 3 + 7), a depthwise 3x3 conv+ReLU (rows jammed),
    1x1 37->24+Sigmoid (12 x 2), AveragePool to 6x18, 1x1 24->24, AveragePool to 3x9 and a 3x3
    conv 24->1 over 3x9 (its interior 7 wide, under a vector)."""
    rng = np.random.default_rng(seed)
    node, inits, nodes = helper.make_node, [], []

    def conv(src, dst, cin, cout, k, act=None, group=1):
        w = rng.standard_normal((cout, cin // group, k, k)) / np.sqrt(cin // group * k * k)
        inits.extend([numpy_helper.from_array(w.astype(np.float32), dst + "_w"),
                      numpy_helper.from_array((0.1 * rng.standard_normal(cout)).astype(np.float32), dst + "_b")])
        out = dst + "_c" if act else dst
        nodes.append(node("Conv", [src, dst + "_w", dst + "_b"], [out], pads=[k // 2] * 4, group=group))
        if act:
            nodes.append(node(act, [out], [dst]))
        return dst

    h = conv("x", "c5", 2, 5, 3, "Relu")
    h = conv(h, "c13", 5, 13, 1, "Tanh")
    h = conv(h, "c37", 13, 37, 1)
    h = conv(h, "dw37", 37, 37, 3, "Relu", group=37)
    h = conv(h, "c24", 37, 24, 1, "Sigmoid")
    nodes.append(node("AveragePool", [h], ["p1"], kernel_shape=[2, 2], strides=[2, 2]))
    h = conv("p1", "d24", 24, 24, 1)
    nodes.append(node("AveragePool", [h], ["p2"], kernel_shape=[2, 2], strides=[2, 2]))
    conv("p2", "y", 24, 1, 3)
    graph = helper.make_graph(nodes, "blocking", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 13, 37])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3, 9])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


#: The two forms of the host loops: 32-byte vectors (the compiler's width; x86_64 has no AVX-512)
#: and 64-byte ones with simdlen (an AVX-512 target). Both run on any x86-64 host.
FORMS = {"blk32": "x86_64", "blk64": "icelake"}

BLK_C = r"""#include <stdio.h>
#include "blk32.h"
#include "blk64.h"

int main(void)
{
    static float x[BLK32_NX], y[2][BLK32_NY];
    FILE *f = fopen("x.bin", "rb");
    if (!f || fread(x, sizeof(float), BLK32_NX, f) != BLK32_NX) return 3;
    fclose(f);
    int status = blk32_infer_one(x, y[0], NULL) | blk64_infer_one(x, y[1], NULL);
    f = fopen("y_c.bin", "wb");
    fwrite(y, sizeof(float), 2 * BLK32_NY, f);
    fclose(f);
    return status;
}
"""

BLK_F = """program main
  use blk64_model
  implicit none
  real(blk64_rk) :: x(blk64_nx), y(blk64_ny)
  integer :: unit, status
  open (newunit=unit, file='x.bin', access='stream', form='unformatted', status='old')
  read (unit) x
  close (unit)
  call blk64_infer_one(x, y, status)
  if (status /= 0) error stop 1
  open (newunit=unit, file='y_fortran.bin', access='stream', form='unformatted', status='replace')
  write (unit) y
  close (unit)
end program main
"""


@pytest.fixture(scope="module")
def blocking(tmp_path_factory):
    """The blocking model generated in both forms (C and Fortran) into one directory, x, and
    onnxruntime's y."""
    out = tmp_path_factory.mktemp("blocking")
    path = _blocking_model(out / "blocking.onnx")
    plans = {}
    for name, target in FORMS.items():
        profile = toolchain.resolve(None, target=target, gpu_arch="sm_80")
        # the plan's loops (host_conv=false): the forms the Fortran module and the convs the
        # register-blocked form refuses keep (tests/test_host_conv.py tests that form)
        plans[name], _ = gen.generate(path, str(out), gen.Options.from_profile(profile, ["host_conv=false"], name=name,
                                                                               lang="both", embed=True))
    x = np.random.default_rng(3).uniform(-1, 1, plans["blk32"].nx).astype(np.float32)
    x.tofile(out / "x.bin")
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x.reshape(1, 2, 13, 37)})[0].reshape(-1)
    return plans, out, want


def test_blocking_forms(blocking):
    """The generated text has what the blocking promises: 64-byte simdlen only in the AVX-512 form,
    one vector per SIMD loop inside a loop over the vectors, the overlapped last vector of a
    37-wide row (at 21 = 37 - 16, and 29 = 37 - 8), no SIMD loop down a column, the 37 channels
    of a 1x1 conv in passes of 10 and the last 7."""
    plans, out, _ = blocking
    wide = _host_branch((out / "blk64.c").read_text())
    narrow = _host_branch((out / "blk32.c").read_text())
    assert "simdlen(16)" in wide and "simdlen" not in narrow
    assert re.search(r"for \(int (i\d)_v = 0; \1_v < 2; \+\+\1_v\) \{\n\s*#pragma omp simd simdlen\(16\)\n"
                     r"\s+for \(int \1 = 0; \1 < 16; \+\+\1\)", wide)
    assert re.search(r"for \(int (i\d)_v = 0; \1_v < 4; \+\+\1_v\) \{\n\s*#pragma omp simd\n"
                     r"\s+for \(int \1 = 0; \1 < 8; \+\+\1\)", narrow)
    # the 13-channel 1x1 conv's first pass: its last vector stores columns 21..36 (29..36)
    assert "ws1[37*i1 + i2 + 21] = " in wide and "ws1[37*i1 + i2 + 29] = " in narrow
    # the left border column of the first conv: a worksharing loop down the rows (stride 37), no SIMD
    assert re.search(r"#pragma omp for(?: schedule\(dynamic\))? nowait\n\s+for \(int i1 = 0; i1 < 11; \+\+i1\) \{\n\s+float acc_0,", wide)
    assert not re.search(r"#pragma omp for simd nowait\n\s+for \(int i1 = 0; i1 < 11;", wide)
    c37 = re.split(r"/\* \w+(?:\+\w+)*: ", wide.split("/* Conv: Conv_4 */")[1])[0]  # to the next op's comment
    assert "acc_9 = " in c37 and "acc_10" not in c37  # 10 channels a pass at most (37 = 10 x 3 + 7)
    fortran = (out / "blk64_model.F90").read_text()
    assert "!$omp simd simdlen(16)" in fortran and re.search(r"integer :: .*\bi2_v\b", fortran)


@pytest.mark.parametrize("lang", ["c", "fortran"])
def test_blocking_matches_onnxruntime(blocking, lang):
    """Both forms in C, the AVX-512 one in Fortran (the forms differ in numbers, not in the
    language's text), against onnxruntime on 2 threads: a wrong offset of a jammed channel, a
    pass, a vector or the overlapped last vector changes y. -O1 with the vectorizer: the SIMD
    loops are vectorised as at -O3, and the compile takes half as long."""
    plans, out, want = blocking
    flags = ["-O1", "-ftree-vectorize", "-march=native", "-fopenmp"]
    if lang == "c":
        (out / "main.c").write_text(BLK_C)
        cmd = ["gcc", *flags, "-I", str(out), "main.c", "blk32.c", "blk64.c", "-o", "main_c", "-lm"]
    else:
        (out / "main.f90").write_text(BLK_F)
        cmd = ["gfortran", *flags, "-J", str(out), "blk64_model.F90", "main.f90", "-o", "main_fortran"]
    subprocess.run(cmd, cwd=out, check=True, capture_output=True)
    subprocess.run([str(out / f"main_{lang}")], cwd=out, check=True, env=dict(os.environ, OMP_NUM_THREADS="2"), timeout=60)
    got = np.fromfile(out / f"y_{lang}.bin", np.float32).reshape(-1, plans["blk64"].ny)
    for name, y in zip(FORMS if lang == "c" else ["blk64"], got):
        result = compare(y, want, output=f"{lang} {name}")
        assert result.passed, result.message()


def test_uneven_jam_passes():
    """The host's jam splits an output-channel loop into balanced passes of at most the tuning's host_jam (the
    CUDA phases keep the divisor rule: 37 channels there are jammed by rows, not channels)."""

    class Plan:
        storage = {"w": ("w", "w0", 0), "x": ("x", "x", 0), "y": ("y", "y", 0)}
        tuned = Tuning()

    acc, i0, i1, i2 = Var("acc"), Idx.of("i0"), Idx.of("i1"), Idx.of("i2")
    body = [Assign(acc, Num(0.0)),
            Loop("i2", 3, [Assign(acc, mul(Ref("w", i0 * 3 + i2), Ref("x", i1 * 3 + i2)), accumulate=True)]),
            Assign(Ref("y", i0 * 16 + i1), acc)]

    def passes(channels):
        """(passes, channels a pass) of each piece."""
        pieces = host_loops.jam(Plan, [Loop("i0", channels, []), Loop("i1", 16, [])], body, Tuning().host_jam, uneven=True)
        return [(chain[0].extent if chain[0].var == "i0" else 1, sum(isinstance(s, Assign) and s.expr == Num(0.0) for s in b))
                for chain, b in pieces]

    assert Tuning().host_jam == 12
    assert passes(24) == [(2, 12)] and passes(37) == [(3, 10), (1, 7)] and passes(13) == [(1, 7), (1, 6)]
    assert passes(5) == [(1, 5)]
    # the last piece of 37 stores channels 30..36
    (_, first), (_, last) = host_loops.jam(Plan, [Loop("i0", 37, []), Loop("i1", 16, [])], body, 12, uneven=True)
    assert [s.target for s in last if isinstance(s, Assign) and isinstance(s.target, Ref)] == [Ref("y", i1 + 16 * (30 + j)) for j in range(7)]
    assert host_loops.jam(Plan, [Loop("i0", 37, []), Loop("i1", 16, [])], body)[0][0][0].var == "i0"  # rows jam


def test_simd_loops_overlap_only_what_reads_nothing_it_stores():
    """The last vector overlaps the one before only where the statements read no buffer they
    store; an in-place activation pass, or an update of its own output, takes a remainder loop."""

    class Plan:
        storage = {"w": ("w", "w0", 0), "x": ("x", "x", 0), "y": ("y", "y", 0)}
        tuned = Tuning()
        host_vector = 64
        itemsize = 4

    i0, i1 = Idx.of("i0"), Idx.of("i1")
    chain = [Loop("i0", 3, []), Loop("i1", 37, [])]
    conv = [Assign(Ref("y", i0 * 37 + i1), Fn("tanh", (mul(Ref("w", i0), Ref("x", i0 * 37 + i1)),)))]
    loops = host_loops.simd_loops(Plan, chain, conv)
    # no reduction loop, so the tanh stays: two vectors, then the overlapped one at 21
    assert [(inner.extent, inner.vectors) for inner in loops] == [(16, 2), (16, 0)]
    assert loops[1].body[0].target == Ref("y", i0 * 37 + i1 + 21)
    update = [Assign(Ref("y", i0 * 37 + i1), Ref("x", i0 * 37 + i1), accumulate=True)]
    loops = host_loops.simd_loops(Plan, chain, update)
    assert [(inner.extent, inner.vectors) for inner in loops] == [(16, 2), (5, 0)]
    assert loops[1].body[0].target == Ref("y", i0 * 37 + i1 + 32)
    column = [Assign(Ref("y", i1 * 3 + i0), Ref("x", i1 * 3 + i0))]
    assert [(inner.simd, inner.extent) for inner in host_loops.simd_loops(Plan, chain, column)] == [(False, 37)]


def test_jam_refuses_stores_that_meet():
    """A depthwise conv with a channel multiplier 2 at one output position (a corner piece):
    jamming its 7 groups would store channels 2g + k of 4 groups in the iteration over k, 2 and
    4 iterations from the stores of other groups; the host's jam leaves it as it is."""

    class Plan:
        storage = {"w": ("w", "w0", 0), "x": ("x", "x", 0), "y": ("y", "y", 0)}
        tuned = Tuning()

    g, k = Idx.of("i0"), Idx.of("i1")
    body = [Assign(Var("acc"), Num(0.0)),
            Loop("i2", 2, [Assign(Var("acc"), mul(Ref("w", g * 4 + k * 2 + Idx.of("i2")), Ref("x", g * 36 + Idx.of("i2"))),
                                  accumulate=True)]),
            Assign(Ref("y", g * 72 + k * 36), Var("acc"))]
    chain = [Loop("i0", 7, []), Loop("i1", 2, [])]
    assert host_loops.jam(Plan, chain, body, Tuning().host_jam, uneven=True) == [(chain, body)]
    jammed = host_loops.jam(Plan, chain, body)  # the CUDA phases' rule jams the groups by 4
    assert host_loops.stores_meet(*jammed[0]) and len(jammed) == 2
