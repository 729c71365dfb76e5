"""The float64 tensor-core chain (rosenna/emit/cuda/dmma.py) without a GPU: which models take it,
a lane-by-lane emulation of its data flow (DMMA fragments, the paired row order that lets a
layer's C fragments be the next layer's A fragments, the bounds on the last points, Tanh through
rosenna_dtanh.cuh compiled for the host) against the model in float64 at verify's float64
tolerance, that tanh's error over a dense sweep against long double, the C++ packing of
file-loaded models against numpy bit for bit, and nvcc (ptxas: no spills, no branches in the
tanh) and hipcc compiles of generated kernel files."""

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

import devflags
from mlp_reference import act_of, activation_mlp, evaluate, run_packing
from rosenna import compare, zoo
from rosenna.emit import cuda, fixed
from rosenna.emit.cuda import dmma
from rosenna.generate import Options, build_plan, generate
from rosenna.strategy import analyse
from rosenna.strategy.tuning import Tuning

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


#: rosenna_dtanh.cuh on the host: CUDA's word intrinsics by memcpy, rcp.approx.f64 as the high
#: word of 1/d (what MUFU.RCP64H returns; 2^-20 relative at worst, the Newton step makes it 2^-60).
DTANH_HOST = r"""#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#define __device__
#define __forceinline__ static inline
static inline int __double2loint(double t) { uint64_t b; memcpy(&b, &t, 8); return (int)(uint32_t)b; }
static inline int __double2hiint(double t) { uint64_t b; memcpy(&b, &t, 8); return (int)(uint32_t)(b >> 32); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline double __hiloint2double(int hi, int lo)
{
    uint64_t b = ((uint64_t)(uint32_t)hi << 32) | (uint32_t)lo;
    double d;
    memcpy(&d, &b, 8);
    return d;
}
static inline double rcp_high_word(double d)
{
    double r = 1.0 / d;
    uint64_t b;
    memcpy(&b, &r, 8);
    b &= 0xffffffff00000000ull;
    memcpy(&r, &b, 8);
    return r;
}
#define ROSENNA_DTANH_RCP(d) rcp_high_word(d)
#include "rosenna_dtanh.cuh"
void dtanh(const double *x, double *y, long n)
{
    for (long i = 0; i < n; ++i)
        y[i] = rosenna_tanh(x[i]);
}
"""
#: rosenna_dtanh.cuh's error bound against the exact tanh (ulp of the result; measured 3.2 on a
#: sweep of 84M points, bench/studies/f64-dmma).
DTANH_ULP = 4


def _dtanh_lib(tmp, text):
    (tmp / "rosenna_dtanh.cuh").write_text(text)
    (tmp / "dtanh.c").write_text(DTANH_HOST)
    subprocess.run(["gcc", "-O2", "-ffp-contract=off", "-fPIC", "-shared", str(tmp / "dtanh.c"), "-o",
                    str(tmp / "dtanh.so"), "-lm"], check=True, cwd=tmp)
    lib = ctypes.CDLL(str(tmp / "dtanh.so"))
    lib.dtanh.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]

    def dtanh(v):
        v = np.ascontiguousarray(v, np.float64)
        out = np.empty_like(v)
        lib.dtanh(v.ctypes.data, out.ctypes.data, v.size)
        return out
    return dtanh


