"""The shared-memory tiled convs of the CUDA/HIP whole-field path (rosenna/emit/cuda/conv_smem.py).

No GPU here: the generated tile functions (``<name>_smem<k>_load``, ``_sum``, ``_store``: what one
thread of a block does, plain C but for the qualifiers) are compiled for the host with a harness
that runs them as a block would: every thread's loads of a chunk, then every thread's sums, then the
stores. Shared memory is NaN before each chunk's loads and past the tile, the input NaN around the
samples, so a read outside the staged tile or the image gives a NaN or a wrong value; the outputs are
compared with onnxruntime's under verify's tolerance. The generated kernel file compiles with nvcc
(sm_80 and sm_90, no spills at -O3) and hipcc.
"""

import os
import re
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rosenna import compare
from rosenna.emit.cuda import conv_smem
from rosenna.emit.cuda.source import kernel_source
from rosenna.emit.lang import C
from rosenna.generate import Options, build_plan
from rosenna.strategy import Tuning
from rosenna.strategy.field import convs as field_convs, fusion
from tests import devflags, op_models

#: (C, H, W, COUT, kernel, strides, pads [top, left, bottom, right], dilations, group, activation)
GEOMETRIES = {
    "odd_extents": (3, 37, 45, 5, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "Relu"),
    "stride2_pad0": (4, 23, 19, 6, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), 1, None),
    "pad2_5x3": (5, 17, 14, 4, (5, 3), (1, 1), (2, 2, 2, 2), (1, 1), 1, "Tanh"),
    "dilated": (2, 20, 21, 3, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 1, None),
    "depthwise": (24, 16, 16, 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 24, None),
    "depthwise_strided": (7, 19, 13, 7, (3, 5), (2, 1), (1, 2, 0, 2), (1, 1), 7, "Relu"),
    "chunks": (40, 30, 33, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "Relu"),
    "one_output": (8, 12, 70, 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, None),
    "tiny_field": (16, 4, 4, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "Relu"),
}


def _model(path, geometry, seed=0):
    c, h, w, cout, k, strides, pads, dil, group, act = geometry
    return op_models.conv(path, c, h, w, cout, k, strides, pads, dil, group, act, seed)


def _conv(tmp_path, name, monkeypatch):
    """The ONNX file, plan and tiled phase of a one-Conv model."""
    path = _model(str(tmp_path / f"{name}.onnx"), GEOMETRIES[name])
    _, plan = build_plan(path, Options(name=name, tuning=Tuning().replace(smem_conv="all")))
    convs = field_convs.choose_tiles(fusion.schedule(plan))
    assert len(convs) == 1, "the conv should take the tiled kernel"
    (k, conv), = convs.items()
    return path, plan, k, conv


HARNESS = r"""
int main(void)
{
    enum { SAMPLES = %(samples)d, PAD = 4096, THREADS = %(threads)d };
    float *memory = (float *)malloc(sizeof(float) * (SAMPLES * %(nx)dl + 2 * PAD));
    float *y = (float *)malloc(sizeof(float) * SAMPLES * %(ny)dl);
    float *sm = (float *)malloc(sizeof(float) * (%(floats)d + PAD));
    float (*acc)[%(cot)d][%(py)d] = malloc(sizeof *acc * THREADS);
    for (long i = 0; i < SAMPLES * %(nx)dl + 2 * PAD; ++i)
        memory[i] = NAN;
    if (fread(memory + PAD, sizeof(float), SAMPLES * %(nx)dl, stdin) != SAMPLES * %(nx)dl)
        return 1;
    const float *x = memory + PAD;
    for (long i = 0; i < SAMPLES * %(ny)dl; ++i)
        y[i] = NAN;
    for (long tile = 0; tile < SAMPLES * %(tiles)dl; ++tile) {
        for (int t = 0; t < THREADS; ++t)
            for (int j = 0; j < %(cot)d; ++j)
                for (int p = 0; p < %(py)d; ++p)
                    acc[t][j][p] = 0.0f;
        for (int c0 = 0; c0 < %(cs)d; c0 += %(cc)d) {
            for (int i = 0; i < %(floats)d + PAD; ++i)
                sm[i] = NAN;
            for (int t = 0; t < THREADS; ++t)
                %(f)s_load(x, tile, c0, sm, t, THREADS);
            for (int t = 0; t < THREADS; ++t)
                %(f)s_sum(sm, tile, c0, acc[t], t);
        }
        for (int t = 0; t < THREADS; ++t)
            %(f)s_store(y, tile, acc[t], t);
    }
    fwrite(y, sizeof(float), SAMPLES * %(ny)dl, stdout);
    return 0;
}
"""


