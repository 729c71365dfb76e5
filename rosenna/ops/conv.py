"""Conv and ConvTranspose over 1, 2 or 3 (any number of) spatial axes, and the sliding-window
arithmetic the pooling ops share.

Conv (X [N, C, s...], W [M, C/G, k...]):

    Y[n, m, o...] = B[m] + sum_{c, k...} W[m, c, k...] * X[n, g*C/G + c, o*stride - pad_begin + k*dilation ...]
                    with g = m // (M/G), taps outside X skipped (zero padding)

ConvTranspose (W [C, M/G, k...]): every input element scatters into the output,

    Y[n, m, i*stride - pad_begin + k*dilation ...] += X[n, c, i...] * W[c, m - g*M/G, k...],   plus B[m],

computed as a gather, each output summing the (i, k) pairs that reach it. Output size per axis:
``stride*(in-1) + output_padding + (k-1)*dilation + 1 - pad_begin - pad_end``; with ``output_shape``
or ``auto_pad`` SAME_UPPER/SAME_LOWER (output ``in*stride``) the total padding follows from the
size, split as ONNX says (the odd one at the end for SAME_UPPER, at the beginning for SAME_LOWER).

Attributes: strides, pads, dilations, group (depthwise, and depthwise with a channel multiplier),
``auto_pad`` NOTSET / SAME_UPPER / SAME_LOWER / VALID, bias optional; ConvTranspose also
output_padding and output_shape. W and B must be constant (the layer's weights).

Padding and striding cost nothing: each spatial axis's outputs are split into runs (:class:`Run`)
inside which the same kernel taps reach X at input positions affine in the output and tap
indices (for ConvTranspose, outputs ``stride`` apart in one phase), and each combination of runs
gets its own loop nest whose tap loops cover only those taps. No dilated copy of X is made and no
tap is tested at run time; a zero-padded copy only for a conv over 3 or more axes whose nests
would be more than rosenna.passes.conv_pad.PAD_ABOVE (3x3x3 with padding: 27), by that pass's Pad. The bias is added after the dot product; an activation
that alone consumes the output is fused in by ``fuse_activation`` (attribute ``_activation``).

Deviation: none in the arithmetic (the sum runs over c, then the taps, in float of the generated
precision); only the summation order differs from a scatter implementation.
"""

import itertools
from dataclasses import dataclass

from rosenna.loopir import Idx, Num, Ref, Var, add, flat_index, mul
from rosenna.ops.base import Op, onnx_ints


@dataclass
class Segment:
    """Outputs ``o0 .. o0+count-1`` of one axis, whose valid taps are ``k0 .. k1-1``; ``padded``
    is how many taps fall inside the padded extent (what count_include_pad divides by)."""

    o0: int
    count: int
    k0: int
    k1: int
    padded: int

    def base(self, stride, dilation, pad_begin):
        """Input position of tap ``k0`` for output ``o0``; output o0+i, tap k0+t reads
        ``base + i*stride + t*dilation``."""
        return self.o0 * stride - pad_begin + self.k0 * dilation


def segments(out, size, kernel, stride, dilation, pad_begin, pad_end):
    """Split outputs ``[0, out)`` of one axis into runs with the same valid taps (see Segment)."""
    segs = []
    for o in range(out):
        start = o * stride - pad_begin
        valid = [k for k in range(kernel) if 0 <= start + k * dilation < size]
        k0, k1 = (valid[0], valid[-1] + 1) if valid else (0, 0)
        padded = sum(1 for k in range(kernel) if -pad_begin <= start + k * dilation < size + pad_end)
        last = segs[-1] if segs else None
        if last and (last.k0, last.k1, last.padded) == (k0, k1, padded) and last.o0 + last.count == o:
            last.count += 1
        else:
            segs.append(Segment(o, 1, k0, k1, padded))
    return segs


