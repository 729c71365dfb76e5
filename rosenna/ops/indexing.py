"""Gather, Concat, Slice, Split and Tile: copies that pick, join or repeat parts of values.

Gather:  Y[pre, q, post] = X[pre, I[q], post] (negative entries count from the end); a constant
         arithmetic I is one loop nest, any other constant one nest per index; an I computed at run
         time (an input, an ArgMax, ...) is read per element: an index outside [-d, d) gives NaN in
         the elements it would have filled (nothing outside X is read).
GatherElements, GatherND, ScatterElements, ScatterND: see their classes (indices constant or run time).
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

from rosenna.loopir import Bin, Idx, Num, Ref, Select, Var, flat_index, strides
from rosenna.ops.base import Op, const_input, onnx_ints

NAN = Num(float("nan"))


def checked_index(b, value, extent, name, negative=True):
    """Read the index ``value`` (an expression) for an axis of ``extent``: assign ``<name>`` the
    index as an offset in [0, extent) (negative ones counted from the end when ``negative``; 0 when
    out of range or NaN) and ``<name>_ok`` 1 when it was in range, else 0. Returns both Vars."""
    index, ok = Var(name), Var(name + "_ok")
    b.assign(index, value)
    if negative:
        b.assign(index, Select(index, Num(0.0), Bin("+", index, Num(float(extent))), index, "<"))
    b.assign(ok, Select(index, Num(-0.5), Select(index, Num(extent - 0.5), Num(1.0), Num(0.0), "<"), Num(0.0)))
    b.assign(index, Select(ok, Num(0.5), index, Num(0.0)))
    return index, ok


def scaled(index, stride):
    return index if stride == 1 else Bin("*", index, Num(float(stride)))


def guarded(ok, value):
    """``value`` where ``ok`` is 1, NaN where it is 0."""
    return Select(ok, Num(0.5), value, NAN)


REDUCTIONS = ("none", "add", "mul", "max", "min")


def reduced(kind, old, new):
    """ScatterElements/ScatterND's combination of the current element and an update."""
    if kind == "add":
        return Bin("+", old, new)
    if kind == "mul":
        return Bin("*", old, new)
    if kind == "max":
        return Select(new, old, new, old)
    if kind == "min":
        return Select(new, old, new, old, "<")
    return new


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


class GatherElements(Op):
    """Elements picked along one axis by run-time or constant indices.

    Y[i] = X[i with axis a replaced by I[i]] for every index i of I (Y has I's shape); an index
    outside [-d, d) gives NaN in that element."""
    name = "GatherElements"
    attributes = {"axis": 0}

    def shape(self, node, graph):
        return [tuple(graph.shape_of(node.inputs[1]))]

    def evaluate(self, node, inputs):
        return [np.take_along_axis(inputs[0], np.where(inputs[1] < 0, inputs[1] + inputs[0].shape[
            self.attr(node, "axis")], inputs[1]), axis=self.attr(node, "axis"))]

    def shape_errors(self, node, graph):
        data, index = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        if len(data) != len(index):
            return [f"indices of rank {len(index)} for data of rank {len(data)}"]
        return []

    def lower(self, node, graph, b):
        data = graph.shape_of(node.inputs[0])
        index_shape = tuple(graph.shape_of(node.inputs[1]))
        axis = self.attr(node, "axis") % len(data)

        def body(idx):
            index, ok = checked_index(b, Ref(node.inputs[1], flat_index(idx, index_shape)), data[axis], "ix")
            src = list(idx)
            src[axis] = 0
            b.assign(Ref(node.outputs[0], flat_index(idx, index_shape)),
                     guarded(ok, Ref(node.inputs[0], flat_index(src, data), at=scaled(index, strides(data)[axis]))))

        b.nest(index_shape, body)


def _nd_offset(b, node, graph, data, batch, prefix_idx, index_shape, q_idx):
    """GatherND/ScatterND: the run-time offset into ``data`` of the index tuple at ``q_idx`` of the
    indices (their last axis holds the tuple) and its ok flag (the product of the parts' flags)."""
    k = index_shape[-1]
    offset, ok = None, None
    for j in range(k):
        where = flat_index(list(q_idx) + [j], index_shape)
        index, part_ok = checked_index(b, Ref(node.inputs[1], where), data[batch + j], f"ix{j}")
        term = scaled(index, strides(data)[batch + j])
        offset = term if offset is None else Bin("+", offset, term)
        ok = part_ok if ok is None else Bin("*", ok, part_ok)
    if ok is not None and k > 1:
        flag = Var("ix_ok")
        b.assign(flag, ok)
        ok = flag
    return offset, ok


class GatherND(Op):
    """Slices picked by run-time or constant index tuples.

    Y[b, q, r] = X[b, I[b, q, 0], ..., I[b, q, k-1], r] (``batch_dims`` leading axes b shared);
    an index tuple with a part outside its axis gives NaN in the elements it would have filled."""
    name = "GatherND"
    attributes = {"batch_dims": 0}

    def shape(self, node, graph):
        data, index = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        batch = int(self.attr(node, "batch_dims"))
        return [tuple(index[:-1]) + tuple(data[batch + index[-1]:])]

    def shape_errors(self, node, graph):
        data, index = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        batch = int(self.attr(node, "batch_dims"))
        if not index or index[-1] + batch > len(data) or tuple(index[:batch]) != tuple(data[:batch]):
            return [f"indices of shape {tuple(index)} do not index data of shape {tuple(data)} with "
                    f"batch_dims {batch}"]
        return []

    def lower(self, node, graph, b):
        data = tuple(graph.shape_of(node.inputs[0]))
        index_shape = tuple(graph.shape_of(node.inputs[1]))
        batch = int(self.attr(node, "batch_dims"))
        k = index_shape[-1]
        rest = data[batch + k:]
        out_shape = self.shape(node, graph)[0]

        def outer(q):
            offset, ok = _nd_offset(b, node, graph, data, batch, q[:batch], index_shape, q)

            def copy(r):
                src = flat_index(list(q[:batch]) + [0] * k + list(r), data)
                value = Ref(node.inputs[0], src, at=offset) if offset is not None else Ref(node.inputs[0], src)
                b.assign(Ref(node.outputs[0], flat_index(list(q) + list(r), out_shape)),
                         guarded(ok, value) if ok is not None else value)

            b.nest(rest, copy)

        b.nest(index_shape[:-1], outer)


