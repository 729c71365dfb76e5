"""The 3xTF32 implicit-GEMM convs of the CUDA whole-field path (rosenna/emit/cuda/conv_igemm.py).

No GPU here: :func:`emulate` runs the kernel's data flow in numpy lane by lane, as
rosenna/data/rosenna_igemm.cuh and the generated ``<name>_igemm<k>`` write it (the warp tiles and
which of them skip the bounds checks, each lane's im2col gather including strides, pads,
dilations and padded channels, the packed B fragments of :func:`igemm_pack.packed`, the 3xTF32
split and the m16n8k8 fragment layouts, the partial sums, the epilogue's pixel and channel), and
its outputs are compared with onnxruntime's Conv under verify's tolerance. Reads are of the flat
input buffer, surrounded by NaN, without bounds checks where the kernel makes none: a wrong index
or a wrongly interior tile gives a wrong value or a NaN. The generated kernel file compiles with
nvcc for sm_90 and with hipcc for gfx90a (where the direct loops run).
"""

import os
import shutil
import subprocess

import numpy as np
import pytest

from rosenna import compare
from rosenna.emit.cuda import igemm_pack, tf32
from rosenna.emit.cuda.source import kernel_source
from rosenna.generate import Options, build_plan
from rosenna.strategy import Tuning
from rosenna.strategy.field import convs as field_convs, fusion
from tests import op_models

#: (C, H, W, COUT, kernel, strides, pads [top, left, bottom, right], dilations, Relu after)
GEOMETRIES = {
    "unet_level": (8, 16, 16, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False),
    "strided_odd": (6, 13, 11, 12, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),
    "dilated_5x4": (5, 9, 10, 10, (5, 4), (1, 1), (4, 3, 4, 2), (2, 2), True),
    "pointwise_wide": (32, 6, 5, 20, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), False),
    "channel_groups": (12, 10, 9, 72, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),
    "small_field": (16, 4, 4, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),
}


def _model(path, geometry, seed=0):
    c, h, w, cout, k, strides, pads, dil, relu = geometry
    return op_models.conv(path, c, h, w, cout, k, strides, pads, dil, act="Relu" if relu else None, seed=seed)


def _conv(tmp_path, name):
    """The plan of a one-Conv model and its implicit-GEMM phase."""
    path = _model(str(tmp_path / f"{name}.onnx"), GEOMETRIES[name])
    _, plan = build_plan(path, Options(name=name))
    sched = fusion.schedule(plan)
    convs = field_convs.choose_igemm(sched)
    assert len(convs) == 1, "the conv should take the implicit GEMM"
    return path, sched.plan, next(iter(convs.values()))


def _mma(a, b, d):
    """``mma.sync.m16n8k8`` per warp: lane fragments a [T, 32, 4] and b [T, 32, 2] (what the tensor cores
    read: TF32 values) into d [T, 32, 4], fp32 accumulation. Layouts as rosenna/emit/cuda/tf32.py
    lists them: A 16x8 a0 (gid, tig), a1 (gid+8, tig), a2 (gid, tig+4), a3 (gid+8, tig+4);
    B 8x8 b0 (tig, gid), b1 (tig+4, gid); C c0 (gid, 2tig), c1 (gid, 2tig+1), c2 (gid+8, 2tig), c3 (gid+8, 2tig+1)."""
    lane = np.arange(32)
    gid, tig = lane // 4, lane % 4
    A = np.zeros((a.shape[0], 16, 8))
    A[:, gid, tig], A[:, gid + 8, tig], A[:, gid, tig + 4], A[:, gid + 8, tig + 4] = (a[..., i] for i in range(4))
    B = np.zeros((a.shape[0], 8, 8))
    B[:, tig, gid], B[:, tig + 4, gid] = b[..., 0], b[..., 1]
    D = A @ B
    c = np.stack([D[:, gid, 2 * tig], D[:, gid, 2 * tig + 1], D[:, gid + 8, 2 * tig], D[:, gid + 8, 2 * tig + 1]], -1)
    return (d + c).astype(np.float32)


