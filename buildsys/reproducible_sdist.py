"""setuptools' build backend, with an sdist that is the same bytes every time it is built from one
commit (https://reproducible-builds.org/docs/source-date-epoch/).

setuptools writes the files' own modification times, owners and the build time (in the gzip
header) into the sdist, so two builds of one commit differ and a checksum in a Spack recipe or an
easyconfig cannot be checked against a rebuild. This backend lets setuptools build the sdist, then
rewrites it: entries sorted by name, every time set to SOURCE_DATE_EPOCH, owner root (0/0, no
names), permissions 0644 (0755 for folders and executables), gzip header without a name and with
the same time. SOURCE_DATE_EPOCH is taken from the environment when set, else from the time of
the checkout's last commit (``git log -1 --format=%ct``), else, in an unpacked sdist, from its
PKG-INFO (which this backend stamped), else 1980-01-01.

Wheels are setuptools' own. pyproject.toml names this module (``backend-path = ["buildsys"]``);
the sdist carries it, so a wheel built from the sdist uses it too.
"""

import glob
import gzip
import io
import os
import shutil
import subprocess
import tarfile

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403 (the rest of PEP 517 is setuptools')

#: When nothing says otherwise: the earliest time a zip file can hold.
FALLBACK_EPOCH = 315532800


def source_date_epoch(root="."):
    """The time written into the sdist, in seconds since 1970 (see the module's docstring)."""
    if os.environ.get("SOURCE_DATE_EPOCH", "").strip().isdigit():
        return int(os.environ["SOURCE_DATE_EPOCH"])
    try:
        out = subprocess.run(["git", "-C", root, "log", "-1", "--format=%ct"], capture_output=True,
                             text=True, timeout=60)
        if out.returncode == 0 and out.stdout.strip().isdigit():
            return int(out.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    pkg_info = os.path.join(root, "PKG-INFO")
    if os.path.isfile(pkg_info):
        return int(os.stat(pkg_info).st_mtime)
    return FALLBACK_EPOCH


def normalize(path, epoch):
    """Rewrite the .tar.gz at ``path`` as described in the module's docstring."""
    with tarfile.open(path, "r:gz") as tar:
        entries = []
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isfile() else None
            entries.append((member, data))
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=epoch, compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as out:
            for member, data in sorted(entries, key=lambda entry: entry[0].name):
                member.mtime = epoch
                member.uid = member.gid = 0
                member.uname = member.gname = ""
                member.pax_headers = {}
                executable = member.isdir() or (member.mode & 0o111)
                member.mode = 0o755 if executable else 0o644
                out.addfile(member, io.BytesIO(data) if data is not None else None)
    with open(path, "wb") as f:
        f.write(buffer.getvalue())


def build_sdist(sdist_directory, config_settings=None):
    # An egg-info folder left by an earlier build is read back as part of the file list (with the
    # package_dir of setup.cfg, under a second spelling of each path): every sdist starts from none.
    for stale in glob.glob("*.egg-info"):
        shutil.rmtree(stale, ignore_errors=True)
    name = _setuptools.build_sdist(sdist_directory, config_settings)
    normalize(os.path.join(sdist_directory, name), source_date_epoch())
    return name
