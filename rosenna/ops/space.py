"""DepthToSpace and SpaceToDepth (and CenterCropPad, its class docstring): blocks of channels moved
to blocks of pixels and back (pixel shuffle), pure index remaps of a [N, C, H, W] tensor with block
size b.

    DepthToSpace DCR:  Y[n, c, h*b + i, w*b + j] = X[n, (i*b + j)*C' + c, h, w]     (C' = C / b^2)
    DepthToSpace CRD:  Y[n, c, h*b + i, w*b + j] = X[n, c*b*b + i*b + j, h, w]
    SpaceToDepth DCR:  Y[n, (i*b + j)*C + c, h, w] = X[n, c, h*b + i, w*b + j]
    SpaceToDepth CRD:  Y[n, c*b*b + i*b + j, h, w] = X[n, c, h*b + i, w*b + j]

No arithmetic: the values are copied exactly.
"""

import numpy as np

from rosenna.loopir import Idx, Num, Ref, flat_index
from rosenna.ops.base import Op, const_input


class DepthToSpace(Op):
    name = "DepthToSpace"
    attributes = {"blocksize": None, "mode": "DCR"}

    def shape(self, node, graph):
        n, c, h, w = graph.shape_of(node.inputs[0])
        bs = int(self.attr(node, "blocksize"))
        return [(n, c // (bs * bs), h * bs, w * bs)]

    def check(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        bs = int(self.attr(node, "blocksize"))
        if len(shape) != 4 or shape[1] % (bs * bs):
            return [f"input shape {tuple(shape)}: DepthToSpace takes [N, C, H, W] with C a multiple of {bs * bs}"]
        return []

    def lower(self, node, graph, b):
        x_shape = graph.shape_of(node.inputs[0])
        bs = int(self.attr(node, "blocksize"))
        n_, c_out, h_, w_ = self.shape(node, graph)[0]
        crd = self.attr(node, "mode") == "CRD"
        y_shape = (n_, c_out, h_, w_)

        def body(idx):
            n, c, h, i, w, j = idx
            channel = c * (bs * bs) + i * bs + j if crd else (i * bs + j) * c_out + c
            b.assign(Ref(node.outputs[0], flat_index([n, c, h * bs + i, w * bs + j], y_shape)),
                     Ref(node.inputs[0], flat_index([n, channel, h, w], x_shape)))

        b.nest((n_, c_out, x_shape[2], bs, x_shape[3], bs), body)


class SpaceToDepth(Op):
    name = "SpaceToDepth"
    attributes = {"blocksize": None, "mode": "DCR"}

    def shape(self, node, graph):
        n, c, h, w = graph.shape_of(node.inputs[0])
        bs = int(self.attr(node, "blocksize"))
        return [(n, c * bs * bs, h // bs, w // bs)]

    def check(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        bs = int(self.attr(node, "blocksize"))
        if len(shape) != 4 or shape[2] % bs or shape[3] % bs:
            return [f"input shape {tuple(shape)}: SpaceToDepth takes [N, C, H, W] with H and W multiples of {bs}"]
        return []

    def lower(self, node, graph, b):
        x_shape = graph.shape_of(node.inputs[0])
        bs = int(self.attr(node, "blocksize"))
        y_shape = self.shape(node, graph)[0]
        channels = x_shape[1]
        crd = self.attr(node, "mode") == "CRD"

        def body(idx):
            n, c, h, i, w, j = idx
            channel = c * (bs * bs) + i * bs + j if crd else (i * bs + j) * channels + c
            b.assign(Ref(node.outputs[0], flat_index([n, channel, h, w], y_shape)),
                     Ref(node.inputs[0], flat_index([n, c, h * bs + i, w * bs + j], x_shape)))

        b.nest((x_shape[0], channels, y_shape[2], bs, y_shape[3], bs), body)


class CenterCropPad(Op):
    """CenterCropPad: each axis of ``axes`` (all by default) cropped or zero-padded to the constant
    ``shape`` about its centre: a crop starts at (n - t) // 2, a pad puts (t - n) // 2 zeros
    before. The output is copied in runs (one per part of each axis: before, inside, after)."""

    name = "CenterCropPad"
    attributes = {"axes": None}

    def _targets(self, node, graph):
        shape = list(graph.shape_of(node.inputs[0]))
        wanted = const_input(graph, node, 1)
        if wanted is None:
            return None
        axes = self.attr(node, "axes")
        axes = list(range(len(shape))) if axes is None else [int(a) % len(shape) for a in axes]
        out = list(shape)
        for a, t in zip(axes, np.asarray(wanted).reshape(-1)):
            out[a] = int(t)
        return out

    def shape(self, node, graph):
        out = self._targets(node, graph)
        if out is None:
            raise ValueError("the shape is computed at run time")
        return [tuple(out)]

    def check(self, node, graph):
        return [] if self._targets(node, graph) is not None else ["the shape is computed at run time; rosenna needs "
                                                                   "it constant (it decides the output's shape)"]

    def lower(self, node, graph, b):
        import itertools

        shape = list(graph.shape_of(node.inputs[0]))
        out = self._targets(node, graph)
        parts = []  # per axis: (output start, length, input start or None for zeros)
        for n, t in zip(shape, out):
            if t <= n:
                parts.append([(0, t, (n - t) // 2)])
            else:
                before = (t - n) // 2
                parts.append([p for p in ((0, before, None), (before, n, 0), (before + n, t - before - n, None))
                              if p[1] > 0])
        for combo in itertools.product(*parts):
            zero = any(p[2] is None for p in combo)

            def body(idx, combo=combo, zero=zero):
                y = flat_index([Idx.of(i) + p[0] for i, p in zip(idx, combo)], out)
                value = Num(0.0) if zero else Ref(node.inputs[0], flat_index(
                    [Idx.of(i) + p[2] for i, p in zip(idx, combo)], shape))
                b.assign(Ref(node.outputs[0], y), value)

            b.nest(tuple(p[1] for p in combo), body)
