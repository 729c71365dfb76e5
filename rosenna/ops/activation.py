"""Unary elementwise ops (activations): ``Y[i] = f(X[i])``. Each gives its formula once, as a
kernel expression; the same formula serves the standalone op and the epilogue that
``fuse_activation`` attaches to a Gemm or Conv.

Relu:        x > 0 ? x : 0                        (no libm call: vectorises)
LeakyRelu:   x > 0 ? x : alpha*x                  (alpha 0.01)
Elu:         x > 0 ? x : alpha*(exp(x) - 1)       (alpha 1)
Selu:        gamma * (x > 0 ? x : alpha*(exp(x) - 1))   (ONNX's alpha and gamma defaults)
Sigmoid:     1 / (1 + exp(-x))
HardSigmoid: max(0, min(1, alpha*x + beta))       (alpha 0.2, beta 0.5)
Tanh:        tanh(x)
Softplus:    max(x, 0) + log(1 + exp(-|x|))       (the overflow-free form of log(1 + exp(x)))
Softsign:    x / (1 + |x|)
Exp, Log, Sqrt, Erf, Neg:  exp(x), log(x), sqrt(x), erf(x), -x
Abs, Sin, Cos, Floor, Ceil:  |x|, sin(x), cos(x), floor(x), ceil(x)
Reciprocal:  1 / x
Sign:        x > 0 ? 1 : (x < 0 ? -1 : 0*x)     (0*x keeps a NaN a NaN, as numpy's sign does)
Mish:        x * tanh(softplus(x))              (softplus in the stable form below)
HardSwish:   x * max(0, min(1, x/6 + 1/2))
Swish:       x * sigmoid(alpha*x)               (alpha 1: SiLU; ``fuse.silu_to_swish`` rewrites
             the Mul(x, Sigmoid(x)) that exporters write for SiLU into it, so it fuses like the rest)
Clip:        min(max(x, lo), hi); lo/hi from attributes (opset < 11) or constant inputs
             (opset >= 11); a missing bound is no bound. ``canonicalize`` moves constant inputs
             into the private attributes ``_min``/``_max`` so a fused Clip keeps its bounds.
Gelu:        0.5*x*(1 + erf(x/sqrt(2))), or with approximate="tanh"
             0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3)))

Integer and boolean values are held in the working float type (see rosenna.passes.support), so
Abs, Neg and Sign of an integer are exact wherever the value is.

Deviations, candidly: maxima and minima are written as comparisons (``a > b ? a : b``), so a NaN
input gives what the comparison gives, not necessarily NaN; Exp, Log and Sqrt of out-of-domain
values give what the C library and Fortran intrinsics give (inf, NaN). Softplus uses the stable
form above, which differs from log(1 + exp(x)) by rounding only (and is finite where the latter
overflows).
"""

import math

import numpy as np

from rosenna.loopir import Bin, Fn, Num, Ref, Select, flat_index
from rosenna.ops.base import Op, const_input


def _get(attrs, key, default):
    value = attrs.get(key)
    return default if value is None else value


class Unary(Op):
    """An elementwise activation; subclasses define ``expr`` and ``numpy``."""

    def expr(self, attrs, x):
        raise NotImplementedError

    def numpy(self, attrs, x):
        raise NotImplementedError

    def evaluate(self, node, inputs):
        return [np.asarray(self.numpy(node.attrs, inputs[0])).astype(inputs[0].dtype)]

    def lower(self, node, graph, b):
        size = int(np.prod(graph.shape_of(node.inputs[0]), dtype=np.int64))
        src, dst = node.inputs[0], node.outputs[0]
        b.loop(size, lambda i: b.assign(Ref(dst, flat_index([i], (size,))),
                                        self.expr(node.attrs, Ref(src, flat_index([i], (size,))))))


class Relu(Unary):
    name = "Relu"

    def expr(self, attrs, x):
        return Select(x, Num(0.0), x, Num(0.0))

    def numpy(self, attrs, x):
        return np.maximum(x, 0)


class LeakyRelu(Unary):
    name = "LeakyRelu"
    attributes = {"alpha": 0.01}

    def expr(self, attrs, x):
        return Select(x, Num(0.0), x, Bin("*", Num(_get(attrs, "alpha", 0.01)), x))

    def numpy(self, attrs, x):
        return np.where(x > 0, x, _get(attrs, "alpha", 0.01) * x)


