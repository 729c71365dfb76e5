"""Gather, Concat, Slice, Split and Tile: copies that pick, join or repeat parts of values.

Gather:  Y[pre, q, post] = X[pre, I[q], post] (negative entries count from the end); a constant
         arithmetic I is one loop nest, any other constant one nest per index (up to
         GATHER_NESTS_MAX, else a table read at run time); an I computed at run
         time (an input, an ArgMax, ...) is read per element: an index outside [-d, d) gives NaN in
         the elements it would have filled (nothing outside X is read).
GatherElements, GatherND, ScatterElements, ScatterND: rosenna.ops.gather_scatter.
Concat:  Y = the inputs joined along ``axis``; run-time values and constants mix freely.
Slice:   Y[.., i, ..] = X[.., start + i*step, ..] with constant starts/ends/axes/steps (inputs from
         opset 10, attributes before), clamped as numpy clamps a slice.
Split:   output k = X[.., offset_k + i, ..] along ``axis``; sizes from the ``split`` attribute
         (opset < 13) or constant input, else equal parts (``num_outputs`` from opset 18: the last
         part smaller when the extent does not divide).
Tile:    Y[.., r*d + q, ..] = X[.., q, ..] for every repeat r of an axis of extent d (constant
         ``repeats``): the loops run over (r, q) pairs, so each store is one affine copy.

All of them also fold the constant shape arithmetic that exporters emit (Shape->Gather->Concat ...).
Limits, refused with a reason: a start, end, step, axis or split size computed at run time; a
constant Gather index out of range.
"""

import numpy as np

from rosenna.loopir import Idx, Ref, flat_index
from rosenna.ops.base import Op, const_input, onnx_ints
from rosenna.ops.gather_scatter import checked_index, guarded, scaled

#: A constant Gather whose indices are no arithmetic sequence gets one loop nest per index up to
#: this many indices; above, it reads its index table at run time (one nest: a mesh's 2,000-edge
#: list was 2,000 nests, 17,000 lines of C); the whole-field form reads all of the data for it (rosenna.loopir.Ref.at).
GATHER_NESTS_MAX = 64


class Gather(Op):
    name = "Gather"
    attributes = {"axis": 0}

    def evaluate(self, node, inputs):
        return [np.take(inputs[0], inputs[1], axis=self.attr(node, "axis"))]

    def shape(self, node, graph):
        data = graph.shape_of(node.inputs[0])
        axis = self.attr(node, "axis") % len(data)
        return [tuple(data[:axis]) + tuple(graph.shape_of(node.inputs[1])) + tuple(data[axis + 1:])]

    def check(self, node, graph):
        indices = const_input(graph, node, 1)
        if indices is None:
            return []
        data = graph.shape_of(node.inputs[0])
        extent = data[self.attr(node, "axis") % len(data)]
        if indices.size and (indices.min() < -extent or indices.max() >= extent):
            return [f"an index is outside [-{extent}, {extent})"]
        return []

    def lower(self, node, graph, b):
        if const_input(graph, node, 1) is None:
            self.lower_runtime(node, graph, b)
            return
        data = graph.shape_of(node.inputs[0])
        axis = self.attr(node, "axis") % len(data)
        picks = [int(v) % data[axis] for v in np.asarray(graph.weights[node.inputs[1]]).reshape(-1)]
        pre, post = tuple(data[:axis]), tuple(data[axis + 1:])
        out_shape = pre + (len(picks),) + post
        src, dst = node.inputs[0], node.outputs[0]
        step = picks[1] - picks[0] if len(picks) > 1 else 0
        if all(p == picks[0] + k * step for k, p in enumerate(picks)):
            def body(idx):
                q = idx[len(pre)]
                in_idx = idx[:len(pre)] + [Idx.of(q) * step + picks[0]] + idx[len(pre) + 1:]
                b.assign(Ref(dst, flat_index(idx, out_shape)), Ref(src, flat_index(in_idx, data)))

            b.nest(out_shape, body)
            return
        if len(picks) > GATHER_NESTS_MAX:  # the index table read at run time: one nest, not thousands
            self.lower_runtime(node, graph, b)
            return
        for q, pick in enumerate(picks):
            def one(idx, q=q, pick=pick):
                out_idx = idx[:len(pre)] + [q] + idx[len(pre):]
                in_idx = idx[:len(pre)] + [pick] + idx[len(pre):]
                b.assign(Ref(dst, flat_index(out_idx, out_shape)), Ref(src, flat_index(in_idx, data)))

            b.nest(pre + post, one)


    def lower_runtime(self, node, graph, b):
        data = graph.shape_of(node.inputs[0])
        axis = self.attr(node, "axis") % len(data)
        index_shape = tuple(graph.shape_of(node.inputs[1]))
        pre, post = tuple(data[:axis]), tuple(data[axis + 1:])
        out_shape = pre + index_shape + post
        inner = int(np.prod(post, dtype=np.int64))

        def outer(idx):
            q = idx[len(pre):]
            where = flat_index(q, index_shape) if index_shape else Idx()
            index, ok = checked_index(b, Ref(node.inputs[1], where), data[axis], "ix")

            def copy(rest):
                src = flat_index(list(idx[:len(pre)]) + [0] + list(rest), data)
                b.assign(Ref(node.outputs[0], flat_index(list(idx) + list(rest), out_shape)),
                         guarded(ok, Ref(node.inputs[0], src, at=scaled(index, inner))))

            b.nest(post, copy)

        b.nest(pre + index_shape, outer)


