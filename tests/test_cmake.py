"""<name>Config.cmake with the real cmake: a solver's CMakeLists.txt of a few lines builds C and
Fortran programs that run and match onnxruntime, with the profile's flags on the compile lines; a
CUDA program (the batched kernel and the user's own kernel calling <name>_infer) is compiled and
linked with nvcc (nothing runs CUDA here).

One generated model serves every test; each CMake project is configured once (configure is the
slow part: compiler detection).
"""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from rosenna.cli import main
from rosenna.toolchain import resolve

pytestmark = pytest.mark.skipif(not shutil.which("cmake"), reason="needs cmake")

X = [0.5, -1.25]

SOLVER = """cmake_minimum_required(VERSION 3.18)
project(solver LANGUAGES C Fortran)
find_package(mdl CONFIG REQUIRED PATHS "{gen}" NO_DEFAULT_PATH)
add_executable(solver_c main.c)
target_link_libraries(solver_c PRIVATE rosenna::mdl)
add_executable(solver_f main.f90)
target_link_libraries(solver_f PRIVATE rosenna::mdl_fortran)
"""

MAIN_C = """#include <stdio.h>
#include "mdl.h"
int main(void) {
    float x[MDL_NX] = {0.5f, -1.25f}, y[MDL_NY];
    mdl_infer(x, y);
    for (int i = 0; i < MDL_NY; i++) printf("%.9g\\n", y[i]);
    return 0;
}
"""

MAIN_F = """program main
  use mdl_model
  implicit none
  real(mdl_rk) :: x(mdl_nx), y(mdl_ny)
  integer :: i
  x = [0.5_mdl_rk, -1.25_mdl_rk]
  call mdl_infer(x, y)
  do i = 1, mdl_ny
    print '(es16.9)', y(i)
  end do
end program main
"""

CUDA_SOLVER = """cmake_minimum_required(VERSION 3.18)
project(solver_cu LANGUAGES C CUDA)
set(mdl_BACKEND cuda)
find_package(mdl CONFIG REQUIRED PATHS "{gen}" NO_DEFAULT_PATH)
add_executable(batch batch.c)
target_link_libraries(batch PRIVATE rosenna::mdl)
add_executable(kernel kernel.cu)
set_target_properties(kernel PROPERTIES CUDA_SEPARABLE_COMPILATION ON CUDA_ARCHITECTURES 80)
target_link_libraries(kernel PRIVATE rosenna::mdl_device rosenna::mdl)
"""

BATCH_C = """#include "mdl.h"
int main(void) { return mdl_infer_batch(0, 0, 0, 0) == ROSENNA_STATUS_OK ? 0 : 1; }
"""

KERNEL_CU = """#include "mdl.h"
__global__ void step(int n, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) mdl_infer(x + i * MDL_NX, y + i * MDL_NY);
}
int main(void) { step<<<1, 32>>>(0, 0, 0); return cudaDeviceSynchronize() != cudaSuccess; }
"""


