"""Where profiles are found, how a file is read, and how ``extends`` is merged.

Search order (the first profile of a name wins; ``rosenna toolchain list`` shows the others it
shadows):

1. ``path``: each directory of ``$ROSENNA_TOOLCHAIN_PATH`` (colon-separated), in order;
2. ``user``: ``$XDG_CONFIG_HOME/rosenna/toolchains`` (``~/.config/rosenna/toolchains``);
3. ``site``: ``<prefix>/share/rosenna/toolchains`` for ``sys.prefix`` and, when rosenna is installed
   in a prefix of its own (Spack, EasyBuild, ``pip --prefix``), for that prefix too;
4. ``builtin``: the ``toolchains/`` folder of the source checkout rosenna runs from, else
   ``<prefix>/share/rosenna/toolchains/builtin`` where the wheel installs it.

Built-in and site profiles never share a folder: an upgrade rewrites ``.../builtin`` and leaves the
site's files alone, and a site file is never taken for a built-in one. Only ``*.yaml`` files directly
in each folder are profiles; the profile's name is the file name without ``.yaml``.

A profile on the search path is data, not code (docs/security.md): the file is read only when it is
a regular file of at most :data:`MAX_BYTES`, YAML aliases are refused before anything is built
from them (a few lines of ``&a [*b, *b, ...]`` would expand to gigabytes), its name and every
string that reaches a generated file follow the schema's grammar, and a folder or file that cannot
be read is one warning naming it. A path or site profile that shadows a built-in one says so once
on every command that uses it.

Long on purpose: the search path, the loading of each file and the report of broken ones are one
story (which file wins, and why the others were skipped), read together when a site's profile
is not picked.
"""

import copy
import errno
import logging
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from rosenna.errors import ToolchainError
from rosenna.quoting import terminal_text
from rosenna.toolchain import schema
from rosenna.toolchain.schema import ProfileError
from rosenna.toolchain.template import TemplateError, placeholders_in

SUFFIX = ".yaml"
#: The largest profile file read: the shipped ones are under 2 KiB; a bigger file costs every
#: command that reads the search path its parse time, so it is skipped unread.
MAX_BYTES = 256 * 1024
# Broken files and doubtful extends are reported here, once each per process. Without a handler
# configured, Python prints a warning's text alone on stderr, which is what the CLI wants.
log = logging.getLogger("rosenna.toolchain")
_reported = set()


def warn(message):
    """Report ``message`` on the ``rosenna.toolchain`` logger, once per process."""
    if message not in _reported:
        _reported.add(message)
        log.warning("rosenna: warning: %s", terminal_text(message))


# Keys that say what a profile is rather than how it builds: never inherited through extends.
IDENTITY_KEYS = ("name", "aliases", "extends")


@dataclass(frozen=True)
class SearchDir:
    path: Path
    kind: str  # "path", "user", "site" or "builtin"


@dataclass(frozen=True)
class ProfileFile:
    """One profile file as read: its name, where it is, which tier, and its validated data."""

    name: str
    path: Path
    kind: str
    rank: int  # position on the search path: lower wins
    data: dict


@dataclass(frozen=True)
class BrokenFile:
    """A profile file that cannot be used: where it is and the :class:`ProfileError` it raised."""

    name: str
    path: Path
    kind: str
    rank: int
    error: ToolchainError

    @property
    def line(self):
        return getattr(self.error, "line", None)

    def notice(self):
        """The one-line report of a file every command but one naming it skips."""
        return (f"{self.error} (profile '{self.name}' skipped; fix the file or move it out of {self.path.parent}; "
                f"`rosenna toolchain validate {self.path}` checks it)")


def _install_prefix():
    """The prefix rosenna's own package is installed under (``.../lib/pythonX.Y/site-packages``)."""
    here = Path(__file__).resolve().parent.parent  # the rosenna package
    for parent in here.parents:
        if parent.name in ("site-packages", "dist-packages"):
            lib = parent.parent.parent if parent.parent.name.startswith("python") else parent.parent
            return lib.parent
    return None


