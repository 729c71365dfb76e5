"""The CPU flags of the generated build files, chosen when they build, not when rosenna generates.

A generated folder is source a solver commits; built on a login node or a compute node of another
CPU it must not carry the CPU of the machine that generated it. So, without ``--target``, the
``.mk`` and ``<name>Config.cmake`` resolve the CPU flags when they build:

- ``native`` (the default): the compiler's own flag for the building machine (``-march=native``,
  ``-mcpu=native`` on Arm and POWER, ``-tp=native`` for nvhpc, ``-xHost`` for the classic Intel
  compilers). The build prints the choice.
- ``generic``: the family's baseline: no CPU flag for the compilers whose default is the baseline
  (gcc, clang, oneapi, aocc), ``-tp=px`` for nvhpc on x86-64 (its default is the building CPU).
- with ``--target NAME`` (archspec's and Spack's names): archspec's flags for NAME with the
  profile's compiler, baked in, and the default: a cross build from a login node for its compute
  nodes. ``native`` and ``generic`` stay available.

make: ``ROSENNA_TARGET=native|generic|NAME`` (``ROSENNA_CPU_FLAGS`` sets the flags outright).
CMake: the cache variable ``<name>_TARGET``.
"""

import os
import shlex

from rosenna.quoting import make_quote


#: The compiler family (archspec's names) by the executable's name, when no banner was read.
FAMILY_OF_COMMAND = {
    "gcc": "gcc", "gfortran": "gcc", "g++": "gcc", "cc": "gcc",
    "clang": "clang", "flang": "clang", "flang-new": "clang", "amdclang": "clang", "amdflang": "clang",
    "nvc": "nvhpc", "nvfortran": "nvhpc", "nvc++": "nvhpc", "pgcc": "nvhpc", "pgfortran": "nvhpc",
    "icx": "oneapi", "ifx": "oneapi", "icc": "intel", "ifort": "intel",
}

#: Per family: the native flag by machine (``uname -m`` / CMAKE_SYSTEM_PROCESSOR), "*" for any other.
NATIVE = {
    "gcc": {"x86_64": "-march=native", "*": "-mcpu=native"},
    "clang": {"x86_64": "-march=native", "*": "-mcpu=native"},
    "aocc": {"x86_64": "-march=native", "*": "-mcpu=native"},
    "oneapi": {"x86_64": "-march=native", "*": ""},
    "intel": {"x86_64": "-xHost", "*": ""},
    "nvhpc": {"*": "-tp=native"},
}

#: Per family: the generic flag by machine.
GENERIC = {"nvhpc": {"x86_64": "-tp=px", "*": ""}}

TARGET_NATIVE, TARGET_GENERIC = "native", "generic"


def family(profile, lang):
    """The compiler family of ``lang`` ("c" or "fortran") of ``profile``: from its banner, else its name."""
    found = profile.families[0 if lang == "c" else 1]
    if found:
        return found
    command = profile.cc if lang == "c" else profile.fc
    words = shlex.split(command) if command.strip() else [""]
    return FAMILY_OF_COMMAND.get(os.path.basename(words[0]), "")


def template(profile, lang):
    """The optimisation flags of ``lang`` with ``{archspec}`` where the CPU flags go ("" if none)."""
    return profile.optimize_templates[0 if lang == "c" else 1]


def uses_cpu_flags(profile, lang):
    return "{archspec}" in template(profile, lang)


def baked(profile, lang):
    """``(name, flags)`` of ``--target`` for ``lang``'s compiler, or None without ``--target``."""
    if profile.target_source != "--target":
        return None
    from rosenna.toolchain.profile import archspec_flags, microarchitecture

    target, _ = microarchitecture(profile.target)
    command = profile.cc if lang == "c" else profile.fc
    return profile.target, archspec_flags(command, target, f"optimize.{lang}")[0]


def choices(profile, lang):
    """``[(ROSENNA_TARGET value, {machine: flags})]``: native, generic, and the baked target."""
    fam = family(profile, lang)
    out = [(TARGET_NATIVE, NATIVE.get(fam, {"*": ""})), (TARGET_GENERIC, GENERIC.get(fam, {"*": ""}))]
    named = baked(profile, lang)
    if named and named[0] not in (TARGET_NATIVE, TARGET_GENERIC):
        out.append((named[0], {"*": named[1]}))
    return out


def default_target(profile):
    return profile.target if profile.target_source == "--target" else TARGET_NATIVE


