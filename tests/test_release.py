"""buildsys/release.py on a throwaway copy of this checkout: the release commit carries the
version, the changelog and the sdist's checksum in the Spack recipe and a new easyconfig; the
sdist rebuilt from the tagged commit is the same bytes; main moves on to the next .dev0."""

import hashlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_release():
    spec = importlib.util.spec_from_file_location("rosenna_release", ROOT / "buildsys" / "release.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    """This checkout's files (tracked and untracked-but-not-ignored) as a fresh one-commit repository."""
    repo = tmp_path / "repo"
    repo.mkdir()
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    names = [n for n in listed if n and (ROOT / n).is_file()]
    archive = subprocess.run(["tar", "-c", "--null", "-T", "-"], cwd=ROOT, input="\0".join(names).encode(),
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(repo)], input=archive, check=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "main")
    _git(repo, "config", "user.name", "t")
    _git(repo, "config", "user.email", "t@example.org")
    return repo


def _write_notes(repo):
    """Release notes under ``## Unreleased`` in the copy, where there are none (right after a release)."""
    path = repo / "CHANGELOG.md"
    head, tail = path.read_text().split("## Unreleased\n", 1)
    if "\n### " not in tail.split("\n## ", 1)[0]:
        path.write_text(head + "## Unreleased\n\n### Fixed\n\n- A note for this test.\n" + tail)
        _git(repo, "commit", "-q", "-am", "notes")


def test_release_on_a_throwaway_copy(checkout, tmp_path):
    pytest.importorskip("build")
    release = _load_release()
    current = release.current_version(checkout)
    major, minor, patch, dev = release.version_tuple(current)
    version = f"{major}.{minor}.{patch}" if dev != float("inf") else f"{major}.{minor}.{patch + 1}"
    _write_notes(checkout)
    said = []
    commit, sdist, sha256 = release.release(version, date="2030-01-02", root=str(checkout),
                                            outdir=str(tmp_path / "dist"), say=said.append)
    assert Path(sdist).name == f"rosenna-{version}.tar.gz"
    assert hashlib.sha256(Path(sdist).read_bytes()).hexdigest() == sha256

    # The release commit and its tag.
    assert _git(checkout, "rev-parse", f"v{version}^{{commit}}") == commit
    at_release = _git(checkout, "show", f"{commit}:rosenna/__init__.py")
    assert f'__version__ = "{version}"' in at_release
    changelog = _git(checkout, "show", f"{commit}:CHANGELOG.md")
    assert f"\n## {version} - 2030-01-02\n" in changelog and "\n## Unreleased\n" in changelog
    assert changelog.index("## Unreleased") < changelog.index(f"## {version}")
    readme = _git(checkout, "show", f"{commit}:README.md")
    assert f"rosenna-{version}.tar.gz" in readme and f"easybuild/rosenna-{version}-foss-2023a.eb" in readme
    recipe = _git(checkout, "show", f"{commit}:spack/spack_repo/rosenna/packages/rosenna/package.py")
    assert f'version("{version}", sha256="{sha256}")' in recipe
    easyconfig = _git(checkout, "show", f"{commit}:easybuild/rosenna-{version}-foss-2023a.eb")
    assert f"version = '{version}'" in easyconfig and f"checksums = ['{sha256}']" in easyconfig

    # Anyone can rebuild the sdist from the tag and compare.
    epoch = int(_git(checkout, "log", "-1", "--format=%ct", commit))
    _, again = release.build_sdist(str(checkout), f"v{version}", epoch, str(tmp_path / "again"))
    assert again == sha256

    # main moved on, and the recipe names the release commit.
    head = (checkout / "rosenna" / "__init__.py").read_text()
    assert f'__version__ = "{release.next_dev(version)}"' in head
    recipe = (checkout / "spack/spack_repo/rosenna/packages/rosenna/package.py").read_text()
    assert re.search(rf"# {re.escape(version)}: release commit {commit}, sdist built with setuptools \S+", recipe)
    assert _git(checkout, "status", "--porcelain", "--untracked-files=no") == ""
    assert _git(checkout, "rev-list", "--count", f"{commit}..HEAD") == "1"


def test_release_refuses_what_it_must(checkout, tmp_path, capsys):
    release = _load_release()
    (checkout / "README.md").write_text("changed\n")
    with pytest.raises(release.ReleaseError, match="uncommitted changes"):
        release.release("9.0.0", root=str(checkout), outdir=str(tmp_path))
    _git(checkout, "checkout", "README.md")
    with pytest.raises(release.ReleaseError, match="already at .*, after 0.1.0"):
        release.release("0.1.0", root=str(checkout), outdir=str(tmp_path))
    with pytest.raises(release.ReleaseError, match="is not a version"):
        release.version_tuple("1.2")
    assert release.main(["0.2"]) == 2
    assert capsys.readouterr().err.startswith("release: error: '0.2': a release is X.Y.Z")
