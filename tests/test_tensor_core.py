"""The tensor-core kernels (rosenna/emit/cuda/tc_chain.py, tc_wide.py), chain and wide, without a GPU: which
models take them, the fragment packing in numpy against the C++ packing file-loaded models run at
init (bit for bit), and lane-by-lane emulations of the kernels' data flow (fragments, the chain's
paired row order, the wide kernel's stage stream and per-layer epilogues, the output scatter)
against the model evaluated directly; for the wide kernel also ptxas's register and spill report
and a hipcc compile."""

import shutil
import subprocess

import numpy as np
import pytest

import devflags
from mlp_reference import ODD, act_of, custom_model, evaluate, mma3 as _mma, run_packing
from rosenna import zoo
from rosenna.emit import cuda
from rosenna.emit.cuda import staged, tc_chain, tc_wide, tf32
from rosenna.generate import Options, build_plan
from rosenna.strategy import Tuning, analyse


@pytest.fixture
def layers_of(tmp_path):
    def get(name):
        path = str(tmp_path / f"{name}.onnx")
        zoo.save(name, path)
        _, plan = build_plan(path, Options())
        return plan, analyse(plan).layers
    return get


@pytest.mark.parametrize("name,chain", [("gemm_big", True), ("gemm_small", False), ("mlp128", False)])
def test_which_models_take_the_chain(layers_of, name, chain):
    plan, _ = layers_of(name)
    assert cuda.choose(plan, cuda.CONSTANT_LIMIT).tensor_chain is chain


def test_tf32_rounds_to_nearest_ties_away():
    ulp = 2.0 ** -10  # TF32 keeps 10 mantissa bits
    x = np.array([1.0, 1.0 + ulp / 2, 1.0 + ulp / 2 - 2 ** -20, -(1.0 + ulp / 2), 3.0e-3], np.float32)
    got = tf32.tf32(x)
    assert list(got[:4]) == [1.0, 1.0 + ulp, 1.0, -(1.0 + ulp)]
    assert got[4] != x[4] and abs(got[4] - x[4]) <= x[4] * ulp / 2
    big = tf32.tf32(x)
    # big + small represents x to about 2^-22 relative: what makes 3xTF32 fp32-accurate.
    assert np.all(np.abs((big.astype(np.float64) + tf32.tf32(x - big)) - x) <= np.abs(x) * 2.0 ** -21)


def _split_values():
    rng = np.random.default_rng(9)
    normal = rng.standard_normal(20000) * np.exp2(rng.integers(-60, 60, 20000))
    special = [0.0, -0.0, 1.0, 1.0 + 2.0 ** -11, 3.4028235e38, -3.4028235e38, 1.17549435e-38, 1e-40, -1e-45,
               np.inf, -np.inf, np.nan]
    return np.concatenate([normal, special]).astype(np.float32)


def test_split_of_an_activation_is_within_2_to_the_minus_22():
    """big + small (as the tensor cores read them) is within 2^-22 |a| of a for every finite
    normal a; big alone keeps NaN and the infinities. Rounding small by truncation instead (no
    half-ulp added) would leave up to 2^-21."""
    a = _split_values()
    big, small = tf32.split(a)
    assert not (big.view(np.uint32) & np.uint32(0x1FFF)).any() and not (small.view(np.uint32) & np.uint32(0x1FFF)).any()
    finite = np.isfinite(a) & (np.abs(a) >= 1.17549435e-38) & (np.abs(a) < 3e38)
    err = np.abs(big[finite].astype(np.float64) + small[finite] - a[finite])
    assert (err <= np.abs(a[finite].astype(np.float64)) * 2.0 ** -22).all(), err.max()
    assert np.isnan(big[np.isnan(a)]).all() and (big[np.isinf(a)] == a[np.isinf(a)]).all()


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_split_in_device_code_equals_numpy(tmp_path):
    """rosenna_tf32_split, compiled for the host, gives the bits tf32.split (the emulations' split)
    gives, with the tensor cores' truncation of what they read applied to small."""
    text = tf32.device_lib()
    start = text.index("__device__ __forceinline__ void rosenna_tf32_split")
    fn = text[start:text.index("\n}\n", start) + 3]
    src = tmp_path / "split.cpp"
    src.write_text("#include <stdio.h>\n#include <string.h>\n#define __device__\n#define __forceinline__ inline\n"
                   "static unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }\n"
                   "static float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }\n"
                   f"{fn}\nint main(void)\n{{\n    float a;\n    while (fread(&a, 4, 1, stdin) == 1) {{\n"
                   "        unsigned r[2];\n        rosenna_tf32_split(a, r[0], r[1]);\n"
                   "        r[1] &= 0xffffe000u;\n        fwrite(r, 4, 2, stdout);\n    }\n    return 0;\n}\n")
    exe = tmp_path / "split"
    subprocess.run(["g++", "-O2", "-Wall", "-Werror", str(src), "-o", str(exe)], check=True)
    a = _split_values()
    got = np.frombuffer(subprocess.run([str(exe)], input=a.tobytes(), capture_output=True, check=True).stdout,
                        np.uint32).reshape(-1, 2)
    big, small = tf32.split(a)
    ok = ~np.isnan(a)  # NaN - NaN's payload is the compiler's; big is NaN either way (checked above)
    assert np.array_equal(got[ok, 0], big.view(np.uint32)[ok]) and np.array_equal(got[ok, 1], small.view(np.uint32)[ok])


