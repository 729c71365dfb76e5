"""Binary elementwise ops with numpy broadcasting: ``Y[i] = A[bcast(i)] (op) B[bcast(i)]``.

A size-1 constant operand is emitted as a literal rather than a weight.
"""

import numpy as np

from rosenna.kernel import Bin, Num, Ref, broadcast_index, flat_index
from rosenna.ops.base import Op


class Binary(Op):
    """One binary elementwise op; subclasses give the numpy function and the kernel operator."""

    numpy_fn = None
    symbol = None

    def shape(self, node, graph):
        return [tuple(np.broadcast_shapes(*(graph.shape_of(n) for n in node.inputs)))]

    def evaluate(self, node, inputs):
        return [type(self).numpy_fn(inputs[0], inputs[1]).astype(np.result_type(inputs[0], inputs[1]))]

    def lower(self, node, graph, b):
        out_shape = self.shape(node, graph)[0]

        def operand(name, idx):
            if graph.is_const(name) and graph.weights[name].size == 1:
                return Num(float(graph.weights[name].reshape(-1)[0]))
            return Ref(name, broadcast_index(idx, out_shape, graph.shape_of(name)))

        def body(idx):
            lhs, rhs = (operand(name, idx) for name in node.inputs[:2])
            b.assign(Ref(node.outputs[0], flat_index(idx, out_shape)), Bin(self.symbol, lhs, rhs))

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
