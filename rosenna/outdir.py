"""The output directory: which names a model's set owns, and replacing a set as one unit.

A *set* is every file ``rosenna generate`` writes for one model name (``rosenna_rt.h`` included)
plus what its recipes build beside them. Each name is defined here once:

- :data:`SET_FILES`: the files of a set, as templates over the model name ``{n}``, generated or
  built. A test checks that every file ``emit.render`` returns and every target its recipes name is
  listed, so a new file cannot be added without its name being reserved here.
- :func:`reserved`: names no model may have: rosenna's own prefix (``rosenna_rt.h``,
  ``ROSENNA_STATUS_*``, ``rosenna_expf``, ...) and names whose files or symbols would shadow a
  system's; the table is :mod:`rosenna.names`.
- :func:`conflict`: two model names clash when their sets share a file (compared case-blind:
  macOS file systems and Fortran ``.mod`` names fold case) or when one name is the other followed
  by ``_`` (then the shorter one's symbols ``<n>_*`` and files ``<n>_*`` can be the longer one's:
  ``x`` owns ``x_model.o``, the object of a model named ``x_model``, and ``x_fortran.mk``).

Replacing a set (:func:`write_set`) is atomic by a journal: the new files are written to a
staging folder ``.rosenna-<name>-XXXX`` in the output directory; then a
journal naming the files to move in and the old set's files to remove is committed by one
rename; then the moves happen. Killed before the commit, the old set is untouched and the staging
folder is debris; killed after it, the journal is complete. Every later run into that directory
first finishes what it finds (:func:`recover`): a committed journal is rolled forward, any other
``.rosenna-*`` folder is removed. Runs into one directory hold a lock (``.rosenna.lock``), so
one run never takes another's staging folder for debris. Each set's file list is kept in the
manifest ``.rosenna-<name>.json``.

This guards against the process being killed (Ctrl-C, a batch system's SIGKILL, a crash) and
against a power loss or node crash: every staged file and the journal are fsync'ed, then the
staging folder, before the commit; the staging folder again after it (the commit is durable); the
output directory after the moves and before the staging folder (the durable record of what is
left to do) is removed, and again at the end. Measured on this VM's ext4: ~7 ms per file, 80 ms
of a 0.8 s generate of gemm_small. ``ROSENNA_NO_FSYNC=1`` skips the syncs (scratch output: the test
suite sets it). :func:`_sync_dir` tolerates file systems that refuse to sync a directory.
"""

import errno
import fcntl
import functools
import json
import os
import shutil
import tempfile

from rosenna import names

#: Files of one model's set: generated (``GENERATED``) and built beside them by its recipes,
#: CMake and pkg-config files (``BUILT``). ``rosenna_rt.h`` is shared by every set. ``{lower}``: the
#: name in lower case, as Fortran compilers name a module's ``.mod`` file.
GENERATED = ("{n}.h", "{n}.c", "{n}.mk", "{n}_kernel.cu", "{n}.rwt", "{n}_model.F90", "{n}_fortran.mk",
             "{n}Config.cmake", "{n}ConfigVersion.cmake", "{n}.pc", "{n}_fortran.pc")
BUILT = ("{n}.o", "{n}_kernel.o", "{n}_device.o", "lib{n}.a", "lib{n}_device.a", "{n}_model.o",
         "{lower}_model.mod", "lib{n}_f.a", "{n}.config", "{n}_fortran.config")
SET_FILES = GENERATED + BUILT
SHARED_FILES = ("rosenna_rt.h", "fpm.toml")

STAGING_PREFIX = ".rosenna-"
JOURNAL = "JOURNAL.json"
LOCK = ".rosenna.lock"


def manifest_name(name):
    return f"{STAGING_PREFIX}{name}.json"


def set_files(name):
    """Every file name the set of model ``name`` owns (generated or built), shared files excluded."""
    return [template.format(n=name, lower=name.lower()) for template in SET_FILES]


def reserved(name):
    """Why ``name`` cannot be a model's (a sentence), or None: rosenna's own, or a name whose files or
    symbols would shadow a system's (the table is :data:`rosenna.names.CLASSES`)."""
    return names.reserved(name)


@functools.lru_cache(maxsize=4096)
def _folded_files(name):
    """:func:`set_files` of ``name`` in lower case, kept per name: a generate compares its name with
    every other set in the folder."""
    return frozenset(f.lower() for f in set_files(name))


def conflict(name, other):
    """Why models ``name`` and ``other`` cannot share an output directory (a sentence), or None."""
    if name == other:
        return None
    a, b = name.lower(), other.lower()
    if a == b:
        return f"'{name}' and '{other}' differ only in case (their Fortran modules and, on macOS, files are one)"
    if a.startswith(b + "_") or b.startswith(a + "_"):
        short, long = (other, name) if a.startswith(b + "_") else (name, other)
        return (f"'{long}' starts with '{short}_', and the files and symbols '{short}_*' of model '{short}' "
                f"(e.g. {short}_model.o, {short}_fortran.mk) are also '{long}'s")
    shared = _folded_files(name) & _folded_files(other)
    if shared:
        return f"models '{name}' and '{other}' would both own {sorted(shared)[0]}"
    return None


