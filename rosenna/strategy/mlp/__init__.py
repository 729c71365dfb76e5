"""The MLP chain: owns its analysis (:mod:`.analysis`, the layer list found once) and the tables of
implementations that run one.

Tables (each an ordered tuple of :class:`~rosenna.strategy.table.Implementation`; the emitters
render the winner by its name):

- :data:`BATCHED`: the FP32 batched CUDA/HIP kernel of a chain (``mlp-narrow``, ``mlp-staged``,
  ``mlp-wide``); the per-point kernel (:mod:`rosenna.strategy.point`) is the fallback;
- :data:`TENSOR`: the tensor-core kernel compiled in beside it under its guard (``tc-chain``,
  ``tc-wide``, ``dmma``), or none;
- :data:`ROUTINE`: the body of the per-point ``<name>_infer`` for the user's kernels;
- :data:`OFFLOAD`: the OpenMP offload device body of ``<name>_infer`` (clang).

A kernel's structural sizes (its block shape, its shared memory) are stated here, where the
choice depends on them, and checked against the layouts the emitters build by
tests/test_strategy_sweep.py. Each :meth:`reasons` takes any plan: a plan that is no chain
gets the analysis' reason.
"""

from rosenna.strategy.mlp.analysis import ACTIVATIONS, Chain, Layer, analyse  # noqa: F401
from rosenna.strategy.table import Implementation, Subject  # noqa: F401


def _tiles(n):
    return (n + 7) // 8


def _round(n, m):
    return (n + m - 1) // m * m


def _chain_reasons(s, precision="single", low=None):
    """Why the chain cannot take a kernel of ``precision`` whose arithmetic is ``low`` ("bf16",
    "fp16"; None: float32 or float64 throughout)."""
    if s.path == "whole":
        return ["the plan runs over the whole field"]
    if not s.chain:
        return [s.chain.reason]
    if s.plan.precision != precision:
        return [f"{s.plan.precision} precision, not {precision}"]
    have = getattr(s.plan, "low_precision", None)
    if have != low:
        if have:
            return [f"--precision {have}: it computes float32 activations without the {have} rounding (the "
                    "plan's loops round them as the host does)"]
        return [f"{low} only (--precision {low})"]
    return []


# -- the FP32 batched kernels ---------------------------------------------------------------------

#: The staged kernel: hidden layers padded to this width, outputs at most STAGED_MAX_OUT.
STAGED_WIDTH, STAGED_MAX_OUT = 128, 8


def is_wide(layers, tuning):
    """A hidden layer at least ``tuning.wide_layer`` wide."""
    return max((layer.n for layer in layers[:-1]), default=0) >= tuning.wide_layer


