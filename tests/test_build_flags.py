"""Profile flags end to end: {archspec}, {cc}, --target and --gpu-arch reach every build rosenna
writes or runs (the .mk and its comments, the provenance line, verify, the gate's configuration).

Stub tools (a fake nvidia-smi, fake nvc/nvfortran banners, a logging cc) go in a folder put first on
PATH; the real gcc and gfortran stay reachable behind them.
"""

import os
import shlex
import subprocess

import pytest

from rosenna import gate
from rosenna.gate.config import resolved
from rosenna.cli import main
from rosenna.errors import ToolchainError
from rosenna.toolchain import resolve

NVIDIA_SMI = {"8.0": "NVIDIA A100-SXM4-80GB, 8.0", "9.0": "NVIDIA H100 80GB HBM3, 9.0"}
NVC = "\nnvc 24.1-0 64-bit target on x86-64 Linux -tp zen3\nNVIDIA Compilers and Tools\n"
NVFORTRAN = "\nnvfortran 24.1-0 64-bit target on x86-64 Linux -tp zen3\nNVIDIA Compilers and Tools\n"


@pytest.fixture
def stubs(tmp_path, monkeypatch):
    """A folder first on PATH for stub executables: ``stubs(name, stdout)``."""
    folder = tmp_path / "stubs"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("ROSENNA_TOOLCHAIN_PATH", raising=False)

    def stub(name, stdout="", script=""):
        path = folder / name
        path.write_text(f"#!/bin/sh\n{script}\n/bin/cat <<'STUB_EOF'\n{stdout}\nSTUB_EOF\n")
        path.chmod(0o755)
        return path

    return stub


def mk_value(text, var):
    """The default a generated .mk gives ``var`` (``VAR ?= value`` or ``VAR = value``)."""
    for line in text.splitlines():
        name, sep, value = line.partition("?=") if "?=" in line else line.partition(" = ")
        if sep and name.strip() == var:
            return value.strip()
    raise AssertionError(f"{var} not set in the .mk")


@pytest.mark.parametrize("cap", ["8.0", "9.0"])
def test_the_detected_gpu_reaches_mk_and_gate(cap, stubs, model, tmp_path, capsys):
    stubs("nvidia-smi", NVIDIA_SMI[cap])
    sm = "sm_" + cap.replace(".", "")
    out = tmp_path / "g"
    assert main(["generate", model("gemm_small"), "--out", str(out)]) == 0
    mk = (out / "gemm_small.mk").read_text()
    assert f"DEVFLAGS ?= -O3 -arch={sm}" in mk  # the cuda branch of the gcc profile
    assert f"and GPU {sm} (detected: {NVIDIA_SMI[cap].split(',')[0]} (nvidia-smi))" in mk
    assert "no GPU detected" not in mk and "no GPU detected" not in capsys.readouterr().err
    assert f"gpu={sm}" in (out / "gemm_small.c").read_text().splitlines()[0]
    cmake = (out / "gemm_smallConfig.cmake").read_text()
    assert f'set(gemm_small_CUDA_ARCHITECTURES "{sm[3:]}")' in cmake and f"GPU {sm}" in cmake
    assert f"GPU {sm})" in (out / "gemm_small.pc").read_text()
    config = resolved(gate.Config(backend="cuda"))
    assert config.devcc == "nvcc" and f"-arch={sm}" in shlex.split(config.devflags)


def test_no_gpu_falls_back_with_a_note(stubs, model, tmp_path, capsys):
    stubs("nvidia-smi", script="exit 9")
    assert main(["generate", model("gemm_small"), "--out", str(tmp_path)]) == 0
    mk = (tmp_path / "gemm_small.mk").read_text()
    assert "DEVFLAGS ?= -O3 -arch=sm_80" in mk and "# note: no GPU detected" in mk
    assert "note: no GPU detected" in capsys.readouterr().err


