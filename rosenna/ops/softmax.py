"""Softmax and LogSoftmax along one axis, with both ONNX definitions of the axis.

    Softmax:    Y[.., j, ..] = exp(X[.., j, ..] - m) / sum_k exp(X[.., k, ..] - m),  m = max_k X[.., k, ..]
    LogSoftmax: Y[.., j, ..] = X[.., j, ..] - m - log(sum_k exp(X[.., k, ..] - m))

Opset >= 13: the reduction runs along ``axis`` (default -1). Opset < 13: the input is viewed as
2-D, ``[prod(shape[:axis]), prod(shape[axis:])]`` (default axis 1), and the reduction runs over
the whole second dimension, which is what older exporters rely on. One loop nest over the rows;
each row takes its maximum, writes the exponentials and their sum, then scales them.

Deviation: none beyond rounding (the sum runs in the generated precision, left to right).
"""

import numpy as np

from rosenna.loopir import Bin, Fn, Idx, Num, Ref, Select, Var
from rosenna.ops.base import Op


def _rows(shape, axis, opset):
    """``(outer, n, inner)``: the reduction has n elements at stride inner, rows outer x inner."""
    rank = len(shape)
    axis = axis + rank if axis < 0 else axis
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    if opset < 13:
        return outer, int(np.prod(shape[axis:], dtype=np.int64)), 1
    return outer, int(shape[axis]), int(np.prod(shape[axis + 1:], dtype=np.int64))


class Softmax(Op):
    name = "Softmax"
    log = False

    def _axis(self, node, graph):
        return node.attrs.get("axis", -1 if graph.opset >= 13 else 1)

    def evaluate(self, node, inputs):
        return None  # onnxruntime folds the rare constant Softmax

    def check(self, node, graph):
        rank = len(graph.shape_of(node.inputs[0]))
        axis = self._axis(node, graph)
        if not -max(rank, 1) <= axis < max(rank, 1):
            return [f"axis {axis} is outside the rank {rank}"]
        return []

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        outer, n, inner = _rows(shape, self._axis(node, graph), graph.opset)
        src, dst = node.inputs[0], node.outputs[0]
        top, total = Var("vmax"), Var("vsum")

        def row(idx):
            o, q = idx
            start = Idx.of(o) * (n * inner) + q

            def at(k):
                return start + Idx.of(k) * inner

            b.assign(top, Ref(src, start))
            b.loop(n, lambda k: b.assign(top, Select(Ref(src, at(k)), top, Ref(src, at(k)), top)))
            b.assign(total, Num(0.0))
            if self.log:
                b.loop(n, lambda k: b.assign(total, Fn("exp", (Bin("-", Ref(src, at(k)), top),)), accumulate=True))
                b.assign(total, Bin("+", top, Fn("log", (total,))))
                b.loop(n, lambda k: b.assign(Ref(dst, at(k)), Bin("-", Ref(src, at(k)), total)))
                return

            def expo(k):
                b.assign(Ref(dst, at(k)), Fn("exp", (Bin("-", Ref(src, at(k)), top),)))
                b.assign(total, Ref(dst, at(k)), accumulate=True)

            b.loop(n, expo)
            b.loop(n, lambda k: b.assign(Ref(dst, at(k)), Bin("/", Ref(dst, at(k)), total)))

        b.nest((outer, inner), row)


class LogSoftmax(Softmax):
    name = "LogSoftmax"
    log = True
