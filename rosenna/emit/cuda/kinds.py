"""The batched kernels' renderers, by the name of the implementation the strategy chose.

A kind (:class:`rosenna.emit.cuda.base.Kind`) renders one batched kernel: :meth:`~Kind.layout` (its packed copy of the weights: numpy packing for embedded
weights, C++ packing for ``<name>_device_upload`` when they are file-loaded), its fixed device
code (a file under ``rosenna/data/``), :meth:`~Kind.kernel` and :meth:`~Kind.launch`.

Which kind a plan gets is the strategy stage's choice (rosenna.strategy: the tables of named
implementations, their ``fits`` and priorities); :data:`BATCH_KINDS` and :data:`TENSOR_KINDS` map
the chosen names to their renderers. A tensor-core kind is compiled in beside the batched kernel
under its preprocessor guard (CUDA sm_80+ picks it at run time, everything else keeps the FP32
kernel). The measurements behind the priorities are in results/measurement-log.md.

To add a kernel: add its implementation (``fits`` and priority) to a table of rosenna/strategy/,
write a module here with a ``KIND`` (an instance of a :class:`~rosenna.emit.cuda.base.Kind`
subclass) and map its name below; put its fixed device code in ``rosenna/data/``
(docs/architecture.md has a starter file).
"""

from rosenna.emit.cuda import dmma, narrow, point, staged, tc_chain, tc_lowp, tc_wide, tiled, whole_field
from rosenna.emit.cuda.base import Kind  # noqa: F401 (the interface, documented here)
from rosenna.strategy import Tuning, of as strategy_of


class Choice:
    """The strategy's choice of batched kernel and tensor-core kernel, with the renderers and the
    packed weight layouts they read (``strategy``: a :class:`rosenna.strategy.Strategy`)."""

    def __init__(self, strategy):
        plan = strategy.plan
        self.strategy = strategy
        self.plan = plan
        #: The FP32 MLP layers the kernels and routines take (empty for a float64 chain: the FP64
        #: tensor-core chain reads :attr:`chain`).
        self.layers = strategy.layers if plan.precision == "single" else ()
        self.chain = strategy.layers
        self.weight_bytes = strategy.memory.value("weight_bytes")
        self.constant_limit = strategy.memory.value("constant_limit")
        self.constant = strategy.memory.chosen == "constant"
        self.base = BATCH_KINDS[strategy.batched.chosen]
        self.layout = self.base.layout(self)
        self.tensor = TENSOR_KINDS.get(strategy.tensor.chosen)
        self.tensor_layout = self.tensor.layout(self) if self.tensor else None
        #: The per-point routine's body: "routine-mlp", "routine-dmma" or "routine-point".
        self.routine = strategy.routine.chosen

    @property
    def kind(self):
        return self.base.label

    @property
    def offsets(self):
        return self.layout.offsets if self.layout else []

    @property
    def packed_size(self):
        return self.layout.size if self.layout else 0

    def packed(self):
        return self.layout.packed()

    @property
    def staged(self):
        return self.base is staged.KIND

    @property
    def tensor_chain(self):
        return self.tensor is tc_chain.KIND

    @property
    def tensor_wide(self):
        return self.tensor is tc_wide.KIND


def choose(strategy, constant_limit=None):
    """The :class:`Choice` the strategy made (a plan: the default tuning's, ``constant_limit``
    replacing that knob)."""
    tuning = None if constant_limit is None else Tuning().replace(constant_limit=constant_limit)
    return Choice(strategy_of(strategy, tuning))


#: The batched kernels by the strategy's implementation names (rosenna.strategy: field.BATCHED,
#: mlp.BATCHED, point.BATCHED).
BATCH_KINDS = {"whole-field": whole_field.KIND, "mlp-narrow": narrow.KIND, "mlp-staged": staged.KIND,
               "mlp-wide": tiled.KIND, "point": point.KIND}
#: Compiled in beside the batched kernel, under their guard (rosenna.strategy.mlp.TENSOR).
TENSOR_KINDS = {"tc-lowp": tc_lowp.KIND, "tc-chain": tc_chain.KIND, "tc-wide": tc_wide.KIND, "dmma": dmma.KIND}