def _emulate(layers, acts, packed, x):
    """The chain kernel for one warp, lane by lane (float64 arithmetic, TF32-split operands)."""
    frags, biases, frag4, _ = tc_chain.chain_offsets(layers)
    f4 = packed[:4 * frag4].reshape(-1, 4).astype(np.float64)
    bias_block = packed[4 * frag4:].astype(np.float64)
    points, nx = x.shape
    lane = np.arange(32)
    gid, tig = lane // 4, lane % 4
    # h[mi][kt] -> array [32 lanes, 4]
    kt0 = (nx + 7) // 8
    h = [[np.zeros((32, 4)) for _ in range(kt0)] for _ in range(2)]
    for mi in range(2):
        r = mi * 16 + gid
        for kt in range(kt0):
            k0, k1 = kt * 8 + tig, kt * 8 + tig + 4
            for slot, (rows, ks) in enumerate([(r, k0), (r + 8, k0), (r, k1), (r + 8, k1)]):
                ok = (ks < nx) & (rows < points)
                h[mi][kt][:, slot] = np.where(ok, x[np.minimum(rows, points - 1), np.minimum(ks, nx - 1)], 0.0)
    for i, layer in enumerate(layers):
        kt_n, nt_n = (layer.k + 7) // 8, (layer.n + 7) // 8
        out = [[None] * nt_n for _ in range(2)]
        for nt in range(nt_n):
            b = bias_block[biases[i] + nt * 8 + 2 * tig], bias_block[biases[i] + nt * 8 + 2 * tig + 1]
            for mi in range(2):
                acc = np.stack([b[0], b[1], b[0], b[1]], axis=1)
                for kt in range(kt_n):
                    frag = f4[frags[i] + (kt * nt_n + nt) * 32 + lane]  # [32, 4]: big b0, big b1, small b0, small b1
                    acc = acc + _mma(h[mi][kt], frag)
                act = acts[i]
                out[mi][nt] = np.stack([act(acc[:, 0]), act(acc[:, 2]), act(acc[:, 1]), act(acc[:, 3])], axis=1)
        h = out
    ny = layers[-1].n
    y = np.zeros((points, ny))
    for mi in range(2):
        r = mi * 16 + gid
        for nt in range(len(h[mi])):
            c = nt * 8 + 2 * tig
            for slot, (rows, cols) in enumerate([(r, c), (r + 8, c), (r, c + 1), (r + 8, c + 1)]):
                ok = (cols < ny) & (rows < points)
                y[rows[ok], cols[ok]] = h[mi][nt][ok, slot]
    return y


