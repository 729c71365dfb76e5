"""Fourier transforms cut to the values the model uses: Slices after a DFT and zero Pads before one
become a DFT that computes fewer outputs, over fewer lines, from fewer inputs.

A Fourier layer (an FNO's, as torch's exporter writes ``rfft2`` / ``irfft2``) transforms the whole
field and then keeps a few low modes; on the way back it pads the modes with zeros and transforms
again. Three identities, applied until none applies:

1. ``Slice(DFT(x))`` along the DFT's axis (step 1): the DFT computes only those outputs
   (``_bins``, first and count, which :class:`rosenna.ops.dft.DFT` honours in both its forms).
2. ``Slice(DFT(x))`` along another signal axis (step 1): the same as ``DFT(Slice(x))`` (each line is
   transformed on its own), which transforms fewer lines and lets rule 1 reach the DFT before.
3. ``DFT(Pad(x))``, a Pad of zeros: along another signal axis the same as ``Pad(DFT(x))`` (the DFT
   of a zero line is zero), moved after so the DFT has fewer lines; at the end of the DFT's axis
   (nothing before) the DFT of x with that length as ``dft_length`` (which zero-pads; an inverse
   one-sided DFT reads its shorter half spectrum as zeros beyond it).
4. ``DFT(Concat(a, zeros, b))`` along the DFT's axis, ``zeros`` an all-zero constant (the modes an
   FNO puts back between its two corner blocks): the sums run over a's and b's positions only
   (``_support``; the direct form's loops skip the zeros, the FFT form reads them as before).

Each rewrite makes new nodes and leaves the old DFT to ``eliminate_dead_code`` where nothing else
reads it; identical DFTs of one input (two Slices keeping the same modes) are made once. Slices of
the last axis (real and imaginary parts), steps other than 1, and Pads of a non-zero value or with
run-time pads are left as they are. Then :meth:`rosenna.ops.dft.DFT.direct` chooses per node
whether the few outputs left are cheaper as a direct sum than by the FFT stages.
"""

import re

import numpy as np

from rosenna import ops
from rosenna.ir import Node, Value
from rosenna.ops.indexing import slice_params


def truncate_dfts(graph):
    """Apply the rules above until none applies, then drop what nothing reads."""
    while _slice_into_dft(graph) or _pad_out_of_dft(graph):
        pass
    _drop_unread(graph)
    _zero_blocks(graph)


def _zero_blocks(graph):
    """Rule 4: a DFT of a Concat along its axis with all-zero constant blocks sums over the other
    blocks' positions only (``_support``)."""
    producers = graph.producers()
    for node in graph.nodes:
        op = _dft(node)
        concat = producers.get(node.inputs[0]) if op is not None else None
        if concat is None or concat.op != "Concat" or "_support" in node.attrs:
            continue
        shape, axis, _ = op._params(node, graph)
        if ops.get("Concat").attr(concat, "axis") % len(shape) != axis:
            continue
        support, first = [], 0
        for name in (i for i in concat.inputs if i):
            count = graph.shape_of(name)[axis]
            if not (name in graph.weights and not np.any(graph.weights[name])):
                support.append((first, count))
            first += count
        if sum(c for _, c in support) < shape[axis]:
            node.attrs["_support"] = tuple(support)


def _dft(node):
    """The DFT op's helpers for an ONNX DFT node not yet given its tables, else None."""
    if node is None or node.op != "DFT" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return None
    return ops.get("DFT")


def _const(graph, name, value):
    weight = graph.new_name(name)
    graph.weights[weight] = np.asarray(value, np.int64)
    return weight


def _value(graph, base, shape):
    name = graph.new_name(base)
    graph.values[name] = Value(name, tuple(shape), graph.dtype)
    return name


def _name(graph, base):
    """A node name not yet used in the graph."""
    taken = {node.name for node in graph.nodes}
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def _twin(graph, dft, inputs, output, bins=None):
    """A DFT with ``dft``'s attributes over ``inputs``, writing ``output``; ``_bins`` as given."""
    attrs = {k: v for k, v in dft.attrs.items() if k != "_bins"}
    if bins is not None:
        attrs["_bins"] = tuple(bins)
    name = _name(graph, re.sub(r"(_cut(_[0-9]+)?)+$", "", dft.name) + "_cut")
    return Node("DFT", name, list(inputs), [output], attrs, dft.domain, dft.sources or (dft.name,))


