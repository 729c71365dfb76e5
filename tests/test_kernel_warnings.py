"""Generated CUDA carries no unused device helper or weight copy: a kernel file compiles to PTX
with nvcc's warnings as errors, in the batched compile and in the per-point routine's
(``-DROSENNA_DEVICE_ROUTINE``), for the models whose routines take the warp bodies (mlp128) and
the plain one-thread body (gemm_small)."""

import shutil
import subprocess

import pytest

from rosenna import generate as gen, zoo

pytestmark = [pytest.mark.nvcc, pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")]


@pytest.mark.parametrize("model, options, flags", [
    ("mlp128", {"infer_one": True}, ["-DROSENNA_DEVICE_ROUTINE", "-rdc=true"]),
    ("gemm_small", {}, ["-DROSENNA_DEVICE_ROUTINE", "-rdc=true"]),
    ("gemm_small", {}, []),
])
def test_kernel_file_compiles_without_warnings(tmp_path, model, options, flags):
    path = zoo.save(model, str(tmp_path / f"{model}.onnx"))
    gen.generate(path, str(tmp_path / "gen"), gen.Options(lang="c", **options))
    kernel = tmp_path / "gen" / f"{model}_kernel.cu"
    proc = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "--Werror", "all-warnings", "-Xcudafe", "--display_error_number",
                           *flags, "-I", str(tmp_path / "gen"), str(kernel), "-o", str(tmp_path / "k.ptx")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if model == "mlp128":
        # the FP32 warp body reads the one-thread body's copy (the same layout at these widths)
        text = kernel.read_text()
        assert "mlp128_rwarp" not in text and "rosenna_warp_layer<8, 8, rt_act1>(mlp128_rpacked + 2176" in text
