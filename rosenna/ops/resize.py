"""Resize, nearest-neighbour upsampling by whole factors (what ``nn.Upsample(mode="nearest")`` exports).

    Y[.., q*s + r, ..] = X[.., q, ..]     for every r in [0, s), s the integer factor of the axis

Factors come from the constant ``scales`` or ``sizes`` input (opset 11 on; opset 10's second input
is ``scales``). The loops run over the input index q and the replica r, so each output element is
one affine copy.

Limits, refused with a reason: modes other than nearest; non-integer factors or factors below 1;
coordinate transformations under which nearest is not ``floor(o / s)`` for whole factors (rosenna
takes asymmetric with nearest_mode floor, and half_pixel / pytorch_half_pixel / tf_half_pixel_for_nn
with round_prefer_floor or round_prefer_ceil); scales or sizes computed at run time; antialias,
``axes`` and ``keep_aspect_ratio_policy`` other than the defaults.
"""

import numpy as np

from rosenna.loopir import Idx, Ref, flat_index
from rosenna.ops.base import Op, const_input


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


class Resize(Op):
    name = "Resize"
    attributes = {"mode": "nearest", "coordinate_transformation_mode": "half_pixel",
                  "nearest_mode": "round_prefer_floor", "antialias": 0, "axes": None,
                  "keep_aspect_ratio_policy": "stretch", "cubic_coeff_a": -0.75, "exclude_outside": 0,
                  "extrapolation_value": 0.0}

    def _factors(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        positions = (1,) if len(node.inputs) == 2 else (2, 3)
        for position in positions:
            if position < len(node.inputs) and node.inputs[position]:
                arr = const_input(graph, node, position)
                if arr is None:
                    return None
                arr = np.asarray(arr).reshape(-1)
                if arr.size == 0:
                    continue
                if position == 3:
                    return [float(o) / d for o, d in zip(arr, shape)]
                return [float(v) for v in arr]
        return None

    def shape(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        return [tuple(int(np.floor(d * f)) for d, f in zip(shape, self._factors(node, graph)))]

    def check(self, node, graph):
        problems = []
        mode, ctm = _text(self.attr(node, "mode")), _text(self.attr(node, "coordinate_transformation_mode"))
        nearest = _text(self.attr(node, "nearest_mode"))
        if mode != "nearest":
            problems.append(f"mode={mode!r}; rosenna resizes with nearest only")
        if ctm == "asymmetric":
            if nearest != "floor":
                problems.append(f"asymmetric with nearest_mode={nearest!r}; rosenna takes floor there")
        elif ctm in ("half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn"):
            if nearest not in ("round_prefer_floor", "round_prefer_ceil"):
                problems.append(f"{ctm} with nearest_mode={nearest!r} is not supported")
        else:
            problems.append(f"coordinate_transformation_mode={ctm!r} is not supported")
        if self.attr(node, "antialias") or self.attr(node, "axes") is not None or \
                _text(self.attr(node, "keep_aspect_ratio_policy")) != "stretch":
            problems.append("antialias, axes or keep_aspect_ratio_policy other than the defaults")
        factors = self._factors(node, graph)
        if factors is None:
            problems.append("scales or sizes are computed at run time (or absent); rosenna needs them constant")
        elif any(f < 1 or f != int(f) for f in factors):
            problems.append(f"factors {factors}: rosenna upsamples by whole factors only")
        return problems

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        factors = [int(f) for f in self._factors(node, graph)]
        out_shape = self.shape(node, graph)[0]
        nest = [extent for pair in zip(shape, factors) for extent in pair]

        def body(idx):
            q, r = idx[0::2], idx[1::2]
            out_idx = [Idx.of(qi) * f + ri for qi, ri, f in zip(q, r, factors)]
            b.assign(Ref(node.outputs[0], flat_index(out_idx, out_shape)), Ref(node.inputs[0], flat_index(q, shape)))

        b.nest(nest, body)