@pytest.fixture(scope="module")
def dtanh(tmp_path_factory):
    """The kernels' double tanh on the host, and the same with its u^2 coefficient off by 1e-12
    (a tanh up to ~100 ulp wrong: what the sweep must catch)."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    text = fixed.load("rosenna_dtanh.cuh")
    good = _dtanh_lib(tmp_path_factory.mktemp("dtanh"), text)
    broken = _dtanh_lib(tmp_path_factory.mktemp("dtanh_broken"), text.replace("2.0000000000000027", "2.0000000000010027"))
    return good, broken


def _sweep():
    """Dense on [-25, 25], log-spaced magnitudes from the smallest subnormal to 2^8, both signs."""
    dense = np.linspace(-25.0, 25.0, 1_000_001) + 1.234567e-9
    mags = np.ldexp(1.0 + np.arange(64) / 64.0, np.arange(-1074, 8)[:, None]).ravel()
    return np.concatenate([dense, mags, -mags])


def _ulps(got, x):
    want = np.tanh(x.astype(np.longdouble))
    return np.abs(got.astype(np.longdouble) - want) / np.spacing(np.abs(want.astype(np.float64)))


def test_device_tanh_within_a_few_ulp(dtanh):
    good, broken = dtanh
    x = _sweep()
    err = _ulps(good(x), x)
    assert err.max() <= DTANH_ULP, f"{err.max():.2f} ulp at x = {x[err.argmax()]!r}"
    assert _ulps(broken(x), x).max() > DTANH_ULP  # the sweep sees a wrong coefficient
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 20.0, -20.0, 1e300, -5e-324, 19.0625])
    got = good(special)
    assert np.array_equal(np.signbit(got[:2]), [False, True]) and np.all(got[:2] == 0.0)
    assert list(got[2:4]) == [1.0, -1.0] and np.isnan(got[4])
    np.testing.assert_array_equal(got[5:], np.tanh(special[5:]))


def _dmma16(h, packed, at, lane, mi, kt, ks):
    """sm_90's m16n8k(4 ks) for tiles mi, mi + 1 and k tiles kt..kt + ks - 1, gathered from the lanes
    as the PTX ISA lays out the .f64 fragments (A a_(v + 2s): row gid + 8v, column tig + 4s; B b_s:
    row tig + 4s, column gid; C c_(2v + h): row gid + 8v, column 2 tig + h): the two tiles' C
    fragments (rosenna_dmma16 in rosenna_dmma.cuh passes tile mi's values as a_(2s), mi + 1's as
    a_(2s + 1), k tile kt + s's B fragment as b_s)."""
    gid, tig = lane // 4, lane % 4
    a_mat, b_mat = np.zeros((16, 4 * ks)), np.zeros((4 * ks, 8))
    for s in range(ks):
        for v in range(2):
            a_mat[gid + 8 * v, tig + 4 * s] = h[mi + v, kt + s]
        b_mat[tig + 4 * s, gid] = packed[at(kt + s) + lane]
    c = a_mat @ b_mat
    return [np.stack([c[gid + 8 * v, 2 * tig], c[gid + 8 * v, 2 * tig + 1]]) for v in range(2)]


def emulate(layers, packed, x, tanh=np.tanh, ks=0):
    """The kernel for one warp's M tiles of 8 points, lane by lane: the fragments gathered into
    matrices from the lanes that hold them, multiplied, scattered back; ``tanh`` for Tanh layers
    (the kernel's rosenna_tanh where the test has it); ``ks`` > 0: sm_90's path with
    ROSENNA_DMMA_KS=ks (pairs of tiles, up to ks k tiles per instruction: :func:`_dmma16`)."""
    frags, biases, _ = dmma.offsets(layers)
    m = dmma.m_tiles(layers, Tuning())
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
        act = tanh if layer.act in dmma.DEVICE_FORMS else act_of(layer)
        step = 4 if ks >= 4 and kt_n % 4 == 0 else 2 if ks >= 2 and kt_n % 2 == 0 else 1  # the header's KS
        for nt in range(nt_n):
            acc = [np.stack([packed[biases[i] + 8 * nt + 2 * tig], packed[biases[i] + 8 * nt + 2 * tig + 1]])
                   for _ in range(m)]
            if ks and m % 2 == 0:
                for mi in range(0, m, 2):
                    for kt in range(0, kt_n, step):
                        c0, c1 = _dmma16(h, packed, lambda k: frags[i] + (k * nt_n + nt) * 32, lane, mi, kt, step)
                        acc[mi], acc[mi + 1] = acc[mi] + c0, acc[mi + 1] + c1
            else:
                for mi in range(m):
                    for kt in range(kt_n):
                        a_mat, b_mat = np.zeros((8, 4)), np.zeros((4, 8))
                        a_mat[gid, tig] = h[mi, kt]
                        b_mat[tig, gid] = packed[frags[i] + (kt * nt_n + nt) * 32 + lane]
                        c = a_mat @ b_mat
                        acc[mi] = acc[mi] + np.stack([c[gid, 2 * tig], c[gid, 2 * tig + 1]])
            for mi in range(m):
                out[mi, 2 * nt], out[mi, 2 * nt + 1] = act(acc[mi][0]), act(acc[mi][1])
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
def test_emulated_dmma_chain_matches_the_model(tmp_path, name, dtanh):
    _, plan = _plan(tmp_path, name)
    layers = analyse(plan).layers
    packed = dmma.packed(layers)
    points = 8 * dmma.m_tiles(layers, Tuning()) - 3  # the bounds on the warp's last rows matter
    x = np.random.default_rng(5).uniform(-3, 3, size=(points, plan.nx))
    want = evaluate(layers, x)
    got = emulate(layers, packed, x, dtanh[0])
    assert compare.compare(got, want, "float64").passed
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)  # far inside: a few ulp per tanh
    # A tanh off by more than the tolerance fails it.
    assert not compare.compare(emulate(layers, packed, x, lambda v: dtanh[0](v) + 1e-9), want, "float64").passed
    # sm_90's DMMA.16x8x{4,8,16} over pairs of tiles, from the same fragments.
    for ks in (1, 2, 4):
        np.testing.assert_allclose(emulate(layers, packed, x, dtanh[0], ks), want, rtol=1e-13, atol=1e-14)
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
    layers = analyse(plan).layers
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
    # d4's 64 tanh per thread are straight-line code (libdevice's tanh branched in each: 138 BRA).
    d4 = kernel_files[0]
    proc = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", str(d4), "-o", str(d4) + ".ptx"], capture_output=True,
                          text=True, cwd=d4.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ptx = (d4.parent / (d4.name + ".ptx")).read_text()
    body = ptx[ptx.index(".entry _Z12d4_tc_kernel"):]
    body = body[:body.index("\n}\n")]
    m = Tuning().dmma_tiles_32  # d4: every layer at most 32 wide
    assert body.count("rcp.approx.ftz.f64") == 2 * 8 * m, "one rosenna_tanh per activation: 2 layers of 8 m per lane"
    assert body.count("bra") < 32, "branches in the tanh"  # 15: the loop and the bounds


@pytest.mark.hipcc
@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
def test_dmma_kernel_files_compile_with_hipcc(kernel_files):
    import os
    env = dict(os.environ, HIP_PLATFORM="amd")
    for src in kernel_files:
        proc = subprocess.run(["hipcc", "--offload-arch=gfx90a", devflags.HIPCC, "-c", str(src), "-o", str(src) + ".hip.o"],
                              capture_output=True, text=True, cwd=src.parent, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
