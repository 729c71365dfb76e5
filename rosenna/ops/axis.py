"""Ops along one axis that are neither reductions nor scans: Hardmax, LpNormalization, TopK (and
LRN, OneHot, Compress and ReverseSequence: their class docstrings give their formulas).

    Hardmax:          Y[.., j, ..] = 1 where j is the first index of the largest X[.., :, ..], else 0
                      (opset >= 13 along ``axis``, default -1; before 13 over the 2-D view
                      ``[prod(shape[:axis]), prod(shape[axis:])]``, default axis 1, as Softmax)
    LpNormalization:  Y = X / (sum_k |X[.., k, ..]|^p)^(1/p) along ``axis`` (default -1), p 1 or 2
                      (a row of zeros gives zeros, as ONNX's reference)
    TopK:             the k largest (``largest=1``) or smallest elements along ``axis`` and their
                      indices, in order (ties: the lower index first); k a constant input

TopK is k passes of selection over the axis: pass r takes the best element that comes after the
one pass r-1 took in the order (value, then index); O(k n), made for the small k of classifiers
and neighbour searches. ``sorted=0`` gives them sorted too (ONNX leaves the order open).
Deviation: NaNs are skipped by the comparisons (never the largest or the smallest). Refused: k
computed at run time; k larger than the axis.
"""

import numpy as np

from rosenna.loopir import Bin, Fn, Idx, Num, Ref, Select, Var, flat_index
from rosenna.ops.base import Op, const_input
from rosenna.ops.softmax import _rows


def _rank_axis(axis, rank):
    return int(axis) % max(rank, 1)


class Hardmax(Op):
    """Hardmax: 1 at the first largest element along an axis, 0 elsewhere."""

    name = "Hardmax"

    def _axis(self, node, graph):
        return node.attrs.get("axis", -1 if graph.opset >= 13 else 1)

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        outer, n, inner = _rows(shape, self._axis(node, graph), graph.opset)
        best, where, count = Var("best"), Var("best_at"), Var("seen")
        src, dst = node.inputs[0], node.outputs[0]

        def row(idx):
            o, q = idx
            start = Idx.of(o) * (n * inner) + q

            def at(k):
                return start + Idx.of(k) * inner

            b.assign(best, Ref(src, start))
            b.assign(where, Num(0.0))
            b.assign(count, Num(0.0))

            def scan(k):
                v = Ref(src, at(k))
                b.assign(where, Select(v, best, count, where))
                b.assign(best, Select(v, best, v, best))
                b.assign(count, Num(1.0), accumulate=True)

            b.loop(n, scan)
            b.assign(count, Num(0.0))

            def mark(k):
                b.assign(Ref(dst, at(k)), Select(count, where, Num(1.0), Num(0.0), "=="))
                b.assign(count, Num(1.0), accumulate=True)

            b.loop(n, mark)

        b.nest((outer, inner), row)


class LpNormalization(Op):
    """LpNormalization: x divided by its L1 or L2 norm along an axis."""

    name = "LpNormalization"
    attributes = {"axis": -1, "p": 2}

    def check(self, node, graph):
        p = self.attr(node, "p")
        return [] if p in (1, 2) else [f"p={p}: ONNX defines LpNormalization for p 1 and 2"]

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        outer, n, inner = _rows(shape, _rank_axis(self.attr(node, "axis"), len(shape)), 13)
        p = self.attr(node, "p")
        total = Var("norm")
        src, dst = node.inputs[0], node.outputs[0]

        def row(idx):
            o, q = idx
            start = Idx.of(o) * (n * inner) + q

            def at(k):
                return start + Idx.of(k) * inner

            b.assign(total, Num(0.0))
            b.loop(n, lambda k: b.assign(total, Fn("abs", (Ref(src, at(k)),)) if p == 1 else
                                         Bin("*", Ref(src, at(k)), Ref(src, at(k))), accumulate=True))
            if p == 2:
                b.assign(total, Fn("sqrt", (total,)))
            b.loop(n, lambda k: b.assign(Ref(dst, at(k)), Select(total, Num(0.0), Num(0.0),
                                                                   Bin("/", Ref(src, at(k)), total), "==")))

        b.nest((outer, inner), row)