def tiled_smem(layers, tuning):
    """Dynamic shared memory per block of the tiled kernel (bytes): one activation buffer when
    every hidden layer's 8x8 tiles fit one per thread, else two."""
    points, threads = tuning.tiled_points, tuning.tiled_threads
    inplace = all((points // 8) * (_round(layer.n, 8) // 8) <= threads for layer in layers[:-1])
    rows = max([layers[0].k] + [_round(layer.n, 8) for layer in layers[:-1]])
    return (1 if inplace else 2) * rows * (points + 4) * 4


def takes_shared(layers, tuning):
    """A wide chain whose activations fit the shared memory a tiled block may have."""
    return bool(layers) and is_wide(layers, tuning) and tiled_smem(layers, tuning) <= tuning.tiled_smem_limit


class Narrow(Implementation):
    name, priority = "mlp-narrow", 40
    summary = "FP32, one thread per point, layers unrolled in registers"

    def reasons(self, s, tuning):
        out = _chain_reasons(s)
        if out:
            return out
        if takes_shared(s.layers, tuning):
            out.append(f"a hidden layer at least {tuning.wide_layer} wide whose activations fit a tiled block")
        if s.chain.widest > tuning.narrow_max_width:
            out.append(f"a layer {s.chain.widest} wide, over narrow_max_width {tuning.narrow_max_width}")
        return out


class Staged(Implementation):
    name, priority = "mlp-staged", 30
    summary = "FP32, weights streamed through shared memory in stages, 64 points per block"

    def reasons(self, s, tuning):
        out = _chain_reasons(s)
        if out:
            return out
        if len(s.layers) < 2:
            return ["no hidden layer"]
        if not takes_shared(s.layers, tuning):
            out.append(f"no hidden layer at least {tuning.wide_layer} wide within the tiled block's shared memory")
        if max([s.layers[0].k] + list(s.chain.hidden)) > STAGED_WIDTH:
            out.append(f"input or hidden layer over {STAGED_WIDTH} wide")
        if s.layers[-1].n > STAGED_MAX_OUT:
            out.append(f"{s.layers[-1].n} outputs, over {STAGED_MAX_OUT}")
        return out


class Tiled(Implementation):
    name, priority = "mlp-wide", 20
    summary = "FP32, activations in shared memory, 8x8 tiles per thread"

    def reasons(self, s, tuning):
        out = _chain_reasons(s)
        if out:
            return out
        if not is_wide(s.layers, tuning):
            return [f"no hidden layer at least wide_layer {tuning.wide_layer} wide"]
        if tiled_smem(s.layers, tuning) > tuning.tiled_smem_limit:
            return [f"{tiled_smem(s.layers, tuning)} bytes of shared memory, over tiled_smem_limit {tuning.tiled_smem_limit}"]
        return []


BATCHED = (Narrow(), Staged(), Tiled())


# -- the tensor-core kernels beside it ------------------------------------------------------------

#: The 3xTF32 register chain: widest layer (8 n8 tiles of accumulators per 16-row tile) and the
#: static shared memory its fragments and biases may take.
CHAIN_MAX_WIDTH, CHAIN_SMEM_LIMIT = 64, 48 * 1024
#: The wide 3xTF32 kernel: widest input or hidden layer, widest output (one n8 tile).
WIDE_MAX_WIDTH, WIDE_MAX_OUT = 512, 8
#: The FP64 DMMA chain: widest layer (M tiles x (KT + 2 NT) doubles within 255 registers).
DMMA_MAX_WIDTH = 128


def chain_bytes(layers, compact=False):
    """The 3xTF32 chain's packed fragments and biases in bytes (rosenna/emit/cuda/tc_chain.py's layout)."""
    return sum((16 if compact else 32) * 16 * _tiles(layer.k) * _tiles(layer.n) + 4 * 8 * _tiles(layer.n)
               for layer in layers)


class TensorChain(Implementation):
    name, priority = "tc-chain", 20
    summary = "3xTF32 tensor cores, a warp carries its points through every layer in registers (CUDA sm_80+)"

    def reasons(self, s, tuning):
        out = _chain_reasons(s)
        if out:
            return out
        if s.batched != "mlp-narrow":
            out.append(f"beside {s.batched or 'the point kernel'}, not mlp-narrow")
        if s.chain.widest > CHAIN_MAX_WIDTH:
            out.append(f"a layer {s.chain.widest} wide, over {CHAIN_MAX_WIDTH}")
        elif chain_bytes(s.layers) > CHAIN_SMEM_LIMIT:
            out.append(f"{chain_bytes(s.layers)} bytes of fragments, over {CHAIN_SMEM_LIMIT}")
        if s.chain.macs < tuning.chain_min_macs:
            out.append(f"{s.chain.macs} multiply-adds per point, under chain_min_macs {tuning.chain_min_macs}")
        return out


class TensorWide(Implementation):
    name, priority = "tc-wide", 10
    summary = "3xTF32 tensor cores, activations in shared memory, weights streamed by cp.async (CUDA sm_80+)"

    def reasons(self, s, tuning):
        out = _chain_reasons(s)
        if out:
            return out
        if len(s.layers) < 2:
            return ["no hidden layer"]
        if s.layers[-1].n > WIDE_MAX_OUT:
            out.append(f"{s.layers[-1].n} outputs, over {WIDE_MAX_OUT}")
        if max(s.chain.hidden) < tuning.wide_min_hidden:
            out.append(f"no hidden layer at least wide_min_hidden {tuning.wide_min_hidden} wide")
        if max([s.layers[0].k] + list(s.chain.hidden)) > WIDE_MAX_WIDTH:
            out.append(f"input or hidden layer over {WIDE_MAX_WIDTH} wide")
        if s.chain.macs < tuning.wide_min_macs:
            out.append(f"{s.chain.macs} multiply-adds per point, under wide_min_macs {tuning.wide_min_macs}")
        return out


class Dmma(Implementation):
    name, priority = "dmma", 10
    summary = "the float64 chain on the FP64 tensor cores, in registers (CUDA sm_80+)"

    def reasons(self, s, tuning):
        out = _chain_reasons(s, "double")
        if not out and s.chain.widest > DMMA_MAX_WIDTH:
            out.append(f"a layer {s.chain.widest} wide, over {DMMA_MAX_WIDTH}")
        return out


#: The 16-bit chain (bf16 / fp16 on mma.sync m16n8k16, float32 accumulators): widest layer (a
#: 16-row tile's accumulators, 4 floats per n8 tile, and its next A fragments in registers), the
#: width up to which a warp carries two 16-row tiles, and the dynamic shared memory its fragments
#: and biases may take (within the 227 KiB an sm_80/sm_90 block may have).
LOWP_MAX_WIDTH, LOWP_TWO_TILES_WIDTH, LOWP_SMEM_LIMIT = 128, 64, 160 * 1024


def _tiles16(n):
    return (n + 15) // 16


def lowp_bytes(layers):
    """The 16-bit chain's packed B fragments (8 bytes per lane per k16 x n8 tile) and float32
    biases in bytes (rosenna/emit/cuda/tc_lowp.py's layout)."""
    return sum(256 * _tiles16(layer.k) * _tiles(layer.n) + 4 * 8 * _tiles(layer.n) for layer in layers)


class TensorLow(Implementation):
    name, priority = "tc-lowp", 30
    summary = ("bf16/fp16 tensor cores with float32 accumulators (mma.sync m16n8k16), a warp carries its points "
               "through every layer in registers (CUDA sm_80+)")

    def reasons(self, s, tuning):
        low = getattr(s.plan, "low_precision", None)
        if not low:
            return ["the plan is not low precision (--precision bf16 or fp16)"]
        out = _chain_reasons(s, "single", low)
        if out:
            return out
        if s.chain.widest > LOWP_MAX_WIDTH:
            out.append(f"a layer {s.chain.widest} wide, over {LOWP_MAX_WIDTH}")
        elif lowp_bytes(s.layers) > LOWP_SMEM_LIMIT:
            out.append(f"{lowp_bytes(s.layers)} bytes of fragments, over {LOWP_SMEM_LIMIT}")
        return out


TENSOR = (TensorLow(), TensorChain(), TensorWide(), Dmma())


# -- the per-point routine and the offload body ---------------------------------------------------

#: The FP32 warp body of the routine and the offload body: input and hidden layers at most this
#: wide (a lane's 8 points x width / 16 columns in registers), at most WARP_OUT outputs.
WARP_WIDTH, WARP_OUT = 128, 8


def warp_fits(layers):
    """Whether the FP32 warp body serves the chain: a hidden layer, widths within WARP_WIDTH and WARP_OUT."""
    return (len(layers) >= 2 and layers[0].k <= WARP_WIDTH and all(layer.n <= WARP_WIDTH for layer in layers[:-1])
            and layers[-1].n <= WARP_OUT)


class RoutineDmma(Implementation):
    name, priority = "routine-dmma", 30
    summary = "the FP64 tensor-core chain's warp body when the whole warp calls (CUDA sm_80+)"

    def reasons(self, s, tuning):
        return [] if s.batched == "dmma" else ["the FP64 tensor-core chain is not compiled in"]


class RoutineMlp(Implementation):
    name, priority = "routine-mlp", 20
    summary = "FP32, layers unrolled in registers, and a warp body when all 32 lanes call"

    def reasons(self, s, tuning):
        out = _chain_reasons(s)
        if not out and s.chain.widest > tuning.routine_max_width:
            out.append(f"a layer {s.chain.widest} wide, over routine_max_width {tuning.routine_max_width}")
        return out


class RoutinePoint(Implementation):
    name, priority = "routine-point", 0
    summary = "the plan's loops, one point per thread"

    def reasons(self, s, tuning):
        return []


ROUTINE = (RoutineDmma(), RoutineMlp(), RoutinePoint())


def offload_warp(plan, chain):
    """Whether the offload body has the warp path: an FP32 chain (not ``--precision bf16`` / ``fp16``)
    with a layer wider than the tuning's ``offload_register_width`` that :func:`warp_fits`."""
    return (plan.precision == "single" and not getattr(plan, "low_precision", None)
            and chain.widest > plan.tuned.offload_register_width
            and warp_fits(chain.layers))


class OffloadMlp(Implementation):
    name, priority = "offload-mlp", 10
    summary = "the chain unrolled for clang's OpenMP device passes (a warp body on nvptx when it fits)"

    def reasons(self, s, tuning):
        out = _chain_reasons(s, s.plan.precision)
        if not out and s.chain.widest > tuning.routine_max_width:
            out.append(f"a layer {s.chain.widest} wide, over routine_max_width {tuning.routine_max_width}")
        return out


class OffloadLoops(Implementation):
    name, priority = "offload-loops", 0
    summary = "the plan's loops"

    def reasons(self, s, tuning):
        return []


OFFLOAD = (OffloadMlp(), OffloadLoops())
