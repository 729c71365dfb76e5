"""Give a padded 3-D Conv over many border regions a padded copy of its input: ``Pad`` (constant
0), then the Conv without padding.

Why: :mod:`rosenna.ops.conv` lowers a Conv to one loop nest per combination of its axes' runs
(outputs reading the same taps), so the border costs no run-time test. Per axis a 3-wide kernel
with padding 1 has 3 runs; a 3-D conv has 27 nests, each a dot product that the host and offload
forms unroll and jam again, and a 3-D U-Net on a 16^3 field was 1.2 MB of C per language, most of
the time of its build. After the Pad the Conv reads every tap of every output: one nest. The Pad is
27 nests too, but each a single copy or store of zero.

Cost: one more buffer the size of the padded input, and one copy of it per call (a few percent of
a 3x3x3 conv's work). Only for a Conv over 3 or more spatial axes with more than
:data:`PAD_ABOVE` nests: 1-D and 2-D convs keep the copy-free form that the CUDA conv kernels
(rank 4) and the host's jammed loops are tuned for, whatever their nests (a 5x5 kernel with
padding 2 has 25). Not for ConvTranspose (its runs are phases of the stride, not borders), nor for
a Conv whose input is a constant.
"""

import numpy as np

from rosenna.ir import Node, Value

#: Loop nests a Conv may take as is; above, its input is padded first.
PAD_ABOVE = 9


def pad_conv_inputs(graph):
    nodes = []
    for node in graph.nodes:
        nodes.extend(_padded(graph, node) if node.op == "Conv" and node.domain in ("", "ai.onnx") else [node])
    graph.nodes = nodes


def _padded(graph, node):
    """``[Pad, Conv]`` for ``node``, or ``[node]`` when it stays as it is."""
    from rosenna import ops
    from rosenna.ops.conv import forward_runs

    op = ops.get("Conv")
    x = graph.shape_of(node.inputs[0])
    if x is None or len(x) < 5 or graph.is_const(node.inputs[0]) or graph.shape_of(node.inputs[1]) is None:
        return [node]
    strides, dilations, begin, end, out = op._geometry(node, graph)
    kernel = graph.shape_of(node.inputs[1])[2:]
    nests = 1
    for args in zip(out, x[2:], kernel, strides, dilations, begin, end):
        nests *= len(forward_runs(*args))
    if nests <= PAD_ABOVE or min(begin + end) < 0:
        return [node]
    padded = graph.new_name(f"{node.inputs[0]}_padded")
    graph.values[padded] = Value(padded, tuple(x[:2]) + tuple(d + p + q for d, p, q in zip(x[2:], begin, end)),
                                 graph.dtype)
    pads = graph.new_name(f"{node.name}_pads")
    graph.weights[pads] = np.array([0, 0] + list(begin) + [0, 0] + list(end), np.int64)
    pad = Node("Pad", graph.new_name(f"{node.name}_pad"), [node.inputs[0], pads], [padded], {"mode": "constant"},
               sources=tuple(node.sources) or (node.name,))
    attrs = {k: v for k, v in node.attrs.items() if k not in ("pads", "auto_pad")}
    conv = Node(node.op, node.name, [padded] + list(node.inputs[1:]), list(node.outputs), attrs, node.domain,
                node.sources)
    return [pad, conv]
