"""Packaging: the Spack recipe and the EasyBuild easyconfig agree with setup.cfg, the sdist and the
wheel carry what they must, and EasyBuild installs rosenna for real.

CI has no Spack: the recipe is read as Python source (its ``depends_on``/``version``/``variant``
calls), not imported. docs/spack.md records the real Spack install. The EasyBuild test installs
EasyBuild from PyPI and runs it as a non-root user with Debian's Lmod (.ci/deps-packaging.sh).
"""

import ast
import configparser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import zipfile
from pathlib import Path

import pytest

import rosenna

ROOT = Path(__file__).resolve().parent.parent
SETUP_CFG = ROOT / "setup.cfg"
SPACK_REPO = ROOT / "spack" / "spack_repo" / "rosenna"
RECIPE = SPACK_REPO / "packages" / "rosenna" / "package.py"
EASYBUILD_DIR = ROOT / "easybuild"
VERSION = rosenna.__version__
#: The release this version is or comes after: 0.2.0 for 0.2.0, 0.1.0 for 0.2.0.dev0 (between
#: releases main carries the next version with .dev0, buildsys/release.py).
DEV = re.search(r"\.dev\d+$", VERSION) is not None

# setup.cfg distribution -> the EasyBuild module that provides it.
EASYBUILD_NAMES = {
    "onnx": "ONNX",
    "numpy": "SciPy-bundle",
    "onnxruntime": "ONNX-Runtime",
    "archspec": "archspec",
    "pyyaml": "PyYAML",
    "jsonschema": "jsonschema",
}
# Spack dependencies behind a variant (default on): onnxruntime is a heavy build that only
# verify and the gate need.
SPACK_CONDITIONAL = {"py-onnxruntime": "+verify"}
# The module the EasyBuild test filters every dependency to: the system Python with the
# dependencies pip-installed.
EASYBUILD_FILTERED = ["Python", *EASYBUILD_NAMES.values()]


def _version_tuple(text):
    return tuple(int(part) for part in re.findall(r"\d+", text))


def install_requires():
    """setup.cfg install_requires as {distribution: minimum version}."""
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    requires = {}
    for line in cfg["options"]["install_requires"].strip().splitlines():
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)\s*", line)
        assert match, f"setup.cfg install_requires: cannot read {line!r} (expected NAME>=VERSION)"
        requires[match.group(1).lower()] = match.group(2)
    return requires


def extra_requires(extra):
    """setup.cfg extras_require[extra] as {distribution: minimum version}."""
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    requires = {}
    for line in cfg["options.extras_require"][extra].strip().splitlines():
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)\s*", line)
        assert match, f"setup.cfg extras_require.{extra}: cannot read {line!r}"
        requires[match.group(1).lower()] = match.group(2)
    return requires


def python_requires():
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    match = re.fullmatch(r">=\s*([0-9.]+)", cfg["options"]["python_requires"].strip())
    assert match, "setup.cfg python_requires: expected >=X.Y"
    return match.group(1)


def _literal(node):
    return ast.literal_eval(node) if node is not None else None


def _directive_calls(body, when=None):
    """(name, args, kwargs, enclosing when) of every directive call in a class body."""
    for stmt in body:
        if isinstance(stmt, ast.With):
            inner = when
            for item in stmt.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "when":
                    inner = _literal(call.args[0])
            yield from _directive_calls(stmt.body, inner)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            name = getattr(call.func, "id", None)
            if name:
                args = [_literal(a) for a in call.args]
                kwargs = {k.arg: _literal(k.value) for k in call.keywords}
                yield name, args, kwargs, when


