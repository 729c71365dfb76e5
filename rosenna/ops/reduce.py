"""ReduceMean, ReduceSum, ReduceMax, ReduceMin over constant axes (what exporters emit for
AdaptiveAvgPool2d(1), mean over a dimension, and the like).

    Y[kept] = reduce over the reduced axes of X[kept, reduced]    (mean = sum / count)

``axes`` from the attribute (older opsets) or the constant input (ReduceSum from 13, the rest from
18); no axes reduces everything unless ``noop_with_empty_axes``; ``keepdims`` as in ONNX. The sum
runs left to right in the generated precision. Deviation: Max/Min skip NaNs by comparison.
Refused: axes computed at run time.
"""

import numpy as np

from rosenna.loopir import Bin, Idx, Num, Ref, Select, Var, flat_index
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
        fn = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[self.kind]
        return [np.asarray(fn(inputs[0], axis=axes, keepdims=bool(self.attr(node, "keepdims"))))
                .astype(inputs[0].dtype)]

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
        acc = Var("acc")

        def outer(oidx):
            first = {"sum": Num(0.0), "mean": Num(0.0), "max": Num(float("-inf")), "min": Num(float("inf"))}
            b.assign(acc, first[self.kind])

            def inner(ridx):
                full = [None] * len(shape)
                for i, v in zip(kept, oidx):
                    full[i] = v
                for i, v in zip(axes, ridx):
                    full[i] = v
                v = Ref(node.inputs[0], flat_index(full, shape))
                if self.kind == "max":
                    b.assign(acc, Select(v, acc, v, acc))
                elif self.kind == "min":
                    b.assign(acc, Select(acc, v, v, acc))
                else:
                    b.assign(acc, v, accumulate=True)

            b.nest([shape[i] for i in axes], inner)
            value = Bin("/", acc, Num(float(count))) if self.kind == "mean" and count != 1 else acc
            b.assign(Ref(node.outputs[0], flat_index(oidx, out_shape) if out_shape else Idx()), value)

        b.nest(out_shape, outer)


class ReduceMean(_Reduce):
    name = "ReduceMean"
    kind = "mean"


class ReduceSum(_Reduce):
    name = "ReduceSum"
    kind = "sum"


class ReduceMax(_Reduce):
    name = "ReduceMax"
    kind = "max"


class ReduceMin(_Reduce):
    name = "ReduceMin"
    kind = "min"
