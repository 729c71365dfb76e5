"""Unary activations: ``Y[i] = f(X[i])``. Each gives its formula once, as a kernel expression.

Relu:    max(x, 0)            (written as ``x > 0 ? x : 0``: vectorises, no libm call)
Tanh:    tanh(x)
Sigmoid: 1 / (1 + exp(-x))

The same formula serves the standalone op and the epilogue that ``fuse_activation`` attaches to a
Gemm.
"""

import numpy as np

from rosenna.kernel import Fn, Num, Ref, Select, flat_index
from rosenna.ops.base import Op


class Unary(Op):
    """An elementwise activation; subclasses define ``expr`` and ``numpy``."""

    def expr(self, attrs, x):
        raise NotImplementedError

    def numpy(self, attrs, x):
        raise NotImplementedError

    def evaluate(self, node, inputs):
        return [self.numpy(node.attrs, inputs[0]).astype(inputs[0].dtype)]

    def lower(self, node, graph, b):
        size = int(np.prod(graph.shape_of(node.inputs[0])))
        src, dst = node.inputs[0], node.outputs[0]
        b.loop(size, lambda i: b.assign(Ref(dst, flat_index([i], (size,))),
                                        self.expr(node.attrs, Ref(src, flat_index([i], (size,))))))


class Relu(Unary):
    name = "Relu"

    def expr(self, attrs, x):
        return Select(x, Num(0.0), x, Num(0.0))

    def numpy(self, attrs, x):
        return np.maximum(x, 0)


class Tanh(Unary):
    name = "Tanh"

    def expr(self, attrs, x):
        return Fn("tanh", (x,))

    def numpy(self, attrs, x):
        return np.tanh(x)


class Sigmoid(Unary):
    name = "Sigmoid"

    def expr(self, attrs, x):
        return Fn("sigmoid", (x,))

    def numpy(self, attrs, x):
        return 1.0 / (1.0 + np.exp(-x))