def make_block(profile, lang):
    """The .mk lines choosing ROSENNA_CPU_FLAGS from ROSENNA_TARGET (and the machine running make)."""
    names = ", ".join(name for name, _ in choices(profile, lang))
    lines = [f"ROSENNA_TARGET ?= {default_target(profile)}",
             "ROSENNA_MACHINE := $(shell uname -m)"]
    for i, (name, by_machine) in enumerate(choices(profile, lang)):
        lines.append(f"{'ifeq' if i == 0 else 'else ifeq'} ($(ROSENNA_TARGET),{name})")
        other = by_machine.get("*", "")
        specific = {m: f for m, f in by_machine.items() if m != "*"}
        for j, (machine, flags) in enumerate(specific.items()):
            lines += [f"{'ifeq' if j == 0 else 'else ifeq'} ($(ROSENNA_MACHINE),{machine})",
                      f"ROSENNA_CPU_FLAGS ?= {flags}"]
        if specific:
            lines += ["else", f"ROSENNA_CPU_FLAGS ?= {other}", "endif"]
        else:
            lines.append(f"ROSENNA_CPU_FLAGS ?= {other}")
    lines += ["else ifeq ($(origin ROSENNA_CPU_FLAGS),undefined)",
              f"$(error ROSENNA_TARGET=$(ROSENNA_TARGET): choose {names}, or give ROSENNA_CPU_FLAGS)",
              "endif"]
    return "\n".join(lines)


def mk_flags(profile, lang):
    """The default CFLAGS / FFLAGS of the .mk, with $(ROSENNA_CPU_FLAGS) where the CPU flags go."""
    return " ".join("$(ROSENNA_CPU_FLAGS)" if word == "{archspec}" else make_quote(word, f"optimize.{lang}")
                    for word in template(profile, lang).split())


def cmake_block(n, profile, langs):
    """The CMake lines setting ``_rosenna_<n>_cpu_<LANG>`` from the cache variable ``<n>_TARGET``."""
    names = [name for name, _ in choices(profile, langs[0])]
    for lang in langs[1:]:
        names += [name for name, _ in choices(profile, lang) if name not in names]
    lines = [f'set({n}_TARGET "{default_target(profile)}" CACHE STRING',
             f'    "CPU of the rosenna model {n}: {", ".join(names)}")',
             f'set_property(CACHE {n}_TARGET PROPERTY STRINGS {" ".join(names)})',
             'if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")',
             "  set(_rosenna_machine x86_64)",
             "else()",
             '  set(_rosenna_machine "${CMAKE_SYSTEM_PROCESSOR}")',
             "endif()"]
    for lang in langs:
        cmake_lang = "C" if lang == "c" else "Fortran"
        var = f"_rosenna_{n}_cpu_{cmake_lang}"
        lines.append(f'set({var} "")')
        for name, by_machine in choices(profile, lang):
            specific = {m: f for m, f in by_machine.items() if m != "*"}
            lines.append(f'if({n}_TARGET STREQUAL "{name}")')
            if specific:
                for j, (machine, flags) in enumerate(specific.items()):
                    lines += [f'  {"if" if j == 0 else "elseif"}(_rosenna_machine STREQUAL "{machine}")',
                              f'    set({var} "{flags}")']
                lines += ["  else()", f'    set({var} "{by_machine.get("*", "")}")', "  endif()"]
            else:
                lines.append(f'  set({var} "{by_machine.get("*", "")}")')
            lines.append("endif()")
    lines += [f'if(NOT {n}_TARGET MATCHES "^({"|".join(names)})$")',
              f'  message(FATAL_ERROR "rosenna {n}: {n}_TARGET=${{{n}_TARGET}}: choose {", ".join(names)}")',
              "endif()"]
    shown = ", ".join(f'{"C" if lang == "c" else "Fortran"} ${{_rosenna_{n}_cpu_{"C" if lang == "c" else "Fortran"}}}'
                      for lang in langs)
    lines.append(f'message(STATUS "rosenna {n}: CPU {n}_TARGET=${{{n}_TARGET}}: {shown}")')
    return lines


def notes(profile):
    """The profile's notes the build files repeat: without ``--target`` not those about filling
    ``{archspec}`` for the generating host, whose CPU the files no longer name."""
    if profile.target_source == "--target":
        return list(profile.notes)
    return [note for note in profile.notes if not note.startswith("optimize.")]