def spack_recipe():
    """The recipe's class: its directives, read from the source."""
    tree = ast.parse(RECIPE.read_text(), filename=str(RECIPE))
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert [c.name for c in classes] == ["Rosenna"], "the recipe defines one class, Rosenna"
    recipe = {"depends_on": {}, "version": {}, "variant": {}}
    for name, args, kwargs, when in _directive_calls(classes[0].body):
        if name == "depends_on":
            spec = args[0]
            match = re.fullmatch(r"([a-z0-9-]+)(?:@([0-9.]+):)?", spec)
            assert match, f"{RECIPE.name}: cannot read depends_on({spec!r})"
            types = kwargs.get("type", ("build", "link"))
            types = (types,) if isinstance(types, str) else tuple(types)
            recipe["depends_on"][match.group(1)] = {
                "min": match.group(2), "type": types, "when": kwargs.get("when", when),
            }
        elif name in ("version", "variant"):
            recipe[name][args[0]] = kwargs
    return recipe


def easyconfigs():
    return sorted(EASYBUILD_DIR.glob("rosenna-*.eb"))


def read_easyconfig(path):
    """An easyconfig's parameters: it is Python with EasyBuild's template constants."""
    namespace = {"PYPI_SOURCE": "PYPI_SOURCE", "SOURCE_TAR_GZ": "SOURCE_TAR_GZ", "SYSTEM": {}}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - our own file
    return namespace


# ---------------------------------------------------------------------------------------------
# The Spack recipe


def test_spack_repo_is_a_package_api_v2_repository():
    import yaml

    config = yaml.safe_load((SPACK_REPO / "repo.yaml").read_text())["repo"]
    assert re.fullmatch(r"v2\.\d+", config["api"]), "Spack 1.x repositories are api v2.x"
    # v2 derives the namespace from the path .../spack_repo/<namespace>
    assert SPACK_REPO.parent.name == "spack_repo"
    assert config.get("namespace", SPACK_REPO.name) == SPACK_REPO.name
    assert RECIPE.is_file()
    assert not (ROOT / "spack" / "packages").exists(), "the v1 layout would be a second recipe"


def test_spack_dependencies_match_setup_cfg():
    deps = spack_recipe()["depends_on"]
    requires = install_requires()
    verify = extra_requires("verify")
    assert set(verify) == {"onnxruntime"} and "onnxruntime" not in requires, \
        "onnxruntime is the verify extra (Spack's +verify), not a base requirement"
    for dist, minimum in {**requires, **verify}.items():
        spack_name = "py-" + dist.replace("_", "-")
        assert spack_name in deps, f"setup.cfg needs {dist}; the recipe lacks {spack_name}"
        dep = deps[spack_name]
        assert dep["min"] == minimum, (
            f"{spack_name}: recipe @{dep['min']}:, setup.cfg {dist}>={minimum}"
        )
        assert "run" in dep["type"], f"{spack_name} must be a run dependency"
        expected_when = "+verify" if dist in verify else None
        assert dep["when"] == expected_when, (
            f"{spack_name}: when={dep['when']!r}, expected {expected_when!r}"
        )
    known = {d.replace("_", "-") for d in {**requires, **verify}}
    extra = {
        name for name, dep in deps.items()
        if name.startswith("py-") and "run" in dep["type"] and name[3:] not in known
    }
    assert not extra, f"run dependencies in the recipe that setup.cfg lacks: {sorted(extra)}"
    assert deps["python"]["min"] == python_requires()
    assert "build" in deps["py-setuptools"]["type"]


def test_spack_variants_default_to_a_full_install():
    variants = spack_recipe()["variant"]
    assert variants["verify"]["default"] is True
    for when in set(SPACK_CONDITIONAL.values()):
        assert when.lstrip("+~") in variants
    # Site profiles are configuration: a path-valued variant put the path into the hash.
    assert set(variants) == {"verify"}, f"variants {sorted(variants)}: site profiles go through the module"


def _recipe_class():
    tree = ast.parse(RECIPE.read_text(), filename=str(RECIPE))
    return next(n for n in tree.body if isinstance(n, ast.ClassDef))


