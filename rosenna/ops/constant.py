"""Ops that produce constants, and the shape arithmetic dynamic-shape exporters emit.

None of these but Expand has a lowering: constant folding computes them at generation time
(shapes are static), or the model is refused. Constant, Shape, Size, ConstantOfShape, Range;
Expand of a run-time value to a constant shape is a broadcasting copy.
"""

import numpy as np

from rosenna.ops.base import Op, onnx_ints


class Constant(Op):
    name = "Constant"
    attributes = {"value": None, "value_float": None, "value_floats": None, "value_int": None,
                  "value_ints": None}

    def shape(self, node, graph):
        return [self.evaluate(node, [])[0].shape]

    def evaluate(self, node, inputs):
        attrs = node.attrs
        if attrs.get("value") is not None:
            return [np.asarray(attrs["value"])]
        if attrs.get("value_float") is not None:
            return [np.asarray(attrs["value_float"], np.float32)]
        if attrs.get("value_floats") is not None:
            return [np.asarray(attrs["value_floats"], np.float32)]
        if attrs.get("value_int") is not None:
            return [np.asarray(attrs["value_int"], np.int64)]
        if attrs.get("value_ints") is not None:
            return [np.asarray(attrs["value_ints"], np.int64)]
        return None


class Shape(Op):
    """Folded from the static shape of its input (``start``/``end`` from opset 15)."""
    name = "Shape"
    attributes = {"start": 0, "end": None}

    def from_shape(self, node, shape):
        start, end = self.attr(node, "start"), self.attr(node, "end")
        return np.asarray(shape[start:end], dtype=np.int64)

    def shape(self, node, graph):
        return [self.from_shape(node, graph.shape_of(node.inputs[0])).shape]

    def evaluate(self, node, inputs):
        return [self.from_shape(node, inputs[0].shape)]


class Size(Op):
    name = "Size"

    def from_shape(self, node, shape):
        return np.asarray(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)

    def shape(self, node, graph):
        return [()]

    def evaluate(self, node, inputs):
        return [self.from_shape(node, inputs[0].shape)]


class ConstantOfShape(Op):
    name = "ConstantOfShape"
    attributes = {"value": None}

    def evaluate(self, node, inputs):
        value = self.attr(node, "value")
        fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
        return [np.full(onnx_ints(inputs[0]), fill[0], dtype=fill.dtype)]

    def shape(self, node, graph):  # known before the fill: folding checks its budget first
        return [tuple(onnx_ints(graph.weights[node.inputs[0]]))]


class Range(Op):
    name = "Range"

    def evaluate(self, node, inputs):
        start, limit, delta = (np.asarray(v).reshape(()) for v in inputs)
        return [np.arange(start, limit, delta, dtype=start.dtype)]

    def shape(self, node, graph):  # known before the arange: folding checks its budget first
        start, limit, delta = (float(np.asarray(graph.weights[n]).reshape(())) for n in node.inputs)
        return [(max(int(np.ceil((limit - start) / delta)), 0) if delta else 0,)]


class Expand(Op):
    """Broadcast to a constant shape: folded when the input is constant, else a copy
    ``Y[i] = X[bcast(i)]`` (what dynamic-shape exports leave after their shape chains fold)."""
    name = "Expand"

    def evaluate(self, node, inputs):
        shape = np.broadcast_shapes(inputs[0].shape, tuple(onnx_ints(inputs[1])))
        return [np.broadcast_to(inputs[0], shape).copy()]

    def shape(self, node, graph):
        return [tuple(np.broadcast_shapes(graph.shape_of(node.inputs[0]), tuple(onnx_ints(graph.weights[node.inputs[1]]))))]

    def check(self, node, graph):
        return [] if graph.is_const(node.inputs[1]) else ["the target shape is computed at run time"]

    def is_alias(self, node, graph):
        """An Expand that changes nothing (same shape) is a relabel."""
        return graph.is_const(node.inputs[1]) and self.shape(node, graph)[0] == tuple(graph.shape_of(node.inputs[0]))

    def lower(self, node, graph, b):
        from rosenna.loopir import Ref, broadcast_index, flat_index

        out_shape = self.shape(node, graph)[0]
        b.nest(out_shape, lambda idx: b.assign(Ref(node.outputs[0], flat_index(idx, out_shape)), Ref(
            node.inputs[0], broadcast_index(idx, out_shape, graph.shape_of(node.inputs[0])))))
