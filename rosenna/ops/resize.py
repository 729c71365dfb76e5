"""Resize (opsets 10-19) and the opset 7/9 Upsample: nearest, linear (bilinear, trilinear, ...) and
cubic interpolation over any axes, separable:

    Y[o_0, .., o_r] = sum over taps (t_0, .., t_r) of  w_0(o_0, t_0) * .. * w_r(o_r, t_r) * X[i_0(o_0, t_0), ..]

Per axis of input size I, output size O and scale s (from ``scales``, or s = O/I from ``sizes``),
output o maps to the input coordinate x by ``coordinate_transformation_mode``:

    half_pixel          (o + 0.5)/s - 0.5          pytorch_half_pixel  the same, 0 when O == 1
    align_corners       o*(I-1)/(s*I-1) (0 if O==1)  asymmetric        o/s
    tf_half_pixel_for_nn  (o + 0.5)/s              half_pixel_symmetric  half_pixel about the centre
    tf_crop_and_resize  start*(I-1) + o*(end-start)*(I-1)/(O-1) with the constant ``roi``; an output
                        whose x lies outside [0, I-1] is ``extrapolation_value``

Taps: nearest takes one input, rounded by ``nearest_mode``; linear the two around x with weights
1-r and r (r = x - floor(x)); cubic the four around x with Keys' kernel of ``cubic_coeff_a``;
with ``antialias`` on an axis that downsamples (scale s < 1), linear and cubic take the kernel
stretched by 1/s over the 2/s (cubic 4/s) inputs around x, normalised to sum 1. A
tap outside X reads the nearest edge value, or with ``exclude_outside`` is dropped and the
weights renormalised. ``axes`` (opset 18) and ``keep_aspect_ratio_policy`` (not_larger,
not_smaller) are honoured. Upsample and opset-10 Resize are asymmetric, nearest rounding down.

Lowering: the taps and weights are computed at generation time (in float64). Each axis's outputs
are grouped into runs (outputs ``o0 + j*P`` with the same weights and input indices ``i0 + j*Q``:
the pattern of a rational scale repeats), and each combination of runs over the axes gets one
loop nest whose body is the weighted sum with the weights as literals, so nothing is tested or
looked up at run time. Upsampling by 2 in 3-D gives at most a few dozen nests.

Limits, refused with a reason: scales, sizes or roi computed at run time; a scale whose pattern
does not repeat within :data:`MAX_NESTS` loop nests.
Deviation: a zero-weight tap is not read, so an Inf or NaN there does not leak into the output.
"""

import itertools
import math

import numpy as np

from rosenna.loopir import Bin, Idx, Num, Ref, Var, flat_index
from rosenna.ops.base import Op, const_input, onnx_ints

#: The most loop nests one Resize may lower to (the product over axes of each axis's runs).
MAX_NESTS = 4096
_SAME = 1e-13


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


class _Runs:
    """Outputs ``o0 + j*ostep`` (j < count) of one axis: tap k reads input ``i0[k] + j*istep``
    with weight ``weights[k]``; ``weights`` None means the outputs are the extrapolation value."""

    def __init__(self, o, taps, ostep):
        self.o0, self.ostep, self.count, self.istep = o, ostep, 1, 0
        self.i0 = [i for i, _ in taps] if taps is not None else None
        self.weights = [w for _, w in taps] if taps is not None else None

    def extends(self, o, taps):
        if self.o0 + self.count * self.ostep != o:
            return False
        if taps is None or self.weights is None:
            return taps is None and self.weights is None
        if len(taps) != len(self.weights) or any(abs(w - v) > _SAME for (_, w), v in zip(taps, self.weights)):
            return False
        steps = {i - i0 for (i, _), i0 in zip(taps, self.i0)}
        if len(steps) != 1:
            return False
        step = steps.pop()
        if self.count == 1:
            self.istep = step // 1
            return step >= 0
        return step == self.count * self.istep

    def out(self, j):
        return Idx.of(j) * self.ostep + self.o0

    def inputs(self, j):
        return [Idx.of(j) * self.istep + i0 for i0 in self.i0]


