"""The examples build and run: each test copies one example into its own tmp_path (xdist-safe),
builds it with its Makefile (which calls `rosenna generate` and the generated .mk recipes) on the
host fallback (-fopenmp / -fopenacc, no device), runs it at a small size and checks what the
example claims: the surrogate matches the analytic run, the conserved sums hold, the learned guess
cuts CG iterations, the MPI result does not depend on the number of ranks.

Programs run with OMP_NUM_THREADS=1: under `pytest -n auto` every core already runs a test, and
idle OpenMP threads spinning for a share of a busy core make a run ten times slower.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import devflags

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ROSENNA = f"{sys.executable} -m rosenna"


def env():
    e = dict(os.environ, OMP_NUM_THREADS="1")
    e.pop("MAKEFLAGS", None)
    return e


def copy_example(rel, tmp_path):
    dst = tmp_path / Path(rel).name
    shutil.copytree(EXAMPLES / rel, dst, ignore=shutil.ignore_patterns("build", "__pycache__"))
    return dst


def make(where, *args):
    proc = subprocess.run(["make", "-C", str(where), f"ROSENNA={ROSENNA}", "-j2", *args],
                          capture_output=True, text=True, env=env())
    assert proc.returncode == 0, f"make {' '.join(args)} failed in {where}:\n{proc.stdout}\n{proc.stderr}"


#: For an example whose generated C is large (pguess.c: 13,000 lines of boundary-split conv loops),
#: the build's C flags at -O1: the generated .mk's default -O3 takes 89 s of CPU on pguess.c, -O1
#: 15 s, and the example's claims (PASS, fewer sweeps from the guess, the CUDA symbols) do not
#: depend on the level. A command-line CFLAGS reaches the generated .mk through MAKEFLAGS.
QUICK_CFLAGS = "CFLAGS=-O1 -Wall"
#: The examples' CUDA builds are compile and link checks (nothing runs them here): sm_90 with cicc
#: and ptxas unoptimized (tests/devflags.py; poisson_cuda's U-Net took 84 s of CPU at -O3).
CUDA_CHECK = f"CUDA_ARCH=-arch=sm_90 {devflags.NVCC_DEVICE}"


def run(cmd, expect_rc=0, cwd=None):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env(), cwd=cwd,
                          timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == expect_rc, f"{' '.join(map(str, cmd))}: exit {proc.returncode}, " \
                                         f"expected {expect_rc}\n{out}"
    return out


def number(pattern, text):
    m = re.search(pattern, text)
    assert m, f"no match for {pattern!r} in:\n{text}"
    return float(m.group(1))


# ---------------------------------------------------------------- surrogates: advection-diffusion-reaction

def test_adr_surrogate_matches_analytic_rate_c_fortran_omp_acc(tmp_path):
    ex = copy_example("surrogates", tmp_path)
    make(ex, "all")
    burnt = {}
    for prog in ("adr_c_omp", "adr_c_acc", "adr_f_omp", "adr_f_acc"):
        out = run([ex / "build" / prog, "--n", "32", "--steps", "40"])
        assert "PASS" in out, out
        assert number(r"max \|T_surrogate - T_analytic\| =\s*(\S+)", out) <= 0.02
        assert number(r"relative drift of sum\(T \+ Q Y\): analytic\s*(\S+),", out) <= 1e-12
        assert number(r"time per step: analytic rate (\S+) ms", out) > 0
        burnt[prog] = number(r"burnt fraction: analytic \S+, surrogate\s*(\S+)", out)
    # The four builds run the same arithmetic: C and Fortran, OpenMP and OpenACC agree.
    assert max(burnt.values()) - min(burnt.values()) <= 1e-6, burnt
    # The check can fail: a tolerance below the surrogate's error is reported as a failure.
    out = run([ex / "build" / "adr_c_omp", "--n", "16", "--steps", "20", "--tol", "1e-9"], expect_rc=1)
    assert "FAIL" in out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (compiles; nothing runs it here)")
def test_adr_cuda_backend_builds_with_the_generated_recipes(tmp_path):
    """adr_cuda (the solver's own CUDA kernels calling adr_rate_infer, and --batch through
    adr_rate_infer_batch) links against both archives of the cuda backend. It runs on a GPU only
    (examples/run_gpu.sh; results/measurement-log.md has the H200 numbers)."""
    ex = copy_example("surrogates", tmp_path)
    make(ex, "cuda", CUDA_CHECK)
    exe = ex / "build" / "adr_cuda"
    symbols = subprocess.run(["nm", "-C", str(exe)], capture_output=True, text=True, check=True).stdout
    assert "adr_rate_infer_batch" in symbols and "step_kernel" in symbols
    if shutil.which("cuobjdump"):  # the solver's kernel really calls the generated device routine
        sass = subprocess.run(["cuobjdump", "-sass", str(exe)], capture_output=True, text=True).stdout
        assert re.search(r"Function : .*step_kernel", sass) and "adr_rate_infer" in sass


# ---------------------------------------------------------------- surrogates: Poisson guess (infer_one)

def test_poisson_guess_cuts_cg_iterations(tmp_path):
    ex = copy_example("surrogates/poisson_guess", tmp_path)
    make(ex, "all", QUICK_CFLAGS)
    out = run([ex / "build" / "poisson", "--cases", "3"])
    assert "PASS" in out, out
    total = re.search(r"total Jacobi sweeps: from 0 (\d+), from the net.s guess (\d+)", out)
    zero, guess = int(total.group(1)), int(total.group(2))
    assert guess < 0.9 * zero, out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (compiles; nothing runs it here)")
def test_poisson_cuda_backend_links_with_a_host_compiler(tmp_path):
    """poisson_cuda: the OpenMP program built by gcc, the net from the cuda backend's archive,
    linked with the generated recipe's print-libs. On the H200 it runs under clang-16's OpenMP
    (results/measurement-log.md); here only the link is checked, and that pguess_infer_one is the CUDA one."""
    ex = copy_example("surrogates/poisson_guess", tmp_path)
    make(ex, "cuda", CUDA_CHECK, QUICK_CFLAGS)
    symbols = subprocess.run(["nm", str(ex / "build" / "poisson_cuda")], capture_output=True, text=True,
                             check=True).stdout
    assert re.search(r" T pguess_infer_one\b", symbols) and "cudaLaunchKernel" in symbols


# ---------------------------------------------------------------- cns_closure: MPI

def mpi_launcher():
    """mpirun with the flags this machine needs, or a skip naming what is missing."""
    missing = [t for t in ("mpicc", "mpif90", "mpirun") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not found: install an MPI (Debian: apt-get install "
                    f"libopenmpi-dev openmpi-bin) to run the MPI example")
    flags = []
    version = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:
        flags.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            flags.append("--allow-run-as-root")
    return ["mpirun", *flags]


def test_cns_closure_mpi_conserves_and_is_rank_independent(tmp_path):
    mpirun = mpi_launcher()
    ex = copy_example("cns_closure", tmp_path)
    make(ex, "all")
    size = ["--nx", "32", "--ny", "24", "--steps", "20"]
    fields = {}
    runs = (("cns_c", 1, ()), ("cns_c", 2, ()), ("cns_f", 2, ()), ("cns_c", 2, ("--batch",)))
    for prog, np_, extra in runs:
        dump = tmp_path / f"{prog}_{np_}{''.join(extra)}.bin"
        out = run([*mpirun, "-np", str(np_), ex / "build" / prog, *size, *extra, "--dump", dump])
        assert "PASS" in out, out
        for name in ("mass", "energy"):
            assert number(rf"{name}\s+before .* relative drift\s*(\S+)", out) <= 1e-12, out
        assert number(r"time per step: (\S+) ms", out) > 0
        if extra:  # the closure through sgs_infer_batch instead of sgs_infer per cell
            assert "closure through sgs_infer_batch" in out, out
        fields[prog, np_, extra] = np.fromfile(dump, dtype=np.float64).reshape(2, 24, 32)
    ref = fields["cns_c", 1, ()]
    for key, field in fields.items():
        # Stated tolerance 1e-12 (relative, max norm); the runs agree bit for bit in practice.
        worst = np.abs(field - ref).max() / np.abs(ref).max()
        assert worst <= 1e-12, f"{key} differs from 1-rank C by {worst:.3e}"
    # The initial shear layer has evolved (the comparison above is not between two initial states).
    assert np.abs(np.diff(ref[0], axis=1)).max() > 1e-6


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (compiles; nothing runs it here)")
def test_cns_cuda_backend_links(tmp_path):
    """cns_cuda: the MPI + OpenMP solver against the cuda backend's archive, so that --batch calls
    rosenna's native CUDA kernel on the device pointers of the OpenMP program. Link only here."""
    mpi_launcher()
    ex = copy_example("cns_closure", tmp_path)
    make(ex, "cuda", CUDA_CHECK)
    symbols = subprocess.run(["nm", str(ex / "build" / "cns_cuda")], capture_output=True, text=True,
                             check=True).stdout
    assert re.search(r" T sgs_infer_batch\b", symbols) and "cudaLaunchKernel" in symbols
    assert re.search(r" U cudaSetDevice", symbols)