def test_emulated_chain_matches_the_model(layers_of):
    plan, layers = layers_of("gemm_big")
    packed = tc_chain.chain_packed(layers)
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, size=(27, plan.nx))  # 27 < 32: the bounds on the warp's last rows matter
    got = _emulate(layers, [act_of(layer) for layer in layers], packed, x)
    want = evaluate(layers, x)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    # The emulation can fail: unpaired rows for layer 1 (what the C fragments do not give) break it.
    broken = packed.copy()
    frags, _, _, _ = tc_chain.chain_offsets(layers)
    n1 = (layers[1].k + 7) // 8 * ((layers[1].n + 7) // 8) * 32 * 4
    broken[4 * frags[1]:4 * frags[1] + n1] = tf32.pack_layer(
        layers[1].w, (layers[1].k + 7) // 8 * 8, (layers[1].n + 7) // 8 * 8, paired=False)
    assert not np.allclose(_emulate(layers, [act_of(layer) for layer in layers], broken, x), want, atol=1e-3)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_host_packing_in_cpp_equals_numpy(layers_of, tmp_path):
    """File-loaded models pack on the host at init (C++ in <name>_device_upload); embedded ones at
    generate time (numpy). They must agree bit for bit."""
    _, layers = layers_of("gemm_big")
    size = tc_chain.chain_bytes(layers) // 4
    body = f"    float *tc = (float *)calloc({size}, sizeof(float));\n" + tc_chain.host_packing(layers)
    got = run_packing(tmp_path, layers, tf32.host_tf32(body), body, "tc", size)
    want = tc_chain.chain_packed(layers)
    assert got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))


# -- the wide kernel (mlp-wide chains up to 128 wide) ----------------------------------------------

def _custom(tmp_path, name, sizes, activations, embed=None):
    _, plan = build_plan(custom_model(tmp_path, name, sizes, activations), Options(lang="c", embed=embed))
    return plan, analyse(plan).layers


@pytest.mark.parametrize("name,wide", [("mlp128", True), ("gemm_big", False), ("gemm_small", False)])
def test_which_zoo_models_take_the_wide_kernel(layers_of, name, wide):
    plan, _ = layers_of(name)
    choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
    assert choice.tensor_wide is wide
    assert not (choice.tensor_wide and choice.tensor_chain)


@pytest.mark.parametrize("sizes,wide", [([16, 200, 8], True),  # 256-column blocks
                                        ([16, 160, 8], True),  # the FP32 tiled kernel beside it
                                        ([16, 600, 8], False),  # wider than 512
                                        ([16, 48, 48, 8], False),  # hidden under 64: the chain's
                                        ([16, 128, 10], False),  # output wider than one n8 tile
                                        ([160, 128, 8], True),  # input up to the width: 160 -> 192 columns
                                        (ODD[0], True)])
def test_wide_kernel_conditions(tmp_path, sizes, wide):
    plan, _ = _custom(tmp_path, "m", sizes, ["Relu"] * (len(sizes) - 2) + [None])
    choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
    if sizes == [16, 160, 8]:
        assert choice.kind == "mlp-wide"  # the FP32 tiled kernel keeps it
    assert choice.tensor_wide is wide
    src = cuda.kernel_source(plan, "stamp")
    assert ("_tc_kernel" in src) is (wide or choice.tensor_chain)
    assert "m_batch_kernel" in src  # the FP32 kernel stays: HIP and pre-sm_80 GPUs


@pytest.mark.parametrize("sizes,points", [([5, 64, 64, 3], 16), ([5, 48, 48, 3], 32), ([5, 40, 64, 3], 16)])
def test_chain_points_per_warp(tmp_path, sizes, points):
    """Layers over 48 wide: one 16-row tile per warp (half the accumulator registers); else two.
    The kernel's loop, its fragments and the launch's points per block agree."""
    plan, layers = _custom(tmp_path, "pw", sizes, ["Sigmoid"] * (len(sizes) - 2) + [None])
    choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
    assert choice.tensor_chain and tc_chain.points_per_warp(layers) == points
    src = cuda.kernel_source(plan, "stamp")
    kernel = src[src.index("_tc_kernel(int n"):]
    warps = plan.tuned.chain_warps
    assert f"a warp carries {points} points" in src
    assert f"* {points}; base < n; base += (long)gridDim.x * {warps * points})" in kernel
    assert f"float h0[{points // 16}][" in kernel and f"for (int mi = 0; mi < {points // 16}; ++mi)" in kernel
    per_block = warps * points
    assert f"const long wanted = ((long)n + {per_block - 1}) / {per_block};" in src


