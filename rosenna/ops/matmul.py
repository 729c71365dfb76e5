"""MatMul: ``Y[..., m, n] = sum_k A[..., m, k] * B[k, n]`` (numpy rules, batch axes broadcast).

Either operand, or both, may be a constant, of any rank; both may be computed at run time
(per-point bilinear forms, attention-like blocks), with any batch axes. A rank-2 runtime A times a
constant rank-2 B is rewritten to Gemm by the ``matmul_to_gemm`` pass, so this lowering serves the
remaining forms (a constant with batch axes is read in place, broadcast like a run-time operand).
"""

import numpy as np

from rosenna.loopir import Num, Ref, Var, flat_index, mul
from rosenna.ops.base import Op, broadcast_errors


def _promote(shape_a, shape_b):
    """numpy matmul shapes: (rank-2 views of A and B, the output shape)."""
    a = (1,) + tuple(shape_a) if len(shape_a) == 1 else tuple(shape_a)
    bshape = tuple(shape_b) + (1,) if len(shape_b) == 1 else tuple(shape_b)
    batch = np.broadcast_shapes(a[:-2], bshape[:-2])
    out = tuple(batch) + (a[-2], bshape[-1])
    if len(shape_a) == 1:
        out = out[:-2] + out[-1:]
    if len(shape_b) == 1:
        out = out[:-1]
    return a, bshape, out


class MatMul(Op):
    name = "MatMul"

    def shape_errors(self, node, graph):
        shape_a, shape_b = (tuple(graph.shape_of(n)) for n in node.inputs[:2])
        if not shape_a or not shape_b:
            return [f"operands of shapes {shape_a} and {shape_b}: MatMul needs rank 1 or more"]
        k_a, k_b = shape_a[-1], (shape_b[0] if len(shape_b) == 1 else shape_b[-2])
        if k_a != k_b:
            return [f"inner dimensions disagree: A {shape_a} has {k_a}, B {shape_b} has {k_b}"]
        a, bshape = (1,) + shape_a if len(shape_a) == 1 else shape_a, shape_b + (1,) if len(shape_b) == 1 else shape_b
        problems = broadcast_errors([a[:-2], bshape[:-2]])
        return [f"batch dimensions of A {shape_a} and B {shape_b} do not broadcast"] if problems else []

    def shape(self, node, graph):
        _, _, out = _promote(graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1]))
        return [out]

    def evaluate(self, node, inputs):
        return [np.matmul(inputs[0], inputs[1])]

    def lower(self, node, graph, b):
        a_name, b_name = node.inputs[:2]
        a2, b2, _ = _promote(graph.shape_of(a_name), graph.shape_of(b_name))
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
        m, k, n = a2[-2], a2[-1], b2[-1]
        out_full = batch + (m, n)
        acc = Var("acc")

        def body(idx):
            *bi, mi, ni = idx
            b.assign(acc, Num(0.0))

            def dot(ki):
                ia = _index(bi, [mi, ki], batch, a2)
                ib = _index(bi, [ki, ni], batch, b2)
                b.assign(acc, mul(Ref(a_name, ia), Ref(b_name, ib)), accumulate=True)

            b.loop(k, dot)
            b.assign(Ref(node.outputs[0], _index(bi, [mi, ni], batch, out_full)), acc)

        b.nest(out_full, body)


def _index(batch_idx, last_two, batch_shape, shape):
    """Flat index into ``shape`` whose leading axes broadcast against ``batch_shape``."""
    from rosenna.loopir import broadcast_index, flat_index

    lead = len(shape) - 2
    total = broadcast_index(batch_idx, batch_shape, shape[:lead]) if lead else 0
    inner = flat_index(last_two, shape[-2:])
    return inner + (total * (shape[-2] * shape[-1]) if lead else 0)


