"""Cut a rosenna release: ``python buildsys/release.py X.Y.Z`` in a clean checkout of main.

What it does (docs/releasing.md says why each step is there):

1. Checks: a git checkout with nothing uncommitted, X.Y.Z newer than every release in the Spack
   recipe and not older than the version on main, and notes under ``## Unreleased`` in CHANGELOG.md.
2. The release's files: ``__version__ = "X.Y.Z"`` in rosenna/__init__.py, CHANGELOG.md's
   ``## Unreleased`` notes under ``## X.Y.Z - DATE`` (a fresh, empty ``## Unreleased`` above them),
   and the install commands of README.md and the admin guide naming X.Y.Z's sdist and easyconfig.
3. The sdist of exactly those files, built reproducibly (buildsys/reproducible_sdist.py) with
   SOURCE_DATE_EPOCH set to the time the release commit will carry, into ``dist/``; its sha256
   goes into the Spack recipe (``version("X.Y.Z", sha256=...)``) and a new easyconfig
   ``easybuild/rosenna-X.Y.Z-<toolchain>.eb`` (neither is in the sdist, so the checksum does not
   change what it checks).
4. The release commit, with that time, and the tag ``vX.Y.Z`` on it; then the sdist is rebuilt
   from the commit and must be the same bytes.
5. A second commit moves main on to the next version (default X.Y.(Z+1).dev0) and names the
   release commit in the recipe, so no later commit claims to be the release.

Nothing is pushed or published: it prints what to push and the sdist to upload.
"""

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERSION_FILE = "rosenna/__init__.py"
CHANGELOG = "CHANGELOG.md"
RECIPE = "spack/spack_repo/rosenna/packages/rosenna/package.py"
EASYBUILD = "easybuild"
UNRELEASED = "## Unreleased"
UNRELEASED_NOTE = "Changes on the main branch since the last release."
RELEASE = re.compile(r"^\d+\.\d+\.\d+$")


#: Pages whose install commands name the newest release's sdist and easyconfig.
NAMES_THE_RELEASE = ("README.md", "docs/admin-guide.md")


def name_release(text, previous, version):
    """``text`` with the install commands' sdist and easyconfig of ``previous`` renamed to ``version``."""
    return (text.replace(f"rosenna-{previous}.tar.gz", f"rosenna-{version}.tar.gz")
            .replace(f"easybuild/rosenna-{previous}-", f"easybuild/rosenna-{version}-"))


class ReleaseError(Exception):
    """What stops a release, in one line saying what to do."""