def _emulate_wide(layers, acts, packed, x, tuning=Tuning()):
    """The wide kernel for one block of a persistent grid of one block, warp by warp and lane by
    lane, for its block shape (tc_wide.WideShape): per tile of points, x into act[p][lda], the
    stage stream through two buffers (stage g = fragments g * stage4 ..; the buffer that holds it
    flips every stage, and the last stage of a tile prefetches stage 0 for the next one), each
    stage's products summed from zero and added to the accumulators, per-layer epilogues over act,
    the output MMA by the first points / 16 warps. The tuning's wide_k_order "paired": x staged
    into act permuted within each k8 tile (tc_wide.x_column), the A fragments read from columns
    2tig, 2tig+1 instead of tig, tig+4."""
    layout = tc_wide.WideLayout(layers, tuning)
    shape = layout.shape

    def a_cols(base):  # the act columns of a0 / a1 and of a2 / a3 of the k8 tile at column base
        return (base + 2 * tig, base + 2 * tig + 1) if shape.paired else (base + tig, base + tig + 4)

    f4 = packed[:4 * layout.frag4].reshape(-1, 4).astype(np.float64)
    points, nx = x.shape
    lane = np.arange(32)
    gid, tig = lane // 4, lane % 4
    nt_all = shape.width // 8
    warps = shape.wm * shape.wn
    ny = layers[-1].n
    y = np.full((points, ny), np.nan)
    ends = {first + count - 1: i for i, (first, count) in enumerate(zip(layout.first, layout.count))}

    def fetch(g):  # what cp.async brings for stage g
        buf = f4[g * shape.stage4:(g + 1) * shape.stage4]
        if shape.compact:  # 8 bytes per lane and tile, split by the kernel (rosenna_tcw_b or _w)
            buf = tf32.unpack_compact(buf.astype(np.float32).reshape(-1, 2), shape.form)
        return buf

    # Shared memory is not zeroed: NaN shows any read of a column the kernel did not write.
    act = np.full((shape.points, shape.lda), np.nan)
    buffers = [fetch(0), None]
    slot = 0
    tiles = (points + shape.points - 1) // shape.points
    for tile in range(tiles):
        p0, again = tile * shape.points, tile + 1 < tiles
        count = min(shape.points, points - p0)
        act[:, :layout.kp[0]] = 0.0
        k = np.arange(nx)  # (the kernel's expression of the column, C and Python alike)
        act[:count, eval(tc_wide.x_column("k", shape.paired))] = x[p0:p0 + count]
        acc = np.zeros((warps, 2, shape.ni, 32, 4))
        for g in range(layout.stages):
            k0 = layout.k0[g]
            buffers[slot ^ 1] = fetch(g + 1) if g + 1 < layout.stages else fetch(0) if again else None
            buf = buffers[slot]
            for warp in range(warps):
                wm, wn = warp // shape.wn, warp % shape.wn
                a = [[None, None] for _ in range(shape.ks)]
                for kt in range(shape.ks):
                    lo, hi = a_cols(k0 + kt * 8)
                    for mi in range(2):
                        r = wm * 32 + mi * 16 + gid
                        a[kt][mi] = np.stack([act[r, lo], act[r + 8, lo], act[r, hi], act[r + 8, hi]], axis=1)
                for ni in range(shape.ni):
                    for mi in range(2):
                        t = np.zeros((32, 4))
                        for kt in range(shape.ks):
                            t += _mma(a[kt][mi], buf[(kt * nt_all + wn * shape.ni + ni) * 32 + lane])
                        acc[warp, mi, ni] += t
            if g in ends:  # epilogue: every warp has read act (barrier), then overwrites its tile
                i = ends[g]
                for warp in range(warps):
                    wm, wn = warp // shape.wn, warp % shape.wn
                    for ni in range(shape.ni):
                        c = (wn * shape.ni + ni) * 8 + 2 * tig
                        b0, b1 = packed[layout.bias[i] + c], packed[layout.bias[i] + c + 1]
                        for mi in range(2):
                            r = wm * 32 + mi * 16 + gid
                            v = acc[warp, mi, ni]
                            act[r, c], act[r, c + 1] = acts[i](v[:, 0] + b0), acts[i](v[:, 1] + b1)
                            act[r + 8, c], act[r + 8, c + 1] = acts[i](v[:, 2] + b0), acts[i](v[:, 3] + b1)
                acc[:] = 0.0
            slot ^= 1
        for warp in range(shape.points // 16):
            r = warp * 16 + gid
            c = np.zeros((32, 4))
            for kt in range(layout.out_kt):
                lo, hi = a_cols(kt * 8)
                a = np.stack([act[r, lo], act[r + 8, lo], act[r, hi], act[r + 8, hi]], axis=1)
                c += _mma(a, f4[layout.out_frag4 + kt * 32 + lane])
            col = 2 * tig
            bias = packed[layout.bias[-1]:layout.bias[-1] + 8].astype(np.float64)
            for k, (rows, cols) in enumerate([(r, col), (r, col + 1), (r + 8, col), (r + 8, col + 1)]):
                ok = (cols < ny) & (rows < count)
                y[p0 + rows[ok], cols[ok]] = acts[-1](c[ok, k] + bias[cols[ok]])
    return y


#: Wide models of every block shape (tc_wide.WideShape): widths, activations, and the padded width.
WIDE_SHAPES = {"odd96": ([7, 96, 90, 5], ["Tanh", "Sigmoid", None], 96),
               "w200": ([9, 200, 170, 4], ["Tanh", "Sigmoid", None], 256),
               "w300": ([6, 300, 260, 2], ["Sigmoid", "Tanh", None], 384)}


@pytest.mark.parametrize("model", ["mlp128", "odd", *WIDE_SHAPES])
def test_emulated_wide_kernel_matches_the_model(layers_of, tmp_path, model):
    if model == "mlp128":
        plan, layers = layers_of("mlp128")
    elif model == "odd":
        plan, layers = _custom(tmp_path, "odd", *ODD)
    else:
        sizes, acts, width = WIDE_SHAPES[model]
        plan, layers = _custom(tmp_path, model, sizes, acts)
        assert tc_wide.WideLayout(layers).shape.width == width
    assert cuda.choose(plan, cuda.CONSTANT_LIMIT).tensor_wide
    packed = tc_wide.wide_packed(layers)
    acts = [act_of(layer) for layer in layers]
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, size=(37, plan.nx))  # 37 < 64: rows past the point count matter
    want = evaluate(layers, x)
    got = _emulate_wide(layers, acts, packed, x)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7)
    # The emulation can fail: the chain's paired row order in the hidden layers breaks it.
    layout = tc_wide.WideLayout(layers)
    broken = packed.copy()
    start = 4 * layout.shape.stage4 * layout.first[-1]
    last_hidden = layers[len(layers) - 2]
    pack = tf32.pack_compact if layout.shape.compact else tf32.pack_layer
    paired = pack(last_hidden.w, layout.kp[-1], layout.shape.width, paired=True)
    assert paired.size == 4 * layout.shape.stage4 * layout.count[-1]
    broken[start:start + paired.size] = paired
    assert not np.allclose(_emulate_wide(layers, acts, broken, x), want, atol=1e-3)
    if layout.shape.compact:  # and the compact fragments read as 16-byte ones break it
        wide = tf32.pack_layer(last_hidden.w, layout.kp[-1], layout.shape.width, paired=False)
        broken = packed.copy()
        broken[start:start + paired.size] = wide[:paired.size]
        assert not np.allclose(_emulate_wide(layers, acts, broken, x), want, atol=1e-3)


