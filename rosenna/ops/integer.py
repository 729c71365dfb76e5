"""Integer arithmetic and bitwise ops (values held in the working float type, exactly while they
fit its significand: 2**24 in single precision, 2**53 in double, see rosenna.passes.support).

Mod:          fmod=1: ``fmod(a, b)`` (sign of a, C's fmod, Fortran's mod);
              fmod=0: the sign of b, ``t = fmod(a, b); t*b < 0 ? t + b : t`` (Python's %)
BitShift:     RIGHT ``floor(x / 2**y)`` (arithmetic: a negative x keeps its sign);
              LEFT ``x * 2**y`` wrapped into the type's range (the bits shifted out are dropped);
              a shift below 0 or of the width or more shifts by the width (0, or -1 for a
              negative x shifted right), as ONNX's cases expect
BitwiseAnd, BitwiseOr, BitwiseXor:  through a 64-bit integer and back (language table entries
              ``bitand``, ``bitor``, ``bitxor``: C's ``&``, Fortran's ``iand`` ...)
BitwiseNot:   signed ``-x - 1``; unsigned of n bits ``(2**n - 1) - x``

All with numpy broadcasting. Deviations: a value beyond the float type's significand is not held
exactly (so a uint64 above 2**53 is not either); a remainder by zero gives what fmod gives (NaN),
where ONNX leaves it undefined.
"""

import numpy as np

from rosenna.loopir import Bin, Fn, Num, Ref, Select, flat_index
from rosenna.ops.base import Op
from rosenna.ops.elementwise import Binary


def _out_dtype(node, graph):
    value = graph.values.get(node.outputs[0])
    return np.dtype(value.dtype) if value is not None and value.dtype is not None else None


class Mod(Binary):
    """Mod: the remainder, with the divisor's sign (fmod=0) or the dividend's (fmod=1)."""

    name = "Mod"
    attributes = {"fmod": 0}

    def evaluate(self, node, inputs):
        a, b = inputs
        out = np.fmod(a, b) if self.attr(node, "fmod") else np.mod(a, b)
        return [np.asarray(out).astype(np.result_type(a, b))]

    def combine_for(self, node, graph):
        if self.attr(node, "fmod"):
            return lambda o: Fn("fmod", (o[0], o[1]))

        def floor_mod(o):
            t = Fn("fmod", (o[0], o[1]))
            return Select(Bin("*", t, o[1]), Num(0.0), Bin("+", t, o[1]), t, "<")
        return floor_mod


class BitShift(Binary):
    """BitShift: integers shifted left (wrapped to the type) or right (arithmetic)."""

    name = "BitShift"
    attributes = {"direction": None}

    def check(self, node, graph):
        dtype = _out_dtype(node, graph)
        if self.attr(node, "direction") not in ("LEFT", "RIGHT"):
            return [f"direction {self.attr(node, 'direction')!r}: ONNX allows LEFT or RIGHT"]
        if dtype is None or dtype.kind not in "iu":
            return [f"element type {dtype}: BitShift takes integers"]
        return []

    def evaluate(self, node, inputs):
        x, y = inputs
        bits = 8 * x.dtype.itemsize
        wide = x.astype(object)
        shift = [int(v) if 0 <= v < bits else bits for v in np.asarray(y).reshape(-1)]
        shift = np.asarray(shift, dtype=object).reshape(np.shape(y))
        if self.attr(node, "direction") == "LEFT":
            out = np.vectorize(lambda a, k: a * 2 ** k)(wide, shift)
            low = -(2 ** (bits - 1)) if x.dtype.kind == "i" else 0
            out = np.vectorize(lambda t: (t - low) % 2 ** bits + low)(out)
        else:
            out = np.vectorize(lambda a, k: a // 2 ** k)(wide, shift)
        return [np.asarray(out).astype(x.dtype)]

    def combine_for(self, node, graph):
        dtype = _out_dtype(node, graph)
        bits = 8 * dtype.itemsize
        width = float(2.0 ** bits)

        def power(y):  # 2**y, with a shift below 0 or past the width taken as the width
            inside = Select(y, Num(0.0), Num(float(bits)), Select(y, Num(float(bits)), Num(float(bits)), y, ">="), "<")
            return Fn("pow", (Num(2.0), inside))

        if self.attr(node, "direction") == "RIGHT":
            return lambda o: Fn("floor", (Bin("/", o[0], power(o[1])),))
        low = -width / 2 if dtype.kind == "i" else 0.0

        def left(o):  # wrapped into [low, low + 2**bits) when outside (64-bit: 2**63 + t is not exact)
            raw = Bin("*", o[0], power(o[1]))
            t = Bin("-", raw, Num(low))
            wrapped = Bin("+", Bin("-", t, Bin("*", Fn("floor", (Bin("/", t, Num(width)),)), Num(width))), Num(low))
            return Select(raw, Num(low + width), wrapped, Select(raw, Num(low), wrapped, raw, "<"), ">=")
        return left


class _Bitwise(Binary):
    fn = ""

    def check(self, node, graph):
        dtype = _out_dtype(node, graph)
        if dtype is None or dtype.kind not in "iub":
            return [f"element type {dtype}: bitwise ops take integers"]
        return []

    def combine(self, operands):
        return Fn(self.fn, (operands[0], operands[1]))


class BitwiseAnd(_Bitwise):
    """BitwiseAnd: the bitwise and of integers."""

    name, fn, numpy_fn = "BitwiseAnd", "bitand", staticmethod(np.bitwise_and)


class BitwiseOr(_Bitwise):
    """BitwiseOr: the bitwise or of integers."""

    name, fn, numpy_fn = "BitwiseOr", "bitor", staticmethod(np.bitwise_or)


class BitwiseXor(_Bitwise):
    """BitwiseXor: the bitwise exclusive or of integers."""

    name, fn, numpy_fn = "BitwiseXor", "bitxor", staticmethod(np.bitwise_xor)


class BitwiseNot(Op):
    """BitwiseNot: the bitwise complement of integers."""

    name = "BitwiseNot"

    def check(self, node, graph):
        dtype = _out_dtype(node, graph)
        if dtype is None or dtype.kind not in "iu":
            return [f"element type {dtype}: BitwiseNot takes integers"]
        return []

    def evaluate(self, node, inputs):
        return [np.bitwise_not(inputs[0])]

    def lower(self, node, graph, b):
        dtype = _out_dtype(node, graph)
        size = int(np.prod(graph.shape_of(node.inputs[0]), dtype=np.int64))

        def flip(i):
            x = Ref(node.inputs[0], flat_index([i], (size,)))
            value = Bin("-", Num(float(2 ** (8 * dtype.itemsize) - 1)), x) if dtype.kind == "u" else \
                Bin("-", Bin("*", Num(-1.0), x), Num(1.0))
            b.assign(Ref(node.outputs[0], flat_index([i], (size,))), value)

        b.loop(size, flip)
