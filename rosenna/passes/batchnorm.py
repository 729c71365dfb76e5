"""Fold an inference BatchNormalization into the Conv or Gemm that alone feeds it.

Runs after ``canonicalize``, so the BatchNormalization is already the per-channel affine map
``Y = X * s[c] + t[c]`` (s and t kept in float64 in its attributes), the Conv's weights are
``W[m, c, kh, kw]`` and the Gemm's are ``W[n, k]`` with one bias per output. The layer's weights
become ``W[m] * s[m]`` and its bias ``B[m] * s[m] + t[m]`` (``t`` when it had none), computed in
float64 and rounded once; the BatchNormalization node disappears. New weight names are used, so
weights shared with another node are never changed under it.

A BatchNormalization whose input is a graph input, has other readers, is a graph output, or comes
from anything else stays a per-channel affine op.
"""

import numpy as np


def _sole_reader(graph, name):
    users = graph.consumers().get(name, [])
    return users[0] if len(users) == 1 and name not in graph.outputs else None


def fold_batchnorm(graph):
    producers = graph.producers()
    for bn in list(graph.nodes):
        if bn.op != "BatchNormalization" or not bn.attrs.get("_affine"):
            continue
        layer = producers.get(bn.inputs[0])
        if layer is None or layer.op not in ("Conv", "Gemm") or _sole_reader(graph, bn.inputs[0]) is not bn:
            continue
        if layer.attrs.get("_activation"):
            continue
        out_channels = graph.shape_of(layer.outputs[0])[1]
        s, t = bn.attrs["_s64"], bn.attrs["_t64"]
        if s.shape != (out_channels,):
            continue
        w = graph.weights[layer.inputs[1]]
        scaled = w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))
        w_name = graph.new_name(layer.inputs[1] + "_bn")
        graph.weights[w_name] = scaled.astype(w.dtype)
        bias = layer.inputs[2] if len(layer.inputs) > 2 and layer.inputs[2] else ""
        if bias:
            old = graph.weights[bias].astype(np.float64)
            new_bias = old * s + t  # Gemm's (m, n) bias broadcasts along n as well
        else:
            new_bias = t
        b_name = graph.new_name((bias or layer.name) + "_bn")
        graph.weights[b_name] = np.asarray(new_bias).astype(w.dtype)
        layer.inputs = [layer.inputs[0], w_name, b_name]
        graph.values.pop(layer.outputs[0], None)
        layer.outputs = [bn.outputs[0]]
        layer.name = f"{layer.name}+{bn.name}"
        graph.nodes.remove(bn)
        producers = graph.producers()
