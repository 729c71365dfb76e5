"""BatchNormalization (inference): ``Y[n, c, ...] = (X[n, c, ...] - mean[c]) / sqrt(var[c] + eps) * scale[c] + B[c]``.

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

from rosenna.loopir import Bin, Idx, Ref, flat_index
from rosenna.ops.base import Op


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