class TopK(Op):
    """TopK: the k largest or smallest elements along an axis and their indices (k a constant)."""

    name = "TopK"
    attributes = {"axis": -1, "largest": 1, "sorted": 1}

    def _k(self, node, graph_or_inputs):
        k = graph_or_inputs[1] if isinstance(graph_or_inputs, list) else const_input(graph_or_inputs, node, 1)
        return None if k is None else int(np.asarray(k).reshape(-1)[0])

    def shape(self, node, graph):
        shape = list(graph.shape_of(node.inputs[0]))
        axis = _rank_axis(self.attr(node, "axis"), len(shape))
        shape[axis] = self._k(node, graph)
        if shape[axis] is None:
            raise ValueError("k is computed at run time")
        return [tuple(shape), tuple(shape)]

    def check(self, node, graph):
        k = self._k(node, graph)
        if k is None:
            return ["k is computed at run time; rosenna needs it constant"]
        shape = graph.shape_of(node.inputs[0])
        n = shape[_rank_axis(self.attr(node, "axis"), len(shape))]
        if not 0 < k <= n:
            return [f"k={k} is outside 1..{n} (the axis length)"]
        return []

    def evaluate(self, node, inputs):
        x, k = inputs[0], self._k(node, inputs)
        axis = _rank_axis(self.attr(node, "axis"), x.ndim)
        order = np.argsort(-x if self.attr(node, "largest") else x, axis=axis, kind="stable")
        index = np.take(order, np.arange(k), axis=axis)
        return [np.take_along_axis(x, index, axis=axis), index.astype(np.int64)]

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        axis = _rank_axis(self.attr(node, "axis"), len(shape))
        k = self._k(node, graph)
        outer = int(np.prod(shape[:axis], dtype=np.int64))
        n, inner = shape[axis], int(np.prod(shape[axis + 1:], dtype=np.int64))
        before = "<" if self.attr(node, "largest") else ">"  # x comes after prev in the order
        better = ">" if self.attr(node, "largest") else "<"
        prev, prev_at, best, best_at, found, chosen, count = (
            Var(v) for v in ("prev", "prev_at", "best", "best_at", "found_any", "chosen", "seen"))
        src = node.inputs[0]
        values, indices = (node.outputs + ["", ""])[:2]

        def row(idx):
            o, q = idx
            b.assign(prev, Num(float("inf") if before == "<" else float("-inf")))
            b.assign(prev_at, Num(-1.0))

            def take(r):
                b.assign(found, Num(0.0))
                b.assign(best, Num(0.0))
                b.assign(best_at, Num(0.0))
                b.assign(count, Num(0.0))

                def scan(j):
                    v = Ref(src, Idx.of(o) * (n * inner) + Idx.of(j) * inner + q)
                    after = Select(v, prev, Num(1.0), Select(v, prev, Select(count, prev_at, Num(1.0), Num(0.0), ">"),
                                                             Num(0.0), "=="), before)
                    wins = Select(found, Num(0.0), Num(1.0), Select(v, best, Num(1.0), Num(0.0), better), "==")
                    b.assign(chosen, Bin("*", after, wins))  # 1 when x_j is the best of the pass so far
                    b.assign(best_at, Select(chosen, Num(0.0), count, best_at, ">"))
                    b.assign(best, Select(chosen, Num(0.0), v, best, ">"))
                    b.assign(found, Select(chosen, Num(0.0), Num(1.0), found, ">"))
                    b.assign(count, Num(1.0), accumulate=True)

                b.loop(n, scan)
                out = Idx.of(o) * (k * inner) + Idx.of(r) * inner + q
                if values:
                    b.assign(Ref(values, out), best)
                if indices:
                    b.assign(Ref(indices, out), best_at)
                b.assign(prev, best)
                b.assign(prev_at, best_at)

            b.loop(k, take)

        b.nest((outer, inner), row)


