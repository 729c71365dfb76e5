"""Toolchain profiles: schema, search path, extends, detection with stub tools, selection, CLI.

Detection tests put stub executables (shell scripts) in a folder of tmp_path and make it the whole
PATH, so nothing on the test machine leaks in; archspec's host is patched to recorded CPUs.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import archspec.cpu
import jsonschema
import pytest
import yaml

import rosenna.cli
from rosenna.errors import ToolchainError
from rosenna.toolchain import Catalog, detect, resolve, select
from rosenna.toolchain.catalog import SearchDir, builtin_dir, read_profile
from rosenna.toolchain.profile import build
from rosenna.toolchain.schema import SCHEMA
from rosenna.toolchain.template import TemplateError, expand_env, fill, placeholders_in

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted((REPO / "toolchains").glob("*.yaml"))
ENV_VARS = ("ROSENNA_TOOLCHAIN_PATH", "ROSENNA_GCC", "ROSENNA_GXX", "ROSENNA_GFORTRAN", "ROSENNA_CLANG",
            "ROSENNA_CLANGXX", "ROSENNA_FLANG", "GCC_OFFLOAD_FLAGS", "CLANG_OFFLOAD_FLAGS", "XDG_CONFIG_HOME")

NVIDIA_SMI_H100 = "NVIDIA H100 80GB HBM3, 9.0"
NVIDIA_SMI_A100 = "NVIDIA A100-SXM4-80GB, 8.0"
BANNERS = {
    "nvc": "\nnvc 24.1-0 64-bit target on x86-64 Linux -tp zen3\nNVIDIA Compilers and Tools\n",
    "nvfortran": "\nnvfortran 24.1-0 64-bit target on x86-64 Linux -tp zen3\nNVIDIA Compilers and Tools\n",
    "nvcc": "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4, V12.4.131\n",
    "amdclang": "AMD clang version 17.0.0 (https://github.com/RadeonOpenCompute/llvm-project roc-6.0.0)\n",
    "amdflang": "flang-new version 17.0.0 (https://github.com/RadeonOpenCompute/llvm-project roc-6.0.0)\n",
    "hipcc": "HIP version: 6.0.32830-d62f6a171\nAMD clang version 17.0.0\n",
    "icx": "Intel(R) oneAPI DPC++/C++ Compiler 2024.0.0 (2024.0.0.20231017)\n",
    "ifx": "ifx (IFX) 2024.0.0 20231017\n",
    "gcc": "gcc (GCC) 12.2.0\n",
    "gfortran": "GNU Fortran (GCC) 12.2.0\n",
}


@pytest.fixture
def env(tmp_path, monkeypatch):
    """An isolated environment: no profile folders but the built-in one, a PATH of stubs only."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(archspec.cpu, "host", lambda: archspec.cpu.TARGETS["zen3"])
    return Env(tmp_path, bin_dir, monkeypatch)


class Env:
    def __init__(self, root, bin_dir, monkeypatch):
        self.root, self.bin, self.monkeypatch = root, bin_dir, monkeypatch

    def stub(self, name, stdout="", status=0, script=""):
        """An executable ``name`` printing ``stdout``; ``script`` is extra sh run before it."""
        path = self.bin / name
        body = f"#!/bin/sh\n{script}\n/bin/cat <<'STUB_EOF'\n{stdout}\nSTUB_EOF\nexit {status}\n"
        path.write_text(body)
        path.chmod(0o755)
        return path

    def compilers(self, *names):
        for name in names:
            self.stub(name, BANNERS.get(name, f"{name} version 1.0\n"))

    def profile_dir(self, name="site"):
        folder = self.root / name
        folder.mkdir(exist_ok=True)
        return folder

    def write(self, folder, name, text):
        path = folder / f"{name}.yaml"
        path.write_text(text)
        return path

    def search_path(self, *folders):
        self.monkeypatch.setenv("ROSENNA_TOOLCHAIN_PATH", os.pathsep.join(str(f) for f in folders))


def catalog_of(*folders):
    """A catalog of the given folders then the built-in profiles."""
    return Catalog([SearchDir(Path(f), "path") for f in folders] + [SearchDir(builtin_dir(), "builtin")])


# ----------------------------------------------------------------------------- shipped profiles

def test_the_six_profiles_ship():
    assert sorted(p.stem for p in SHIPPED) == ["clang-offload", "gcc", "gcc-nvptx", "nvhpc", "oneapi", "rocm"]
    assert builtin_dir() == REPO / "toolchains"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_profile_validates_and_resolves(path, env):
    jsonschema.validate(yaml.safe_load(path.read_text()), SCHEMA)
    catalog = catalog_of()
    profile = build(catalog, read_profile(path, "builtin"), gpus=())
    assert profile.name == path.stem and profile.source == path
    assert profile.backend in ("cuda", "hip", "omp")
    assert profile.cc and profile.fc and profile.flags_host
    if profile.backend in ("cuda", "hip"):
        assert profile.devcc and profile.devflags and profile.device_link_flags
    for value in profile.make_defaults().values():
        assert "{" not in value and "$" not in value, value


def test_builtin_aliases_are_unique_and_name_what_admins_know(env):
    catalog = catalog_of()
    seen = {}
    for f in catalog.files:
        for alias in f.data.get("aliases", []):
            assert alias.lower() not in seen, f"{alias} in {f.name} and {seen[alias.lower()]}"
            assert alias not in catalog.names()
            seen[alias.lower()] = f.name
    expected = {
        "nvhpc": "nvhpc", "NVHPC": "nvhpc", "intel-oneapi-compilers": "oneapi", "intel-compilers": "oneapi",
        "llvm-amdgpu": "rocm", "rocm-compilers": "rocm", "llvm": "clang-offload", "gcc": "gcc",
        "foss": "gcc", "gcc+nvptx": "gcc-nvptx",
    }
    for alias, name in expected.items():
        assert resolve(alias, catalog=catalog, detection=detect_none()).name == name