def other_sets(out_dir, name, entries=None):
    """Names of the other models whose sets are in ``out_dir``, from their manifests' file names
    (``.rosenna-<name>.json``; names are identifiers, so the file name is exact). ``entries``: what
    :func:`recover` returned, a scan of ``out_dir`` made since it last changed."""
    names = []
    own = manifest_name(name)
    for entry in _entries(out_dir) if entries is None else entries:
        if entry.name.endswith(".json") and entry.name != own:
            other = entry.name[len(STAGING_PREFIX):-len(".json")]
            if other.isidentifier() and entry.is_file():
                names.append(other)
    return names


def _entries(out_dir):
    """The ``.rosenna-*`` entries of ``out_dir``, sorted by name, from one scan that stats none of
    them (the entry's type comes with it): a folder holding hundreds of sets has thousands of files,
    and each generate into it reads the folder for its debris and for the other sets' names."""
    with os.scandir(out_dir) as scan:
        return sorted((e for e in scan if e.name.startswith(STAGING_PREFIX)), key=lambda e: e.name)


def _crash_point():
    """Test hook: with ROSENNA_TEST_CRASH_AT=k the process dies (as if killed) at its k-th step
    of :func:`write_set` (0-based), so tests/test_generate_atomic.py can stop it at each one."""
    at = os.environ.get("ROSENNA_TEST_CRASH_AT")
    if at is None:
        return
    _crash_point.count = getattr(_crash_point, "count", -1) + 1
    if _crash_point.count == int(at):
        os._exit(137)


def _syncing():
    return os.environ.get("ROSENNA_NO_FSYNC", "") in ("", "0")


def _write(path, data):
    with open(path, "wb") as handle:
        handle.write(data)
        if _syncing():
            handle.flush()
            os.fsync(handle.fileno())


def _sync_dir(path):
    """Make the entries of directory ``path`` durable (renames into or out of it)."""
    if not _syncing():
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # some file systems (and Windows) cannot sync a directory
        if exc.errno not in (errno.EINVAL, errno.EBADF, errno.EACCES, errno.EROFS, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def _roll_forward(out_dir, stage):
    """Finish the committed journal in ``stage``: move its files in, remove the old set's leftovers,
    then the staging folder. Every step can be repeated, so a second interruption is harmless."""
    with open(os.path.join(stage, JOURNAL), encoding="utf-8") as handle:
        journal = json.load(handle)
    for fname in journal["move"]:
        source = os.path.join(stage, fname)
        if os.path.exists(source):
            os.replace(source, os.path.join(out_dir, fname))
            _crash_point()
    _sync_dir(out_dir)  # the moves are durable before the journal that records them can go
    for fname in journal["remove"]:
        try:
            os.unlink(os.path.join(out_dir, fname))
        except FileNotFoundError:
            pass
    shutil.rmtree(stage, ignore_errors=True)
    _sync_dir(out_dir)


def recover(out_dir):
    """Finish or undo what an interrupted run left in ``out_dir``: roll committed journals forward,
    remove other ``.rosenna-*`` folders. Call with the directory's lock held. Returns the
    ``.rosenna-*`` entries left (for :func:`other_sets`)."""
    entries = _entries(out_dir)
    folders = [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
    for path in folders:
        if os.path.isfile(os.path.join(path, JOURNAL)):
            try:
                _roll_forward(out_dir, path)
                continue
            except (OSError, ValueError, KeyError, TypeError):
                pass  # a journal that cannot be read was never committed (it is renamed in whole)
        shutil.rmtree(path, ignore_errors=True)
    return _entries(out_dir) if folders else entries


class Lock:
    """An exclusive lock on ``out_dir`` (``flock`` on ``.rosenna.lock``) for one run."""

    def __init__(self, out_dir):
        self.path = os.path.join(out_dir, LOCK)
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:  # e.g. a file system without locks: run unlocked
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def write_set(out_dir, name, files):
    """Replace model ``name``'s set in ``out_dir`` by ``files`` ({file name: bytes}) as one unit.

    Returns the paths written. The caller holds the lock and has called :func:`recover`."""
    old = []
    try:
        with open(os.path.join(out_dir, manifest_name(name)), encoding="utf-8") as handle:
            old = list(json.load(handle)["files"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    files = dict(files)
    files[manifest_name(name)] = (json.dumps({"name": name, "files": sorted(files)}, indent=1) + "\n").encode()
    stage = tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{name}-", dir=out_dir)
    try:
        _crash_point()
        for fname, data in files.items():
            _write(os.path.join(stage, fname), data)
            _crash_point()
        # Files of the old set that the new one lacks (a .rwt once embedded, a .F90 after --lang
        # c); shared files stay, since another set may use them.
        remove = sorted(f for f in old if f not in files and f not in SHARED_FILES and os.sep not in f)
        journal = json.dumps({"name": name, "move": sorted(files), "remove": remove}).encode()
        _write(os.path.join(stage, JOURNAL + ".tmp"), journal)
        _sync_dir(stage)  # every staged file is durable before the commit names them
        _crash_point()
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    os.replace(os.path.join(stage, JOURNAL + ".tmp"), os.path.join(stage, JOURNAL))  # the commit
    _sync_dir(stage)  # the commit is durable
    _crash_point()
    _roll_forward(out_dir, stage)
    _crash_point()
    return [os.path.join(out_dir, fname) for fname in sorted(files) if fname != manifest_name(name)]