def source_checkout_toolchains():
    """The ``toolchains/`` folder of the source checkout this package runs from, or None."""
    root = Path(__file__).resolve().parent.parent.parent
    folder = root / "toolchains"
    if (root / "setup.cfg").is_file() and (root / "rosenna" / "cli.py").is_file() and folder.is_dir():
        return folder
    return None


def builtin_dir():
    """The folder of the built-in profiles.

    Raises:
        ToolchainError: when neither a source checkout nor an installed copy is found.
    """
    candidates = []
    checkout = source_checkout_toolchains()
    if checkout:
        return checkout
    for prefix in (_install_prefix(), Path(sys.prefix)):
        if prefix is not None:
            candidates.append(prefix / "share" / "rosenna" / "toolchains" / "builtin")
    for folder in candidates:
        if folder.is_dir():
            return folder
    raise ToolchainError(
        "the built-in toolchain profiles are missing: looked in "
        + ", ".join(str(c) for c in candidates)
        + " (reinstall rosenna, or set ROSENNA_TOOLCHAIN_PATH)"
    )


def search_path(environ=None):
    """The folders searched for profiles, first wins, as a list of :class:`SearchDir`.

    Folders that do not exist are kept (``list`` shows where a site could put profiles); reading
    skips them.
    """
    environ = os.environ if environ is None else environ
    dirs = []
    for entry in environ.get("ROSENNA_TOOLCHAIN_PATH", "").split(os.pathsep):
        if entry:
            dirs.append(SearchDir(Path(entry).expanduser(), "path"))
    config = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    dirs.append(SearchDir(Path(config).expanduser() / "rosenna" / "toolchains", "user"))
    for prefix in (Path(sys.prefix), _install_prefix()):
        if prefix is not None:
            dirs.append(SearchDir(prefix / "share" / "rosenna" / "toolchains", "site"))
    dirs.append(SearchDir(builtin_dir(), "builtin"))
    unique, seen = [], set()
    for d in dirs:
        try:
            key = d.path.resolve() if d.path.exists() else d.path
        except OSError:  # a folder above it cannot be searched: reading it says so
            key = d.path
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML would keep the last) and any
    alias (``*name``): a profile is small and written out, and aliases are how a few hundred bytes
    become gigabytes (the "billion laughs")."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.events.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "an alias (*name) is not allowed in a profile", mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                mark = key_node.start_mark
                raise yaml.constructor.ConstructorError(
                    None, None, f"key '{key}' is given twice", mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _strings(data, prefix=()):
    """Yield (dotted key, string) for every string value in a profile's data."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _strings(value, prefix + (str(key),))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _strings(value, prefix + (str(i),))
    elif isinstance(data, str):
        yield ".".join(prefix), data


# The keys whose strings may use GPU placeholders.
_TEMPLATED = ("flags.", "optimize.", "devflags", "device_link_flags", "probe.command")
# What a probe command may name besides the GPU placeholders.
PROBE_PLACEHOLDERS = ("c", "cxx", "fortran", "device", "omp_offload", "acc", "host", "src", "out")


def cuda_arch_digits(value):
    """A ``cuda_arch`` in Spack's spelling (80, "90a") or EasyBuild's (8.0, "9.0a") as digits ("80", "90a").

    Returns None for a value neither spelling allows (the caller reports it).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value) if 10 <= value <= 999 else None
    text = repr(value) if isinstance(value, float) else str(value)
    match = re.fullmatch(r"([0-9]{1,2})\.([0-9])([a-z]?)", text)
    if match:
        return "".join(match.groups())
    return text if re.fullmatch(r"[0-9]{2,3}[a-z]?", text) else None


# Validated data of each profile file read, by path and text: every generate reads the catalog, and
# parsing its YAML was most of a small model's generate time. A changed file is read anew.
_READ = {}