KPAIRED = Tuning(wide_k_order="paired")


@pytest.mark.parametrize("model", ["mlp128", "odd", "w300", "odd-weight"])
def test_paired_k_order_matches_the_model(layers_of, tmp_path, model):
    """wide_k_order "paired": the A fragments read from columns 2tig, 2tig+1 (x staged permuted)
    against the paired rows: the model's results, within what the fragment order gives (the same
    products; float64 sums here, so they differ only by the sums' order), for 16-byte and
    compact (w300; odd-weight: compact ones holding the weights, at every width) fragments; the
    fragment order's array read this way breaks it. mlp128: the
    array is the warp routine's paired packing (tc_chain.chain_packed) bit for bit, one copy for
    both, and the 8 outputs are onnxruntime's within verify's tolerance."""
    base = WEIGHT if model.endswith("-weight") else Tuning()
    tuning, model = base.replace(wide_k_order="paired"), model.split("-")[0]
    if model == "mlp128":
        plan, layers = layers_of("mlp128")
    elif model == "odd":
        plan, layers = _custom(tmp_path, "odd", *ODD)
    else:
        plan, layers = _custom(tmp_path, model, *WIDE_SHAPES[model][:2])
    layout = tc_wide.WideLayout(layers, tuning)
    assert layout.shape.paired and layout.shape.lda % 32 == 8 and layout.shape.compact is (model == "w300" or base is WEIGHT)
    packed = tc_wide.wide_packed(layers, tuning)
    acts = [act_of(layer) for layer in layers]
    x = np.random.default_rng(7).uniform(-1, 1, size=(37, plan.nx))
    want = evaluate(layers, x)
    got = _emulate_wide(layers, acts, packed, x, tuning)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7)
    fragment = _emulate_wide(layers, acts, tc_wide.wide_packed(layers, base), x, base)
    np.testing.assert_allclose(got, fragment, rtol=1e-12, atol=1e-13)
    broken = tc_wide.wide_packed(layers, base)
    assert not np.allclose(_emulate_wide(layers, acts, broken, x, tuning), want, atol=1e-3)
    if model == "mlp128":
        assert np.array_equal(packed.view(np.uint32), tc_chain.chain_packed(layers).view(np.uint32))
        ort = pytest.importorskip("onnxruntime")
        path = str(tmp_path / "mlp128.onnx")
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        ref = session.run(None, {session.get_inputs()[0].name: x.astype(np.float32)})[0]
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_emulated_wide_kernel_runs_on_across_tiles_of_points(tmp_path):
    """A persistent block takes one tile of points after another, its weight stream running on:
    7 stages (an odd count, so the buffer holding stage 0 alternates between tiles), 137 points
    (a full tile and 9 more): every output as the model gives it."""
    plan, layers = _custom(tmp_path, "odd96", *WIDE_SHAPES["odd96"][:2])
    layout = tc_wide.WideLayout(layers)
    assert layout.stages % 2 == 1 and layout.shape.points == 128
    x = np.random.default_rng(8).uniform(-1, 1, size=(137, plan.nx))
    got = _emulate_wide(layers, [act_of(layer) for layer in layers], tc_wide.wide_packed(layers), x)
    np.testing.assert_allclose(got, evaluate(layers, x), rtol=2e-6, atol=2e-7)


