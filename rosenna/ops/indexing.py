"""Gather, Concat and Slice: here they fold constant shape arithmetic (Shape->Gather->Concat ...).

Run-time lowerings come with the operators issue.
"""

import numpy as np

from rosenna.ops.base import Op, onnx_ints


class Gather(Op):
    name = "Gather"
    attributes = {"axis": 0}

    def evaluate(self, node, inputs):
        return [np.take(inputs[0], inputs[1], axis=self.attr(node, "axis"))]


class Concat(Op):
    name = "Concat"
    attributes = {"axis": 0}

    def shape(self, node, graph):
        shapes = [graph.shape_of(n) for n in node.inputs if n]
        axis = self.attr(node, "axis") % len(shapes[0])
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return [tuple(out)]

    def evaluate(self, node, inputs):
        return [np.concatenate([i for i in inputs if i is not None], axis=self.attr(node, "axis"))]


class Slice(Op):
    name = "Slice"
    attributes = {"starts": None, "ends": None, "axes": None}

    def evaluate(self, node, inputs):
        data = inputs[0]
        if len(inputs) > 1:  # opset 10 on: starts, ends, axes, steps as inputs
            starts, ends = onnx_ints(inputs[1]), onnx_ints(inputs[2])
            axes = onnx_ints(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else list(range(len(starts)))
            steps = onnx_ints(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else [1] * len(starts)
        else:
            starts, ends = onnx_ints(self.attr(node, "starts")), onnx_ints(self.attr(node, "ends"))
            axes = self.attr(node, "axes")
            axes = onnx_ints(axes) if axes is not None else list(range(len(starts)))
            steps = [1] * len(starts)
        index = [slice(None)] * data.ndim
        for start, end, axis, step in zip(starts, ends, axes, steps):
            index[axis] = slice(start, end, step)
        return [data[tuple(index)]]
