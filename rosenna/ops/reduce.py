"""The reductions over constant axes (what exporters emit for AdaptiveAvgPool2d(1), mean over a
dimension, torch.linalg.vector_norm, a regime classifier's argmax, and the like).

    Y[kept] = reduce over the reduced axes of X[kept, reduced]

    ReduceSum        sum x                    ReduceMean       sum x / count
    ReduceMax/Min    largest / smallest x     ReduceProd       product of x
    ReduceL1         sum |x|                  ReduceL2         sqrt(sum x*x)
    ReduceSumSquare  sum x*x                  ReduceLogSum     log(sum x)
    ReduceLogSumExp  m + log(sum exp(x - m)), m the largest x (0 when m is infinite): the
                     overflow-free form of log(sum exp(x)), equal to it up to rounding
    ArgMax/ArgMin    the index along ``axis`` of the first largest / smallest x (the last with
                     ``select_last_index``), as an integer held in the float type

``axes`` from the attribute (older opsets) or the constant input (ReduceSum from 13, the rest from
18); no axes reduces everything unless ``noop_with_empty_axes``; ``keepdims`` as in ONNX. The sum
runs left to right in the generated precision. Deviation: Max/Min and ArgMax/ArgMin skip NaNs by
comparison (a NaN is never the largest). Refused: axes computed at run time.
"""

import numpy as np

from rosenna.loopir import Bin, Fn, Idx, Num, Ref, Select, Var, flat_index
from rosenna.ops.base import Op, const_input, onnx_ints


class _Reduce(Op):
    attributes = {"axes": None, "keepdims": 1, "noop_with_empty_axes": 0}
    kind = "sum"

    def _axes(self, node, graph_or_inputs, rank):
        axes = node.attrs.get("axes")
        if axes is None and len(node.inputs) > 1 and node.inputs[1]:
            if isinstance(graph_or_inputs, list):
                axes = graph_or_inputs[1]
            else:
                axes = const_input(graph_or_inputs, node, 1)
                if axes is None:
                    return None
        axes = [] if axes is None else [a % rank for a in onnx_ints(axes)]
        if not axes and not self.attr(node, "noop_with_empty_axes"):
            axes = list(range(rank))
        return sorted(set(axes))

    def _out(self, shape, axes, keep):
        return tuple((1 if keep else None) if i in axes else d for i, d in enumerate(shape))

    def shape(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        axes = self._axes(node, graph, len(shape))
        return [tuple(d for d in self._out(shape, axes, self.attr(node, "keepdims")) if d is not None)]

    def evaluate(self, node, inputs):
        axes = tuple(self._axes(node, inputs, inputs[0].ndim))
        x = inputs[0]
        fn = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod,
              "l1": lambda v, **k: np.sum(np.abs(v), **k), "l2": lambda v, **k: np.sqrt(np.sum(v * v, **k)),
              "sum_square": lambda v, **k: np.sum(v * v, **k), "log_sum": lambda v, **k: np.log(np.sum(v, **k)),
              "log_sum_exp": lambda v, **k: np.log(np.sum(np.exp(v), **k))}[self.kind]
        return [np.asarray(fn(x, axis=axes, keepdims=bool(self.attr(node, "keepdims")))).astype(x.dtype)]

    def check(self, node, graph):
        if self._axes(node, graph, len(graph.shape_of(node.inputs[0]))) is None:
            return ["the axes are computed at run time; rosenna needs them constant"]
        return []

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        axes = self._axes(node, graph, len(shape))
        kept = [i for i in range(len(shape)) if i not in axes]
        out_shape = tuple(shape[i] for i in kept)
        count = int(np.prod([shape[i] for i in axes], dtype=np.int64))
        acc, top = Var("acc"), Var("top")

        def load(oidx, ridx):
            full = [None] * len(shape)
            for i, v in zip(kept, oidx):
                full[i] = v
            for i, v in zip(axes, ridx):
                full[i] = v
            return Ref(node.inputs[0], flat_index(full, shape))

        def outer(oidx):
            shift = None
            if self.kind == "log_sum_exp":  # the largest element first, then sum exp(x - it)
                b.assign(top, Num(float("-inf")))
                b.nest([shape[i] for i in axes], lambda ridx: b.assign(top, Select(load(oidx, ridx), top,
                                                                                  load(oidx, ridx), top)))
                b.assign(top, Select(Fn("abs", (top,)), Num(float("inf")), Num(0.0), top, "=="))
                shift = top
            b.assign(acc, Num({"max": float("-inf"), "min": float("inf"), "prod": 1.0}.get(self.kind, 0.0)))

            def inner(ridx):
                v = load(oidx, ridx)
                if self.kind == "max":
                    b.assign(acc, Select(v, acc, v, acc))
                elif self.kind == "min":
                    b.assign(acc, Select(acc, v, v, acc))
                elif self.kind == "prod":
                    b.assign(acc, Bin("*", acc, v))
                elif self.kind == "l1":
                    b.assign(acc, Fn("abs", (v,)), accumulate=True)
                elif self.kind in ("l2", "sum_square"):
                    b.assign(acc, Bin("*", v, v), accumulate=True)
                elif self.kind == "log_sum_exp":
                    b.assign(acc, Fn("exp", (Bin("-", v, shift),)), accumulate=True)
                else:
                    b.assign(acc, v, accumulate=True)

            b.nest([shape[i] for i in axes], inner)
            value = acc
            if self.kind == "mean" and count != 1:
                value = Bin("/", acc, Num(float(count)))
            elif self.kind == "l2":
                value = Fn("sqrt", (acc,))
            elif self.kind == "log_sum":
                value = Fn("log", (acc,))
            elif self.kind == "log_sum_exp":
                value = Bin("+", shift, Fn("log", (acc,)))
            b.assign(Ref(node.outputs[0], flat_index(oidx, out_shape) if out_shape else Idx()), value)

        b.nest(out_shape, outer)


