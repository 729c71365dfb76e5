"""DepthToSpace and SpaceToDepth: blocks of channels moved to blocks of pixels and back (pixel
shuffle), pure index remaps of a [N, C, H, W] tensor with block size b.

    DepthToSpace DCR:  Y[n, c, h*b + i, w*b + j] = X[n, (i*b + j)*C' + c, h, w]     (C' = C / b^2)
    DepthToSpace CRD:  Y[n, c, h*b + i, w*b + j] = X[n, c*b*b + i*b + j, h, w]
    SpaceToDepth DCR:  Y[n, (i*b + j)*C + c, h, w] = X[n, c, h*b + i, w*b + j]
    SpaceToDepth CRD:  Y[n, c*b*b + i*b + j, h, w] = X[n, c, h*b + i, w*b + j]

No arithmetic: the values are copied exactly.
"""

from rosenna.loopir import Ref, flat_index
from rosenna.ops.base import Op


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
