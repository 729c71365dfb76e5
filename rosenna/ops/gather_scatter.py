"""GatherElements, GatherND, ScatterElements, ScatterND, and the reading of run-time indices.

Indices may be constants or computed at run time (an input, an ArgMax, ...): every index is read
per element as a run-time offset (rosenna.loopir.Ref.at). An index outside [-d, d) (negative ones
count from the end; NaN counts as outside) never reads or writes outside an array: a gather gives
NaN in the elements it would have filled; a scatter writes nothing and makes its whole output NaN.
Each also adds to the point's count of faults (rosenna.loopir.FAULT), which the host batch turns
into the INDEX status (rosenna.abi).

Scatters apply their updates one after the other in index order, so repeated targets combine
deterministically: the last update wins for ``none``, ``add`` sums in index order.
"""

import numpy as np

from rosenna.loopir import FAULT, OP_FAULT, Bin, Fn, Idx, Num, Ref, Select, Var, flat_index, strides
from rosenna.ops.base import Op

NAN = Num(float("nan"))


def checked_index(b, value, extent, name, negative=True):
    """Read the index ``value`` (an expression, truncated toward zero: indices reach the generated
    code as floats) for an axis of ``extent``: assign ``<name>`` the index as an offset in [0, extent) (negative ones counted from the end when ``negative``; 0 when
    out of range or NaN) and ``<name>_ok`` 1 when it was in range, else 0, and count a fault
    (rosenna.loopir.FAULT) when it was not. Returns both Vars."""
    index, ok = Var(name), Var(name + "_ok")
    b.assign(index, Fn("trunc", (value,)))  # a caller's 2.5 is index 2, never a fractional offset
    if negative:
        b.assign(index, Select(index, Num(0.0), Bin("+", index, Num(float(extent))), index, "<"))
    b.assign(ok, Select(index, Num(-0.5), Select(index, Num(extent - 0.5), Num(1.0), Num(0.0), "<"), Num(0.0)))
    b.assign(index, Select(ok, Num(0.5), index, Num(0.0)))
    b.assign(Var(FAULT), Bin("-", Num(1.0), ok), accumulate=True)
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


def invalidate(b, out, size, bad):
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
        bad = Var(OP_FAULT)
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

        # The other axes outermost, the scatter's own axis innermost: a column's updates in index
        # order, and the columns (which never meet) parallel in the whole-field form.
        others = index_shape[:axis] + index_shape[axis + 1:]

        def column(rest):
            b.loop(index_shape[axis], lambda a: body(list(rest[:axis]) + [a] + list(rest[axis:])))

        b.nest(others, column)
        invalidate(b, out, size, bad)


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
        bad = Var(OP_FAULT)
        b.loop(size, lambda i: b.assign(Ref(out, Idx.of(i)), Ref(node.inputs[0], Idx.of(i))))
        b.assign(bad, Num(0.0))

        def write(r):  # the slices' elements outermost (they never meet), the index tuples in order inside
            def one(q):
                offset, ok = _nd_offset(b, node, graph, data, 0, [], index_shape, q)
                target = Ref(out, flat_index([0] * k + list(r), data), at=offset)
                update = Ref(node.inputs[2], flat_index(list(q) + list(r), updates))
                b.assign(target, Select(ok, Num(0.5), reduced(kind, target, update), target))
                b.assign(bad, Bin("-", Num(1.0), ok), accumulate=True)

            b.nest(index_shape[:-1], one)

        b.nest(rest, write)
        invalidate(b, out, size, bad)


class Scatter(ScatterElements):
    """Scatter (opsets 9 and 10, deprecated): ScatterElements without ``reduction``.

    The same formula and the same handling of an out-of-range index."""
    name = "Scatter"
    attributes = {"axis": 0}

    def check(self, node, graph):
        return []

    def attr(self, node, key):
        return "none" if key == "reduction" else super().attr(node, key)