def emulate(tmp_path, plan, k, conv, x, threads=None):
    """The outputs of the tile functions on x [samples, C, H, W], run on the host (see the module)."""
    s = conv.tiling
    threads = threads or s.threads
    weights = "\n".join(f"static const float {C.symbol(plan.name, w.ident)}[] = "
                        f"{{{', '.join(repr(float(v)) + 'f' for v in w.array.reshape(-1))}}};" for w in plan.weights)
    values = dict(samples=x.shape[0], threads=threads, nx=plan.nx, ny=plan.ny, floats=s.floats, cot=s.cot, py=s.py,
                  tiles=s.tiles, cs=s.cs, cc=s.cc, f=conv_smem.name(plan, k, conv))
    src = tmp_path / f"{plan.name}_harness.c"
    src.write_text("#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
                   "#define __device__\n#define __forceinline__ inline\n#define ROSENNA_RESTRICT\n"
                   + weights + "\n" + conv_smem.functions(plan, k, conv) + HARNESS % values)
    exe = tmp_path / f"{plan.name}_harness"
    subprocess.run(["gcc", "-O1", "-std=c11", "-Wall", "-Wno-unknown-pragmas", "-Werror", str(src), "-o", str(exe), "-lm"], check=True)
    out = subprocess.run([str(exe)], input=np.ascontiguousarray(x, np.float32).tobytes(), capture_output=True,
                         check=True).stdout
    return np.frombuffer(out, np.float32).reshape((x.shape[0], s.cout, s.oh, s.ow))


def _reference(path, x):
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"x": x[i:i + 1]})[0] for i in range(x.shape[0])])


def _outside(got, want):
    tol = compare.tolerance_for(np.float32)
    return ~(np.abs(got - want) <= tol.at(want))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_emulated_tiles_match_onnxruntime(tmp_path, monkeypatch, name):
    path, plan, k, conv = _conv(tmp_path, name, monkeypatch)
    s = conv.tiling
    x = np.random.default_rng(1).standard_normal((2, s.c, s.h, s.w)).astype(np.float32)
    bad = _outside(emulate(tmp_path, plan, k, conv, x), _reference(path, x))
    where = np.argwhere(bad)
    assert not bad.any(), f"{name}: {bad.sum()} of {bad.size} outside tolerance; first at {tuple(where[0])}"


