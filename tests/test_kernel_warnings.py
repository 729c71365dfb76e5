"""Generated CUDA carries no unused device helper or weight copy: a kernel file compiles with
nvcc's warnings as errors, in the batched compile and in the per-point routine's
(``-DROSENNA_DEVICE_ROUTINE``), for the models whose routines take the warp bodies (mlp128) and
the plain one-thread body (gemm_small); file-loaded weights (host packing code) too."""

import os
import shutil
import subprocess
import sys

import pytest

from rosenna import generate as gen, zoo
from rosenna.strategy import Tuning

pytestmark = [pytest.mark.nvcc, pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")]
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))


@pytest.mark.parametrize("model, options, flags", [
    ("mlp128", {"infer_one": True}, ["-DROSENNA_DEVICE_ROUTINE", "-rdc=true"]),
    ("gemm_small", {}, ["-DROSENNA_DEVICE_ROUTINE", "-rdc=true"]),
    ("gemm_small", {}, []),
    ("mlp128", {"embed": False}, ["-c"]),
    # the wide kernel's compact fragments holding the weights, read by the warp routine's gather
    ("mlp128", {"embed": False, "tuning": Tuning(wide_compact_from=1, compact_fragments="weight")},
     ["-DROSENNA_DEVICE_ROUTINE", "-rdc=true"]),
    # the wide kernel in the paired k order (its A reads, x's staging, its host packing)
    ("mlp128", {"embed": False, "tuning": Tuning(wide_k_order="paired")}, ["-c"]),
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
        # the one-thread and FP32 warp bodies read the staged kernel's copy (its rows, their biases)
        text = kernel.read_text()
        assert "mlp128_rwarp" not in text and "mlp128_rpacked" not in text
        assert "rosenna_warp_layer<8, 8, 128, rt_act1>(mlp128_packed.v + 2048, mlp128_packed.v + 34944" in text


def test_compact_packing_brings_its_helper(tmp_path):
    """The host's compact-fragment rounding comes with the packing that calls it (a file-loaded
    512-wide MLP, whose wide kernel's fragments are compact) and not without it."""
    import onnx

    sizes = [16, 512, 512, 8]
    onnx.save(zoo.mlp("w512", sizes, ["Relu", "Relu", None], seed=5), str(tmp_path / "w512.onnx"))
    gen.generate(str(tmp_path / "w512.onnx"), str(tmp_path / "gen"), gen.Options(lang="c", embed=False))
    text = (tmp_path / "gen" / "w512_kernel.cu").read_text()
    assert "rosenna_host_compact(v0)" in text and text.count("constexpr float rosenna_host_compact(") == 1
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


@pytest.fixture(scope="session")
def warning_sample(tmp_path_factory):
    """A bounded sample of kernel files, one of each way the kernel file is put together: the
    narrow FP32 kernel with the 3xTF32 chain (gemm_big), the staged and wide kernels with the
    parked warp routine, file-loaded (mlp128: every host packing), the whole-field conv net; and
    a kernel file with an unused function, which must be caught."""
    import op_models

    tmp = tmp_path_factory.mktemp("warnings")
    kernels = []
    for path, options in ((zoo.save("gemm_big", str(tmp / "gemm_big.onnx")), {}),
                          (zoo.save("mlp128", str(tmp / "mlp128.onnx")), {"embed": False}),
                          (str(op_models.convnet(tmp / "convnet.onnx")), {})):
        name = os.path.splitext(os.path.basename(path))[0]
        gen.generate(path, str(tmp / name), gen.Options(lang="c", **options))
        kernels.append(str(tmp / name / f"{name}_kernel.cu"))
    (tmp / "dirty").mkdir()
    (tmp / "dirty" / "rosenna_rt.h").write_text("#if defined(__HIPCC__)\n#include <hip/hip_runtime.h>\n#endif\n")
    (tmp / "dirty" / "dirty_kernel.cu").write_text('#include "rosenna_rt.h"\n__global__ void k(float *y) { y[0] = 1.0f; }\n'
                                                 "static __device__ float unused(float v) { return v; }\n")
    return kernels + [str(tmp / "dirty" / "dirty_kernel.cu")]


@pytest.mark.hipcc
def test_sample_compiles_without_any_warning(warning_sample):
    """The sample's kernel files, each compiled as the makefile does (the batched kernel and the
    per-point routine as relocatable device code) by nvcc with the host compiler's -Wall -Wextra and
    every front-end warning, and by hipcc for AMD with -Wall -Wextra, in one batch: not one warning
    but the unused function's, in each compile of its file (bench/kernel_warnings.py runs the same
    over every zoo, example and bench model)."""
    import devflags
    import kernel_warnings

    found = kernel_warnings.survey(warning_sample, nvcc_opt=devflags.NVCC_DEVICE.split(), hipcc_opt=devflags.HIPCC.split(),
                                   jobs=2)
    dirty = {label: text for label, text in found.items() if "dirty_kernel" in label}
    found = {label: text for label, text in found.items() if label not in dirty}
    assert not found, "\n".join(f"{label}:\n{text[-1500:]}" for label, text in sorted(found.items()))
    compilers = ["nvcc"] + (["hipcc"] if shutil.which("hipcc") else [])
    assert sorted(dirty) == sorted(f"{c} {mode} dirty_kernel.cu" for c in compilers for mode in ("batched", "routine")), dirty
    assert all("unused" in text and "exit" not in text.splitlines()[0] for text in dirty.values()), dirty
