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


def simd_lanes(plan, tuning, vector=32):
    """Lanes of the SIMD variants of ``<name>_infer`` (its ``declare simd simdlen`` clauses), as
    ``(lanes, wide)``. ``lanes``: the tuning's ``point_simd_bytes`` over 4 bytes, in both
    precisions: a caller's loop over points has an ``int`` index, which sets GCC's vectorisation
    factor (8 in 32-byte vectors), and a variant of fewer lanes would be called in the loop's
    vectorised remainder, where GCC 12 passes the chunk's first point instead of the remainder's
    (tests/test_point_simd.py). ``wide``: where the host's vectors are wider (``vector`` bytes,
    AVX-512's 64), a second variant of ``vector`` / 4 lanes, the batch path's width, for a caller's
    loop vectorised at that width (``simdlen(16)``, ``-mprefer-vector-width=512``); else 0. Both 0
    (no variant) where ``point_simd_bytes`` is 0, the plan runs over the whole field (its per-point
    locals would be copied per lane) or a lane block's scratch does not fit ``host_block_bytes``."""
    lanes = tuning.point_simd_bytes // 4
    per_point = (plan.nx + plan.ny + sum(plan.scratch) + 1) * plan.itemsize
    if lanes < 2 or plan.path == "whole" or lanes * per_point > tuning.host_block_bytes:
        return 0, 0
    wide = vector // 4
    return lanes, wide if wide > lanes and wide * per_point <= tuning.host_block_bytes else 0


def simd_outputs(plan, tuning, lanes, vector, layers):
    """Whether the 8-lane SIMD variant of an MLP chain (``layers``) runs in 512-bit vectors over its
    outputs (rosenna/emit/simd_mlp.py, from a second, input-major copy of the weights): the tuning's
    ``point_simd_mlp`` and an AVX-512 target (``vector`` 64 bytes)."""
    return bool(tuning.point_simd_mlp and layers and lanes == 8 and vector == 64)


def host(plan, tuning, vector, fused=(), layers=()):
    """The host batch's :class:`Decision`: points per block, vector bytes and the lanes of the
    per-point SIMD variants (and whether the 8-lane one of an MLP chain, ``layers``, has its outputs
    in the lanes: :func:`simd_outputs`); ``fused``: the pointwise epilogues folded into their
    producers' stores (:func:`epilogue.fuse`)."""
    block = host_block(plan, tuning)
    lanes, wide = simd_lanes(plan, tuning, vector)
    outputs = simd_outputs(plan, tuning, lanes, vector, layers)
    points = f"{block} point{'s' if block > 1 else ''}"
    simd = (f"; <name>_infer's SIMD variants {lanes}{f' and {wide}' if wide else ''} lanes" if lanes
            else "; no SIMD variant of <name>_infer")
    simd += ", the 8-lane one in 512-bit vectors over the outputs" if outputs else ""
    values = (("points_per_block", block), ("vector_bytes", vector), ("simd_lanes", lanes), ("simd_lanes_wide", wide),
              ("simd_outputs", outputs))
    if fused:
        values += (("epilogues", "; ".join(f"{'+'.join(f.ops)} after {comment_text(f.nodes[0])}" for f in fused)),)
    return Decision("host batch", "host-blocks", why=f"{points} per block within host_block_bytes "
                    f"{tuning.host_block_bytes}, {vector}-byte vectors{simd}", values=values)
