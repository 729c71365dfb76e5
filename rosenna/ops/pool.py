"""Pooling over 1, 2 or 3 (any number of) spatial axes: MaxPool, AveragePool, LpPool,
GlobalAveragePool, GlobalMaxPool; and MaxUnpool, the scatter back (its class docstring).

    MaxPool:      Y[n, c, oh, ow] = max over the taps of the window that fall inside X
    AveragePool:  Y[n, c, oh, ow] = (sum over the taps inside X) / count
                  count = taps inside X (count_include_pad=0), or taps inside the padded extent
                  X plus ``pads`` (count_include_pad=1; with ceil_mode the part of a window past
                  the end padding is never counted, as in PyTorch and ONNX's reference)
    LpPool:       Y[n, c, oh, ow] = (sum over the taps inside X of |x|^p)^(1/p)   (p 2: sqrt of the
                  sum of squares; padding adds nothing)
    GlobalAveragePool / GlobalMaxPool: mean / max over all spatial positions of each channel

Attributes kernel_shape, strides, pads, dilations, ceil_mode, auto_pad, count_include_pad; with
ceil_mode a window that would start in the end padding is dropped. Padding never wins the max:
the window arithmetic of :mod:`rosenna.ops.conv` gives every run of outputs the taps inside X, and
only those are visited. MaxPool's optional Indices output holds the flat position in X of each
max (the first one of a tie): ((n C + c) D1 ... + spatial position), the spatial position in
row-major order (``storage_order`` 0) or column-major order (1), as onnx's reference computes it.

Deviation: a window with no tap inside X (possible only with pads at least as large as the
kernel) gives -inf (MaxPool) or 0 (AveragePool). NaN inputs are skipped by the max comparison
rather than propagated.
"""

import itertools
import math

import numpy as np

from rosenna.loopir import OP_FAULT, Bin, Fn, Idx, Num, Ref, Select, Var, flat_index
from rosenna.loopir import strides as element_strides
from rosenna.ops.base import REQUIRED, Op, const_input, onnx_ints
from rosenna.ops.conv import forward_runs, window, window_problems
from rosenna.ops.gather_scatter import checked_index, invalidate
from rosenna.ops.ml_preprocess import add_table, table