class Einsum(Op):
    """Einsum: products of the operands summed over the labels the output does not keep.

    ``...`` stands for an operand's axes that no label names (their count follows from its static
    rank); they are given fresh labels, right-aligned across operands so that they broadcast as
    numpy does, and kept in the output (before the other labels when the output is implicit)."""

    name = "Einsum"
    attributes = {"equation": None}

    def _parse(self, node, graph):
        """``(operand label strings, output labels)`` with ``...`` spelled out, or None for a form
        rosenna does not take (or an equation that does not match the operands' ranks)."""
        equation = str(self.attr(node, "equation") or "").replace(" ", "")
        if not equation:
            return None
        lhs, arrow, rhs = equation.partition("->")
        terms = lhs.split(",")
        names = [n for n in node.inputs if n]
        if len(terms) != len(names) or not all(t.replace("...", "").isalpha() or t.replace("...", "") == ""
                                                 for t in terms + [rhs]):
            return None
        if any(t.count("...") > 1 for t in terms + [rhs]):
            return None
        free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in equation]
        counts = []
        for term, name in zip(terms, names):
            extra = len(graph.shape_of(name)) - len(term.replace("...", ""))
            if ("..." in term and extra < 0) or ("..." not in term and extra != 0):
                return None
            counts.append(extra if "..." in term else 0)
        width = max(counts, default=0)
        if width > len(free):
            return None
        spelled = "".join(free[:width])  # the ellipsis axes, outermost first
        terms = [t.replace("...", spelled[width - c:]) for t, c in zip(terms, counts)]
        labels = "".join(terms)
        if not arrow:  # implicit output: the ellipsis axes, then the labels that appear once, alphabetically
            rhs = spelled + "".join(sorted(label for label in set(labels) if labels.count(label) == 1
                                           and label not in spelled))
        else:
            rhs = rhs.replace("...", spelled)
        if len(set(rhs)) != len(rhs) or not set(rhs) <= set(labels):
            return None
        return terms, rhs

    def _sizes(self, node, graph):
        terms, _ = self._parse(node, graph)
        sizes = {}
        for term, name in zip(terms, node.inputs):
            for label, dim in zip(term, graph.shape_of(name)):
                sizes[label] = max(sizes.get(label, 1), dim)
        return sizes

    def evaluate(self, node, inputs):
        return [np.asarray(np.einsum(str(self.attr(node, "equation")), *inputs))]

    def shape(self, node, graph):
        _, rhs = self._parse(node, graph)
        sizes = self._sizes(node, graph)
        return [tuple(sizes[label] for label in rhs)]

    def check(self, node, graph):
        if self._parse(node, graph) is None:
            return [f"equation {self.attr(node, 'equation')!r} does not match the operands' ranks or is not an "
                    "einsum equation (letters, ',', '->' and at most one '...' per term)"]
        return []

    def lower(self, node, graph, b):
        terms, rhs = self._parse(node, graph)
        sizes = self._sizes(node, graph)
        seen = "".join(terms)
        summed = [label for i, label in enumerate(seen) if label not in rhs and label not in seen[:i]]
        out_shape = tuple(sizes[label] for label in rhs)
        acc = Var("acc")

        def product(index):
            expr = None
            for term, name in zip(terms, node.inputs):
                shape = graph.shape_of(name)
                # a broadcast (size-1) axis reads element 0
                ref = Ref(name, flat_index([index[l] if d != 1 else 0 for l, d in zip(term, shape)], shape))
                expr = ref if expr is None else mul(expr, ref)
            return expr

        def body(out_idx):
            index = dict(zip(rhs, out_idx))
            target = Ref(node.outputs[0], flat_index(out_idx, out_shape))
            if not summed:
                b.assign(target, product(index))
                return
            b.assign(acc, Num(0.0))
            b.nest([sizes[label] for label in summed],
                   lambda s_idx: b.assign(acc, product({**index, **dict(zip(summed, s_idx))}), accumulate=True))
            b.assign(target, acc)

        b.nest(out_shape, body)
