"""Per point: the plan's loops for one point, run by one thread (a GPU thread, a host SIMD lane).

Owns the fallbacks every plan fits (the CUDA/HIP one-point-per-thread kernel, :data:`BATCHED`)
and the host batch's shape: the points per block (:func:`host_block`), the width of the host
CPU's vectors (:func:`vector_bytes`, from the toolchain profile's target) and the pointwise
epilogues folded into their producers' stores (:mod:`.epilogue`).
"""

from rosenna.quoting import comment_text
from rosenna.strategy.point import epilogue  # noqa: F401 (the host batch's epilogues)
from rosenna.strategy.table import Decision, Implementation


class PointKernel(Implementation):
    name, priority = "point", 0
    summary = "one thread per point, the plan's loops"

    def reasons(self, s, tuning):
        return []


BATCHED = (PointKernel(),)


def host_block(plan, tuning):
    """Points per host block: the precision's default, halved until a block's scratch fits
    ``tuning.host_block_bytes``."""
    block = tuning.host_block_double if plan.precision == "double" else tuning.host_block_single
    per_point = (plan.nx + plan.ny + sum(plan.scratch) + 1) * plan.itemsize
    while block > 1 and block * per_point > tuning.host_block_bytes:
        block //= 2
    return block


def vector_bytes(profile):
    """Bytes of the vectors the host loops are written for, from the toolchain profile's CPU
    target: 64 where it has AVX-512 (32 registers of 64 bytes: the SIMD loops then say
    ``simdlen``, since GCC's tuning for those CPUs otherwise picks 256-bit vectors, half the FMAs
    per instruction: dwsep's 1x1 convs 1.6x slower), else 32 (AVX2; the compiler's own width)."""
    import archspec.cpu

    target = archspec.cpu.TARGETS.get(getattr(profile, "target", "") or "")
    return 64 if target is not None and "avx512f" in target.features else 32


def host(plan, tuning, vector, fused=()):
    """The host batch's :class:`Decision`: points per block and vector bytes; ``fused``: the
    pointwise epilogues folded into their producers' stores (:func:`epilogue.fuse`)."""
    block = host_block(plan, tuning)
    points = f"{block} point{'s' if block > 1 else ''}"
    values = (("points_per_block", block), ("vector_bytes", vector))
    if fused:
        values += (("epilogues", "; ".join(f"{'+'.join(f.ops)} after {comment_text(f.nodes[0])}" for f in fused)),)
    return Decision("host batch", "host-blocks", why=f"{points} per block within host_block_bytes "
                    f"{tuning.host_block_bytes}, {vector}-byte vectors", values=values)
