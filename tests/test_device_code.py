"""The fixed device code under rosenna/data/ on its own: each .cuh compiled by nvcc to PTX only
(nvcc 13 has no ``-fsyntax-only``; ``-ptx`` runs its device front end and stops) and
(HIP_PLATFORM=amd) by ``hipcc -fsyntax-only``, inside the namespace and after the
runtime header the kernel file gives it; and the Python side agrees with the constants it spells."""

import os
import shutil
import subprocess

import pytest

from rosenna import emit
from rosenna.emit import fixed
from rosenna.emit.cuda import staged, tc_wide, tf32

#: Each file, with what comes before it in a kernel file (activation functions, other libraries).
CUDA_ONLY = {"rosenna_tf32.cuh", "rosenna_tc_wide.cuh", "rosenna_tc_routine.cuh", "rosenna_igemm.cuh"}
NEEDS = {"rosenna_tc_wide.cuh": ["rosenna_tf32.cuh", "rosenna_cp_async.cuh"], "rosenna_staged.cuh": ["rosenna_cp_async.cuh"],
         "rosenna_tc_routine.cuh": ["rosenna_tf32.cuh"], "rosenna_igemm.cuh": ["rosenna_tf32.cuh"]}
LIBS = ["rosenna_act.cuh", "rosenna_narrow.cuh", "rosenna_lane.cuh", "rosenna_routine.cuh", "rosenna_tile.cuh", "rosenna_cp_async.cuh", "rosenna_staged.cuh", "rosenna_tf32.cuh",
        "rosenna_tc_wide.cuh", "rosenna_tc_routine.cuh", "rosenna_igemm.cuh"]


def _unit(tmp_path, name):
    (tmp_path / "rosenna_rt.h").write_text(emit.runtime_header())
    includes = "".join(f'#include "{fixed.path(n)}"\n' for n in NEEDS.get(name, []) + [name])
    # Instantiate the templates once so that their bodies are checked too, not only parsed.
    src = tmp_path / "unit.cu"
    src.write_text('#include "rosenna_rt.h"\nnamespace {\n'
                   "__device__ __forceinline__ float act0(float v) { return v; }\n"
                   f"{includes}}}  // namespace\n")
    return src


def _compile(cmd, env=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.nvcc
@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
@pytest.mark.parametrize("name", LIBS)
def test_nvcc_checks_device_code(tmp_path, name):
    src = _unit(tmp_path, name)
    _compile(["nvcc", "-ptx", "-arch=sm_80", "-I", str(tmp_path), "-x", "cu", str(src), "-o", str(tmp_path / "unit.ptx")])


@pytest.mark.hipcc
@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
@pytest.mark.parametrize("name", [n for n in LIBS if n not in CUDA_ONLY])
def test_hipcc_checks_device_code(tmp_path, name):
    src = _unit(tmp_path, name)
    _compile(["hipcc", "-fsyntax-only", "--offload-arch=gfx90a", "-I", str(tmp_path), "-x", "hip", str(src)],
             env=dict(os.environ, HIP_PLATFORM="amd"))


@pytest.mark.host
def test_host_headers_compile(tmp_path):
    """rosenna_host_math.h is C (the C file includes it); the TF32 rounding is C++14 (constexpr: the
    kernel file's packings run at compile time)."""
    for names, compiler in ((["rosenna_host_math.h"], ["gcc", "-std=c99"]), (["rosenna_host_tf32.h"], ["g++", "-std=c++14"]),
                            (["rosenna_host_tf32.h", "rosenna_host_compact.h"], ["g++", "-std=c++14"])):
        src = tmp_path / ("unit.c" if compiler[0] == "gcc" else "unit.cpp")
        src.write_text("".join(f'#include "{fixed.path(name)}"\n' for name in names))
        _compile(compiler + ["-Wall", "-Wextra", "-pedantic", "-fsyntax-only", str(src)])


def test_constants_agree_with_python():
    """The loaders check the constants the files spell against Python's; a drifted file is refused."""
    assert "ROSENNA_FS_THREADS = 128" in staged.library()
    assert tc_wide.library() and tf32.device_lib() and tf32.host_tf32()
    with pytest.raises(AssertionError, match="ROSENNA_FS_THREADS is not 64"):
        fixed.load("rosenna_staged.cuh", ROSENNA_FS_THREADS=64)


def test_staged_min_blocks_is_the_tunings():
    """The staged kernel's blocks per SM (__launch_bounds__' second argument, CUDA only) is the
    tuning's staged_min_blocks: its default is what rosenna_staged.cuh spells (the kernel file
    unchanged), another value replaces it there and nowhere else."""
    from rosenna.strategy import Tuning

    assert staged.FILE_MIN_BLOCKS == Tuning().staged_min_blocks
    default, two = staged.library(), staged.library(2)
    assert default == staged.library(Tuning().staged_min_blocks) and "__launch_bounds__(128, 4)" in default
    assert two == default.replace("__launch_bounds__(128, 4)", "__launch_bounds__(128, 2)") and two != default
    assert "__launch_bounds__(128)\n" in two  # HIP's line, which asks for none
