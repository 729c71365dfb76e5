"""The two kinds of substitution in profile strings.

``${NAME}`` and ``${NAME:-default}`` take a value from the environment, as the shell does:
``${ROSENNA_GCC:-gcc}`` is ``$ROSENNA_GCC`` when that is set and not empty, else ``gcc``. The default
may itself hold placeholders and further ``${...}``. Nothing else with a ``$`` is touched, so make's
``$(VAR)`` passes through.

``{cc}``, ``{gfx}``, ``{offload_arch}`` and ``{offload_triple}`` are filled from the GPU the profile
targets (see :mod:`rosenna.toolchain.profile`). Any other name in braces is an error, so a typo such
as ``{CC}`` is caught when the profile is read rather than passed to a compiler.
"""

import re

from rosenna.toolchain.schema import PLACEHOLDERS

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER = re.compile(r"(?<!\$)\{([^{}$]*)\}")


class TemplateError(ValueError):
    """A malformed ``${...}`` or an unknown placeholder; the caller adds file and key."""


def expand_env(text, environ):
    """Expand ``${NAME}`` and ``${NAME:-default}`` in ``text`` from the mapping ``environ``."""
    out = []
    i = 0
    while True:
        start = text.find("${", i)
        if start < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:start])
        match = _ENV_NAME.match(text, start + 2)
        if not match:
            raise TemplateError(f"'${{' at offset {start} is not followed by a variable name")
        name = match.group(0)
        j = match.end()
        if text.startswith("}", j):
            out.append(environ.get(name, ""))
            i = j + 1
            continue
        if not text.startswith(":-", j):
            raise TemplateError(f"'${{{name}' must be closed by '}}' or continue with ':-default}}'")
        # Find the brace that closes this ${...}, skipping balanced braces in the default.
        depth = 1
        k = j + 2
        while k < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        if depth:
            raise TemplateError(f"'${{{name}:-' is never closed by '}}'")
        default = text[j + 2 : k - 1]
        value = environ.get(name, "")
        out.append(value if value else expand_env(default, environ))
        i = k


def placeholders_in(text, extra=()):
    """The placeholder names used in ``text``; raises TemplateError for unknown ones.

    ``extra`` adds names allowed in this string (a probe command's ``{c}``, ``{src}``, ...).
    """
    names = set(_PLACEHOLDER.findall(text))
    known = list(PLACEHOLDERS) + list(extra)
    unknown = sorted(names - set(known))
    if unknown:
        raise TemplateError(
            f"unknown placeholder {{{unknown[0]}}} (known: {', '.join('{%s}' % p for p in known)})"
        )
    return names


def fill(text, values):
    """Replace each known placeholder in ``text`` by ``values[name]``."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)] if m.group(1) in values else m.group(0), text)