def _invalidate(b, out, size, bad):
    """Every element of ``out`` NaN when ``bad`` counts an out-of-range index."""
    b.loop(size, lambda i: b.assign(Ref(out, Idx.of(i)), Select(bad, Num(0.5), NAN, Ref(out, Idx.of(i)))))


class ScatterElements(Op):
    """Updates written or reduced (add, mul, max, min) along one axis, in index order.

    Y = X, then for every index i of I in order: Y[i with axis a replaced by I[i]] = U[i]
    (``reduction`` none) or combined with it (add, mul, max, min). The updates run one after the
    other in index order, so repeated targets combine deterministically (the last one wins for
    none). An index outside [-d, d) writes nothing and makes every element of Y NaN."""
    name = "ScatterElements"
    attributes = {"axis": 0, "reduction": "none"}

    def check(self, node, graph):
        if self.attr(node, "reduction") not in REDUCTIONS:
            return [f"reduction {self.attr(node, 'reduction')!r} is not one of {', '.join(REDUCTIONS)}"]
        return []

    def shape_errors(self, node, graph):
        data, index, updates = (graph.shape_of(n) for n in node.inputs[:3])
        if len(index) != len(data) or tuple(index) != tuple(updates):
            return [f"indices {tuple(index)} and updates {tuple(updates)} must have one shape of data's rank"]
        return []

    def lower(self, node, graph, b):
        data = tuple(graph.shape_of(node.inputs[0]))
        index_shape = tuple(graph.shape_of(node.inputs[1]))
        axis = self.attr(node, "axis") % len(data)
        kind = self.attr(node, "reduction")
        out = node.outputs[0]
        size = int(np.prod(data, dtype=np.int64))
        bad = Var("bad")
        b.loop(size, lambda i: b.assign(Ref(out, Idx.of(i)), Ref(node.inputs[0], Idx.of(i))))
        b.assign(bad, Num(0.0))

        def body(idx):
            index, ok = checked_index(b, Ref(node.inputs[1], flat_index(idx, index_shape)), data[axis], "ix")
            dst = list(idx)
            dst[axis] = 0
            target = Ref(out, flat_index(dst, data), at=scaled(index, strides(data)[axis]))
            update = Ref(node.inputs[2], flat_index(idx, index_shape))
            b.assign(target, Select(ok, Num(0.5), reduced(kind, target, update), target))
            b.assign(bad, Bin("-", Num(1.0), ok), accumulate=True)

        b.nest(index_shape, body)
        _invalidate(b, out, size, bad)


class ScatterND(Op):
    """Slices written or reduced (add, mul, max, min) at index tuples, in index order.

    Y = X, then for every index tuple I[q] (the last axis of I) in order: the slice
    Y[I[q], :] = U[q, :] or combined with it (add, mul, max, min), deterministically in index
    order. An index tuple with a part outside its axis writes nothing and makes every element of Y
    NaN."""
    name = "ScatterND"
    attributes = {"reduction": "none"}

    def check(self, node, graph):
        if self.attr(node, "reduction") not in REDUCTIONS:
            return [f"reduction {self.attr(node, 'reduction')!r} is not one of {', '.join(REDUCTIONS)}"]
        return []

    def shape_errors(self, node, graph):
        data, index, updates = (tuple(graph.shape_of(n)) for n in node.inputs[:3])
        if not index or index[-1] > len(data) or updates != index[:-1] + data[index[-1]:]:
            return [f"updates {updates} must have shape indices[:-1] + data[k:] for indices {index}, data {data}"]
        return []

    def lower(self, node, graph, b):
        data = tuple(graph.shape_of(node.inputs[0]))
        index_shape = tuple(graph.shape_of(node.inputs[1]))
        updates = tuple(graph.shape_of(node.inputs[2]))
        k = index_shape[-1]
        rest = data[k:]
        kind = self.attr(node, "reduction")
        out = node.outputs[0]
        size = int(np.prod(data, dtype=np.int64))
        bad = Var("bad")
        b.loop(size, lambda i: b.assign(Ref(out, Idx.of(i)), Ref(node.inputs[0], Idx.of(i))))
        b.assign(bad, Num(0.0))

        def outer(q):
            offset, ok = _nd_offset(b, node, graph, data, 0, [], index_shape, q)

            def write(r):
                target = Ref(out, flat_index([0] * k + list(r), data), at=offset)
                update = Ref(node.inputs[2], flat_index(list(q) + list(r), updates))
                b.assign(target, Select(ok, Num(0.5), reduced(kind, target, update), target))

            b.nest(rest, write)
            b.assign(bad, Bin("-", Num(1.0), ok), accumulate=True)

        b.nest(index_shape[:-1], outer)
        _invalidate(b, out, size, bad)


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
