"""The tensor-core chain kernel (rosenna/emit/tensor_core.py) without a GPU: which models take
it, the fragment packing in numpy against the C++ packing file-loaded models run at init (bit for
bit), and a lane-by-lane emulation of the kernel's data flow (fragments, the paired row order that
chains layers in registers, the output scatter) against the model evaluated directly."""

import shutil
import subprocess

import numpy as np
import pytest

from rosenna import zoo
from rosenna.emit import cuda, tensor_core
from rosenna.generate import Options, build_plan


@pytest.fixture
def layers_of(tmp_path):
    def get(name):
        path = str(tmp_path / f"{name}.onnx")
        zoo.save(name, path)
        _, plan = build_plan(path, Options())
        return plan, cuda.mlp_layers(plan)
    return get


@pytest.mark.parametrize("name,chain", [("gemm_big", True), ("gemm_small", False), ("mlp128", False)])
def test_which_models_take_the_chain(layers_of, name, chain):
    plan, _ = layers_of(name)
    assert cuda.KernelChoice(plan, cuda.CONSTANT_LIMIT).tensor_chain is chain


def test_tf32_rounds_to_nearest_ties_away():
    ulp = 2.0 ** -10  # TF32 keeps 10 mantissa bits
    x = np.array([1.0, 1.0 + ulp / 2, 1.0 + ulp / 2 - 2 ** -20, -(1.0 + ulp / 2), 3.0e-3], np.float32)
    got = tensor_core.tf32(x)
    assert list(got[:4]) == [1.0, 1.0 + ulp, 1.0, -(1.0 + ulp)]
    assert got[4] != x[4] and abs(got[4] - x[4]) <= x[4] * ulp / 2
    big = tensor_core.tf32(x)
    # big + small represents x to about 2^-22 relative: what makes 3xTF32 fp32-accurate.
    assert np.all(np.abs((big.astype(np.float64) + tensor_core.tf32(x - big)) - x) <= np.abs(x) * 2.0 ** -21)


def _emulate(layers, acts, packed, x):
    """The chain kernel for one warp, lane by lane (float64 arithmetic, TF32-split operands)."""
    frags, biases, frag4, _ = tensor_core.chain_offsets(layers)
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
                    # A 16x8 and B 8x8 as matrices, from the lanes that hold them.
                    a_mat, b_mat = np.zeros((16, 8)), np.zeros((8, 8))
                    a_mat[gid, tig], a_mat[gid + 8, tig] = h[mi][kt][:, 0], h[mi][kt][:, 1]
                    a_mat[gid, tig + 4], a_mat[gid + 8, tig + 4] = h[mi][kt][:, 2], h[mi][kt][:, 3]
                    b_mat[tig, gid] = frag[:, 0] + frag[:, 2]
                    b_mat[tig + 4, gid] = frag[:, 1] + frag[:, 3]
                    c = a_mat @ b_mat
                    acc = acc + np.stack([c[gid, 2 * tig], c[gid, 2 * tig + 1], c[gid + 8, 2 * tig],
                                          c[gid + 8, 2 * tig + 1]], axis=1)
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


ACTS = {None: lambda v: v, "Relu": lambda v: np.maximum(v, 0.0), "Sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
        "Tanh": np.tanh}


def test_emulated_chain_matches_the_model(layers_of):
    plan, layers = layers_of("gemm_big")
    packed = tensor_core.chain_packed(layers)
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, size=(27, plan.nx))  # 27 < 32: the bounds on the warp's last rows matter
    got = _emulate(layers, [ACTS[layer.act] for layer in layers], packed, x)
    want = x
    for layer in layers:
        want = ACTS[layer.act](want @ layer.w.T.astype(np.float64) + layer.b)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    # The emulation can fail: unpaired rows for layer 1 (what the C fragments do not give) break it.
    broken = packed.copy()
    frags, _, _, _ = tensor_core.chain_offsets(layers)
    n1 = (layers[1].k + 7) // 8 * ((layers[1].n + 7) // 8) * 32 * 4
    broken[4 * frags[1]:4 * frags[1] + n1] = tensor_core._pack_layer(
        layers[1].w, (layers[1].k + 7) // 8 * 8, (layers[1].n + 7) // 8 * 8, paired=False)
    assert not np.allclose(_emulate(layers, [ACTS[layer.act] for layer in layers], broken, x), want, atol=1e-3)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_host_packing_in_cpp_equals_numpy(layers_of, tmp_path):
    """File-loaded models pack on the host at init (C++ in <name>_device_upload); embedded ones at
    generate time (numpy). They must agree bit for bit."""
    _, layers = layers_of("gemm_big")
    size = tensor_core.chain_bytes(layers) // 4
    decls, ptrs = [], []
    for i, layer in enumerate(layers):
        for j, arr in enumerate((layer.w.reshape(-1), layer.b)):
            vals = ", ".join(repr(float(v)) + "f" for v in np.asarray(arr, np.float32))
            decls.append(f"static const float w{2 * i + j}[] = {{{vals}}};")
            ptrs.append(f"w{2 * i + j}")
    src = tmp_path / "pack.cpp"
    src.write_text(tensor_core.HOST_TF32 + "#include <stdio.h>\n#include <stdlib.h>\n" + "\n".join(decls) + f"""
int main(void)
{{
    const float *host[] = {{{", ".join(ptrs)}}};
    float *tc = (float *)calloc({size}, sizeof(float));
{tensor_core.host_packing(layers)}
    fwrite(tc, sizeof(float), {size}, stdout);
    return 0;
}}
""")
    exe = tmp_path / "pack"
    subprocess.run(["g++", "-O2", "-Wall", "-Werror", str(src), "-o", str(exe)], check=True)
    got = np.frombuffer(subprocess.run([str(exe)], capture_output=True, check=True).stdout, np.float32)
    want = tensor_core.chain_packed(layers)
    assert got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))
