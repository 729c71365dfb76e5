"""The generated .mk never mixes configurations: switching ROSENNA_BACKEND omp -> cuda -> omp -> acc
in one folder rebuilds each time, the archive holds only the objects of the configuration asked for
(`ar t`, and no symbol twice in `nm`), and the program linked against it takes that path (status 0
and onnxruntime's outputs on the host paths; ROSENNA_STATUS_DEVICE from the CUDA path on this
machine without a GPU, where a stale archive used to run the CPU code and return 0). A flags-only
change (ROSENNA_OFFLOAD_FLAGS, CC, DEVFLAGS, FFLAGS) rebuilds; an unchanged one does nothing; and an
archive that would define a symbol twice fails the build with a message saying what to do.
"""

import shlex
import shutil
import subprocess

import numpy as np
import pytest

from build_common import NAME, POINTS, clean_env, copy_of, folder, numbers, reference, run

N = NAME
pytestmark = pytest.mark.skipif(not shutil.which("make") or not shutil.which("gcc"), reason="needs make and gcc")

MAIN_C = f"""#include <stdio.h>
#include "{N}.h"
int main(int argc, char **argv) {{
    float x[2 * {N.upper()}_NX] = {{{", ".join(f"{v}f" for v in POINTS.reshape(-1))}}}, y[2 * {N.upper()}_NY];
    int status = {N}_init(argv[1]);
    if (status == ROSENNA_STATUS_OK)
        status = {N}_infer_batch(2, x, y, 0);
    if (status == ROSENNA_STATUS_OK)
        for (int i = 0; i < 2 * {N.upper()}_NY; i++) printf("%.9g\\n", y[i]);
    return status;
}}
"""


def members(lib):
    return run(["ar", "t", str(lib)]).stdout.split()


def strong_twice(lib):
    """Strong symbols defined more than once in archive ``lib``."""
    seen, twice = set(), set()
    for line in run(["nm", "-g", "--defined-only", str(lib)]).stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "BDRST":
            (twice if parts[2] in seen else seen).add(parts[2])
    return twice


class Folder:
    def __init__(self, path):
        self.path = path
        self.env = clean_env()
        (path / "main.c").write_text(MAIN_C)

    def make(self, *args, recipe=f"{N}.mk", target=f"lib{N}.a"):
        return run(["make", "-f", recipe, *args, *([target] if target else [])], cwd=self.path, env=self.env).stdout

    def program(self, *make_args, link=("-fopenmp",)):
        """Link main.c against lib<N>.a as configured by ``make_args``; run it: (status, outputs)."""
        libs = shlex.split(run(["make", "-s", "-f", f"{N}.mk", *make_args, "print-libs"], cwd=self.path,
                               env=self.env).stdout)
        run(["gcc", "main.c", "-I.", f"lib{N}.a", *link, "-lm", *libs, "-o", "prog"], cwd=self.path)
        proc = run(["./prog", f"{N}.rwt"], cwd=self.path, ok=False)
        return proc.returncode, numbers(proc.stdout)


@pytest.fixture
def built(tmp_path_factory, tmp_path):
    return Folder(copy_of(folder(tmp_path_factory), tmp_path / "gen"))


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_backend_switches_rebuild_and_never_mix(built, tmp_path_factory):
    want = reference(folder(tmp_path_factory).parent / "model.onnx").reshape(-1)
    lib = built.path / f"lib{N}.a"
    sequence = [("omp", ["ROSENNA_BACKEND=omp"], ("-fopenmp",)),
                ("cuda", ["ROSENNA_BACKEND=cuda"], ("-fopenmp",)),
                ("omp", ["ROSENNA_BACKEND=omp"], ("-fopenmp",)),
                ("acc", ["ROSENNA_BACKEND=omp", "ROSENNA_OFFLOAD_FLAGS=-fopenacc"], ("-fopenacc",))]
    for step, (what, args, link) in enumerate(sequence):
        log = built.make(*args)
        assert f"rosenna {N}: building with backend=" in log and f"-c {N}.c" in log.replace("./", ""), (step, log)
        assert not strong_twice(lib), (step, strong_twice(lib))
        status, got = built.program(*args, link=link)
        if what == "cuda":
            assert members(lib) == [f"{N}.o", f"{N}_kernel.o"], step
            assert status == 10, f"step {step}: the CUDA path returns ROSENNA_STATUS_DEVICE without a GPU, got {status}"
            # <name>_reload's device update is the kernel file's, linked in
            assert f" T {N}_device_reload" in run(["nm", str(lib)]).stdout
        else:
            assert members(lib) == [f"{N}.o"], (step, members(lib))
            assert status == 0, (step, status)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"step {step} ({what})")
        if what == "acc":
            assert "GOACC_" in run(["nm", str(lib)]).stdout
        # the same configuration again: nothing to do
        assert "-c" not in built.make(*args)
    # only the device flags change: the kernel object is rebuilt, the host object is not
    built.make("ROSENNA_BACKEND=cuda")
    log = built.make("ROSENNA_BACKEND=cuda", "DEVFLAGS=-O2 -arch=sm_80")
    assert "nvcc -O2 -arch=sm_80 -c" in log, log


def test_flag_and_compiler_changes_rebuild(built):
    first = built.make()
    assert f"-c ./{N}.c" in first or f"-c {N}.c" in first
    assert "Nothing to be done" in built.make(target="")
    for args in (["ROSENNA_OFFLOAD_FLAGS=-fopenmp -DROSENNA_TEST_FLAG"], ["CC=gcc -std=c11"]):
        log = built.make(*args)
        assert args[0].split("=", 1)[1] in log and f"{N}.c" in log, (args, log)
    fortran = built.make(recipe=f"{N}_fortran.mk", target="")
    assert f"{N}_model.F90" in fortran
    assert "Nothing to be done" in built.make(recipe=f"{N}_fortran.mk", target="")
    assert "-fopenacc" in built.make("ROSENNA_OFFLOAD_FLAGS=-fopenacc", recipe=f"{N}_fortran.mk", target="")
    assert "-O1" in built.make("FFLAGS=-O1", recipe=f"{N}_fortran.mk", target="")
    assert "gfortran -fno-range-check" in built.make("FFLAGS=-O1", "FC=gfortran -fno-range-check",
                                                     recipe=f"{N}_fortran.mk", target="")


def test_an_archive_defining_a_symbol_twice_fails_the_build(built):
    """Objects of two configurations forced into one archive: the recipe's check refuses it."""
    built.make()
    shutil.copy(built.path / f"{N}.o", built.path / "other.o")
    proc = subprocess.run(["make", "-f", f"{N}.mk", f"ROSENNA_OBJS=./{N}.o ./other.o"], cwd=built.path,
                          env=built.env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert f"lib{N}.a defines" in proc.stderr and "more than once" in proc.stderr and "clean" in proc.stderr
    assert not (built.path / f"lib{N}.a").exists()
