"""The per-point routines of the kernel file (rosenna/emit/cuda/routine.py) without a GPU: which
body each model's <name>_infer and <name>_infer_warp get, a lane-by-lane emulation of the FP32 warp
body (the shuffles of each layer, the output layer's reduce-scatter, the scatter of y) against the
model in float64, and nvcc (ptxas) and hipcc compiles of the routines."""

import dataclasses
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import devflags
from mlp_reference import act_of, evaluate, run_packing
from rosenna import zoo
from rosenna.emit import cuda
from rosenna.emit.cuda import routine
from rosenna.generate import Options, build_plan, generate


def _plan(tmp_path, name, sizes=None, acts=None, embed=None):
    path = str(tmp_path / f"{name}.onnx")
    if sizes:
        import onnx
        onnx.save(zoo.mlp(name, sizes, acts, seed=11), path)
    else:
        zoo.save(name, path)
    _, plan = build_plan(path, Options(lang="c", embed=embed))
    return path, plan, cuda.choose(plan, cuda.CONSTANT_LIMIT)


@pytest.mark.parametrize("name,warp", [("gemm_big", "chain"), ("mlp128", "parked"), ("gemm_small", None)])
def test_which_warp_body(tmp_path, name, warp):
    _, plan, choice = _plan(tmp_path, name)
    assert routine.fast(plan, choice) and routine._warp_kind(choice) == warp


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_warp_host_packing_in_cpp_equals_numpy(tmp_path):
    """File-loaded models pack the warp body's copy at init (C++ in <name>_routine_upload)."""
    _, plan, choice = _plan(tmp_path, "odd", [5, 100, 120, 3], ["Sigmoid", "Tanh", "Sigmoid"], embed=False)
    layout = routine.WarpLayout(choice.layers)
    body = f"    float *rw = (float *)calloc({layout.size}, sizeof(float));\n" + layout.host_packing("rw")
    got = run_packing(tmp_path, choice.layers, "", body, "rw", layout.size)
    assert np.array_equal(got.view(np.uint32), layout.packed().view(np.uint32))


def emulate_warp(layers, packed, x, places=None):
    """rosenna_warp_layer / rosenna_warp_out for the 32 lanes, pass by pass (float64). ``places``:
    per layer (weights, bias, row stride) in ``packed`` (default: :class:`WarpLayout`'s)."""
    layout = routine.WarpLayout(layers)
    if places is None:
        places = [(off, off + 16 * kc * (8 if i == len(layers) - 1 else 16 * nc), 8 if i == len(layers) - 1 else 16 * nc)
                  for i, (off, kc, nc) in enumerate(layout.offsets)]
    lane = np.arange(32)
    py, cx = lane // 16, lane % 16
    points, nx = x.shape
    y = np.full((points, layers[-1].n), np.nan)
    for pas in range(2):
        kc0 = layout.offsets[0][1]
        h = np.zeros((32, 8, kc0))
        for i in range(8):
            for j in range(kc0):
                k = cx * kc0 + j
                h[:, i, j] = np.where(k < nx, x[16 * pas + 8 * py + i, np.minimum(k, nx - 1)], 0.0)
        for layer, (_, kc, nc), (off, boff, ldw) in zip(layers[:-1], layout.offsets, places):
            acc = np.zeros((32, 8, nc))
            for c in range(16):
                for j in range(kc):
                    w = packed[off + (c * kc + j) * ldw + cx[:, None] * nc + np.arange(nc)]  # [32, nc]
                    for i in range(8):
                        a = h[py * 16 + c, i, j]  # the shuffle from lane (py, c)
                        acc[:, i, :] += w * a[:, None]
            b = packed[boff + cx[:, None] * nc + np.arange(nc)]
            h = act_of(layer)(acc + b[:, None, :])
        (_, kc, _), (off, boff, _) = layout.offsets[-1], places[-1]
        p = np.zeros((32, 64))
        for j in range(kc):
            w = packed[off + (cx[:, None] * kc + j) * 8 + np.arange(8)]  # [32, 8]
            for i in range(8):
                p[:, i * 8:(i + 1) * 8] += w * h[:, i, j][:, None]
        for s in range(4):
            half, bit = 32 >> s, 8 >> s
            upper = (cx & bit) != 0
            send = np.where(upper[:, None], p[:, :half], p[:, half:2 * half])
            keep = np.where(upper[:, None], p[:, half:2 * half], p[:, :half])
            p = keep + send[lane ^ bit]
        b = packed[boff + 4 * (cx % 2)[:, None] + np.arange(4)]
        v = act_of(layers[-1])(p[:, :4] + b)
        for ln in range(32):
            point = 16 * pas + 8 * py[ln] + cx[ln] // 2
            for o in range(4):
                if 4 * (cx[ln] % 2) + o < layers[-1].n:
                    y[point, 4 * (cx[ln] % 2) + o] = v[ln, o]
    return y


