"""The float64 tensor-core chain (rosenna/emit/cuda/dmma.py) without a GPU: which models take it,
a lane-by-lane emulation of its data flow (DMMA fragments, the paired row order that lets a
layer's C fragments be the next layer's A fragments, the bounds on the last points) against the
model in float64, the C++ packing of file-loaded models against numpy bit for bit, and nvcc
(ptxas: no spills) and hipcc compiles of generated kernel files."""

import shutil
import subprocess

import numpy as np
import pytest

from mlp_reference import act_of, activation_mlp, evaluate, run_packing
from rosenna import zoo
from rosenna.emit import cuda
from rosenna.emit.cuda import dmma
from rosenna.generate import Options, build_plan, generate

#: 4-32-32-2 Tanh (the issue's float64 model) and widths that pad everything (5 inputs, 100, 120, 3).
MODELS = {"d4": ([4, 32, 32, 2], ["Tanh", "Tanh", None]), "odd": ([5, 100, 120, 3], ["Sigmoid", "Tanh", "Sigmoid"])}


def _plan(tmp_path, name, dtype=np.float64, embed=None):
    sizes, acts = MODELS[name]
    path = activation_mlp(tmp_path / f"{name}.onnx", sizes, acts, dtype=dtype, name=name)
    _, plan = build_plan(path, Options(lang="c", embed=embed))
    return path, plan


@pytest.mark.parametrize("name,dtype,takes", [("d4", np.float64, True), ("odd", np.float64, True),
                                              ("d4", np.float32, False)])
def test_which_models_take_the_dmma_chain(tmp_path, name, dtype, takes):
    _, plan = _plan(tmp_path, name, dtype)
    choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
    assert (choice.tensor is dmma.KIND) is takes


def test_too_wide_keeps_the_fma_kernel(tmp_path):
    path = tmp_path / "wide.onnx"
    import onnx
    onnx.save(zoo.mlp("wide", [4, 200, 2], ["Tanh", None], np.float64), str(path))
    _, plan = build_plan(str(path), Options(lang="c"))
    assert cuda.choose(plan, cuda.CONSTANT_LIMIT).tensor is None


def emulate(layers, packed, x):
    """The kernel for one warp's M tiles of 8 points, lane by lane: the fragments gathered into
    matrices from the lanes that hold them, multiplied, scattered back."""
    frags, biases, _ = dmma.offsets(layers)
    m = dmma.m_tiles(layers)
    points, nx = x.shape
    lane = np.arange(32)
    gid, tig = lane // 4, lane % 4
    kt0 = (nx + 3) // 4
    h = np.zeros((m, kt0, 32))
    for mi in range(m):
        r = 8 * mi + gid
        for kt in range(kt0):
            k = 4 * kt + tig
            ok = (k < nx) & (r < points)
            h[mi, kt] = np.where(ok, x[np.minimum(r, points - 1), np.minimum(k, nx - 1)], 0.0)
    for i, layer in enumerate(layers):
        kt_n, nt_n = h.shape[1], (layer.n + 7) // 8
        out = np.zeros((m, 2 * nt_n, 32))
        act = act_of(layer)
        for nt in range(nt_n):
            for mi in range(m):
                acc = np.stack([packed[biases[i] + 8 * nt + 2 * tig], packed[biases[i] + 8 * nt + 2 * tig + 1]])
                for kt in range(kt_n):
                    a_mat, b_mat = np.zeros((8, 4)), np.zeros((4, 8))
                    a_mat[gid, tig] = h[mi, kt]
                    b_mat[tig, gid] = packed[frags[i] + (kt * nt_n + nt) * 32 + lane]
                    c = a_mat @ b_mat
                    acc = acc + np.stack([c[gid, 2 * tig], c[gid, 2 * tig + 1]])
                out[mi, 2 * nt], out[mi, 2 * nt + 1] = act(acc[0]), act(acc[1])
        h = out
    ny = layers[-1].n
    y = np.full((points, ny), np.nan)
    for mi in range(m):
        r = 8 * mi + gid
        for nt in range(h.shape[1] // 2):
            for half in range(2):
                c = 8 * nt + 2 * tig + half
                ok = (c < ny) & (r < points)
                y[r[ok], c[ok]] = h[mi, 2 * nt + half][ok]
    return y


@pytest.mark.parametrize("name", sorted(MODELS))
def test_emulated_dmma_chain_matches_the_model(tmp_path, name):
    _, plan = _plan(tmp_path, name)
    layers = dmma.layers_of(plan)
    packed = dmma.packed(layers)
    points = 8 * dmma.m_tiles(layers) - 3  # the bounds on the warp's last rows matter
    x = np.random.default_rng(5).uniform(-1, 1, size=(points, plan.nx))
    want = evaluate(layers, x)
    np.testing.assert_allclose(emulate(layers, packed, x), want, rtol=1e-12, atol=1e-14)
    # The emulation can fail: layer 1 packed in the natural row order (not what C fragments give).
    frags, _, _ = dmma.offsets(layers)
    broken = packed.copy()
    nt_n = (layers[1].n + 7) // 8
    for kt in range(2 * ((layers[1].k + 7) // 8)):
        for nt in range(nt_n):
            at = frags[1] + (kt * nt_n + nt) * 32 + np.arange(32)
            w = np.zeros((8 * nt_n, 8 * ((layers[1].k + 7) // 8)))
            w[:layers[1].n, :layers[1].k] = layers[1].w
            broken[at] = w[8 * nt + np.arange(32) // 4, 4 * kt + np.arange(32) % 4]
    assert not np.allclose(emulate(layers, broken, x), want, atol=1e-6)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_dmma_host_packing_in_cpp_equals_numpy(tmp_path):
    _, plan = _plan(tmp_path, "odd", embed=False)
    layers = dmma.layers_of(plan)
    size = dmma.offsets(layers)[2]
    body = f"    double *tc = (double *)calloc({size}, sizeof(double));\n" + dmma.host_packing(layers)
    got = run_packing(tmp_path, layers, "", body, "tc", size, ctype="double")
    assert np.array_equal(got.view(np.uint64), dmma.packed(layers).view(np.uint64))


@pytest.fixture(scope="module")
def kernel_files(tmp_path_factory):
    """The kernel files of d4 (embedded, shared-memory fragments) and odd (file-loaded, fragments
    through L1)."""
    tmp = tmp_path_factory.mktemp("dmma")
    out = []
    for name, embed in (("d4", True), ("odd", False)):
        path, _ = _plan(tmp, name, embed=embed)
        generate(path, str(tmp / name), Options(lang="c", embed=embed))
        out.append(tmp / name / f"{name}_kernel.cu")
    return out


@pytest.mark.nvcc
@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_dmma_kernel_compiles_without_spills(kernel_files):
    for src in kernel_files:
        proc = subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-Xptxas", "-v", "-c", str(src), "-o", str(src) + ".o"],
                              capture_output=True, text=True, cwd=src.parent)
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = proc.stderr.split("_tc_kernel")[-1]
        assert "0 bytes spill stores" in report, report


@pytest.mark.hipcc
@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
def test_dmma_kernel_files_compile_with_hipcc(kernel_files):
    import os
    env = dict(os.environ, HIP_PLATFORM="amd")
    for src in kernel_files:
        proc = subprocess.run(["hipcc", "--offload-arch=gfx90a", "-O3", "-c", str(src), "-o", str(src) + ".hip.o"],
                              capture_output=True, text=True, cwd=src.parent, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