class _Pool(Op):
    attributes = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None, "kernel_shape": None, "pads": None,
                  "strides": None, "storage_order": 0, "count_include_pad": 0}
    is_max = False

    def _geometry(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        kernel = onnx_ints(self.attr(node, "kernel_shape"))
        strides, dilations, begin, end, out = window(self, node, list(shape[2:]), kernel,
                                                     bool(self.attr(node, "ceil_mode")))
        return shape, kernel, strides, dilations, begin, end, out

    def shape(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        return [tuple(shape[:2]) + tuple(self._geometry(node, graph)[-1])] * len(node.outputs)

    def check(self, node, graph):
        problems = window_problems(node, graph)
        if problems:
            return problems
        if self._indices(node, graph) and self.attr(node, "storage_order") not in (0, 1):
            order = self.attr(node, "storage_order")
            problems.append(f"storage_order {order} is not 0 (row major) or 1 (column major)")
        kernel = node.attrs.get("kernel_shape")
        if kernel is None or len(onnx_ints(kernel)) != len(graph.shape_of(node.inputs[0])) - 2:
            problems.append("kernel_shape is missing or does not match the input's spatial rank")
        return problems

    def _indices(self, node, graph):
        """MaxPool's Indices output when the graph uses it, else None."""
        if self.is_max and len(node.outputs) > 1 and node.outputs[1] and (
                node.outputs[1] in graph.consumers() or node.outputs[1] in graph.outputs):
            return node.outputs[1]
        return None

    def canonicalize(self, node, graph):
        """MaxPool with its Indices used: a table of X's shape holding each element's flat position
        as the Indices count it, read at the tap's own index (no counter: every path renders it)."""
        if not self._indices(node, graph):
            return
        shape = tuple(graph.shape_of(node.inputs[0]))
        order = "F" if self.attr(node, "storage_order") == 1 else "C"
        spatial = math.prod(shape[2:])
        positions = np.arange(spatial).reshape(shape[2:], order=order)
        channels = np.arange(shape[0] * shape[1]).reshape(shape[:2] + (1,) * (len(shape) - 2))
        add_table(node, graph, "positions", channels * spatial + positions)

    def lower(self, node, graph, b):
        xname, out = node.inputs[0], node.outputs[0]
        indices = self._indices(node, graph)
        positions = table(node, "positions") if indices else None
        where = Var("acc_at")
        x, kernel, strides, dilations, begin, end, out_sizes = self._geometry(node, graph)
        yshape = tuple(x[:2]) + tuple(out_sizes)
        include_pad = bool(self.attr(node, "count_include_pad"))
        acc = Var("acc")
        runs = [forward_runs(*args) for args in zip(out_sizes, x[2:], kernel, strides, dilations, begin, end)]
        for combo in itertools.product(*runs):
            def body(idx, combo=combo):
                n, c, *js = idx
                b.assign(acc, Num(float("-inf") if self.is_max else 0.0))
                taps = tuple(r.ntaps for r in combo)
                if indices:
                    b.assign(where, Num(-1.0))

                def tap(ts):
                    at = flat_index([n, c] + [r.input(j, t) for r, j, t in zip(combo, js, ts)], x)
                    v = Ref(xname, at)
                    if indices:
                        b.assign(where, Select(v, acc, Ref(positions, at), where))
                    if self.is_max:
                        b.assign(acc, Select(v, acc, v, acc))
                    else:
                        b.assign(acc, self.term(node, v), accumulate=True)

                if all(taps):
                    b.nest(taps, tap)
                value = acc
                if self.finish(node, acc) is not None:
                    value = self.finish(node, acc)
                elif not self.is_max:
                    count = math.prod(r.padded for r in combo) if include_pad else math.prod(taps)
                    value = acc if count == 0 else _div(acc, count)
                y_at = flat_index([n, c] + [r.out(j) for r, j in zip(combo, js)], yshape)
                b.assign(Ref(out, y_at), value)
                if indices:
                    b.assign(Ref(indices, y_at), where)

            b.nest(tuple(x[:2]) + tuple(r.count for r in combo), body)

    def term(self, node, v):
        """What a tap adds to the sum (AveragePool: its value)."""
        return v

    def finish(self, node, acc):
        """The output from the sum, or None for the average (MaxPool: the max itself)."""
        return None


def _div(acc, count):
    return acc if count == 1 else Bin("/", acc, Num(float(count)))


class MaxPool(_Pool):
    name = "MaxPool"
    is_max = True


class AveragePool(_Pool):
    name = "AveragePool"


class LpPool(_Pool):
    """LpPool: (sum of abs(x)^p over each window)^(1/p)."""

    name = "LpPool"
    attributes = dict(_Pool.attributes, p=2)

    def term(self, node, v):
        p = float(self.attr(node, "p"))
        return Bin("*", v, v) if p == 2 else Fn("pow", (Fn("abs", (v,)), Num(p)))

    def finish(self, node, acc):
        p = float(self.attr(node, "p"))
        return Fn("sqrt", (acc,)) if p == 2 else Fn("pow", (acc, Num(1.0 / p)))


class _GlobalPool(Op):
    is_max = False

    def shape(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        return [tuple(shape[:2]) + (1,) * (len(shape) - 2)]

    def check(self, node, graph):
        rank = len(graph.shape_of(node.inputs[0]))
        return [] if rank >= 3 else [f"X has rank {rank}; a global pool needs [N, C, spatial...] (rank 3 or more)"]

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        channels = shape[0] * shape[1]
        area = 1
        for d in shape[2:]:
            area *= d
        acc = Var("acc")

        def body(nc):
            b.assign(acc, Num(float("-inf") if self.is_max else 0.0))

            def tap(p):
                v = Ref(node.inputs[0], Idx.of(nc) * area + p)
                if self.is_max:
                    b.assign(acc, Select(v, acc, v, acc))
                else:
                    b.assign(acc, v, accumulate=True)

            b.loop(area, tap)
            b.assign(Ref(node.outputs[0], Idx.of(nc)), acc if self.is_max else _div(acc, area))

        b.loop(channels, body)


class GlobalAveragePool(_GlobalPool):
    name = "GlobalAveragePool"


class GlobalMaxPool(_GlobalPool):
    name = "GlobalMaxPool"
    is_max = True


class MaxUnpool(Op):
    """MaxUnpool: the inverse of a MaxPool with Indices, a scatter of X into zeros.

    Y = 0 of shape [N, C, o...] with o = (i - 1) * stride + kernel - pad_begin - pad_end per
    spatial axis; then Y.flat[I[j]] = X[j] for every element j of X (in order: a later one wins
    where two share a position), I the flat positions MaxPool's Indices give (run time or
    constant). With the constant ``output_shape`` input, that Y is placed at the start of a zero
    tensor of that shape (onnx's reference and its node tests: the indices count positions in the
    inferred shape). A position outside Y (or NaN) writes nothing, makes every element of Y NaN and
    counts a fault (rosenna.loopir.FAULT), as the scatters do."""

    name = "MaxUnpool"
    attributes = {"kernel_shape": REQUIRED, "pads": None, "strides": None}

    def _out_shape(self, node, graph):
        given = const_input(graph, node, 2)
        return self._inferred(node, graph) if given is None else tuple(onnx_ints(given))

    def _inferred(self, node, graph):
        x = graph.shape_of(node.inputs[0])
        kernel = onnx_ints(self.attr(node, "kernel_shape"))
        rank = len(kernel)
        strides = onnx_ints(self.attr(node, "strides") or [1] * rank)
        pads = onnx_ints(self.attr(node, "pads") or [0] * (2 * rank))
        return tuple(x[:2]) + tuple((i - 1) * s + k - pads[a] - pads[a + rank]
                                    for a, (i, s, k) in enumerate(zip(x[2:], strides, kernel)))

    def shape(self, node, graph):
        return [self._out_shape(node, graph)]

    def check(self, node, graph):
        if len(node.inputs) > 2 and node.inputs[2] and const_input(graph, node, 2) is None:
            return ["output_shape is computed at run time; rosenna needs it constant"]
        return []

    def shape_errors(self, node, graph):
        x, index = (tuple(graph.shape_of(n)) for n in node.inputs[:2])
        if x != index:
            return [f"I has shape {index}; it must be X's {x}"]
        if len(onnx_ints(self.attr(node, "kernel_shape"))) != len(x) - 2:
            return [f"kernel_shape {onnx_ints(self.attr(node, 'kernel_shape'))} does not match X's spatial rank"]
        inferred, given = self._inferred(node, graph), self._out_shape(node, graph)
        if len(given) != len(x) or any(g < i for g, i in zip(given, inferred)):
            return [f"output_shape {given} is not of X's rank {len(x)} or smaller than the unpooled {inferred}"]
        return []

    def lower(self, node, graph, b):
        x = tuple(graph.shape_of(node.inputs[0]))
        y, inferred = self._out_shape(node, graph), self._inferred(node, graph)
        out = node.outputs[0]
        size, count, positions = math.prod(y), math.prod(x), math.prod(inferred)
        bad = Var(OP_FAULT)
        b.loop(size, lambda i: b.assign(Ref(out, Idx.of(i)), Num(0.0)))
        b.assign(bad, Num(0.0))

        def body(i):
            index, ok = checked_index(b, Ref(node.inputs[1], Idx.of(i)), positions, "ix", negative=False)
            if y != inferred:  # the position's coordinates in the inferred shape, placed in Y's
                place = None
                for d, (step, dim) in enumerate(zip(element_strides(inferred), inferred)):
                    if dim == 1:
                        continue
                    coordinate = Fn("floor", (Bin("/", index, Num(float(step))),)) if step > 1 else index
                    if d:
                        coordinate = Fn("fmod", (coordinate, Num(float(dim))))
                    placed = element_strides(y)[d]
                    term = Bin("*", coordinate, Num(float(placed))) if placed != 1 else coordinate
                    place = term if place is None else Bin("+", place, term)
                index = Var("ix_at")
                b.assign(index, place if place is not None else Num(0.0))
            target = Ref(out, Idx(), at=index)
            b.assign(target, Select(ok, Num(0.5), Ref(node.inputs[0], Idx.of(i)), target))
            b.assign(bad, Bin("-", Num(1.0), ok), accumulate=True)

        b.loop(count, body)
        invalidate(b, out, size, bad)
