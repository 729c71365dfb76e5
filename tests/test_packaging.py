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
    for dist, minimum in requires.items():
        spack_name = "py-" + dist.replace("_", "-")
        assert spack_name in deps, f"setup.cfg needs {dist}; the recipe lacks {spack_name}"
        dep = deps[spack_name]
        assert dep["min"] == minimum, (
            f"{spack_name}: recipe @{dep['min']}:, setup.cfg {dist}>={minimum}"
        )
        assert "run" in dep["type"], f"{spack_name} must be a run dependency"
        assert dep["when"] == SPACK_CONDITIONAL.get(spack_name), (
            f"{spack_name}: when={dep['when']!r}, expected {SPACK_CONDITIONAL.get(spack_name)!r}"
        )
    extra = {
        name for name, dep in deps.items()
        if name.startswith("py-") and "run" in dep["type"]
        and name[3:] not in {d.replace("_", "-") for d in requires}
    }
    assert not extra, f"run dependencies in the recipe that setup.cfg lacks: {sorted(extra)}"
    assert deps["python"]["min"] == python_requires()
    assert "build" in deps["py-setuptools"]["type"]


def test_spack_variants_default_to_a_full_install():
    variants = spack_recipe()["variant"]
    assert variants["verify"]["default"] is True
    assert variants["site_toolchains"]["default"] == "none"
    for when in set(SPACK_CONDITIONAL.values()):
        assert when.lstrip("+~") in variants


def test_spack_versions():
    versions = spack_recipe()["version"]
    assert versions["main"] == {"branch": "main"}
    released = {v: kw for v, kw in versions.items() if re.fullmatch(r"[0-9.]+", v)}
    assert released, "no release version in the recipe"
    for version, kwargs in released.items():
        assert re.fullmatch(r"[0-9a-f]{64}", kwargs.get("sha256", "")), f"{version}: no sha256"
    newest = max(released, key=_version_tuple)
    assert newest == VERSION, (
        f"the recipe's newest release is {newest}, rosenna is {VERSION}: add version("
        f"\"{VERSION}\", sha256=...) (docs/spack.md: cutting a release)"
    )


# ---------------------------------------------------------------------------------------------
# The EasyBuild easyconfig


def test_easyconfig_matches_the_package():
    paths = easyconfigs()
    assert paths, f"no rosenna-*.eb in {EASYBUILD_DIR}"
    current = [p for p in paths if p.name.startswith(f"rosenna-{VERSION}-")]
    assert len(current) == 1, f"expected one easyconfig for rosenna {VERSION}, found {paths}"
    ec = read_easyconfig(current[0])
    toolchain = ec["toolchain"]
    assert current[0].name == f"rosenna-{ec['version']}-{toolchain['name']}-{toolchain['version']}.eb"
    assert ec["name"] == "rosenna" and ec["version"] == VERSION
    assert ec["easyblock"] == "PythonPackage"
    assert ec["sources"] == ["SOURCE_TAR_GZ"]


def test_easyconfig_dependencies_match_setup_cfg():
    ec = read_easyconfig(easyconfigs()[-1])
    deps = {name: version for name, version, *_ in ec["dependencies"]}
    requires = install_requires()
    expected = {"Python"} | {EASYBUILD_NAMES[d] for d in requires}
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
    assert _version_tuple(deps["ONNX-Runtime"]) >= _version_tuple(requires["onnxruntime"])


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


def test_sdist_and_wheel_contents(tmp_path):
    source = _copy_tree(tmp_path / "src")
    python = _python_with_build(tmp_path)
    dist = tmp_path / "dist"
    _run([python, "-m", "build", "--sdist", "--wheel", "--outdir", str(dist), str(source)],
         timeout=600, cwd=tmp_path)
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
    assert re.search(r"^rosenna\s*=\s*rosenna\.cli:main$", entry_points, re.M), entry_points

    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name}
    for needed in ["setup.cfg", "pyproject.toml", "gate/slurm/gpu-gate.sbatch",
                   "gate/pbs/gpu-gate.pbs", *package_files, *(f"toolchains/{p}" for p in profiles)]:
        assert needed in members, f"{needed} missing from the sdist"


def test_version_is_defined_once():
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    assert cfg["metadata"]["version"].strip() == "attr: rosenna.__version__"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert not re.search(r"^\s*version\s*=", pyproject, re.M), "pyproject.toml sets a version"
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)


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
    --filter-deps={filtered} \
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
        _run(["/usr/bin/python3", "-m", "venv", str(work / "venv")], timeout=120)
        _run([str(work / "venv" / "bin" / "python"), "-m", "pip", "install", "-q",
              "easybuild-framework", "easybuild-easyblocks", "build", "setuptools>=61", "wheel",
              *(f"{d}>={v}" for d, v in install_requires().items())], timeout=900)
        script = work / "eb-install.sh"
        script.write_text(textwrap.dedent(EB_SCRIPT).format(
            work=work, lmod_init=LMOD_INIT, easyconfig=ec.name,
            filtered=",".join(EASYBUILD_FILTERED)))
        if _root():
            subprocess.run(["chown", "-R", f"{EB_USER}:", str(work)], check=True)
        result = subprocess.run(_as_user(["bash", str(script)]), capture_output=True, text=True,
                                timeout=900)
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