def output_size(size, kernel, stride, dilation, pad_begin, pad_end, ceil_mode=False):
    span = (kernel - 1) * dilation + 1
    room = size + pad_begin + pad_end - span
    if not ceil_mode:
        return room // stride + 1
    out = -(-room // stride) + 1
    if (out - 1) * stride >= size + pad_begin:  # the last window would start in the end padding
        out -= 1
    return out


def window(op, node, spatial, kernel, ceil_mode=False):
    """Strides, dilations, begin and end pads and output sizes of a sliding window op.

    Args:
        op: the op (for attribute defaults).
        node: the node.
        spatial: the input's spatial extents.
        kernel: the kernel's spatial extents.
        ceil_mode: round output sizes up (pooling).
    Returns:
        ``(strides, dilations, pads_begin, pads_end, out)``, each a list over the spatial axes.
    """
    rank = len(spatial)
    strides = onnx_ints(node.attrs.get("strides") or [1] * rank)
    dilations = onnx_ints(node.attrs.get("dilations") or [1] * rank)
    pads = onnx_ints(node.attrs.get("pads") or [0] * (2 * rank))
    auto_pad = node.attrs.get("auto_pad", "NOTSET") or "NOTSET"
    begin, end = pads[:rank], pads[rank:]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small = total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else total - small)
            end.append(total - begin[-1])
    elif auto_pad == "VALID":
        begin, end = [0] * rank, [0] * rank
    out = [output_size(*args, ceil_mode) for args in zip(spatial, kernel, strides, dilations, begin, end)]
    return strides, dilations, begin, end, out


@dataclass
class Run:
    """Outputs ``o0 + j*ostep`` (j < count) of one axis that read the same taps: tap ``t`` (t < ntaps)
    is kernel index ``k0 + t*kstep`` at input position ``i0 + j*i_per_out + t*i_per_tap``, every
    index affine in j and t. ``padded`` counts the taps inside the padded extent (AveragePool)."""

    o0: int
    ostep: int
    count: int
    k0: int
    kstep: int
    ntaps: int
    i0: int
    i_per_out: int
    i_per_tap: int
    padded: int = 0

    def out(self, j):
        return Idx.of(j) * self.ostep + self.o0

    def kernel(self, t):
        return Idx.of(t) * self.kstep + self.k0

    def input(self, j, t):
        return Idx.of(j) * self.i_per_out + Idx.of(t) * self.i_per_tap + self.i0


def forward_runs(out, size, kernel, stride, dilation, pad_begin, pad_end):
    """The runs of a sliding window (Conv, pooling): output o reads ``o*stride - pad_begin + k*dilation``."""
    return [Run(seg.o0, 1, seg.count, seg.k0, 1, seg.k1 - seg.k0, seg.base(stride, dilation, pad_begin), stride,
                dilation, seg.padded)
            for seg in segments(out, size, kernel, stride, dilation, pad_begin, pad_end)]