def test_spack_recipe_says_who_and_what_a_maintainer_checks():
    cls = _recipe_class()
    assigns = {t.id: _literal(n.value) for n in cls.body if isinstance(n, ast.Assign)
               for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
    assert assigns["homepage"].startswith("https://"), "no homepage"
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    assert assigns["homepage"] in cfg["metadata"]["project_urls"], "recipe and setup.cfg name different homes"
    calls = {name: (args, kwargs) for name, args, kwargs, _ in _directive_calls(cls.body)}
    assert calls["maintainers"][0], "maintainers() names nobody"
    args, kwargs = calls["license"]
    assert args == ["BSD-3-Clause"] and kwargs.get("checked_by"), "license() needs checked_by"
    assert cfg["metadata"]["license"].strip() == "BSD-3-Clause"


def test_spack_import_modules_cover_every_run_dependency():
    """An install missing a run dependency must fail `spack test run` (test_imports): rosenna
    imports some only when a command needs them, so each is named by its own module."""
    prop = next(n for n in _recipe_class().body if isinstance(n, ast.FunctionDef) and n.name == "import_modules")
    named = {c.value for c in ast.walk(prop) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    module_of = {"onnx": "onnx", "numpy": "numpy", "archspec": "archspec.cpu", "pyyaml": "yaml",
                 "jsonschema": "jsonschema", "onnxruntime": "onnxruntime"}
    for dist in {**install_requires(), **extra_requires("verify")}:
        assert module_of[dist] in named, f"import_modules does not import {module_of[dist]} ({dist})"
    assert {"rosenna", "rosenna.cli"} <= named
    body = ast.unparse(prop)
    assert "satisfies('+verify')" in body and body.index("onnxruntime") > body.index("+verify")


def test_site_profiles_come_through_the_module_environment():
    source = RECIPE.read_text()
    env = next(n for n in _recipe_class().body if isinstance(n, ast.FunctionDef) and n.name == "setup_run_environment")
    assert "env.prepend_path('ROSENNA_TOOLCHAIN_PATH', self.toolchains_dir)" in ast.unparse(env)
    assert "site_toolchains" not in source
    ec = read_easyconfig(easyconfigs()[-1])
    assert ec["modextrapaths"] == {"ROSENNA_TOOLCHAIN_PATH": "share/rosenna/toolchains"}
    from rosenna.toolchain.catalog import search_path

    first = search_path({"ROSENNA_TOOLCHAIN_PATH": "/apps/site/rosenna-toolchains", "HOME": "/nonexistent"})[0]
    assert (str(first.path), first.kind) == ("/apps/site/rosenna-toolchains", "path")


def test_spack_repo_add_paths_are_the_ones_spack_takes():
    """Spack 1.x adds a local package repository by its own root, whose path must end in
    spack_repo/<namespace> (spack/repo.py); a git URL is read through spack-repo-index.yaml at
    the repository's root. Every `spack repo add` the docs show uses one of the two."""
    import yaml

    index = yaml.safe_load((ROOT / "spack-repo-index.yaml").read_text())["repo_index"]["paths"]
    assert index == ["spack/spack_repo/rosenna"] and (ROOT / index[0] / "repo.yaml").is_file()
    shown = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), RECIPE, SPACK_REPO / "repo.yaml",
                 ROOT / "spack-repo-index.yaml"]:
        for line in path.read_text().splitlines():
            if "refused" in line:  # the docs showing what Spack refuses
                continue
            for match in re.finditer(r"spack repo add\s+(?:--name\s+\S+\s+)?(<[^>]*>\S*|\S+)", line):
                shown.append((path.name, match.group(1).strip("`")))
    assert shown, "the docs show no `spack repo add`"
    for where, target in shown:
        local = target.rstrip("/").endswith("spack/spack_repo/rosenna")
        remote = re.match(r"(https://|file://|git@)", target) or target.startswith("<git")
        assert local or remote, f"{where}: `spack repo add {target}` is refused by Spack 1.x"