class ReduceMean(_Reduce):
    """ReduceMean: the mean over constant axes."""

    name = "ReduceMean"
    kind = "mean"


class ReduceSum(_Reduce):
    """ReduceSum: the sum over constant axes."""

    name = "ReduceSum"
    kind = "sum"


class ReduceMax(_Reduce):
    """ReduceMax: the largest element over constant axes."""

    name = "ReduceMax"
    kind = "max"


class ReduceMin(_Reduce):
    """ReduceMin: the smallest element over constant axes."""

    name = "ReduceMin"
    kind = "min"


class ReduceProd(_Reduce):
    """ReduceProd: the product over constant axes."""

    name = "ReduceProd"
    kind = "prod"


class ReduceL1(_Reduce):
    """ReduceL1: the sum of abs(x) over constant axes."""

    name = "ReduceL1"
    kind = "l1"


class ReduceL2(_Reduce):
    """ReduceL2: sqrt(sum x*x) over constant axes (torch.linalg.vector_norm)."""

    name = "ReduceL2"
    kind = "l2"


class ReduceSumSquare(_Reduce):
    """ReduceSumSquare: sum x*x over constant axes."""

    name = "ReduceSumSquare"
    kind = "sum_square"


class ReduceLogSum(_Reduce):
    """ReduceLogSum: log(sum x) over constant axes."""

    name = "ReduceLogSum"
    kind = "log_sum"


class ReduceLogSumExp(_Reduce):
    """ReduceLogSumExp: log(sum exp(x)) over constant axes, in the overflow-free form."""

    name = "ReduceLogSumExp"
    kind = "log_sum_exp"


class _Arg(Op):
    """ArgMax / ArgMin along one axis: a running best value and its index (a counter local)."""

    attributes = {"axis": 0, "keepdims": 1, "select_last_index": 0}
    #: the comparison that makes a new element the best (``>`` for ArgMax), strict for the first
    cmp = ">"

    def _axis(self, node, rank):
        return int(self.attr(node, "axis")) % max(rank, 1)

    def shape(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        axis = self._axis(node, len(shape))
        keep = self.attr(node, "keepdims")
        return [tuple(1 if i == axis else d for i, d in enumerate(shape) if keep or i != axis)]

    def evaluate(self, node, inputs):
        x = inputs[0]
        axis = self._axis(node, x.ndim)
        fn = np.argmax if self.cmp == ">" else np.argmin
        if self.attr(node, "select_last_index"):
            flipped = np.flip(x, axis)
            index = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            index = fn(x, axis=axis)
        if self.attr(node, "keepdims"):
            index = np.expand_dims(index, axis)
        return [np.asarray(index, np.int64)]

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        axis = self._axis(node, len(shape))
        outer_shape = tuple(d for i, d in enumerate(shape) if i != axis)
        best, where, count = Var("best"), Var("best_at"), Var("seen")
        cmp = self.cmp + ("=" if self.attr(node, "select_last_index") else "")

        def outer(oidx):
            def load(k):
                full = list(oidx[:axis]) + [k] + list(oidx[axis:])
                return Ref(node.inputs[0], flat_index(full, shape))

            b.assign(best, load(Idx()))
            b.assign(where, Num(0.0))
            b.assign(count, Num(0.0))

            def step(k):
                v = load(k)
                b.assign(where, Select(v, best, count, where, cmp))
                b.assign(best, Select(v, best, v, best, cmp))
                b.assign(count, Num(1.0), accumulate=True)

            b.loop(shape[axis], step)
            b.assign(Ref(node.outputs[0], flat_index(oidx, outer_shape) if outer_shape else Idx()), where)

        b.nest(outer_shape, outer)


class ArgMax(_Arg):
    """ArgMax: the index of the largest element along an axis (first, or last with select_last_index)."""

    name = "ArgMax"
    cmp = ">"


class ArgMin(_Arg):
    """ArgMin: the index of the smallest element along an axis (first, or last with select_last_index)."""

    name = "ArgMin"
    cmp = "<"
