"""The schema of a toolchain profile, and its validation with jsonschema.

A profile file is validated twice: on its own when it is read (every key it names must be known and
well typed, but it may leave keys out because ``extends`` can supply them), and again once
``extends`` has been merged (then the compilers, backend and host flags must all be present). Each
error names the file, the key (dotted, e.g. ``flags.omp_offload``) and what is wrong.
"""

import difflib

import jsonschema

from rosenna.errors import ToolchainError

# The names a flag or devflags string may use in braces; filled when the profile is resolved.
PLACEHOLDERS = ("cc", "gfx", "offload_arch", "offload_triple")

GPU_VENDORS = ("nvidia", "amd", "intel")
BACKENDS = ("cuda", "hip", "omp")

# Defaults of the storage thresholds, each defined once where it is used: the __constant__ limit in
# the CUDA/HIP emitter (measured on the H200: docs/benchmarks.md), the embed threshold in the plan.
from rosenna.emit.cuda import CONSTANT_LIMIT as DEFAULT_CONSTANT_LIMIT_BYTES  # noqa: F401 (re-exported)
from rosenna.plan import EMBED_THRESHOLD as DEFAULT_EMBED_THRESHOLD  # noqa: F401 (re-exported)

_STRING = {"type": "string"}
_COMMAND = {"type": "string", "minLength": 1}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "rosenna toolchain profile",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._+-]*$"},
        "description": _STRING,
        "extends": {"type": "string", "minLength": 1},
        "aliases": {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
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
            "properties": {"omp_offload": _STRING, "acc": _STRING, "host": _STRING},
        },
        "devflags": _STRING,
        "device_link_flags": _STRING,
        "cuda_arch": {
            "anyOf": [
                {"type": "string", "pattern": "^[0-9]{2,3}[a-z]?$"},
                {"type": "integer", "minimum": 10, "maximum": 999},
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
        "modules": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "probe": {
            "type": "object",
            "additionalProperties": False,
            "required": ["command"],
            "properties": {"command": _COMMAND, "expect": _STRING, "source": _STRING},
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
    return ".".join(str(part) for part in path) or "(top level)"


def _describe(error, schema):
    """One line for one jsonschema error: the key and what is wrong with it."""
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        unexpected = sorted(set(error.instance) - set(known))
        lines = []
        for key in unexpected:
            hint = difflib.get_close_matches(key, known, n=1)
            also = f"; did you mean '{hint[0]}'?" if hint else ""
            lines.append(f"key '{_key(path + [key])}': unknown key (known: {', '.join(known)}){also}")
        return lines
    if error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        return [f"key '{_key(path + [k])}': required but missing" for k in missing]
    if error.validator == "enum":
        allowed = ", ".join(str(v) for v in error.validator_value)
        return [f"key '{_key(path)}': {error.instance!r} is not one of {allowed}"]
    if error.validator == "anyOf" and path and path[-1] == "cuda_arch":
        return [f"key 'cuda_arch': {error.instance!r} is not a compute capability like 90 or \"90a\""]
    if error.validator == "pattern" and path and path[-1] == "amdgpu_target":
        return [f"key 'amdgpu_target': {error.instance!r} is not a gfx target like gfx90a"]
    return [f"key '{_key(path)}': {error.message}"]


def check(data, source, *, merged=False):
    """Validate one profile's data against the schema.

    Args:
        data: the parsed YAML document.
        source: the file it came from, for messages.
        merged: also require what a complete profile needs (after ``extends`` is applied).

    Raises:
        ToolchainError: naming ``source``, each offending key and what is wrong.
    """
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ToolchainError(f"{source}: a profile must be a mapping of keys, this file is {kind}")
    schema = SCHEMA if not merged else {"allOf": [SCHEMA, MERGED_REQUIRED]}
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for error in sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message)):
        for line in _describe(error, schema):
            if line not in problems:
                problems.append(line)
    if problems:
        what = "incomplete profile" if merged else "invalid profile"
        raise ToolchainError(f"{source}: {what}: " + "; ".join(problems))