def test_spack_versions():
    versions = spack_recipe()["version"]
    assert versions["main"] == {"branch": "main"}
    released = {v: kw for v, kw in versions.items() if re.fullmatch(r"[0-9.]+", v)}
    assert released, "no release version in the recipe"
    for version, kwargs in released.items():
        assert re.fullmatch(r"[0-9a-f]{64}", kwargs.get("sha256", "")), f"{version}: no sha256"
    newest = max(released, key=_version_tuple)
    if DEV:  # between releases: the newest release comes before this version
        assert _version_tuple(newest) < _version_tuple(VERSION.rsplit(".dev", 1)[0]), \
            f"the recipe has {newest}, this is {VERSION}"
        changelog = (ROOT / "CHANGELOG.md").read_text()
        assert f"\n## {newest} - " in changelog, f"CHANGELOG.md has no '## {newest} - DATE' section"
    else:
        assert newest == VERSION, (
            f"the recipe's newest release is {newest}, rosenna is {VERSION}: cut releases with "
            "buildsys/release.py (docs/releasing.md)"
        )


def newest_release():
    return max((v for v in spack_recipe()["version"] if re.fullmatch(r"[0-9.]+", v)), key=_version_tuple)


# ---------------------------------------------------------------------------------------------
# The EasyBuild easyconfig


def test_easyconfig_matches_the_package():
    paths = easyconfigs()
    assert paths, f"no rosenna-*.eb in {EASYBUILD_DIR}"
    release = newest_release()
    current = [p for p in paths if p.name.startswith(f"rosenna-{release}-")]
    assert len(current) == 1, f"expected one easyconfig for rosenna {release}, found {paths}"
    ec = read_easyconfig(current[0])
    toolchain = ec["toolchain"]
    assert current[0].name == f"rosenna-{ec['version']}-{toolchain['name']}-{toolchain['version']}.eb"
    assert ec["name"] == "rosenna" and ec["version"] == release
    assert ec["easyblock"] == "PythonPackage"
    assert ec["sources"] == ["SOURCE_TAR_GZ"]


def test_easyconfig_dependencies_match_setup_cfg():
    ec = read_easyconfig(easyconfigs()[-1])
    deps = {name: version for name, version, *_ in ec["dependencies"]}
    requires = install_requires()
    # EasyBuild has no extras: the easyconfig installs verify's onnxruntime too (Spack's default +verify).
    expected = {"Python"} | {EASYBUILD_NAMES[d] for d in {**requires, **extra_requires("verify")}}
    assert set(deps) == expected, (
        f"easyconfig dependencies {sorted(deps)}, setup.cfg implies {sorted(expected)} "
        f"(map new distributions in EASYBUILD_NAMES)"
    )
    assert _version_tuple(deps["Python"]) >= _version_tuple(python_requires())
    for dist, minimum in requires.items():
        module = EASYBUILD_NAMES[dist]
        if module.lower() == dist:  # same project: the versions compare
            assert _version_tuple(deps[module]) >= _version_tuple(minimum), (
                f"{module} {deps[module]} is older than setup.cfg's {dist}>={minimum}"
            )
    assert _version_tuple(deps["ONNX"]) >= _version_tuple(requires["onnx"])
    assert _version_tuple(deps["ONNX-Runtime"]) >= _version_tuple(extra_requires("verify")["onnxruntime"])


def test_easyconfig_and_spack_name_the_same_release_tarball():
    ec = read_easyconfig(easyconfigs()[-1])
    spack_sha = spack_recipe()["version"][ec["version"]]["sha256"]
    assert ec["checksums"] == [spack_sha], "the two recipes disagree on the sdist's sha256"


def test_easyconfig_sanity_check_runs_rosenna():
    ec = read_easyconfig(easyconfigs()[-1])
    commands = " ".join(ec["sanity_check_commands"])
    assert "rosenna --version" in commands and "rosenna generate" in commands
    assert "bin/rosenna" in ec["sanity_check_paths"]["files"]


# ---------------------------------------------------------------------------------------------
# Distribution


