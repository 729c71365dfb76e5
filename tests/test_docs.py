"""The documentation site: it builds with no warning (broken links and anchors included), its
reference pages are generated from the code, and the tutorial's steps run as written."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: A fenced block the suite uses: ```LANG file=NAME (write it) or ```sh run (run each line).
FENCE = re.compile(r"^```(?P<lang>[\w+-]+)(?: (?P<what>file=\S+|run))?\n(?P<body>.*?)^```", re.S | re.M)


def marked_blocks(path):
    """``[(file name or None for commands, body)]`` of a page's marked blocks, in page order."""
    out = []
    for match in FENCE.finditer(path.read_text(encoding="utf-8")):
        what = match.group("what")
        if what == "run":
            out.append((None, match.group("body")))
        elif what:
            out.append((what[len("file="):], match.group("body")))
    return out


def _env(shims=None):
    """This Python's scripts first on PATH, and a `rosenna` there even where this checkout is
    imported through PYTHONPATH rather than installed."""
    path = [os.path.dirname(sys.executable)]
    if shims is not None and not os.path.isfile(os.path.join(path[0], "rosenna")):
        shims.mkdir(exist_ok=True)
        script = shims / "rosenna"
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rosenna "$@"\n')
        script.chmod(0o755)
        path.insert(0, str(shims))
    return dict(os.environ, PATH=os.pathsep.join(path + [os.environ["PATH"]]),
                PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _sh(line, cwd):
    proc = subprocess.run(line, shell=True, cwd=cwd, env=_env(cwd.parent / "shims"), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"failed: {line}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_site_builds_without_warnings_from_the_code(tmp_path):
    """`make docs`'s build (sphinx -W -n --keep-going), once: no warning, every page there, and
    the reference pages rendered from the code (commands, status codes, ops, profile keys)."""
    pytest.importorskip("sphinx", reason="the docs extra is not installed (make test installs it)")
    pytest.importorskip("myst_parser")
    pytest.importorskip("furo")
    from rosenna import abi, ops
    from rosenna.cli import build_parser, subparsers_of

    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "-n", "--keep-going", "-q",
                           "-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"the documentation site has warnings:\n{proc.stderr[-6000:]}"
    site = tmp_path / "html"
    for page in ["index", "tutorial", "guide/index", "guide/troubleshooting", "admin-guide", "performance",
                 "changelog", "releasing", "contributing", "reference/cli", "reference/status-codes",
                 "reference/toolchain-schema", "reference/operators", "weights-format"]:
        assert (site / f"{page}.html").is_file(), f"no {page}.html in the site"

    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    for command in subparsers_of(build_parser()):
        assert f"rosenna {command}" in cli, command
    assert "--no-embed" in cli and "rosenna toolchain validate" in cli
    codes = (site / "reference" / "status-codes.html").read_text(encoding="utf-8")
    for code, key, _ in abi.STATUS_CODES:
        assert abi.status_name(key) in codes
    table = (site / "reference" / "operators.html").read_text(encoding="utf-8")
    for name in ops.REGISTRY:
        assert f"<td><p>{name}</p></td>" in table, name
    schema = (site / "reference" / "toolchain-schema.html").read_text(encoding="utf-8")
    assert "flags.omp_offload" in schema and "thresholds.embed_threshold" in schema
    errors = (site / "guide" / "troubleshooting.html").read_text(encoding="utf-8")
    assert "bind it with --dim" in errors


def test_a_broken_internal_link_fails_the_build(tmp_path):
    """The check is real: a page linking to a missing anchor, a missing page and a missing
    repository file makes the build fail, naming each."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    src = tmp_path / "docs"
    src.mkdir()
    shutil.copy(DOCS / "conf.py", src / "conf.py")
    shutil.copytree(DOCS / "_ext", src / "_ext")
    (src / "index.md").write_text("# t\n\n```{toctree}\nother\n```\n\n[a](other.md#no-such-heading)\n"
                                  "[b](missing.md)\n[c](../no/such/file.py)\n")
    (src / "other.md").write_text("# Other\n\n## A heading\n")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "-n", "--keep-going", "-q",
                           str(src), str(tmp_path / "html")], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    assert "no-such-heading" in proc.stderr and "missing" in proc.stderr and "no/such/file.py" in proc.stderr, \
        proc.stderr


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    """Every marked block of docs/tutorial.md, in page order, once: the PyTorch training and
    export, verify, generate, the C OpenMP and Fortran `do concurrent` solvers. Returns the folder
    and what the commands printed."""
    pytest.importorskip("torch", reason="torch is not installed (make test installs torch)")
    work = tmp_path_factory.mktemp("tutorial")
    blocks = marked_blocks(DOCS / "tutorial.md")
    files = {name for name, _ in blocks if name}
    assert {"train.py", "solver.c", "solver.f90", "solver.cu", "solver_omp.c", "solver_acc.f90",
            "solver.hip"} <= files, files
    printed = ""
    for name, body in blocks:
        if name:
            (work / name).write_text(body)
            continue
        for line in body.strip().splitlines():
            printed += _sh(line, work)
    return work, printed


def test_tutorial_runs_as_written(tutorial):
    """The CPU steps pass verify and both solvers agree; the GPU sections' OpenMP-target and
    OpenACC programs run through GCC's host fallback."""
    work, printed = tutorial
    assert "PASS" in printed and "FAIL" not in printed
    sums = [float(s) for s in re.findall(r"sum of the sources (-?[\d.]+)", printed)]
    assert len(sums) == 2 and abs(sums[0] - sums[1]) < 1e-3 * max(1.0, abs(sums[0])), printed
    _sh("gcc -O2 -fopenmp -Ibuild solver_omp.c build/libclosure.a -lm -o solver_omp && ./solver_omp", work)
    _sh("gfortran -O2 -fopenacc -Ibuild solver_acc.f90 build/libclosure_f.a -o solver_acc && ./solver_acc", work)


def _page_commands(marker):
    text = (DOCS / "tutorial.md").read_text(encoding="utf-8")
    commands = re.search(rf"^```sh {marker}\n(.*?)^```", text, re.S | re.M).group(1).strip().splitlines()
    return [c for c in commands if not c.startswith("./")]  # nothing runs them here: no GPU


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_tutorial_cuda_program_builds(tutorial, tmp_path):
    """The CUDA program, compiled and linked by the page's commands (the device optimizers off:
    tests/devflags.py)."""
    from devflags import NVCC

    work = Path(shutil.copytree(tutorial[0], tmp_path / "cuda"))
    built = [c.replace("-O3 -arch=sm_90", f"{NVCC} -arch=sm_90") for c in _page_commands("cuda")]
    assert len(built) == 2 and all(NVCC in c for c in built), built
    for command in built:
        _sh(command, work)
    assert (work / "solver_cuda").is_file()


@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
def test_tutorial_hip_program_builds(tutorial, tmp_path):
    """The HIP program likewise, for gfx90a (hipcc's amd platform; without amdclang here, gcc
    builds the host part)."""
    work = Path(shutil.copytree(tutorial[0], tmp_path / "hip"))
    built = [c + ' CC=gcc DEVFLAGS="-O0 --offload-arch=gfx90a"' if c.startswith("make ") else c.replace("-O3", "-O0")
             for c in _page_commands("hip")]
    assert len(built) == 4, built
    for command in built:
        _sh(f"HIP_PLATFORM=amd {command}", work)
    assert (work / "solver_hip").is_file()


#: The user guide's pages whose programs and commands run, in this order, in one folder (the
#: later pages build the earlier pages' programs).
GUIDE_PAGES = ["guide/calling.md", "guide/building.md", "guide/precision.md", "guide/checking.md"]


def test_user_guide_programs_run(tmp_path):
    """The guide's C, Fortran, OpenACC, CMake, pkg-config, mixed-precision and verify examples,
    as written (host fallback of the offload directives)."""
    work = tmp_path / "work"
    work.mkdir()
    ran = 0
    for page in GUIDE_PAGES:
        for name, body in marked_blocks(DOCS / page):
            if name:
                (work / name).write_text(body)
                continue
            for line in body.strip().splitlines():
                _sh(line, work)
                ran += 1
    assert ran >= 10, ran


def test_readme_links_resolve():
    """README.md is read on the repository's web view, outside the site: its relative links must
    name files of the repository."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if "://" not in t]
    assert len(links) >= 8, links
    missing = [t for t in links if not (ROOT / t).exists()]
    assert not missing, missing
