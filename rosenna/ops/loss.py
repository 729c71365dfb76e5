"""NegativeLogLikelihoodLoss (and through its ONNX function body, SoftmaxCrossEntropyLoss): the
classification losses, with the targets given at run time or as constants.

    loss[n, d] = -X[n, t, d] * w[t]     t = target[n, d]; w the optional class weights (else 1);
                                        0 where t == ignore_index
    reduction none: Y = loss;  sum: Y = sum loss;  mean: Y = sum loss / sum w[t] (ignored positions
    left out of both sums)

No gather: the class of each position is found by one pass over the classes, comparing the target
with a running class counter and keeping X[n, c, d] and w[c] where they match (a target outside
0..C-1 matches none, like an ignored one). The sums run left to right in the working float type.
Deviation: a mean over positions that are all ignored is 0 / 0 (NaN).
"""

import numpy as np

from rosenna.loopir import Bin, Idx, Num, Ref, Select, Var
from rosenna.ops.base import Op


class NegativeLogLikelihoodLoss(Op):
    """NegativeLogLikelihoodLoss: -x[target] * weight, with ignore_index and a reduction; run-time targets."""

    name = "NegativeLogLikelihoodLoss"
    attributes = {"reduction": "mean", "ignore_index": None}

    def _reduction(self, node):
        r = self.attr(node, "reduction")
        return r.decode() if isinstance(r, bytes) else r

    def shape(self, node, graph):
        x = graph.shape_of(node.inputs[0])
        return [(x[0],) + tuple(x[2:])] if self._reduction(node) == "none" else [()]

    def check(self, node, graph):
        if self._reduction(node) not in ("none", "sum", "mean"):
            return [f"reduction {self._reduction(node)!r} is not an ONNX value (none, sum, mean)"]
        if len(graph.shape_of(node.inputs[0])) < 2:
            return ["the input has rank < 2; it must be [N, C, d1, ...]"]
        return []

    def lower(self, node, graph, b):
        x_shape = graph.shape_of(node.inputs[0])
        n_, classes = x_shape[0], x_shape[1]
        positions = int(np.prod(x_shape[2:], dtype=np.int64))
        target = node.inputs[1]
        weight = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        ignore = self.attr(node, "ignore_index")
        reduction = self._reduction(node)
        picked, weight_at, seen, total, weights = (Var(v) for v in ("picked", "weight_at", "seen", "loss_sum",
                                                                     "weight_sum"))
        if reduction != "none":
            b.assign(total, Num(0.0))
            b.assign(weights, Num(0.0))

        def position(idx):
            n, d = idx
            t = Ref(target, Idx.of(n) * positions + d)
            b.assign(picked, Num(0.0))
            b.assign(weight_at, Num(0.0))
            b.assign(seen, Num(0.0))

            def each_class(c):
                b.assign(picked, Select(t, seen, Ref(node.inputs[0], (Idx.of(n) * classes + c) * positions + d),
                                        picked, "=="))
                b.assign(weight_at, Select(t, seen, Ref(weight, Idx.of(c)) if weight else Num(1.0), weight_at, "=="))
                b.assign(seen, Num(1.0), accumulate=True)

            b.loop(classes, each_class)
            if ignore is not None:
                b.assign(weight_at, Select(t, Num(float(ignore)), Num(0.0), weight_at, "=="))
            loss = Bin("*", Bin("-", Num(0.0), picked), weight_at)
            if reduction == "none":
                b.assign(Ref(node.outputs[0], Idx.of(n) * positions + d), loss)
            else:
                b.assign(total, loss, accumulate=True)
                b.assign(weights, weight_at, accumulate=True)

        b.nest((n_, positions), position)
        if reduction == "sum":
            b.assign(Ref(node.outputs[0], Idx()), total)
        elif reduction == "mean":
            b.assign(Ref(node.outputs[0], Idx()), Bin("/", total, weights))
