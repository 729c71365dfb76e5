"""The consumer matrix of <name>Config.cmake: one CMake project per link language, each program once
without and once with OpenMP of its own.

- Host (`project(... C CXX Fortran)`, backend omp): C, C++ and Fortran programs build, run, and
  print onnxruntime's outputs.
- Device (`project(... C CUDA)`, backend cuda, nvcc): a CUDA program, a CUDA program with an OpenMP
  C file, and a C program (its link language becomes CUDA: the archive holds a .cu) compile and
  link; nothing runs CUDA here. Before the link options covered the CUDA link language this failed
  with `undefined reference to 'GOMP_...'`.
- HIP as a CMake language: CMake 3.25 cannot enable it with Debian's ROCm 5.2 packages (its
  hip-lang package wants amd_comgr's CMake package, which Debian does not ship), so the HIP link
  language is checked in the generated text; tests/test_cmake.py builds the hip recipe with hipcc.

Two configures in all (compiler detection is the slow part), one generated folder.
"""

import shutil

import numpy as np
import pytest

from build_common import NAME, POINTS, clean_env, folder, numbers, reference, run

pytestmark = pytest.mark.skipif(not shutil.which("cmake"), reason="needs cmake")

N = NAME
POINTS_C = ", ".join(f"{v}f" for v in POINTS.reshape(-1))
POINTS_F = ", ".join(f"{v}_{N}_rk" for v in POINTS.reshape(-1))

MAIN_C = f"""#include <stdio.h>
#include "{N}.h"
int main(int argc, char **argv) {{
    float x[2 * {N.upper()}_NX] = {{{POINTS_C}}}, y[2 * {N.upper()}_NY];
    int status = {N}_init(argv[1]);
    if (status != ROSENNA_STATUS_OK) return status;
#ifdef WITH_OMP
#pragma omp parallel for
    for (int i = 0; i < 2; i++) {N}_infer(x + i * {N.upper()}_NX, y + i * {N.upper()}_NY);
#else
    status = {N}_infer_batch(2, x, y, 0);
#endif
    for (int i = 0; i < 2 * {N.upper()}_NY; i++) printf("%.9g\\n", y[i]);
    return status;
}}
"""

MAIN_F = f"""program main
  use {N}_model
  implicit none
  real({N}_rk) :: x({N}_nx, 2), y({N}_ny, 2)
  character(len=4096) :: path
  integer :: i, status
  call get_command_argument(1, path)
  x = reshape([{POINTS_F}], [{N}_nx, 2])
  call {N}_init(trim(path), status)
  if (status /= {N}_status_ok) error stop 3
#ifdef WITH_OMP
  !$omp parallel do
  do i = 1, 2
    call {N}_infer(x(:, i), y(:, i))
  end do
#else
  call {N}_infer_batch(2, x, y, status)
#endif
  do i = 1, 2
    print '(es16.9)', y(:, i)
  end do
end program main
"""

HOST_PROJECT = f"""cmake_minimum_required(VERSION 3.18)
project(host_matrix LANGUAGES C CXX Fortran)
find_package({N} CONFIG REQUIRED PATHS "{{gen}}" NO_DEFAULT_PATH)
find_package(OpenMP REQUIRED COMPONENTS C CXX Fortran)
add_executable(c_plain main.c)
add_executable(c_omp main.c)
add_executable(cxx_plain main.cpp)
add_executable(cxx_omp main.cpp)
add_executable(f_plain main.F90)
add_executable(f_omp main.F90)
foreach(t c_plain c_omp cxx_plain cxx_omp)
  target_link_libraries(${{t}} PRIVATE rosenna::{N})
endforeach()
target_link_libraries(f_plain PRIVATE rosenna::{N}_fortran)
target_link_libraries(f_omp PRIVATE rosenna::{N}_fortran)
target_link_libraries(c_omp PRIVATE OpenMP::OpenMP_C)
target_link_libraries(cxx_omp PRIVATE OpenMP::OpenMP_CXX)
target_link_libraries(f_omp PRIVATE OpenMP::OpenMP_Fortran)
target_compile_definitions(c_omp PRIVATE WITH_OMP)
target_compile_definitions(cxx_omp PRIVATE WITH_OMP)
target_compile_definitions(f_omp PRIVATE WITH_OMP)
"""

DEVICE_PROJECT = f"""cmake_minimum_required(VERSION 3.18)
project(device_matrix LANGUAGES C CUDA)
set({N}_BACKEND cuda)
find_package({N} CONFIG REQUIRED PATHS "{{gen}}" NO_DEFAULT_PATH)
find_package(OpenMP REQUIRED COMPONENTS C)
add_executable(cu_plain main.cu)
add_executable(cu_omp main.cu omp_part.c)
add_executable(c_in_cuda main.c)
set_target_properties(cu_plain cu_omp PROPERTIES CUDA_ARCHITECTURES 80)
foreach(t cu_plain cu_omp c_in_cuda)
  target_link_libraries(${{t}} PRIVATE rosenna::{N})
endforeach()
target_link_libraries(cu_omp PRIVATE OpenMP::OpenMP_C)
target_compile_definitions(cu_omp PRIVATE WITH_OMP)
"""

