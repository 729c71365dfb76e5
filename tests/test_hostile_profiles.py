"""Hostile toolchain profiles on the search path (issue 29, items 2 and 3): a profile is data. Names,
modules, compilers and flags that would be code in a job script, a .mk, a .pc or a CMake file are
refused when read (or when ${VAR} is expanded); values that reach those files anyway are quoted
for each or refused; aliases, huge files, FIFOs and unreadable folders on the path cost the other
commands nothing but a one-line warning; a profile that shadows a built-in one says so."""

import dataclasses
import os
import subprocess
import time

import pytest

from rosenna import quoting
from rosenna.cli import main
from rosenna.emit import cmake as cmake_emit
from rosenna.emit import pkgconfig
from rosenna.generate import Options, build_plan
from rosenna.toolchain import catalog as catalog_mod
from rosenna.toolchain import resolve

BASE = "compilers: {c: gcc, fortran: gfortran}\nbackend: omp\n"


@pytest.fixture
def site(tmp_path, monkeypatch, caplog):
    """An empty folder first on the search path, warnings reported afresh (and captured: the CLI
    prints them on stderr, pytest's log capture takes them here)."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", str(folder))
    monkeypatch.setattr(catalog_mod, "_reported", set())
    caplog.set_level("WARNING", logger="rosenna.toolchain")
    _cli.caplog = caplog
    return folder


def _cli(argv, capsys):
    """Return code, stdout, and stderr with the toolchain warnings of this call."""
    _cli.caplog.clear()
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err + "".join(r.getMessage() + "\n" for r in _cli.caplog.records)


@pytest.mark.parametrize("body,key", [
    (BASE + "flags: {host: '-fopenmp; touch {marker}'}\n", "flags.host"),
    (BASE + "flags: {host: -fopenmp}\noptimize: {c: '-O2 $(shell touch {marker})'}\n", "optimize.c"),
    (BASE + "flags: {host: '-fopenmp `touch {marker}`'}\n", "flags.host"),
    (BASE + "flags: {host: -fopenmp}\nmodules: ['gcc/12; touch {marker}']\n", "modules"),
    (BASE + "flags: {host: -fopenmp}\nmodules: ['$(touch {marker})']\n", "modules"),
    (BASE.replace("c: gcc", "c: 'gcc\\n$(shell touch {marker})'") + "flags: {host: -fopenmp}\n", "compilers.c"),
    (BASE + "flags: {host: -fopenmp}\ndevice_link_flags: '-lcudart -lpwned;x'\n", "device_link_flags"),
])
def test_injected_values_refused_when_read(model, site, tmp_path, capsys, body, key):
    marker = tmp_path / "ran"
    (site / "evil.yaml").write_text(body.replace("{marker}", str(marker)))
    for argv in (["generate", model("gemm_small"), "--toolchain", "evil", "--out", str(tmp_path / "o")],
                 ["gpu-gate", "--print-job", "slurm", "--toolchain", "evil"]):
        rc, out, err = _cli(argv, capsys)
        assert rc == 2 and key in err and "Traceback" not in err, err
        assert len([line for line in err.splitlines() if ": error: " in line]) == 1, err
    assert not marker.exists() and not (tmp_path / "o").exists()
    rc, out, err = _cli(["toolchain", "list"], capsys)  # the others are still listed
    assert rc == 0 and "gcc" in out and not marker.exists()


def test_environment_expansion_checked_after_expanding(model, site, tmp_path, capsys, monkeypatch):
    marker = tmp_path / "ran"
    (site / "envcc.yaml").write_text("extends: gcc\ncompilers: {c: '${EVIL_CC:-gcc}', fortran: gfortran}\n")
    monkeypatch.setenv("EVIL_CC", f"gcc $(touch {marker})")
    rc, _, err = _cli(["generate", model("gemm_small"), "--toolchain", "envcc", "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and "compilers.c" in err and "expanded" in err, err
    monkeypatch.setenv("EVIL_CC", "ccache gcc")  # plain words still pass
    assert resolve("envcc").cc == "ccache gcc"


@pytest.mark.parametrize("stem", ["evil$(touch X)", "a\nb", "`id`", "x;y", " gcc"])
def test_file_names_that_are_not_profile_names(site, capsys, stem):
    (site / f"{stem}.yaml").write_text(BASE + "flags: {host: -fopenmp}\n")
    rc, out, err = _cli(["toolchain", "list"], capsys)
    assert rc == 0 and "not a profile name" in err and len(err.strip().splitlines()) == 1, err
    assert all(ord(c) >= 32 for line in err.splitlines() for c in line), err
    rc, _, err = _cli(["gpu-gate", "--print-job", "slurm", "--toolchain", stem], capsys)
    assert rc == 2 and "Traceback" not in err


def _profile(**changes):
    """The gcc profile with ``changes``: a value that never went through the schema."""
    return dataclasses.replace(resolve("gcc"), **changes)


def test_values_that_slip_past_the_schema_are_inert_or_refused(model, tmp_path):
    """The second line of defence, one destination each: the .mk runs no command of the value at make,
    the job script none when run, CMake none at configure, pkg-config writes none."""
    from rosenna import emit
    from rosenna.gate.jobs import render_job

    marker = tmp_path / "ran"
    evil = f"-O2 $(shell touch {marker}) `touch {marker}` ;touch {marker}"
    _, plan = build_plan(model("gemm_small"), Options(name="mdl"))
    profile = _profile(optimize_c=evil, cc=f"gcc$(shell touch {marker})")  # the .pc carries neither
    files = emit.render(plan, "c", "stamp", profile)
    out = tmp_path / "o"
    out.mkdir()
    for fname, text in files.items():
        (out / fname).write_text(text)
    subprocess.run(["make", "-s", "-f", str(out / "mdl.mk"), "-k"], cwd=out, capture_output=True, timeout=60,
                   env={k: v for k, v in os.environ.items() if k not in ("CC", "CFLAGS", "MAKEFLAGS")})
    assert not marker.exists()
    script = render_job("slurm", _profile(name="x", modules=(f"a$(touch {marker})", f"`touch {marker}`")))
    line = next(ln for ln in script.splitlines() if ln.startswith("ROSENNA_PROFILE_MODULES="))
    shown = subprocess.run(["bash", "-c", line + '\nprintf "%s" "$ROSENNA_PROFILE_MODULES"'], capture_output=True,
                           text=True, timeout=10, env={"PATH": os.environ["PATH"]})
    assert shown.stdout == f"a$(touch {marker}) `touch {marker}`" and not marker.exists()
    quoted = cmake_emit.quote(evil + " ${HOME} \"q\" \\")
    probe = tmp_path / "probe.cmake"
    probe.write_text(f"set(v {quoted})\nmessage(STATUS \"[${{v}}]\")\n")
    result = subprocess.run(["cmake", "-P", str(probe)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "${HOME}" in result.stdout and not marker.exists(), result
    with pytest.raises(quoting.Unquotable, match="pkg-config"):
        pkgconfig.c_pc(plan, "stamp", _profile(flags_omp_offload="-fopenmp -lpwned;x"))
    for function in (quoting.sh_quote, quoting.make_quote, quoting.cmake_quote, quoting.pc_quote):
        with pytest.raises(quoting.Unquotable, match="control character"):
            function("-O2\n$(shell id)")


def test_aliases_and_huge_files_cost_nothing(model, site, tmp_path, capsys):
    """A billion-laughs profile and a 50 MB one on the path: the other commands still answer at once,
    with one warning each (the issue saw them hang for 60 s and take 60-94 s)."""
    laughs = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, 10):
        prev = chr(ord("a") + level - 1)
        laughs.append(f"{chr(ord('a') + level)}: &{chr(ord('a') + level)} [" + ", ".join([f"*{prev}"] * 9) + "]")
    (site / "laughs.yaml").write_text("\n".join(laughs) + "\n")
    with open(site / "huge.yaml", "wb") as handle:
        handle.truncate(50 * 1024 * 1024)
    start = time.perf_counter()
    rc, out, err = _cli(["toolchain", "list"], capsys)
    took = time.perf_counter() - start
    assert rc == 0 and "gcc" in out and took < 10, took
    assert "alias (*name) is not allowed" in err and "huge.yaml" in err and "more than a profile's" in err, err
    rc, _, err = _cli(["generate", model("gemm_small"), "--out", str(tmp_path / "o")], capsys)
    assert rc == 0
    rc, _, err = _cli(["toolchain", "validate", str(site / "laughs.yaml")], capsys)
    assert rc != 0 and "alias" in err and "Traceback" not in err


def test_fifo_and_unreadable_folder_on_the_path(site, tmp_path, capsys, monkeypatch):
    os.mkfifo(site / "fifo.yaml")  # listed by name, never opened to wait on
    rc, out, err = _cli(["toolchain", "list"], capsys)
    assert rc == 0 and "gcc" in out, err
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "x.yaml").write_text(BASE + "flags: {host: -fopenmp}\n")
    os.chmod(locked, 0)
    monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", f"{locked}{os.pathsep}{site}")
    if os.geteuid() == 0:  # root reads any folder: make this one refuse as it would refuse a user
        real = os.scandir

        def scandir(path="."):
            if str(path) == str(locked):
                raise PermissionError(13, "Permission denied", str(path))
            return real(path)
        monkeypatch.setattr(os, "scandir", scandir)
    try:
        rc, out, err = _cli(["toolchain", "list"], capsys)
    finally:
        os.chmod(locked, 0o755)
    assert rc == 0 and "Traceback" not in err and "gcc" in out
    assert [line for line in err.splitlines() if str(locked) in line and "cannot read this folder" in line], err


def test_a_site_profile_shadowing_a_builtin_says_so(model, site, tmp_path, capsys):
    (site / "gcc.yaml").write_text("extends: gcc\ndescription: the site's gcc\n")
    rc, _, err = _cli(["generate", model("gemm_small"), "--toolchain", "gcc", "--out", str(tmp_path / "o")], capsys)
    assert rc == 0
    notes = [line for line in err.splitlines() if "shadows the built-in" in line]
    assert len(notes) == 1 and str(site / "gcc.yaml") in notes[0], err


def test_flags_and_commands_as_lists_of_arguments(site, capsys):
    """Flags and compiler commands may be lists of arguments; each item is one plain argument."""
    (site / "listy.yaml").write_text("extends: gcc\ncompilers: {c: [gcc, -std=gnu11], cxx: g++, fortran: gfortran}\n"
                                     "flags: {host: [-fopenmp, -pthread]}\n")
    profile = resolve("listy")
    assert profile.cc == "gcc -std=gnu11" and profile.flags_host == "-fopenmp -pthread"
    (site / "badlist.yaml").write_text("extends: gcc\nflags: {host: [-fopenmp, '-x; touch y']}\n")
    rc, _, err = _cli(["toolchain", "validate", str(site / "badlist.yaml")], capsys)
    assert rc != 0 and "key 'flags.host'" in err and "not one plain argument" in err, err