def detect_none():
    from rosenna.toolchain.detection import Cpu, Detection

    return Detection(cpu=Cpu("zen3", "AuthenticAMD", "x86_64", ()), gpus=(), compilers=())


def test_none_means_todays_defaults(env):
    profile = resolve(None, detection=detect_none())
    assert profile.name == "gcc"
    assert profile.make_defaults() == {
        "CC": "gcc", "FC": "gfortran", "CFLAGS": "-O3 -ffp-contract=off", "FFLAGS": "-O3 -ffp-contract=off",
        "DEVCC": "nvcc",
        "DEVFLAGS": "-O3 -arch=sm_80", "ROSENNA_OFFLOAD_FLAGS": "-fopenmp", "ROSENNA_BACKEND": "omp",
    }
    from rosenna.emit.cuda import CONSTANT_LIMIT  # measured on the H200, results/measurement-log.md

    assert (profile.constant_limit_bytes, profile.embed_threshold) == (CONSTANT_LIMIT, 1_000_000)


def test_make_defaults_of_nvhpc_on_an_h100(env):
    env.stub("nvidia-smi", NVIDIA_SMI_H100)
    env.compilers("nvc", "nvfortran")  # archspec's host is zen3 here
    profile = resolve("nvhpc")
    assert profile.gpu.cc == "90" and profile.gpu.source.startswith("detected: NVIDIA H100")
    assert profile.make_defaults() == {
        "CC": "nvc", "FC": "nvfortran", "CFLAGS": "-O3 -tp zen3 -Mnofma", "FFLAGS": "-O3 -tp zen3 -Mnofma",
        "DEVCC": "nvcc", "DEVFLAGS": "-O3 -arch=sm_90",
        "ROSENNA_OFFLOAD_FLAGS": "-mp=gpu -gpu=cc90", "ROSENNA_BACKEND": "cuda",
    }
    assert profile.flags_acc == "-acc -gpu=cc90"


# ----------------------------------------------------------------------------- broken profiles