class LRN(Op):
    """LRN: local response normalization across channels,
    Y[n, c, ...] = X[n, c, ...] / (bias + alpha / size * sum of X[n, c', ...]^2)^beta over
    c' from c - floor((size-1)/2) to c + ceil((size-1)/2), clipped to the channels."""

    name = "LRN"
    attributes = {"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "size": None}

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        n_, channels = shape[0], shape[1]
        inner = int(np.prod(shape[2:], dtype=np.int64))
        size = int(self.attr(node, "size"))
        alpha, beta, bias = (float(self.attr(node, k)) for k in ("alpha", "beta", "bias"))
        src, dst = node.inputs[0], node.outputs[0]
        for c in range(channels):  # the window's ends are constants per channel
            window = range(max(0, c - (size - 1) // 2), min(channels - 1, c + -(-(size - 1) // 2)) + 1)

            def body(idx, c=c, window=window):
                n, q = idx
                total = None
                for k in window:
                    v = Ref(src, (Idx.of(n) * channels + k) * inner + q)
                    total = Bin("*", v, v) if total is None else Bin("+", total, Bin("*", v, v))
                scale = Fn("pow", (Bin("+", Num(bias), Bin("*", Num(alpha / size), total)), Num(beta)))
                at = (Idx.of(n) * channels + c) * inner + q
                b.assign(Ref(dst, at), Bin("/", Ref(src, at), scale))

            b.nest((n_, inner), body)


class OneHot(Op):
    """OneHot: Y[.., j, ..] = values[1] where indices[..] == j (or j - depth, a negative index),
    else values[0]; ``depth`` a constant, the new axis at ``axis`` (default -1)."""

    name = "OneHot"
    attributes = {"axis": -1}

    def _depth(self, node, graph):
        depth = const_input(graph, node, 1)
        return None if depth is None else int(np.asarray(depth).reshape(-1)[0])

    def shape(self, node, graph):
        shape = list(graph.shape_of(node.inputs[0]))
        depth = self._depth(node, graph)
        if depth is None:
            raise ValueError("depth is computed at run time")
        axis = int(self.attr(node, "axis")) % (len(shape) + 1)
        return [tuple(shape[:axis] + [depth] + shape[axis:])]

    def check(self, node, graph):
        return [] if self._depth(node, graph) is not None else ["depth is computed at run time; rosenna needs it "
                                                                 "constant (it decides the output's shape)"]

    def lower(self, node, graph, b):
        shape = list(graph.shape_of(node.inputs[0]))
        depth = self._depth(node, graph)
        axis = int(self.attr(node, "axis")) % (len(shape) + 1)
        outer = int(np.prod(shape[:axis], dtype=np.int64))
        inner = int(np.prod(shape[axis:], dtype=np.int64))
        on, off = Ref(node.inputs[2], Idx.of(1)), Ref(node.inputs[2], Idx())
        seen = Var("seen")

        def row(o):
            b.assign(seen, Num(0.0))

            def each(j):
                def element(q):
                    index = Ref(node.inputs[0], Idx.of(o) * inner + q)
                    hit = Select(index, Bin("-", seen, Num(float(depth))), on, off, "==")
                    b.assign(Ref(node.outputs[0], (Idx.of(o) * depth + j) * inner + q),
                             Select(index, seen, on, hit, "=="))

                b.loop(inner, element)
                b.assign(seen, Num(1.0), accumulate=True)

            b.loop(depth, each)

        b.loop(outer, row)


class Compress(Op):
    """Compress with a constant condition: the slices along ``axis`` (the flattened input when no
    axis) whose condition is true, in order; a condition shorter than the axis keeps none past it."""

    name = "Compress"
    attributes = {"axis": None}

    def _kept(self, node, graph):
        cond = const_input(graph, node, 1)
        return None if cond is None else [k for k, v in enumerate(np.asarray(cond).reshape(-1)) if v]

    def _frame(self, node, graph):
        shape = list(graph.shape_of(node.inputs[0]))
        axis = self.attr(node, "axis")
        if axis is None:
            return 1, int(np.prod(shape, dtype=np.int64)), 1, None
        axis = int(axis) % len(shape)
        return (int(np.prod(shape[:axis], dtype=np.int64)), shape[axis],
                int(np.prod(shape[axis + 1:], dtype=np.int64)), axis)

    def shape(self, node, graph):
        kept = self._kept(node, graph)
        if kept is None:
            raise ValueError("the condition is computed at run time")
        shape = list(graph.shape_of(node.inputs[0]))
        _, n, _, axis = self._frame(node, graph)
        if axis is None:
            return [(len(kept),)]
        shape[axis] = len(kept)
        return [tuple(shape)]

    def check(self, node, graph):
        kept = self._kept(node, graph)
        if kept is None:
            return ["the condition is computed at run time, so it decides the output's shape; rosenna needs it "
                    "constant"]
        if not kept:
            return ["the condition keeps nothing: the output is empty"]
        return []

    def lower(self, node, graph, b):
        kept = self._kept(node, graph)
        outer, n, inner, _ = self._frame(node, graph)
        count = len(kept)
        for m, k in enumerate(kept):
            b.nest((outer, inner), lambda idx, m=m, k=k: b.assign(
                Ref(node.outputs[0], (Idx.of(idx[0]) * count + m) * inner + idx[1]),
                Ref(node.inputs[0], (Idx.of(idx[0]) * n + k) * inner + idx[1])))


class ReverseSequence(Op):
    """ReverseSequence with constant ``sequence_lens``: along ``time_axis``, the first L_b elements
    of batch entry b reversed, the rest copied: Y[t, b] = X[L_b - 1 - t, b] for t < L_b, else
    X[t, b] (time and batch axes 0 and 1, either way round)."""

    name = "ReverseSequence"
    attributes = {"batch_axis": 1, "time_axis": 0}

    def check(self, node, graph):
        if const_input(graph, node, 1) is None:
            return ["sequence_lens is computed at run time; rosenna needs it constant"]
        return []

    def lower(self, node, graph, b):
        shape = list(graph.shape_of(node.inputs[0]))
        lens = [int(v) for v in np.asarray(const_input(graph, node, 1)).reshape(-1)]
        t_axis, b_axis = int(self.attr(node, "time_axis")), int(self.attr(node, "batch_axis"))
        rest = shape[2:]
        steps = shape[t_axis]

        def copy(batch, count, start, reverse):
            def body(idx):
                t, tail = idx[0], idx[1:]
                source = Idx.of(start + count - 1) - t if reverse else Idx.of(t) + start
                full_y, full_x = [None] * len(shape), [None] * len(shape)
                full_y[t_axis], full_x[t_axis] = Idx.of(t) + start, source
                full_y[b_axis] = full_x[b_axis] = Idx.of(batch)
                full_y[2:] = full_x[2:] = tail
                b.assign(Ref(node.outputs[0], flat_index(full_y, shape)),
                         Ref(node.inputs[0], flat_index(full_x, shape)))

            if count > 0:
                b.nest((count, *rest), body)

        for batch, length in enumerate(lens):
            length = max(0, min(length, steps))
            copy(batch, length, 0, True)
            copy(batch, steps - length, length, False)