def read_profile(path, kind="path", rank=0):
    """Read and validate one profile file.

    Raises:
        ProfileError: for unreadable files, bad YAML, unknown or mistyped keys, and unknown
            placeholders, naming the file, the line, the key and how to fix it.
    """
    path = Path(path)
    stem = path.name[: -len(SUFFIX)] if path.name.endswith(SUFFIX) else path.name
    if not re.fullmatch(schema.NAME, stem):
        raise ProfileError(shown(path), [(None, f"the file name {ascii(stem)[:60]} is not a profile name (letters, "
                                                "digits and . _ + -, starting with a letter or digit): rename it")],
                           what="")
    text = _read_text(path)
    key = (str(path), text)
    if key not in _READ:
        _READ[key] = _validated(path, text)
    return ProfileFile(name=path.name[: -len(SUFFIX)], path=path, kind=kind, rank=rank,
                       data=copy.deepcopy(_READ[key]))


def shown(path):
    """``path`` as a message may print it: control characters escaped."""
    text = str(path)
    return ascii(text)[1:-1] if re.search(r"[\x00-\x1f\x7f]", text) else text


def _read_text(path):
    """The text of profile file ``path``: a regular file (a FIFO or device is not opened to wait on
    it) of at most :data:`MAX_BYTES`, in UTF-8; ProfileError otherwise."""
    def refuse(why):
        raise ProfileError(shown(path), [(None, why)], what="")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        refuse(f"cannot read: {exc.strerror}; check its permissions")
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            refuse("not a regular file; a profile is a .yaml file")
        if st.st_size > MAX_BYTES:
            refuse(f"{st.st_size} bytes, more than a profile's {MAX_BYTES}: not read; move it out of the search path")
        try:
            data = handle.read(MAX_BYTES + 1)
        except OSError as exc:
            refuse(f"cannot read: {exc.strerror}")
    if len(data) > MAX_BYTES:
        refuse(f"more than a profile's {MAX_BYTES} bytes: not read; move it out of the search path")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        refuse("cannot read: not UTF-8 text")


def _validated(path, text):
    """The data of the profile file ``path`` holding ``text``, validated (ProfileError if not)."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        column = f" (column {mark.column + 1})" if mark else ""
        text = f"{problem}{column}" + (f", {context}" if context else "")
        fix = "keep one of them" if "twice" in problem else "write the value out in full" if "alias" in problem \
            else "fix the YAML there (a closing bracket, quote or indentation)"
        raise ProfileError(path, [(mark.line + 1 if mark else None, f"{text}; {fix}")],
                           what="not valid YAML") from None
    finally:
        loader.dispose()
    schema.check(data, path, node=node)
    _join_argument_lists(data)
    name = path.name[: -len(SUFFIX)]
    line = lambda *keys: schema.line_of(node, list(keys))  # noqa: E731
    if "name" in data and data["name"] != name:
        raise ProfileError(path, [(line("name"),
            f"key 'name': {data['name']!r} differs from the file name; a profile is named by its file, so this "
            f"file must be {data['name']}{SUFFIX} or say name: {name}")])
    if "cuda_arch" in data:
        digits = cuda_arch_digits(data["cuda_arch"])
        if digits is None:
            raise ProfileError(path, [(line("cuda_arch"),
                f"key 'cuda_arch': {data['cuda_arch']!r} is not a compute capability: write it as Spack does "
                f"(90, \"90a\") or as EasyBuild does (9.0, \"9.0a\")")])
        data["cuda_arch"] = digits
    for key, text in _strings(data):
        try:
            if key.startswith(_TEMPLATED):
                placeholders_in(text, PROBE_PLACEHOLDERS if key == "probe.command" else ())
        except TemplateError as exc:
            keys = [int(k) if k.isdigit() else k for k in key.split(".")]
            raise ProfileError(path, [(line(*keys), f"key '{key}': {exc}")]) from None
    return data


def _join_argument_lists(data):
    """Flags and commands given as lists of arguments become one string of them (validated plain
    arguments: joining with blanks keeps each one), the form every reader of a profile takes."""
    for key in schema.ARGUMENT_LISTS:
        value = data.get(key)
        if isinstance(value, list):
            data[key] = " ".join(value)
        elif isinstance(value, dict):
            data[key] = {k: " ".join(v) if isinstance(v, list) else v for k, v in value.items()}


def merge(base, override):
    """``override`` on top of ``base``: mappings merge key by key, everything else is replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _key_line(path, key):
    """``:LINE`` of top-level ``key`` in the file at ``path``, or "" when it cannot be read."""
    try:
        for number, text in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if text.startswith(f"{key}:"):
                return f":{number}"
    except (OSError, UnicodeDecodeError):
        pass
    return ""


