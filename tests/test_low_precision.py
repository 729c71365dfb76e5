"""``--precision bf16`` / ``fp16`` without a GPU: the rounding (against PyTorch's conversions), which
kernels take a low-precision chain and why the others do not, the refusals, the 16-bit chain's
fragment packing (numpy against the C++ of file-loaded models, bit for bit), a lane-by-lane
emulation of its mma.sync m16n8k16 data flow against the host's arithmetic, the host build (C)
against PyTorch's own bf16/fp16 error on the same inputs, and nvcc (sm_80, sm_90) and hipcc
compiles of the kernel file."""

import shutil
import subprocess

from dataclasses import replace

import numpy as np
import onnx
import pytest

from mlp_reference import activation, activation_mlp
from rosenna import cli, zoo
from rosenna.compare import low_precision_tolerance
from rosenna.emit.cuda import tc_lowp
from rosenna.errors import UsageError
from rosenna.generate import Options, build_plan, generate
from rosenna.passes.low_precision import round_to
from rosenna.strategy import analyse, decide

torch = pytest.importorskip("torch")

TORCH_TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
#: The test models: (sizes, activations as activation_mlp spells them).
SHAPES = {
    "silu": ([5, 64, 64, 3], ["SiLU", "SiLU", None]),
    "tanh": ([7, 40, 40, 5], ["Tanh", "Tanh", None]),
    "one": ([40, 3], ["Sigmoid"]),  # no hidden layer; an activation on the output; three k16 tiles of input
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> .onnx path: mlp128 (zoo), the SiLU MLP, an odd-width Tanh MLP, one Sigmoid layer."""
    folder = tmp_path_factory.mktemp("lowp")
    paths = {"mlp128": str(folder / "mlp128.onnx")}
    zoo.save("mlp128", paths["mlp128"])
    for name, (sizes, acts) in SHAPES.items():
        paths[name] = activation_mlp(folder / f"{name}.onnx", sizes, acts, name=name)
    return paths


def _layers(path, precision, **options):
    _, plan = build_plan(path, Options(lang="c", precision=precision, **options))
    return plan, analyse(plan).layers


def _float_layers(path):
    """(W [n][k], b, act, act's op name) per layer of the model file, float32 as written (no rounding)."""
    _, plan = build_plan(path, Options(lang="c"))
    return [(layer.w, layer.b, activation(layer.act, layer.attrs), layer.act) for layer in analyse(plan).layers]


def _host_model(layers, x, precision):
    """What the host code computes under ``precision``: x and each hidden output rounded, weights
    rounded, sums and activations in float32 (float64 sums rounded once: within the float32 sum's
    own rounding)."""
    h = round_to(x, precision)
    for i, (w, b, act, *_) in enumerate(layers):
        v = (h.astype(np.float64) @ round_to(w, precision).T.astype(np.float64) + round_to(b, precision)).astype(np.float32)
        h = act(v.astype(np.float64)).astype(np.float32)
        if i < len(layers) - 1:
            h = round_to(h, precision)
    return h


def _torch(layers, x, precision):
    """The model in PyTorch at ``precision`` (weights, activations and every op's result in the type)."""
    t = TORCH_TYPES[precision]
    acts = {"Tanh": torch.tanh, "Relu": torch.relu, "Sigmoid": torch.sigmoid, "Swish": torch.nn.functional.silu,
            None: lambda v: v}
    h = torch.tensor(x).to(t)
    for w, b, _, name in layers:
        h = acts[name](torch.nn.functional.linear(h, torch.tensor(w).to(t), torch.tensor(b).to(t)))
    return h.float().numpy().astype(np.float64)


def _exact(layers, x):
    h = x.astype(np.float64)
    for w, b, act, _ in layers:
        h = act(h @ w.T.astype(np.float64) + b)
    return h


# -- the rounding ---------------------------------------------------------------------------------

@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_rounding_equals_pytorchs(precision):
    """Ties to even, subnormals, overflow to inf, NaN, signed zeros: as torch converts."""
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    ties = (np.arange(-2000, 2000, dtype=np.int64).astype(np.uint32) << np.uint32(16)) | np.uint32(0x8000)
    special = np.array([0.0, -0.0, 1e-40, -3e-39, 65504.0, 65520.0, 65519.0, 6e-8, 3e-8, 3.0000001e-8, 1e30, 3.4e38,
                        3.3961776e38, np.inf, -np.inf], np.float32)
    v = np.concatenate([bits.view(np.float32), ties.view(np.float32), special])
    v = v[~np.isnan(v)]
    want = torch.tensor(v).to(TORCH_TYPES[precision]).float().numpy()
    got = round_to(v, precision)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.isnan(round_to(np.array([np.nan], np.float32), precision)).all()


# -- the strategy and the refusals ----------------------------------------------------------------

@pytest.mark.parametrize("name,points", [("mlp128", 16), ("silu", 16), ("tanh", 16)])
def test_low_precision_chains_take_the_16_bit_kernel(models, name, points):
    plan, layers = _layers(models[name], "bf16")
    s = decide(plan)
    assert (s.tensor.chosen, s.batched.chosen, s.routine.chosen, s.offload.chosen) == \
        ("tc-lowp", "point", "routine-point", "offload-loops")
    rejected = {r.name: r.reasons for r in s.batched.rejected}
    assert "without the bf16 rounding" in rejected["mlp-narrow"][0]
    assert tc_lowp.points_per_warp(layers, plan.tuned) == points
    # Two 16-row tiles per warp up to the tuned width (64 covers silu and tanh, not mlp128).
    wide = replace(plan.tuned, lowp_two_tiles_width=64)
    assert tc_lowp.points_per_warp(layers, wide) == (16 if name == "mlp128" else 32)
    # The float32 plan of the same model is untouched: the FP32 kernels and 3xTF32 as before.
    plan32, _ = _layers(models[name], None)
    assert plan32.low_precision is None and decide(plan32).tensor.chosen != "tc-lowp"
    assert "tc-lowp" in {r.name for r in decide(plan32).tensor.rejected}


def test_too_wide_a_chain_falls_back_with_the_reason(tmp_path):
    path = activation_mlp(tmp_path / "w.onnx", [4, 160, 2], ["Relu", None])
    plan, _ = _layers(path, "fp16")
    s = decide(plan)
    assert s.tensor.chosen == "" and s.batched.chosen == "point"
    assert dict((r.name, r.reasons) for r in s.tensor.rejected)["tc-lowp"] == ("a layer 160 wide, over 128",)
    info = "\n".join(s.lines())
    assert "not tc-lowp: a layer 160 wide, over 128" in info


def test_refusals_are_one_line_exit_2(models, tmp_path, capsys):
    f64 = tmp_path / "f64.onnx"
    onnx.save(zoo.mlp("f64", [3, 8, 2], ["Tanh", None], dtype=np.float64), str(f64))
    assert cli.main(["generate", str(f64), "--precision", "bf16", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "the model is float64; bf16 and fp16 take a float32 model" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Tanh", ["x"], ["y"])], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "t.onnx"))
    with pytest.raises(UsageError, match="no dense layer"):
        build_plan(str(tmp_path / "t.onnx"), Options(precision="fp16"))
    with pytest.raises(SystemExit) as exc:  # argparse's choices
        cli.main(["generate", models["silu"], "--precision", "int8", "--out", str(tmp_path / "o")])
    assert exc.value.code == 2 and "choose from 'single', 'double', 'bf16', 'fp16'" in capsys.readouterr().err


def test_float32_output_is_unchanged_and_low_precision_is_stamped(models, tmp_path):
    plan32, _ = _layers(models["silu"], None)
    plan, _ = _layers(models["silu"], "bf16")
    assert plan32.hash != plan.hash
    _, files = generate(models["silu"], str(tmp_path), Options(lang="c", precision="fp16"))
    text = open([f for f in files if f.endswith(".c")][0]).read()
    assert "precision=fp16" in text.splitlines()[0] and "low-precision rounding" in text


# -- the kernel: packing and a lane-by-lane emulation ---------------------------------------------

def _decode(words, precision):
    """The 16-bit halves of uint32 words -> float32 [..., 2] (low half first)."""
    halves = np.stack([words & np.uint32(0xFFFF), words >> np.uint32(16)], axis=-1)
    if precision == "bf16":
        return (halves << np.uint32(16)).astype(np.uint32).view(np.float32)
    return halves.astype(np.uint16).view(np.float16).astype(np.float32)


def _pack(lo, hi, precision):
    return tc_lowp.bits16(round_to(lo, precision), precision) | (tc_lowp.bits16(round_to(hi, precision), precision)
                                                                 << np.uint32(16))


def _emulate(layers, acts, words, x, precision, mt):
    """One warp of <name>_tc_kernel, lane by lane: A and B fragments decoded from their 16-bit
    halves, each k16 MMA summed exactly and added to the float32 accumulator, the C fragments
    activated and packed as the next layer's A fragments, the last layer's scattered to y."""
    frags, biases, _ = tc_lowp.offsets(layers)
    bias_block = words.view(np.float32)
    points, nx = x.shape
    lane = np.arange(32)
    gid, tig = lane // 4, lane % 4
    h = []
    for mi in range(mt):
        r = mi * 16 + gid
        tiles = []
        for kt in range(tc_lowp.tiles16(nx)):
            k = kt * 16 + 2 * tig
            regs = np.zeros((32, 4), np.uint32)
            for q in range(4):
                row, col = r + 8 * (q % 2), k + 8 * (q // 2)
                val = [np.where((col + j < nx) & (row < points),
                                x[np.minimum(row, points - 1), np.minimum(col + j, nx - 1)], 0.0).astype(np.float32)
                       for j in range(2)]
                regs[:, q] = _pack(val[0], val[1], precision)
            tiles.append(regs)
        h.append(tiles)
    for i, layer in enumerate(layers):
        kt_n, nt_n = tc_lowp.tiles16(layer.k), tc_lowp.tiles8(layer.n)
        acc = np.zeros((mt, nt_n, 32, 4), np.float32)
        for nt in range(nt_n):
            b0 = bias_block[biases[i] + nt * 8 + 2 * tig]
            b1 = bias_block[biases[i] + nt * 8 + 2 * tig + 1]
            acc[:, nt] = np.stack([b0, b1, b0, b1], axis=1)
        for kt in range(kt_n):
            for nt in range(nt_n):
                e = frags[i] + 2 * ((kt * nt_n + nt) * 32 + lane)
                b = _decode(np.stack([words[e], words[e + 1]], axis=1), precision)  # [32, 2 regs, 2 halves]
                bm = np.zeros((16, 8))
                for j in range(2):
                    bm[2 * tig + j, gid] = b[:, 0, j]
                    bm[2 * tig + 8 + j, gid] = b[:, 1, j]
                for mi in range(mt):
                    a = _decode(h[mi][kt], precision)  # [32, 4 regs, 2 halves]
                    am = np.zeros((16, 16))
                    for j in range(2):
                        am[gid, 2 * tig + j], am[gid + 8, 2 * tig + j] = a[:, 0, j], a[:, 1, j]
                        am[gid, 2 * tig + 8 + j], am[gid + 8, 2 * tig + 8 + j] = a[:, 2, j], a[:, 3, j]
                    c = am @ bm
                    d = np.stack([c[gid, 2 * tig], c[gid, 2 * tig + 1], c[gid + 8, 2 * tig], c[gid + 8, 2 * tig + 1]], 1)
                    acc[mi, nt] = (acc[mi, nt].astype(np.float64) + d).astype(np.float32)
        act = lambda v, f=acts[i]: f(v.astype(np.float64)).astype(np.float32)  # noqa: E731
        if i < len(layers) - 1:
            h = []
            for mi in range(mt):
                tiles = []
                for j in range((nt_n + 1) // 2):
                    regs = np.zeros((32, 4), np.uint32)
                    regs[:, 0] = _pack(act(acc[mi, 2 * j, :, 0]), act(acc[mi, 2 * j, :, 1]), precision)
                    regs[:, 1] = _pack(act(acc[mi, 2 * j, :, 2]), act(acc[mi, 2 * j, :, 3]), precision)
                    if 2 * j + 1 < nt_n:
                        regs[:, 2] = _pack(act(acc[mi, 2 * j + 1, :, 0]), act(acc[mi, 2 * j + 1, :, 1]), precision)
                        regs[:, 3] = _pack(act(acc[mi, 2 * j + 1, :, 2]), act(acc[mi, 2 * j + 1, :, 3]), precision)
                    tiles.append(regs)
                h.append(tiles)
    ny = layers[-1].n
    y = np.full((points, ny), np.nan, np.float32)
    for mi in range(mt):
        r = mi * 16 + gid
        for nt in range(tc_lowp.tiles8(ny)):
            c = nt * 8 + 2 * tig
            for slot, (rows, cols) in enumerate([(r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1)]):
                ok = (cols < ny) & (rows < points)
                y[rows[ok], cols[ok]] = act(acc[mi, nt, ok, slot])
    return y


@pytest.mark.parametrize("name,precision", [("silu", "bf16"), ("tanh", "fp16"), ("mlp128", "bf16"), ("one", "fp16")])
def test_emulated_kernel_computes_the_hosts_rounding(models, name, precision):
    plan, layers = _layers(models[name], precision)
    mt = tc_lowp.points_per_warp(layers, plan.tuned) // 16
    acts = [activation(layer.act, layer.attrs) for layer in layers]
    words = tc_lowp.packed(layers, precision)
    rng = np.random.default_rng(5)
    x = rng.uniform(-2, 2, size=(16 * mt - 3, plan.nx)).astype(np.float32)  # the warp's last rows past n
    got = _emulate(layers, acts, words, x, precision, mt)
    want = _host_model([(layer.w, layer.b, act, layer.act) for layer, act in zip(layers, acts)], x, precision)
    # The same roundings of the same values: equal but where a float32 sum in another order moves a
    # hidden value across a rounding boundary of the type (one unit in its last place).
    scale = np.abs(want).max()
    ulp = 2.0 ** -8 if precision == "bf16" else 2.0 ** -11
    assert np.abs(got - want).max() <= 4 * ulp * scale, np.abs(got - want).max()
    assert np.mean(np.abs(got - want) <= 1e-6 * scale) > 0.8
    # The emulation can fail: b0 and b1 swapped (rows k+8.. for k..) break it.
    broken = words.copy()
    frags, biases, _ = tc_lowp.offsets(layers)
    end = frags[1] if len(layers) > 1 else biases[0]
    pairs = broken[frags[0]:end].reshape(-1, 2)
    broken[frags[0]:end] = pairs[:, ::-1].reshape(-1)
    assert not np.allclose(_emulate(layers, acts, broken, x, precision, mt), want, atol=1e-2 * scale)


def _nvcc():
    return shutil.which("nvcc")


def _cuda_include():
    """The folder holding cuda_bf16.h (the CUDA toolkit's include), or None."""
    import os

    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda", "/opt/cuda"):
        if root and os.path.isfile(os.path.join(root, "include", "cuda_bf16.h")):
            return os.path.join(root, "include")
    return None


@pytest.mark.skipif(shutil.which("g++") is None or _cuda_include() is None, reason="needs g++ and the CUDA headers")
def test_host_packing_in_cpp_equals_numpy(models, tmp_path):
    """File-loaded models pack on the host at init (C++ with the CUDA headers' conversions),
    embedded ones at generate time (numpy): bit for bit, bf16 and fp16, unrounded weights too."""
    parts, sizes, wants = [], [], []
    for k, (name, precision) in enumerate((("tanh", "bf16"), ("silu", "fp16"))):
        _, layers = _layers(models[name], precision)
        layers = [type(layer)(**{**layer.__dict__, "w": layer.w * np.float32(1.0 + 2 ** -12),
                                 "w_index": 2 * i, "b_index": 2 * i + 1}) for i, layer in enumerate(layers)]
        size = tc_lowp.offsets(layers)[2]
        host = []
        for i, layer in enumerate(layers):
            for j, arr in enumerate((layer.w.reshape(-1), layer.b)):
                host.append(f"static const float m{k}_{2 * i + j}[] = {{{', '.join(repr(float(v)) + 'f' for v in arr)}}};")
        ptrs = ", ".join(f"m{k}_{i}" for i in range(2 * len(layers)))
        parts.append("\n".join(host) + f"""
static void pack{k}(void)
{{
    const float *host[] = {{{ptrs}}};
    unsigned *tc = (unsigned *)calloc({size}, sizeof(unsigned));
{tc_lowp.host_packing(layers, precision)}
    fwrite(tc, sizeof(unsigned), {size}, stdout);
    free(tc);
}}""")
        sizes.append(size)
        wants.append(tc_lowp.packed([type(layer)(**{**layer.__dict__, "w": round_to(layer.w, precision)})
                                     for layer in layers], precision))
    src = tmp_path / "pack.cpp"
    src.write_text("#include <stdio.h>\n#include <stdlib.h>\n" + tc_lowp.host_helper("bf16") + tc_lowp.host_helper("fp16")
                   + "\n".join(parts) + "\nint main(void)\n{\n    pack0();\n    pack1();\n    return 0;\n}\n")
    exe = tmp_path / "pack"
    subprocess.run(["g++", "-O1", "-Wall", "-Werror", "-I", _cuda_include(), str(src), "-o", str(exe)], check=True)
    got = np.frombuffer(subprocess.run([str(exe)], capture_output=True, check=True).stdout, np.uint32)
    assert np.array_equal(got[:sizes[0]], wants[0]) and np.array_equal(got[sizes[0]:], wants[1])


# -- compiles -------------------------------------------------------------------------------------

@pytest.mark.skipif(_nvcc() is None, reason="needs nvcc")
def test_kernel_file_compiles_for_sm_80_and_sm_90_without_spills(models, tmp_path):
    """File-loaded kernel files, warnings as errors, the three compiles at once: bf16 whole (host
    side too) for sm_90 and its device code for sm_80, fp16 whole for sm_80; ptxas reports no spill."""
    import re

    jobs = []
    for precision, arch, whole in (("bf16", "90", True), ("bf16", "80", False), ("fp16", "80", True)):
        folder = tmp_path / precision
        if not folder.exists():
            generate(models["silu"], str(folder), Options(lang="c", precision=precision, embed=False))
        out = ["-c", "-o", str(folder / "k.o")] if whole else ["-cubin", "-o", str(folder / "k.cubin")]
        cmd = [_nvcc(), "-std=c++17", "-O3", "-Xcompiler", "-Wall,-Wextra", "-Werror", "all-warnings", "-Xptxas", "-v",
               f"-arch=sm_{arch}", "-I", str(folder), str(folder / "silu_kernel.cu"), *out]
        jobs.append((precision, arch, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    for precision, arch, job in jobs:
        _, err = job.communicate()
        assert job.returncode == 0, err[-3000:]
        report = re.search(r"Compiling entry function '\w*silu_tc_kernel\w*' for 'sm_(\d+)'\n.*?\n\s*(.*?)\n.*?Used "
                           r"(\d+) registers", err)
        assert report and report.group(1) == arch, err[-2000:]
        assert "0 bytes spill stores" in report.group(2) and int(report.group(3)) <= 255
        kind = "bf16.bf16" if precision == "bf16" else "f16.f16"
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.f32" in (tmp_path / precision / "silu_kernel.cu").read_text()


@pytest.mark.skipif(shutil.which("hipcc") is None, reason="needs hipcc")
def test_kernel_file_compiles_with_hipcc(models, tmp_path):
    """HIP has no mma.sync: the 16-bit chain is left out (its guard) and the per-point kernel, which
    rounds as the host does, is what hipcc compiles."""
    generate(models["silu"], str(tmp_path), Options(lang="c", precision="bf16", embed=False))
    run = subprocess.run(["hipcc", "-x", "hip", "--offload-arch=gfx90a", "-O1", "-Werror", "-I", str(tmp_path), "-c",
                          str(tmp_path / "silu_kernel.cu"), "-o", str(tmp_path / "k.o")],
                         capture_output=True, text=True, env={**__import__("os").environ, "HIP_PLATFORM": "amd"})
    assert run.returncode == 0, run.stderr[-3000:]


# -- the host build against PyTorch ---------------------------------------------------------------

def _host_build(path, folder, precision, x):
    """The generated C library's ``<name>_infer_batch`` on ``x`` (gcc, the verify flags' -O2)."""
    plan, _ = generate(path, str(folder), Options(lang="c", precision=precision))
    n = plan.name
    (folder / "run.c").write_text(f"""#include <stdio.h>
#include <stdlib.h>
#include "{n}.h"
int main(int argc, char **argv)
{{
    const int count = atoi(argv[1]);
    float *x = malloc(sizeof(float) * count * {plan.nx}), *y = malloc(sizeof(float) * count * {plan.ny});
    if (fread(x, sizeof(float) * {plan.nx}, count, stdin) != (size_t)count || {n}_infer_batch(count, x, y, NULL) != 0)
        return 1;
    fwrite(y, sizeof(float) * {plan.ny}, count, stdout);
    return 0;
}}
""")
    exe = folder / "run"
    subprocess.run(["gcc", "-O2", "-I", str(folder), str(folder / "run.c"), str(folder / f"{n}.c"), "-o", str(exe), "-lm"],
                   check=True)
    out = subprocess.run([str(exe), str(len(x))], input=x.tobytes(), capture_output=True, check=True).stdout
    return np.frombuffer(out, np.float32).reshape(len(x), plan.ny).astype(np.float64)


#: (model, precision) pairs of the comparison with PyTorch.
AGAINST_TORCH = [("mlp128", "bf16"), ("mlp128", "fp16"), ("silu", "bf16"), ("silu", "fp16"), ("tanh", "bf16")]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_host_error_is_no_more_than_pytorchs(models, tmp_path):
    """The generated C (``_infer_batch``) and PyTorch's model in the same type, on the same inputs,
    against float64: rosenna's relative L2 error is at most PyTorch's; its largest error is within
    the tolerance verify uses (a third of it), and far over float32's (the rounding happens); and
    it is what the emulated GPU kernel computes, up to a unit in the type's last place."""
    rng = np.random.default_rng(11)
    for name, precision in AGAINST_TORCH:
        layers = _float_layers(models[name])
        x = rng.uniform(-1, 1, size=(1024, layers[0][0].shape[1])).astype(np.float32)
        exact = _exact(layers, x)
        ours = _host_build(models[name], tmp_path / f"{name}_{precision}", precision, x)
        theirs = _torch(layers, x, precision)
        l2 = lambda got: np.linalg.norm(got - exact) / np.linalg.norm(exact)  # noqa: E731
        assert l2(ours) <= l2(theirs), (name, precision, l2(ours), l2(theirs))
        worst = np.abs(ours - exact).max()
        tol, _ = low_precision_tolerance(precision, len(layers), max(w.shape[1] for w, *_ in layers))
        assert 100 * np.finfo(np.float32).eps * np.abs(exact).max() < worst < tol.for_output(exact).atol / 3
        np.testing.assert_allclose(ours, _host_model(layers, x, precision), rtol=0,
                                   atol=2 ** (-7 if precision == "bf16" else -10) * np.abs(exact).max())


# -- the gate -------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_gate_rows_for_bf16_pass_on_the_host(tmp_path):
    """gpu-gate --precision bf16 in host fallback: the rows say bf16, pass under the bf16 tolerance,
    and their error is bf16's (far over float32's tolerance: the gated code rounds)."""
    import json

    out = tmp_path / "gate"
    assert cli.main(["gpu-gate", "--host-fallback", "--model", "gemm_big", "--precision", "bf16", "--points", "64",
                     "--fc", "none", "--weights", "embedded", "--acc-flags", "", "--out", str(out)]) == 0
    report = json.loads((out / "gate-report.json").read_text())
    assert report["pass"] and report["precision"] == "bf16"
    assert {r["weights"] for r in report["rows"]} == {"embedded bf16"}
    assert all(r["status"] == "PASS" and 1e-4 < r["max_abs_err"] < 2e-2 for r in report["rows"]), report["rows"]
    assert "generated with --precision bf16" in (out / "gate-report.md").read_text()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_verify_reports_the_precision_and_its_tolerance(models, capsys):
    assert cli.main(["verify", models["silu"], "--precision", "fp16", "--lang", "c", "--entry", "infer_batch"]) == 0
    out = capsys.readouterr().out
    assert "precision fp16" in out and "float16's: eps 0.000976562 x 3 dense layer(s)" in out
    assert "*max|want|" in out and out.rstrip().endswith("PASS")