def _copy_tree(dest):
    """This checkout's files without build outputs: tracked plus untracked-but-not-ignored."""
    dest.mkdir(parents=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True,
    )
    if listed.returncode == 0:
        for name in listed.stdout.decode().split("\0"):
            source = ROOT / name
            if name and source.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest / name)
    else:  # not a git checkout (an unpacked sdist)
        shutil.copytree(ROOT, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__"))
    return dest


def _python_with_build(tmp_path):
    """A Python that has PyPA's `build`: this one, else a venv with it from PyPI."""
    # Run from tmp_path: a build/ folder in the checkout would import as a namespace package.
    check = subprocess.run([sys.executable, "-c", "from build import ProjectBuilder"],
                           capture_output=True, cwd=tmp_path)
    if check.returncode == 0:
        return sys.executable
    venv = tmp_path / "build-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", "build"], timeout=300)
    return python


def _run(cmd, timeout, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(map(str, cmd))} exited {result.returncode}:\n"
        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result


#: Without PYTHONDONTWRITEBYTECODE, under which setuptools says "byte-compiling is disabled".
_QUIET_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _assert_no_setuptools_warning(what, result):
    """setuptools' warnings ("Package would be ignored", "Editable installation", deprecations),
    not pip's own notes about this machine's index configuration."""
    lines = [line for line in (result.stdout + result.stderr).splitlines()
             if re.search(r"warning|would be ignored|!!", line, re.I) and "Location 'file:" not in line
             and not line.startswith(("copying ", "adding "))]  # a file whose name says "warning"
    assert not lines, f"{what} printed setuptools warnings:\n" + "\n".join(lines[:20])


def test_pip_install_is_quiet(tmp_path):
    """`make demo` installs the checkout editable, a user `pip install .`: setuptools has nothing
    to warn about (data folders declared as packages, the layout said), shown by pip -v, which
    prints the backend's output."""
    source = _copy_tree(tmp_path / "src")
    (source / "rosenna" / "__pycache__").mkdir(exist_ok=True)  # a used checkout has these
    installed = _run([sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation", "--ignore-installed",
                      "--prefix", str(tmp_path / "prefix"), "-e", str(source)],
                     timeout=300, cwd=tmp_path, env=_QUIET_ENV)
    _assert_no_setuptools_warning("pip install -e .", installed)
    installed = _run([sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation", "--ignore-installed",
                      "--prefix", str(tmp_path / "prefix2"), str(source)], timeout=300, cwd=tmp_path, env=_QUIET_ENV)
    _assert_no_setuptools_warning("pip install .", installed)