class Concat(Op):
    name = "Concat"
    attributes = {"axis": 0}

    def shape_errors(self, node, graph):
        shapes = [tuple(graph.shape_of(n)) for n in node.inputs if n]
        rank, axis = len(shapes[0]), self.attr(node, "axis")
        if any(len(s) != rank for s in shapes):
            return [f"inputs of different ranks {shapes}"]
        if not -rank <= axis < rank:
            return [f"axis {axis} outside the rank {rank} of its inputs"]
        axis %= rank
        if any(s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:] for s in shapes):
            return [f"inputs {shapes} differ outside the concatenation axis {axis}"]
        return []

    def shape(self, node, graph):
        shapes = [graph.shape_of(n) for n in node.inputs if n]
        axis = self.attr(node, "axis") % len(shapes[0])
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return [tuple(out)]

    def evaluate(self, node, inputs):
        return [np.concatenate([i for i in inputs if i is not None], axis=self.attr(node, "axis"))]

    def lower(self, node, graph, b):
        out_shape = self.shape(node, graph)[0]
        axis = self.attr(node, "axis") % len(out_shape)
        offset = 0
        for name in node.inputs:
            if not name:
                continue
            shape = graph.shape_of(name)

            def body(idx, name=name, shape=shape, offset=offset):
                out_idx = list(idx)
                out_idx[axis] = Idx.of(idx[axis]) + offset
                b.assign(Ref(node.outputs[0], flat_index(out_idx, out_shape)), Ref(name, flat_index(idx, shape)))

            if all(shape):
                b.nest(shape, body)
            offset += shape[axis]


def slice_params(node, inputs_or_graph, shape, attr):
    """``[(axis, start, step, count)]`` for the sliced axes, or None when not constant."""
    def arg(position):
        if isinstance(inputs_or_graph, list):
            return inputs_or_graph[position] if len(inputs_or_graph) > position else None
        return const_input(inputs_or_graph, node, position)

    if len(node.inputs) > 1:
        starts, ends = arg(1), arg(2)
        if starts is None or ends is None:
            return None
        axes = arg(3) if len(node.inputs) > 3 and node.inputs[3] else None
        steps = arg(4) if len(node.inputs) > 4 and node.inputs[4] else None
        if (axes is None and len(node.inputs) > 3 and node.inputs[3]) or (
                steps is None and len(node.inputs) > 4 and node.inputs[4]):
            return None
    else:
        starts, ends, axes, steps = attr("starts"), attr("ends"), attr("axes"), None
    starts, ends = onnx_ints(starts), onnx_ints(ends)
    axes = onnx_ints(axes) if axes is not None else list(range(len(starts)))
    steps = onnx_ints(steps) if steps is not None else [1] * len(starts)
    out = []
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis %= len(shape)
        first, stop, stride = slice(start, end, step).indices(shape[axis])
        out.append((axis, first, stride, len(range(first, stop, stride))))
    return out


