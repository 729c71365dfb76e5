"""Emitters: the plan rendered as files. C and Fortran differ only through emit.lang's tables."""

from rosenna import limits
from rosenna.emit import c, cmake, cuda, fortran, fpm, host_field, make, pkgconfig  # noqa: F401 (fpm: generate.py)


def host_block(plan):
    """Points per host block: the default, halved until a block's scratch fits in
    :data:`rosenna.limits.HOST_BLOCK_BYTES`."""
    block = limits.HOST_BLOCK[plan.precision]
    per_point = (plan.nx + plan.ny + sum(plan.scratch) + 1) * plan.itemsize
    while block > 1 and block * per_point > limits.HOST_BLOCK_BYTES:
        block //= 2
    return block


def runtime_header():
    """``rosenna_rt.h``: the C runtime header with the CUDA/HIP runtime table in it."""
    return c.runtime_header(cuda.runtime_mapping())


def render(plan, lang, stamp, profile, constant_limit=None):
    """All generated files of ``plan`` for ``lang`` ("c", "fortran" or "both"): {filename: text}.

    ``profile``: the resolved toolchain profile whose compilers and flags the build files carry.

    ``constant_limit``: bytes of embedded weights up to which the CUDA/HIP kernel keeps them in
    __constant__ memory (default :data:`rosenna.limits.CONSTANT_LIMIT`)."""
    files = {}
    block = host_block(plan)
    plan.host_vector = host_field.vector_bytes(profile)
    if lang in ("c", "both"):
        files["rosenna_rt.h"] = runtime_header()
        files[f"{plan.name}.h"] = c.header(plan, stamp)
        files[f"{plan.name}.c"] = c.source(plan, stamp, block)
        files[f"{plan.name}.mk"] = make.c_makefile(plan, stamp, profile)
        files[cuda.kernel_filename(plan)] = cuda.kernel_source(
            plan, stamp, limits.CONSTANT_LIMIT if constant_limit is None else constant_limit)
        files[f"{plan.name}.pc"] = pkgconfig.c_pc(plan, stamp, profile)
    if lang in ("fortran", "both"):
        files[f"{plan.name}_model.F90"] = fortran.module(plan, stamp, block)
        files[f"{plan.name}_fortran.mk"] = make.fortran_makefile(plan, stamp, profile)
        files[f"{plan.name}_fortran.pc"] = pkgconfig.fortran_pc(plan, stamp, profile, with_c=lang == "both")
    files[f"{plan.name}Config.cmake"] = cmake.config(plan, stamp, profile, lang)
    return files
