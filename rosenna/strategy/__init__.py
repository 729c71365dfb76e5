"""The strategy stage, between plan and emit: how each part of a model runs on the target, decided
once, recorded with why, and rendered by the emitters.

Owns: the analyses of the frozen plan (the MLP layer list, :mod:`rosenna.strategy.mlp.analysis`),
the ordered tables of named implementations with priorities (one subpackage per way of running a
model: :mod:`~rosenna.strategy.point`, :mod:`~rosenna.strategy.mlp`, :mod:`~rosenna.strategy.field`),
the whole-field schedule and fusion (:mod:`rosenna.strategy.field`), the
:class:`~rosenna.strategy.tuning.Tuning` their thresholds come from, and the frozen result,
:class:`Strategy`. Every ``fits`` answers for any plan (reasons, never an exception).

The emitters read a :class:`Strategy` and nothing else of this package's internals: they render
the winner of each part by its name and never write to the plan.
"""

import dataclasses
from dataclasses import dataclass

from rosenna.strategy import field, mlp, point
from rosenna.strategy.mlp.analysis import Chain, Layer, analyse  # noqa: F401 (the result's types)
from rosenna.strategy.field import Field, HostRegion, HostRegions  # noqa: F401 (the result's types)
from rosenna.strategy.field.convs import GemmConv, TiledConv  # noqa: F401
from rosenna.strategy.field.fusion import Schedule  # noqa: F401
from rosenna.strategy.table import Decision, Rejected, Subject, select  # noqa: F401
from rosenna.strategy.tuning import MEASURED, Tuning, TuningError  # noqa: F401


@dataclass(frozen=True)
class Strategy:
    """What the emitters render: ``plan`` (the frozen plan, its copy for the target: the host
    vector width and the tuning the emitters read),
    ``tuning``, ``chain`` (the MLP analysis; empty when the plan is no chain) and one
    :class:`Decision` per part."""
    plan: object
    tuning: Tuning
    chain: Chain
    batched: Decision  # the CUDA/HIP batched kernel
    tensor: Decision  # the tensor-core kernel beside it ("" chosen: none)
    routine: Decision  # the CUDA/HIP per-point routine's body
    offload: Decision  # the OpenMP offload device body of <name>_infer
    memory: Decision  # where the kernel file keeps embedded weights
    host: Decision  # the host batch's blocks and vectors
    field: object = None  # the whole-field kernels (a field.Field; None: the plan emits no <name>_infer_one)
    #: The statements of the host batch's block: the plan's, with each pointwise chain after a
    #: Gemm, MatMul or Conv folded into its store (rosenna.strategy.point.epilogue; () on the
    #: whole-field path, which has no host batch block)
    host_body: tuple = ()
    #: The host form of ``<name>_infer_one``: its regions, transformed for the host's threads and
    #: SIMD lanes (rosenna.strategy.field.host; None: the plan emits no <name>_infer_one)
    host_regions: object = None

    @property
    def parts(self):
        return (self.batched, self.tensor, self.routine, self.offload, self.memory, self.host)

    @property
    def layers(self):
        """The MLP layers (a tuple; empty when the plan is no chain)."""
        return self.chain.layers

    def lines(self):
        """`rosenna info`'s strategy section."""
        out = [f"strategy ({self.tuning.describe()}):"]
        if not self.chain:
            out.append(f"  MLP chain: no ({self.chain.reason})")
        else:
            widths = " -> ".join([str(self.layers[0].k)] + [str(layer.n) for layer in self.layers])
            acts = ", ".join(layer.act or "linear" for layer in self.layers)
            count = f"{len(self.layers)} layer{'s' if len(self.layers) > 1 else ''}"
            low = f"; inputs and weights of every layer in {self.chain.low_precision}" if self.chain.low_precision else ""
            out.append(f"  MLP chain: {count}, {widths} ({acts}){low}")
        for decision in self.parts:
            out += ["  " + line for line in decision.lines()]
        if self.field is not None:
            out += ["  " + line for line in self.field.lines()]
        if self.host_regions is not None:
            out += ["  " + line for line in self.host_regions.lines()]
        return out


def decide(plan, tuning=None, vector=32):
    """The :class:`Strategy` for ``plan`` under ``tuning`` (default: :class:`Tuning`'s defaults);
    ``vector``: bytes of the host CPU's vectors (:func:`rosenna.strategy.point.vector_bytes`)."""
    tuning = tuning or plan.tuning or Tuning()
    if plan.host_vector != vector or plan.tuning is not tuning:
        plan = dataclasses.replace(plan, host_vector=vector, tuning=tuning)
    chain = analyse(plan)
    subject = Subject(plan, chain, plan.path)
    batched = select("cuda batched kernel", field.BATCHED + mlp.BATCHED + point.BATCHED, subject, tuning)
    beside = Subject(plan, chain, plan.path, batched.chosen)
    tensor = select("cuda tensor-core kernel", mlp.TENSOR, beside, tuning)
    routine = select("cuda per-point routine", mlp.ROUTINE, Subject(plan, chain, plan.path, tensor.chosen), tuning)
    offload = select("offload device body", mlp.OFFLOAD, subject, tuning,
                     values=(("warp", mlp.offload_warp(plan, chain)),) if chain else ())
    body, fused = point.epilogue.fuse(plan) if plan.path == "point" else ((), ())
    return Strategy(plan, tuning, chain, batched, tensor, routine, offload, field.memory(plan, tuning),
                    point.host(plan, tuning, vector, fused, chain.layers), field.decide(plan, tuning), body,
                    field.host.regions(plan) if plan.emits_infer_one else None)


def of(subject, tuning=None):
    """``subject`` when it is a :class:`Strategy`, else :func:`decide` for it (a plan) with ``tuning``:
    for callers that render a plan with the default tuning."""
    return subject if isinstance(subject, Strategy) else decide(subject, tuning, getattr(subject, "host_vector", 32))