class Elu(Unary):
    name = "Elu"
    attributes = {"alpha": 1.0}

    def expr(self, attrs, x):
        neg = Bin("*", Num(_get(attrs, "alpha", 1.0)), Bin("-", Fn("exp", (x,)), Num(1.0)))
        return Select(x, Num(0.0), x, neg)

    def numpy(self, attrs, x):
        return np.where(x > 0, x, _get(attrs, "alpha", 1.0) * (np.exp(x) - 1))


SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875


class Selu(Unary):
    name = "Selu"
    attributes = {"alpha": SELU_ALPHA, "gamma": SELU_GAMMA}

    def expr(self, attrs, x):
        alpha, gamma = _get(attrs, "alpha", SELU_ALPHA), _get(attrs, "gamma", SELU_GAMMA)
        neg = Bin("*", Num(alpha), Bin("-", Fn("exp", (x,)), Num(1.0)))
        return Bin("*", Num(gamma), Select(x, Num(0.0), x, neg))

    def numpy(self, attrs, x):
        alpha, gamma = _get(attrs, "alpha", SELU_ALPHA), _get(attrs, "gamma", SELU_GAMMA)
        return gamma * np.where(x > 0, x, alpha * (np.exp(x) - 1))


class Sigmoid(Unary):
    name = "Sigmoid"

    def expr(self, attrs, x):
        return Fn("sigmoid", (x,))

    def numpy(self, attrs, x):
        return 1.0 / (1.0 + np.exp(-x))


class HardSigmoid(Unary):
    name = "HardSigmoid"
    attributes = {"alpha": 0.2, "beta": 0.5}

    def expr(self, attrs, x):
        lin = Bin("+", Bin("*", Num(_get(attrs, "alpha", 0.2)), x), Num(_get(attrs, "beta", 0.5)))
        low = Select(lin, Num(0.0), lin, Num(0.0))
        return Select(low, Num(1.0), Num(1.0), low)

    def numpy(self, attrs, x):
        return np.clip(_get(attrs, "alpha", 0.2) * x + _get(attrs, "beta", 0.5), 0, 1)


class Tanh(Unary):
    name = "Tanh"

    def expr(self, attrs, x):
        return Fn("tanh", (x,))

    def numpy(self, attrs, x):
        return np.tanh(x)


class Softplus(Unary):
    name = "Softplus"

    def expr(self, attrs, x):
        return _softplus(x)

    def numpy(self, attrs, x):
        return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


class Softsign(Unary):
    name = "Softsign"

    def expr(self, attrs, x):
        return Bin("/", x, Bin("+", Num(1.0), Fn("abs", (x,))))

    def numpy(self, attrs, x):
        return x / (1 + np.abs(x))


class _Fn(Unary):
    """A unary op that is one math function of the emitters' tables."""

    fn = ""
    numpy_fn = None

    def expr(self, attrs, x):
        return Fn(self.fn, (x,))

    def numpy(self, attrs, x):
        return type(self).numpy_fn(x)


class Exp(_Fn):
    name, fn, numpy_fn = "Exp", "exp", staticmethod(np.exp)


class Log(_Fn):
    name, fn, numpy_fn = "Log", "log", staticmethod(np.log)


class Sqrt(_Fn):
    name, fn, numpy_fn = "Sqrt", "sqrt", staticmethod(np.sqrt)


class Erf(_Fn):
    name, fn = "Erf", "erf"

    def numpy(self, attrs, x):
        return np.vectorize(math.erf, otypes=[np.float64])(x)


class Abs(_Fn):
    name, fn, numpy_fn = "Abs", "abs", staticmethod(np.abs)

    def evaluate(self, node, inputs):
        return [np.abs(inputs[0])]


class Sin(_Fn):
    name, fn, numpy_fn = "Sin", "sin", staticmethod(np.sin)


class Cos(_Fn):
    name, fn, numpy_fn = "Cos", "cos", staticmethod(np.cos)


class Floor(_Fn):
    name, fn, numpy_fn = "Floor", "floor", staticmethod(np.floor)


class Ceil(_Fn):
    name, fn, numpy_fn = "Ceil", "ceil", staticmethod(np.ceil)


class Reciprocal(Unary):
    name = "Reciprocal"

    def expr(self, attrs, x):
        return Bin("/", Num(1.0), x)

    def numpy(self, attrs, x):
        return 1.0 / x


class Sign(Unary):
    name = "Sign"

    def expr(self, attrs, x):
        return Select(x, Num(0.0), Num(1.0), Select(x, Num(0.0), Num(-1.0), Bin("*", Num(0.0), x), "<"))

    def numpy(self, attrs, x):
        return np.sign(x)

    def evaluate(self, node, inputs):
        return [np.sign(inputs[0])]


