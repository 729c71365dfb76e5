"""The schema of a toolchain profile, and its validation with jsonschema.

A profile file is validated twice: on its own when it is read (every key it names must be known and
well typed, but it may leave keys out because ``extends`` can supply them), and again once
``extends`` has been merged (then the compilers, backend and host flags must all be present). Each
error names the file, the key (dotted, e.g. ``flags.omp_offload``) and what is wrong.
"""

import difflib

import jsonschema
import yaml

from rosenna.errors import ToolchainError

# The names a flag or devflags string may use in braces; filled when the profile is resolved.
# ``{archspec}`` is archspec's optimisation flags for the target CPU; only ``optimize.c`` and
# ``optimize.fortran`` may use it (it depends on that language's compiler).
PLACEHOLDERS = ("cc", "gfx", "offload_arch", "offload_triple", "archspec")

# The languages of the ``optimize`` key: the optimisation flags of each compiler role.
OPTIMIZE_LANGS = ("c", "fortran", "device")

GPU_VENDORS = ("nvidia", "amd", "intel")
BACKENDS = ("cuda", "hip", "omp")

# Defaults of the storage thresholds, each defined once in rosenna.limits (the __constant__ limit
# measured on the H200: results/measurement-log.md); configuration imports nothing from plan or emit.
from rosenna.limits import CONSTANT_LIMIT as DEFAULT_CONSTANT_LIMIT_BYTES  # noqa: F401 (re-exported)
from rosenna.limits import EMBED_THRESHOLD as DEFAULT_EMBED_THRESHOLD  # noqa: F401 (re-exported)

_STRING = {"type": "string"}

# The string grammar. Every profile string that reaches a generated file or a job script (compiler
# commands, flags, module names, the profile's name) is plain words: a profile is data, and a
# value with a quote, ``$(...)``, a backtick, ``;`` or a newline would be code in a make recipe, a
# shell script, a CMake file or a .pc file. As read, a value may still hold ``${VAR}`` and
# ``{placeholder}`` (filled when the profile is resolved, then checked again by
# :func:`plain_arguments_problem`).
#: One argument of a command or flag list, as it reaches the generated files.
ARGUMENT = r"[A-Za-z0-9_@%+=:,./~^-]+"
#: A profile's name (its file name without .yaml), an alias, an ``extends`` target.
NAME = r"[A-Za-z0-9][A-Za-z0-9._+-]*"
#: An environment module (Lmod, Environment Modules): ``gcc/12.2.0``, ``PrgEnv-nvidia``, ``cuda@12.4``.
MODULE = r"[A-Za-z0-9][A-Za-z0-9._+/@:=,-]*"
# As read: arguments separated by blanks, ``${...}`` and ``{...}`` allowed.
_RAW_ARGUMENTS = r"^(?:[A-Za-z0-9_@%+=:,./~^{} -]|\$\{)*$"
_RAW_ARGUMENT = r"^(?:[A-Za-z0-9_@%+=:,./~^{}-]|\$\{)+$"
# Flags and commands: one string of blank-separated arguments, or a list of arguments (joined with
# blanks when the file is read: catalog.read_profile).
_FLAGS = {"anyOf": [{"type": "string", "pattern": _RAW_ARGUMENTS},
                    {"type": "array", "items": {"type": "string", "pattern": _RAW_ARGUMENT}}]}