@pytest.mark.parametrize("sizes,acts", [([16, 128, 128, 128, 8], ["Relu", "Relu", "Relu", None]),
                                        ([5, 100, 120, 3], ["Sigmoid", "Tanh", "Sigmoid"])])
def test_emulated_warp_body_matches_the_model(tmp_path, sizes, acts):
    _, plan, choice = _plan(tmp_path, "wide", sizes, acts)
    assert routine._warp_kind(choice) == "parked"
    layers = choice.layers
    packed = routine.WarpLayout(layers).packed().astype(np.float64)
    x = np.random.default_rng(2).uniform(-1, 1, size=(32, plan.nx))
    np.testing.assert_allclose(emulate_warp(layers, packed, x), evaluate(layers, x), rtol=1e-10, atol=1e-6)
    # It can fail: the output layer's rows shifted by one input (what a wrong K index would read).
    broken = packed.copy()
    off, kc, _ = routine.WarpLayout(layers).offsets[-1]
    broken[off:off + 16 * kc * 8] = np.roll(broken[off:off + 16 * kc * 8], 8)
    assert not np.allclose(emulate_warp(layers, broken, x), evaluate(layers, x), atol=1e-3)


@pytest.mark.parametrize("sizes,acts", [([16, 128, 128, 128, 8], ["Relu", "Relu", "Relu", None]),
                                        ([7, 96, 96, 96, 96, 5], ["Tanh", "Tanh", "Tanh", "Tanh", None])])
def test_routine_reads_the_staged_kernels_copy(tmp_path, sizes, acts):
    """mlp128 and a 96-wide tanh chain: the one-thread body and the FP32 warp body read the staged
    kernel's <name>_packed (rows 128 floats apart, the biases after the stages), the tensor-core warp
    body the wide kernel's <name>_tc_packed (the tuning's routine_layout "wide", or its wide_k_order
    "paired"; else a copy of its own, <name>_rchain), the kernel file holds no copy of its own for them, and both FP32 bodies,
    emulated from the generated calls on that array, give the model (the tensor-core body's
    emulation: tests/test_warp_tc.py)."""
    _, plan, choice = _plan(tmp_path, "staged", sizes, acts)
    wide = dataclasses.replace(plan, tuning=plan.tuned.replace(routine_layout="wide"))
    assert choice.staged and routine.shared(cuda.choose(wide)) == {"packed", "tc"}
    source = cuda.kernel_source(wide, "stamp")
    assert "staged_rpacked" not in source and "staged_rwarp" not in source and "staged_rchain" not in source
    for name in ("> staged_packed ", "> staged_tc_packed "):  # (declared as rosenna_floats<N>)
        assert source.count(name) == 1 and source.index(name) < source.index("#if defined(ROSENNA_DEVICE_ROUTINE)")
    paired = dataclasses.replace(plan, tuning=plan.tuned.replace(routine_layout="paired"))
    assert routine.shared(cuda.choose(paired)) == {"packed"}
    assert "staged_rchain" in cuda.kernel_source(paired, "stamp")
    # The wide kernel in the paired k order: its copy serves the routine whatever routine_layout says.
    kpaired = dataclasses.replace(plan, tuning=plan.tuned.replace(routine_layout="paired", wide_k_order="paired"))
    assert routine.shared(cuda.choose(kpaired)) == {"packed", "tc"}
    assert "staged_rchain" not in cuda.kernel_source(kpaired, "stamp")
    layers, packed = choice.layers, choice.packed().astype(np.float64)
    x = np.random.default_rng(3).uniform(-1, 1, size=(32, plan.nx))
    # The one-thread body, layer by layer.
    start = source.index("void staged_point_thread")
    calls = re.findall(r"rosenna_dense_kouter<(\d+), (\d+), (\d+), rt_act(\d+)>\(staged_packed\.v \+ (\d+), staged_packed\.v \+ (\d+), ",
                       source[start:source.index("\n}\n", start)])
    assert len(calls) == len(layers)
    h = x
    for layer, (k, n, ldw, _, woff, boff) in zip(layers, calls):
        k, n, ldw, woff, boff = map(int, (k, n, ldw, woff, boff))
        w = np.stack([packed[woff + r * ldw:woff + r * ldw + n] for r in range(k)])
        h = act_of(layer)(h @ w + packed[boff:boff + n])
    np.testing.assert_allclose(h, evaluate(layers, x), rtol=1e-10, atol=1e-9)
    # The FP32 warp body (HIP, pre-sm_80): its calls' places in the same array.
    start = source.index("void staged_infer_warp_body")
    body = source[start:source.index("\n}\n", start)]
    places = [tuple(map(int, m)) for m in re.findall(r"rosenna_warp_layer<\d+, \d+, (\d+), rt_act\d+>\(staged_packed\.v \+ (\d+), "
                                                      r"staged_packed\.v \+ (\d+),", body)]
    places = [(w, b, ldw) for ldw, w, b in places]
    out = re.search(r"rosenna_warp_out<\d+, rt_act\d+>\(staged_packed\.v \+ (\d+), staged_packed\.v \+ (\d+),", body)
    places.append((int(out.group(1)), int(out.group(2)), 8))
    assert len(places) == len(layers)
    np.testing.assert_allclose(emulate_warp(layers, packed, x, places), evaluate(layers, x), rtol=1e-10, atol=1e-6)
    # It can fail: a bias pointer one layer off.
    wrong = places[:1] + [(places[1][0], places[2][1], places[1][2])] + places[2:]
    assert not np.allclose(emulate_warp(layers, packed, x, wrong), evaluate(layers, x), atol=1e-3)


