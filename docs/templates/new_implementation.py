"""Starter for a new way of running a part of a model: copy the pieces into their homes, rename
``MyKernel`` / ``my-kernel``, and fill the marked parts. tests/test_architecture.py loads this file
and runs its implementation on a plan, so it stays in step with the interfaces it shows.

1. rosenna/strategy/<way>/__init__.py (``mlp`` for an MLP chain, ``field`` for the whole field,
   ``point`` per point): the implementation, in the table its emitter is asked from, with a
   priority (higher wins among those that fit). ``reasons`` must answer for ANY plan with a list
   of short reasons (empty: it fits), never an exception: tests/test_strategy_sweep.py runs it
   over generated MLP, conv and RNN shapes. Thresholds it compares against are fields of
   rosenna/strategy/tuning.py's ``Tuning`` (documented with where their default was measured),
   never module constants.
2. rosenna/emit/cuda/<module>.py: the renderer, a ``Kind`` subclass with ``layout`` / ``kernel`` /
   ``launch`` (see rosenna/emit/cuda/base.py), mapped by the same name in
   rosenna/emit/cuda/kinds.py's ``BATCH_KINDS`` or ``TENSOR_KINDS``. It reads
   ``choice.strategy`` (the frozen result: layers, decisions, tuning) and never the strategy's
   tables; fixed device code goes in rosenna/data/<file>.cuh, compiled on its own by the tests.
3. tests: the choice for a model that should take it (and one that should not, with the reason),
   the emitted text, a compile (nvcc -ptx / hipcc) and, where it can be emulated, its numbers.
"""

from rosenna.strategy.table import Implementation


# -- 1. in rosenna/strategy/mlp/__init__.py, then add MyKernel() to BATCHED (or TENSOR) ------------

class MyKernel(Implementation):
    name, priority = "my-kernel", 35  # between mlp-narrow (40) and mlp-staged (30)
    summary = "FP32, what it does in one line (for `rosenna info`)"

    def reasons(self, s, tuning):
        """``s``: a :class:`rosenna.strategy.table.Subject` (``plan``, ``chain``, ``path``,
        ``batched``); ``tuning``: a :class:`rosenna.strategy.tuning.Tuning`."""
        if s.path == "whole":
            return ["the plan runs over the whole field"]
        if not s.chain:
            return [s.chain.reason]  # the analysis says why the plan is no MLP chain
        out = []
        if s.plan.precision != "single":
            out.append(f"{s.plan.precision} precision, not single")
        if s.chain.widest > tuning.narrow_max_width:  # FILL: the knob your kernel's limit is
            out.append(f"a layer {s.chain.widest} wide, over narrow_max_width {tuning.narrow_max_width}")
        return out


# -- 2. in rosenna/emit/cuda/my_kernel.py, then BATCH_KINDS["my-kernel"] = my_kernel.KIND ----------

def renderer():
    """The emitter's side (imports kept inside so that this starter loads without a CUDA build)."""
    from rosenna.emit.cuda.base import Kind
    from rosenna.emit.cuda.mlp import PackedLayout

    class MyKernelKind(Kind):
        label = "my-kernel"

        def layout(self, choice):
            return PackedLayout.dense(choice.layers, 4, 4)  # FILL: the copy of the weights it reads

        def kernel(self, plan, choice, acts):
            return f"/* FILL: __global__ void {plan.name}_batch_kernel(...) */"

        def launch(self, plan, choice):
            return "", f"    /* FILL: {plan.name}_batch_kernel<<<...>>>(n, x, y); */"

    return MyKernelKind()