def test_gpu_arch_overrides_detection(stubs, model, tmp_path):
    stubs("nvidia-smi", NVIDIA_SMI["9.0"])
    assert main(["generate", model("gemm_small"), "--out", str(tmp_path), "--gpu-arch", "8.6",
                 "--toolchain", "nvhpc"]) == 0
    mk = (tmp_path / "gemm_small.mk").read_text()
    assert "DEVFLAGS ?= -O3 -arch=sm_86" in mk and "ROSENNA_OFFLOAD_FLAGS ?= -mp=gpu -gpu=cc86" in mk
    assert "(--gpu-arch)" in mk
    assert main(["generate", model("gemm_small"), "--out", str(tmp_path), "--gpu-arch", "gfx942"]) == 0
    assert "DEVFLAGS ?= -O3 --offload-arch=gfx942" in (tmp_path / "gemm_small.mk").read_text()


def test_target_zen3_gives_archspecs_flags_for_gcc_and_nvhpc(stubs, model, tmp_path, capsys):
    stubs("gcc", "gcc (GCC) 12.2.0")
    stubs("gfortran", "GNU Fortran (GCC) 12.2.0")
    stubs("nvc", NVC)
    stubs("nvfortran", NVFORTRAN)
    gcc = resolve("gcc", target="zen3")
    assert (gcc.optimize_c, gcc.optimize_fortran) == ("-O3 -march=znver3 -mtune=znver3 -ffp-contract=off",) * 2
    assert gcc.target == "zen3" and gcc.target_source == "--target"
    nvhpc = resolve("nvhpc", target="zen3")
    assert (nvhpc.optimize_c, nvhpc.optimize_fortran) == ("-O3 -tp zen3 -Mnofma",) * 2
    assert main(["generate", model("gemm_small"), "--out", str(tmp_path), "--toolchain", "nvhpc",
                 "--target", "zen3"]) == 0
    mk, fmk = (tmp_path / "gemm_small.mk").read_text(), (tmp_path / "gemm_small_fortran.mk").read_text()
    # the flags of --target are the default ROSENNA_TARGET's (native and generic stay available)
    assert mk_value(mk, "CFLAGS") == "-O3 $(ROSENNA_CPU_FLAGS) -Mnofma" and mk_value(fmk, "FFLAGS") == mk_value(mk, "CFLAGS")
    for text in (mk, fmk):
        assert "ROSENNA_TARGET ?= zen3" in text
        assert "else ifeq ($(ROSENNA_TARGET),zen3)\nROSENNA_CPU_FLAGS ?= -tp zen3\n" in text
    assert "toolchain=nvhpc target=zen3" in mk.splitlines()[0]
    capsys.readouterr()
    assert main(["toolchain", "show", "gcc", "--target", "zen3"]) == 0
    shown = capsys.readouterr().out
    assert "cpu target:   zen3 (--target)" in shown and "CFLAGS = -O3 -march=znver3 -mtune=znver3 -ffp-contract=off" in shown


def test_archspec_left_empty_says_why(stubs):
    profile = resolve("nvhpc", target="zen3")  # no nvc on PATH here
    assert profile.optimize_c == "-O3 -Mnofma"
    assert any("'nvc' is not on PATH" in note for note in profile.notes)


def test_unknown_target_is_a_one_line_error(model, tmp_path, capsys):
    assert main(["generate", model("gemm_small"), "--out", str(tmp_path), "--target", "zen33"]) == 2
    err = capsys.readouterr().err
    assert "--target 'zen33'" in err and "zen3" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())
    assert main(["generate", model("gemm_small"), "--out", str(tmp_path), "--gpu-arch", "ampere"]) == 2
    assert "--gpu-arch 'ampere'" in capsys.readouterr().err


def test_archspec_only_where_a_compiler_fills_it(tmp_path, monkeypatch):
    (tmp_path / "bad.yaml").write_text("extends: gcc\ndevflags: -arch=sm_{cc} {archspec}\n")
    monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match="key 'devflags'.*only in optimize.c and optimize.fortran"):
        resolve("bad")