class Slice(Op):
    name = "Slice"
    attributes = {"starts": None, "ends": None, "axes": None}

    def _params(self, node, inputs_or_graph, shape):
        return slice_params(node, inputs_or_graph, shape, lambda key: self.attr(node, key))

    def is_alias(self, node, graph):
        """A Slice that keeps every element (an exporter's [0:1] of an axis of 1, after irfft2)
        only relabels its input."""
        shape = graph.shape_of(node.inputs[0])
        params = self._params(node, graph, shape)
        return params is not None and all(step == 1 and count == shape[axis] for axis, _, step, count in params)

    def evaluate(self, node, inputs):
        data = inputs[0]
        for axis, first, step, count in self._params(node, inputs, data.shape):
            data = np.take(data, range(first, first + step * count, step) if count else [], axis=axis)
        return [data]

    def shape(self, node, graph):
        shape = list(graph.shape_of(node.inputs[0]))
        for axis, _, _, count in self._params(node, graph, shape):
            shape[axis] = count
        return [tuple(shape)]

    def check(self, node, graph):
        if any(0 in onnx_ints(graph.weights[n]) for n in node.inputs[4:5] if n in graph.weights):
            return ["a step is 0"]
        if self._params(node, graph, graph.shape_of(node.inputs[0])) is None:
            return ["starts, ends, axes or steps are computed at run time; rosenna needs them constant"]
        return []

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        out_shape = self.shape(node, graph)[0]
        mapping = {axis: (first, step) for axis, first, step, _ in self._params(node, graph, shape)}

        def body(idx):
            in_idx = [Idx.of(i) * mapping[a][1] + mapping[a][0] if a in mapping else i for a, i in enumerate(idx)]
            b.assign(Ref(node.outputs[0], flat_index(idx, out_shape)), Ref(node.inputs[0], flat_index(in_idx, shape)))

        if all(out_shape):
            b.nest(out_shape, body)


class Split(Op):
    name = "Split"
    attributes = {"axis": 0, "split": None, "num_outputs": None}

    def _sizes(self, node, inputs_or_graph, shape):
        axis = self.attr(node, "axis") % len(shape)
        split = None
        if len(node.inputs) > 1 and node.inputs[1]:
            split = inputs_or_graph[1] if isinstance(inputs_or_graph, list) else const_input(inputs_or_graph, node, 1)
            if split is None:
                return axis, None
        elif self.attr(node, "split") is not None:
            split = self.attr(node, "split")
        if split is not None:
            return axis, onnx_ints(split)
        parts = len(node.outputs)
        extent = shape[axis]
        size = -(-extent // parts)
        if self.attr(node, "num_outputs") is None and extent % parts == 0:
            size = extent // parts
        return axis, [min(size, max(0, extent - k * size)) for k in range(parts)]

    def shape(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        axis, sizes = self._sizes(node, graph, shape)
        return [tuple(shape[:axis]) + (s,) + tuple(shape[axis + 1:]) for s in sizes]

    def evaluate(self, node, inputs):
        axis, sizes = self._sizes(node, inputs, inputs[0].shape)
        return list(np.split(inputs[0], np.cumsum(sizes)[:-1], axis=axis))

    def check(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        axis, sizes = self._sizes(node, graph, shape)
        if sizes is None:
            return ["the split sizes are computed at run time; rosenna needs them constant"]
        if sum(sizes) != shape[axis] or len(sizes) != len(node.outputs):
            return [f"split sizes {sizes} do not cover the extent {shape[axis]} with {len(node.outputs)} outputs"]
        return []

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        axis, sizes = self._sizes(node, graph, shape)
        offset = 0
        for out, size in zip(node.outputs, sizes):
            out_shape = tuple(shape[:axis]) + (size,) + tuple(shape[axis + 1:])

            def body(idx, out=out, out_shape=out_shape, offset=offset):
                in_idx = list(idx)
                in_idx[axis] = Idx.of(idx[axis]) + offset
                b.assign(Ref(out, flat_index(idx, out_shape)), Ref(node.inputs[0], flat_index(in_idx, shape)))

            if out and all(out_shape):
                b.nest(out_shape, body)
            offset += size


class Tile(Op):
    name = "Tile"

    def evaluate(self, node, inputs):
        return [np.tile(inputs[0], onnx_ints(inputs[1]))]

    def _repeats(self, node, graph):
        repeats = const_input(graph, node, 1)
        return None if repeats is None else onnx_ints(repeats)

    def shape(self, node, graph):
        return [tuple(d * r for d, r in zip(graph.shape_of(node.inputs[0]), self._repeats(node, graph)))]

    def check(self, node, graph):
        repeats = self._repeats(node, graph)
        if repeats is None:
            return ["repeats are computed at run time; rosenna needs them constant"]
        if len(repeats) != len(graph.shape_of(node.inputs[0])) or any(r < 1 for r in repeats):
            return [f"repeats {repeats} must give one positive count per axis of the input"]
        return []

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        repeats = self._repeats(node, graph)
        out_shape = self.shape(node, graph)[0]
        nest = [extent for pair in zip(repeats, shape) for extent in pair]

        def body(idx):
            r, q = idx[0::2], idx[1::2]
            out_idx = [Idx.of(ri) * d + qi for ri, qi, d in zip(r, q, shape)]
            b.assign(Ref(node.outputs[0], flat_index(out_idx, out_shape)), Ref(node.inputs[0], flat_index(q, shape)))

        b.nest(nest, body)