def _git(*args, root=ROOT, env=None):
    proc = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, env=env)
    if proc.returncode:
        raise ReleaseError(f"git {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def _read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as handle:
        return handle.read()


def _write(root, path, text):
    with open(os.path.join(root, path), "w", encoding="utf-8") as handle:
        handle.write(text)


def version_tuple(text):
    """``(major, minor, patch, dev)``: a .devN sorts before its release."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.dev(\d+))?", text)
    if not match:
        raise ReleaseError(f"{text!r} is not a version like 1.2.3 or 1.2.3.dev0")
    major, minor, patch, dev = match.groups()
    return int(major), int(minor), int(patch), int(dev) if dev is not None else float("inf")


def current_version(root):
    return re.search(r'^__version__ = "([^"]+)"', _read(root, VERSION_FILE), re.M).group(1)


def set_version(root, version):
    text = _read(root, VERSION_FILE)
    _write(root, VERSION_FILE, re.sub(r'^__version__ = "[^"]+"', f'__version__ = "{version}"', text, count=1,
                                      flags=re.M))


def recipe_releases(root):
    return re.findall(r'^\s*version\("(\d+\.\d+\.\d+)", sha256="[0-9a-f]{64}"', _read(root, RECIPE), re.M)


def release_changelog(text, version, date):
    """CHANGELOG.md with the Unreleased notes under ``## VERSION - DATE``."""
    if UNRELEASED not in text.splitlines():
        raise ReleaseError(f"{CHANGELOG} has no '{UNRELEASED}' heading to turn into the {version} notes")
    head, _, rest = text.partition(UNRELEASED + "\n")
    body, sep, older = rest.partition("\n## ")
    notes = "\n".join(line for line in body.strip().splitlines() if line.strip() != UNRELEASED_NOTE).strip()
    if not notes:
        raise ReleaseError(f"{CHANGELOG}: nothing under '{UNRELEASED}'; write the release notes there first")
    return (f"{head}{UNRELEASED}\n\n{UNRELEASED_NOTE}\n\n## {version} - {date}\n\n{notes}\n"
            + (f"\n## {older}" if sep else ""))


def add_recipe_version(text, version, sha256, note):
    """The recipe with ``version(VERSION, sha256=...)`` above the newest release, and its note."""
    match = re.search(r'^([ \t]*)(# \d+\.\d+\.\d+: .*\n[ \t]*)?version\("\d+\.\d+\.\d+", sha256=', text,
                      re.M)
    if not match:
        raise ReleaseError(f"{RECIPE}: no released version(...) line to add {version} above")
    indent = match.group(1)
    line = f'{indent}# {version}: {note}\n{indent}version("{version}", sha256="{sha256}")\n'
    return text[:match.start()] + line + text[match.start():]


def name_release_commit(text, version, commit, setuptools_version):
    note = f"release commit {commit}, sdist built with setuptools {setuptools_version}"
    return re.sub(rf"^(\s*)# {re.escape(version)}: .*$", lambda m: f"{m.group(1)}# {version}: {note}", text,
                  count=1, flags=re.M)


def new_easyconfig(root, version, sha256):
    """Write easybuild/rosenna-VERSION-<toolchain>.eb from the newest one; return its path."""
    configs = sorted((f for f in os.listdir(os.path.join(root, EASYBUILD)) if re.match(r"rosenna-.*\.eb$", f)),
                     key=lambda f: version_tuple(f.split("-")[1]))
    if not configs:
        raise ReleaseError(f"no {EASYBUILD}/rosenna-*.eb to start the {version} easyconfig from")
    previous = configs[-1]
    old_version = previous.split("-")[1]
    text = _read(root, os.path.join(EASYBUILD, previous))
    text = re.sub(r"^version = '[^']*'", f"version = '{version}'", text, count=1, flags=re.M)
    text = re.sub(r"^checksums = \['[0-9a-f]*'\]", f"checksums = ['{sha256}']", text, count=1, flags=re.M)
    text = re.sub(rf"the {re.escape(old_version)} release commit [0-9a-f]+", f"the {version} release commit "
                  "(named in the Spack recipe)", text)
    name = previous.replace(f"rosenna-{old_version}-", f"rosenna-{version}-", 1)
    _write(root, os.path.join(EASYBUILD, name), text)
    return os.path.join(EASYBUILD, name)


def build_sdist(root, treeish, epoch, outdir):
    """The reproducible sdist of ``treeish`` (a commit or a tree), built in a scratch copy."""
    with tempfile.TemporaryDirectory(prefix="rosenna-release-") as scratch:
        source = os.path.join(scratch, "src")
        os.mkdir(source)
        archive = subprocess.run(["git", "-C", root, "archive", "--format=tar", treeish], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", source], input=archive, check=True)
        env = dict(os.environ, SOURCE_DATE_EPOCH=str(epoch))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        proc = subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--skip-dependency-check", "--outdir",
                               os.path.join(scratch, "dist"), source], capture_output=True, text=True, env=env,
                              cwd=scratch)
        if proc.returncode:
            raise ReleaseError(f"python -m build --sdist failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        (name,) = os.listdir(os.path.join(scratch, "dist"))
        os.makedirs(outdir, exist_ok=True)
        target = os.path.join(outdir, name)
        shutil.copyfile(os.path.join(scratch, "dist", name), target)
    with open(target, "rb") as handle:
        return target, hashlib.sha256(handle.read()).hexdigest()


def next_dev(version):
    major, minor, patch, _ = version_tuple(version)
    return f"{major}.{minor}.{patch + 1}.dev0"


def release(version, next_version=None, date=None, root=ROOT, outdir=None, tag=True, say=print):
    """Cut release ``version`` in the checkout at ``root`` (see the module's docstring).

    Returns:
        ``(release commit, sdist path, sha256)``.
    """
    import setuptools

    if not RELEASE.match(version):
        raise ReleaseError(f"{version!r}: a release is X.Y.Z (e.g. 0.2.0)")
    next_version = next_version or next_dev(version)
    if version_tuple(next_version) <= version_tuple(version):
        raise ReleaseError(f"--next {next_version} is not after {version}")
    if _git("status", "--porcelain", "--untracked-files=no", root=root):
        raise ReleaseError("the checkout has uncommitted changes: commit or stash them, then release")
    current = current_version(root)
    if version_tuple(current) > version_tuple(version):
        raise ReleaseError(f"main is already at {current}, after {version}")
    released = recipe_releases(root)
    if any(version_tuple(r) >= version_tuple(version) for r in released):
        raise ReleaseError(f"{RECIPE} already has {max(released, key=version_tuple)}: {version} is not newer")
    if tag and _git("tag", "--list", f"v{version}", root=root):
        raise ReleaseError(f"tag v{version} exists already")
    date = date or time.strftime("%Y-%m-%d", time.gmtime())
    outdir = outdir or os.path.join(root, "dist")

    # 2. The release's files, staged; 3. their sdist, built for the commit's time.
    _write(root, CHANGELOG, release_changelog(_read(root, CHANGELOG), version, date))
    set_version(root, version)
    previous = max(released, key=version_tuple) if released else None
    for doc in NAMES_THE_RELEASE if previous else ():
        _write(root, doc, name_release(_read(root, doc), previous, version))
    _git("add", VERSION_FILE, CHANGELOG, *(NAMES_THE_RELEASE if previous else ()), root=root)
    tree = _git("write-tree", root=root)
    epoch = int(time.time())
    sdist, sha256 = build_sdist(root, tree, epoch, outdir)
    say(f"sdist {sdist}: sha256 {sha256}")
    _write(root, RECIPE, add_recipe_version(_read(root, RECIPE), version, sha256, "release commit (named after it)"))
    easyconfig = new_easyconfig(root, version, sha256)
    _git("add", RECIPE, easyconfig, root=root)

    # 4. The release commit at that time, its tag, and the same sdist rebuilt from it.
    stamp = f"@{epoch} +0000"
    env = dict(os.environ, GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp)
    _git("commit", "-q", "-m", f"Release {version}\n\nrosenna {version}: the sdist {os.path.basename(sdist)} "
         f"has sha256 {sha256}.", root=root, env=env)
    commit = _git("rev-parse", "HEAD", root=root)
    if tag:
        _git("tag", "-a", f"v{version}", "-m", f"rosenna {version}", commit, root=root, env=env)
    with tempfile.TemporaryDirectory() as check:
        _, again = build_sdist(root, commit, int(_git("log", "-1", "--format=%ct", commit, root=root)), check)
    if again != sha256:
        raise ReleaseError(f"the sdist rebuilt from {commit[:12]} is {again}, not {sha256}: a file the sdist "
                           "carries changed after it was built; reset to before the release and report it")
    say(f"release commit {commit}" + (f", tagged v{version}" if tag else ""))

    # 5. main moves on at once.
    set_version(root, next_version)
    _write(root, RECIPE, name_release_commit(_read(root, RECIPE), version, commit, setuptools.__version__))
    _git("add", VERSION_FILE, RECIPE, root=root)
    _git("commit", "-q", "-m", f"Start {next_version} after the {version} release\n\nThe Spack recipe names "
         f"{version}'s release commit {commit}.", root=root)
    say(f"main is at {next_version}. Publish {sdist} and push: git push origin HEAD v{version}")
    return commit, sdist, sha256


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python buildsys/release.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the release, X.Y.Z")
    parser.add_argument("--next", dest="next_version", help="main's version afterwards (default X.Y.(Z+1).dev0)")
    parser.add_argument("--date", help="the changelog's release date (default: today, UTC)")
    parser.add_argument("--outdir", help="where the sdist goes (default: dist/)")
    args = parser.parse_args(argv)
    try:
        release(args.version, args.next_version, args.date, outdir=args.outdir)
    except ReleaseError as exc:
        print(f"release: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