def emulate(conv, fragments, bias, relu, x, products=3):
    """The outputs [samples, COUT, OH, OW] of ``<name>_igemm<k>`` on x [samples, C, H, W] (see the
    module), with ``products`` of the 3xTF32 MMAs (1: big x big only)."""
    s = conv.shape
    samples = x.shape[0]
    pad = 1 << 16
    memory = np.full(x.size + 2 * pad, np.nan, np.float32)  # the input buffer, NaN around it
    memory[pad:pad + x.size] = x.reshape(-1)
    F = fragments.reshape(s.kt, s.ns, 32, 4)
    lane = np.arange(32)
    gid, tig = lane // 4, lane % 4
    tiles = np.arange(samples * s.tiles)
    sample, t = tiles // s.tiles, tiles % s.tiles
    group, ty, tx = t % s.ng, t // s.ng // s.tx, t // s.ng % s.tx
    ty0, ty1, tx0, tx1 = s.interior
    check = ~((ty >= ty0) & (ty <= ty1) & (tx >= tx0) & (tx <= tx1))[:, None]
    base = pad + sample[:, None] * (s.c * s.h * s.w) + tig[None, :] * (s.h * s.w)
    iy, ix = {}, {}
    for mt in range(s.mt):
        for h in range(2):
            r = mt * 16 + gid + 8 * h
            oy, ox = ty[:, None] * s.wy + r // s.wx, tx[:, None] * s.wx + r % s.wx
            inside = ~check | ((oy < s.oh) & (ox < s.ow))
            iy[mt, h] = np.where(inside, oy * s.sh - s.ph, -(1 << 24))
            ix[mt, h] = np.where(inside, ox * s.sw - s.pw, -(1 << 24))
    acc = np.zeros((s.mt, s.nt, len(tiles), 32, 4), np.float32)
    for k0 in range(0, s.kt, s.partial):
        part = np.zeros_like(acc)
        for kt in range(k0, min(k0 + s.partial, s.kt)):
            a = np.zeros((s.mt, len(tiles), 32, 4), np.float32)
            for half in range(2):
                kk = kt * 8 + 4 * half
                tap, c0 = kk // s.cp, kk % s.cp
                ky, kx = tap // s.kw, tap % s.kw
                channel = (s.c % 4 == 0) | (c0 + tig < s.c)
                if tap >= s.kh * s.kw:
                    continue
                for mt in range(s.mt):
                    for h in range(2):
                        y, xx = iy[mt, h] + ky * s.dh, ix[mt, h] + kx * s.dw
                        ok = ~check | ((y >= 0) & (y < s.h) & (xx >= 0) & (xx < s.w))
                        ok &= channel[None, :]
                        index = np.where(ok, base + c0 * (s.h * s.w) + y * s.w + xx, 0)
                        a[mt, :, :, 2 * half + h] = np.where(ok, memory[index], 0.0)
            big, small = tf32.split(a)
            for nt in range(s.nt):
                b = F[kt][group * s.nt + nt]  # [tiles, 32, 4]: each warp its group's fragments
                for mt in range(s.mt):
                    if products == 3:
                        part[mt, nt] = _mma(small[mt], b[..., 0:2], part[mt, nt])
                        part[mt, nt] = _mma(big[mt], b[..., 2:4], part[mt, nt])
                    part[mt, nt] = _mma(big[mt], b[..., 0:2], part[mt, nt])
        acc = (acc + part).astype(np.float32)
    out = np.full((samples, s.cout, s.oh, s.ow), np.nan, np.float32)
    for mt in range(s.mt):
        for nt in range(s.nt):
            for r in range(4):
                row = mt * 16 + gid + 8 * (r // 2)
                oy, ox = ty[:, None] * s.wy + row // s.wx, tx[:, None] * s.wx + row % s.wx
                co = group[:, None] * 8 * s.nt + nt * 8 + 2 * tig + r % 2
                keep = (oy < s.oh) & (ox < s.ow) & (co < s.cout)
                v = acc[mt, nt, :, :, r] + bias[np.minimum(co, s.cout - 1)]
                v = np.maximum(v, 0) if relu else v
                smp = np.broadcast_to(sample[:, None], oy.shape)
                out[smp[keep], co[keep], oy[keep], ox[keep]] = v[keep]
    return out


def _reference(path, x):
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"x": x[i:i + 1]})[0] for i in range(x.shape[0])])


