"""The whole field: a plan whose per-point scratch is too large for a thread runs one sample at a
time, one parallel loop per op (``<name>_infer_one``), and ``<name>_infer_batch`` over samples.

Owns the choice of that path for the batched CUDA/HIP kernel (:data:`BATCHED`) and where a
whole-field kernel file keeps its embedded weights (:func:`memory`). The schedule of the
whole-field kernels (phases, fusion, clusters, tiled and implicit-GEMM convs) is built by
rosenna/emit/cuda/field_fuse.py from the plan and the tuning this stage passes on.
"""

from rosenna.strategy.table import Decision, Implementation


class WholeField(Implementation):
    name, priority = "whole-field", 100
    summary = "one sample at a time, one parallel launch (or phase) per op"

    def reasons(self, s, tuning):
        if s.path != "whole":
            return [f"per-point scratch of {s.plan.scratch_bytes} bytes within whole_threshold {tuning.whole_threshold}"
                    if s.plan.has_infer_one else "an LSTM or GRU keeps the plan per point"]
        return []


BATCHED = (WholeField(),)


def memory(plan, tuning):
    """Where the CUDA/HIP kernel file keeps embedded weights: ``__constant__`` up to the limit
    (a whole-field plan's: ``whole_constant_limit`` at least, a warp reads one weight at a time)."""
    limit = tuning.constant_limit
    if plan.path == "whole":
        limit = max(limit, tuning.whole_constant_limit)
    nbytes = plan.parameters * plan.itemsize
    constant = bool(plan.embed and nbytes <= limit)
    if not plan.embed:
        why = "file-loaded weights live in __device__ storage"
    else:
        why = f"{nbytes} bytes of weights, {'at or under' if constant else 'over'} the {limit}-byte limit"
    return Decision("cuda weights", "constant" if constant else "global", why=why,
                    values=(("constant_limit", limit), ("weight_bytes", nbytes)))
