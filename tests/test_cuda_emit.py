"""The native CUDA/HIP kernel: emitted text, and compile-only builds with nvcc (sm_80, sm_90) and
hipcc (gfx90a) of the golden models, embedded and file-loaded. Runs on the GPU are the gate's
(gate-reports/); nothing here needs a device."""

import os
import shutil
import subprocess

import pytest

from rosenna import zoo
from rosenna.emit import cuda
from rosenna.generate import Options, build_plan, generate

MODELS = ("gemm_small", "gemm_big", "mlp128")


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("zoo")
    for name in MODELS:
        zoo.save(name, str(d / f"{name}.onnx"))
    return d


def _plan(zoo_dir, name, embed=None):
    return build_plan(str(zoo_dir / f"{name}.onnx"), Options(lang="c", embed=embed))[1]


@pytest.mark.parametrize("name,kind", [("gemm_small", "mlp-narrow"), ("gemm_big", "mlp-narrow"),
                                       ("mlp128", "mlp-wide")])
def test_kernel_choice(zoo_dir, name, kind):
    choice = cuda.KernelChoice(_plan(zoo_dir, name), cuda.CONSTANT_LIMIT)
    assert choice.kind == kind
    assert [layer.n for layer in choice.layers][-1] == _plan(zoo_dir, name).ny


def test_constant_threshold_decides_storage(zoo_dir):
    plan = _plan(zoo_dir, "gemm_big")  # 11,604 bytes of weights
    assert "ROSENNA_CONST is __device__ const" in cuda.kernel_source(plan, "stamp", 6144)
    assert "ROSENNA_CONST is __constant__" in cuda.kernel_source(plan, "stamp", 16384)
    assert "#define ROSENNA_CONST ROSENNA_CONSTANT_MEMORY" in cuda.kernel_source(_plan(zoo_dir, "gemm_small"), "s")


def test_packed_layout_round_trips(zoo_dir):
    """The batched kernel's repacked copy holds exactly the plan's weights, input-major."""
    choice = cuda.KernelChoice(_plan(zoo_dir, "gemm_big"), cuda.CONSTANT_LIMIT)
    packed = choice.packed()
    for layer, (woff, boff, npad) in zip(choice.layers, choice.offsets):
        block = packed[woff:boff].reshape(layer.k, npad)
        assert (block[:, :layer.n] == layer.w.T).all() and not block[:, layer.n:].any()
        assert (packed[boff:boff + layer.n] == layer.b).all()


def test_non_mlp_takes_point_kernel(tmp_path):
    import models

    path = models.write("two_in_two_out", tmp_path)
    plan = build_plan(path, Options(lang="c"))[1]
    assert cuda.KernelChoice(plan, cuda.CONSTANT_LIMIT).kind == "point"
    double = build_plan(str(tmp_path / "two_in_two_out.onnx"), Options(lang="c", precision="double"))[1]
    assert cuda.KernelChoice(double, cuda.CONSTANT_LIMIT).kind == "point"


def test_runtime_header_maps_cuda_and_hip():
    from rosenna.emit import c

    text = c.runtime_header()
    for name, cuda_name, hip_name in cuda.RUNTIME_API:
        assert f"#define {name}" in text and cuda_name in text and hip_name in text
    assert text.index("__HIPCC__") < text.index("#elif defined(__CUDACC__)")


def test_omp_batch_steps_aside_for_native_kernel(zoo_dir, tmp_path):
    generate(str(zoo_dir / "gemm_big.onnx"), str(tmp_path), Options(lang="c", embed=False))
    src = (tmp_path / "gemm_big.c").read_text()
    assert "#ifndef ROSENNA_NATIVE_KERNEL" in src and "gemm_big_device_upload(host)" in src
    assert (tmp_path / "gemm_big_kernel.cu").exists()


