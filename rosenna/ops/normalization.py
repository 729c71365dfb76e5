"""Normalisations. LayerNormalization, GroupNormalization and InstanceNormalization compute their
statistics at run time, over contiguous blocks of X:

    Y = (X - mean) / sqrt(var + epsilon) * scale + B,   mean and (biased) var over the block

LayerNormalization: a block is one index of the axes before ``axis``, scale and B broadcast over
the axes from ``axis`` on; the optional Mean and InvStdDev outputs are computed too.
GroupNormalization: a block is one group of ``C/num_groups`` channels of one sample; scale and
bias per channel (opset 21) or per group (opset 18, repeated over the group's channels).
InstanceNormalization: a block is one channel of one sample; scale and B per channel.
Deviation: the statistics are computed in the generated precision (``stash_type`` is ignored: a
float32 model accumulates in float32 where onnxruntime may use float32 too); scale and bias must
be constant.

BatchNormalization (inference): ``Y[n, c, ...] = (X[n, c, ...] - mean[c]) / sqrt(var[c] + eps) * scale[c] + B[c]``.

``canonicalize`` folds the four parameter vectors into one per-channel affine map, computed in
float64 at generation time: ``Y = X * s[c] + t[c]`` with ``s = scale / sqrt(var + eps)`` and
``t = B - mean * s``. The ``fold_batchnorm`` pass then merges it into the Conv or Gemm that alone
feeds it (scaling that layer's weights and bias), so in the usual Conv -> BatchNormalization ->
Relu it costs nothing at run time; otherwise it runs as this per-channel affine op.

Deviation: s and t are rounded once to the generated precision, where onnxruntime rounds each step
of the formula; the results differ by a rounding or two. Training mode (``training_mode=1``, or
the running-mean and running-variance outputs used) is refused, as are run-time parameters.
"""

import numpy as np

from rosenna.loopir import Bin, Fn, Idx, Num, Ref, Var, flat_index
from rosenna.ops.base import REQUIRED, Op, const_input


def affine(scale, bias, mean, var, epsilon):
    """The float64 per-channel ``(s, t)`` of an inference BatchNormalization."""
    s = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + float(epsilon))
    return s, np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * s


class BatchNormalization(Op):
    name = "BatchNormalization"
    attributes = {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0, "spatial": 1}

    def evaluate(self, node, inputs):
        if node.attrs.get("_affine"):
            x, s, t = inputs
        else:
            x, scale, bias, mean, var = inputs[:5]
            s, t = affine(scale, bias, mean, var, self.attr(node, "epsilon"))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return [(x * s.reshape(shape) + t.reshape(shape)).astype(x.dtype)]

    def shape(self, node, graph):
        return [graph.shape_of(node.inputs[0])]

    def check(self, node, graph):
        problems = []
        if self.attr(node, "training_mode"):
            problems.append("training_mode=1; rosenna does inference only")
        users = graph.consumers()
        if any(out and (out in users or out in graph.outputs) for out in node.outputs[1:]):
            problems.append("the running mean/variance outputs are used (training); rosenna does inference only")
        if any(not graph.is_const(name) for name in node.inputs[1:5]):
            problems.append("scale, bias, mean or variance is computed at run time; rosenna needs them constant")
        rank = len(graph.shape_of(node.inputs[0]))
        if rank < 2:
            problems.append(f"X has rank {rank}; BatchNormalization needs a channel axis (rank >= 2)")
        elif not node.attrs.get("spatial", 1) and rank > 2:
            problems.append("spatial=0 (per-position statistics, opset < 9) is not supported")
        return problems

    def canonicalize(self, node, graph):
        if node.attrs.get("_affine"):
            return
        scale, bias, mean, var = (graph.weights[name] for name in node.inputs[1:5])
        s, t = affine(scale, bias, mean, var, self.attr(node, "epsilon"))
        dtype = graph.weights[node.inputs[1]].dtype
        s_name, t_name = graph.new_name(node.name + "_scale"), graph.new_name(node.name + "_shift")
        graph.weights[s_name] = s.astype(dtype)
        graph.weights[t_name] = t.astype(dtype)
        for out in node.outputs[1:]:
            if out:
                graph.values.pop(out, None)
        node.inputs = [node.inputs[0], s_name, t_name]
        node.outputs = node.outputs[:1]
        node.attrs = {"_affine": True, "_s64": s, "_t64": t}

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        channels = shape[1]
        inner = int(np.prod(shape[2:], dtype=np.int64))
        full = (shape[0], channels, inner)
        x, s, t = node.inputs

        def body(idx):
            _, c, _ = idx
            value = Bin("+", Bin("*", Ref(x, flat_index(idx, full)), Ref(s, Idx.of(c))), Ref(t, Idx.of(c)))
            b.assign(Ref(node.outputs[0], flat_index(idx, full)), value)

        b.nest(full, body)