def test_sdist_and_wheel_contents(tmp_path):
    source = _copy_tree(tmp_path / "src")
    python = _python_with_build(tmp_path)
    dist = tmp_path / "dist"
    built = _run([python, "-m", "build", "--sdist", "--wheel", "--outdir", str(dist), str(source)],
                 timeout=600, cwd=tmp_path, env=_QUIET_ENV)
    _assert_no_setuptools_warning("python -m build", built)
    sdist = dist / f"rosenna-{VERSION}.tar.gz"
    wheel = dist / f"rosenna-{VERSION}-py3-none-any.whl"
    assert sdist.is_file() and wheel.is_file(), sorted(p.name for p in dist.iterdir())

    package_files = sorted(
        p.relative_to(source).as_posix() for p in (source / "rosenna").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    profiles = sorted(p.name for p in (source / "toolchains").glob("*.yaml"))
    assert profiles, "no toolchains/*.yaml to ship"

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(f"rosenna-{VERSION}.dist-info/METADATA").decode()
        entry_points = zf.read(f"rosenna-{VERSION}.dist-info/entry_points.txt").decode()
    missing = [f for f in package_files if f not in names]
    assert not missing, f"package files missing from the wheel (templates?): {missing}"
    data = f"rosenna-{VERSION}.data/data/share/rosenna/toolchains/builtin"
    missing = [p for p in profiles if f"{data}/{p}" not in names]
    assert not missing, f"profiles missing from the wheel's {data}: {missing}"
    assert f"\nVersion: {VERSION}\n" in metadata
    requires = {
        re.split(r"[<>=!;\s]", line[len("Requires-Dist: "):])[0].lower()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ") and "extra ==" not in line
    }
    assert requires == set(install_requires())
    assert "Requires-Dist: onnxruntime>=1.15; extra == \"verify\"" in metadata, metadata[:3000]
    assert "Provides-Extra: verify" in metadata
    for label in ("Homepage", "Source", "Issues", "Documentation"):
        assert re.search(rf"^Project-URL: {label}, https://", metadata, re.M), f"no {label} URL in the metadata"
    assert re.search(r"^License-File: LICENSE$", metadata, re.M), "the metadata names no license file"
    licenses = [n for n in names if n.startswith(f"rosenna-{VERSION}.dist-info/") and n.endswith("/LICENSE")
                or n == f"rosenna-{VERSION}.dist-info/LICENSE"]
    assert licenses, f"no LICENSE in the wheel's dist-info: {sorted(n for n in names if 'dist-info' in n)}"
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read(licenses[0]) == (source / "LICENSE").read_bytes()
    assert re.search(r"^rosenna\s*=\s*rosenna\.cli:main$", entry_points, re.M), entry_points

    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name}
    for needed in ["setup.cfg", "pyproject.toml", "LICENSE", "buildsys/reproducible_sdist.py", "gate/slurm/gpu-gate.sbatch",
                   "gate/pbs/gpu-gate.pbs", *package_files, *(f"toolchains/{p}" for p in profiles)]:
        assert needed in members, f"{needed} missing from the sdist"


def test_verify_without_onnxruntime_is_one_line(tmp_path, capsys, monkeypatch):
    """onnxruntime is the verify extra: without it `rosenna verify` says so in one line, exit 2
    (it raised ModuleNotFoundError), and generate does not need it."""
    from rosenna import zoo
    from rosenna.cli import main

    model = zoo.save("gemm_small", str(tmp_path / "m.onnx"))
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    assert main(["generate", model, "--out", str(tmp_path / "gen")]) == 0
    capsys.readouterr()
    assert main(["verify", model]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("rosenna verify: error: this command compares with onnxruntime, which is not installed")
    assert "pip install 'rosenna[verify]'" in err and "rosenna+verify" in err


def test_license_is_the_bsd_3_clause_text():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License\n") and "the rosenna developers" in text.splitlines()[2]
    for clause in ("Redistributions of source code must retain", "Redistributions in binary form must reproduce",
                   "Neither the name of the copyright holder", 'PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"'):
        assert clause in text


def test_sdist_is_the_same_bytes_from_one_commit(tmp_path):
    """Two sdists of one tree are identical even when its files' times, the umask and the build
    time differ (a later fresh clone): the recipe's and the easyconfig's sha256 can be checked."""
    pytest.importorskip("build")
    source = _copy_tree(tmp_path / "src")
    epoch = "1767225600"  # what a release sets, or the backend takes from the commit
    built = []
    for attempt in range(2):
        if attempt:  # a fresh clone, later: every file newer, another umask
            for path in source.rglob("*"):
                os.utime(path, (2_000_000_000, 2_000_000_000))
        old_umask = os.umask(0o022 if attempt == 0 else 0o077)
        try:
            out = tmp_path / f"dist{attempt}"
            _run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--skip-dependency-check",
                  "--outdir", str(out), str(source)], timeout=300, cwd=tmp_path,
                 env=dict(os.environ, SOURCE_DATE_EPOCH=epoch))
        finally:
            os.umask(old_umask)
        built.append((out / f"rosenna-{VERSION}.tar.gz").read_bytes())
    assert built[0] == built[1], "two builds of one tree gave different sdists"
    with tarfile.open(out / f"rosenna-{VERSION}.tar.gz") as tf:
        members = tf.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {m.mtime for m in members} == {int(epoch)} and {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
    assert built[0][4:8] == int(epoch).to_bytes(4, "little"), "the gzip header keeps the build time"
    # In a git checkout the time is the last commit's, without SOURCE_DATE_EPOCH.
    commit = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=ROOT, capture_output=True, text=True)
    if commit.returncode == 0 and commit.stdout.strip():
        env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
        probe = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'buildsys'); import "
                                "reproducible_sdist as r; print(r.source_date_epoch())"], cwd=ROOT, env=env,
                               capture_output=True, text=True)
        assert probe.stdout.strip() == commit.stdout.strip(), probe.stderr