BROKEN = {
    "bad_yaml": ("compilers: {c: gcc\nbackend: omp\n", [":2: not valid YAML", "fix the YAML there"]),
    "unknown_key": ("compilers: {c: gcc, fortran: gfortran}\nbackend: omp\nflags: {host: -fopenmp, omp_ofload: x}\n",
                    [":3: invalid profile: key 'flags.omp_ofload'", "unknown key", "did you mean 'omp_offload'"]),
    "unknown_top_key": ("compiler: {c: gcc}\n", ["key 'compiler'", "did you mean 'compilers'"]),
    "missing_compiler": ("compilers: {fortran: gfortran}\nbackend: omp\nflags: {host: -fopenmp}\n",
                         ["incomplete profile", "key 'compilers.c': required but missing"]),
    "bad_backend": ("compilers: {c: gcc, fortran: gfortran}\nbackend: sycl\nflags: {host: -fopenmp}\n",
                    [":2: invalid profile: key 'backend'", "'sycl' is not one of cuda, hip, omp"]),
    "bad_cuda_arch": ("extends: nvhpc\ncuda_arch: sm_90\n", [":2: invalid profile: key 'cuda_arch'", "'sm_90'",
                                                             "as Spack does (90"]),
    "cuda_arch_nine": ("extends: nvhpc\ncuda_arch: 9\n", [":2: invalid profile: key 'cuda_arch'", "9.0"]),
    "aliases_as_text": ("extends: gcc\ndescription: ours\naliases: gcc/13.2.0\n",
                        [":3: invalid profile: key 'aliases': should be a list, written [a, b]",
                         "not the text 'gcc/13.2.0'"]),
    "alias_empty": ("extends: gcc\naliases:\n  - ok\n  - ''\n", [":4: invalid profile: key 'aliases[1]': is empty"]),
    "alias_twice": ("extends: gcc\naliases: [a, a]\n", [":2: invalid profile: key 'aliases'", "'a' more than once"]),
    "priority_text": ("extends: gcc\npriority: high\n", [":2: invalid profile: key 'priority': should be a whole number"]),
    "bad_placeholder": ("extends: nvhpc\nflags: {omp_offload: '-mp=gpu -gpu=cc{CC}'}\n",
                        [":2: invalid profile: key 'flags.omp_offload'", "unknown placeholder {CC}"]),
    "bad_env": ("extends: gcc\ncompilers: {c: '${CC'}\n", ["key 'compilers.c'", "closed"]),
    "duplicate_key": ("backend: omp\nbackend: cuda\n", [":2: not valid YAML: key 'backend' is given twice", "keep one"]),
    "not_a_mapping": ("- gcc\n", ["must be a mapping", "list"]),
    "empty": ("", ["must be a mapping", "empty"]),
    "wrong_name": ("name: other\nextends: gcc\n", ["key 'name'", "'other' differs from the file name"]),
    "unknown_parent": ("extends: nosuch\n", ["key 'extends'", "no profile named 'nosuch'"]),
    "bad_threshold": ("extends: gcc\nthresholds: {constant_limit_bytes: -1}\n",
                      [":2: invalid profile: key 'thresholds.constant_limit_bytes': is -1, below the smallest "
                       "allowed value 0"]),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_profiles_are_refused_naming_file_and_key(case, env):
    text, expected = BROKEN[case]
    folder = env.profile_dir()
    path = env.write(folder, case.replace("_", "-"), text)
    with pytest.raises(ToolchainError) as caught:
        resolve(path.stem, catalog=catalog_of(folder), detection=detect_none())
    message = str(caught.value)
    assert str(path) in message
    for part in expected:
        assert part in message, message
    for jargon in ("is not of type", "is not valid under any of the given schemas", "is too short", "non-unique"):
        assert jargon not in message, message


def test_an_extends_cycle_is_refused(env):
    folder = env.profile_dir()
    env.write(folder, "a", "extends: b\n")
    env.write(folder, "b", "extends: c\n")
    env.write(folder, "c", "extends: a\n")
    with pytest.raises(ToolchainError, match=r"a\.yaml: key 'extends': cycle: a .* -> b .* -> c .* -> a"):
        resolve("a", catalog=catalog_of(folder), detection=detect_none())


def test_a_broken_profile_is_reported_once_and_skipped_by_what_does_not_name_it(env, capsys, caplog):
    folder = env.profile_dir()
    oops = env.write(folder, "oops", "description: a site profile\nflags: [\n")
    env.write(folder, "mine", "extends: oops\n")
    env.search_path(folder)
    caplog.set_level("WARNING", logger="rosenna.toolchain")
    from rosenna.toolchain import catalog as catalog_mod

    catalog_mod._reported.clear()
    assert cli(["toolchain", "list"]) == 0
    out = capsys.readouterr().out
    assert f"oops           path     {oops}  BROKEN (skipped)" in out
    assert f"{oops}:3: not valid YAML" in out
    assert "gcc            builtin" in out
    warnings = [r.getMessage() for r in caplog.records]
    assert len([w for w in warnings if "oops.yaml" in w]) == 1, warnings
    assert warnings[0].startswith(f"rosenna: warning: {oops}:3: not valid YAML")
    assert "profile 'oops' skipped" in warnings[0] and "rosenna toolchain validate" in warnings[0]
    assert cli(["toolchain", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["profiles"]}
    assert rows["oops"]["broken"].startswith(f"{oops}:3:") and rows["gcc"]["broken"] == ""
    # A built-in, auto and detect do not name it: they work.
    assert resolve("gcc", detection=detect_none()).name == "gcc"
    assert resolve("auto", detection=detect_none()).name == "gcc"
    assert cli(["toolchain", "detect"]) == 0
    out = capsys.readouterr().out
    assert "tried:     mine: broken:" in out and "profile is broken" not in out.split("profile:")[-1]
    # Naming it, or extending it, is an error that says what is wrong where.
    assert cli(["toolchain", "show", "oops"]) == 2
    assert f"error: {oops}:3: not valid YAML" in capsys.readouterr().err
    with pytest.raises(ToolchainError, match=r"mine\.yaml: key 'extends': profile 'oops' is broken: .*oops\.yaml:3"):
        resolve("mine", detection=detect_none())


def test_a_broken_site_copy_of_a_builtin_is_not_silently_replaced_by_it(env):
    folder = env.profile_dir()
    env.write(folder, "gcc", "extends: gcc\nflags: {hots: -O2}\n")
    catalog = catalog_of(folder)
    with pytest.raises(ToolchainError, match=r"gcc\.yaml:2: invalid profile: key 'flags.hots'"):
        resolve("gcc", catalog=catalog, detection=detect_none())
    assert [f.kind for f in catalog.winners() if f.name == "gcc"] == ["builtin"]  # what auto may use


def test_validate_checks_every_file_and_exits_1_if_any_fails(env, capsys):
    folder = env.profile_dir()
    good = env.write(folder, "good", "extends: gcc\ncompilers: {c: gcc-13, cxx: g++-13}\n")
    bad1 = env.write(folder, "bad1", "extends: gcc\nflags:\n  hots: -O2\n")
    bad2 = env.write(folder, "bad2", "backend: [\n")
    bad3 = env.write(folder, "bad3", "extends: nosuch\n")
    assert cli(["toolchain", "validate", str(bad1), str(good), str(bad2), str(bad3)]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f"{bad1}: FAILED", f"{good}: ok", f"{bad2}: FAILED", f"{bad3}: FAILED"]
    assert f"{bad1}:3: invalid profile: key 'flags.hots': unknown key" in captured.err
    assert f"{bad2}:2: not valid YAML" in captured.err
    assert "no profile named 'nosuch'" in captured.err and "3 of 4 profile files failed" in captured.err
    assert cli(["toolchain", "validate", str(good)]) == 0
    env.search_path(folder)
    assert cli(["toolchain", "validate"]) == 1  # the search path holds the broken ones too
    out = capsys.readouterr().out
    assert f"{bad2}: FAILED" in out and f"{REPO / 'toolchains' / 'nvhpc.yaml'}: ok" in out


VERSION_BANNERS = {"gcc": "gcc (Debian 12.2.0-14) 12.2.0\n", "nvc": BANNERS["nvc"]}


@pytest.mark.parametrize("spelled, profile, style", [
    ("gcc@12.2.0", "gcc", "Spack spec"), ("gcc@=12.2", "gcc", "Spack spec"), ("gcc@12", "gcc", "Spack spec"),
    ("GCC/12.2.0", "gcc", "EasyBuild module"), ("GCCcore/12.2.0", "gcc", "EasyBuild module"),
    ("foss/2022b", "gcc", "EasyBuild module"), ("nvhpc@24.1", "nvhpc", "Spack spec"),
    ("NVHPC/24.1", "nvhpc", "EasyBuild module"), ("gcc@12.2.0+nvptx", "gcc-nvptx", "Spack spec"),
])
def test_spack_and_easybuild_names_with_versions(spelled, profile, style, env, capsys):
    for name, banner in VERSION_BANNERS.items():
        env.stub(name, banner)
    chosen = resolve(spelled, detection=detect_none())
    assert chosen.name == profile
    assert chosen.reason.startswith(f"asked for as the {style} '{spelled}'") and "matches" in chosen.reason
    if spelled == "foss/2022b":
        assert "EasyBuild's foss/2022b uses GCC 12.2.0" in chosen.reason
    assert cli(["toolchain", "show", spelled]) == 0
    assert f"profile:      {profile} (builtin)" in capsys.readouterr().out


@pytest.mark.parametrize("spelled, message", [
    ("gcc@13.2.0", r"--toolchain gcc@13.2.0: wants gcc 13.2.0 but .*/gcc is 12.2.0; load that compiler"),
    ("foss/2023a", r"--toolchain foss/2023a: wants gcc 12.3.0 but .*/gcc is 12.2.0"),
    ("GCC/12.20", r"wants gcc 12.20 but"),
    ("gcc@12:", r"'12:' is not one version"),
    ("foss/2019a", r"2019a is not an EasyBuild toolchain generation rosenna knows"),
    ("nosuch@1.0", r"no toolchain profile or alias named 'nosuch'"),
])
def test_a_version_that_does_not_match_is_an_error(spelled, message, env):
    for name, banner in VERSION_BANNERS.items():
        env.stub(name, banner)
    with pytest.raises(ToolchainError, match=message):
        resolve(spelled, detection=detect_none())


def test_a_version_is_not_checked_without_the_compiler_and_says_so(env):
    profile = resolve("nvhpc@24.1", detection=detect_none())
    assert profile.reason == "asked for as the Spack spec 'nvhpc@24.1'; version not checked: nvc is not on PATH"


@pytest.mark.parametrize("written, cc", [("8.0", "80"), ("'8.0'", "80"), ("80", "80"), ("'90a'", "90a"),
                                         ("'9.0a'", "90a"), ("12.0", "120"), ("8.6", "86")])
def test_cuda_arch_in_spack_and_easybuild_spelling(written, cc, env):
    folder = env.profile_dir()
    env.write(folder, "arch", f"extends: nvhpc\ncuda_arch: {written}\n")
    profile = resolve("arch", catalog=catalog_of(folder), detection=detect_none())
    assert profile.gpu.cc == cc and profile.flags_omp_offload == f"-mp=gpu -gpu=cc{cc}"


def test_extends_that_changes_c_but_not_cxx_is_warned(env, caplog):
    from rosenna.toolchain import catalog as catalog_mod

    catalog_mod._reported.clear()
    folder = env.profile_dir()
    half = env.write(folder, "half", "description: gcc 13\nextends: gcc\ncompilers:\n  c: gcc-13\n")
    env.write(folder, "both", "extends: gcc\ncompilers: {c: gcc-13, cxx: g++-13}\n")
    caplog.set_level("WARNING", logger="rosenna.toolchain")
    catalog = catalog_of(folder)
    resolve("both", catalog=catalog, detection=detect_none())
    assert not caplog.records
    resolve("half", catalog=catalog, detection=detect_none())
    [record] = caplog.records
    assert record.getMessage() == (
        f"rosenna: warning: {half}:3: key 'compilers.c' is changed to 'gcc-13' but 'compilers.cxx' is still "
        f"'g++' from {REPO / 'toolchains' / 'gcc.yaml'}; set compilers.cxx too (the C++ harnesses and CMake use it)")


def test_check_compilers_names_the_missing_one(env):
    env.compilers("gcc")
    profile = resolve("gcc", detection=detect_none())
    with pytest.raises(ToolchainError, match=r"gcc\.yaml: profile 'gcc': key 'compilers.fortran': 'gfortran' not found on PATH"):
        profile.check_compilers()
    env.compilers("gfortran")
    profile.check_compilers()


# ----------------------------------------------------------------------------- site profiles, extends

def test_a_site_profile_overrides_a_builtin_one(env, capsys):
    folder = env.profile_dir()
    path = env.write(folder, "gcc", "extends: gcc\ncompilers: {c: gcc-13, fortran: gfortran-13}\n")
    env.search_path(folder)
    profile = resolve("gcc", detection=detect_none())
    assert profile.source == path and profile.kind == "path"
    assert profile.chain == (path, REPO / "toolchains" / "gcc.yaml")  # extends its own name: the next one down
    assert (profile.cc, profile.fc, profile.flags_host) == ("gcc-13", "gfortran-13", "-fopenmp")
    assert cli(["toolchain", "list"]) == 0
    out = capsys.readouterr().out
    assert f"gcc            path     {path}" in out
    assert f"shadows {REPO / 'toolchains' / 'gcc.yaml'}" in out
    assert cli(["toolchain", "show", "gcc"]) == 0
    out = capsys.readouterr().out
    assert f"file:         {path}" in out and "cc:           gcc-13" in out


def test_a_profile_edited_in_place_is_read_anew(env):
    """Profile files are parsed once per text (generate reads the catalog each call): an edit of
    the same file is seen, a broken edit is reported, and a caller's change to the data is its own."""
    folder = env.profile_dir()
    path = env.write(folder, "mine", "extends: gcc\ncompilers: {c: gcc-13}\n")
    first = read_profile(path)
    first.data["compilers"]["c"] = "changed by a caller"
    from rosenna.toolchain import catalog

    with pytest.MonkeyPatch.context() as mp:  # the same text is not parsed again
        mp.setattr(catalog, "_StrictLoader", None)
        assert read_profile(path).data["compilers"] == {"c": "gcc-13"}
    env.write(folder, "mine", "extends: gcc\ncompilers: {c: gcc-14}\n")
    assert read_profile(path).data["compilers"] == {"c": "gcc-14"}
    env.write(folder, "mine", "extends: gcc\ncompilers: {c: gcc-14\n")
    with pytest.raises(ToolchainError, match="not valid YAML"):
        read_profile(path)


def test_site_folder_under_the_prefix_is_searched_before_the_builtins(env):
    site = Path(sys.prefix) / "share" / "rosenna" / "toolchains"
    site.mkdir(parents=True)
    (site / "builtin").mkdir()
    env.write(site / "builtin", "gcc", "this: is not read\n")  # the installed copy of the built-ins
    path = env.write(site, "nvhpc", "extends: nvhpc\nmodules: [nvhpc/24.1]\n")
    profile = resolve("nvhpc", detection=detect_none())
    assert (profile.source, profile.kind, profile.modules) == (path, "site", ("nvhpc/24.1",))
    user = Path(os.environ["HOME"]) / ".config" / "rosenna" / "toolchains"
    user.mkdir(parents=True)
    path = env.write(user, "nvhpc", "extends: nvhpc\nmodules: [mine]\n")
    profile = resolve("nvhpc", detection=detect_none())
    assert (profile.source, profile.kind, profile.modules) == (path, "user", ("mine",))
    # The user's nvhpc extends the site's, which extends the built-in one.
    assert [p.parent.name for p in profile.chain] == ["toolchains", "toolchains", "toolchains"]
    assert len(set(profile.chain)) == 3


def test_extends_nvhpc_changes_only_what_it_names(env):
    folder = env.profile_dir()
    env.write(folder, "cluster-a100", """
description: our A100 partition
aliases: [a100]
extends: nvhpc
cuda_arch: 80
compilers: {c: /opt/nvidia/hpc_sdk/bin/nvc}
flags: {acc: "-acc=gpu -gpu=cc{cc},managed"}
thresholds: {constant_limit_bytes: 4096}
modules: [nvhpc/24.1, cuda/12.4]
""")
    env.stub("nvidia-smi", NVIDIA_SMI_H100)  # cuda_arch wins over what is detected
    catalog = catalog_of(folder)
    base = resolve("nvhpc", catalog=catalog).to_dict()
    mine = resolve("a100", catalog=catalog).to_dict()
    assert mine["name"] == "cluster-a100" and mine["aliases"] == ["a100"] and base["aliases"] == ["NVHPC"]
    changed = {k for k in base if base[k] != mine[k]}
    assert changed == {"name", "source", "kind", "chain", "description", "aliases", "cc", "flags_acc",
                       "flags_omp_offload", "devflags", "constant_limit_bytes", "modules", "gpu",
                       "make_defaults", "notes"}  # notes: a different nvc is not on PATH
    assert mine["cc"] == "/opt/nvidia/hpc_sdk/bin/nvc" and mine["fc"] == "nvfortran"
    assert mine["flags_acc"] == "-acc=gpu -gpu=cc80,managed"
    assert mine["flags_omp_offload"] == "-mp=gpu -gpu=cc80" and base["flags_omp_offload"] == "-mp=gpu -gpu=cc90"
    assert mine["gpu"]["source"] == "cuda_arch" and base["gpu"]["source"] == "detected: NVIDIA H100 80GB HBM3 (nvidia-smi)"
    assert mine["flags_host"] == base["flags_host"] and mine["embed_threshold"] == base["embed_threshold"]


# ----------------------------------------------------------------------------- templates

def test_env_expansion_and_placeholders():
    environ = {"ROSENNA_GCC": "/tmp/g12/usr/bin/gcc-12", "EMPTY": ""}
    assert expand_env("${ROSENNA_GCC:-gcc}", environ) == "/tmp/g12/usr/bin/gcc-12"
    assert expand_env("${EMPTY:-gcc}", environ) == "gcc"
    assert expand_env("${NOPE}x", environ) == "x"
    assert expand_env("-f ${NOPE:--a={offload_arch} ${ROSENNA_GCC}} $(CC)", environ) == \
        "-f -a={offload_arch} /tmp/g12/usr/bin/gcc-12 $(CC)"
    for bad in ("${", "${1}", "${A", "${A:-x"):
        with pytest.raises(TemplateError):
            expand_env(bad, environ)
    assert placeholders_in("${X:--arch={offload_arch}} {cc}") == {"offload_arch", "cc"}
    assert fill("-gpu=cc{cc} ${KEEP}", {"cc": "90"}) == "-gpu=cc90 ${KEEP}"


def test_gate_env_vars_feed_the_offload_profiles(env):
    env.monkeypatch.setenv("ROSENNA_GCC", "/tmp/g12/usr/bin/gcc-12")
    env.monkeypatch.setenv("ROSENNA_GFORTRAN", "/tmp/g12/usr/bin/gfortran-12")
    env.monkeypatch.setenv("GCC_OFFLOAD_FLAGS", "-foffload=nvptx-none -foffload-options=nvptx-none=-misa=sm_80")
    env.monkeypatch.setenv("ROSENNA_CLANG", "clang-16")
    env.monkeypatch.setenv("CLANG_OFFLOAD_FLAGS", "-fopenmp-targets=nvptx64-nvidia-cuda --offload-arch=sm_90")
    gcc = resolve("gcc-nvptx", detection=detect_none())
    assert (gcc.cc, gcc.fc) == ("/tmp/g12/usr/bin/gcc-12", "/tmp/g12/usr/bin/gfortran-12")
    assert gcc.flags_omp_offload == "-fopenmp -foffload=nvptx-none -foffload-options=nvptx-none=-misa=sm_80"
    assert gcc.flags_acc == "-fopenacc -foffload=nvptx-none -foffload-options=nvptx-none=-misa=sm_80"
    assert gcc.flags_host == "-fopenmp -foffload=disable"
    clang = resolve("clang-offload", detection=detect_none())
    assert clang.cc == "clang-16"
    assert clang.flags_omp_offload == "-fopenmp -fopenmp-targets=nvptx64-nvidia-cuda --offload-arch=sm_90"


def test_clang_offload_targets_the_detected_vendor(env):
    env.stub("rocm_agent_enumerator", "gfx000\ngfx90a\ngfx90a")
    profile = resolve("clang-offload")
    assert profile.gpu.vendor == "amd"
    assert profile.flags_omp_offload == "-fopenmp -fopenmp-targets=amdgcn-amd-amdhsa --offload-arch=gfx90a"
    (env.bin / "rocm_agent_enumerator").unlink()
    env.stub("nvidia-smi", NVIDIA_SMI_A100)
    profile = resolve("clang-offload")
    assert profile.flags_omp_offload == "-fopenmp -fopenmp-targets=nvptx64-nvidia-cuda --offload-arch=sm_80"


# ----------------------------------------------------------------------------- detection

@pytest.mark.parametrize("line,model,arch", [(NVIDIA_SMI_H100, "NVIDIA H100 80GB HBM3", "90"),
                                             (NVIDIA_SMI_A100, "NVIDIA A100-SXM4-80GB", "80")])
def test_nvidia_smi(env, line, model, arch):
    env.stub("nvidia-smi", "\n".join([line] * 4))
    found = detect()
    assert [(g.vendor, g.model, g.arch, g.count, g.tool) for g in found.gpus] == \
        [("nvidia", model, arch, 4, "nvidia-smi")]


def test_rocm_agent_enumerator_ignores_gfx000(env):
    env.stub("rocm_agent_enumerator", "gfx000\ngfx90a\ngfx90a\n")
    assert [(g.vendor, g.arch, g.count) for g in detect().gpus] == [("amd", "gfx90a", 2)]


def test_rocminfo_when_rocm_agent_enumerator_is_absent(env):
    env.stub("rocminfo", "Agent 1\n  Name: AMD EPYC\nAgent 2\n  Name: gfx942\n  ISA Info:\n    Name: amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-\n")
    assert [(g.vendor, g.arch, g.tool) for g in detect().gpus] == [("amd", "gfx942", "rocminfo")]


def test_gpus_are_probed_once_while_tools_and_environment_stay(env, monkeypatch):
    """Each generate resolves a profile; the GPU probes run once per process, again when a tool or
    the environment changes."""
    from rosenna.toolchain.detection import detect_gpus

    log = env.root / "probes.log"
    env.stub("rocm_agent_enumerator", "gfx000\ngfx90a", script=f"echo run >> '{log}'")
    notes = []
    assert [g.arch for g in detect_gpus(notes)] == [g.arch for g in detect_gpus()] == ["gfx90a"]
    assert log.read_text().count("run") == 1
    env.stub("rocm_agent_enumerator", "gfx942", script=f"echo run >> '{log}'")  # a new answer
    assert [g.arch for g in detect_gpus()] == ["gfx942"]
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "0")
    assert [g.arch for g in detect_gpus()] == ["gfx942"] and log.read_text().count("run") == 3
    (env.bin / "rocm_agent_enumerator").unlink()
    env.stub("nvidia-smi", script="exit 3")
    failed = []
    assert detect_gpus(failed) == () == detect_gpus(notes[:0])
    assert failed and "exit status 3" in failed[0]
    again = []
    detect_gpus(again)
    assert again == failed  # a cached probe still reports its notes


def test_sycl_ls_intel_gpu(env):
    env.stub("sycl-ls", "[opencl:cpu:0] Intel(R) OpenCL, Intel(R) Xeon(R) Platinum 8480+ OpenCL 3.0 [2023.16]\n"
                        "[level_zero:gpu:0] Intel(R) Level-Zero, Intel(R) Data Center GPU Max 1550 1.3 [1.3.26241]\n"
                        "[opencl:gpu:1] Intel(R) OpenCL Graphics, Intel(R) Data Center GPU Max 1550 OpenCL 3.0 [23.17]\n")
    gpus = detect().gpus
    assert [(g.vendor, g.tool) for g in gpus] == [("intel", "sycl-ls")]
    assert "Data Center GPU Max 1550" in gpus[0].model


def test_a_failing_nvidia_smi_is_a_note_not_an_error(env):
    env.stub("nvidia-smi", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", status=9)
    found = detect()
    assert found.gpus == ()
    assert any("nvidia-smi" in n and "exit status 9" in n for n in found.notes)


@pytest.mark.parametrize("cpu,gcc_flags,nvc", [
    ("zen3", "-march=znver3 -mtune=znver3", "-tp zen3"),
    ("sapphirerapids", "-march=sapphirerapids -mtune=sapphirerapids", None),
    ("neoverse_v2", "-march=armv9-a+i8mm+bf16 -mtune=cortex-a710", "-tp neoverse-v2"),
])
def test_archspec_cpu_and_host_flags(env, cpu, gcc_flags, nvc):
    env.monkeypatch.setattr(archspec.cpu, "host", lambda: archspec.cpu.TARGETS[cpu])
    env.compilers("gcc", "nvc", "nvcc", "icx")
    found = detect()
    assert found.cpu.name == cpu and found.cpu.vendor == archspec.cpu.TARGETS[cpu].vendor
    gcc, nvc_found, nvcc = found.compiler("gcc"), found.compiler("nvc"), found.compiler("nvcc")
    assert (gcc.family, gcc.version, gcc.host_flags) == ("gcc", "12.2.0", gcc_flags)
    assert (nvc_found.family, nvc_found.version) == ("nvhpc", "24.1")
    assert (nvcc.family, nvcc.version, nvcc.host_flags) == ("nvcc", "12.4", "")
    assert found.compiler("icx").family == "oneapi" and found.compiler("icx").version == "2024.0.0"
    if nvc:
        assert nvc_found.host_flags == nvc
    else:  # archspec refuses rather than guess; we say so
        assert nvc_found.host_flags == "" and "nvhpc" in nvc_found.host_flags_note
        assert "icelake" in nvc_found.host_flags_note


def test_archspec_too_old_compiler_is_reported(env):
    env.stub("gcc", "gcc (GCC) 4.8.5 20150623 (Red Hat 4.8.5-44)")
    gcc = detect().compiler("gcc")
    assert gcc.version == "4.8.5" and gcc.host_flags == ""
    assert "cannot produce optimized binary" in gcc.host_flags_note


# ----------------------------------------------------------------------------- selection

def choose(env):
    catalog = catalog_of()
    from rosenna.toolchain.resolution import compiler_commands

    return select(catalog, detect(compiler_commands(catalog)))


def test_auto_picks_nvhpc_on_an_h100_with_nvhpc(env):
    env.stub("nvidia-smi", NVIDIA_SMI_H100)
    env.compilers("nvc", "nvc++", "nvfortran", "nvcc", "gcc", "gfortran")
    selection = choose(env)
    profile = selection.profile
    assert profile.name == "nvhpc"
    assert profile.flags_omp_offload == "-mp=gpu -gpu=cc90" and profile.device_flags() == "-O3 -arch=sm_90"
    assert "NVIDIA H100 80GB HBM3 (cc 90) found by nvidia-smi" in profile.reason
    assert selection.considered[0] == ("nvhpc", "chosen")
    assert resolve("auto").name == "nvhpc"


def test_auto_on_an_a100_without_nvcc_skips_nvhpc(env):
    env.stub("nvidia-smi", NVIDIA_SMI_A100)
    env.compilers("nvc", "nvfortran")  # no nvcc: nvhpc's cuda backend cannot build
    # gcc cannot offload here: its probe (an OpenMP target build) fails
    env.stub("gcc", BANNERS["gcc"], script='case "$*" in *-foffload=nvptx*) echo "mkoffload not found" >&2; exit 1;; esac')
    env.compilers("gfortran")
    selection = choose(env)
    verdicts = dict(selection.considered)
    assert "nvcc (device)" in verdicts["nvhpc"]
    assert "probe" in verdicts["gcc-nvptx"] and "mkoffload not found" in verdicts["gcc-nvptx"]
    assert "not on PATH" in verdicts["clang-offload"]
    assert selection.profile.name == "gcc"
    assert "no profile for the GPU found (NVIDIA A100-SXM4-80GB (cc 80)) is usable" in selection.profile.reason
    assert selection.profile.device_flags() == "-O3 -arch=sm_80"


def test_auto_picks_gcc_nvptx_when_gcc_can_offload(env):
    env.stub("nvidia-smi", NVIDIA_SMI_H100)
    env.compilers("gcc", "gfortran")  # the stub gcc builds the probe
    profile = choose(env).profile
    assert profile.name == "gcc-nvptx" and "probe passed" in profile.reason


def test_auto_picks_rocm_on_gfx90a(env):
    env.monkeypatch.setattr(archspec.cpu, "host", lambda: archspec.cpu.TARGETS["zen3"])
    env.stub("rocm_agent_enumerator", "gfx000\ngfx90a\n")
    env.compilers("amdclang", "amdclang++", "amdflang", "hipcc")
    profile = choose(env).profile
    assert profile.name == "rocm" and profile.backend == "hip"
    assert profile.flags_omp_offload == "-fopenmp --offload-arch=gfx90a"
    assert profile.device_flags() == "-O3 --offload-arch=gfx90a"


def test_auto_picks_oneapi_on_an_intel_gpu(env):
    env.monkeypatch.setattr(archspec.cpu, "host", lambda: archspec.cpu.TARGETS["sapphirerapids"])
    env.stub("sycl-ls", "[level_zero:gpu:0] Intel(R) Level-Zero, Intel(R) Data Center GPU Max 1550 1.3 [1.3.26241]")
    env.compilers("icx", "icpx", "ifx")
    profile = choose(env).profile
    assert profile.name == "oneapi" and profile.flags_omp_offload == "-fopenmp -fopenmp-targets=spir64"


def test_auto_without_gpu_picks_gcc(env):
    env.monkeypatch.setattr(archspec.cpu, "host", lambda: archspec.cpu.TARGETS["neoverse_v2"])
    env.compilers("nvc", "nvfortran", "nvcc", "gcc", "gfortran")  # a vendor compiler but no GPU
    profile = choose(env).profile
    assert profile.name == "gcc" and profile.reason.startswith("no GPU found; host profile 'gcc'")


def test_auto_with_nothing_falls_back_to_gcc(env):
    profile = choose(env).profile
    assert profile.name == "gcc" and "falling back to 'gcc'" in profile.reason


def test_auto_prefers_a_site_profile_for_the_gpu(env):
    folder = env.profile_dir()
    env.write(folder, "our-gpus", "extends: gcc\ngpu_vendor: [nvidia]\nbackend: cuda\n")
    env.search_path(folder)
    env.stub("nvidia-smi", NVIDIA_SMI_H100)
    env.compilers("nvc", "nvc++", "nvfortran", "nvcc", "gcc", "gfortran")
    profile = resolve("auto")
    assert profile.name == "our-gpus" and profile.kind == "path" and profile.device_flags() == "-O3 -arch=sm_90"


# ----------------------------------------------------------------------------- for real

@pytest.mark.skipif(not shutil.which("gcc") or not shutil.which("gfortran"), reason="needs gcc and gfortran")
def test_gcc_profile_compiles_for_real(tmp_path):
    profile = resolve("gcc", detection=detect_none())
    profile.check_compilers()
    (tmp_path / "t.c").write_text(
        "#include <omp.h>\n#include <stdio.h>\nint main(void){int n=0;\n#pragma omp parallel reduction(+:n)\nn+=1;\n"
        "printf(\"%d\\n\", n > 0);return 0;}\n")
    (tmp_path / "t.f90").write_text("program t\n  use omp_lib\n  print *, omp_get_max_threads() > 0\nend program t\n")
    for compiler, src in ((profile.cc, "t.c"), (profile.fc, "t.f90")):
        exe = tmp_path / (src + ".out")
        subprocess.run([compiler, *profile.flags_host.split(), "-O2", src, "-o", str(exe)],
                       cwd=tmp_path, check=True, capture_output=True)
        assert subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip() in ("1", "T")


# ----------------------------------------------------------------------------- CLI

def cli(argv):
    return rosenna.cli.main(argv)


@pytest.fixture(autouse=True)
def only_toolchain_subcommand(monkeypatch):
    # The other subcommands are built elsewhere; the CLI shell is exercised with this one alone.
    monkeypatch.setattr(rosenna.cli, "SUBCOMMANDS", ("rosenna.commands.toolchain",))


def test_toolchain_is_a_registered_subcommand():
    import importlib

    import rosenna.cli as fresh

    importlib.reload(fresh)
    assert "rosenna.commands.toolchain" in fresh.SUBCOMMANDS


def test_cli_list_show_detect(env, capsys):
    env.stub("nvidia-smi", NVIDIA_SMI_H100)
    env.compilers("nvc", "nvc++", "nvfortran", "nvcc")
    assert cli(["toolchain", "list"]) == 0
    out = capsys.readouterr().out
    for path in SHIPPED:
        assert f"{path.stem:<13}  builtin  {path}" in out
    assert cli(["toolchain", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in listed["profiles"]] == ["clang-offload", "gcc-nvptx", "gcc", "nvhpc", "oneapi", "rocm"]

    assert cli(["toolchain", "show", "NVHPC"]) == 0
    out = capsys.readouterr().out
    assert "profile:      nvhpc (builtin)" in out and "omp offload:  -mp=gpu -gpu=cc90" in out
    assert "ROSENNA_BACKEND = cuda" in out

    assert cli(["toolchain", "detect", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cpu"]["name"] == "zen3"
    assert report["gpus"][0]["arch"] == "90"
    assert {c["command"] for c in report["compilers"]} == {"nvc", "nvc++", "nvfortran", "nvcc"}
    assert report["selection"]["profile"] == "nvhpc" and "H100" in report["selection"]["reason"]

    assert cli(["toolchain", "detect"]) == 0
    out = capsys.readouterr().out
    assert "cpu:       zen3" in out and "profile:   nvhpc" in out and "-tp zen3" in out


def test_cli_errors(env, capsys):
    assert cli(["toolchain", "show", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rosenna toolchain: error: no toolchain profile or alias named 'nosuch'")
    bad = env.write(env.profile_dir(), "bad", "extends: gcc\nflags: {hots: -O2}\n")
    assert cli(["toolchain", "validate", str(bad)]) == 1
    assert "key 'flags.hots'" in capsys.readouterr().err
    assert cli(["toolchain", "validate", *map(str, SHIPPED)]) == 0
    assert cli(["toolchain", "validate"]) == 0


# ----------------------------------------------------------------------------- packaging

def test_profiles_ship_in_sdist_and_wheel():
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    assert cfg["options.data_files"]["share/rosenna/toolchains/builtin"].strip() == "toolchains/*.yaml"
    assert not any("toolchains" in value for value in cfg["options.package_data"].values())
    assert "recursive-include toolchains *.yaml" in (REPO / "MANIFEST.in").read_text()


def test_installed_builtins_are_found_under_the_prefix(tmp_path, monkeypatch):
    from rosenna.toolchain import catalog

    installed = tmp_path / "share" / "rosenna" / "toolchains" / "builtin"
    installed.mkdir(parents=True)
    monkeypatch.setattr(catalog, "source_checkout_toolchains", lambda: None)
    monkeypatch.setattr(catalog, "_install_prefix", lambda: None)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert catalog.builtin_dir() == installed
    installed.rmdir()
    with pytest.raises(ToolchainError, match="built-in toolchain profiles are missing"):
        catalog.builtin_dir()


def test_validate_prints_each_problem_once_on_one_line(env, capsys):
    """A broken file on the search path: `validate` prints its problems once, each `FILE:LINE:`
    with what is wrong and what to do, not the catalog's one-line notice of it first."""
    folder = env.profile_dir()
    bad = env.write(folder, "bad", "name: bad\ncompilers:\n  c: 3\n  bogus: x\n")
    orphan = env.write(folder, "orphan", "backend: cuda\nextends: nosuch\n")
    env.search_path(folder)
    assert cli(["toolchain", "validate"]) == 1
    err = capsys.readouterr().err.splitlines()
    problems = [line for line in err if line.startswith(str(folder))]
    assert problems == [
        f"{bad}:3: invalid profile: key 'compilers.c': should be text (quote it if YAML reads it as a number, "
        "true/false or null), not the number 3",
        f"{bad}:4: invalid profile: key 'compilers.bogus': unknown key: remove it or use one of c, cxx, device, "
        "fortran",
        f"{orphan}:2: key 'extends': no profile named 'nosuch'; name one that `rosenna toolchain list` shows",
    ], err
    assert len(err) == len(problems) + 1 and err[-1].endswith("profile files failed"), err