def _build(directory, name, backend, devflags, env=None):
    cmd = ["make", "-s", "-f", f"{name}.mk", f"ROSENNA_BACKEND={backend}", "CFLAGS=-O2", "ROSENNA_OFFLOAD_FLAGS=",
           f"DEVFLAGS={devflags}"]
    proc = subprocess.run(cmd, cwd=directory, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, f"{' '.join(cmd)} in {directory}:\n{proc.stdout}{proc.stderr}"
    for lib in (f"lib{name}.a", f"lib{name}_device.a"):
        assert (directory / lib).exists(), lib


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "file-loaded"])
@pytest.mark.parametrize("name", MODELS)
def test_nvcc_compiles(zoo_dir, tmp_path, name, embed, arch):
    generate(str(zoo_dir / f"{name}.onnx"), str(tmp_path), Options(lang="c", embed=embed))
    _build(tmp_path, name, "cuda", f"-O2 -arch={arch}")


@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "file-loaded"])
@pytest.mark.parametrize("name", MODELS)
def test_hipcc_compiles(zoo_dir, tmp_path, name, embed):
    generate(str(zoo_dir / f"{name}.onnx"), str(tmp_path), Options(lang="c", embed=embed))
    _build(tmp_path, name, "hip", "-O2 --offload-arch=gfx90a", env=dict(os.environ, HIP_PLATFORM="amd"))


def test_bad_backend_is_refused(zoo_dir, tmp_path):
    generate(str(zoo_dir / "gemm_small.onnx"), str(tmp_path), Options(lang="c"))
    proc = subprocess.run(["make", "-s", "-f", "gemm_small.mk", "ROSENNA_BACKEND=sycl"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "choose omp, cuda or hip" in proc.stderr


def _beyond_mlp(tmp_path):
    """Models past the MLP kernels: a conv net on the whole-field path (infer_one, one launch per
    region) and an LSTM cell on the point kernel."""
    import op_models

    return {"convnet": op_models.convnet(tmp_path / "convnet.onnx"),
            "lstm_cell": op_models.lstm_cell(tmp_path / "lstm_cell.onnx")}


def test_whole_field_plan_gets_one_launch_per_region(tmp_path):
    from rosenna.emit import whole

    path = _beyond_mlp(tmp_path)["convnet"]
    plan = build_plan(str(path), Options(lang="c"))[1]
    assert plan.path == "whole"  # 64x64, 8 channels: far too much scratch for one thread
    text = cuda.kernel_source(plan, "stamp")
    regions = [r for r in whole.regions(plan.body) if r[0] != "comment"]
    assert text.count("<<<") == text.count("__global__") == len(regions)  # no per-point kernel
    assert 'extern "C" int convnet_infer_one(' in text
    assert "convnet_infer_one(x + (long)i * " in text  # infer_batch: one sample at a time
    # the C file's OpenMP infer_one steps aside for the kernel file's
    generate(str(path), str(tmp_path / "g"), Options(lang="c"))
    src = (tmp_path / "g" / "convnet.c").read_text()
    assert src.index("#ifndef ROSENNA_NATIVE_KERNEL", src.index("int convnet_infer_batch")) < src.index("int convnet_infer_one(")


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "file-loaded"])
@pytest.mark.parametrize("name", ["convnet", "lstm_cell"])
def test_nvcc_compiles_beyond_mlp(tmp_path, name, embed):
    path = _beyond_mlp(tmp_path)[name]
    generate(str(path), str(tmp_path / "g"), Options(lang="c", embed=embed))
    _build(tmp_path / "g", name, "cuda", "-O2 -arch=sm_90")


@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
@pytest.mark.parametrize("name", ["convnet", "lstm_cell"])
def test_hipcc_compiles_beyond_mlp(tmp_path, name):
    path = _beyond_mlp(tmp_path)[name]
    generate(str(path), str(tmp_path / "g"), Options(lang="c", embed=False))
    _build(tmp_path / "g", name, "hip", "-O2 --offload-arch=gfx90a", env=dict(os.environ, HIP_PLATFORM="amd"))