#: Compact fragments that hold the weights themselves, for every width (the tuning that makes
#: mlp128's kernel file hold its 3xTF32 weights in 8 bytes each).
WEIGHT = Tuning(wide_compact_from=1, compact_fragments="weight")


@pytest.mark.parametrize("model", ["odd"])
def test_compact_weight_fragments_give_the_16_byte_operands(layers_of, tmp_path, model):
    """compact_fragments "weight": the kernel's split of each 8-byte fragment (numpy's
    unpack_compact, which test_tcw_w_in_device_code_equals_numpy ties to rosenna_tcw_w) is the
    16-byte fragment's four numbers, bit for bit, stage by stage, so the emulated kernel gives the
    16-byte kernel's results exactly, and the model's: the odd MLP (5-100-120-3, padded columns and
    rows; mlp128's form is tests/test_warp_tc.py's mlp128-weight)."""
    layers = layers_of("mlp128")[1] if model == "mlp128" else _custom(tmp_path, model, *ODD)[1]
    wide16 = Tuning(wide_compact_from=1 << 20)
    layout, layout16 = tc_wide.WideLayout(layers, WEIGHT), tc_wide.WideLayout(layers, wide16)
    assert layout.shape.compact and not layout16.shape.compact and layout.first == layout16.first
    packed, packed16 = tc_wide.wide_packed(layers, WEIGHT), tc_wide.wide_packed(layers, wide16)
    frags = tf32.unpack_compact(packed[:4 * layout.out_frag4].reshape(-1, 2), "weight")
    assert layout.shape.ks == layout16.shape.ks  # the same rows per stage: the same fragments in the same order
    assert np.array_equal(frags.view(np.uint32), packed16[:4 * layout16.out_frag4].reshape(-1, 4).view(np.uint32))
    assert np.array_equal(packed[4 * layout.out_frag4:].view(np.uint32), packed16[4 * layout16.out_frag4:].view(np.uint32))
    acts = [act_of(layer) for layer in layers]
    x = np.random.default_rng(6).uniform(-1, 1, size=(37, layers[0].k))
    got = _emulate_wide(layers, acts, packed, x, WEIGHT)
    assert np.array_equal(got, _emulate_wide(layers, acts, packed16, x, wide16))
    np.testing.assert_allclose(got, evaluate(layers, x), rtol=2e-6, atol=2e-7)
    # The emulation tells the forms apart: the same numbers split as sums (rosenna_tcw_b) miss.
    assert not np.array_equal(_emulate_wide(layers, acts, packed, x, WEIGHT.replace(compact_fragments="sum")), got)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_tcw_w_in_device_code_equals_numpy(tmp_path):
    """rosenna_tcw_w, compiled for the host, splits every weight (normal, tiny, huge, zero) into
    the numbers tf32.unpack_compact(..., "weight") gives once the tensor cores' truncation of what
    they read is applied: pack_layer's big = tf32(w) and small = tf32(w - big)."""
    text = tf32.device_lib()
    start = text.index("template <int = 0>\n__device__ __forceinline__ float4 rosenna_tcw_w")
    fn = text[start:text.index("\n}\n", start) + 3]
    src = tmp_path / "tcw.cpp"
    src.write_text("#include <stdio.h>\n#include <string.h>\n#define __device__\n#define __forceinline__ inline\n"
                   "struct float2 { float x, y; };\nstruct float4 { float x, y, z, w; };\n"
                   "static float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }\n"
                   "static unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }\n"
                   "static float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }\n"
                   f"{fn}\nint main(void)\n{{\n    float2 w;\n    while (fread(&w, 4, 2, stdin) == 2) {{\n"
                   "        const float4 b = rosenna_tcw_w(w);\n        unsigned r[4];\n        memcpy(r, &b, 16);\n"
                   "        for (int i = 0; i < 4; ++i)\n            r[i] &= 0xffffe000u;  /* what the tensor cores read */\n"
                   "        fwrite(r, 4, 4, stdout);\n    }\n    return 0;\n}\n")
    exe = tmp_path / "tcw"
    subprocess.run(["g++", "-O2", "-std=c++17", "-Wall", "-Werror", str(src), "-o", str(exe)], check=True)
    a = _split_values()
    a = a[np.isfinite(a) & (np.abs(a) < 3e38)]  # (rounding the largest up overflows, in both)
    a = a[:a.size // 2 * 2].reshape(-1, 2)
    got = np.frombuffer(subprocess.run([str(exe)], input=a.tobytes(), capture_output=True, check=True).stdout,
                        np.uint32).reshape(-1, 4)
    want = tf32.unpack_compact(a, "weight")
    assert np.array_equal(got, want.view(np.uint32))
    w = a.reshape(-1)
    assert np.array_equal(want[:, :2].reshape(-1).view(np.uint32), tf32.tf32(w).view(np.uint32))
    assert np.array_equal(want[:, 2:].reshape(-1).view(np.uint32), tf32.tf32(w - tf32.tf32(w)).view(np.uint32))


def test_wide_stage_table_and_layout(layers_of):
    """mlp128: 17 stages (1 for the 16 inputs, 8 per 128-wide layer), as the design study's
    kernel; the emitted k0 table restarts at each layer."""
    plan, layers = layers_of("mlp128")
    layout = tc_wide.WideLayout(layers)
    assert layout.stages == 17 and layout.first == [0, 1, 9] and layout.out_frag4 == 17 * 1024
    src = cuda.kernel_source(plan, "stamp")
    assert "mlp128_tc_k0[17] = {0, 0, 16, 32, 48, 64, 80, 96, 112, 0, 16, 32, 48, 64, 80, 96, 112}" in src
    assert layout.shape.smem == 100352  # two blocks per SM on sm_90 (227 KB)
    assert src.index("#if !defined(__HIPCC__)") < src.index("mlp128_tc_kernel")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("model", ["mlp128", "odd", "w300", "odd-weight", "w300-kpaired"])
def test_wide_host_packing_in_cpp_equals_numpy(layers_of, tmp_path, model):
    """Bit for bit, the 16-byte fragments, (w300, 384 wide) the compact ones, and compact ones that
    hold the weights themselves (odd-weight: compact_fragments "weight" at every width), and compact
    ones in the paired k order (w300-kpaired: wide_k_order "paired")."""
    tuning = WEIGHT if model.endswith("-weight") else KPAIRED if model.endswith("-kpaired") else Tuning()
    model = model.split("-")[0]
    if model == "mlp128":
        layers = layers_of("mlp128")[1]
    else:
        layers = _custom(tmp_path, model, *(ODD if model == "odd" else WIDE_SHAPES[model][:2]))[1]
    assert tc_wide.WideLayout(layers, tuning).shape.compact is (model == "w300" or tuning is WEIGHT)
    size = tc_wide.WideLayout(layers, tuning).size
    body = f"    float *tc = (float *)calloc({size}, sizeof(float));\n" + tc_wide.host_packing(layers, tuning=tuning)
    assert ("rosenna_host_compact(" in body) is (model == "w300")
    got = run_packing(tmp_path, layers, tf32.host_tf32(body), body, "tc", size)
    want = tc_wide.wide_packed(layers, tuning)
    assert got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))


