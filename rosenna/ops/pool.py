"""Pooling, 1-D and 2-D: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.

    MaxPool:      Y[n, c, oh, ow] = max over the taps of the window that fall inside X
    AveragePool:  Y[n, c, oh, ow] = (sum over the taps inside X) / count
                  count = taps inside X (count_include_pad=0), or taps inside the padded extent
                  X plus ``pads`` (count_include_pad=1; with ceil_mode the part of a window past
                  the end padding is never counted, as in PyTorch and ONNX's reference)
    GlobalAveragePool / GlobalMaxPool: mean / max over all spatial positions of each channel

Attributes kernel_shape, strides, pads, dilations, ceil_mode, auto_pad, count_include_pad; with
ceil_mode a window that would start in the end padding is dropped. Padding never wins the max:
the window arithmetic of :mod:`rosenna.ops.conv` gives every run of outputs the taps inside X, and
only those are visited. MaxPool's optional Indices output must be unused.

Deviation: a window with no tap inside X (possible only with pads at least as large as the
kernel) gives -inf (MaxPool) or 0 (AveragePool). NaN inputs are skipped by the max comparison
rather than propagated. 3-D pooling is refused.
"""

from rosenna.loopir import Bin, Idx, Num, Ref, Select, Var
from rosenna.ops.base import Op, onnx_ints
from rosenna.ops.conv import as_2d, flat4, segments, window, window_problems


class _Pool(Op):
    attributes = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None, "kernel_shape": None, "pads": None,
                  "strides": None, "storage_order": 0, "count_include_pad": 0}
    is_max = False

    def _geometry(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        kernel = onnx_ints(self.attr(node, "kernel_shape"))
        strides, dilations, begin, end, out = window(self, node, list(shape[2:]), kernel,
                                                     bool(self.attr(node, "ceil_mode")))
        if len(shape) == 3:
            kernel, strides, dilations = [1] + kernel, [1] + strides, [1] + dilations
            begin, end, out = [0] + begin, [0] + end, [1] + out
        return as_2d(shape), kernel, strides, dilations, begin, end, out

    def shape(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        out = self._geometry(node, graph)[-1]
        return [tuple(shape[:2]) + tuple(out[-(len(shape) - 2):])] * len(node.outputs)

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
        x, (kh, kw), strides, dilations, begin, end, (oh, ow) = self._geometry(node, graph)
        yshape = (x[0], x[1], oh, ow)
        include_pad = bool(self.attr(node, "count_include_pad"))
        acc = Var("acc")
        for sh in segments(oh, x[2], kh, strides[0], dilations[0], begin[0], end[0]):
            for sw in segments(ow, x[3], kw, strides[1], dilations[1], begin[1], end[1]):
                base_h = sh.base(strides[0], dilations[0], begin[0])
                base_w = sw.base(strides[1], dilations[1], begin[1])

                def body(idx, sh=sh, sw=sw, base_h=base_h, base_w=base_w):
                    n, c, i, j = idx
                    b.assign(acc, Num(float("-inf") if self.is_max else 0.0))
                    taps = (sh.k1 - sh.k0, sw.k1 - sw.k0)

                    def tap(t):
                        th, tw = t
                        v = Ref(xname, flat4(n, c, Idx.of(i) * strides[0] + Idx.of(th) * dilations[0] + base_h,
                                             Idx.of(j) * strides[1] + Idx.of(tw) * dilations[1] + base_w, x))
                        if self.is_max:
                            b.assign(acc, Select(v, acc, v, acc))
                        else:
                            b.assign(acc, v, accumulate=True)

                    if all(taps):
                        b.nest(taps, tap)
                    value = acc
                    if not self.is_max:
                        count = sh.padded * sw.padded if include_pad else taps[0] * taps[1]
                        value = acc if count == 0 else _div(acc, count)
                    b.assign(Ref(out, flat4(n, c, Idx.of(i) + sh.o0, Idx.of(j) + sw.o0, yshape)), value)

                b.nest((x[0], x[1], sh.count, sw.count), body)


def _div(acc, count):
    return acc if count == 1 else Bin("/", acc, Num(float(count)))


class MaxPool(_Pool):
    name = "MaxPool"
    is_max = True


class AveragePool(_Pool):
    name = "AveragePool"


class _GlobalPool(Op):
    is_max = False

    def shape(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        return [tuple(shape[:2]) + (1,) * (len(shape) - 2)]

    def check(self, node, graph):
        rank = len(graph.shape_of(node.inputs[0]))
        return [] if 3 <= rank <= 4 else [f"X has rank {rank}; rosenna takes rank 3 and 4"]

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
