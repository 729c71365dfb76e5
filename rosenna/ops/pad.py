"""Pad: constant, reflect, edge and wrap modes, pads as attribute (opset < 11) or constant input.

Per axis with pads ``b`` (begin) and ``e`` (end) over an extent ``d``:

    output o in [b, b + d):      X[o - b]
    o < b (begin padding):       constant: value; edge: X[0]; reflect: X[b - o]; wrap: X[d - b + o]
    o >= b + d (end padding):    constant: value; edge: X[d-1]; reflect: X[2d - 2 + b - o];
                                 wrap: X[o - b - d]

Each combination of those ranges over the padded axes gets its own loop nest, so there is no
run-time test. Negative pads crop. The constant value comes from the ``value`` attribute (opset <
11) or the optional constant input; ``axes`` (opset 18) must be constant too.

Limits, refused with a reason: pads computed at run time; reflect with a pad not smaller than the
extent, wrap with a pad larger than the extent, edge/reflect/wrap on an empty axis.
"""

import itertools

import numpy as np

from rosenna.loopir import Num, Ref, flat_index
from rosenna.ops.base import Op, const_input, onnx_ints


class Pad(Op):
    name = "Pad"
    attributes = {"mode": "constant", "pads": None, "value": 0.0}

    def _params(self, node, graph_or_inputs, rank):
        """``(begin, end, value)`` per axis, or None when something is computed at run time."""
        def arg(position):
            if isinstance(graph_or_inputs, list):
                return graph_or_inputs[position] if len(graph_or_inputs) > position else None
            return const_input(graph_or_inputs, node, position)

        if len(node.inputs) > 1:
            pads = arg(1)
            if pads is None:
                return None
            pads = onnx_ints(pads)
            value = arg(2)
            if len(node.inputs) > 2 and node.inputs[2] and value is None:
                return None
            value = 0.0 if value is None or np.asarray(value).size == 0 else float(np.asarray(value).reshape(-1)[0])
            axes = list(range(rank))
            if len(node.inputs) > 3 and node.inputs[3]:
                axes_arr = arg(3)
                if axes_arr is None:
                    return None
                axes = [a % rank for a in onnx_ints(axes_arr)]
        else:
            pads = onnx_ints(self.attr(node, "pads"))
            value = float(self.attr(node, "value"))
            axes = list(range(rank))
        begin, end = [0] * rank, [0] * rank
        for k, axis in enumerate(axes):
            begin[axis], end[axis] = pads[k], pads[k + len(axes)]
        return begin, end, value

    def _mode(self, node):
        mode = self.attr(node, "mode")
        return mode.decode() if isinstance(mode, bytes) else mode

    def shape(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        begin, end, _ = self._params(node, graph, len(shape))
        return [tuple(d + p + q for d, p, q in zip(shape, begin, end))]

    def evaluate(self, node, inputs):
        data = inputs[0]
        begin, end, value = self._params(node, inputs, data.ndim)
        mode = {"edge": "edge", "reflect": "reflect", "wrap": "wrap"}.get(self._mode(node), "constant")
        crop = tuple(slice(max(0, -p), d - max(0, -q)) for d, p, q in zip(data.shape, begin, end))
        data = data[crop]
        width = [(max(0, p), max(0, q)) for p, q in zip(begin, end)]
        if mode == "constant":
            return [np.pad(data, width, mode="constant", constant_values=value)]
        return [np.pad(data, width, mode=mode)]

    def check(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        params = self._params(node, graph, len(shape))
        mode = self._mode(node)
        if params is None:
            return ["pads, constant_value or axes are computed at run time; rosenna needs them constant"]
        if mode not in ("constant", "reflect", "edge", "wrap"):
            return [f"mode={mode!r} is not an ONNX Pad mode"]
        begin, end, _ = params
        for axis, (d, p, q) in enumerate(zip(shape, begin, end)):
            if d + p + q < 0:
                return [f"axis {axis}: pads {p}, {q} crop more than the extent {d}"]
            if mode == "reflect" and max(p, q) >= d and max(p, q) > 0:
                return [f"axis {axis}: reflect pad {max(p, q)} not smaller than the extent {d}"]
            if mode == "wrap" and max(p, q) > d:
                return [f"axis {axis}: wrap pad {max(p, q)} larger than the extent {d}"]
            if mode in ("edge", "reflect", "wrap") and d == 0 and max(p, q) > 0:
                return [f"axis {axis}: {mode} padding of an empty axis"]
        return []

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        begin, end, value = self._params(node, graph, len(shape))
        mode = self._mode(node)
        out_shape = self.shape(node, graph)[0]
        src, dst = node.inputs[0], node.outputs[0]

        # Per axis: (first output, count, input index of output first+i as (const, coef), or None
        # for the constant value).
        ranges = []
        for d, p, q in zip(shape, begin, end):
            axis = []
            if p > 0:
                axis.append((0, p, {"constant": None, "edge": (0, 0), "reflect": (p, -1), "wrap": (d - p, 1)}[mode]))
            lo, hi = max(p, 0), min(p + d, d + p + q)
            if hi > lo:
                axis.append((lo, hi - lo, (lo - p, 1)))
            if q > 0:
                start = p + d
                axis.append((start, q, {"constant": None, "edge": (d - 1, 0), "reflect": (d - 2, -1),
                                        "wrap": (0, 1)}[mode]))
            ranges.append(axis)

        for combo in itertools.product(*ranges):
            def body(idx, combo=combo):
                out_idx = flat_index([i + first for i, (first, _, _) in zip(idx, combo)], out_shape)
                if any(src_map is None for _, _, src_map in combo):
                    b.assign(Ref(dst, out_idx), Num(value))
                    return
                in_idx = [i * coef + const for i, (_, _, (const, coef)) in zip(idx, combo)]
                b.assign(Ref(dst, out_idx), Ref(src, flat_index(in_idx, shape)))

            b.nest([count for _, count, _ in combo], body)