def _ptxas_entry(text, kernel):
    """The ptxas -v lines of one entry function: (spill line, registers)."""
    import re

    m = re.search(r"Compiling entry function '\w*" + kernel + r"\w*' for 'sm_\d+'\n.*?\n\s*(.*?)\n.*?Used (\d+) registers",
                  text)
    assert m, f"no ptxas report for {kernel}:\n{text}"
    return m.group(1), int(m.group(2))


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
@pytest.mark.parametrize("model,embed", [("mlp128", True), ("mlp128", False), ("w300", False), ("mlp128-kpaired", False)],
                         ids=["embedded", "file-loaded", "512-block", "paired-k-order"])
def test_wide_kernel_compiles_without_spills(tmp_path, model, embed):
    from rosenna.generate import generate

    tuning = KPAIRED if model.endswith("-kpaired") else Tuning()  # (wide_k_order "paired")
    model = model.split("-")[0]
    if model == "mlp128":
        path = zoo.save("mlp128", str(tmp_path / "mlp128.onnx"))
    else:  # 64 points x 16 warps, 8-row stages
        path = custom_model(tmp_path, model, *WIDE_SHAPES[model][:2])
    generate(path, str(tmp_path), Options(lang="c", embed=embed, name="mw", tuning=tuning))
    proc = subprocess.run(["nvcc", "-O2", "-arch=sm_90", "-Xptxas", "-v", "-c", "mw_kernel.cu", "-o", "k.o"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spills, registers = _ptxas_entry(proc.stdout + proc.stderr, "mw_tc_kernel")
    assert "0 bytes spill stores, 0 bytes spill loads" in spills
    assert registers <= 128  # two 256-thread blocks per SM, or one of 512 threads


@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
def test_wide_kernel_file_compiles_with_hipcc(tmp_path):
    """HIP has no mma.sync: the tensor-core code is compiled out and the FP32 kernel remains."""
    import os

    from rosenna.generate import generate

    for name in ("mlp128", "w200"):  # the staged FP32 kernel; the generic point kernel (200 wide)
        path = zoo.save(name, str(tmp_path / f"{name}.onnx")) if name == "mlp128" else \
            custom_model(tmp_path, name, *WIDE_SHAPES[name][:2])
        generate(path, str(tmp_path), Options(lang="c", embed=False))
    proc = subprocess.run(["hipcc", devflags.HIPCC, "--offload-arch=gfx90a", "-c", "mlp128_kernel.cu", "w200_kernel.cu"],
                          cwd=tmp_path,
                          capture_output=True, text=True, check=False, env=dict(os.environ, HIP_PLATFORM="amd"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