def test_routine_shares_identical_copies(tmp_path):
    """gemm_big (3xTF32 chain, narrow FP32 kernel): the routine reads <name>_packed and
    <name>_tc_packed, once each in the file, before the routine's #if; file-loaded, its own
    object's copies are filled by <name>_routine_upload."""
    path, plan, choice = _plan(tmp_path, "gemm_big")
    assert routine.shared(choice) == {"packed", "tc"}
    source = cuda.kernel_source(plan, "stamp")
    for name in ("> gemm_big_packed ", "> gemm_big_tc_packed "):
        assert source.count(name) == 1 and source.index(name) < source.index("#if defined(ROSENNA_DEVICE_ROUTINE)")
    assert "rpacked" not in source and "rchain" not in source
    generate(path, str(tmp_path / "file"), Options(lang="c", embed=False))
    text = (tmp_path / "file" / "gemm_big_kernel.cu").read_text()
    upload = text[text.index("int gemm_big_routine_upload("):]
    assert "rosennaMemcpyToSymbol(gemm_big_packed," in upload and "rosennaMemcpyToSymbol(gemm_big_tc_packed," in upload


@pytest.fixture(scope="module")
def kernel_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("routine")
    out = []
    # The chain's warp body with embedded weights; the shuffle body with file-loaded ones (its init packing).
    for name, embed in (("gemm_big", True), ("mlp128", False)):
        path, _, _ = _plan(tmp, name)
        out_dir = tmp / f"{name}_{'embedded' if embed else 'file'}"
        generate(path, str(out_dir), Options(lang="c", embed=embed))
        out.append(out_dir / f"{name}_kernel.cu")
    return out


@pytest.mark.nvcc
@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_routines_compile_as_relocatable_device_code(kernel_files):
    checked = False
    for src in kernel_files:
        proc = subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-rdc=true", "-DROSENNA_DEVICE_ROUTINE", "-Xptxas", "-v",
                               "-c", str(src), "-o", str(src) + ".o"], capture_output=True, text=True, cwd=src.parent)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "_infer_warp" in proc.stderr and "_infer\n" in proc.stderr.replace("_infer ", "_infer\n")
        # mlp128's <name>_infer has its warp body's frame: the one-thread path (local arrays,
        # spills) is a function of its own (inlined, _infer had a 1,720-byte frame against 520).
        frames = dict(re.findall(r"Function properties for (\w+)\n\s*(\d+) bytes stack frame", proc.stderr))
        if src.name.startswith("mlp128"):
            assert int(frames["mlp128_infer"]) <= int(frames["mlp128_infer_warp"]) + 16, frames
            checked = True
    assert checked


@pytest.mark.hipcc
@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
def test_routines_compile_with_hipcc(kernel_files):
    env = dict(os.environ, HIP_PLATFORM="amd")
    for src in kernel_files:
        proc = subprocess.run(["hipcc", "--offload-arch=gfx90a", devflags.HIPCC, "-fgpu-rdc", "-DROSENNA_DEVICE_ROUTINE", "-c",
                               str(src), "-o", str(src) + ".hip.o"], capture_output=True, text=True, cwd=src.parent,
                              env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
