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
"""

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from rosenna.errors import ToolchainError
from rosenna.toolchain import schema
from rosenna.toolchain.template import TemplateError, placeholders_in

SUFFIX = ".yaml"
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
        key = d.path.resolve() if d.path.exists() else d.path
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML would keep the last)."""

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
_TEMPLATED = ("flags.", "devflags", "device_link_flags", "probe.command")
# What a probe command may name besides the GPU placeholders.
PROBE_PLACEHOLDERS = ("c", "cxx", "fortran", "device", "omp_offload", "acc", "host", "src", "out")


def read_profile(path, kind="path", rank=0):
    """Read and validate one profile file.

    Raises:
        ToolchainError: for unreadable files, bad YAML, unknown or mistyped keys, and unknown
            placeholders, naming the file and the key.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolchainError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ToolchainError(f"{path}: not valid YAML{where}: {problem}") from None
    schema.check(data, path)
    name = path.name[: -len(SUFFIX)]
    if "name" in data and data["name"] != name:
        raise ToolchainError(
            f"{path}: key 'name': {data['name']!r} differs from the file name; a profile is named by "
            f"its file, so this file must be {data['name']}{SUFFIX} or say name: {name}"
        )
    for key, text in _strings(data):
        try:
            if key.startswith(_TEMPLATED):
                placeholders_in(text, PROBE_PLACEHOLDERS if key == "probe.command" else ())
        except TemplateError as exc:
            raise ToolchainError(f"{path}: key '{key}': {exc}") from None
    return ProfileFile(name=name, path=path, kind=kind, rank=rank, data=data)


def merge(base, override):
    """``override`` on top of ``base``: mappings merge key by key, everything else is replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


class Catalog:
    """The profiles on a search path, read once.

    Args:
        dirs: the folders to search, first wins (default: :func:`search_path`).
    """

    def __init__(self, dirs=None):
        self.dirs = list(search_path() if dirs is None else dirs)
        self.files = []  # every profile file, in search order
        rank = 0
        for d in self.dirs:
            if not d.path.is_dir():
                continue
            for path in sorted(d.path.glob("*" + SUFFIX)):
                if path.is_file():
                    self.files.append(read_profile(path, d.kind, rank))
                    rank += 1

    def names(self):
        """Every profile name, each once, in search order of the file that wins."""
        seen = []
        for f in self.files:
            if f.name not in seen:
                seen.append(f.name)
        return seen

    def winners(self):
        """The winning file of each name, in search order."""
        return [self.find(name) for name in self.names()]

    def shadowed(self, name):
        """The files of ``name`` that an earlier one hides."""
        return [f for f in self.files if f.name == name][1:]

    def find(self, name, after=-1):
        """The first file named ``name`` (below rank ``after``), or None."""
        for f in self.files:
            if f.name == name and f.rank > after:
                return f
        return None

    def lookup(self, name):
        """The file for a profile name or an alias (exact, then case-insensitive).

        Raises:
            ToolchainError: when no profile or alias matches.
        """
        found = self.find(name)
        if found:
            return found
        for exact in (True, False):
            for f in self.winners():
                aliases = f.data.get("aliases", [])
                if (name in aliases) if exact else (name.lower() in [a.lower() for a in aliases]):
                    return f
        known = ", ".join(self.names()) or "none"
        where = ", ".join(str(d.path) for d in self.dirs)
        raise ToolchainError(f"no toolchain profile or alias named '{name}' (profiles: {known}; searched {where})")

    def merged(self, profile_file):
        """The data of ``profile_file`` with its ``extends`` chain applied, and the chain of files.

        ``extends: X`` names a profile found anywhere on the path; a profile that extends its own
        name (a site's ``nvhpc.yaml`` saying ``extends: nvhpc``) extends the next one of that name
        further down the path.

        Raises:
            ToolchainError: for an unknown parent, a cycle, or a result missing required keys.
        """
        chain = [profile_file]
        current = profile_file
        layers = [current.data]
        while "extends" in current.data:
            parent_name = current.data["extends"]
            after = current.rank if parent_name == current.name else -1
            parent = self.find(parent_name, after)
            if parent is None:
                try:
                    parent = self.lookup(parent_name) if after < 0 else None
                except ToolchainError:
                    parent = None
            if parent is None:
                further = " further down the search path" if after >= 0 else ""
                raise ToolchainError(
                    f"{current.path}: key 'extends': no profile named '{parent_name}'{further}"
                )
            if parent in chain:
                cycle = " -> ".join(f"{f.name} ({f.path})" for f in chain + [parent])
                raise ToolchainError(f"{profile_file.path}: key 'extends': cycle: {cycle}")
            chain.append(parent)
            layers.append(parent.data)
            current = parent
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