_COMMAND = {"anyOf": [{"type": "string", "minLength": 1, "pattern": _RAW_ARGUMENTS},
                      {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": _RAW_ARGUMENT}}]}
#: The keys whose value may be a list of arguments.
ARGUMENT_LISTS = ("compilers", "flags", "optimize", "devflags", "device_link_flags")
#: Free text (a description, a probe's expected output): one line, no control characters.
_TEXT = {"type": "string", "pattern": "^[^\\x00-\\x1f\\x7f]*$"}


def plain_arguments_problem(text):
    """Why ``text`` (a resolved command or flags) is not plain blank-separated arguments, or None."""
    import re

    for word in str(text).split(" "):
        if word and not re.fullmatch(ARGUMENT, word):
            return (f"{word[:60]!r} is not a plain argument: use letters, digits and _ @ % + = : , . / ~ ^ - "
                    "(no quotes, $, `, ;, parentheses or blanks inside one argument), since the value is written "
                    "into make, shell, CMake and pkg-config files")
    if "\t" in str(text) or "\n" in str(text):
        return "holds a tab or newline: separate arguments with one blank"
    return None

# The ``tuning:`` section: per GPU architecture ("default" first, then "sm_90", "gfx90a", ...), the
# fields of rosenna.strategy.tuning.Tuning (a module below the code it configures).
from rosenna.strategy.tuning import tuning_schema  # noqa: E402

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "rosenna toolchain profile",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": f"^{NAME}$"},
        "description": _TEXT,
        "extends": {"type": "string", "minLength": 1, "pattern": f"^{NAME}$"},
        "aliases": {"type": "array", "items": {"type": "string", "minLength": 1, "pattern": f"^{NAME}$"},
                    "uniqueItems": True},
        "gpu_vendor": {"type": "array", "items": {"enum": list(GPU_VENDORS)}, "uniqueItems": True},
        "priority": {"type": "integer"},
        "compilers": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"c": _COMMAND, "cxx": _COMMAND, "fortran": _COMMAND, "device": _COMMAND},
        },
        "backend": {"enum": list(BACKENDS)},
        "flags": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"omp_offload": _FLAGS, "acc": _FLAGS, "host": _FLAGS},
        },
        "optimize": {
            "type": "object",
            "additionalProperties": False,
            "properties": {lang: _FLAGS for lang in OPTIMIZE_LANGS},
        },
        "devflags": _FLAGS,
        "device_link_flags": _FLAGS,
        # Spack's spelling (80, "90a") and EasyBuild's (8.0, "9.0a"); catalog.cuda_arch_digits
        # turns either into the digits ("80", "90a") that {cc} is filled with.
        "cuda_arch": {
            "anyOf": [
                {"type": "string", "pattern": "^([0-9]{2,3}|[0-9]{1,2}\\.[0-9])[a-z]?$"},
                {"type": "integer", "minimum": 10, "maximum": 999},
                {"type": "number", "minimum": 1, "exclusiveMaximum": 20},
            ]
        },
        "amdgpu_target": {"type": "string", "pattern": "^gfx[0-9a-f]+(:[a-z]+[+-])*$"},
        "thresholds": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "constant_limit_bytes": {"type": "integer", "minimum": 0, "maximum": 65536},
                "embed_threshold": {"type": "integer", "minimum": 0},
            },
        },
        "tuning": tuning_schema(),
        "modules": {"type": "array", "items": {"type": "string", "pattern": f"^{MODULE}$"}},
        # What `rosenna gpu-gate --print-job` asks the batch system for (rosenna/gate/jobs.py, JobRequest).
        "job": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "cpus_per_task": {"type": "integer", "minimum": 1},
                "gpus": {"type": "integer", "minimum": 0},
                "gpu_request": {"enum": ["gpus", "gpus-per-node", "gres", "none"]},
                "partition": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._@:+/-]*$"},
                "account": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._@:+/-]*$"},
                "time": {"type": "string", "pattern": "^(([0-9]+-)?[0-9]{1,2}(:[0-9]{2}){0,2}|[0-9]+)$"},
                "module": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._@:+/-]*$"},
            },
        },
        "probe": {
            "type": "object",
            "additionalProperties": False,
            "required": ["command"],
            "properties": {"command": _COMMAND, "expect": _TEXT, "source": _STRING},
        },
    },
}

# What a profile must have once ``extends`` is merged.
MERGED_REQUIRED = {
    "required": ["compilers", "backend", "flags"],
    "properties": {
        "compilers": {"required": ["c", "fortran"]},
        "flags": {"required": ["host"]},
    },
}