def group_runs(taps_by_output, max_period=16, period_hint=None):
    """The fewest runs over phases 1..max_period and ``period_hint`` (see :class:`_Runs`).

    ``period_hint``: the period of the axis's scale O/I in lowest terms (O / gcd(O, I) outputs),
    which may pass ``max_period``: with it, the runs of one axis stay as many as the phases of
    its scale whatever the field's size (17/10 is 17 runs at 10 -> 17 and at 40 -> 68)."""
    best = None
    periods = list(range(1, min(max_period, len(taps_by_output)) + 1))
    if period_hint and max_period < period_hint <= len(taps_by_output):
        periods.append(period_hint)
    for period in periods:
        runs, open_runs = [], {}
        for o, taps in enumerate(taps_by_output):
            run = open_runs.get(o % period)
            if run is not None and run.extends(o, taps):
                run.count += 1
                continue
            run = _Runs(o, taps, period)
            open_runs[o % period] = run
            runs.append(run)
        if best is None or len(runs) < len(best):
            best = runs
    return best


def _cubic(r, a):
    """Keys' cubic convolution weights of the taps at floor(x)-1 .. floor(x)+2, r = x - floor(x)."""
    def kernel(d):
        d = abs(d)
        if d <= 1:
            return ((a + 2) * d - (a + 3)) * d * d + 1
        if d < 2:
            return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
        return 0.0
    return [kernel(r + 1), kernel(r), kernel(1 - r), kernel(2 - r)]


def _antialias_taps(x, scale, mode, a):
    """The taps of a downsampling axis with ``antialias``: the linear or cubic kernel stretched by
    1/scale (taps at distance d weighted by kernel(d * scale)), normalised to sum 1; the taps are
    the n input positions nearest x (the lower ones on a tie), n = 2 floor(1/scale) (+ 2) for
    linear and 2 floor(2/scale) (+ 2) for cubic, as onnx's reference places them."""
    ratio = x - math.floor(x)
    ratio = 1.0 if ratio == 0.0 else ratio
    base = round(x - ratio)
    reach = 1.0 if mode == "linear" else 2.0
    start = math.floor(-reach / scale) + 1

    def kernel(d):
        d = abs(d)
        if mode == "linear":
            return max(0.0, 1.0 - d)
        if d <= 1:
            return ((a + 2) * d - (a + 3)) * d * d + 1
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a if d < 2 else 0.0

    offsets = range(start, 2 - start)
    weights = [kernel(scale * (k - ratio)) for k in offsets]
    total = sum(weights)
    return [(base + k, w / total) for k, w in zip(offsets, weights)]


def _nearest(x, mode):
    if mode == "floor":
        return math.floor(x)
    if mode == "ceil":
        return math.ceil(x)
    if mode == "round_prefer_ceil":
        return math.floor(x + 0.5)
    return math.ceil(x - 0.5)  # round_prefer_floor


