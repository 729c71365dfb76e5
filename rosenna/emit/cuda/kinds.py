"""The batched kernels as one ordered table: which kernel a plan gets is the first kind that fits.

A kind (:class:`rosenna.emit.cuda.base.Kind`) is everything one batched kernel needs: :meth:`~Kind.fits` (does this
plan take it), :meth:`~Kind.layout` (its packed copy of the weights: numpy packing for embedded
weights, C++ packing for ``<name>_device_upload`` when they are file-loaded), its fixed device
code (a file under ``rosenna/data/``), :meth:`~Kind.kernel` and :meth:`~Kind.launch`.

:data:`BATCH_KINDS` is tried in order and the first that fits is the plan's kernel; then
:data:`TENSOR_KINDS` is tried, and a tensor-core kind that fits is compiled in beside it under
its preprocessor guard (CUDA sm_80+ picks it at run time, everything else keeps the FP32 kernel).
The measurements behind the order are in results/measurement-log.md.

To add a kernel: write a module with a ``KIND`` (an instance of a :class:`~rosenna.emit.cuda.base.Kind` subclass), put its
fixed device code in ``rosenna/data/``, and insert it in the table where its ``fits`` should be
asked.
"""

from rosenna.emit.cuda import dmma, narrow, point, staged, tc_chain, tc_wide, tiled, whole_field
from rosenna.emit.cuda.base import Kind  # noqa: F401 (the interface, documented here)
from rosenna import limits
from rosenna.emit.cuda.mlp import mlp_layers


class Choice:
    """Which batched kernel a plan gets, with the packed weight layout it reads."""

    def __init__(self, plan, constant_limit):
        self.plan = plan
        self.layers = mlp_layers(plan)
        self.weight_bytes = plan.parameters * plan.itemsize
        if plan.path == "whole":  # a warp reads one weight at a time: __constant__ pays further
            constant_limit = max(constant_limit, limits.CUDA_WHOLE_CONSTANT_LIMIT)
        self.constant_limit = constant_limit
        self.constant = plan.embed and self.weight_bytes <= constant_limit
        self.base = next(kind for kind in BATCH_KINDS if kind.fits(self))
        self.layout = self.base.layout(self)
        self.tensor = next((kind for kind in TENSOR_KINDS if kind.fits(self)), None)
        self.tensor_layout = self.tensor.layout(self) if self.tensor else None

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


def choose(plan, constant_limit):
    """The :class:`Choice` for ``plan``."""
    return Choice(plan, constant_limit)


#: Tried in order; the last always fits.
BATCH_KINDS = (whole_field.KIND, narrow.KIND, staged.KIND, tiled.KIND, point.KIND)
#: Compiled in beside the batched kernel, under their guard, when they fit.
TENSOR_KINDS = (tc_chain.KIND, tc_wide.KIND, dmma.KIND)