MAIN_CU = f"""#include "{N}.h"
#ifdef WITH_OMP
extern "C" int threads(void);
#else
static int threads(void) {{ return 1; }}
#endif
int main(int argc, char **argv) {{
    float *x, *y;
    if ({N}_init(argv[1]) != ROSENNA_STATUS_OK) return 1;
    cudaMalloc(&x, 2 * {N.upper()}_NX * sizeof *x);
    cudaMalloc(&y, 2 * {N.upper()}_NY * sizeof *y);
    return {N}_infer_batch(2, x, y, 0) + (threads() < 1);
}}
"""

OMP_PART = """#include <omp.h>
int threads(void) {
    int n = 0;
#pragma omp parallel reduction(+:n)
    n += 1;
    return n;
}
"""


def configure_and_build(src, *defs):
    build = src / "build"
    env = clean_env()
    run(["cmake", "-S", str(src), "-B", str(build), *defs], env=env)
    log = run(["cmake", "--build", str(build), "--verbose", "-j2"], env=env).stdout
    return build, log


@pytest.mark.skipif(not (shutil.which("gfortran") and shutil.which("g++")), reason="needs gfortran and g++")
def test_c_cxx_fortran_consumers_with_and_without_openmp_run(tmp_path_factory, tmp_path):
    gen = folder(tmp_path_factory)
    src = tmp_path / "host"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(HOST_PROJECT.replace("{gen}", str(gen)))
    (src / "main.c").write_text(MAIN_C)
    (src / "main.cpp").write_text(MAIN_C)
    (src / "main.F90").write_text(MAIN_F)
    build, log = configure_and_build(src, "-DCMAKE_C_COMPILER=gcc", "-DCMAKE_CXX_COMPILER=g++",
                                     "-DCMAKE_Fortran_COMPILER=gfortran")
    want = reference(gen.parent / "model.onnx").reshape(-1)
    for exe in ("c_plain", "c_omp", "cxx_plain", "cxx_omp", "f_plain", "f_omp"):
        proc = run([str(build / exe), str(gen / f"{N}.rwt")])
        got = numbers(proc.stdout)
        assert got.shape == want.shape, (exe, proc.stdout)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=exe)
    # the CPU flags are the building machine's, resolved when CMake configures ...
    compile_c = next(line for line in log.splitlines() if f"-c " in line and line.rstrip().endswith(f"/{N}.c"))
    assert "-march=native" in compile_c.split(), compile_c
    # ... or the family's with the cache variable
    env = clean_env()
    cfg = run(["cmake", f"-D{N}_TARGET=generic", str(build)], env=env).stdout
    assert f"rosenna {N}: CPU {N}_TARGET=generic" in cfg
    rebuilt = run(["cmake", "--build", str(build), "--verbose", "--target", "c_plain"], env=env).stdout
    compile_c = next(line for line in rebuilt.splitlines() if line.rstrip().endswith(f"/{N}.c"))
    assert "-march" not in compile_c and "-mcpu" not in compile_c, compile_c
    # each link line carries OpenMP, whatever the link language
    links = [line for line in log.splitlines() if " -o " in line and "CMakeFiles" in line and " -c " not in line]
    assert len(links) == 6 and all("-fopenmp" in line.split() for line in links), links


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_cuda_link_language_consumers_compile_and_link(tmp_path_factory, tmp_path):
    gen = folder(tmp_path_factory)
    src = tmp_path / "device"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(DEVICE_PROJECT.replace("{gen}", str(gen)))
    (src / "main.cu").write_text(MAIN_CU)
    (src / "omp_part.c").write_text(OMP_PART)
    (src / "main.c").write_text(MAIN_C)
    build, log = configure_and_build(src, "-DCMAKE_C_COMPILER=gcc")
    for exe in ("cu_plain", "cu_omp", "c_in_cuda"):
        assert (build / exe).is_file(), exe
    assert "GOMP" not in log
    # OpenMP reaches each CUDA link (the host link launcher: g++ under nvcc)
    links = [line for line in log.splitlines() if " -o " in line and " -c " not in line
             and any(f"-o {exe} " in line for exe in ("cu_plain", "cu_omp", "c_in_cuda"))]
    assert len(links) == 3 and all("-fopenmp" in line.split() for line in links), links


def test_every_link_language_gets_the_openmp_flags(tmp_path_factory):
    text = (folder(tmp_path_factory) / f"{N}Config.cmake").read_text()
    for lang in ("C", "CXX", "Fortran", "CUDA", "HIP"):
        assert f'"$<$<LINK_LANGUAGE:{lang}>:${{_rosenna_flag}}>"' in text, lang