class Resize(Op):
    name = "Resize"
    attributes = {"mode": "nearest", "coordinate_transformation_mode": "half_pixel",
                  "nearest_mode": "round_prefer_floor", "antialias": 0, "axes": None,
                  "keep_aspect_ratio_policy": "stretch", "cubic_coeff_a": -0.75, "exclude_outside": 0,
                  "extrapolation_value": 0.0}

    # -- attributes and inputs ------------------------------------------------------------------
    def _modes(self, node, graph):
        mode = _text(self.attr(node, "mode"))
        if graph.opset < 11:  # opset-10 Resize: asymmetric, nearest rounds down
            return mode, "asymmetric", "floor"
        return (mode, _text(self.attr(node, "coordinate_transformation_mode")),
                _text(self.attr(node, "nearest_mode")))

    def _inputs(self, node, graph):
        """``(scales_position, sizes_position, roi_position)`` of this opset's form."""
        if graph.opset < 11:
            return 1, None, None
        return 2, 3, 1

    def _geometry(self, node, graph):
        """``(scales, out_sizes, roi)`` over every axis, or None when something is not constant."""
        shape = graph.shape_of(node.inputs[0])
        rank = len(shape)
        axes = [a % rank for a in onnx_ints(node.attrs["axes"])] if node.attrs.get("axes") is not None \
            else list(range(rank))
        scales_at, sizes_at, roi_at = self._inputs(node, graph)
        scales = sizes = roi = None
        for position, kind in ((scales_at, "scales"), (sizes_at, "sizes"), (roi_at, "roi")):
            if position is None or position >= len(node.inputs) or not node.inputs[position]:
                continue
            array = const_input(graph, node, position)
            if array is None:
                return None
            array = np.asarray(array, np.float64).reshape(-1)
            if array.size:
                scales, sizes, roi = (array if kind == "scales" else scales, array if kind == "sizes" else sizes,
                                      array if kind == "roi" else roi)
        full_scales = [1.0] * rank
        out = list(shape)
        if scales is not None:
            for axis, s in zip(axes, scales):
                full_scales[axis] = float(s)
                out[axis] = int(math.floor(shape[axis] * float(s)))
        elif sizes is not None:
            policy = _text(self.attr(node, "keep_aspect_ratio_policy"))
            ratios = [float(o) / shape[a] for a, o in zip(axes, sizes)]
            if policy in ("not_larger", "not_smaller"):
                common = min(ratios) if policy == "not_larger" else max(ratios)
                ratios = [common] * len(axes)
                sizes = [math.floor(common * shape[a] + 0.5) for a in axes]
            for axis, ratio, o in zip(axes, ratios, sizes):
                full_scales[axis], out[axis] = ratio, int(o)
        else:
            return None
        full_roi = [0.0] * rank + [1.0] * rank
        if roi is not None and len(roi) == 2 * len(axes):
            for k, axis in enumerate(axes):
                full_roi[axis], full_roi[axis + rank] = roi[k], roi[k + len(axes)]
        return full_scales, out, full_roi

    def shape(self, node, graph):
        return [tuple(self._geometry(node, graph)[1])]

    def check(self, node, graph):
        problems = []
        mode, ctm, nearest = self._modes(node, graph)
        if mode not in ("nearest", "linear", "cubic"):
            problems.append(f"mode={mode!r} is not an ONNX value")
        if ctm not in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                       "half_pixel_symmetric", "tf_crop_and_resize"):
            problems.append(f"coordinate_transformation_mode={ctm!r} is not an ONNX value")
        if nearest not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
            problems.append(f"nearest_mode={nearest!r} is not an ONNX value")
        geometry = self._geometry(node, graph)
        if geometry is None:
            problems.append("scales, sizes or roi are computed at run time (or absent); rosenna needs them constant")
        if not problems:
            nests = math.prod(len(runs) for runs in self._runs(node, graph))
            if nests > MAX_NESTS:
                problems.append(f"the resize pattern needs {nests} loop nests (more than {MAX_NESTS}): its scale "
                                "does not repeat over a short period; resize by a simpler ratio")
        return problems

    # -- taps -------------------------------------------------------------------------------------
    def _axis_taps(self, node, graph, size, out, scale, start, end):
        mode, ctm, nearest = self._modes(node, graph)
        a = float(self.attr(node, "cubic_coeff_a"))
        exclude = bool(self.attr(node, "exclude_outside"))
        antialias = bool(self.attr(node, "antialias"))
        taps_by_output = []
        for o in range(out):
            if ctm == "half_pixel":
                x = (o + 0.5) / scale - 0.5
            elif ctm == "pytorch_half_pixel":
                x = (o + 0.5) / scale - 0.5 if out > 1 else 0.0
            elif ctm == "align_corners":  # over the unrounded output length scale*I, as ONNX's reference
                x = o * (size - 1) / (scale * size - 1) if out > 1 else 0.0
            elif ctm == "asymmetric":
                x = o / scale
            elif ctm == "tf_half_pixel_for_nn":
                x = (o + 0.5) / scale
            elif ctm == "half_pixel_symmetric":
                adjustment = out / (scale * size)
                x = size / 2.0 * (1 - adjustment) + (o + 0.5) / scale - 0.5
            else:  # tf_crop_and_resize
                x = (start * (size - 1) + o * (end - start) * (size - 1) / (out - 1) if out > 1
                     else 0.5 * (start + end) * (size - 1))
                if x < 0 or x > size - 1:
                    taps_by_output.append(None)
                    continue
            if mode == "nearest":
                taps = [(_nearest(x, nearest), 1.0)]
            elif antialias and scale < 1:
                taps = _antialias_taps(x, scale, mode, a)
                if exclude:
                    taps = [(i, w) for i, w in taps if 0 <= i < size]
                    total = sum(w for _, w in taps)
                    taps = [(i, w / total) for i, w in taps]
            else:
                base = math.floor(x)
                r = x - base
                weights = [1.0 - r, r] if mode == "linear" else _cubic(r, a)
                first = base if mode == "linear" else base - 1
                taps = [(first + k, w) for k, w in enumerate(weights)]
                if exclude:
                    taps = [(i, w) for i, w in taps if 0 <= i < size]
                    total = sum(w for _, w in taps)
                    taps = [(i, w / total) for i, w in taps]
            merged = {}
            for i, w in taps:  # clamp to the edge; taps that land on one input add up
                i = min(max(i, 0), size - 1)
                merged[i] = merged.get(i, 0.0) + w
            taps_by_output.append([(i, w) for i, w in sorted(merged.items()) if w != 0.0])
        return taps_by_output

    def _runs(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        scales, out, roi = self._geometry(node, graph)
        rank = len(shape)
        return [group_runs(self._axis_taps(node, graph, shape[a], out[a], scales[a], roi[a], roi[a + rank]),
                           period_hint=out[a] // math.gcd(out[a], shape[a]) if shape[a] and out[a] else None)
                for a in range(rank)]

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        out_shape = self.shape(node, graph)[0]
        fill = float(self.attr(node, "extrapolation_value"))
        acc = Var("acc")
        for combo in itertools.product(*self._runs(node, graph)):
            def body(js, combo=combo):
                target = Ref(node.outputs[0], flat_index([r.out(j) for r, j in zip(combo, js)], out_shape))
                if any(r.weights is None for r in combo):
                    b.assign(target, Num(fill))
                    return
                terms = []
                for picks in itertools.product(*(range(len(r.weights)) for r in combo)):
                    weight = math.prod(r.weights[k] for r, k in zip(combo, picks))
                    index = flat_index([r.inputs(j)[k] for r, j, k in zip(combo, js, picks)], shape)
                    ref = Ref(node.inputs[0], index)
                    terms.append(ref if weight == 1.0 else Bin("*", Num(weight), ref))
                if len(terms) == 1:
                    b.assign(target, terms[0])
                    return
                b.assign(acc, terms[0])
                for term in terms[1:]:
                    b.assign(acc, term, accumulate=True)
                b.assign(target, acc)

            b.nest(tuple(r.count for r in combo), body)


class Upsample(Resize):
    """Upsample (opsets 7 and 9): Resize with asymmetric coordinates, nearest rounding down."""

    name = "Upsample"
    attributes = {"mode": "nearest", "scales": None}

    def _modes(self, node, graph):
        mode = _text(self.attr(node, "mode"))
        return ("linear" if mode == "bilinear" else mode), "asymmetric", "floor"

    def _inputs(self, node, graph):
        return (1 if len(node.inputs) > 1 else None), None, None

    def _geometry(self, node, graph):
        if len(node.inputs) < 2 and node.attrs.get("scales") is not None:
            shape = graph.shape_of(node.inputs[0])
            scales = [float(s) for s in node.attrs["scales"]]
            return scales, [int(math.floor(d * s)) for d, s in zip(shape, scales)], [0.0] * len(shape) + [1.0] * len(shape)
        return super()._geometry(node, graph)

    def attr(self, node, key):
        if key in ("antialias", "exclude_outside"):
            return 0
        if key == "cubic_coeff_a":
            return -0.75
        if key == "extrapolation_value":
            return 0.0
        return super().attr(node, key)
