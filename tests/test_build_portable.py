"""A generated folder names no CPU of the machine that generated it unless --target asks: the .mk
and the CMake config choose the CPU flags when they build (native, printed in the build output),
ROSENNA_TARGET=generic builds for the family, --target NAME bakes archspec's flags for NAME as the
default (a cross build), and a target the folder does not know is refused with a message. Every
comment uses the GPU architecture the folder is generated for.
"""

import os
import shlex
import subprocess

import pytest

from build_common import NAME, clean_env, folder, mlp, run
from rosenna import outdir
from rosenna.cli import main
from rosenna.toolchain import resolve

N = NAME


def texts(gen):
    return {f: (gen / f).read_text() for f in os.listdir(gen) if not f.endswith(".rwt") and not f.startswith(".") and (gen / f).is_file()}


def make_n(gen, *args, recipe=f"{N}.mk"):
    """The compile line ``make -n`` prints for the C (or Fortran) source, split."""
    proc = run(["make", "-n", "-f", recipe, *args], cwd=gen, env=clean_env())
    source = f"{N}.c" if recipe == f"{N}.mk" else f"{N}_model.F90"
    return next(shlex.split(line) for line in proc.stdout.splitlines() if f" -c {source} " in f"{line} ")


def test_no_flag_of_the_generating_host_without_target(tmp_path_factory):
    host = resolve("gcc")  # archspec's flags for this host: what the files carried before
    host_flags = [f for f in host.optimize_c.split() if f.startswith(("-march=", "-mtune=", "-mcpu="))]
    gen = folder(tmp_path_factory)
    for fname, text in texts(gen).items():
        for flag in host_flags:
            assert flag not in text, (fname, flag)
        assert f"target={host.target}" not in text and f"CPU {host.target}" not in text, fname
        if fname not in outdir.SHARED_FILES:
            assert "target=native" in " ".join(text.split()[:60]), fname  # the provenance line says so
    assert make_n(gen)[1:4] == ["-O3", "-march=native", "-ffp-contract=off"]
    assert make_n(gen, recipe=f"{N}_fortran.mk")[1:4] == ["-O3", "-march=native", "-ffp-contract=off"]
    assert make_n(gen, "ROSENNA_TARGET=generic")[1:3] == ["-O3", "-ffp-contract=off"]
    assert make_n(gen, "ROSENNA_CPU_FLAGS=-mavx2")[1:4] == ["-O3", "-mavx2", "-ffp-contract=off"]
    bad = subprocess.run(["make", "-n", "-f", f"{N}.mk", "ROSENNA_TARGET=zen9"], cwd=gen, env=clean_env(),
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "ROSENNA_TARGET=zen9: choose native, generic, or give ROSENNA_CPU_FLAGS" in bad.stderr


def test_target_bakes_a_named_cpu_for_cross_builds(tmp_path):
    onnx_path = tmp_path / "m.onnx"
    mlp(2, path=onnx_path)
    gen = tmp_path / "gen"
    assert main(["generate", str(onnx_path), "--name", N, "--out", str(gen), "--target", "zen3", "--lang", "c",
                 "--gpu-arch", "80"]) == 0
    text = texts(gen)
    assert "toolchain=gcc target=zen3 gpu=sm_80" in text[f"{N}.mk"].splitlines()[0]
    assert "ROSENNA_TARGET ?= zen3" in text[f"{N}.mk"] and f'set({N}_TARGET "zen3" CACHE STRING' in text[f"{N}Config.cmake"]
    assert make_n(gen)[1:5] == ["-O3", "-march=znver3", "-mtune=znver3", "-ffp-contract=off"]
    assert "-march=native" in make_n(gen, "ROSENNA_TARGET=native")


def test_comments_use_the_chosen_amd_gpu(tmp_path):
    onnx_path = tmp_path / "m.onnx"
    mlp(2, path=onnx_path)
    gen = tmp_path / "gen"
    assert main(["generate", str(onnx_path), "--name", N, "--out", str(gen), "--toolchain", "rocm", "--gpu-arch",
                 "gfx90a"]) == 0
    text = texts(gen)
    for fname in (f"{N}.mk", f"{N}_fortran.mk", f"{N}Config.cmake", f"{N}.pc"):
        comments = "\n".join(line for line in text[fname].splitlines() if line.startswith("#"))
        assert "cc90" not in comments and "sm_" not in comments and "gfx90a" in comments, fname
    assert "ROSENNA_OFFLOAD_FLAGS='-fopenmp --offload-arch=gfx90a'" in text[f"{N}.mk"]


def test_comments_use_the_chosen_nvidia_gpu(tmp_path_factory):
    text = texts(folder(tmp_path_factory))  # --gpu-arch 80
    for fname in (f"{N}.mk", f"{N}_fortran.mk"):
        comments = "\n".join(line for line in text[fname].splitlines() if line.startswith("#"))
        assert "-gpu=cc80" in comments and "cc90" not in comments, fname