class TensorScatter(Op):
    """TensorScatter (opset 24): a key/value cache updated in place, one write position per batch entry.

    Y = past_cache, then for every batch entry b and every position i of update's ``axis``:
    Y[b, ..., p, ...] = update[b, ..., i, ...] with p = write_indices[b] + i (``mode`` linear) or
    (write_indices[b] + i) mod max_sequence_length (``circular``); ``write_indices`` absent means
    0 for every b. The write positions are read at run time. A linear position past the cache's end
    (or a negative or NaN write index) writes nothing and makes every element of Y NaN, and counts a
    fault (rosenna.loopir.FAULT), as the scatters do."""
    name = "TensorScatter"
    attributes = {"axis": -2, "mode": "linear"}

    def check(self, node, graph):
        if self.attr(node, "mode") not in ("linear", "circular"):
            return [f"mode {self.attr(node, 'mode')!r} is not linear or circular"]
        axis, rank = self.attr(node, "axis"), len(graph.shape_of(node.inputs[0]))
        if not -rank < axis < rank or axis % rank == 0:
            return [f"axis {axis} is not a sequence axis of a cache of rank {rank} (axis 0 is the batch)"]
        return []

    def shape_errors(self, node, graph):
        cache, update = (tuple(graph.shape_of(n)) for n in node.inputs[:2])
        axis = self.attr(node, "axis") % len(cache) if cache else 0
        if len(cache) != len(update) or any(c != u for j, (c, u) in enumerate(zip(cache, update)) if j != axis) \
                or update[axis] > cache[axis]:
            return [f"update {update} does not fit cache {cache} along axis {axis}"]
        if len(node.inputs) > 2 and node.inputs[2] and tuple(graph.shape_of(node.inputs[2])) != (cache[0],):
            return [f"write_indices has shape {tuple(graph.shape_of(node.inputs[2]))}; the cache's batch is {cache[0]}"]
        return []

    def lower(self, node, graph, b):
        cache = tuple(graph.shape_of(node.inputs[0]))
        update = tuple(graph.shape_of(node.inputs[1]))
        axis = self.attr(node, "axis") % len(cache)
        circular = self.attr(node, "mode") == "circular"
        has_indices = len(node.inputs) > 2 and bool(node.inputs[2])
        out = node.outputs[0]
        size = int(np.prod(cache, dtype=np.int64))
        bad = Var(OP_FAULT)
        b.loop(size, lambda i: b.assign(Ref(out, Idx.of(i)), Ref(node.inputs[0], Idx.of(i))))
        b.assign(bad, Num(0.0))
        length = cache[axis]

        def entry(batch):
            pos = Var("pos")
            b.assign(pos, Fn("trunc", (Ref(node.inputs[2], Idx.of(batch)),)) if has_indices else Num(0.0))

            def position(i):
                at = pos
                if circular:  # pos mod length, in [0, length)
                    at = Var("wrap")
                    b.assign(at, Fn("fmod", (pos, Num(float(length)))))
                    b.assign(at, Select(at, Num(0.0), Bin("+", at, Num(float(length))), at, "<"))
                index, ok = checked_index(b, at, length, "ix", negative=False)

                def write(rest):
                    before, after = list(rest[:axis - 1]), list(rest[axis - 1:])
                    dst = flat_index([batch] + before + [0] + after, cache)
                    target = Ref(out, dst, at=scaled(index, strides(cache)[axis]))
                    source = Ref(node.inputs[1], flat_index([batch] + before + [i] + after, update))
                    b.assign(target, Select(ok, Num(0.5), source, target))

                b.nest(update[1:axis] + update[axis + 1:], write)
                b.assign(bad, Bin("-", Num(1.0), ok), accumulate=True)
                b.assign(pos, Num(1.0), accumulate=True)

            b.loop(update[axis], position)

        b.loop(cache[0], entry)
        invalidate(b, out, size, bad)
