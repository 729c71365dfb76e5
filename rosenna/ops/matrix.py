"""Ops on the last two axes taken as matrices: Trilu, Det, EyeLike.

    Trilu:    Y[.., i, j] = X[.., i, j] where j - i >= k (upper=1) or j - i <= k (upper=0), else 0;
              k the optional second input (a constant, default 0)
    Det:      det X[.., :, :] by the Leibniz formula, sum over permutations s of
              sign(s) * prod_i X[.., i, s(i)], for n up to :data:`DET_MAX` (n! terms of n factors)
    EyeLike:  ones on the k-th diagonal of a matrix shaped like the input, zeros elsewhere; a
              constant of the model (the input's values are not read), in ``dtype`` or the input's

Deviation: Det sums the Leibniz terms in permutation order instead of factorising (LU); the rounding
differs from a factorisation's, and more for ill-conditioned matrices. Refused: Det of matrices
larger than DET_MAX, Trilu's k computed at run time.
"""

import itertools

import numpy as np

from rosenna.loopir import Bin, Idx, Num, Ref, Select, Var, flat_index
from rosenna.ops.base import Op, const_input
from rosenna.onnx_types import numpy_dtype

#: The largest n of an n x n Det: 5! = 120 products of 5 factors each.
DET_MAX = 5


class Trilu(Op):
    """Trilu: the upper or lower triangle of matrices (k a constant)."""

    name = "Trilu"
    attributes = {"upper": 1}

    def _k(self, node, graph):
        if len(node.inputs) < 2 or not node.inputs[1]:
            return 0
        k = const_input(graph, node, 1)
        return None if k is None else int(np.asarray(k).reshape(-1)[0])

    def check(self, node, graph):
        problems = [] if self._k(node, graph) is not None else ["k is computed at run time; rosenna needs it constant"]
        if len(graph.shape_of(node.inputs[0])) < 2:
            problems.append("the input has rank < 2; Trilu takes matrices")
        return problems

    def evaluate(self, node, inputs):
        k = 0 if len(inputs) < 2 or inputs[1] is None else int(np.asarray(inputs[1]).reshape(-1)[0])
        fn = np.triu if self.attr(node, "upper") else np.tril
        return [fn(inputs[0], k)]

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        k, upper = self._k(node, graph), self.attr(node, "upper")
        rows, cols = shape[-2], shape[-1]
        row, col = Var("row_at"), Var("diagonal")

        def matrix(bidx):
            b.assign(row, Num(0.0))

            def each_row(i):
                b.assign(col, Bin("-", Num(0.0), row))  # j - i, counted along the row

                def each(j):
                    full = list(bidx) + [i, j]
                    x = Ref(node.inputs[0], flat_index(full, shape))
                    keep = Select(col, Num(float(k)), x, Num(0.0), ">=" if upper else "<=")
                    b.assign(Ref(node.outputs[0], flat_index(full, shape)), keep)
                    b.assign(col, Num(1.0), accumulate=True)

                b.loop(cols, each)
                b.assign(row, Num(1.0), accumulate=True)

            b.loop(rows, each_row)

        b.nest(tuple(shape[:-2]), matrix)


class Det(Op):
    """Det: determinants of small matrices (up to 5x5)."""

    name = "Det"

    def shape(self, node, graph):
        return [tuple(graph.shape_of(node.inputs[0])[:-2])]

    def check(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        if len(shape) < 2 or shape[-1] != shape[-2]:
            return [f"the input's shape {tuple(shape)} does not end in a square matrix"]
        if shape[-1] > DET_MAX:
            return [f"{shape[-1]}x{shape[-1]} matrices: rosenna computes Det of matrices up to {DET_MAX}x{DET_MAX}"]
        return []

    def evaluate(self, node, inputs):
        return [np.asarray(np.linalg.det(inputs[0])).astype(inputs[0].dtype)]

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        n = shape[-1]
        out_shape = tuple(shape[:-2])

        def matrix(bidx):
            total = None
            for perm in itertools.permutations(range(n)):
                inversions = sum(1 for a in range(n) for c in range(a + 1, n) if perm[a] > perm[c])
                term = None
                for i, j in enumerate(perm):
                    x = Ref(node.inputs[0], flat_index(list(bidx) + [Idx.of(i), Idx.of(j)], shape))
                    term = x if term is None else Bin("*", term, x)
                if total is None:
                    total = term if inversions % 2 == 0 else Bin("-", Num(0.0), term)
                else:
                    total = Bin("-" if inversions % 2 else "+", total, term)
            b.assign(Ref(node.outputs[0], flat_index(bidx, out_shape) if out_shape else Idx()), total)

        b.nest(out_shape, matrix)


class EyeLike(Op):
    """EyeLike: ones on a diagonal, a constant of the input's shape."""

    name = "EyeLike"
    attributes = {"dtype": None, "k": 0}

    def from_shape(self, node, shape):
        dtype = self.attr(node, "dtype")
        return np.eye(shape[0], shape[1], int(self.attr(node, "k")),
                      dtype=numpy_dtype(dtype) if dtype else np.float32)

    def evaluate(self, node, inputs):
        out = self.from_shape(node, inputs[0].shape)
        return [out if self.attr(node, "dtype") else out.astype(inputs[0].dtype)]