def _bias(plan, conv):
    ident = plan.storage[conv.window["b"]][1]
    return next(w.array for w in plan.weights if w.ident == ident)


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_emulated_kernel_matches_onnxruntime(tmp_path, name):
    path, plan, conv = _conv(tmp_path, name)
    s = conv.shape
    x = np.random.default_rng(1).standard_normal((2, s.c, s.h, s.w)).astype(np.float32)
    want = _reference(path, x)
    got = emulate(conv, igemm_pack.packed(plan, conv), _bias(plan, conv), GEOMETRIES[name][-1], x)
    tol = compare.tolerance_for(np.float32)
    bad = ~(np.abs(got - want) <= tol.at(want))
    where = np.argwhere(bad)
    assert not bad.any(), (f"{name}: {bad.sum()} of {want.size} outside {tol}; first at {tuple(where[0])}: "
                           f"got {got[tuple(where[0])]}, want {want[tuple(where[0])]}")


def test_one_tf32_product_is_not_enough(tmp_path):
    """The emulation tells the split apart: big x big alone (1xTF32) misses verify's tolerance."""
    path, plan, conv = _conv(tmp_path, "unet_level")
    s = conv.shape
    x = np.random.default_rng(1).standard_normal((1, s.c, s.h, s.w)).astype(np.float32)
    want = _reference(path, x)
    got = emulate(conv, igemm_pack.packed(plan, conv), _bias(plan, conv), False, x, products=1)
    assert (np.abs(got - want) > compare.tolerance_for(np.float32).at(want)).any()


def test_tiles_and_interior():
    """The tiling of the U-Net's levels: 4x8 tiles of 64x64, 4x4 of 4x4; interior tiles are those
    whose 3x3 taps stay inside; 64 and 72 output channels in groups of 4 n8 tiles."""
    s = field_convs.Shape(8, 64, 64, 8, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1)
    assert (s.wx, s.wy, s.mt, s.tiles, s.kt, s.nt, s.interior) == (8, 4, 2, 128, 9, 1, (1, 14, 1, 6))
    s = field_convs.Shape(8, 4, 4, 8, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1)
    assert (s.wx, s.wy, s.mt, s.tiles, s.interior) == (4, 4, 1, 1, (0, -1, 0, -1))
    s = field_convs.Shape(64, 64, 64, 64, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1)
    assert (s.nt, s.ng, s.ns, s.mt, s.kt, s.tiles) == (4, 2, 8, 2, 72, 256)
    s = field_convs.Shape(12, 10, 9, 72, 10, 9, 3, 3, 1, 1, 1, 1, 1, 1)
    assert (s.nt, s.ng, s.ns) == (4, 3, 12)  # 72 channels: 9 n8 tiles in 3 groups of 4, padded to 12