def test_release_sdist_is_the_recorded_checksum(tmp_path):
    """The recipe's and the easyconfig's sha256 is the reproducible sdist of the release commit the
    recipe names: rebuilt here from that commit, it must be the same bytes."""
    import hashlib

    import setuptools

    release = newest_release()
    commit, built_with = re.search(rf"# {re.escape(release)}: release commit ([0-9a-f]{{40}}), sdist built with "
                                   r"setuptools (\S+)", RECIPE.read_text()).groups()
    if subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True).returncode:
        pytest.skip(f"no git history with {commit[:12]} here (an unpacked sdist or a shallow clone)")
    if setuptools.__version__ != built_with:
        pytest.skip(f"setuptools {setuptools.__version__}; the release sdist was built with {built_with}")
    pytest.importorskip("build")
    source = tmp_path / "src"
    source.mkdir()
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    epoch = subprocess.run(["git", "log", "-1", "--format=%ct", commit], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.strip()
    _run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--skip-dependency-check",
          "--outdir", str(tmp_path / "dist"), str(source)], timeout=300, cwd=tmp_path,
         env=dict(os.environ, SOURCE_DATE_EPOCH=epoch))
    digest = hashlib.sha256((tmp_path / "dist" / f"rosenna-{release}.tar.gz").read_bytes()).hexdigest()
    assert digest == spack_recipe()["version"][release]["sha256"], f"the sdist of {commit[:12]} is {digest}"


def test_version_is_defined_once():
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    assert cfg["metadata"]["version"].strip() == "attr: rosenna.__version__"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert not re.search(r"^\s*version\s*=", pyproject, re.M), "pyproject.toml sets a version"
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+)?", VERSION)


# ---------------------------------------------------------------------------------------------
# EasyBuild, for real

LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")
EB_USER = "rosenna-eb"

EB_SCRIPT = r"""
set -euo pipefail
work={work}
export PATH=$work/venv/bin:/usr/local/bin:/usr/bin:/bin
export EB_PYTHON=$work/venv/bin/python
. {lmod_init}

# The sdist, made the way a release is made.
python -m build --sdist --no-isolation --outdir "$work/sources" "$work/src" > "$work/build.log" 2>&1

# Dependencies filtered to the "system": the venv's Python with them pip-installed; the foss
# toolchain swapped for the system compilers (nothing here is compiled).
eb "$work/src/easybuild/{easyconfig}" \
    --prefix="$work/eb" --sourcepath="$work/sources" --buildpath="$work/build" \
    --tmpdir="$work/tmp" --modules-tool=Lmod --module-syntax=Lua \
    --try-toolchain=system,system --disable-map-toolchains \
    --filter-deps={filtered} {try_version}\
    --ignore-checksums

module use "$work/eb/modules/all"
module load rosenna
echo "loaded: $(command -v rosenna)"
rosenna --version
cd "$(mktemp -d -p "$work")"
rosenna zoo gemm_small -o gemm_small.onnx
rosenna generate gemm_small.onnx --out gen
ls gen
"""


def _root():
    return os.geteuid() == 0


def _sbin(tool):
    """An admin tool by path: a root shell's PATH may lack /usr/sbin."""
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin") or tool


