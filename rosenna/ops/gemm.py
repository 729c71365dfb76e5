"""Gemm: ``Y = alpha * A' @ B' + beta * C`` with A' = A or A^T, B' = B or B^T.

This lowering takes B (and C) constant: the layer's weights. A Gemm whose B or C is computed at
run time (weights fed as graph inputs and not ``--freeze``-d, bilinear forms), or whose constant C is
not one bias per output (a scalar), is rewritten by the ``runtime_gemm_operands`` pass
(rosenna.passes.runtime_gemm) into Transpose, MatMul, Mul and Add, before this op sees it. ``canonicalize`` stores
``alpha * B'`` transposed, as W[n][k], so each output is a dot product over contiguous memory,
and ``beta * C`` as one bias per output. The bias is added after the dot product
(``acc = 0; acc += w*x; y = acc + b``), never used to seed the accumulator: nvc miscompiles that
form under ``distribute parallel for``. An activation that alone consumes the output is fused in
by the ``fuse_activation`` pass (attribute ``_activation``) and applied at the store.

Deviation: alpha is folded into W, so ``alpha * (A@B)`` becomes ``A @ (alpha*B)``; exact for
alpha = 1, within a rounding of the reference otherwise.
"""

import numpy as np

from rosenna.loopir import Idx, Num, Ref, Var, add, flat_index, mul
from rosenna.ops.base import Op, broadcast_errors


class Gemm(Op):
    name = "Gemm"
    attributes = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0, "_activation": None}

    def _dims(self, node, graph):
        a = graph.shape_of(node.inputs[0])
        bshape = graph.shape_of(node.inputs[1])
        m, k = (a[1], a[0]) if self.attr(node, "transA") else (a[0], a[1])
        n = bshape[0] if self.attr(node, "transB") else bshape[1]
        return m, k, n

    def shape_errors(self, node, graph):
        a, bshape = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        if len(a) != 2 or len(bshape) != 2:
            return [f"A of shape {tuple(a)} and B of shape {tuple(bshape)}: Gemm needs rank-2 operands"]
        _, k, n = self._dims(node, graph)
        k_b = bshape[1] if self.attr(node, "transB") else bshape[0]
        if k != k_b:
            return [f"inner dimensions disagree: A {tuple(a)} (transA={self.attr(node, 'transA')}) has {k}, "
                    f"B {tuple(bshape)} (transB={self.attr(node, 'transB')}) has {k_b}"]
        if len(node.inputs) > 2 and node.inputs[2]:
            m, _, n = self._dims(node, graph)
            cshape = tuple(graph.shape_of(node.inputs[2]))
            if len(cshape) > 2 or broadcast_errors([cshape, (m, n)]) or \
                    tuple(np.broadcast_shapes(cshape, (m, n))) != (m, n):
                return [f"bias C of shape {cshape} does not broadcast to the ({m}, {n}) output"]
        return []

    def shape(self, node, graph):
        m, _, n = self._dims(node, graph)
        return [(m, n)]

    def evaluate(self, node, inputs):
        a, bmat = inputs[0], inputs[1]
        if self.attr(node, "transA"):
            a = a.T
        if self.attr(node, "transB"):
            bmat = bmat.T
        y = self.attr(node, "alpha") * (a @ bmat)
        if len(inputs) > 2 and inputs[2] is not None:
            y = y + self.attr(node, "beta") * inputs[2]
        return [y.astype(inputs[0].dtype)]

    def check(self, node, graph):
        problems = []
        if len(graph.shape_of(node.inputs[0])) != 2:
            problems.append("input A must be rank 2")
        # (a run-time B or C, a broadcast bias: rewritten before this check, see the docstring)
        return problems

    def canonicalize(self, node, graph):
        if node.attrs.get("_canonical"):
            return
        m, _, n = self._dims(node, graph)
        bmat = graph.weights[node.inputs[1]]
        w = (bmat if self.attr(node, "transB") else bmat.T) * self.attr(node, "alpha")  # W[n][k]
        inputs = [node.inputs[0], _store(graph, node.inputs[1], w)]
        if len(node.inputs) > 2 and node.inputs[2]:
            c = graph.weights[node.inputs[2]]
            bias = (self.attr(node, "beta") * c).reshape((n,) if c.size == n else (m, n))
            inputs.append(_store(graph, node.inputs[2], bias))
        node.inputs = inputs
        node.attrs.update({"alpha": 1.0, "beta": 1.0, "transB": 1, "_canonical": True})

    def lower(self, node, graph, b):
        from rosenna.ops import activation_expr

        m, k, n = self._dims(node, graph)
        a_name, w_name = node.inputs[0], node.inputs[1]
        bias = node.inputs[2] if len(node.inputs) > 2 else ""
        trans_a = self.attr(node, "transA")
        activation = node.attrs.get("_activation")
        out = node.outputs[0]
        # Output columns per pass over A (the tuning's gemm_columns): that many independent
        # accumulators share each load of A (register blocking on the host, instruction-level
        # parallelism on a GPU thread). Each output's sum keeps its order whatever the count.
        group = b.gemm_columns
        full, rest = divmod(n, group)

        def columns(mi, first, count):
            """Outputs first .. first+count-1 of row mi: one pass over A feeds `count` dot products."""
            accs = [Var(f"acc{j}") for j in range(count)]
            for acc in accs:
                b.assign(acc, Num(0.0))

            def dot(ki):
                a_ref = Ref(a_name, flat_index([ki, mi] if trans_a else [mi, ki], graph.shape_of(a_name)))
                for j, acc in enumerate(accs):
                    b.assign(acc, mul(Ref(w_name, (Idx.of(first) + j) * k + Idx.of(ki)), a_ref), accumulate=True)

            b.loop(k, dot)
            for j, acc in enumerate(accs):
                col = Idx.of(first) + j
                value = acc
                if bias:
                    bshape = graph.shape_of(bias)
                    b_idx = col if len(bshape) == 1 else Idx.of(mi) * n + col
                    value = add(acc, Ref(bias, b_idx))
                b.assign(Ref(out, Idx.of(mi) * n + col), activation_expr(activation, value))

        def row(mi):
            if full:
                b.loop(full, lambda nb: columns(mi, Idx.of(nb) * group, group))
            if rest:
                columns(mi, Idx(const=full * group), rest)

        b.loop(m, row)


def _store(graph, name, array):
    """``name`` when ``array`` equals that weight exactly, else a new weight holding ``array``
    (the original may be shared with other nodes, so it is never changed in place)."""
    original = graph.weights[name]
    array = np.ascontiguousarray(array, dtype=original.dtype)
    if array.shape == original.shape and np.array_equal(array, original, equal_nan=True):
        return name
    new = graph.new_name(name + "_canonical")
    graph.weights[new] = array
    return new