def test_rule_keeps_small_and_grouped_convs(tmp_path):
    """The tuning's igemm_min_k and igemm_min_cout: the U-Net's first (1 channel in, K = 9) and last
    (1 channel out) convs keep the direct loops, the 8 -> 8 ones take the implicit GEMM."""
    _, plan = build_plan(os.path.join("examples", "surrogates", "poisson_guess", "pguess.onnx"), Options(name="u"))
    sched = fusion.schedule(plan)
    convs = field_convs.choose_igemm(sched)
    notes = [sched.phases[k].notes[0] for k in convs]
    assert len(convs) == 8 and all("Conv" in n for n in notes)
    assert not any("down.0" in n or "out_Conv" in n for n in notes)
    window = convs[min(convs)].window
    assert field_convs.igemm_eligible(dict(window, group=2)) == "grouped"
    assert "under" in field_convs.igemm_eligible(dict(window, w_shape=(8, 1, 3, 3)))


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_host_packing_in_cpp_equals_numpy(tmp_path):
    """File-loaded weights are packed in C++ at init (``<name>_device_upload``), embedded ones in
    numpy when the file is generated: bit for bit the same (odd channels, 5x4 taps, padded K)."""
    _, plan, conv = _conv(tmp_path, "dilated_5x4")
    size = conv.shape.kt * conv.shape.nt * 128
    decls = "\n".join(f"static const float w{i}[] = {{{', '.join(repr(float(v)) + 'f' for v in w.array)}}};"
                      for i, w in enumerate(plan.weights))
    src = tmp_path / "pack.cpp"
    src.write_text(tf32.host_tf32() + "#include <stdio.h>\n#include <stdlib.h>\n" + decls +
                   f"\nint main(void)\n{{\n    const float *host[] = {{{', '.join(f'w{i}' for i in range(len(plan.weights)))}}};\n"
                   f"    float *b = (float *)calloc({size}, sizeof(float));\n{igemm_pack.host_packing(plan, conv)}\n"
                   f"    fwrite(b, sizeof(float), {size}, stdout);\n    return 0;\n}}\n")
    subprocess.run(["g++", "-O2", "-Wall", "-Werror", str(src), "-o", str(tmp_path / "pack")], check=True)
    got = np.frombuffer(subprocess.run([str(tmp_path / "pack")], capture_output=True, check=True).stdout, np.float32)
    want = igemm_pack.packed(plan, conv)
    assert got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.fixture(scope="module")
def kernel_file(tmp_path_factory):
    """A file-loaded one-conv model's kernel file (the fragments packed in <name>_device_upload)."""
    d = tmp_path_factory.mktemp("igemm_cu")
    path = _model(str(d / "cv.onnx"), GEOMETRIES["strided_odd"])
    _, plan = build_plan(path, Options(name="cv", infer_one=True, embed=False))
    from rosenna import emit

    (d / "rosenna_rt.h").write_text(emit.runtime_header())
    (d / "cv_kernel.cu").write_text(kernel_source(plan, "test"))
    return d


@pytest.mark.nvcc
@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_kernel_file_compiles_for_sm90(kernel_file):
    text = (kernel_file / "cv_kernel.cu").read_text()
    assert "cv_igemm0<<<" in text and "rosenna_igemm_tile<" in text
    assert "cudaMemcpyToSymbol(cv_igemm0_b, b, " in text
    proc = subprocess.run(["nvcc", "-c", "-arch=sm_90", "-I", str(kernel_file), str(kernel_file / "cv_kernel.cu"),
                           "-o", str(kernel_file / "cv.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.hipcc
@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
def test_kernel_file_compiles_for_gfx90a(kernel_file):
    proc = subprocess.run(["hipcc", "-c", "--offload-arch=gfx90a", "-I", str(kernel_file), "-x", "hip",
                           str(kernel_file / "cv_kernel.cu"), "-o", str(kernel_file / "cv_hip.o")],
                          capture_output=True, text=True, env=dict(os.environ, HIP_PLATFORM="amd"))
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("prefer", [False, True])
def test_launched_form_for_implicit_gemm_calls(tmp_path, monkeypatch, prefer):
    """The tuning's igemm_prefer_launches: <name>_run skips the persistent kernel from the first call size at
    which an implicit GEMM takes a phase (the tuning's igemm_min_rows output pixels x samples)."""
    path = _model(str(tmp_path / "cv.onnx"), GEOMETRIES["channel_groups"])
    _, plan = build_plan(path, Options(name="cv", infer_one=True, tuning=Tuning().replace(igemm_prefer_launches=prefer)))
    text = kernel_source(plan, "test")
    run = text[text.index("static int cv_run("):]
    first = -(-Tuning().igemm_min_rows // (10 * 9))
    line = f"    if (count >= {first} && cv_igemm_usable())"
    assert (line in run) == prefer and "if (needed > resident)" in run
    if prefer:
        assert run.index(line) < run.index("if (needed > resident)")
    assert f"if (count >= {first} && cv_igemm_usable())\n        cv_igemm0<<<" in text
