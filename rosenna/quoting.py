"""Quoting a value for each kind of file rosenna writes that another tool parses: make, the shell,
CMake, pkg-config.

Values come from toolchain profiles (compilers, flags, modules, names) and from the user's paths.
The profile schema already limits them to plain words (:mod:`rosenna.toolchain.schema`), so for
every shipped profile these functions return the text unchanged and the generated files read as
written by hand; they are the second line: a value that slipped past the schema (a ``${VAR}``
expanded from the environment, a caller that never went through the schema) is either made inert
for its destination or refused with :class:`Unquotable`, never spliced in raw.

Each function takes the value as one string of whitespace-separated arguments (as profiles write
flags) unless it says otherwise:

- :func:`sh_quote`: one shell word (``'...'`` when needed), for a script; :func:`sh_dquote` the
  same inside double quotes;
- :func:`make_quote`: a make variable's value whose expansion reaches a recipe's shell: each
  argument shell-quoted when needed, then ``$`` doubled and ``#`` escaped for make;
- :func:`cmake_quote`: one CMake quoted argument ``"..."``;
- :func:`pc_quote`: a pkg-config value: plain arguments only (pkg-config and pkgconf split and
  re-quote flags differently, so nothing that needs quoting is written at all).

Control characters (a newline above all: it ends a make line, a CMake command, a .pc field) are
refused everywhere.
"""

import re
import shlex

from rosenna.errors import RosennaError

#: A character none of the destinations can carry safely inside a value.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: An argument that needs no quoting in sh, make (as a variable's value), CMake or pkg-config.
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./~^-]+")
#: Characters of a path that make cannot take in a target or prerequisite name however it is
#: quoted (whitespace splits names, ``:`` ``;`` ``=`` ``#`` ``$`` ``%`` ``*?[]`` ``\\`` are syntax), and
#: the shell's metacharacters, which the .mk recipes pass to sh unquoted in ``$(ROSENNA_DIR)``.
_PATH_UNSAFE = re.compile(r"[\s:;=#$%*?\[\]\\'\"`&|<>(){}!]|[\x00-\x1f\x7f]")


class Unquotable(RosennaError):
    """A value that cannot be written safely into the destination named in the message."""


def _check(text, where):
    text = str(text)
    if _CONTROL.search(text):
        raise Unquotable(f"{where}: {ascii(text)[:80]} holds a control character (a newline?), which would "
                         f"end the line it is written on")
    return text


def sh_quote(text, where="value"):
    """``text`` as one POSIX shell word (unchanged when it is plain)."""
    return shlex.quote(_check(text, where))


def sh_dquote(text, where="value"):
    """``text`` as one double-quoted POSIX shell word: ``\\ " $ ` `` escaped."""
    inner = _check(text, where)
    for char in ("\\", '"', "$", "`"):
        inner = inner.replace(char, "\\" + char)
    return f'"{inner}"'


def make_quote(text, where="value"):
    """``text`` (arguments separated by blanks) as a make variable's value for recipes' shells."""
    words = _check(text, where).split()
    return " ".join(shlex.quote(w).replace("$", "$$").replace("#", "\\#") for w in words)


def cmake_quote(text, where="value"):
    """``text`` as one CMake quoted argument (blanks collapsed; ``\\ " $ ;`` escaped)."""
    inner = " ".join(_check(text, where).split())
    for char in ("\\", '"', "$", ";"):
        inner = inner.replace(char, "\\" + char)
    return f'"{inner}"'


def pc_quote(text, where="value"):
    """``text`` as a pkg-config value: plain arguments only, else :class:`Unquotable`."""
    words = _check(text, where).split()
    for word in words:
        if not _PLAIN.fullmatch(word):
            raise Unquotable(f"{where}: {ascii(word)[:80]} cannot be written into a pkg-config file (only letters, "
                             f"digits and _ @ % + = : , . / ~ ^ - are passed the same by pkg-config and pkgconf)")
    return " ".join(words)


def build_path_problem(path):
    """Why make could not build in folder ``path`` (a sentence), or None: the generated .mk
    recipes name files by their folder's path, which make splits and the shell reads."""
    bad = _PATH_UNSAFE.search(str(path))
    if bad is None:
        return None
    return (f"its path holds {ascii(bad.group(0))}, which make or the shell would read as syntax in the .mk "
            f"recipes (a folder name with blanks, quotes, $, `, ; and the like runs or breaks at make)")


#: What a terminal would act on rather than print: C0 and C1 controls, DEL, and the bidirectional
#: overrides that reorder what is shown (a name from a model file is no place for either).
_TERMINAL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_text(text, keep_newlines=False):
    """``text`` safe to print on a terminal: each control character shown as its escape (``\\x1b``)
    instead of sent (ESC sequences recolour, retitle or clear a terminal; BEL rings it)."""
    def escape(match):
        char = match.group(0)
        if keep_newlines and char == "\n":
            return char
        return ascii(char)[1:-1]
    return _TERMINAL.sub(escape, str(text))
