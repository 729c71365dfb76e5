"""Emitters: the plan rendered as files. C and Fortran differ only through emit.lang's tables."""

from rosenna.emit import c, cuda, fortran

#: Points per block in the host batch path (point index innermost, in SIMD lanes).
HOST_BLOCK = {"single": 32, "double": 16}


def host_block(plan):
    """Points per host block: the default, halved until a block's scratch fits in 64 KiB."""
    block = HOST_BLOCK[plan.precision]
    per_point = (plan.nx + plan.ny + sum(plan.scratch) + 1) * plan.itemsize
    while block > 1 and block * per_point > 64 * 1024:
        block //= 2
    return block


def render(plan, lang, stamp, defaults, constant_limit=None):
    """All generated files of ``plan`` for ``lang`` ("c", "fortran" or "both"): {filename: text}.

    ``constant_limit``: bytes of embedded weights up to which the CUDA/HIP kernel keeps them in
    __constant__ memory (default :data:`rosenna.emit.cuda.CONSTANT_LIMIT`)."""
    files = {}
    block = host_block(plan)
    if lang in ("c", "both"):
        files["rosenna_rt.h"] = c.runtime_header()
        files[f"{plan.name}.h"] = c.header(plan, stamp)
        files[f"{plan.name}.c"] = c.source(plan, stamp, block)
        files[f"{plan.name}.mk"] = c.makefile(plan, stamp, defaults)
        files[cuda.kernel_filename(plan)] = cuda.kernel_source(
            plan, stamp, cuda.CONSTANT_LIMIT if constant_limit is None else constant_limit)
    if lang in ("fortran", "both"):
        files[f"{plan.name}_model.F90"] = fortran.module(plan, stamp, block)
        files[f"{plan.name}_fortran.mk"] = fortran.makefile(plan, stamp, defaults)
    return files