def _lower_normalize(b, node, graph, outer, inner, scale_index, scale, bias, epsilon):
    """Normalise each contiguous block of X: the loops run over ``outer`` (one block per index)
    and ``inner`` (the block's elements, row-major); ``scale_index(o, i)`` is the index of the
    element's scale and bias. Mean first, then the mean of squared deviations (two passes: no
    cancellation), then ``y = (x - mean) * inv * scale + bias`` with ``inv = 1/sqrt(var + eps)``."""
    x, y = node.inputs[0], node.outputs[0]
    full = tuple(outer) + tuple(inner)
    count = int(np.prod(inner, dtype=np.int64))
    mean, var, inv, dev = Var("mean"), Var("var"), Var("inv"), Var("dev")
    stats = [name if name else None for name in (node.outputs[1:3] + ["", ""])[:2]]

    def block(o):
        def at(i):
            return Ref(x, flat_index(list(o) + list(i), full))

        b.assign(mean, Num(0.0))
        b.nest(inner, lambda i: b.assign(mean, at(i), accumulate=True))
        b.assign(mean, Bin("/", mean, Num(float(count))))
        b.assign(var, Num(0.0))

        def square(i):
            b.assign(dev, Bin("-", at(i), mean))
            b.assign(var, Bin("*", dev, dev), accumulate=True)

        b.nest(inner, square)
        b.assign(inv, Bin("/", Num(1.0), Fn("sqrt", (Bin("+", Bin("/", var, Num(float(count))), Num(epsilon)),))))

        def store(i):
            value = Bin("*", Bin("-", at(i), mean), inv)
            if scale:
                value = Bin("*", value, Ref(scale, scale_index(o, i)))
            if bias:
                value = Bin("+", value, Ref(bias, scale_index(o, i)))
            b.assign(Ref(y, flat_index(list(o) + list(i), full)), value)

        b.nest(inner, store)
        for name, value in zip(stats, (mean, inv)):
            if name:
                b.assign(Ref(name, flat_index(list(o), outer)), value)

    b.nest(outer, block)


class _Normalize(Op):
    """Shared checks: scale and bias constant, statistics outputs allowed."""

    def shape(self, node, graph):
        return [graph.shape_of(node.inputs[0])]

    def check(self, node, graph):
        problems = []
        for position, what in ((1, "scale"), (2, "bias")):
            if len(node.inputs) > position and node.inputs[position] and not graph.is_const(node.inputs[position]):
                problems.append(f"the {what} is computed at run time; rosenna needs it constant")
        return problems

    def _store(self, graph, node, position, array):
        """Replace input ``position`` by a weight holding ``array`` (or drop it when absent)."""
        name = graph.new_name(f"{node.name}_{'scale' if position == 1 else 'bias'}")
        graph.weights[name] = np.ascontiguousarray(array)
        while len(node.inputs) <= position:
            node.inputs.append("")
        node.inputs[position] = name


class LayerNormalization(_Normalize):
    """LayerNormalization: each sample normalised over the axes from ``axis`` on."""

    name = "LayerNormalization"
    attributes = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}

    def _axis(self, node, graph):
        rank = len(graph.shape_of(node.inputs[0]))
        axis = self.attr(node, "axis")
        return axis + rank if axis < 0 else axis

    def shape(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        stats = tuple(shape[:self._axis(node, graph)]) + (1,) * (len(shape) - self._axis(node, graph))
        return [shape, stats, stats][:max(1, len(node.outputs))]

    def canonicalize(self, node, graph):
        if node.attrs.get("_canonical"):
            return
        shape = graph.shape_of(node.inputs[0])
        normalized = tuple(shape[self._axis(node, graph):])
        for position in (1, 2):
            array = const_input(graph, node, position)
            if array is not None:
                self._store(graph, node, position, np.broadcast_to(array, normalized).reshape(-1))
        node.attrs["_canonical"] = True

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        axis = self._axis(node, graph)
        outer = (int(np.prod(shape[:axis], dtype=np.int64)),)
        inner = (int(np.prod(shape[axis:], dtype=np.int64)),)
        scale = node.inputs[1] if len(node.inputs) > 1 else ""
        bias = node.inputs[2] if len(node.inputs) > 2 else ""
        _lower_normalize(b, node, graph, outer, inner, lambda o, i: Idx.of(i[0]), scale, bias,
                         float(self.attr(node, "epsilon")))


class GroupNormalization(_Normalize):
    """GroupNormalization: each sample's channels in ``num_groups`` groups, each group normalised."""

    name = "GroupNormalization"
    attributes = {"num_groups": REQUIRED, "epsilon": 1e-5, "stash_type": 1}

    def _groups(self, node, graph):
        return int(self.attr(node, "num_groups"))

    def check(self, node, graph):
        problems = super().check(node, graph)
        shape = graph.shape_of(node.inputs[0])
        groups = self._groups(node, graph)
        if len(shape) < 2 or groups < 1 or shape[1] % groups:
            problems.append(f"num_groups={groups} does not divide the {shape[1] if len(shape) > 1 else 0} channels")
        return problems

    def canonicalize(self, node, graph):
        if node.attrs.get("_canonical"):
            return
        channels, groups = graph.shape_of(node.inputs[0])[1], self._groups(node, graph)
        for position in (1, 2):
            array = const_input(graph, node, position)
            if array is not None:  # opset 18 gives one value per group, opset 21 one per channel
                array = np.asarray(array).reshape(-1)
                self._store(graph, node, position, np.repeat(array, channels // groups) if array.size == groups
                            and groups != channels else np.broadcast_to(array, (channels,)))
        node.attrs["_canonical"] = True

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        groups = self._groups(node, graph)
        per_group = shape[1] // groups
        spatial = int(np.prod(shape[2:], dtype=np.int64))
        _lower_normalize(b, node, graph, (shape[0], groups), (per_group, spatial),
                         lambda o, i: Idx.of(o[1]) * per_group + i[0], node.inputs[1], node.inputs[2],
                         float(self.attr(node, "epsilon")))


class InstanceNormalization(_Normalize):
    """InstanceNormalization: each channel of each sample normalised over its spatial positions."""

    name = "InstanceNormalization"
    attributes = {"epsilon": 1e-5}

    def lower(self, node, graph, b):
        shape = graph.shape_of(node.inputs[0])
        spatial = int(np.prod(shape[2:], dtype=np.int64))
        _lower_normalize(b, node, graph, (shape[0], shape[1]), (spatial,), lambda o, i: Idx.of(o[1]),
                         node.inputs[1], node.inputs[2], float(self.attr(node, "epsilon")))
