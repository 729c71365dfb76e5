"""The staged FP32 wide kernel (rosenna/emit/cuda/staged.py), the default for wide MLPs up to 128 wide,
without a GPU: which models take it, a thread-by-thread numpy emulation of its data flow (stage
order, k offsets, the 8 x 8 thread tiles, epilogues, output layer) against the model evaluated
directly, ptxas's register and spill report, and the build switches (-DROSENNA_NO_TENSOR_CORES,
hipcc)."""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import devflags
from mlp_reference import ODD, act_of, custom_model, evaluate, run_packing
from rosenna import zoo
from rosenna.emit import cuda
from rosenna.emit.cuda import staged
from rosenna.generate import Options, build_plan, generate
from rosenna.strategy import analyse



def _zoo(tmp_path, name, embed=None):
    path = zoo.save(name, str(tmp_path / f"{name}.onnx"))
    return build_plan(path, Options(lang="c", embed=embed))[1]


def _custom(tmp_path, name, sizes, activations, embed=None):
    return build_plan(custom_model(tmp_path, name, sizes, activations), Options(lang="c", embed=embed))[1]


@pytest.mark.parametrize("name,takes", [("mlp128", True), ("gemm_big", False), ("gemm_small", False)])
def test_which_zoo_models_take_the_staged_kernel(tmp_path, name, takes):
    plan = _zoo(tmp_path, name)
    choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
    assert choice.staged is takes
    src = cuda.kernel_source(plan, "stamp")
    assert ("rosenna_fs_stage<" in src) is takes
    if takes:  # the 3xTF32 wide kernel is there, behind the tensor cores' guard
        assert choice.tensor_wide and "_tc_kernel" in src
    if takes or name == "gemm_big":  # the tensor cores can be switched off
        guard = "#if !defined(__HIPCC__) && !defined(ROSENNA_NO_TENSOR_CORES)\n"
        assert guard in src and src.index(guard) < src.index(f"{name}_tc_kernel(int n")
    assert "ROSENNA_TF32_WIDE" not in src


@pytest.mark.parametrize("sizes,takes", [([16, 200, 8], False),  # hidden wider than 128 columns
                                         ([16, 128, 10], False),  # output over 8
                                         ([160, 128, 8], False),  # input over 128 rows
                                         (ODD[0], True)])
def test_staged_kernel_conditions(tmp_path, sizes, takes):
    plan = _custom(tmp_path, "m", sizes, ["Relu"] * (len(sizes) - 2) + [None])
    choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
    assert choice.staged is takes
    src = cuda.kernel_source(plan, "stamp")
    assert ("rosenna_fs_stage<" in src) is takes
    # The rest keeps the FP32 tile kernel (200 wide: its shared memory is over the limit, and too
    # wide to unroll in the narrow kernel: the generic point kernel, with the wide 3xTF32 kernel
    # beside it on CUDA sm_80+).
    assert ("rosenna_tile<" in src) is (choice.kind == "mlp-wide" and not takes)
    assert choice.kind == ("point" if sizes[1] == 200 else "mlp-wide")
    assert choice.tensor_wide is (sizes[-1] <= 8)


def test_stage_table_and_layout(tmp_path):
    """mlp128: 17 stages (1 for the 16 inputs, 8 per 128-wide layer) as the design study's
    kernel, stage g at g * 2048 floats, then the biases, then the output layer."""
    plan = _zoo(tmp_path, "mlp128")
    layers = analyse(plan).layers
    layout = staged.StagedLayout(layers)
    assert layout.stages == 17 and layout.first == [0, 1, 9] and layout.ends == [0, 8, 16]
    assert layout.offsets[:3] == [(0, 34816, 128), (2048, 34944, 128), (18432, 35072, 128)]
    assert layout.offsets[3] == (35200, 35200 + 128 * 8, 8) and layout.size == 35200 + 129 * 8
    assert staged.SMEM == 51200
    src = cuda.kernel_source(plan, "stamp")
    assert "mlp128_fs_k0[17] = {0, 0, 16, 32, 48, 64, 80, 96, 112, 0, 16, 32, 48, 64, 80, 96, 112}" in src
    assert "static __device__ const __align__(16) rosenna_floats<36232> mlp128_packed " in src  # cp.async: never __constant__


