"""Split a Resize over several axes into one Resize per axis.

Resize's interpolation is separable: ONNX defines the weight of a tap as the product of one weight
per axis, each axis's taps and weights depending only on that axis (``exclude_outside`` renormalises
per axis too). Resizing axis after axis through intermediate values gives the same output, up to
rounding in the order of the sums.

Why: :mod:`rosenna.ops.resize` lowers a Resize to one loop nest per combination of the runs of
its axes (the product of the runs per axis). A scale that does not repeat within a short period
gives a run per few outputs, and the product over two axes grows with the pixels: a 2-conv net
resizing 10 -> 17 -> 24 bilinearly generated 729 KB of C in 1,968 loop nests (gcc -O3 took minutes).
One axis at a time, the nests are the sum of the runs, not their product (the same net: see
tests/test_hostile_budgets.py).

Not split: a Resize of at most :data:`SPLIT_ABOVE` nests whole, Resize of opset 10 and Upsample (one node covers them), ``tf_crop_and_resize`` (an
output outside the crop is the extrapolation value, which is not a per-axis product),
``tf_half_pixel_for_nn`` (a scale of 1 is not the identity there), a ``keep_aspect_ratio_policy``
other than stretch, antialias, and a Resize whose scales or sizes are not constant (refused later
with a reason).
"""

import math

import numpy as np

from rosenna.ir import Node, Value

#: Loop nests a Resize may take whole; above, it is split. A simple scale (x2 nearest: 4 nests)
#: stays one op, so the whole-field schedules that fuse it with its neighbours keep it.
SPLIT_ABOVE = 64


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def split_resize(graph):
    from rosenna import ops

    op = ops.get("Resize")
    if graph.opset < 11:
        return
    nodes = []
    for node in graph.nodes:
        nodes.extend(_split(graph, node, op) if node.op == "Resize" and node.domain in ("", "ai.onnx") else [node])
    graph.nodes = nodes


def _split(graph, node, op):
    """The per-axis Resizes that replace ``node``, or ``[node]`` when it stays whole."""
    if _text(op.attr(node, "coordinate_transformation_mode")) in ("tf_crop_and_resize", "tf_half_pixel_for_nn") \
            or _text(op.attr(node, "keep_aspect_ratio_policy")) != "stretch" or op.attr(node, "antialias"):
        return [node]
    shape = graph.shape_of(node.inputs[0])
    try:
        geometry = op._geometry(node, graph)
    except Exception:  # refused with its reason by the op's check
        return [node]
    if shape is None or geometry is None:
        return [node]
    scales, out, _ = geometry
    by_scales = len(node.inputs) > 2 and bool(node.inputs[2]) and graph.weights.get(node.inputs[2]) is not None \
        and np.asarray(graph.weights[node.inputs[2]]).size > 0
    changed = [a for a in range(len(shape)) if out[a] != shape[a] or scales[a] != 1.0]
    if len(changed) < 2 or math.prod(len(runs) for runs in op._runs(node, graph)) <= SPLIT_ABOVE:
        return [node]
    dtype = graph.values[node.outputs[0]].dtype if node.outputs[0] in graph.values else None
    attrs = {k: v for k, v in node.attrs.items() if k != "axes"}
    current, current_shape, split = node.inputs[0], list(shape), []
    for k, axis in enumerate(changed):
        if by_scales:
            factors = np.ones(len(shape), np.float32)
            factors[axis] = scales[axis]
            if float(factors[axis]) != scales[axis]:  # not exact in float32: keep the node whole
                return [node]
            param = graph.new_name(f"{node.outputs[0]}_scales{axis}")
            graph.weights[param] = factors
            inputs = [current, "", param]
        else:
            sizes = np.array(current_shape, np.int64)
            sizes[axis] = out[axis]
            param = graph.new_name(f"{node.outputs[0]}_sizes{axis}")
            graph.weights[param] = sizes
            inputs = [current, "", "", param]
        current_shape[axis] = out[axis]
        last = k == len(changed) - 1
        target = node.outputs[0] if last else graph.new_name(f"{node.outputs[0]}_axis{axis}")
        if not last:
            graph.values[target] = Value(target, tuple(current_shape), dtype)
        split.append(Node("Resize", f"{node.name}/axis{axis}", inputs, [target], dict(attrs), node.domain))
        current = target
    return split
