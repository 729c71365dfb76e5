"""``<name>.pc`` and ``<name>_fortran.pc``: the generated libraries for pkg-config (Makefile, Meson).

Paths are relative to the .pc file itself (``${pcfiledir}``, which pkg-config and pkgconf both
define), so the generated folder can move. The libraries are the archives the .mk recipes build
beside it (``make -f <name>.mk``, ``make -f <name>_fortran.mk``); Cflags and Libs carry the
toolchain profile's OpenMP flags, which both the solver's code (its offload loops call
``<name>_infer``) and the link (the OpenMP runtime, the offload image) need. ``<name>_fortran``
requires ``<name>`` when both are generated: the module's ``<name>_infer_batch_dev`` is a bind(C)
interface to the C archive, so a program linking the Fortran package alone gets both archives in
the right order. OpenMP and the CUDA/HIP runtime ship no .pc file to require; their flags are
written out.
"""

from rosenna import __version__
from rosenna.quoting import pc_quote


def _flags(text):
    return pc_quote(text, "a toolchain profile's value in a .pc file")


def _head(stamp, profile, what, recipe, name):
    lines = [f"# {stamp}",
             f"# pkg-config file of {what}, built by make -f {recipe}:",
             f"#   PKG_CONFIG_PATH=<this folder> pkg-config --cflags --libs {name}",
             f"# Flags of toolchain profile {_flags(profile.name)} (backend {profile.backend}, GPU "
             f"{profile.gpu.offload_arch}); the archives' CPU is the one {recipe} built for (ROSENNA_TARGET).",
             "prefix=${pcfiledir}",
             "includedir=${prefix}",
             "libdir=${prefix}",
             f"offload_flags={_flags(profile.offload_flags)}",
             ""]
    return lines


def c_pc(plan, stamp, profile):
    """``<name>.pc``: the C library lib<name>.a and <name>.h."""
    n = plan.name
    device = ""
    lines = _head(stamp, profile, f"the rosenna model {n} (C library lib{n}.a, header {n}.h)", f"{n}.mk", n)
    if profile.backend in ("cuda", "hip"):
        runtime = _flags(profile.device_link_flags) or ("-lcudart" if profile.backend == "cuda" else "-lamdhip64")
        device = f" {runtime} -lstdc++"
        lines.insert(4, f"# Backend {profile.backend}: the {profile.backend.upper()} runtime's folder must be on the "
                        f"linker's path (or add $(make -s -f {n}.mk print-libs)).")
    lines += [f"Name: {n}",
              f"Description: rosenna-generated model {n}, C library ({profile.backend} backend)",
              f"Version: {__version__}",
              "Cflags: -I${includedir} ${offload_flags}",
              f"Libs: -L${{libdir}} -l{n} ${{offload_flags}} -lm{device}",
              ""]
    return "\n".join(lines)


def fortran_pc(plan, stamp, profile, with_c=True):
    """``<name>_fortran.pc``: the Fortran library lib<name>_f.a and module <name>_model; ``with_c``:
    the C package is generated too, and required."""
    n = plan.name
    lines = _head(stamp, profile, f"the rosenna model {n} (Fortran library lib{n}_f.a, module {n}_model)",
                  f"{n}_fortran.mk", f"{n}_fortran")
    lines += [f"Name: {n}_fortran",
              f"Description: rosenna-generated model {n}, Fortran module {n}_model",
              f"Version: {__version__}",
              *([f"Requires: {n} = {__version__}"] if with_c else []),
              "Cflags: -I${includedir} ${offload_flags}",
              f"Libs: -L${{libdir}} -l{n}_f ${{offload_flags}}",
              ""]
    return "\n".join(lines)