def test_tilings_cover_the_cases():
    """The geometries above exercise what they are named for: partial tiles, chunks, channel groups,
    threads that only load, one output channel."""
    def tiling(name):
        c, h, w, cout, k, strides, pads, dil, group, _ = GEOMETRIES[name]
        out = [(n + p0 + p1 - (kk - 1) * d - 1) // st + 1 for n, p0, p1, kk, d, st in
               zip((h, w), pads[:2], pads[2:], k, dil, strides)]
        window = {"x_shape": (1, c, h, w), "w_shape": (cout, c // group) + k, "y_shape": (1, cout, *out),
                  "strides": strides, "pads": pads[:2], "dilations": dil, "group": group}
        return field_convs.tiling_of(window)

    odd = tiling("odd_extents")
    assert odd.ow % odd.tw and odd.oh % odd.th and odd.cot == 1 and odd.ng == 5  # 5 channels: groups of 1
    chunks = tiling("chunks")
    assert chunks.cc < chunks.c and chunks.c % chunks.cc == 0
    dw = tiling("depthwise")
    assert dw.depthwise and dw.cot == 1 and dw.cs == dw.cob < dw.cout and dw.ng > 1
    assert tiling("one_output").cob == 1 and tiling("tiny_field").used < Tuning().smem_threads
    assert tiling("stride2_pad0").ih == (tiling("stride2_pad0").th - 1) * 2 + 3


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_halo_one_short_fails(tmp_path, monkeypatch):
    """The emulation catches a tile staged one row or one column short of its halo."""
    path, plan, k, conv = _conv(tmp_path, "odd_extents", monkeypatch)
    s = conv.tiling
    x = np.random.default_rng(2).standard_normal((1, s.c, s.h, s.w)).astype(np.float32)
    want = _reference(path, x)
    for attr in ("ih", "iw"):
        short = getattr(field_convs.Tiling, attr).fget(s) - 1
        monkeypatch.setattr(field_convs.Tiling, attr, property(lambda self, v=short: v))
        assert _outside(emulate(tmp_path, plan, k, conv, x), want).any(), f"{attr} one short went unnoticed"
        monkeypatch.undo()


def test_rule_refuses_cleanly(tmp_path, monkeypatch):
    """Grouped convs that are not depthwise, 1x1 convs and 1-D convs keep the direct loops; off by
    the rule (the tuning's smem_conv "") nothing is tiled, "depthwise" tiles only those."""
    window = {"x_shape": (1, 8, 9, 9), "w_shape": (8, 8, 3, 3), "y_shape": (1, 8, 9, 9), "group": 1}
    assert field_convs.smem_eligible(window) == ""
    assert "grouped" in field_convs.smem_eligible(dict(window, w_shape=(8, 4, 3, 3), group=2))
    assert "one tap" in field_convs.smem_eligible(dict(window, w_shape=(8, 8, 1, 1)))
    assert field_convs.smem_eligible(dict(window, x_shape=(1, 8, 9))) == "not 2-D"
    path = _model(str(tmp_path / "dw.onnx"), GEOMETRIES["depthwise"])
    for rule, taken in (("", 0), ("depthwise", 1), ("all", 1)):
        _, plan = build_plan(path, Options(name="dw", tuning=Tuning().replace(smem_conv=rule)))
        assert len(field_convs.choose_tiles(fusion.schedule(plan))) == taken
    path = _model(str(tmp_path / "plain.onnx"), GEOMETRIES["odd_extents"])
    _, plan = build_plan(path, Options(name="plain", tuning=Tuning().replace(smem_conv="depthwise")))
    assert field_convs.choose_tiles(fusion.schedule(plan)) == {}


@pytest.fixture(scope="module")
def kernel_file(tmp_path_factory):
    """The kernel file of a two-conv model (an intermediate buffer between them) with both tiled in
    every form."""
    d = tmp_path_factory.mktemp("smem_cu")
    c, h, w = 12, 37, 45
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((12, 12, 3, 3)) * 0.1).astype(np.float32), "W0"),
             numpy_helper.from_array((rng.standard_normal((12, 1, 3, 3)) * 0.1).astype(np.float32), "W1")]
    nodes = [helper.make_node("Conv", ["x", "W0"], ["a"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "W1"], ["y"], name="dw", pads=[1, 1, 1, 1], group=12)]
    graph = helper.make_graph(nodes, "cv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, h, w])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(d / "cv.onnx"))
    from rosenna import emit

    tuning = Tuning().replace(smem_conv="all", cluster_min_phases=0)
    _, plan = build_plan(str(d / "cv.onnx"), Options(name="cv", infer_one=True, tuning=tuning))
    text = kernel_source(plan, "test")
    (d / "rosenna_rt.h").write_text(emit.runtime_header())
    (d / "cv_kernel.cu").write_text(text)
    return d


@pytest.mark.nvcc
@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_kernel_file_compiles_for_sm80_sm90_without_spills(kernel_file):
    text = (kernel_file / "cv_kernel.cu").read_text()
    assert text.count("_kernel<<<") == 2 and "cv_smem0_c1r1(x, y, tile, cv_sm, 256);" in text
    assert "tile < (s + 1) * " in text and "tile += step / 256)" in text  # the clustered kernel too
    proc = subprocess.run(["nvcc", "-c", "-O3", *devflags.NVCC_SM80_SM90.split(), "-Xptxas", "-v", "-I",
                           str(kernel_file), str(kernel_file / "cv_kernel.cu"), "-o", str(kernel_file / "cv.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'variable "first"' not in proc.stderr and 'variable "step"' not in proc.stderr  # every phase tiled
    report = proc.stderr
    assert "_smem0_c4r2_kernel" in report and "cv_field" in report
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill", report)]
    assert spills and not any(spills), [line for line in report.splitlines() if "spill" in line]


@pytest.mark.hipcc
@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
def test_kernel_file_compiles_for_gfx90a(kernel_file):
    proc = subprocess.run(["hipcc", "-c", *devflags.HIPCC.split(), "--offload-arch=gfx90a", "-I", str(kernel_file),
                           "-x", "hip", str(kernel_file / "cv_kernel.cu"), "-o", str(kernel_file / "cv_hip.o")],
                          capture_output=True, text=True, env=dict(os.environ, HIP_PLATFORM="amd"))
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("forms", [("launched",), ("persistent", "cluster"), ()])
def test_forms_take_the_tiles_where_listed(tmp_path, monkeypatch, forms):
    """The tuning's smem_launched, smem_persistent and smem_cluster: the launched phases, the
    persistent kernel and the clustered kernel each run the tiled conv only where on (else their
    direct loops), and the tile functions are emitted only when some form calls them."""
    path = _model(str(tmp_path / "cv.onnx"), GEOMETRIES["odd_extents"])
    tuning = Tuning().replace(smem_conv="all", cluster_min_phases=0,  # the small net gets a clustered kernel too
                              **{f"smem_{form}": form in forms for form in ("launched", "persistent", "cluster")})
    _, plan = build_plan(path, Options(name="cv", infer_one=True, tuning=tuning))
    text = kernel_source(plan, "test")
    assert ("cv_smem0_c1r2_kernel<<<" in text) == ("launched" in forms)  # 5 channels: 1 per thread
    assert ("tile += gridDim.x)" in text) == ("persistent" in forms)
    assert ("tile += step / " in text) == ("cluster" in forms)
    assert ("static __device__ __forceinline__ void cv_smem0_c1r2_sum(" in text) == ("launched" in forms)
    assert ("static __device__ __forceinline__ void cv_smem0_c1r1_sum(" in text) == bool(set(forms) - {"launched"})