@pytest.fixture(scope="module")
def gen(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("cmake") / "gen"
    assert main(["generate", model("gemm_small"), "--name", "mdl", "--out", str(out), "--gpu-arch", "80"]) == 0
    return out


def configure_and_build(src, *defs):
    build = src / "build"
    cfg = subprocess.run(["cmake", "-S", str(src), "-B", str(build), *defs], capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    out = subprocess.run(["cmake", "--build", str(build), "--verbose"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    return build, cfg.stdout + cfg.stderr, out.stdout


def compile_line(log, source):
    """The compiler command of ``log`` that compiles ``source`` (a file name)."""
    return next(line for line in log.splitlines() if re.search(r" -c \S*/" + re.escape(source) + r"( |$)", line))


def reference(path):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: np.array([X], dtype=np.float32)}
    return session.run(None, feed)[0].reshape(-1)


@pytest.mark.skipif(not shutil.which("gfortran"), reason="needs gfortran")
def test_c_and_fortran_programs_build_and_run(gen, model, tmp_path):
    src = tmp_path / "solver"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(SOLVER.format(gen=gen))
    (src / "main.c").write_text(MAIN_C)
    (src / "main.f90").write_text(MAIN_F)
    build, _, log = configure_and_build(src, "-DCMAKE_C_COMPILER=gcc", "-DCMAKE_Fortran_COMPILER=gfortran")
    want = reference(model("gemm_small"))
    for exe in ("solver_c", "solver_f"):
        run = subprocess.run([str(build / exe)], capture_output=True, text=True, check=True)
        got = np.array([float(v) for v in run.stdout.split()])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    profile = resolve("gcc", gpu_arch="80")
    c_line, f_line = compile_line(log, "mdl.c"), compile_line(log, "mdl_model.F90")
    # the CPU flags are the building machine's (mdl_TARGET=native), not the generating host's
    for line, flags in ((c_line, profile.optimize_templates[0]), (f_line, profile.optimize_templates[1])):
        assert f" {flags.replace('{archspec}', '-march=native')} " in line and "-fopenmp" in line.split(), line
    assert re.search(r"-J\S*rosenna_mdl_mod", f_line)


def test_a_second_find_package_is_harmless(gen, tmp_path):
    src = tmp_path / "twice"
    (src / "sub").mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(twice LANGUAGES C)\n"
        f'find_package(mdl CONFIG REQUIRED PATHS "{gen}" NO_DEFAULT_PATH)\nadd_subdirectory(sub)\n')
    (src / "sub" / "CMakeLists.txt").write_text(
        f'find_package(mdl CONFIG REQUIRED PATHS "{gen}" NO_DEFAULT_PATH)\n'
        "add_executable(app main.c)\ntarget_link_libraries(app PRIVATE rosenna::mdl)\n")
    (src / "sub" / "main.c").write_text(MAIN_C)
    _, cfg, _ = configure_and_build(src, "-DCMAKE_C_COMPILER=gcc")
    assert "no rosenna::mdl_fortran" in cfg  # Fortran not enabled: said, not an error


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_cuda_programs_compile_and_link_with_nvcc(gen, tmp_path):
    src = tmp_path / "cu"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(CUDA_SOLVER.format(gen=gen))
    (src / "batch.c").write_text(BATCH_C)
    (src / "kernel.cu").write_text(KERNEL_CU)
    build, _, log = configure_and_build(src, "-DCMAKE_C_COMPILER=gcc")
    assert (build / "batch").exists() and (build / "kernel").exists()
    nvcc = [line for line in log.splitlines() if "nvcc" in line.split(" ")[0] and "mdl_kernel.cu" in line]
    assert len(nvcc) == 2 and all("arch=compute_80,code=[compute_80,sm_80]" in line and " -O3 " in line
                                  and "-march" not in line for line in nvcc)
    assert any("-DROSENNA_DEVICE_ROUTINE" in line for line in nvcc)
    assert "--weaken-symbol=mdl_infer" in log
    assert "-DROSENNA_NATIVE_KERNEL" in compile_line(log, "mdl.c")


@pytest.mark.skipif(not shutil.which("nvcc") or not shutil.which("gcc"), reason="needs nvcc and gcc")
def test_h200_build_integration_script_builds_here(tmp_path):
    """bench/build_integration.sh (the H200 run of a CMake-built CUDA program and a clang offload
    program): prepare, then its host variant: the CUDA program compiles and links, the OpenMP
    program runs on the host and matches onnxruntime."""
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, DIR=str(tmp_path / "integration"), RESULTS=str(tmp_path / "results"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    for step in ("prepare", "host"):
        proc = subprocess.run(["bash", "bench/build_integration.sh", step], cwd=root, env=env, capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS" in proc.stdout and (tmp_path / "integration" / "cmake" / "cmake_cuda").exists()
    lines = (tmp_path / "results" / "build-integration" / "cmake-compile-lines.txt").read_text()
    assert "sm_90" in lines


def test_another_compiler_than_the_profiles_gets_a_warning_and_cmakes_openmp(model, tmp_path, monkeypatch):
    """A profile for nvc (not on PATH at generate time, so compared by name): a gcc project gets a
    warning naming -DCMAKE_C_COMPILER=nvc, none of the profile's flags, and still builds and runs."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "nvsite.yaml").write_text("extends: nvhpc\n")
    monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", str(tmp_path / "site"))
    gen = tmp_path / "gen"
    assert main(["generate", model("gemm_small"), "--name", "mdl", "--out", str(gen), "--toolchain", "nvsite",
                 "--lang", "c"]) == 0
    src = tmp_path / "solver"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(solver LANGUAGES C)\n"
        f'find_package(mdl CONFIG REQUIRED PATHS "{gen}" NO_DEFAULT_PATH)\n'
        "add_executable(solver_c main.c)\ntarget_link_libraries(solver_c PRIVATE rosenna::mdl)\n")
    (src / "main.c").write_text(MAIN_C)
    build, cfg, log = configure_and_build(src, "-DCMAKE_C_COMPILER=gcc", "-Dmdl_BACKEND=omp")
    assert "-DCMAKE_C_COMPILER=nvc" in cfg and "profile's flags are" in cfg
    line = compile_line(log, "mdl.c")
    assert "-Mnofma" not in line and "-mp=gpu" not in line and "-fopenmp" in line
    subprocess.run([str(build / "solver_c")], check=True, capture_output=True)


HIP_KERNEL = """#include "hk.h"
__global__ void step(int n, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) hk_infer(x + i * HK_NX, y + i * HK_NY);
}
int main(void) { step<<<1, 32>>>(0, 0, 0); return hk_infer_batch(0, 0, 0, 0) != ROSENNA_STATUS_OK; }
"""


@pytest.mark.skipif(not (shutil.which("hipcc") and shutil.which("objcopy")), reason="needs hipcc")
def test_hip_program_builds_with_the_configs_hip_recipe(model, tmp_path):
    """The hip branch of <name>Config.cmake, built. CMake 3.25's HIP language cannot be enabled with
    Debian's ROCm 5.2 packages (it wants <root>/lib/cmake/hip-lang, then clang's clangrt builtins,
    which Debian's clang-15 lacks: docs/toolchains.md), so the steps that branch declares are read
    from the generated file and run with hipcc: rosenna::hk (hk.c with ROSENNA_NATIVE_KERNEL,
    hk_kernel.cu as HIP for hk_HIP_ARCHITECTURES with hk_DEVICE_FLAGS), rosenna::hk_device (-fgpu-rdc,
    ROSENNA_DEVICE_ROUTINE, hk_infer weakened), and a user kernel calling the __device__ hk_infer,
    linked -fgpu-rdc with hip::host (hipcc's -lamdhip64) and m; the program carries a gfx90a code
    object."""
    gen = tmp_path / "gen"
    assert main(["generate", model("gemm_small"), "--name", "hk", "--out", str(gen), "--gpu-arch", "gfx90a",
                 "--lang", "c"]) == 0
    cfg = (gen / "hkConfig.cmake").read_text()
    for piece in ('"${_rosenna_hk_dir}/hk_kernel.cu" PROPERTIES LANGUAGE HIP', "ROSENNA_NATIVE_KERNEL",
                  "ROSENNA_DEVICE_ROUTINE", "COMPILE_LANGUAGE:HIP>:-fgpu-rdc>", "LINK_LANGUAGE:HIP>:-fgpu-rdc>",
                  "--weaken-symbol=hk_infer", "target_link_libraries(rosenna_hk PUBLIC hip::host)",
                  "target_link_libraries(rosenna_hk PUBLIC m)"):
        assert piece in cfg, piece

    def setting(var):
        return re.search(rf'set\({var} "([^"]*)"\)', cfg).group(1).split()

    arch, dev, cflags = setting("hk_HIP_ARCHITECTURES"), setting("hk_DEVICE_FLAGS"), setting("hk_C_FLAGS")
    cflags = [flag.replace("${_rosenna_hk_cpu_C}", "-march=native") for flag in cflags]  # hk_TARGET=native
    assert arch == ["gfx90a"]
    offload = [f"--offload-arch={a}" for a in arch]
    (gen / "kernel.hip").write_text(HIP_KERNEL)
    env = dict(os.environ, HIP_PLATFORM="amd")
    hip = ["hipcc", *dev, *offload, "-I.", "-x", "hip"]
    steps = [["gcc", *cflags, "-fopenmp", "-DROSENNA_NATIVE_KERNEL", "-I.", "-c", "hk.c", "-o", "hk.o"],
             [*hip, "-c", "hk_kernel.cu", "-o", "hk_kernel.o"],
             ["ar", "rcs", "libhk.a", "hk.o", "hk_kernel.o"],
             [*hip, "-fgpu-rdc", "-DROSENNA_DEVICE_ROUTINE", "-c", "hk_kernel.cu", "-o", "hk_device.o"],
             ["objcopy", "--weaken-symbol=hk_infer", "hk_device.o"],
             ["ar", "rcs", "libhk_device.a", "hk_device.o"],
             [*hip, "-fgpu-rdc", "-c", "kernel.hip", "-o", "kernel.o"],
             ["hipcc", *offload, "-fgpu-rdc", "kernel.o", "libhk_device.a", "libhk.a", "-lm", "-o", "kernel"]]
    for step in steps:
        run = subprocess.run(step, cwd=gen, env=env, capture_output=True, text=True)
        assert run.returncode == 0, (step, run.stderr[-2000:])
    sections = subprocess.run(["objdump", "-h", str(gen / "kernel")], capture_output=True, text=True).stdout
    assert ".hip_fatbin" in sections
