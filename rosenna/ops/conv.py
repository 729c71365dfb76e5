"""Conv, 1-D and 2-D (NCW / NCHW), and the sliding-window arithmetic the pooling ops share.

    Y[n, m, oh, ow] = sum_{c, kh, kw} W[m, c, kh, kw] * X[n, g*C/G + c, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw]
                      + B[m]        with g = m // (M/G), taps outside X skipped (zero padding)

strides, pads, dilations, group (depthwise, and depthwise with a channel multiplier: G = C,
M = k*C), ``auto_pad`` NOTSET / SAME_UPPER / SAME_LOWER / VALID, bias optional. W and B must be
constant (they are the layer's weights). A 1-D Conv is lowered as a 2-D one of height 1.

Padding costs nothing: the output range of each spatial axis is split into segments inside which
the same kernel taps fall inside X (:func:`segments`), and each segment gets its own loop nest
whose tap loops cover only those taps. So no padded copy of X is made and no tap is tested at run
time. The bias is added after the dot product; an activation that alone consumes the output is
fused in by ``fuse_activation`` (attribute ``_activation``).

Deviation: none in the arithmetic (the sum runs over c, then kh, then kw, in float of the
generated precision); 3-D convolutions are refused.
"""

from dataclasses import dataclass


from rosenna.loopir import Idx, Num, Ref, Var, add, mul
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


def as_2d(shape):
    """A rank-3 (N, C, W) shape as rank 4 (N, C, 1, W); rank 4 unchanged."""
    return tuple(shape[:2]) + (1,) + tuple(shape[2:]) if len(shape) == 3 else tuple(shape)


def flat4(n, c, h, w, shape):
    """Flat index of ``[n, c, h, w]`` (Idx or int each) in a rank-4 ``shape``."""
    _, cc, hh, ww = shape
    return ((Idx.of(n) * cc + c) * hh + h) * ww + w


def window_problems(node, graph, name="X"):
    shape = graph.shape_of(node.inputs[0])
    problems = []
    if len(shape) not in (3, 4):
        problems.append(f"{name} has rank {len(shape)}; rosenna takes 1-D (rank 3) and 2-D (rank 4) windows")
    auto_pad = node.attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        problems.append(f"auto_pad={auto_pad!r} is not an ONNX value")
    return problems


class Conv(Op):
    name = "Conv"
    attributes = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None, "pads": None,
                  "strides": None, "_activation": None}

    def _geometry(self, node, graph):
        x = as_2d(graph.shape_of(node.inputs[0]))
        w = as_2d(graph.shape_of(node.inputs[1]))
        spatial_rank = len(graph.shape_of(node.inputs[0])) - 2
        kernel = list(w[2:])
        strides, dilations, begin, end, out = window(self, node, list(graph.shape_of(node.inputs[0])[2:]),
                                                     kernel[-spatial_rank:])
        if spatial_rank == 1:
            strides, dilations, begin, end, out = [1] + strides, [1] + dilations, [0] + begin, [0] + end, [1] + out
        return x, w, strides, dilations, begin, end, out

    def shape(self, node, graph):
        x = graph.shape_of(node.inputs[0])
        w = graph.shape_of(node.inputs[1])
        _, _, _, _, _, _, out = self._geometry(node, graph)
        return [(x[0], w[0]) + tuple(out[-(len(x) - 2):])]

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

    def lower(self, node, graph, b):
        from rosenna.ops import activation_expr

        xname, wname = node.inputs[:2]
        bias = node.inputs[2] if len(node.inputs) > 2 else ""
        out = node.outputs[0]
        x, w, strides, dilations, begin, end, (oh, ow) = self._geometry(node, graph)
        n_batch, channels, height, width = x
        m_all, c_group, kh, kw = w
        group = self.attr(node, "group")
        m_group = m_all // group
        yshape = (n_batch, m_all, oh, ow)
        acc = Var("acc")
        segs_h = segments(oh, height, kh, strides[0], dilations[0], begin[0], end[0])
        segs_w = segments(ow, width, kw, strides[1], dilations[1], begin[1], end[1])
        for sh in segs_h:
            for sw in segs_w:
                base_h = sh.base(strides[0], dilations[0], begin[0])
                base_w = sw.base(strides[1], dilations[1], begin[1])

                def body(idx, sh=sh, sw=sw, base_h=base_h, base_w=base_w):
                    n, g, m, i, j = idx
                    co = Idx.of(g) * m_group + m
                    b.assign(acc, Num(0.0))
                    taps = (c_group, sh.k1 - sh.k0, sw.k1 - sw.k0)

                    def tap(t):
                        c, th, tw = t
                        xi = flat4(n, Idx.of(g) * c_group + c, Idx.of(i) * strides[0] + Idx.of(th) * dilations[0] + base_h,
                                   Idx.of(j) * strides[1] + Idx.of(tw) * dilations[1] + base_w, x)
                        wi = flat4(co, c, Idx.of(th) + sh.k0, Idx.of(tw) + sw.k0, w)
                        b.assign(acc, mul(Ref(wname, wi), Ref(xname, xi)), accumulate=True)

                    if all(taps):
                        b.nest(taps, tap)
                    value = add(acc, Ref(bias, Idx.of(co))) if bias else acc
                    value = activation_expr(node.attrs.get("_activation"), value)
                    b.assign(Ref(out, flat4(n, co, Idx.of(i) + sh.o0, Idx.of(j) + sw.o0, yshape)), value)

                b.nest((n_batch, group, m_group, sh.count, sw.count), body)
