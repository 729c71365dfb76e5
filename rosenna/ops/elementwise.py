"""Elementwise ops over several inputs with numpy (multidirectional) broadcasting.

Add, Sub, Mul, Div:  ``Y[i] = A[bcast(i)] (op) B[bcast(i)]``
Sum:                 ``Y[i] = X1[bcast(i)] + X2[bcast(i)] + ...`` (left to right)
Max, Min:            the largest / smallest of the operands, as comparisons ``a > b ? a : b``
PRelu:               ``Y[i] = X[i] > 0 ? X[i] : slope[bcast(i)] * X[i]`` (slope broadcasts to X)

A size-1 constant operand is emitted as a literal rather than a weight. Operands may be run-time
values or constants. Deviation: Max and Min of a NaN give what the comparison gives (the other
operand or NaN, by position), not always NaN as numpy does.
"""

import functools

import numpy as np

from rosenna.loopir import Bin, Num, Ref, Select, broadcast_index, flat_index
from rosenna.ops.base import Op, broadcast_errors


class Binary(Op):
    """One binary elementwise op; subclasses give the numpy function and the kernel operator."""

    numpy_fn = None
    symbol = None

    def shape_errors(self, node, graph):
        return broadcast_errors([graph.shape_of(n) for n in node.inputs if n])

    def shape(self, node, graph):
        return [tuple(np.broadcast_shapes(*(graph.shape_of(n) for n in node.inputs if n)))]

    def evaluate(self, node, inputs):
        return [type(self).numpy_fn(inputs[0], inputs[1]).astype(np.result_type(inputs[0], inputs[1]))]

    def combine(self, operands):
        """The kernel expression of the op over its operand expressions."""
        return Bin(self.symbol, operands[0], operands[1])

    def lower(self, node, graph, b):
        out_shape = self.shape(node, graph)[0]

        def operand(name, idx):
            if graph.is_const(name) and graph.weights[name].size == 1:
                return Num(float(graph.weights[name].reshape(-1)[0]))
            return Ref(name, broadcast_index(idx, out_shape, graph.shape_of(name)))

        def body(idx):
            operands = [operand(name, idx) for name in node.inputs if name]
            b.assign(Ref(node.outputs[0], flat_index(idx, out_shape)), self.combine(operands))

        b.nest(out_shape, body)


class Add(Binary):
    name = "Add"
    numpy_fn = staticmethod(np.add)
    symbol = "+"


class Sub(Binary):
    name = "Sub"
    numpy_fn = staticmethod(np.subtract)
    symbol = "-"


class Mul(Binary):
    name = "Mul"
    numpy_fn = staticmethod(np.multiply)
    symbol = "*"


class Div(Binary):
    name = "Div"
    numpy_fn = staticmethod(np.divide)
    symbol = "/"

    def evaluate(self, node, inputs):
        a, b = inputs
        if np.issubdtype(a.dtype, np.integer):  # shape arithmetic in exported graphs
            return [(np.trunc(a / b)).astype(a.dtype)]
        return super().evaluate(node, inputs)


class Variadic(Binary):
    """One or more operands, folded left to right with a pairwise rule (numpy and kernel)."""

    def pair(self, a, b):
        raise NotImplementedError

    def kernel_pair(self, a, b):
        raise NotImplementedError

    def evaluate(self, node, inputs):
        return [np.asarray(functools.reduce(self.pair, inputs))]

    def combine(self, operands):
        return functools.reduce(self.kernel_pair, operands)


class Sum(Variadic):
    name = "Sum"

    def pair(self, a, b):
        return a + b

    def kernel_pair(self, a, b):
        return Bin("+", a, b)


class Max(Variadic):
    name = "Max"

    def pair(self, a, b):
        return np.maximum(a, b)

    def kernel_pair(self, a, b):
        return Select(b, a, b, a)


class Min(Variadic):
    name = "Min"

    def pair(self, a, b):
        return np.minimum(a, b)

    def kernel_pair(self, a, b):
        return Select(a, b, b, a)


class PRelu(Binary):
    name = "PRelu"

    def evaluate(self, node, inputs):
        x, slope = inputs
        return [np.where(x > 0, x, slope * x).astype(x.dtype)]

    def check(self, node, graph):
        x, slope = (graph.shape_of(n) for n in node.inputs[:2])
        if tuple(np.broadcast_shapes(x, slope)) != tuple(x):
            return [f"slope of shape {tuple(slope)} does not broadcast to X of shape {tuple(x)}"]
        return []

    def combine(self, operands):
        x, slope = operands
        return Select(x, Num(0.0), x, Bin("*", slope, x))
