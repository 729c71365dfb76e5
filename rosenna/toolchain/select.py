"""Choosing a profile for this node (``--toolchain auto``).

The order, documented in docs/toolchains.md:

1. If a GPU is found, the profiles whose ``gpu_vendor`` lists its vendor are candidates (vendors
   in the order found: NVIDIA, AMD, Intel). They are tried in this order: profiles from
   ``ROSENNA_TOOLCHAIN_PATH``, the user's and the site's folders before the built-in ones; then
   higher ``priority`` first; then search order. The first whose compilers are all on PATH (c and
   fortran, and the device compiler when its backend is cuda or hip) and whose ``probe``, if it
   has one, succeeds is chosen.
2. Otherwise the host profiles (no ``gpu_vendor``) are tried in the same order.
3. If none of those has its compilers either, ``gcc`` is chosen, and the reason says so.
"""

import os
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from rosenna.errors import ToolchainError
from rosenna.toolchain.catalog import warn
from rosenna.toolchain.profile import build

FALLBACK = "gcc"
PROBE_TIMEOUT = 120


@dataclass(frozen=True)
class Selection:
    profile: object  # the chosen Profile, its ``reason`` filled
    considered: tuple  # ((name, verdict), ...) in the order tried


def run_probe(profile, environ=None):
    """Run a profile's probe; (True, "") when it passes, else (False, why)."""
    probe = profile.probe
    if not probe:
        return True, ""
    with tempfile.TemporaryDirectory(prefix="rosenna-probe-") as tmp:
        src = Path(tmp) / "probe.c"
        out = Path(tmp) / "probe.out"
        src.write_text(probe.get("source", ""), encoding="utf-8")
        command = probe["command"].replace("{src}", shlex.quote(str(src))).replace("{out}", shlex.quote(str(out)))
        try:
            argv = shlex.split(command)
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                                  cwd=tmp, env=environ, stdin=subprocess.DEVNULL)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            return False, f"probe `{command}` could not run: {exc}"
        output = proc.stdout + proc.stderr
        if proc.returncode != 0:
            last = output.strip().splitlines()[-1:] or [""]
            return False, f"probe `{command}` failed (exit status {proc.returncode}): {last[0]}"
        expect = probe.get("expect")
        if expect and not re.search(expect, output, re.M):
            return False, f"probe `{command}` ran but its output does not match {expect!r}"
    return True, ""


def _order(profile_file, priority):
    return (profile_file.kind == "builtin", -priority, profile_file.rank)


def select(catalog, detection, *, environ=None):
    """Choose the profile for the node described by ``detection``.

    Returns:
        A :class:`Selection`; ``selection.profile.reason`` says why.

    Profiles that are broken (their file, or one they extend) are skipped, and said so.

    Raises:
        ToolchainError: when no ``gcc`` profile exists to fall back on.
    """
    environ = os.environ if environ is None else environ
    gpus = tuple(detection.gpus)
    built, considered = [], []
    for f in catalog.winners():
        try:
            built.append((f, build(catalog, f, gpus=gpus, environ=environ)))
        except ToolchainError as exc:  # e.g. extends a broken file: skipped like the file itself
            warn(f"{exc} (profile '{f.name}' skipped)")
            considered.append((f.name, f"broken: {exc}"))

    def usable(profile):
        missing = profile.missing_compilers(environ=environ)
        if missing:
            return False, "not on PATH: " + ", ".join(f"{cmd or '(unset)'} ({role})" for role, cmd in missing)
        ok, why = run_probe(profile, environ)
        return ok, why

    def compilers_of(profile):
        return ", ".join(profile.compiler(r) for r in profile.required_roles())

    for vendor in detection.vendors():
        gpu = next(g for g in gpus if g.vendor == vendor)
        candidates = sorted((p for f, p in built if vendor in p.gpu_vendor),
                            key=lambda p: _order(catalog.find(p.name), p.priority))
        for profile in candidates:
            ok, why = usable(profile)
            considered.append((profile.name, "chosen" if ok else why))
            if ok:
                reason = (f"{gpu.describe()} found by {gpu.tool}; '{profile.name}' ({profile.kind}) targets "
                          f"{vendor} and its compilers {compilers_of(profile)} are on PATH")
                if profile.probe:
                    reason += " and its probe passed"
                return Selection(_with_reason(profile, reason), tuple(considered))
    host = sorted((p for f, p in built if not p.gpu_vendor),
                  key=lambda p: _order(catalog.find(p.name), p.priority))
    gpu_note = ("no GPU found" if not gpus else
                "no profile for the GPU found (" + ", ".join(g.describe() for g in gpus) + ") is usable")
    for profile in host:
        ok, why = usable(profile)
        considered.append((profile.name, "chosen" if ok else why))
        if ok:
            reason = (f"{gpu_note}; host profile '{profile.name}' ({profile.kind}) has its compilers "
                      f"{compilers_of(profile)} on PATH")
            return Selection(_with_reason(profile, reason), tuple(considered))
    fallback = next((p for f, p in built if f.name == FALLBACK), None)
    if fallback is None:
        raise ToolchainError(f"no usable toolchain profile and no '{FALLBACK}' profile to fall back on")
    considered.append((fallback.name, "fallback"))
    reason = f"{gpu_note}; no profile has its compilers on PATH, so falling back to '{FALLBACK}'"
    return Selection(_with_reason(fallback, reason), tuple(considered))


def _with_reason(profile, reason):
    return replace(profile, reason=reason)
