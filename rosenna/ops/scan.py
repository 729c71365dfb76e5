"""CumSum and CumProd: running sums and products along one axis (column integrals over model
levels, cumulative fractions).

    inclusive:  Y[..., k, ...] = X[..., 0, ...] (op) ... (op) X[..., k, ...]
    exclusive:  Y[..., k, ...] = X[..., 0, ...] (op) ... (op) X[..., k-1, ...]   (Y[..., 0, ...] = 0 or 1)
    reverse:    the same from the last element backwards

``axis`` is the op's second input and must be a constant (any integer type, negative counts from
the end). The running value is a local of the working float type, accumulated in order, so the
result is the sequential sum (product) in the generated precision; numpy's cumsum sums in the same
order. Refused: an axis computed at run time.
"""

import numpy as np

from rosenna.loopir import Bin, Idx, Num, Ref, Var, flat_index
from rosenna.ops.base import Op, const_input


class _Cumulative(Op):
    attributes = {"exclusive": 0, "reverse": 0}
    symbol = "+"
    identity = 0.0
    numpy_fn = staticmethod(np.cumsum)

    def _axis(self, node, axis_value, rank):
        return int(np.asarray(axis_value).reshape(-1)[0]) % rank

    def check(self, node, graph):
        if const_input(graph, node, 1) is None:
            return ["the axis is computed at run time; rosenna needs it constant"]
        return []

    def evaluate(self, node, inputs):
        x = inputs[0]
        axis = self._axis(node, inputs[1], x.ndim)
        if self.attr(node, "reverse"):
            x = np.flip(x, axis)
        y = self.numpy_fn(x, axis=axis)
        if self.attr(node, "exclusive"):
            first = np.full_like(np.take(y, [0], axis=axis), self.identity)
            y = np.concatenate([first, np.take(y, np.arange(x.shape[axis] - 1), axis=axis)], axis=axis)
        if self.attr(node, "reverse"):
            y = np.flip(y, axis)
        return [np.ascontiguousarray(y).astype(inputs[0].dtype)]

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        axis = self._axis(node, const_input(graph, node, 1), len(shape))
        n = shape[axis]
        outer_shape = [d for i, d in enumerate(shape) if i != axis]
        run = Var("running")
        exclusive, reverse = self.attr(node, "exclusive"), self.attr(node, "reverse")

        def outer(oidx):
            b.assign(run, Num(self.identity))

            def step(k):
                at = Idx.of(n - 1) - k if reverse else k
                full = list(oidx[:axis]) + [at] + list(oidx[axis:])
                x = Ref(node.inputs[0], flat_index(full, shape))
                y = Ref(node.outputs[0], flat_index(full, shape))
                if exclusive:
                    b.assign(y, run)
                b.assign(run, Bin(self.symbol, run, x))
                if not exclusive:
                    b.assign(y, run)

            b.loop(n, step)

        b.nest(outer_shape, outer)


class CumSum(_Cumulative):
    """CumSum: running sums along a constant axis (exclusive, reverse)."""

    name = "CumSum"


class CumProd(_Cumulative):
    """CumProd: running products along a constant axis (exclusive, reverse)."""

    name = "CumProd"
    symbol = "*"
    identity = 1.0
    numpy_fn = staticmethod(np.cumprod)