def _key(path):
    """A key as a reader writes it: ``flags.host``, ``aliases[1]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


# JSON types in the words of a YAML file, with how to write one.
_TYPE_WORDS = {
    "array": "a list, written [a, b] or as '- item' lines",
    "object": "a mapping of keys (key: value lines indented below it)",
    "string": "text (quote it if YAML reads it as a number, true/false or null)",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
}


def _value(instance):
    """How a parsed YAML value reads in a message."""
    if isinstance(instance, bool):
        return f"the boolean {str(instance).lower()}"
    if instance is None:
        return "nothing (null)"
    if isinstance(instance, str):
        return f"the text {instance!r}"
    if isinstance(instance, (int, float)):
        return f"the number {instance}"
    if isinstance(instance, list):
        return "a list"
    if isinstance(instance, dict):
        return "a mapping"
    return repr(instance)


def _plain(error):
    """One problem of one jsonschema error in plain words, with how to fix it, or None."""
    v, value, instance = error.validator, error.validator_value, error.instance
    if v == "type":
        wanted = [value] if isinstance(value, str) else list(value)
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in wanted)
        return f"should be {words}, not {_value(instance)}"
    if v == "minLength":
        return "is empty: give a value or leave the key out"
    if v == "minimum":
        return f"is {instance}, below the smallest allowed value {value}"
    if v == "maximum":
        return f"is {instance}, above the largest allowed value {value}"
    if v == "exclusiveMaximum":
        return f"is {instance}; it must be below {value}"
    if v == "uniqueItems":
        seen, twice = set(), []
        for item in instance:
            if repr(item) in seen and item not in twice:
                twice.append(item)
            seen.add(repr(item))
        return "lists " + ", ".join(repr(t) for t in twice) + " more than once: keep one"
    if v == "pattern" and error.absolute_path and error.absolute_path[-1] == "name":
        return (f"{instance!r} is not a profile name: use letters, digits and . _ + -, starting with a "
                "letter or digit")
    if v == "pattern":  # the string grammar: a profile is data, never code in a generated file
        words = {f"^{NAME}$": "a profile name (letters, digits and . _ + -, starting with a letter or digit)",
                 f"^{MODULE}$": "a module name (letters, digits and . _ + / @ : = , -, starting with a letter or digit)",
                 _RAW_ARGUMENTS: "plain arguments separated by blanks (letters, digits, _ @ % + = : , . / ~ ^ -, "
                                 "${VAR} and {placeholder}); quotes, $(...), `, ;, | and newlines are not allowed, "
                                 "since the value is written into make, shell, CMake and pkg-config files",
                 _RAW_ARGUMENT: "one plain argument (letters, digits, _ @ % + = : , . / ~ ^ -, ${VAR} and "
                                "{placeholder}; no blanks, quotes, $(...), `, ; or newlines)",
                 _TEXT["pattern"]: "one line of text without control characters"}
        if value in words:
            return f"{ascii(instance)[:80]} is not {words[value]}"
    return None


def _describe(error, schema):
    """Lines ``(path, text)`` for one jsonschema error: the key, what is wrong and how to fix it."""
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        unexpected = sorted(set(error.instance) - set(known))
        lines = []
        for key in unexpected:
            hint = difflib.get_close_matches(key, known, n=1)
            also = f"; did you mean '{hint[0]}'?" if hint else ""
            lines.append((path + [key], f"key '{_key(path + [key])}': unknown key: remove it or use one of {', '.join(known)}{also}"))
        return lines
    if error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        return [(path, f"key '{_key(path + [k])}': required but missing: set it here or extend a profile "
                       "that sets it") for k in missing]
    if error.validator == "enum":
        allowed = ", ".join(str(v) for v in error.validator_value)
        return [(path, f"key '{_key(path)}': {error.instance!r} is not one of {allowed}")]
    if error.validator == "anyOf" and path and path[-1] == "cuda_arch":
        return [(path, f"key 'cuda_arch': {_value(error.instance)} is not a compute capability: write it as "
                       "Spack does (90, \"90a\") or as EasyBuild does (9.0, \"9.0a\")")]
    if error.validator == "pattern" and path and path[-1] == "amdgpu_target":
        return [(path, f"key 'amdgpu_target': {error.instance!r} is not a gfx target like gfx90a")]
    plain = _plain(error)
    if plain is None and error.context:  # anyOf/oneOf: say what the closest branch wanted
        # a broken grammar says more than "should be a list" of the branch the value did not take
        context = sorted(error.context, key=lambda e: e.validator != "pattern")
        plain = next((p for p in map(_plain, context) if p), None)
    return [(path, f"key '{_key(path)}': {plain or error.message}")]


def line_of(node, path):
    """The 1-based line of the YAML node at ``path`` under ``node`` (the deepest one that exists).

    ``node`` is what ``yaml.compose`` returns; a key's line is that of the key itself.
    """
    line = node.start_mark.line + 1 if node is not None else None
    for part in path:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if key_node.value == str(part):
                    line, node = key_node.start_mark.line + 1, value_node
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def check(data, source, *, merged=False, node=None):
    """Validate one profile's data against the schema.

    Args:
        data: the parsed YAML document.
        source: the file it came from, for messages.
        merged: also require what a complete profile needs (after ``extends`` is applied).
        node: the document as ``yaml.compose`` gives it, for line numbers (``file:line:``).

    Raises:
        ProfileError: naming ``source``, and for each problem the line, the key, what is wrong and
            how to fix it.
    """
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ProfileError(source, [(1 if node is not None else None,
                                     f"a profile must be a mapping of keys (key: value lines), this file is {kind}")])
    schema = SCHEMA if not merged else {"allOf": [SCHEMA, MERGED_REQUIRED]}
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for error in sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message)):
        for path, text in _describe(error, schema):
            problem = (line_of(node, path) if node is not None else None, text)
            if problem not in problems:
                problems.append(problem)
    if problems:
        what = "incomplete profile" if merged else "invalid profile"
        raise ProfileError(source, sorted(problems, key=lambda p: p[0] or 0), what=what)


class ProfileError(ToolchainError):
    """A profile file is broken: each problem with its line (None when not known) and the fix.

    ``str()`` reads ``FILE:LINE: WHAT: PROBLEM; FILE:LINE: ...``, as compilers write errors.
    """

    def __init__(self, source, problems, what="invalid profile"):
        self.source = str(source)
        self.problems = list(problems)  # [(line or None, text)]
        self.what = what
        super().__init__("; ".join(self.lines()))

    def lines(self):
        out = []
        for line, text in self.problems:
            where = f"{self.source}:{line}" if line else self.source
            out.append(f"{where}: {self.what}: {text}" if self.what else f"{where}: {text}")
        return out

    @property
    def line(self):
        """The first problem's line, or None."""
        return next((line for line, _ in self.problems if line), None)