def transposed_runs(out, size, kernel, stride, dilation, pad_begin):
    """The runs of a transposed window (ConvTranspose): input i, tap k feed output
    ``i*stride - pad_begin + k*dilation``; read as a gather, output o takes the taps k with
    ``(o + pad_begin - k*dilation)`` a multiple of stride inside the input. Those form an arithmetic
    progression in k, and outputs ``stride`` apart in the same phase step the input by one."""
    runs, open_by_phase = [], {}
    for o in range(out):
        taps = [k for k in range(kernel)
                if (o + pad_begin - k * dilation) % stride == 0 and 0 <= (o + pad_begin - k * dilation) // stride < size]
        k0 = taps[0] if taps else 0
        kstep = taps[1] - taps[0] if len(taps) > 1 else 1
        i0 = (o + pad_begin - k0 * dilation) // stride if taps else 0
        i_per_tap = -(kstep * dilation) // stride if len(taps) > 1 else 0
        key = (k0, kstep, len(taps), i_per_tap)
        run = open_by_phase.get(o % stride)
        if run is not None and (run.k0, run.kstep, run.ntaps, run.i_per_tap) == key and \
                run.o0 + run.count * stride == o and (not taps or run.i0 + run.count == i0):
            run.count += 1
            continue
        run = Run(o, stride, 1, k0, kstep, len(taps), i0, 1 if taps else 0, i_per_tap)
        open_by_phase[o % stride] = run
        runs.append(run)
    return runs


def window_problems(node, graph, name="X"):
    shape = graph.shape_of(node.inputs[0])
    problems = []
    if len(shape) < 3:
        problems.append(f"{name} has rank {len(shape)}; a window op needs [N, C, spatial...] (rank 3 or more)")
    auto_pad = node.attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        problems.append(f"auto_pad={auto_pad!r} is not an ONNX value")
    return problems


def lower_window(b, node, graph, runs, weights, out_shape, group=1, weight_layout="conv"):
    """The loops of a Conv or ConvTranspose over any spatial rank: one nest per combination of the
    axes' runs, ``acc`` summed over the group's channels and the run's taps.

    Args:
        runs: per spatial axis, its list of :class:`Run`.
        weights: the W input's name; W is [M, C/G, k...] ("conv") or [C, M/G, k...] ("transposed").
        out_shape: Y's shape [N, M, o...].
    """
    from rosenna.ops import activation_expr

    xname, bias, out = node.inputs[0], (node.inputs[2] if len(node.inputs) > 2 else ""), node.outputs[0]
    x, w = graph.shape_of(xname), graph.shape_of(weights)
    c_group = x[1] // group
    m_group = out_shape[1] // group
    acc = Var("acc")
    for combo in itertools.product(*runs):
        def body(idx, combo=combo):
            n, g, m, *js = idx
            co = Idx.of(g) * m_group + m
            b.assign(acc, Num(0.0))
            taps = (c_group,) + tuple(r.ntaps for r in combo)

            def tap(t):
                c, *ts = t
                ci = Idx.of(g) * c_group + c
                xi = flat_index([n, ci] + [r.input(j, tt) for r, j, tt in zip(combo, js, ts)], x)
                ks = [r.kernel(tt) for r, tt in zip(combo, ts)]
                wi = flat_index(([co, c] if weight_layout == "conv" else [ci, m]) + ks, w)
                b.assign(acc, mul(Ref(weights, wi), Ref(xname, xi)), accumulate=True)

            if all(taps):
                b.nest(taps, tap)
            value = add(acc, Ref(bias, Idx.of(co))) if bias else acc
            value = activation_expr(node.attrs.get("_activation"), value)
            b.assign(Ref(out, flat_index([n, co] + [r.out(j) for r, j in zip(combo, js)], out_shape)), value)

        b.nest((out_shape[0], group, m_group) + tuple(r.count for r in combo), body)


class Conv(Op):
    name = "Conv"
    attributes = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None, "pads": None,
                  "strides": None, "_activation": None}

    def _geometry(self, node, graph):
        x, w = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        return window(self, node, list(x[2:]), list(w[2:]))

    def shape(self, node, graph):
        x, w = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        return [(x[0], w[0]) + tuple(self._geometry(node, graph)[-1])]

    def check(self, node, graph):
        problems = window_problems(node, graph)
        if problems:
            return problems
        if not graph.is_const(node.inputs[1]):
            problems.append("the weights W are computed at run time; rosenna needs them constant")
        if len(node.inputs) > 2 and node.inputs[2] and not graph.is_const(node.inputs[2]):
            problems.append("the bias B is computed at run time; rosenna needs it constant")
        return problems

    def shape_errors(self, node, graph):
        x, w = tuple(graph.shape_of(node.inputs[0])), tuple(graph.shape_of(node.inputs[1]))
        group = self.attr(node, "group")
        if len(x) < 3 or len(w) != len(x) or group < 1 or x[1] != w[1] * group or w[0] % group:
            return [f"W of shape {w} does not match X of shape {x} with group={group} (X's channels must be "
                    "W's second dimension times group, W's first a multiple of group)"]
        if node.attrs.get("kernel_shape") is not None and onnx_ints(node.attrs["kernel_shape"]) != list(w[2:]):
            return [f"kernel_shape {onnx_ints(node.attrs['kernel_shape'])} differs from W's spatial shape {w[2:]}"]
        if len(node.inputs) > 2 and node.inputs[2] and tuple(graph.shape_of(node.inputs[2])) != (w[0],):
            return [f"bias B of shape {tuple(graph.shape_of(node.inputs[2]))}; Conv needs one per output channel, "
                    f"({w[0]},)"]
        return []

    def window(self, node, graph):
        """What a kernel computing this Conv otherwise than :meth:`lower`'s loops needs: the value
        names of X, W, B ("" for none) and Y, the shapes of X, W and Y, strides, dilations, begin
        pads, group and the fused activation (``(op, attrs)`` or None)."""
        strides, dilations, begin, _, out = self._geometry(node, graph)
        x, w = tuple(graph.shape_of(node.inputs[0])), tuple(graph.shape_of(node.inputs[1]))
        return {"x": node.inputs[0], "w": node.inputs[1], "b": node.inputs[2] if len(node.inputs) > 2 else "",
                "y": node.outputs[0], "x_shape": x, "w_shape": w, "y_shape": (x[0], w[0]) + tuple(out),
                "strides": tuple(strides), "dilations": tuple(dilations), "pads": tuple(begin),
                "group": self.attr(node, "group"), "activation": node.attrs.get("_activation")}

    def lower(self, node, graph, b):
        x, w = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        strides, dilations, begin, end, out = self._geometry(node, graph)
        runs = [forward_runs(*args) for args in zip(out, x[2:], w[2:], strides, dilations, begin, end)]
        lower_window(b, node, graph, runs, node.inputs[1], (x[0], w[0]) + tuple(out), self.attr(node, "group"))