def _softplus(x):
    pos = Select(x, Num(0.0), x, Num(0.0))
    return Bin("+", pos, Fn("log", (Bin("+", Num(1.0), Fn("exp", (Bin("-", Num(0.0), Fn("abs", (x,))),))),)))


class Mish(Unary):
    name = "Mish"

    def expr(self, attrs, x):
        return Bin("*", x, Fn("tanh", (_softplus(x),)))

    def numpy(self, attrs, x):
        return x * np.tanh(np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))))


class HardSwish(Unary):
    name = "HardSwish"

    def expr(self, attrs, x):
        return Bin("*", x, HardSigmoid().expr({"alpha": 1.0 / 6.0, "beta": 0.5}, x))

    def numpy(self, attrs, x):
        return x * np.clip(x / 6.0 + 0.5, 0, 1)


class Swish(Unary):
    name = "Swish"
    attributes = {"alpha": 1.0}

    def expr(self, attrs, x):
        alpha = _get(attrs, "alpha", 1.0)
        return Bin("*", x, Fn("sigmoid", (x if alpha == 1.0 else Bin("*", Num(alpha), x),)))

    def numpy(self, attrs, x):
        return x / (1.0 + np.exp(-_get(attrs, "alpha", 1.0) * x))


class Neg(Unary):
    name = "Neg"

    def expr(self, attrs, x):
        return Bin("-", Num(0.0), x)

    def numpy(self, attrs, x):
        return -x

    def evaluate(self, node, inputs):  # shape arithmetic may negate integers
        return [np.negative(inputs[0])]


class Gelu(Unary):
    name = "Gelu"
    attributes = {"approximate": "none"}

    def expr(self, attrs, x):
        half_x = Bin("*", Num(0.5), x)
        if _get(attrs, "approximate", "none") == "tanh":
            cube = Bin("*", Num(0.044715), Bin("*", x, Bin("*", x, x)))
            inner = Bin("*", Num(math.sqrt(2.0 / math.pi)), Bin("+", x, cube))
            return Bin("*", half_x, Bin("+", Num(1.0), Fn("tanh", (inner,))))
        return Bin("*", half_x, Bin("+", Num(1.0), Fn("erf", (Bin("*", x, Num(1.0 / math.sqrt(2.0))),))))

    def numpy(self, attrs, x):
        if _get(attrs, "approximate", "none") == "tanh":
            return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        return 0.5 * x * (1 + np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2)))

    def check(self, node, graph):
        mode = self.attr(node, "approximate")
        return [] if mode in ("none", "tanh") else [f"approximate={mode!r}; rosenna knows 'none' and 'tanh'"]


class Clip(Unary):
    name = "Clip"
    attributes = {"min": None, "max": None}

    def _bounds(self, node, graph_or_inputs):
        lo, hi = node.attrs.get("_min", node.attrs.get("min")), node.attrs.get("_max", node.attrs.get("max"))
        for position in (1, 2):
            if isinstance(graph_or_inputs, list):
                arr = graph_or_inputs[position] if len(graph_or_inputs) > position else None
            else:
                arr = const_input(graph_or_inputs, node, position)
            if arr is not None:
                value = float(np.asarray(arr).reshape(-1)[0])
                lo, hi = (value, hi) if position == 1 else (lo, value)
        return lo, hi

    def check(self, node, graph):
        for position, what in ((1, "min"), (2, "max")):
            if len(node.inputs) > position and node.inputs[position] and not graph.is_const(node.inputs[position]):
                return [f"the {what} bound is computed at run time; rosenna needs it constant"]
        return []

    def canonicalize(self, node, graph):
        lo, hi = self._bounds(node, graph)
        node.attrs = {"_min": lo, "_max": hi}
        node.inputs = node.inputs[:1]

    def expr(self, attrs, x):
        lo, hi = attrs.get("_min", attrs.get("min")), attrs.get("_max", attrs.get("max"))
        if lo is not None:
            x = Select(Num(lo), x, Num(lo), x)
        if hi is not None:
            x = Select(x, Num(hi), Num(hi), x)
        return x

    def numpy(self, attrs, x):
        raise AssertionError("Clip evaluates through evaluate()")

    def evaluate(self, node, inputs):
        lo, hi = self._bounds(node, inputs)
        out = inputs[0]
        if lo is not None:
            out = np.maximum(out, lo)
        if hi is not None:
            out = np.minimum(out, hi)
        return [np.asarray(out).astype(inputs[0].dtype)]
