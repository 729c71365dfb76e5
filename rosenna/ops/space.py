"""DepthToSpace and SpaceToDepth (and CenterCropPad and Col2Im, their class docstrings): blocks of channels moved
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
    """DepthToSpace: blocks of channels moved to blocks of pixels (DCR or CRD)."""

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
    """SpaceToDepth: blocks of pixels moved to blocks of channels."""

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


class Col2Im(Op):
    """Col2Im: the image whose sliding blocks are the columns of the input (the inverse of im2col,
    overlaps summed): Y[n, c, p] = sum of X[n, (c, k), b] over the kernel offsets k and block
    positions b that land on pixel p (p = b*stride - pad_begin + k*dilation per axis);
    ``image_shape`` and ``block_shape`` constants."""

    name = "Col2Im"
    attributes = {"dilations": None, "pads": None, "strides": None}

    def _geometry(self, node, graph):
        image, block = const_input(graph, node, 1), const_input(graph, node, 2)
        if image is None or block is None:
            return None
        image = [int(v) for v in np.asarray(image).reshape(-1)]
        block = [int(v) for v in np.asarray(block).reshape(-1)]
        r = len(image)
        dil = [int(v) for v in (self.attr(node, "dilations") or [1] * r)]
        pads = [int(v) for v in (self.attr(node, "pads") or [0] * (2 * r))]
        strides = [int(v) for v in (self.attr(node, "strides") or [1] * r)]
        counts = [(image[d] + pads[d] + pads[d + r] - (dil[d] * (block[d] - 1) + 1)) // strides[d] + 1
                  for d in range(r)]
        return image, block, dil, pads[:r], strides, counts

    def shape(self, node, graph):
        geometry = self._geometry(node, graph)
        if geometry is None:
            raise ValueError("image_shape or block_shape is computed at run time")
        x = graph.shape_of(node.inputs[0])
        return [(x[0], x[1] // int(np.prod(geometry[1]))) + tuple(geometry[0])]

    def check(self, node, graph):
        geometry = self._geometry(node, graph)
        if geometry is None:
            return ["image_shape or block_shape is computed at run time; rosenna needs them constant"]
        x = graph.shape_of(node.inputs[0])
        if x[2] != int(np.prod(geometry[5])) or x[1] % int(np.prod(geometry[1])):
            return [f"the input's shape {tuple(x)} does not match the blocks of the image"]
        return []

    def lower(self, node, graph, b):
        import itertools

        image, block, dil, pad, strides, counts = self._geometry(node, graph)
        x_shape = graph.shape_of(node.inputs[0])
        n_, channels = x_shape[0], x_shape[1] // int(np.prod(block))
        y_shape = (n_, channels) + tuple(image)
        size = int(np.prod(y_shape))
        b.loop(size, lambda i: b.assign(Ref(node.outputs[0], Idx.of(i)), Num(0.0)))
        kernel = int(np.prod(block))
        for k_index, offsets in enumerate(itertools.product(*(range(k) for k in block))):
            runs = []  # per axis: (first block, how many) of the blocks whose pixel is inside the image
            for d, k in enumerate(offsets):
                shift = k * dil[d] - pad[d]
                first = max(0, -(-(-shift) // strides[d]))
                last = min(counts[d] - 1, (image[d] - 1 - shift) // strides[d])
                runs.append((first, last - first + 1, shift))
            if any(count <= 0 for _, count, _ in runs):
                continue

            def body(idx, runs=runs, k_index=k_index):
                n, c, *js = idx
                blocks = [Idx.of(j) + first for j, (first, _, _) in zip(js, runs)]
                pixel = [bl * s + shift for bl, s, (_, _, shift) in zip(blocks, strides, runs)]
                column = flat_index(blocks, tuple(counts))
                row = Idx.of(n) * (channels * kernel) + Idx.of(c) * kernel + k_index
                source = row * int(np.prod(counts)) + column
                b.assign(Ref(node.outputs[0], flat_index([n, c] + pixel, y_shape)), Ref(node.inputs[0], source),
                         accumulate=True)

            b.nest((n_, channels) + tuple(count for _, count, _ in runs), body)