class Catalog:
    """The profiles on a search path, read once.

    A file that cannot be read or validated does not stop the others: it goes to ``broken``, is
    reported once on stderr (file, line, what, how to fix), and is skipped by everything that does
    not name it. Naming it (``lookup``, or ``extends``) raises its error.

    Args:
        dirs: the folders to search, first wins (default: :func:`search_path`).
    """

    def __init__(self, dirs=None):
        self.dirs = list(search_path() if dirs is None else dirs)
        self.files = []  # every usable profile file, in search order
        self.broken = []  # every broken one, as BrokenFile, in search order
        rank = 0
        for d in self.dirs:
            for path in _profile_files(d.path):
                try:
                    self.files.append(read_profile(path, d.kind, rank))
                except ToolchainError as exc:
                    broken = BrokenFile(shown(path.name[: -len(SUFFIX)]), path, d.kind, rank, exc)
                    self.broken.append(broken)
                    warn(broken.notice())
                rank += 1

    def names(self):
        """Every usable profile name, each once, in search order of the file that wins."""
        seen = []
        for f in self.files:
            if f.name not in seen:
                seen.append(f.name)
        return seen

    def winners(self):
        """The winning file of each name, in search order."""
        return [self.find(name) for name in self.names()]

    def shadowed(self, name):
        """The files of ``name`` that an earlier one hides (broken ones included)."""
        everything = sorted(self.files + self.broken, key=lambda f: f.rank)
        return [f for f in everything if f.name == name][1:]

    def find(self, name, after=-1):
        """The first usable file named ``name`` (below rank ``after``), or None."""
        for f in self.files:
            if f.name == name and f.rank > after:
                return f
        return None

    def _refuse_broken(self, name, found, after=-1):
        """Raise the error of a broken ``name`` that ranks before ``found`` (the usable one, or None)."""
        for b in self.broken:
            if b.name == name and b.rank > after and (found is None or b.rank < found.rank):
                raise b.error

    def lookup(self, name):
        """The file for a profile name or an alias (exact, then case-insensitive).

        Raises:
            ToolchainError: when no profile or alias matches, or the file of that name that would
                win is broken (its error: file, line, what is wrong).
        """
        found = self.find(name)
        self._refuse_broken(name, found)
        if found:
            self._say_shadowed(found)
            return found
        for exact in (True, False):
            for f in self.winners():
                aliases = f.data.get("aliases", [])
                if (name in aliases) if exact else (name.lower() in [a.lower() for a in aliases]):
                    return f
        known = ", ".join(self.names()) or "none"
        where = ", ".join(str(d.path) for d in self.dirs)
        raise ToolchainError(f"no toolchain profile or alias named '{name}' (profiles: {known}; searched {where})")

    def _say_shadowed(self, found):
        """Warn (once per process) that ``found``, a path, user or site profile, hides a built-in one."""
        if found.kind == "builtin":
            return
        hidden = next((f for f in self.shadowed(found.name) if f.kind == "builtin"), None)
        if hidden is not None:
            warn(f"toolchain profile '{found.name}' is {shown(found.path)} ({found.kind}), which shadows the "
                 f"built-in {hidden.path}; rename the file to use both")

    def merged(self, profile_file):
        """The data of ``profile_file`` with its ``extends`` chain applied, and the chain of files.

        ``extends: X`` names a profile found anywhere on the path; a profile that extends its own
        name (a site's ``nvhpc.yaml`` saying ``extends: nvhpc``) extends the next one of that name
        further down the path. A file that sets ``compilers.c`` over a parent's without also setting
        ``compilers.cxx`` is warned about: the C++ compiler would still be the parent's.

        Raises:
            ToolchainError: for an unknown or broken parent, a cycle, or a result missing required keys.
        """
        chain = [profile_file]
        current = profile_file
        layers = [current.data]
        while "extends" in current.data:
            parent_name = current.data["extends"]
            after = current.rank if parent_name == current.name else -1
            parent = self.find(parent_name, after)
            try:
                self._refuse_broken(parent_name, parent, after)
            except ToolchainError as exc:
                raise ToolchainError(f"{current.path}: key 'extends': profile '{parent_name}' is broken: {exc}") from None
            if parent is None:
                try:
                    parent = self.lookup(parent_name) if after < 0 else None
                except ToolchainError:
                    parent = None
            if parent is None:
                further = " further down the search path" if after >= 0 else ""
                raise ToolchainError(
                    f"{current.path}{_key_line(current.path, 'extends')}: key 'extends': no profile named "
                    f"'{parent_name}'{further}; name one that `rosenna toolchain list` shows"
                )
            if parent in chain:
                cycle = " -> ".join(f"{f.name} ({f.path})" for f in chain + [parent])
                raise ToolchainError(f"{profile_file.path}: key 'extends': cycle: {cycle}")
            chain.append(parent)
            layers.append(parent.data)
            current = parent
        _check_c_with_cxx(chain)
        data = {}
        for layer in reversed(layers):
            data = merge(data, {k: v for k, v in layer.items() if k not in IDENTITY_KEYS})
        for key in IDENTITY_KEYS:
            if key in profile_file.data:
                data[key] = profile_file.data[key]
        via = ""
        if len(chain) > 1:
            via = " (after extends " + " -> ".join(f.name for f in chain[1:]) + ")"
        schema.check(data, f"{profile_file.path}{via}", merged=True)
        return data, tuple(chain)


