"""GridSample with a constant grid (a fixed resampling: regridding, image warps known when the model
is built), 2-D and 3-D; AffineGrid, the grid of affine transforms; RoiAlign with constant regions
and DeformConv with constant offsets, both bilinear samples at positions fixed when the code is
generated (the class docstrings).

    Y[n, c, p] = sum over the taps t of the output position p:  w[n, p, t] * X[n, c, i[n, p, t]]

The grid is a constant, so the taps and their weights are computed here, once, from ONNX's
definition (the one PyTorch's grid_sample has): a grid coordinate g in [-1, 1] (last grid axis in
x, y, z order, i.e. the spatial axes reversed) is unnormalized to ((g + 1) / 2) (size - 1) with
``align_corners``, else ((g + 1) size - 1) / 2;

- ``linear`` (``bilinear``): the 2^r corners around it, weights the products of (1 - d) and d;
- ``nearest``: the nearest element (ties to even);
- ``cubic`` (``bicubic``, 2-D): 4 x 4 taps, Keys' convolution weights with A = -0.75;

``padding_mode`` zeros: taps outside X add nothing; border: the coordinate clamped into X;
reflection: reflected at the borders (the edges' centres with align_corners, else their outer
sides), then clamped (cubic: each tap's index reflected or clamped). The generated code is one
statement per output position (taps with weight 0 dropped) in a loop over the channels: meant
for grids of moderate size (a grid of more positions than ``--max-op-nests`` is refused, naming
the option). Refused: a grid computed at run time (its taps would be data).
"""

import itertools
import math

import numpy as np

from rosenna.loopir import Bin, Fn, Idx, Num, Ref, Select, Var, flat_index
from rosenna.ops.base import Op, const_input, onnx_ints
from rosenna.ops.ml_preprocess import add_table, table

A = -0.75