def _emulate(layers, acts, packed, x, k0=None):
    """The staged kernel for one block, thread by thread: x into act[k][LDA] (rows past the
    input zeroed), stage g = packed[g * STAGE ..] read from act rows k0[g] .., each thread's
    8 x 8 tile of points 8ty.. and columns 4tx.., 64+4tx.., epilogues over act at each layer's
    last stage, then the output layer's groups of 4 columns."""
    layout = staged.StagedLayout(layers)
    k0 = layout.k0 if k0 is None else k0
    points, nx = x.shape
    assert points <= staged.POINTS
    p64 = packed.astype(np.float64)
    act = np.full((staged.WIDTH, staged.LDA), np.nan)  # shared memory is not zeroed
    act[:layout.kp[0], :staged.POINTS] = 0.0
    act[:nx, :points] = x.T
    t = np.arange(staged.THREADS)
    tx, ty = t % 16, t // 16
    cols = np.concatenate([tx[:, None] * 4 + np.arange(4), 64 + tx[:, None] * 4 + np.arange(4)], axis=1)  # [T][8]
    rows = ty[:, None] * 8 + np.arange(8)  # [T][8] points
    acc = np.zeros((staged.THREADS, 8, 8))  # [thread][i point][j column]
    ends = {end: i for i, end in enumerate(layout.ends)}
    for g in range(layout.stages):
        sw = p64[g * staged.STAGE:(g + 1) * staged.STAGE].reshape(staged.STAGE_ROWS, staged.WIDTH)
        for k in range(staged.STAGE_ROWS):
            a = act[k0[g] + k][rows]  # [T][8]
            w = sw[k][cols]  # [T][8]
            acc += a[:, :, None] * w[:, None, :]
        if g in ends:
            i = ends[g]
            bias = p64[layout.offsets[i][1]:layout.offsets[i][1] + staged.WIDTH]
            v = acts[i](acc + bias[cols][:, None, :])
            for th in range(staged.THREADS):
                act[np.ix_(cols[th], rows[th])] = v[th].T
            acc[:] = 0.0
    out = layers[-1]
    w_off, b_off, np_ = layout.offsets[-1]
    w = p64[w_off:w_off + out.k * np_].reshape(out.k, np_)
    b = p64[b_off:b_off + np_]
    y = np.full((points, out.n), np.nan)
    cg = np_ // 4
    for th in range(staged.THREADS):
        c = (th % cg) * 4
        for pp in range(th // cg, staged.POINTS, staged.THREADS // cg):
            s = act[:out.k, pp] @ w[:, c:c + 4] + b[c:c + 4]
            for j in range(4):
                if pp < points and c + j < out.n:
                    y[pp, c + j] = acts[-1](s[j])
    return y


@pytest.mark.parametrize("model", ["mlp128", "odd"])
def test_emulated_staged_kernel_matches_the_model(tmp_path, model):
    plan = _zoo(tmp_path, "mlp128") if model == "mlp128" else _custom(tmp_path, "odd", *ODD)
    choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
    assert choice.staged
    layers, packed = choice.layers, choice.packed()
    acts = [act_of(layer) for layer in layers]
    x = np.random.default_rng(5).uniform(-1, 1, size=(37, plan.nx))  # 37 < 64: points past n matter
    want = evaluate(layers, x)
    got = _emulate(layers, acts, packed, x)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7)
    # The emulation can fail: one stage offset wrong (layer 1's second stage read at its first rows).
    layout = staged.StagedLayout(layers)
    broken = list(layout.k0)
    broken[layout.first[1] + 1] = broken[layout.first[1]]
    assert not np.allclose(_emulate(layers, acts, packed, x, broken), want, atol=1e-3)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_file_loaded_packing_equals_embedded(tmp_path):
    """File-loaded models pack at init (C++ in <name>_device_upload) from the same offsets."""
    plan = _custom(tmp_path, "odd", *ODD, embed=False)
    choice = cuda.choose(plan, cuda.CONSTANT_LIMIT)
    src = cuda.source._upload(plan, choice)
    body = src[src.index("    float *packed = (float *)calloc"):src.index("    const int failed")]
    got = run_packing(tmp_path, choice.layers, "#define ROSENNA_STATUS_DEVICE 1\n", body, "packed", choice.packed_size)
    assert np.array_equal(got.view(np.uint32), choice.packed().view(np.uint32))