def _as_user(cmd):
    """``cmd`` as the non-root EasyBuild user when this is root, in a clean environment."""
    env = ["env", "-i", "LANG=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin"]
    if _root():
        return [_sbin("runuser"), "-u", EB_USER, "--", *env, *cmd]
    return [*env, *cmd]


def _ensure_tools():
    """Lmod and a non-root user, installing them where this is root; else a reason to skip."""
    if not LMOD_INIT.is_file() or subprocess.run(
            ["/usr/bin/python3", "-c", "import ensurepip"], capture_output=True).returncode:
        if not _root():
            return "Lmod or Debian's python3-venv is missing and only root can install them " \
                   "(.ci/deps-packaging.sh)"
        result = subprocess.run(["bash", str(ROOT / ".ci" / "deps-packaging.sh")],
                                capture_output=True, text=True, timeout=600)
        if result.returncode:
            return f".ci/deps-packaging.sh could not install Lmod: {result.stderr[-2000:]}"
    if _root() and subprocess.run(["id", EB_USER], capture_output=True).returncode:
        made = subprocess.run([_sbin("useradd"), "--system", "--shell", "/bin/bash", EB_USER],
                              capture_output=True, text=True)
        # A parallel worker may have made it first.
        if made.returncode and subprocess.run(["id", EB_USER], capture_output=True).returncode:
            return f"cannot create the non-root user {EB_USER}: {made.stderr}"
    return None


def test_easybuild_installs_rosenna_as_a_module():
    reason = _ensure_tools()
    if reason:
        pytest.skip(reason)
    ec = easyconfigs()[-1]
    # pytest's tmp_path is private to root: the EasyBuild user needs a folder of its own.
    work = Path(tempfile.mkdtemp(prefix="rosenna-eb-", dir="/tmp"))
    try:
        work.chmod(0o755)
        _copy_tree(work / "src")
        # Debian's python3: the user cannot run a Python under /root. Deps from PyPI (pip's cache).
        # --no-compile: no .pyc for every module of easyblocks, onnx, numpy... up front (Python
        # compiles what the install imports when it imports it).
        _run(["/usr/bin/python3", "-m", "venv", str(work / "venv")], timeout=120)
        _run([str(work / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile",
              "easybuild-framework", "easybuild-easyblocks", "build", "setuptools>=61", "wheel",
              *(f"{d}>={v}" for d, v in {**install_requires(), **extra_requires("verify")}.items())],
             timeout=900)
        script = work / "eb-install.sh"
        script.write_text(textwrap.dedent(EB_SCRIPT).format(
            work=work, lmod_init=LMOD_INIT, easyconfig=ec.name,
            # between releases: the newest release's easyconfig, tweaked to this version's sdist
            try_version=f"--try-software-version={VERSION} " if DEV else "",
            filtered=",".join(EASYBUILD_FILTERED)))
        if _root():
            subprocess.run(["chown", "-R", f"{EB_USER}:", str(work)], check=True)
        # cwd: the user's own folder, not the checkout's (a `git clone` into `mktemp -d` is mode
        # 700, and a process cannot even start in a folder it may not enter).
        result = subprocess.run(_as_user(["bash", str(script)]), capture_output=True, text=True,
                                timeout=900, cwd=work)
        output = result.stdout + result.stderr
        if result.returncode:
            logs = sorted(work.glob("tmp/eb-*/easybuild-*.log"))
            tail = logs[-1].read_text()[-6000:] if logs else "(no EasyBuild log)"
            pytest.fail(f"EasyBuild install exited {result.returncode}:\n{output[-6000:]}\n"
                        f"--- EasyBuild log ---\n{tail}")
        assert "COMPLETED: Installation ended successfully" in output, output[-4000:]
        assert f"loaded: {work}/eb/software/rosenna/{VERSION}/bin/rosenna" in output, output[-2000:]
        assert f"rosenna {VERSION}" in output.splitlines(), output[-2000:]
        assert "gemm_small.c" in output.split(), output[-2000:]
    finally:
        shutil.rmtree(work, ignore_errors=True)
