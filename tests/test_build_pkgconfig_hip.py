"""<name>_fortran.pc requires <name>: a Fortran program that calls the C archive through the module's
bind(C) interface links with the Fortran package alone, runs and matches onnxruntime. And the hip
backend builds for AMD by itself on this machine, which has both nvcc and hipcc (hipcc picks NVIDIA
when nvcc is present and HIP_PLATFORM is unset, then nvcc refuses --offload-arch).
"""

import shlex
import shutil

import numpy as np
import pytest

from build_common import NAME, POINTS, clean_env, copy_of, folder, numbers, reference, run

N = NAME

MAIN_F = f"""program main
  use, intrinsic :: iso_c_binding, only: c_char, c_int, c_loc, c_null_char, c_null_ptr
  use {N}_model
  implicit none
  interface
    function c_init(path) result(status) bind(C, name='{N}_init')
      import :: c_char, c_int
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int) :: status
    end function c_init
  end interface
  real({N}_rk), target :: x({N}_nx, 2), y({N}_ny, 2)
  character(len=4096) :: path
  integer :: i, status
  call get_command_argument(1, path)
  x = reshape([{", ".join(f"{v}_{N}_rk" for v in POINTS.reshape(-1))}], [{N}_nx, 2])
  status = c_init(trim(path) // c_null_char)
  if (status /= {N}_status_ok) error stop 3
  ! the C archive's batch entry, through the module's interface
  status = {N}_infer_batch_dev(2, c_loc(x), c_loc(y), c_null_ptr)
  if (status /= {N}_status_ok) error stop 4
  do i = 1, 2
    print '(es16.9)', y(:, i)
  end do
end program main
"""


@pytest.mark.skipif(not (shutil.which("pkg-config") and shutil.which("gfortran")), reason="needs pkg-config, gfortran")
def test_fortran_program_links_with_the_fortran_package_alone(tmp_path_factory, tmp_path):
    gen = copy_of(folder(tmp_path_factory), tmp_path / "gen")
    env = clean_env(PKG_CONFIG_PATH=str(gen))
    for recipe in (f"{N}.mk", f"{N}_fortran.mk"):
        run(["make", "-s", "-f", recipe], cwd=gen, env=env)
    assert f"Requires: {N} = " in (gen / f"{N}_fortran.pc").read_text()
    flags = shlex.split(run(["pkg-config", "--cflags", "--libs", f"{N}_fortran"], env=env).stdout)
    assert flags.index(f"-l{N}_f") < flags.index(f"-l{N}"), flags  # the Fortran archive first: it needs the C one
    (tmp_path / "main.f90").write_text(MAIN_F)
    run(["gfortran", "main.f90", *flags, "-o", "prog"], cwd=tmp_path, env=env)
    got = numbers(run([str(tmp_path / "prog"), str(gen / f"{N}.rwt")]).stdout)
    want = reference(folder(tmp_path_factory).parent / "model.onnx").reshape(-1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fortran_only_folder_requires_nothing(tmp_path_factory):
    gen = folder(tmp_path_factory, "--lang", "fortran")
    assert "Requires:" not in (gen / f"{N}_fortran.pc").read_text()


@pytest.mark.skipif(not (shutil.which("hipcc") and shutil.which("nvcc")), reason="needs hipcc and nvcc")
def test_hip_backend_builds_for_amd_with_nvcc_present(tmp_path_factory, tmp_path):
    gen = copy_of(folder(tmp_path_factory), tmp_path / "gen")
    env = clean_env()  # no HIP_PLATFORM
    assert "HIP_PLATFORM" not in env
    log = run(["make", "-f", f"{N}.mk", "ROSENNA_BACKEND=hip", f"lib{N}.a"], cwd=gen, env=env).stdout
    assert "--offload-arch=gfx90a" in log and "hip_platform=amd" in log, log
    sections = run(["objdump", "-h", str(gen / f"{N}_kernel.o")]).stdout
    assert ".hip_fatbin" in sections
    # a user's HIP_PLATFORM wins
    mk = (gen / f"{N}.mk").read_text()
    assert "HIP_PLATFORM ?= amd" in mk and "export HIP_PLATFORM" in mk
    cfg = (gen / f"{N}Config.cmake").read_text()
    assert "if(NOT DEFINED ENV{HIP_PLATFORM})\n        set(ENV{HIP_PLATFORM} amd)" in cfg
