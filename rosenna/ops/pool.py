"""Pooling over 1, 2 or 3 (any number of) spatial axes: MaxPool, AveragePool, LpPool,
GlobalAveragePool, GlobalMaxPool.

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
only those are visited. MaxPool's optional Indices output must be unused.

Deviation: a window with no tap inside X (possible only with pads at least as large as the
kernel) gives -inf (MaxPool) or 0 (AveragePool). NaN inputs are skipped by the max comparison
rather than propagated.
"""

import itertools
import math

from rosenna.loopir import Bin, Fn, Idx, Num, Ref, Select, Var, flat_index
from rosenna.ops.base import Op, onnx_ints
from rosenna.ops.conv import forward_runs, window, window_problems


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
        if len(node.outputs) > 1 and node.outputs[1] and (node.outputs[1] in graph.consumers() or node.outputs[1] in graph.outputs):
            problems.append("the Indices output is used; rosenna computes only the pooled values")
        kernel = node.attrs.get("kernel_shape")
        if kernel is None or len(onnx_ints(kernel)) != len(graph.shape_of(node.inputs[0])) - 2:
            problems.append("kernel_shape is missing or does not match the input's spatial rank")
        return problems

    def lower(self, node, graph, b):
        xname, out = node.inputs[0], node.outputs[0]
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

                def tap(ts):
                    v = Ref(xname, flat_index([n, c] + [r.input(j, t) for r, j, t in zip(combo, js, ts)], x))
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
                b.assign(Ref(out, flat_index([n, c] + [r.out(j) for r, j in zip(combo, js)], yshape)), value)

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
