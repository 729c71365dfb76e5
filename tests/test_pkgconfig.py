"""<name>.pc and <name>_fortran.pc with the real pkg-config: a Makefile user's build line
(`cc main.c $(pkg-config --cflags --libs m)`) compiles, links and runs C and Fortran programs
against the archives the .mk recipes build; the folder can move (paths are ${pcfiledir})."""

import os
import re
import shlex
import shutil
import subprocess

import numpy as np
import pytest

import rosenna

from rosenna.cli import main
from rosenna.toolchain import resolve
from test_cmake import MAIN_C, MAIN_F, reference

pytestmark = pytest.mark.skipif(not shutil.which("pkg-config") or not shutil.which("gfortran"),
                                reason="needs pkg-config and gfortran")


def pkg_config(folder, *args):
    env = dict(os.environ, PKG_CONFIG_PATH=str(folder))
    return shlex.split(subprocess.run(["pkg-config", *args], env=env, capture_output=True, text=True,
                                      check=True).stdout)


def sources(name):
    """test_cmake's C and Fortran mains (model ``mdl``) for model ``name``."""
    c = MAIN_C.replace('"mdl.h"', f'"{name}.h"').replace("MDL_N", f"{name.upper()}_N").replace("mdl_infer", f"{name}_infer")
    f = re.sub(r"\bmdl_", f"{name}_", MAIN_F).replace("_mdl_rk", f"_{name}_rk")
    return c, f


def test_c_and_fortran_programs_link_through_pkg_config(model, tmp_path):
    gen = tmp_path / "first"
    assert main(["generate", model("gemm_small"), "--name", "pcm", "--out", str(gen)]) == 0
    gen = gen.rename(tmp_path / "moved")  # ${pcfiledir}: the folder may move
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "FC", "CFLAGS", "FFLAGS")}
    for recipe in ("pcm.mk", "pcm_fortran.mk"):
        subprocess.run(["make", "-s", "-f", str(gen / recipe)], check=True, env=env, capture_output=True)
    omp = resolve("gcc").offload_flags.split()
    assert pkg_config(gen, "--cflags", "pcm") == [f"-I{gen}", *omp]
    assert pkg_config(gen, "--libs", "pcm") == [f"-L{gen}", "-lpcm", *omp, "-lm"]
    assert pkg_config(gen, "--cflags", "pcm_fortran") == [f"-I{gen}", *omp]
    # pkg-config merges the required package's flags (Requires: pcm) after the Fortran archive
    assert pkg_config(gen, "--libs", "pcm_fortran") == [f"-L{gen}", "-lpcm_f", "-lpcm", *omp, "-lm"]
    c_src, f_src = sources("pcm")
    (tmp_path / "main.c").write_text(c_src)
    (tmp_path / "main.f90").write_text(f_src)
    c_cmd = ["gcc", "main.c", *pkg_config(gen, "--cflags", "--libs", "pcm"), "-o", "c.out"]
    f_cmd = ["gfortran", "main.f90", *pkg_config(gen, "--cflags", "--libs", "pcm_fortran"), "-o", "f.out"]
    want = reference(model("gemm_small"))
    for cmd, exe in ((c_cmd, "c.out"), (f_cmd, "f.out")):
        subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True)
        got = subprocess.run([str(tmp_path / exe)], capture_output=True, text=True, check=True).stdout.split()
        np.testing.assert_allclose([float(v) for v in got], want, rtol=1e-5, atol=1e-6)


def test_cuda_backend_pc_names_the_runtime(model, tmp_path):
    assert main(["generate", model("gemm_small"), "--name", "pcm", "--out", str(tmp_path), "--toolchain", "nvhpc",
                 "--gpu-arch", "90"]) == 0
    pc = (tmp_path / "pcm.pc").read_text()
    assert "offload_flags=-mp=gpu -gpu=cc90" in pc and "backend cuda" in pc
    assert pkg_config(tmp_path, "--libs", "pcm") == [f"-L{tmp_path}", "-lpcm", "-mp=gpu", "-gpu=cc90", "-lm",
                                                     "-lcudart", "-lstdc++"]
    assert pkg_config(tmp_path, "--modversion", "pcm") == [rosenna.__version__]