def _profile_files(folder):
    """The ``*.yaml`` files directly in ``folder``, sorted; a folder that does not exist gives none,
    one that cannot be read a one-line warning naming it (and none)."""
    try:
        with os.scandir(folder) as scan:
            entries = sorted((e for e in scan if e.name.endswith(SUFFIX)), key=lambda e: e.name)
            return [Path(e.path) for e in entries if _is_file(e)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        warn(f"{shown(folder)}: cannot read this folder of the toolchain search path ({exc.strerror}); its "
             f"profiles are skipped (fix its permissions or take it off ROSENNA_TOOLCHAIN_PATH)")
        return []


def _is_file(entry):
    """A regular file, or a link to one (a FIFO or device is not a profile); an entry that cannot
    be examined counts as a file so that reading it says why."""
    try:
        return entry.is_file()
    except OSError as exc:
        return exc.errno != errno.ENOENT


def _check_c_with_cxx(chain):
    """Warn when a file in an extends chain changes ``compilers.c`` but inherits ``compilers.cxx``."""
    for i, f in enumerate(chain[:-1]):
        compilers = f.data.get("compilers", {})
        if "c" not in compilers or "cxx" in compilers:
            continue
        below = next((g for g in chain[i + 1:] if "cxx" in g.data.get("compilers", {})), None)
        if below is None:
            continue
        cxx = below.data["compilers"]["cxx"]
        line = _line_of_key(f.path, "compilers")
        where = f"{f.path}:{line}" if line else str(f.path)
        warn(f"{where}: key 'compilers.c' is changed to {compilers['c']!r} but 'compilers.cxx' is still {cxx!r} "
             f"from {below.path}; set compilers.cxx too (the C++ harnesses and CMake use it)")


def _line_of_key(path, key):
    try:
        node = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError):
        return None
    return schema.line_of(node, [key]) if node is not None else None