class ConvTranspose(Op):
    """ConvTranspose: the gradient of Conv, computed as a gather (see the module docstring)."""

    name = "ConvTranspose"
    attributes = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None, "output_padding": None,
                  "output_shape": None, "pads": None, "strides": None, "_activation": None}

    def _geometry(self, node, graph):
        """``(strides, dilations, pads_begin, out)`` per spatial axis (ONNX's shape rule)."""
        x, w = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        rank = len(x) - 2
        kernel = list(w[2:])
        strides = onnx_ints(node.attrs.get("strides") or [1] * rank)
        dilations = onnx_ints(node.attrs.get("dilations") or [1] * rank)
        out_pad = onnx_ints(node.attrs.get("output_padding") or [0] * rank)
        pads = onnx_ints(node.attrs.get("pads") or [0] * (2 * rank))
        auto_pad = node.attrs.get("auto_pad", "NOTSET") or "NOTSET"
        shape_attr = node.attrs.get("output_shape")
        full = [s * (i - 1) + op + (k - 1) * d + 1 for i, k, s, d, op in zip(x[2:], kernel, strides, dilations, out_pad)]
        if shape_attr is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            want = onnx_ints(shape_attr)[-rank:] if shape_attr is not None else [i * s for i, s in zip(x[2:], strides)]
            begin = []
            for f, o in zip(full, want):
                total = max(0, f - o)
                begin.append(total - total // 2 if auto_pad == "SAME_LOWER" else total // 2)
            return strides, dilations, begin, want
        if auto_pad == "VALID":
            pads = [0] * (2 * rank)
        out = [f - pads[a] - pads[a + rank] for a, f in enumerate(full)]
        return strides, dilations, pads[:rank], out

    def shape(self, node, graph):
        x, w = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        return [(x[0], w[1] * self.attr(node, "group")) + tuple(self._geometry(node, graph)[-1])]

    def check(self, node, graph):
        problems = window_problems(node, graph)
        if problems:
            return problems
        if not graph.is_const(node.inputs[1]):
            problems.append("the weights W are computed at run time; rosenna needs them constant")
        if len(node.inputs) > 2 and node.inputs[2] and not graph.is_const(node.inputs[2]):
            problems.append("the bias B is computed at run time; rosenna needs it constant")
        x, w = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        group = self.attr(node, "group")
        if len(w) != len(x) or x[1] != w[0] or w[0] % group:
            problems.append(f"W of shape {tuple(w)} does not match X of shape {tuple(x)} with group={group}")
        elif any(o < 1 for o in self._geometry(node, graph)[-1]):
            problems.append("the output would be empty: the pads are larger than the output")
        return problems

    def lower(self, node, graph, b):
        x, w = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        strides, dilations, begin, out = self._geometry(node, graph)
        runs = [transposed_runs(*args) for args in zip(out, x[2:], w[2:], strides, dilations, begin)]
        group = self.attr(node, "group")
        lower_window(b, node, graph, runs, node.inputs[1], (x[0], w[1] * group) + tuple(out), group, "transposed")