def _ptxas_entry(text, kernel):
    """The ptxas -v lines of one entry function: (spill line, registers)."""
    m = re.search(r"Compiling entry function '\w*" + kernel + r"\w*' for 'sm_\d+'\n.*?\n\s*(.*?)\n.*?Used (\d+) registers",
                  text)
    assert m, f"no ptxas report for {kernel}:\n{text}"
    return m.group(1), int(m.group(2))


def _nvcc(tmp_path, *flags):
    proc = subprocess.run(["nvcc", "-O2", "-arch=sm_90", "-Xptxas", "-v", *flags, "-c", "mlp128_kernel.cu", "-o", "k.o"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "file-loaded"])
def test_staged_kernel_compiles_without_spills(tmp_path, embed):
    generate(zoo.save("mlp128", str(tmp_path / "mlp128.onnx")), str(tmp_path), Options(lang="c", embed=embed))
    report = _nvcc(tmp_path)
    spills, registers = _ptxas_entry(report, "mlp128_batch_kernel")
    assert "0 bytes spill stores, 0 bytes spill loads" in spills
    assert registers <= 128  # __launch_bounds__(128, 4): four blocks per SM
    # Beside it the 3xTF32 wide kernel (the default on sm_80+), also without spills.
    spills, registers = _ptxas_entry(report, "mlp128_tc_kernel")
    assert "0 bytes spill stores, 0 bytes spill loads" in spills and registers <= 128
    # -DROSENNA_NO_TENSOR_CORES leaves the FP32 kernel alone.
    assert "mlp128_tc_kernel" not in _nvcc(tmp_path, "-DROSENNA_NO_TENSOR_CORES")


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_cp_async_only_from_sm_80(tmp_path):
    generate(zoo.save("mlp128", str(tmp_path / "mlp128.onnx")), str(tmp_path), Options(lang="c"))
    for arch, want in (("sm_75", False), ("sm_80", True)):
        subprocess.run(["nvcc", "-O2", f"-arch={arch}", "-ptx", "mlp128_kernel.cu", "-o", f"{arch}.ptx"], cwd=tmp_path,
                       check=True, capture_output=True)
        assert ("cp.async.cg.shared.global" in (tmp_path / f"{arch}.ptx").read_text()) is want


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_narrow_chain_without_tensor_cores(tmp_path):
    generate(zoo.save("gemm_big", str(tmp_path / "gemm_big.onnx")), str(tmp_path), Options(lang="c"))
    for flags, want in (([], True), (["-DROSENNA_NO_TENSOR_CORES"], False)):
        subprocess.run(["nvcc", "-O2", "-arch=sm_90", *flags, "-ptx", "gemm_big_kernel.cu", "-o", "k.ptx"],
                       cwd=tmp_path, check=True, capture_output=True)
        assert ("mma.sync" in (tmp_path / "k.ptx").read_text()) is want


@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
@pytest.mark.parametrize("model", ["mlp128", "odd"])
def test_staged_kernel_compiles_with_hipcc(tmp_path, model):
    """HIP: the staged kernel with plain loads in place of cp.async."""
    if model == "mlp128":
        path = zoo.save("mlp128", str(tmp_path / "mw.onnx"))
    else:
        import onnx

        path = str(tmp_path / "mw.onnx")
        onnx.save(zoo.mlp("mw", *ODD, seed=7), path)
    generate(path, str(tmp_path), Options(lang="c", embed=False))
    proc = subprocess.run(["hipcc", devflags.HIPCC, "--offload-arch=gfx90a", "-c", "mw_kernel.cu", "-o", "k.o"], cwd=tmp_path,
                          capture_output=True, text=True, check=False, env=dict(os.environ, HIP_PLATFORM="amd"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
