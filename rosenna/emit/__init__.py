"""Emitters: the strategy's choices rendered as files. Owns the text of every generated file; C and
Fortran differ only through emit.lang's tables. Reads the frozen plan and the chosen result of
rosenna.strategy (never its tables or analyses) and writes to neither."""

from rosenna.emit import c, cmake, cuda, fortran, fpm, host_field, make, pkgconfig  # noqa: F401 (fpm: generate.py)
from rosenna.strategy import of as strategy_of


def runtime_header():
    """``rosenna_rt.h``: the C runtime header with the CUDA/HIP runtime table in it."""
    return c.runtime_header(cuda.runtime_mapping())


def render(strategy, lang, stamp, profile):
    """All generated files of ``strategy`` (a :class:`rosenna.strategy.Strategy`: the frozen plan
    and what runs each part; a plan alone is rendered with the default tuning) for ``lang`` ("c",
    "fortran" or "both"): {filename: text}.

    ``profile``: the resolved toolchain profile whose compilers and flags the build files carry."""
    strategy = strategy_of(strategy)
    plan = strategy.plan
    files = {}
    if lang in ("c", "both"):
        files["rosenna_rt.h"] = runtime_header()
        files[f"{plan.name}.h"] = c.header(plan, stamp, c.simd_widths(strategy))
        files[f"{plan.name}.c"] = c.source(strategy, stamp)
        files[f"{plan.name}.mk"] = make.c_makefile(plan, stamp, profile)
        files[cuda.kernel_filename(plan)] = cuda.kernel_source(strategy, stamp)
        files[f"{plan.name}.pc"] = pkgconfig.c_pc(plan, stamp, profile)
    if lang in ("fortran", "both"):
        files[f"{plan.name}_model.F90"] = fortran.module(plan, stamp, strategy.host.value("points_per_block"),
                                                                strategy.host_body, c.simd_widths(strategy), strategy.host_regions)
        files[f"{plan.name}_fortran.mk"] = make.fortran_makefile(plan, stamp, profile)
        files[f"{plan.name}_fortran.pc"] = pkgconfig.fortran_pc(plan, stamp, profile, with_c=lang == "both")
    files[f"{plan.name}Config.cmake"] = cmake.config(plan, stamp, profile, lang)
    return files