def test_a_profile_without_optimize_takes_the_gcc_profiles(stubs, tmp_path, monkeypatch):
    stubs("gcc", "gcc (GCC) 12.2.0")
    (tmp_path / "bare.yaml").write_text(
        "compilers: {c: gcc, fortran: gfortran}\nbackend: omp\nflags: {host: -fopenmp}\n")
    monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", str(tmp_path))
    assert resolve("bare", target="zen3").optimize_c == "-O3 -march=znver3 -mtune=znver3 -ffp-contract=off"


def make_n(folder, makefile, *args):
    """The command lines ``make -n`` prints, split; no CC/CFLAGS/... from the test's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "FC", "CFLAGS", "FFLAGS", "DEVFLAGS", "DEVCC")}
    out = subprocess.run(["make", "-n", "-f", makefile, *args], cwd=folder, capture_output=True, text=True,
                         check=True, env=env).stdout
    return [shlex.split(line, comments=True) for line in out.splitlines() if line.strip()]


def test_gcc_profiles_flags_reach_the_compiler_command_lines(model, tmp_path):
    assert main(["generate", model("gemm_small"), "--out", str(tmp_path), "--target", "x86_64_v3",
                 "--gpu-arch", "90"]) == 0
    profile = resolve("gcc", target="x86_64_v3", gpu_arch="90")
    assert "-march=x86-64-v3" in profile.optimize_c.split()
    c_cmds = make_n(tmp_path, "gemm_small.mk")
    f_cmds = make_n(tmp_path, "gemm_small_fortran.mk")
    cuda_cmds = make_n(tmp_path, "gemm_small.mk", "ROSENNA_BACKEND=cuda")
    cc = next(cmd for cmd in c_cmds if cmd[0] == "gcc")
    assert cc[1:1 + len(profile.optimize_c.split())] == profile.optimize_c.split() and "-fopenmp" in cc
    fc = next(cmd for cmd in f_cmds if cmd[0] == "gfortran")
    assert fc[1:1 + len(profile.optimize_fortran.split())] == profile.optimize_fortran.split()
    nvcc = [cmd for cmd in cuda_cmds if cmd[0] == "nvcc"]
    assert nvcc and all(cmd[1:3] == ["-O3", "-arch=sm_90"] for cmd in nvcc)


def test_verify_compiles_with_the_profiles_flags(stubs, model, tmp_path, monkeypatch, capsys):
    log = tmp_path / "cc.log"
    real_gcc = subprocess.run(["sh", "-c", "command -v gcc"], capture_output=True, text=True).stdout.strip()
    stubs("logcc", script=f'echo "$@" >> {log}\nexec {real_gcc} "$@"')
    monkeypatch.setenv("CC", "logcc")
    assert main(["verify", model("gemm_small"), "--lang", "c", "--cases", "2", "--keep", str(tmp_path / "v")]) == 0
    profile = resolve("gcc")
    assert profile.optimize_c and profile.optimize_c in log.read_text()


def test_gate_with_every_flag_named_needs_no_profile(monkeypatch):
    """The H200's bare python3 has no archspec/jsonschema: bench/h200.sh names every flag, and then the
    gate's configuration reads no profile; with one missing it says what to give."""
    import sys

    from rosenna.errors import UsageError

    import rosenna

    monkeypatch.setitem(sys.modules, "rosenna.toolchain", None)  # importing it raises ImportError
    monkeypatch.delattr(rosenna, "toolchain", raising=False)
    named = dict(backend="cuda", cflags="-O3", fflags="-O3", devcc="nvcc", devflags="-O3 -arch=sm_90")
    c = resolved(gate.Config(**named))
    assert (c.cflags, c.devcc, c.devflags) == ("-O3", "nvcc", "-O3 -arch=sm_90")
    with pytest.raises(UsageError, match="--cflags, --fflags, --devcc and --devflags"):
        resolved(gate.Config(**dict(named, cflags=None)))
