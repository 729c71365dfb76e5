"""Opt-in low precision (``--precision bf16`` / ``fp16``): the rounding every path computes.

The dense layers (Gemm nodes after the passes: a MatMul + Add is one by then) take their weights,
biases and input activations in the chosen 16-bit type and sum their products in float32, as the
GPU's tensor cores do (``mma.sync`` with float32 accumulators, rosenna/emit/cuda/tc_lowp.py). The
step below makes that the model's own arithmetic, for every path at once:

- each Gemm's W and bias are rounded to the type, to nearest, ties to even, here at generation
  time (the embedded literals, the weights file and the GPU's packed copy all hold the rounded
  values, still float32);
- each Gemm's input that is computed at run time (the graph input, a hidden activation after its
  activation function and any pointwise epilogue) is rounded by a ``Cast`` to the type, inserted
  in front of the Gemm: the host C and Fortran code round it with the Cast lowering
  (rosenna.ops.layout), the GPU kernel as it packs its A fragments (``cvt.rn``);
- every other op, the activation functions, the bias add and the outputs stay float32. The API's
  inputs and outputs keep the model's type.

So the host and the GPU compute the same roundings of the same values; they can differ by the
order of float32 sums and the last bits of an activation function, which a 16-bit rounding may
turn into one unit of its last place (docs/low-precision.md has the tolerance).
"""

import numpy as np
from onnx import TensorProto, helper

from rosenna import ir
from rosenna.errors import UsageError

#: ``--precision`` name -> (ONNX element type, numpy dtype name of the format, what the docs call it).
FORMATS = {
    "bf16": (TensorProto.BFLOAT16, "bfloat16"),
    "fp16": (TensorProto.FLOAT16, "float16"),
}
#: The ``sources`` of the Cast nodes this step inserts (defined with the IR: the strategy reads it).
ROUNDING = ir.LOW_PRECISION_ROUNDING
def round_to(values, precision):
    """``values`` (float32) rounded to ``precision`` ("bf16" or "fp16"), to nearest, ties to even,
    returned as float32. NaN stays NaN; past the format's largest value is +-inf."""
    v = np.ascontiguousarray(values, np.float32)
    if precision == "fp16":
        with np.errstate(over="ignore"):
            return v.astype(np.float16).astype(np.float32)
    bits = v.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(v), v, rounded).astype(np.float32)


def apply(graph, precision):
    """Round ``graph`` (after the passes, in place) to ``precision``; see the module docstring.

    Raises:
        UsageError: the model is not float32, or has no Gemm layer for the type to apply to.
    """
    if precision not in FORMATS:
        raise UsageError(f"--precision {precision!r}: choose single, double, bf16 or fp16")
    if np.dtype(graph.dtype) != np.float32:
        raise UsageError(f"--precision {precision}: the model is {np.dtype(graph.dtype)}; bf16 and fp16 take a "
                         "float32 model (its inputs and outputs stay float32)")
    gemms = [node for node in graph.nodes if node.op == "Gemm"]
    if not gemms:
        raise UsageError(f"--precision {precision}: the model has no dense layer (Gemm, or MatMul + Add) for the "
                         "16-bit type to apply to; generate it in single precision")
    onnx_type = FORMATS[precision][0]
    done, rounded_value = set(), {}
    for node in gemms:
        for name in node.inputs[1:3]:
            if name and name in graph.weights and name not in done:
                graph.weights[name] = round_to(graph.weights[name], precision).reshape(graph.weights[name].shape)
                done.add(name)
    for node in gemms:
        source = node.inputs[0]
        if source in graph.weights:
            if source not in done:
                graph.weights[source] = round_to(graph.weights[source], precision).reshape(graph.weights[source].shape)
                done.add(source)
            continue
        if source not in rounded_value:
            out = graph.new_name(f"{source}_{precision}")
            graph.values[out] = ir.Value(out, graph.shape_of(source), np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type)))
            cast = ir.Node("Cast", ROUNDING, [source], [out], {"to": onnx_type}, sources=(ROUNDING,))
            graph.nodes.insert(graph.nodes.index(node), cast)
            rounded_value[source] = out
        node.inputs[0] = rounded_value[source]
    ir.verify(graph, where="low_precision", require_shapes=True)
    return graph
