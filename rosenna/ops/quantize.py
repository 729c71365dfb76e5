"""QuantizeLinear and DequantizeLinear: the linear (de)quantization of ONNX, per tensor, per axis
or per block, computed in the working float type (integers are held there exactly).

    DequantizeLinear:  y = (x - zero_point) * scale
    QuantizeLinear:    y = clamp(rint(x / scale) + zero_point, lowest, highest)   (integer outputs:
                       rint rounds ties to even; the range is the output type's)
                       y = x / scale rounded to the float8 format, saturated when ``saturate``
                       (float8 outputs, whose zero point is 0)

``scale`` and ``zero_point`` (default 0) are a scalar (per tensor), a 1-D tensor along ``axis``
(per axis, default 1) or, with ``block_size`` b > 0, a tensor shaped like x with ``ceil(n / b)``
along ``axis`` (per block: element i of the axis uses entry i // b). Blocks must divide the axis
(the loop is split into blocks and elements, so the index stays affine). The output type is the
zero point's, ``output_dtype``'s or uint8 (QuantizeLinear), the scale's or ``output_dtype``'s
(DequantizeLinear).

Deviations: the division and the product are rounded in the working float type, not the scale's
narrower type (float16, bfloat16). Refused: a block size that does not divide the axis; float4
outputs (not held, see rosenna.ir).
"""

import numpy as np

from rosenna.ir import FLOAT_FORMATS, int_range
from rosenna.loopir import Bin, Fn, Num, Ref, Select, flat_index
from rosenna.ops.base import Op
from rosenna.ops.layout import _round_to_format


class _Linear(Op):
    attributes = {"axis": 1, "block_size": 0, "saturate": 1, "output_dtype": 0, "precision": 0}

    def _layout(self, node, graph):
        """``(kind, axis, block)``: kind "tensor", "axis" or "block" from the scale's shape."""
        shape = graph.shape_of(node.inputs[0])
        scale = graph.shape_of(node.inputs[1])
        axis = int(self.attr(node, "axis")) % max(len(shape), 1)
        block = int(self.attr(node, "block_size") or 0)
        if int(np.prod(scale, dtype=np.int64)) == 1 and block == 0:
            return "tensor", axis, 0
        if block:
            return "block", axis, block
        return "axis", axis, 0

    def check(self, node, graph):
        kind, axis, block = self._layout(node, graph)
        shape = graph.shape_of(node.inputs[0])
        if kind == "block" and shape[axis] % block:
            return [f"block_size {block} does not divide the axis of {shape[axis]}; rosenna needs whole blocks"]
        return []

    def lower(self, node, graph, b):
        shape = tuple(graph.shape_of(node.inputs[0]))
        kind, axis, block = self._layout(node, graph)
        zero = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        loops = list(shape)
        if kind == "block":  # the axis as (block, element) so that the block index is a loop variable
            loops[axis:axis + 1] = [shape[axis] // block, block]

        def param(name, idx):
            if kind == "tensor":
                return Ref(name, flat_index([], ()))
            if kind == "axis":
                return Ref(name, flat_index([idx[axis]], (shape[axis],)))
            pshape = list(shape)
            pshape[axis] = shape[axis] // block
            return Ref(name, flat_index(idx[:axis] + [idx[axis]] + idx[axis + 2:], pshape))

        def body(idx):
            if kind == "block":
                full = idx[:axis] + [idx[axis] * block + idx[axis + 1]] + idx[axis + 2:]
            else:
                full = idx
            x = Ref(node.inputs[0], flat_index(full, shape))
            y = Ref(node.outputs[0], flat_index(full, shape))
            scale = param(node.inputs[1], idx)
            zp = param(zero, idx) if zero else None
            self.element(node, graph, b, x, y, scale, zp)

        b.nest(tuple(loops), body)


class DequantizeLinear(_Linear):
    """DequantizeLinear: (x - zero_point) * scale, per tensor, axis or block."""

    name = "DequantizeLinear"

    def evaluate(self, node, inputs):
        return None

    def element(self, node, graph, b, x, y, scale, zp):
        b.assign(y, Bin("*", Bin("-", x, zp) if zp is not None else x, scale))


class QuantizeLinear(_Linear):
    """QuantizeLinear: x / scale rounded and saturated to an integer or float8 type, per tensor, axis or block."""

    name = "QuantizeLinear"

    def evaluate(self, node, inputs):
        return None

    def _out(self, node, graph):
        value = graph.values.get(node.outputs[0])
        return np.dtype(value.dtype) if value is not None and value.dtype is not None else np.dtype(np.uint8)

    def check(self, node, graph):
        problems = super().check(node, graph)
        out = self._out(node, graph)
        if out not in FLOAT_FORMATS and int_range(out) is None:
            problems.append(f"output type {out}: rosenna holds integer and float8 outputs only")
        return problems

    def element(self, node, graph, b, x, y, scale, zp):
        out = self._out(node, graph)
        value = Bin("/", x, scale)
        if out in FLOAT_FORMATS:
            fmt = FLOAT_FORMATS[out]
            _round_to_format(b, value if zp is None else Bin("+", value, zp), y, fmt,
                             fmt.saturates and bool(self.attr(node, "saturate")))
            return
        low, high = int_range(out)
        q = Fn("rint", (value,))
        if zp is not None:
            q = Bin("+", q, zp)
        upper = Select(q, Num(float(high)), Num(float(high)), q, ">")
        b.assign(y, Select(q, Num(float(low)), Num(float(low)), upper, "<"))
