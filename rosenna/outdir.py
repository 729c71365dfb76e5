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

Nothing read back from the folder is trusted (docs/security.md): another user of a shared folder
(mode 1777) can plant a journal, a manifest, a lock or a directory where a file goes. A journal or
manifest is obeyed only when it is a regular file owned by the running user, inside a staging
folder of the user's, and names only files of its own set (:func:`set_files`, no separators, no
``..``); anything else is refused in one line naming what to delete by hand, and left alone. The
lock and every staged file are opened without following links (``O_NOFOLLOW``), staged files only
as new ones (``O_EXCL``). Every place the new set goes is checked before anything is staged (a
directory or another user's file there refuses the run with nothing written); a move that fails
anyway leaves the journal committed and says truthfully which files are already new.

Long on purpose: the journal's writing, its validation and its roll-forward are one protocol, read
together when a run into a shared folder is refused or a set is found half-moved.
"""

import errno
import fcntl
import functools
import json
import os
import shutil
import stat
import tempfile

from rosenna import names
from rosenna.errors import RosennaError, UsageError

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
#: Journals and manifests name at most a few dozen files: a bigger one is not rosenna's.
STATE_MAX_BYTES = 1 << 16


class StateRefused(UsageError):
    """Something in the output folder that rosenna would act on is not its own (planted, foreign,
    or not a regular file): refused, left alone, the message says what to delete by hand."""


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
    """Write a new file ``path`` (never an existing one, never through a link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as handle:
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


def _refuse(path, why):
    raise StateRefused(f"{path}: {why}; rosenna leaves it alone: inspect it and delete it by hand")


def _own(path, st, kind):
    """Refuse ``path`` (``st``: its lstat) unless it is a ``kind`` ('file' or 'folder') owned by the
    running user."""
    is_kind = stat.S_ISREG(st.st_mode) if kind == "file" else stat.S_ISDIR(st.st_mode)
    if not is_kind:
        _refuse(path, f"not a regular {kind}" if kind == "file" else "not a folder")
    if st.st_uid != os.geteuid():
        _refuse(path, f"owned by another user (uid {st.st_uid}), not written by this one")


def _read_state(path):
    """The JSON object in ``path``, a journal or manifest: a regular file of the running user's,
    opened without following a link or blocking on a FIFO, at most :data:`STATE_MAX_BYTES`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            _refuse(path, "a symbolic link")
        raise
    with os.fdopen(fd, "rb") as handle:
        _own(path, os.fstat(fd), "file")
        data = handle.read(STATE_MAX_BYTES + 1)
    try:
        state = json.loads(data) if len(data) <= STATE_MAX_BYTES else None
    except ValueError:
        state = None
    if not isinstance(state, dict):
        _refuse(path, "not a JSON object rosenna wrote")
    return state


def _file_list(path, state, key, allowed):
    """``state[key]``, a list of names each in ``allowed``, or refuse ``path``."""
    value = state.get(key)
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        _refuse(path, f"its '{key}' is not a list of file names")
    for fname in value:
        if fname not in allowed:
            shown = ascii(fname)[:80]
            _refuse(path, f"it names {shown}, which is not a file of its set (rosenna acts only on "
                          f"its own file names, without folders or '..')")
    return value


def _journal(stage):
    """The committed journal of staging folder ``stage``, validated: its set's name matches the
    folder's, its moves name only the set's files (manifest and shared header included) and its
    removals only the set's own files."""
    path = os.path.join(stage, JOURNAL)
    journal = _read_state(path)
    name = journal.get("name")
    if not isinstance(name, str) or not name.isidentifier() or \
            not os.path.basename(stage).startswith(f"{STAGING_PREFIX}{name}-"):
        _refuse(path, "its set's name is not an identifier matching its folder's name")
    own = set(set_files(name))
    move = _file_list(path, journal, "move", own | {manifest_name(name)} | set(SHARED_FILES))
    remove = _file_list(path, journal, "remove", own)
    return move, remove


def _roll_forward(out_dir, stage):
    """Finish the committed journal in ``stage``: move its files in, remove the old set's leftovers,
    then the staging folder. Every step can be repeated, so a second interruption is harmless. A
    move that fails (a folder planted where a file goes) raises an error that names the files
    already moved; the journal stays, and the next run finishes it."""
    move, remove = _journal(stage)
    done = []
    for fname in move:
        source = os.path.join(stage, fname)
        try:
            st = os.lstat(source)
        except FileNotFoundError:
            continue  # moved by an earlier, interrupted run
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            _refuse(source, "not a regular file of the running user's")
        try:
            os.replace(source, os.path.join(out_dir, fname))
        except OSError as exc:
            new = ", ".join(done) if done else "none"
            raise RosennaError(
                f"--out {out_dir}: replacing the set stopped at {fname} ({exc.strerror}) with {len(done)} of "
                f"{len(move)} files moved (new: {new}; the others are the previous set's); fix that and run "
                f"generate into {out_dir} again: it finishes the set from {stage}") from None
        done.append(fname)
        _crash_point()
    _sync_dir(out_dir)  # the moves are durable before the journal that records them can go
    for fname in remove:
        try:
            os.unlink(os.path.join(out_dir, fname))
        except OSError:
            pass  # gone already, or replaced by a folder since: the new set is complete either way
    shutil.rmtree(stage, ignore_errors=True)
    _sync_dir(out_dir)


def recover(out_dir):
    """Finish or undo what an interrupted run left in ``out_dir``: roll committed journals forward,
    remove other ``.rosenna-*`` folders. Call with the directory's lock held. Returns the
    ``.rosenna-*`` entries left (for :func:`other_sets`).

    A staging folder of another user's, or a journal that is not rosenna's (planted, a link, naming
    files outside its set) raises :class:`StateRefused` and is left alone."""
    entries = _entries(out_dir)
    folders = [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
    for path in folders:
        _own(path, os.lstat(path), "folder")
        if os.path.lexists(os.path.join(path, JOURNAL)):
            _roll_forward(out_dir, path)  # the journal is renamed in whole: one that exists was committed
            continue
        shutil.rmtree(path, ignore_errors=True)
    return _entries(out_dir) if folders else entries


class Lock:
    """An exclusive lock on ``out_dir`` (``flock`` on ``.rosenna.lock``) for one run."""

    def __init__(self, out_dir):
        self.path = os.path.join(out_dir, LOCK)
        self.fd = None

    def __enter__(self):
        self.fd = self._open()
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:  # e.g. a file system without locks: run unlocked
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
        return self

    def _open(self):
        """The lock file, opened read-only (``flock`` needs no more) without following a link or
        blocking on a FIFO: an existing regular file, or a new one (``O_EXCL``). Another user's
        lock file in a shared folder is used as it is; it is never written."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
        for _ in range(3):
            try:
                fd = os.open(self.path, flags)
            except FileNotFoundError:
                try:
                    fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    continue  # another run created it in between
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    _refuse(self.path, "a symbolic link, not rosenna's lock file")
                raise
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                _refuse(self.path, "not a regular file, not rosenna's lock file")
            return fd
        raise FileExistsError(errno.EEXIST, "the lock file keeps changing", self.path)

    def __exit__(self, *exc):
        os.close(self.fd)


def _check_destination(out_dir, fname):
    """Refuse, before anything is written, a place for a new file that ``os.replace`` could not or
    should not take: a folder, a FIFO or device, another user's file or link."""
    path = os.path.join(out_dir, fname)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    kind = stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)
    if not kind or st.st_uid != os.geteuid():
        what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file" if not kind else \
            f"owned by another user (uid {st.st_uid})"
        raise UsageError(f"--out {out_dir}: {fname} is {what}, where the set's file goes; nothing was "
                         f"written: move it away and run again")


def write_set(out_dir, name, files):
    """Replace model ``name``'s set in ``out_dir`` by ``files`` ({file name: bytes}) as one unit.

    Returns the paths written. The caller holds the lock and has called :func:`recover`. The old
    manifest is obeyed only when it is the user's and names the set's own files
    (:class:`StateRefused` otherwise); a folder or another user's file where a new file goes refuses
    the run before anything is written."""
    manifest = os.path.join(out_dir, manifest_name(name))
    old = []
    if os.path.lexists(manifest):
        allowed = set(set_files(name)) | {manifest_name(name)} | set(SHARED_FILES)
        old = _file_list(manifest, _read_state(manifest), "files", allowed)
    files = dict(files)
    files[manifest_name(name)] = (json.dumps({"name": name, "files": sorted(files)}, indent=1) + "\n").encode()
    for fname in files:
        _check_destination(out_dir, fname)
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


def private_folder(path, option="--keep"):
    """``path`` as a work folder only the running user writes: created (mode 700) when missing;
    an existing one must be a real folder (no link), the user's, and not writable by group or
    others, since a link planted in it would make the files written there land elsewhere. Returns
    the absolute path; raises :class:`~rosenna.errors.UsageError` in one line otherwise."""
    path = os.path.abspath(path)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkdir(path, 0o700)
        return path
    except FileExistsError:
        pass
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot create the folder ({exc.strerror})") from None
    st = os.lstat(path)
    why = ("a symbolic link" if stat.S_ISLNK(st.st_mode) else
           "not a folder" if not stat.S_ISDIR(st.st_mode) else
           f"owned by another user (uid {st.st_uid})" if st.st_uid != os.geteuid() else
           "writable by group or others (chmod go-w, or name a new folder)" if st.st_mode & 0o022 else None)
    if why:
        raise UsageError(f"{option} {path}: {why}; rosenna keeps its work only in a folder of the running "
                         f"user's that no one else writes")
    return path


def fresh(path):
    """Remove what is at ``path`` (a file or a link, never followed) so that the next write there
    creates a new file; returns ``path``. For files of a :func:`private_folder` that a compiler or
    program writes by name."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return path
