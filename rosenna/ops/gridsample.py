"""GridSample with a constant grid (a fixed resampling: regridding, image warps known when the model
is built), 2-D and 3-D; and AffineGrid, the grid of affine transforms (its class docstring).

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

from rosenna.loopir import Bin, Idx, Num, Ref, flat_index
from rosenna.ops.base import Op, const_input

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