def _unnormalize(g, size, align):
    return (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2


def _reflect(x, low2, high2):
    if low2 == high2:
        return 0.0
    low, span = low2 / 2, (high2 - low2) / 2
    x = abs(x - low)
    extra = math.fmod(x, span)
    flips = math.floor(x / span)
    return extra + low if flips % 2 == 0 else span - extra + low


def _pad(x, size, mode, align):
    if mode == "border":
        return min(max(x, 0.0), size - 1.0)
    if mode == "reflection":
        x = _reflect(x, 0, 2 * (size - 1)) if align else _reflect(x, -1, 2 * size - 1)
        return min(max(x, 0.0), size - 1.0)
    return x


def _cubic(t):
    def near(x):
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def far(x):
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def taps(point, sizes, mode, padding, align):
    """``[(index tuple, weight)]`` of one grid point (coordinates in spatial-axis order)."""
    per_axis = []
    for g, size in zip(point, sizes):
        x = _unnormalize(float(g), size, align)
        if mode == "cubic":
            base = math.floor(x)
            per_axis.append([(base - 1 + k, w) for k, w in enumerate(_cubic(x - base))])
            continue
        x = _pad(x, size, padding, align)
        if mode == "nearest":
            per_axis.append([(int(np.rint(x)), 1.0)])
        else:
            low = math.floor(x)
            per_axis.append([(low, 1.0 - (x - low)), (low + 1, x - low)])
    out = {}
    for combo in itertools.product(*per_axis):
        index, weight = [], 1.0
        for (i, w), size in zip(combo, sizes):
            if mode == "cubic" and padding != "zeros":
                i = int(round(_pad(float(i), size, padding, align)))
            index.append(i)
            weight *= w
        if weight == 0.0 or any(not 0 <= i < size for i, size in zip(index, sizes)):
            continue
        out[tuple(index)] = out.get(tuple(index), 0.0) + weight
    return list(out.items())


class GridSample(Op):
    """GridSample: X sampled at a constant grid (linear, nearest, cubic; zeros, border, reflection)."""

    name = "GridSample"
    attributes = {"align_corners": 0, "mode": "linear", "padding_mode": "zeros"}

    def _mode(self, node):
        return {"bilinear": "linear", "bicubic": "cubic"}.get(self.attr(node, "mode"), self.attr(node, "mode"))

    def shape(self, node, graph):
        x, grid = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        return [tuple(x[:2]) + tuple(grid[1:-1])]

    def check(self, node, graph):
        problems = []
        if const_input(graph, node, 1) is None:
            problems.append("the grid is computed at run time; rosenna samples constant grids only")
        if self._mode(node) not in ("linear", "nearest", "cubic"):
            problems.append(f"mode {self.attr(node, 'mode')!r} is not an ONNX GridSample mode")
        if self.attr(node, "padding_mode") not in ("zeros", "border", "reflection"):
            problems.append(f"padding_mode {self.attr(node, 'padding_mode')!r} is not an ONNX padding mode")
        return problems

    def lower(self, node, graph, b):
        x_shape = tuple(graph.shape_of(node.inputs[0]))
        grid = np.asarray(const_input(graph, node, 1), np.float64)
        out_shape = self.shape(node, graph)[0]
        sizes = x_shape[2:]
        mode, padding, align = self._mode(node), self.attr(node, "padding_mode"), bool(self.attr(node, "align_corners"))
        points = int(np.prod(grid.shape[1:-1], dtype=np.int64))
        flat = grid.reshape(grid.shape[0], points, grid.shape[-1])
        for n in range(x_shape[0]):
            for p in range(points):
                found = taps(flat[n, p][::-1], sizes, mode, padding, align)

                def channel(c, n=n, p=p, found=found):
                    total = Num(0.0)
                    for index, weight in found:
                        term = Ref(node.inputs[0], flat_index([Idx.of(n), c] + [Idx.of(i) for i in index], x_shape))
                        term = term if weight == 1.0 else Bin("*", Num(weight), term)
                        total = term if isinstance(total, Num) else Bin("+", total, term)
                    out = Idx.of(n) * int(np.prod(out_shape[1:])) + Idx.of(c) * points + p
                    b.assign(Ref(node.outputs[0], out), total)

                b.loop(x_shape[1], channel)


class AffineGrid(Op):
    """AffineGrid: the sampling grid of affine transforms ``theta`` (N, r, r+1) over an output of
    constant ``size`` [N, C, (D,) H, W]: grid[n, p, i] = sum_j theta[n, i, j] * base[p, j], with
    base[p] = (x, y, (z,) 1) the normalized coordinates of position p (-1 to 1 at the edges'
    centres with ``align_corners``, else (2k + 1)/n - 1)."""

    name = "AffineGrid"
    attributes = {"align_corners": 0}

    def _size(self, node, graph):
        size = const_input(graph, node, 1)
        return None if size is None else [int(v) for v in np.asarray(size).reshape(-1)]

    def shape(self, node, graph):
        size = self._size(node, graph)
        if size is None:
            raise ValueError("size is computed at run time")
        return [(size[0],) + tuple(size[2:]) + (len(size) - 2,)]

    def check(self, node, graph):
        if self._size(node, graph) is None:
            return ["the size is computed at run time; rosenna needs it constant"]
        return []

    def base(self, node, size):
        """``(positions, r + 1)``: each output position's (x, y, (z,) 1), in row-major order."""
        align = bool(self.attr(node, "align_corners"))
        axes = []
        for n in size[2:]:
            k = np.arange(n, dtype=np.float64)
            axes.append(np.linspace(-1.0, 1.0, n) if align else (2 * k + 1) / n - 1)
        mesh = np.meshgrid(*axes, indexing="ij")
        coords = [m.reshape(-1) for m in mesh][::-1]  # x (the last axis) first
        return np.stack(coords + [np.ones_like(coords[0])], axis=1)

    def lower(self, node, graph, b):
        size = self._size(node, graph)
        rank = len(size) - 2
        base = self.base(node, size)
        points = base.shape[0]
        theta = node.inputs[0]

        def body(idx):
            n, p, i = idx
            total = None
            for j in range(rank + 1):
                coef = Ref(theta, (Idx.of(n) * rank + i) * (rank + 1) + j)
                # the base coordinates depend on p only through the constant table: one term per p
                term = coef if j == rank else None
                if term is None:
                    term = Bin("*", coef, Num(float(base[p, j])))
                total = term if total is None else Bin("+", total, term)
            b.assign(Ref(node.outputs[0], (Idx.of(n) * points + p) * rank + i), total)

        for p in range(points):
            b.nest((size[0], rank), lambda idx, p=p: body([idx[0], p, idx[1]]))


def _bilinear_corners(y, x, height, width):
    """RoiAlign's and DeformConv's bilinear sample at (y, x): ``[(row, column, weight)]`` of its 4
    corners, [] when the point lies more than one element outside X (it adds nothing); a point
    within one element of an edge is clamped to it."""
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return []
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_low = y_high = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_low = x_high = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx
    return [(y_low, x_low, hy * hx), (y_low, x_high, hy * lx), (y_high, x_low, ly * hx), (y_high, x_high, ly * lx)]


def _weighted_sum(terms):
    """``sum(w * ref)`` of ``[(weight, Ref)]`` (weight 1 unwritten), Num(0) when empty."""
    total = None
    for weight, ref in terms:
        term = ref if weight == 1.0 else Bin("*", Num(weight), ref)
        total = term if total is None else Bin("+", total, term)
    return Num(0.0) if total is None else total


class RoiAlign(Op):
    """RoiAlign with constant regions: each region's bins, the average or largest of bilinear samples.

    Each region of X (constant, as its batch index) is cut into output_height x output_width bins,
    each bin the average (``avg``) or the largest (``max``) of a grid of bilinear samples:

        Y[r, c, ph, pw] = 1/count sum over samples s of sum_corners w X[b_r, c, corner]   (avg)
        Y[r, c, ph, pw] = max over samples s of max over corners of w X[b_r, c, corner]   (max)

    as onnx's reference and onnxruntime define it (max weighs each corner, it does not
    interpolate first). Region corners (x1, y1, x2, y2) are scaled by ``spatial_scale`` and shifted
    by -0.5 (``coordinate_transformation_mode`` half_pixel, the default from opset 16) or not
    (output_half_pixel, and opset 10, where a region is at least 1 x 1); the sampling grid is
    ``sampling_ratio`` per side, or ceil(region size / bins) when 0. The samples and weights are
    computed here, once; each output position is one statement in a loop over the channels.
    Refused: regions or batch indices computed at run time (the sample positions would be data).
    Deviation: a corner of weight 0 is not read (a NaN or Inf there does not reach the output), and
    max mode takes the larger of two values with the language's max (C's fmax skips a NaN)."""

    name = "RoiAlign"
    attributes = {"coordinate_transformation_mode": None, "mode": "avg", "output_height": 1, "output_width": 1,
                  "sampling_ratio": 0, "spatial_scale": 1.0}

    def shape(self, node, graph):
        x, rois = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        return [(rois[0], x[1], int(self.attr(node, "output_height")), int(self.attr(node, "output_width")))]

    def _half_pixel(self, node, graph):
        ctm = self.attr(node, "coordinate_transformation_mode")
        return (ctm or ("half_pixel" if graph.opset >= 16 else "output_half_pixel")) == "half_pixel"

    def check(self, node, graph):
        problems = []
        rois, indices = const_input(graph, node, 1), const_input(graph, node, 2)
        if rois is None or indices is None:
            problems.append("the regions or batch indices are computed at run time; rosenna takes constant ones "
                            "(their sample positions are fixed when the code is generated)")
        elif np.any((np.asarray(indices) < 0) | (np.asarray(indices) >= graph.shape_of(node.inputs[0])[0])):
            problems.append(f"a batch index lies outside X's batch of {graph.shape_of(node.inputs[0])[0]}")
        if self.attr(node, "mode") not in ("avg", "max"):
            problems.append(f"mode {self.attr(node, 'mode')!r} is not avg or max")
        ctm = self.attr(node, "coordinate_transformation_mode")
        if ctm not in (None, "half_pixel", "output_half_pixel"):
            problems.append(f"coordinate_transformation_mode {ctm!r} is not half_pixel or output_half_pixel")
        return problems

    def shape_errors(self, node, graph):
        x, rois, indices = (tuple(graph.shape_of(n)) for n in node.inputs[:3])
        if len(x) != 4 or len(rois) != 2 or rois[1] != 4 or indices != rois[:1]:
            return [f"X {x}, rois {rois} and batch_indices {indices} are not [N, C, H, W], [R, 4] and [R]"]
        return []

    def samples(self, node, graph, roi):
        """Per bin (row-major), the list of samples, each the list of its corners (row, column, weight)."""
        _, _, height, width = graph.shape_of(node.inputs[0])
        out_h, out_w = int(self.attr(node, "output_height")), int(self.attr(node, "output_width"))
        scale, ratio = float(self.attr(node, "spatial_scale")), int(self.attr(node, "sampling_ratio"))
        half = self._half_pixel(node, graph)
        offset = 0.5 if half else 0.0
        x1, y1, x2, y2 = (float(v) * scale - offset for v in roi)
        roi_w, roi_h = x2 - x1, y2 - y1
        if not half:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / out_h, roi_w / out_w
        grid_h = ratio if ratio > 0 else int(math.ceil(roi_h / out_h))
        grid_w = ratio if ratio > 0 else int(math.ceil(roi_w / out_w))
        bins = []
        for ph in range(out_h):
            for pw in range(out_w):
                found = []
                for iy in range(grid_h):
                    y = y1 + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                    for ix in range(grid_w):
                        x = x1 + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                        found.append(_bilinear_corners(y, x, height, width))
                bins.append((found, max(grid_h * grid_w, 1)))
        return bins

    def lower(self, node, graph, b):
        x_shape = tuple(graph.shape_of(node.inputs[0]))
        rois = np.asarray(const_input(graph, node, 1), np.float64)
        indices = np.asarray(const_input(graph, node, 2)).reshape(-1).astype(np.int64)
        out_shape = self.shape(node, graph)[0]
        is_max = self.attr(node, "mode") == "max"
        for r, roi in enumerate(rois):
            n = int(indices[r])
            for p, (found, count) in enumerate(self.samples(node, graph, roi)):
                def channel(c, r=r, n=n, p=p, found=found, count=count):
                    def ref(row, column):
                        return Ref(node.inputs[0], flat_index([Idx.of(n), c, Idx.of(row), Idx.of(column)], x_shape))

                    target = Ref(node.outputs[0], flat_index([Idx.of(r), c, Idx.of(p)], out_shape[:2] + (
                        out_shape[2] * out_shape[3],)))
                    if not is_max:
                        weights = {}
                        for corners in found:
                            for row, column, w in corners:
                                weights[(row, column)] = weights.get((row, column), 0.0) + w / count
                        b.assign(target, _weighted_sum([(w, ref(*rc)) for rc, w in weights.items() if w != 0.0]))
                        return
                    largest = None
                    for corners in found:
                        # a sample outside X is 0; inside, the largest of its weighted corners
                        values = [Bin("*", Num(w), ref(row, column)) if w != 1.0 else ref(row, column)
                                  for row, column, w in corners] or [Num(0.0)]
                        for value in values:
                            largest = value if largest is None else Fn("max", (largest, value))
                    b.assign(target, largest)

                b.loop(x_shape[1], channel)


def _zero_padded_corners(y, x, height, width):
    """The bilinear sample at (y, x) with zeros outside X (GridSample's linear, zeros, align_corners
    form): ``[(row, column, weight)]`` of the corners inside X with a weight other than 0."""
    y0, x0 = math.floor(y), math.floor(x)
    found = []
    for row, wy in ((y0, 1.0 - (y - y0)), (y0 + 1, y - y0)):
        for column, wx in ((x0, 1.0 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= row < height and 0 <= column < width and wy * wx != 0.0:
                found.append((row, column, wy * wx))
    return found


class DeformConv(Op):
    """DeformConv (2-D): a convolution whose taps sample X bilinearly at positions shifted by offsets.

    Every tap reads X at its position shifted by an offset of its own, bilinearly (zeros outside X),
    times a mask:

        Y[n, o, p, q] = B[o] + sum over c of o's group, i < kH, j < kW of
                        W[o, c, i, j] m[n, g, i, j, p, q] X~[n, c, y, x]
        y = p s_h - pad_h + i d_h + dy,   x = q s_w - pad_w + j d_w + dx

    with (dy, dx) = offset[n, g, i, j, :, p, q] and m = mask (1 when absent), g the offset group of
    channel c (``offset_group`` groups of C / offset_group channels), ``group`` groups as Conv.
    W, B and the mask may be constants or computed at run time. Constant offsets: the taps and their
    bilinear weights are computed here, once (as GridSample with a constant grid), one nest per
    output position and group (a grid of more output positions than ``--max-op-nests`` is refused,
    naming the option). Offsets computed at run time (a deformable network's offset branch): each
    output position computes its taps' corners and weights (a corner outside X adds nothing) and
    reads X at those run-time offsets (as the gathers: in the whole-field form a read of all of X).
    Refused: other than 2 spatial axes (onnx defines the 2-D
    form)."""

    name = "DeformConv"
    attributes = {"dilations": None, "group": 1, "kernel_shape": None, "offset_group": 1, "pads": None,
                  "strides": None}

    def _geometry(self, node, graph):
        """(kernel, strides, dilations, pads, output sizes) of the two spatial axes."""
        x, w = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        kernel = onnx_ints(self.attr(node, "kernel_shape")) if self.attr(node, "kernel_shape") else list(w[2:])
        strides = onnx_ints(self.attr(node, "strides") or [1, 1])
        dilations = onnx_ints(self.attr(node, "dilations") or [1, 1])
        pads = onnx_ints(self.attr(node, "pads") or [0, 0, 0, 0])
        out = [(x[2 + a] + pads[a] + pads[a + 2] - ((kernel[a] - 1) * dilations[a] + 1)) // strides[a] + 1
               for a in range(2)]
        return kernel, strides, dilations, pads, out

    def shape(self, node, graph):
        x, w = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        return [(x[0], w[0]) + tuple(self._geometry(node, graph)[4])]

    def _optional(self, node, position):
        return node.inputs[position] if len(node.inputs) > position and node.inputs[position] else None

    def check(self, node, graph):
        if len(graph.shape_of(node.inputs[0])) != 4:
            return [f"X has rank {len(graph.shape_of(node.inputs[0]))}; rosenna takes the 2-D DeformConv "
                    "([N, C, H, W], the form onnx defines)"]
        return []

    def shape_errors(self, node, graph):
        x, w, offset = (tuple(graph.shape_of(n)) for n in node.inputs[:3])
        if len(x) != 4 or len(w) != 4:
            return []
        group, offset_group = int(self.attr(node, "group")), int(self.attr(node, "offset_group"))
        kernel, _, _, _, out = self._geometry(node, graph)
        problems = []
        if group < 1 or offset_group < 1 or x[1] != w[1] * group or w[0] % group or x[1] % offset_group:
            problems.append(f"X {x} and W {w} do not fit group {group} and offset_group {offset_group}")
        if offset != (x[0], offset_group * 2 * kernel[0] * kernel[1], *out):
            wanted = (x[0], offset_group * 2 * kernel[0] * kernel[1], *out)
            problems.append(f"offset has shape {offset}; it must be {wanted}")
        mask = self._optional(node, 4)
        if mask and tuple(graph.shape_of(mask)) != (x[0], offset_group * kernel[0] * kernel[1], *out):
            problems.append(f"mask has shape {tuple(graph.shape_of(mask))}; it must be "
                            f"{(x[0], offset_group * kernel[0] * kernel[1], *out)}")
        bias = self._optional(node, 3)
        if bias and tuple(graph.shape_of(bias)) != (w[0],):
            problems.append(f"B has shape {tuple(graph.shape_of(bias))}; it must be ({w[0]},)")
        return problems

    def _channel_runs(self, node, graph, grp):
        """``(offset group, first channel, stop)`` of the channels of ``group`` grp, cut where the
        offset group changes."""
        channels, per_group = graph.shape_of(node.inputs[0])[1], graph.shape_of(node.inputs[1])[1]
        per_offset_group = channels // int(self.attr(node, "offset_group"))
        first = grp * per_group
        return [(g, max(first, g * per_offset_group), min(first + per_group, (g + 1) * per_offset_group))
                for g in range(first // per_offset_group, (first + per_group - 1) // per_offset_group + 1)]

    def canonicalize(self, node, graph):
        """Run-time offsets: the tables of each output position's tap positions before the offset
        (p s - pad + i d per axis), read at the loops' affine indices."""
        if const_input(graph, node, 2) is not None:
            return
        kernel, strides, dilations, pads, out = self._geometry(node, graph)
        node.inputs.extend([""] * (5 - len(node.inputs)))  # the tables follow the 5 ONNX inputs
        for axis, key in enumerate(("rows", "columns")):
            p, i = np.arange(out[axis])[:, None], np.arange(kernel[axis])[None, :]
            add_table(node, graph, key, p * strides[axis] - pads[axis] + i * dilations[axis])

    def lower(self, node, graph, b):
        if const_input(graph, node, 2) is None:
            self._lower_runtime(node, graph, b)
            return
        x_name, w_name = node.inputs[:2]
        x_shape, w_shape = tuple(graph.shape_of(x_name)), tuple(graph.shape_of(w_name))
        offsets = np.asarray(const_input(graph, node, 2), np.float64)
        bias, mask = self._optional(node, 3), self._optional(node, 4)
        kernel, strides, dilations, pads, out = self._geometry(node, graph)
        group = int(self.attr(node, "group"))
        batch, _, height, width = x_shape
        out_shape = self.shape(node, graph)[0]
        taps = kernel[0] * kernel[1]
        outs_per_group = w_shape[0] // group
        mask_shape = (batch, int(self.attr(node, "offset_group")) * taps, out[0], out[1])
        acc = Var("acc")

        def position(n, p, q, grp):
            """Y[n, o, p, q] for the outputs o of group grp (a loop over them)."""
            def output(o):
                oc = Idx.of(o) + grp * outs_per_group
                b.assign(acc, Ref(bias, oc) if bias else Num(0.0))
                for g, start, stop in self._channel_runs(node, graph, grp):
                    for i, j in itertools.product(range(kernel[0]), range(kernel[1])):
                        t = g * taps + i * kernel[1] + j
                        y = p * strides[0] - pads[0] + i * dilations[0] + offsets[n, 2 * t, p, q]
                        x = q * strides[1] - pads[1] + j * dilations[1] + offsets[n, 2 * t + 1, p, q]
                        found = _zero_padded_corners(y, x, height, width)
                        if found:
                            scale = Ref(mask, flat_index([n, t, p, q], mask_shape)) if mask else None
                            b.loop(stop - start, lambda cl, i=i, j=j, found=found, scale=scale, start=start:
                                   tap(n, oc, Idx.of(cl) + start, grp * w_shape[1], i, j, found, scale))
                b.assign(Ref(node.outputs[0], flat_index([Idx.of(n), oc, Idx.of(p), Idx.of(q)], out_shape)), acc)

            b.loop(outs_per_group, output)

        def tap(n, oc, c, first, i, j, found, scale):
            """acc += W[oc, c - first, i, j] (m) X~ at the tap's bilinear sample of channel c."""
            sample = _weighted_sum([(w, Ref(x_name, flat_index([Idx.of(n), c, Idx.of(r), Idx.of(col)], x_shape)))
                                    for r, col, w in found])
            term = Bin("*", Ref(w_name, flat_index([oc, c - first, Idx.of(i), Idx.of(j)], w_shape)), sample)
            b.assign(acc, Bin("*", scale, term) if scale is not None else term, accumulate=True)

        for n, p, q, grp in itertools.product(range(batch), range(out[0]), range(out[1]), range(group)):
            position(n, p, q, grp)

    def _lower_runtime(self, node, graph, b):
        """Offsets computed at run time: per output position, each tap's 4 corners (a flat offset
        into one channel of X, clamped inside it, and a weight, 0 for a corner outside X), then
        the sum over the output channels' taps and input channels."""
        x_name, w_name, offset = node.inputs[:3]
        x_shape, w_shape = tuple(graph.shape_of(x_name)), tuple(graph.shape_of(w_name))
        bias, mask = self._optional(node, 3), self._optional(node, 4)
        kernel, _, _, _, out = self._geometry(node, graph)
        group, offset_group = int(self.attr(node, "group")), int(self.attr(node, "offset_group"))
        batch, _, height, width = x_shape
        out_shape = self.shape(node, graph)[0]
        taps = kernel[0] * kernel[1]
        offset_shape = (batch, offset_group * taps * 2, out[0], out[1])
        mask_shape = (batch, offset_group * taps, out[0], out[1])
        outs_per_group = w_shape[0] // group
        rows, columns = table(node, "rows"), table(node, "columns")
        acc = Var("acc")

        def corners(n, p, q, t, i, j):
            """The 4 corners of tap t (offset group included) at (p, q): [(offset Var, weight Var)]."""
            y, x = Var(f"y{t}"), Var(f"x{t}")
            b.assign(y, Bin("+", Ref(rows, Idx.of(p) * kernel[0] + i), Ref(offset, flat_index([n, 2 * t, p, q],
                                                                                             offset_shape))))
            b.assign(x, Bin("+", Ref(columns, Idx.of(q) * kernel[1] + j),
                            Ref(offset, flat_index([n, 2 * t + 1, p, q], offset_shape))))
            y0, x0 = Var(f"y{t}_low"), Var(f"x{t}_low")
            b.assign(y0, Fn("floor", (y,)))
            b.assign(x0, Fn("floor", (x,)))
            found = []
            for dy, dx in itertools.product((0, 1), (0, 1)):
                row, column = Bin("+", y0, Num(float(dy))), Bin("+", x0, Num(float(dx)))
                wy = Bin("-", y, y0) if dy else Bin("-", Num(1.0), Bin("-", y, y0))
                wx = Bin("-", x, x0) if dx else Bin("-", Num(1.0), Bin("-", x, x0))
                inside = _between(row, height, _between(column, width, Bin("*", wy, wx), Num(0.0)), Num(0.0))
                at, weight = Var(f"at{t}_{dy}{dx}"), Var(f"w{t}_{dy}{dx}")
                b.assign(weight, inside)
                b.assign(at, Bin("+", Bin("*", _clamped(row, height), Num(float(width))), _clamped(column, width)))
                found.append((at, weight))
            return found

        def position(n, p, q):
            tap_corners = {}
            for g in range(offset_group):
                for i, j in itertools.product(range(kernel[0]), range(kernel[1])):
                    t = g * taps + i * kernel[1] + j
                    tap_corners[t] = corners(n, p, q, t, i, j)
                    if mask:
                        b.assign(Var(f"m{t}"), Ref(mask, flat_index([n, t, p, q], mask_shape)))
            for grp in range(group):
                def output(o, grp=grp):
                    oc = Idx.of(o) + grp * outs_per_group
                    b.assign(acc, Ref(bias, oc) if bias else Num(0.0))
                    for g, start, stop in self._channel_runs(node, graph, grp):
                        for i, j in itertools.product(range(kernel[0]), range(kernel[1])):
                            t = g * taps + i * kernel[1] + j

                            def channel(cl, i=i, j=j, t=t, start=start):
                                c = Idx.of(cl) + start
                                plane = flat_index([Idx.of(n), c, 0, 0], x_shape)
                                sample = None
                                for at, weight in tap_corners[t]:
                                    term = Bin("*", weight, Ref(x_name, plane, at=at))
                                    sample = term if sample is None else Bin("+", sample, term)
                                weight = Ref(w_name, flat_index([oc, c - grp * w_shape[1], Idx.of(i), Idx.of(j)],
                                                                w_shape))
                                term = Bin("*", weight, sample)
                                b.assign(acc, Bin("*", Var(f"m{t}"), term) if mask else term, accumulate=True)

                            b.loop(stop - start, channel)
                    b.assign(Ref(node.outputs[0], flat_index([Idx.of(n), oc, p, q], out_shape)), acc)

                b.loop(outs_per_group, output)

        for n in range(batch):
            b.nest(tuple(out), lambda idx, n=n: position(n, *idx))


def _between(value, extent, inside, outside):
    """``inside`` where the whole number ``value`` lies in [0, extent), else ``outside``."""
    return Select(value, Num(-0.5), Select(value, Num(extent - 0.5), inside, outside, "<"), outside)


def _clamped(value, extent):
    """The whole number ``value`` clamped into [0, extent - 1], NaN to 0 (an offset that is always
    inside the array, whatever the data)."""
    return Select(value, Num(-0.5), Select(value, Num(extent - 0.5), value, Num(float(extent - 1)), "<"), Num(0.0))
