"""Generated CUDA carries no unused device helper or weight copy: a kernel file compiles with
nvcc's warnings as errors, in the batched compile and in the per-point routine's
(``-DROSENNA_DEVICE_ROUTINE``), for the models whose routines take the warp bodies (mlp128) and
the plain one-thread body (gemm_small); file-loaded weights (host packing code) too."""

import shutil
import subprocess

import pytest

from rosenna import generate as gen, zoo

pytestmark = [pytest.mark.nvcc, pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")]


@pytest.mark.parametrize("model, options, flags", [
    ("mlp128", {"infer_one": True}, ["-DROSENNA_DEVICE_ROUTINE", "-rdc=true"]),
    ("gemm_small", {}, ["-DROSENNA_DEVICE_ROUTINE", "-rdc=true"]),
    ("gemm_small", {}, []),
    ("mlp128", {"embed": False}, ["-c"]),
])
def test_kernel_file_compiles_without_warnings(tmp_path, model, options, flags):
    path = zoo.save(model, str(tmp_path / f"{model}.onnx"))
    gen.generate(path, str(tmp_path / "gen"), gen.Options(lang="c", **options))
    kernel = tmp_path / "gen" / f"{model}_kernel.cu"
    mode = ["-c"] if "-c" in flags else ["-ptx"]
    proc = subprocess.run(["nvcc", "-arch=sm_90", *mode, "--Werror", "all-warnings", "-Xcudafe", "--display_error_number",
                           *[f for f in flags if f != "-c"], "-I", str(tmp_path / "gen"), str(kernel), "-o", str(tmp_path / "k.o")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if model == "mlp128" and options.get("embed", True):
        # the FP32 warp body reads the one-thread body's copy (the same layout at these widths)
        text = kernel.read_text()
        assert "mlp128_rwarp" not in text and "rosenna_warp_layer<8, 8, rt_act1>(mlp128_rpacked + 2176" in text


def test_compact_packing_brings_its_helper(tmp_path):
    """The host's compact-fragment rounding comes with the packing that calls it (a file-loaded
    512-wide MLP, whose wide kernel's fragments are compact) and not without it."""
    import onnx

    sizes = [16, 512, 512, 8]
    onnx.save(zoo.mlp("w512", sizes, ["Relu", "Relu", None], seed=5), str(tmp_path / "w512.onnx"))
    gen.generate(str(tmp_path / "w512.onnx"), str(tmp_path / "gen"), gen.Options(lang="c", embed=False))
    text = (tmp_path / "gen" / "w512_kernel.cu").read_text()
    assert "rosenna_host_compact(v0)" in text and text.count("static inline float rosenna_host_compact(") == 1
    small = tmp_path / "small"
    gen.generate(zoo.save("mlp128", str(tmp_path / "mlp128.onnx")), str(small), gen.Options(lang="c", embed=False))
    assert "rosenna_host_compact" not in (small / "mlp128_kernel.cu").read_text()


@pytest.mark.parametrize("flags", [[], ["-DROSENNA_DEVICE_ROUTINE", "-rdc=true"]])
def test_float64_dmma_kernel_file_compiles_without_warnings(tmp_path, flags):
    """The FP64 DMMA chain (a 4-32-32-2 Tanh MLP in float64) for sm_90, whose layers take the m16
    pairs: the m8n8k4 step it does not call is no unused function."""
    import numpy as np
    import onnx

    onnx.save(zoo.mlp("d4", [4, 32, 32, 2], ["Tanh", "Tanh", None], np.float64, seed=4), str(tmp_path / "d4.onnx"))
    gen.generate(str(tmp_path / "d4.onnx"), str(tmp_path / "gen"), gen.Options(lang="c"))
    proc = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "--Werror", "all-warnings", *flags, "-I", str(tmp_path / "gen"),
                           str(tmp_path / "gen" / "d4_kernel.cu"), "-o", str(tmp_path / "k.ptx")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_whole_field_kernel_file_compiles_without_warnings(tmp_path):
    """The conv net's whole-field kernel file (implicit-GEMM convs, which call no 3xTF32 MLP helper)."""
    import op_models

    path = op_models.convnet(tmp_path / "convnet.onnx")
    gen.generate(str(path), str(tmp_path / "gen"), gen.Options(lang="c"))
    proc = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "--Werror", "all-warnings", "-I", str(tmp_path / "gen"),
                           str(tmp_path / "gen" / "convnet_kernel.cu"), "-o", str(tmp_path / "k.ptx")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
