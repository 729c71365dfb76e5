"""Elementwise ops over several inputs with numpy (multidirectional) broadcasting.

Add, Sub, Mul, Div:  ``Y[i] = A[bcast(i)] (op) B[bcast(i)]``
Sum:                 ``Y[i] = X1[bcast(i)] + X2[bcast(i)] + ...`` (left to right)
Max, Min:            the largest / smallest of the operands, as comparisons ``a > b ? a : b``
PRelu:               ``Y[i] = X[i] > 0 ? X[i] : slope[bcast(i)] * X[i]`` (slope broadcasts to X)
Pow:                 ``Y[i] = pow(A[bcast(i)], B[bcast(i)])``; a constant exponent 2 is ``a*a``,
                     1 is ``a``
Less, LessOrEqual, Greater, GreaterOrEqual, Equal:  the mask ``A (cmp) B ? 1 : 0``
Not, And, Or:        ``A == 0 ? 1 : 0``, ``A != 0 ? (B != 0 ? 1 : 0) : 0``, ``A != 0 ? 1 : (B != 0 ? 1 : 0)``
Xor:                 ``(A != 0 ? 1 : 0) != (B != 0 ? 1 : 0) ? 1 : 0``
Mean:                ``(X1[bcast(i)] + X2[bcast(i)] + ...) / n`` (the sum left to right)
Where:               ``Y[i] = C[bcast(i)] != 0 ? X[bcast(i)] : Y[bcast(i)]``

Masks (ONNX bool tensors) are held as 0 and 1 in the working float type, like every integer value
(see rosenna.passes.support); a mask compares and selects exactly.

A size-1 constant operand is emitted as a literal rather than a weight. Operands may be run-time
values or constants. Deviation: Max and Min of a NaN give what the comparison gives (the other
operand or NaN, by position), not always NaN as numpy does. Div of integer values is
``trunc(a / b)`` in floating point, exact while the operands fit the float type's significand.
"""

import functools

import numpy as np

from rosenna.loopir import Bin, Fn, Num, Ref, Select, broadcast_index, flat_index
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

    def combine_for(self, node, graph):
        """``combine`` as this node needs it (an op may look at its operands' types or constants)."""
        return self.combine

    def lower(self, node, graph, b):
        out_shape = self.shape(node, graph)[0]

        def operand(name, idx):
            if graph.is_const(name) and graph.weights[name].size == 1:
                return Num(float(graph.weights[name].reshape(-1)[0]))
            return Ref(name, broadcast_index(idx, out_shape, graph.shape_of(name)))

        combine = self.combine_for(node, graph)

        def body(idx):
            operands = [operand(name, idx) for name in node.inputs if name]
            b.assign(Ref(node.outputs[0], flat_index(idx, out_shape)), combine(operands))

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

    def combine_for(self, node, graph):
        dtype = graph.values[node.outputs[0]].dtype if node.outputs[0] in graph.values else None
        if dtype is not None and np.dtype(dtype).kind in "iu":
            return lambda operands: Fn("trunc", (Bin("/", operands[0], operands[1]),))
        return self.combine


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


class Pow(Binary):
    name = "Pow"

    def shape(self, node, graph):  # the exponent broadcasts; the base's type is kept
        return [tuple(np.broadcast_shapes(*(graph.shape_of(n) for n in node.inputs)))]

    def evaluate(self, node, inputs):
        return [np.power(inputs[0], inputs[1].astype(inputs[0].dtype)).astype(inputs[0].dtype)]

    def combine_for(self, node, graph):
        exponent = graph.weights.get(node.inputs[1])
        if exponent is not None and exponent.size == 1:
            value = float(exponent.reshape(-1)[0])
            if value == 1.0:
                return lambda operands: operands[0]
            if value == 2.0:
                return lambda operands: Bin("*", operands[0], operands[0])
        return lambda operands: Fn("pow", (operands[0], operands[1]))


class Compare(Binary):
    """``A (cmp) B``: a mask of ones and zeros."""

    cmp = ""

    def evaluate(self, node, inputs):
        return [np.asarray(type(self).numpy_fn(inputs[0], inputs[1]))]

    def combine(self, operands):
        return Select(operands[0], operands[1], Num(1.0), Num(0.0), self.cmp)


class Less(Compare):
    name, cmp, numpy_fn = "Less", "<", staticmethod(np.less)


class LessOrEqual(Compare):
    name, cmp, numpy_fn = "LessOrEqual", "<=", staticmethod(np.less_equal)


class Greater(Compare):
    name, cmp, numpy_fn = "Greater", ">", staticmethod(np.greater)


class GreaterOrEqual(Compare):
    name, cmp, numpy_fn = "GreaterOrEqual", ">=", staticmethod(np.greater_equal)


class Equal(Compare):
    name, cmp, numpy_fn = "Equal", "==", staticmethod(np.equal)


def _truth(x):
    return Select(x, Num(0.0), Num(1.0), Num(0.0), "!=")


class And(Compare):
    name, numpy_fn = "And", staticmethod(np.logical_and)

    def combine(self, operands):
        return Select(operands[0], Num(0.0), _truth(operands[1]), Num(0.0), "!=")


class Or(Compare):
    name, numpy_fn = "Or", staticmethod(np.logical_or)

    def combine(self, operands):
        return Select(operands[0], Num(0.0), Num(1.0), _truth(operands[1]), "!=")


class Not(Compare):
    name = "Not"

    def evaluate(self, node, inputs):
        return [np.logical_not(inputs[0])]

    def combine(self, operands):
        return Select(operands[0], Num(0.0), Num(1.0), Num(0.0), "==")


class Where(Binary):
    name = "Where"

    def evaluate(self, node, inputs):
        return [np.where(inputs[0], inputs[1], inputs[2])]

    def combine(self, operands):
        return Select(operands[0], Num(0.0), operands[1], operands[2], "!=")


class Xor(Compare):
    """Xor: the logical exclusive or of two masks."""

    name, numpy_fn = "Xor", staticmethod(np.logical_xor)

    def combine(self, operands):
        return Select(_truth(operands[0]), _truth(operands[1]), Num(1.0), Num(0.0), "!=")


class Mean(Variadic):
    """Mean: the elementwise mean of its inputs."""

    name = "Mean"

    def evaluate(self, node, inputs):
        return [np.asarray(functools.reduce(np.add, inputs) / len(inputs)).astype(inputs[0].dtype)]

    def combine(self, operands):
        total = functools.reduce(lambda a, b: Bin("+", a, b), operands)
        return total if len(operands) == 1 else Bin("/", total, Num(float(len(operands))))
