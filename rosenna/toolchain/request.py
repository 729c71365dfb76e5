"""A profile asked for with a version, as Spack and EasyBuild spell compilers.

``--toolchain`` and ``rosenna toolchain show`` take, besides a profile name or alias:

- a Spack spec: ``gcc@13.2.0``, ``nvhpc@24.1``, ``gcc@=13.2.0``, ``gcc@13.2.0+nvptx`` (the variant
  stays part of the name, so ``gcc+nvptx`` finds the gcc-nvptx profile);
- an EasyBuild module name: ``GCC/13.2.0``, ``NVHPC/24.1``, ``intel-compilers/2024.2.0``, or a
  common toolchain and its generation, ``foss/2023a`` (whose GCC is looked up in
  :data:`EASYBUILD_GCC`).

The name part finds the profile as any name or alias does. The version is then checked against
the version the profile's C compiler reports (``--version``): the requested numbers must begin the
reported ones (``13`` and ``13.2`` match 13.2.0). A mismatch is an error: the job asked for one
compiler and would build with another. A compiler that is not on PATH cannot be checked, and the
reason says so.
"""

import re
from dataclasses import dataclass, replace

from rosenna.errors import ToolchainError
from rosenna.toolchain import detection

# The GCC of EasyBuild's common toolchains (foss, gompi, gfbf) per generation, from the
# easyconfigs' local_gccver (docs.easybuild.io, "Common toolchains").
EASYBUILD_GCC = {
    "2020b": "10.2.0", "2021a": "10.3.0", "2021b": "11.2.0", "2022a": "11.3.0", "2022b": "12.2.0",
    "2023a": "12.3.0", "2023b": "13.2.0", "2024a": "13.3.0", "2025a": "14.2.0", "2025b": "14.3.0",
}
_GENERATION = re.compile(r"\d{4}[ab]")
_VERSION = re.compile(r"\d+(\.\d+)*")
_SPACK = re.compile(r"(?P<name>[^@/\s]+?)@=?(?P<version>[^+~%\s]*)(?P<variants>[+~].*)?")
_EASYBUILD = re.compile(r"(?P<name>[^@/\s]+)/(?P<version>[^/\s]+)")


@dataclass(frozen=True)
class Request:
    """What ``--toolchain`` asked for: the name to look up and the compiler version wanted."""

    spelled: str  # as given
    name: str  # profile name or alias to look up
    version: str = ""  # as given after @ or /, "" when none
    compiler_version: str = ""  # what the C compiler must report ("" when no version was given)
    style: str = ""  # "Spack spec", "EasyBuild module" or ""


def parse(text):
    """Split ``text`` into a :class:`Request`.

    Raises:
        ToolchainError: for a version that is not one version (ranges, lists) or an EasyBuild
            generation rosenna does not know.
    """
    spack = _SPACK.fullmatch(text)
    easybuild = _EASYBUILD.fullmatch(text) if not spack else None
    if not spack and not easybuild:
        return Request(spelled=text, name=text)
    match = spack or easybuild
    style = "Spack spec" if spack else "EasyBuild module"
    name = match.group("name") + ((match.group("variants") or "") if spack else "")
    version = match.group("version")
    if _GENERATION.fullmatch(version):
        if version not in EASYBUILD_GCC:
            known = ", ".join(EASYBUILD_GCC)
            raise ToolchainError(f"--toolchain {text}: {version} is not an EasyBuild toolchain generation rosenna "
                                 f"knows ({known}); name the compiler instead, e.g. GCC/13.2.0")
        return Request(text, name, version, EASYBUILD_GCC[version], style)
    if not _VERSION.fullmatch(version):
        raise ToolchainError(f"--toolchain {text}: '{version}' is not one version; give one such as "
                             f"{match.group('name')}{'@' if spack else '/'}13.2.0 (ranges and lists are not taken)")
    return Request(text, name, version, version, style)


def matches(wanted, found):
    """True when the dotted numbers of ``wanted`` begin those of ``found`` ("13.2" vs "13.2.0")."""
    want = wanted.split(".")
    have = re.findall(r"\d+", found)
    return have[: len(want)] == [str(int(w)) for w in want] if have else False


def check(profile, request, environ=None):
    """``profile`` with its ``reason`` saying how the requested version compares with its C compiler.

    Raises:
        ToolchainError: when the C compiler on PATH reports another version.
    """
    if not request.compiler_version:
        return profile
    generation = (f" (EasyBuild's {request.name}/{request.version} uses GCC {request.compiler_version})"
                  if request.version != request.compiler_version else "")
    asked = f"asked for as the {request.style} '{request.spelled}'{generation}"
    path = detection.which(profile.cc, environ)
    if not path:
        reason = f"{asked}; version not checked: {profile.cc} is not on PATH"
        return replace(profile, reason=reason)
    notes = []
    found = detection.probe_compiler(profile.cc, None, notes)
    version = found.version if found else ""
    if not version:
        return replace(profile, reason=f"{asked}; version not checked: `{profile.cc} --version` shows none")
    if not matches(request.compiler_version, version):
        raise ToolchainError(
            f"--toolchain {request.spelled}: wants {profile.cc} {request.compiler_version} but {path} is "
            f"{version}; load that compiler first (module load, spack load) or name the profile without a "
            f"version ('{request.name}')")
    return replace(profile, reason=f"{asked}; {profile.cc} {version} ({path}) matches")