def _slice_into_dft(graph):
    """Rules 1 and 2 on the first Slice of a DFT's output that they change; whether one did."""
    producers = graph.producers()
    for at, node in enumerate(graph.nodes):
        if node.op != "Slice":
            continue
        dft = producers.get(node.inputs[0])
        op = _dft(dft)
        if op is None:
            continue
        out_shape = graph.shape_of(dft.outputs[0])
        params = slice_params(node, graph, out_shape, lambda key: ops.get("Slice").attr(node, key))
        if params is None or any(step != 1 or count < 1 for _, _, step, count in params):
            continue
        shape, axis, n = op._params(dft, graph)
        rank = len(out_shape)
        cuts = {a: (first, count) for a, first, _, count in params if count < out_shape[a]}
        if not cuts or rank - 1 in cuts:
            continue
        source = dft.inputs[0]
        lines = {a: c for a, c in cuts.items() if a != axis}
        if lines:  # rule 2: slice the lines before the transform
            sliced = list(shape)
            for a, (first, count) in lines.items():
                sliced[a] = count
            axes = sorted(lines)
            bounds = [_const(graph, f"{node.name}_starts", [lines[a][0] for a in axes]),
                      _const(graph, f"{node.name}_ends", [sum(lines[a]) for a in axes]),
                      _const(graph, f"{node.name}_axes", axes)]
            pre = Node("Slice", _name(graph, f"{node.name}_lines"), [source] + bounds,
                       [_value(graph, f"{node.inputs[0]}_lines", sliced)], sources=node.sources or (node.name,))
            graph.nodes.insert(at, pre)
            at += 1
            source = pre.outputs[0]
        first, count = op._bins(dft, out_shape[axis])
        bins = (first + cuts[axis][0], cuts[axis][1]) if axis in cuts else (first, count)
        graph.nodes[at] = _twin(graph, dft, [source] + dft.inputs[1:], node.outputs[0],
                                bins if bins != (0, op._full_count(dft, n)) else None)
        _share_twins(graph)
        return True
    return False


def _pad_out_of_dft(graph):
    """Rule 3 on the first DFT of a zero Pad's output that it changes; whether one did."""
    producers = graph.producers()
    pad_op = ops.get("Pad")
    for at, node in enumerate(graph.nodes):
        op = _dft(node)
        pad = producers.get(node.inputs[0]) if op is not None else None
        if pad is None or pad.op != "Pad" or pad_op._mode(pad) != "constant":
            continue
        data = pad.inputs[0]
        params = pad_op._params(pad, graph, len(graph.shape_of(data)))
        if params is None:
            continue
        begin, end, value = params
        shape, axis, n = op._params(node, graph)
        rank = len(shape)
        if value != 0.0 or min(begin + end) < 0 or begin[rank - 1] or end[rank - 1] or begin[axis] \
                or not any(begin + end):
            continue
        inputs = [data] + node.inputs[1:]
        if end[axis]:  # the transform's length as it was, the zeros left to the DFT's own padding
            inputs[1:2] = [_const(graph, f"{node.name}_length", [n])]
        lines = [(b, e) if a not in (axis, rank - 1) else (0, 0) for a, (b, e) in enumerate(zip(begin, end))]
        if not any(b or e for b, e in lines):  # only the DFT's own axis was padded
            graph.nodes[at] = _twin(graph, node, inputs, node.outputs[0], node.attrs.get("_bins"))
            return True
        out_shape = graph.shape_of(node.outputs[0])
        narrow = [d - b - e for d, (b, e) in zip(out_shape, lines)]
        moved = _value(graph, f"{node.outputs[0]}_unpadded", narrow)
        pads = _const(graph, f"{pad.name}_after", [b for b, _ in lines] + [e for _, e in lines])
        graph.nodes[at:at + 1] = [_twin(graph, node, inputs, moved, node.attrs.get("_bins")),
                                  Node("Pad", _name(graph, f"{pad.name}_after"), [moved, pads], [node.outputs[0]],
                                       {"mode": "constant"}, sources=pad.sources or (pad.name,))]
        return True
    return False


def _share_twins(graph):
    """One DFT where two read the same inputs with the same attributes: the later one's readers
    read the earlier one's output."""
    seen, rename = {}, {}
    for node in list(graph.nodes):
        node.inputs = [rename.get(i, i) for i in node.inputs]
        if _dft(node) is None or node.outputs[0] in graph.outputs:
            continue
        key = (tuple(node.inputs), tuple(sorted((k, repr(v)) for k, v in node.attrs.items())))
        if key in seen:
            rename[node.outputs[0]] = seen[key]
            graph.nodes.remove(node)
            graph.values.pop(node.outputs[0], None)
        else:
            seen[key] = node.outputs[0]


def _drop_unread(graph):
    """Remove the nodes (DFTs left behind, Slices and Pads they read) whose outputs nothing reads."""
    while True:
        read = {i for node in graph.nodes for i in node.inputs if i} | set(graph.outputs)
        dead = [n for n in graph.nodes if n.op in ("DFT", "Slice", "Pad") and not any(o in read for o in n.outputs if o)]
        if not dead:
            return
        for node in dead:
            graph.nodes.remove(node)
            for out in node.outputs:
                graph.values.pop(out, None)
