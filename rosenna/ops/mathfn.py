"""More unary elementwise ops, each a kernel expression like those of rosenna.ops.activation (and
fused into a Gemm or Conv the same way):

Celu:             x > 0 ? x : alpha*(exp(x/alpha) - 1)   (alpha 1)
ThresholdedRelu:  x > alpha ? x : 0                      (alpha 1)
Shrink:           x < -lambd ? x + bias : (x > lambd ? x - bias : 0)   (lambd 0.5, bias 0)
IsNaN:            x == x ? 0 : 1
IsInf:            1 where x is +inf (detect_positive) or -inf (detect_negative), else 0
Round:            rint(x): to the nearest integer, ties to even
Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh:  the C library's and Fortran's intrinsics
                  (language table entries of rosenna/emit/lang.py)

Deviations: none beyond the math library's rounding; out-of-domain arguments give what the library
gives (NaN).
"""

import math

import numpy as np

from rosenna.loopir import Bin, Fn, Num, Select
from rosenna.ops.activation import Unary, _Fn, _get


class Celu(Unary):
    """Celu: x > 0 ? x : alpha*(exp(x/alpha) - 1)."""

    name = "Celu"
    attributes = {"alpha": 1.0}

    def expr(self, attrs, x):
        alpha = _get(attrs, "alpha", 1.0)
        return Select(x, Num(0.0), x, Bin("*", Num(alpha), Bin("-", Fn("exp", (Bin("/", x, Num(alpha)),)), Num(1.0))))

    def numpy(self, attrs, x):
        alpha = _get(attrs, "alpha", 1.0)
        return np.where(x > 0, x, alpha * (np.exp(x / alpha) - 1))


class ThresholdedRelu(Unary):
    """ThresholdedRelu: x > alpha ? x : 0."""

    name = "ThresholdedRelu"
    attributes = {"alpha": 1.0}

    def expr(self, attrs, x):
        return Select(x, Num(_get(attrs, "alpha", 1.0)), x, Num(0.0))

    def numpy(self, attrs, x):
        return np.where(x > _get(attrs, "alpha", 1.0), x, 0)


class Shrink(Unary):
    """Shrink: x < -lambd ? x + bias : (x > lambd ? x - bias : 0)."""

    name = "Shrink"
    attributes = {"lambd": 0.5, "bias": 0.0}

    def expr(self, attrs, x):
        lambd, bias = _get(attrs, "lambd", 0.5), _get(attrs, "bias", 0.0)
        upper = Select(x, Num(lambd), Bin("-", x, Num(bias)), Num(0.0))
        return Select(x, Num(-lambd), Bin("+", x, Num(bias)), upper, "<")

    def numpy(self, attrs, x):
        lambd, bias = _get(attrs, "lambd", 0.5), _get(attrs, "bias", 0.0)
        return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


class IsNaN(Unary):
    """IsNaN: 1 where x is NaN, else 0."""

    name = "IsNaN"

    def expr(self, attrs, x):
        return Select(x, x, Num(0.0), Num(1.0), "==")

    def numpy(self, attrs, x):
        return np.isnan(x)

    def evaluate(self, node, inputs):
        return [np.isnan(inputs[0])]


class IsInf(Unary):
    """IsInf: 1 where x is +inf or -inf (as detect_positive, detect_negative say), else 0."""

    name = "IsInf"
    attributes = {"detect_negative": 1, "detect_positive": 1}

    def expr(self, attrs, x):
        neg, pos = _get(attrs, "detect_negative", 1), _get(attrs, "detect_positive", 1)
        if neg and pos:
            return Select(Fn("abs", (x,)), Num(math.inf), Num(1.0), Num(0.0), "==")
        if neg or pos:
            return Select(x, Num(-math.inf if neg else math.inf), Num(1.0), Num(0.0), "==")
        return Bin("*", Num(0.0), Select(x, x, Num(0.0), Num(0.0), "=="))

    def numpy(self, attrs, x):
        neg, pos = _get(attrs, "detect_negative", 1), _get(attrs, "detect_positive", 1)
        return (np.isinf(x) & (((x < 0) & bool(neg)) | ((x > 0) & bool(pos))))

    def evaluate(self, node, inputs):
        return [self.numpy(node.attrs, inputs[0])]


class Round(_Fn):
    """Round: to the nearest integer, ties to even."""

    name, fn, numpy_fn = "Round", "rint", staticmethod(np.round)


class Tan(_Fn):
    """Tan: the tangent."""

    name, fn, numpy_fn = "Tan", "tan", staticmethod(np.tan)


class Asin(_Fn):
    """Asin: the arcsine."""

    name, fn, numpy_fn = "Asin", "asin", staticmethod(np.arcsin)


class Acos(_Fn):
    """Acos: the arccosine."""

    name, fn, numpy_fn = "Acos", "acos", staticmethod(np.arccos)


class Atan(_Fn):
    """Atan: the arctangent."""

    name, fn, numpy_fn = "Atan", "atan", staticmethod(np.arctan)


class Sinh(_Fn):
    """Sinh: the hyperbolic sine."""

    name, fn, numpy_fn = "Sinh", "sinh", staticmethod(np.sinh)


class Cosh(_Fn):
    """Cosh: the hyperbolic cosine."""

    name, fn, numpy_fn = "Cosh", "cosh", staticmethod(np.cosh)


class Asinh(_Fn):
    """Asinh: the inverse hyperbolic sine."""

    name, fn, numpy_fn = "Asinh", "asinh", staticmethod(np.arcsinh)


class Acosh(_Fn):
    """Acosh: the inverse hyperbolic cosine."""

    name, fn, numpy_fn = "Acosh", "acosh", staticmethod(np.arccosh)


class Atanh(_Fn):
    """Atanh: the inverse hyperbolic tangent."""

    name, fn, numpy_fn = "Atanh", "atanh", staticmethod(np.arctanh)
