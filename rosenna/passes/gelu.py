"""GELU as exporters spell it before opset 20, back into one Gelu node.

torch's legacy exporter (and tf2onnx, and hand-written graphs) write nn.GELU() as

    d = Div(x, sqrt(2))   or   Mul(x, 1/sqrt(2))
    e = Erf(d)
    a = Add(e, 1)
    m = Mul(x, a)
    y = Mul(m, 0.5)       or   m = Mul(x, 0.5); y = Mul(m, a)

(operands of Add and Mul in either order). As separate ops that is five elementwise loops and, on
the GPU, no fused activation: a GELU MLP fell off the fast batched kernels onto the generic one.
As a Gelu node it fuses into the Gemm or Conv before it like any activation. The constants must
equal sqrt(2) (or 1/sqrt(2)), 1 and 0.5 to within float32 rounding; every intermediate must have
no other consumer and not be a graph output.
"""

import math

import numpy as np

from rosenna.ir import Node

_SQRT2 = math.sqrt(2.0)


def _scalar(graph, name, value):
    if not graph.is_const(name):
        return False
    arr = np.asarray(graph.weights[name], dtype=np.float64).reshape(-1)
    return arr.size == 1 and abs(arr[0] - value) <= 1e-6 * abs(value)


def _other(node, name):
    """The input of a two-input node that is not ``name`` (None if ``name`` is not one of them)."""
    if len(node.inputs) != 2 or name not in node.inputs:
        return None
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def _only_user(graph, users, name):
    found = users.get(name, [])
    return found[0] if len(found) == 1 and name not in graph.outputs else None


def gelu_from_erf(graph):
    """Replace each erf form of GELU above by ``Gelu(x)`` (approximate="none")."""
    users = graph.consumers()
    for erf in [n for n in graph.nodes if n.op == "Erf"]:
        match = _match(graph, users, erf)
        if match is None:
            continue
        x, removed, out = match
        at = graph.nodes.index(removed[0])
        for node in removed:
            graph.nodes.remove(node)
            for value in node.outputs:
                if value != out:
                    graph.values.pop(value, None)
        sources = tuple(name for node in removed for name in (node.sources or (node.name,)))
        graph.nodes.insert(at, Node("Gelu", f"{removed[-1].name}_gelu", [x], [out], {"approximate": "none"},
                                    sources=sources))
        users = graph.consumers()


def _match(graph, users, erf):
    producers = graph.producers()
    scale = producers.get(erf.inputs[0])
    if scale is None or _only_user(graph, users, scale.outputs[0]) is not erf:
        return None
    if scale.op == "Div" and _scalar(graph, scale.inputs[1], _SQRT2):
        x = scale.inputs[0]
    elif scale.op == "Mul":
        x = next((a for a in scale.inputs if _scalar(graph, _other(scale, a) or "", 1.0 / _SQRT2)), None)
        if x is None or graph.is_const(x):
            return None
    else:
        return None
    add = _only_user(graph, users, erf.outputs[0])
    if add is None or add.op != "Add" or not _scalar(graph, _other(add, erf.outputs[0]) or "", 1.0):
        return None
    nodes = [scale, erf, add]
    first = _only_user(graph, users, add.outputs[0])
    if first is None or first.op != "Mul":
        return None
    partner = _other(first, add.outputs[0])
    if partner == x:  # m = x * a; y = m * 0.5
        last = _only_user(graph, users, first.outputs[0])
        if last is None or last.op != "Mul" or not _scalar(graph, _other(last, first.outputs[0]) or "", 0.5):
            return None
        return x, nodes + [first, last], last.outputs[0]
    half = producers.get(partner)  # h = x * 0.5; y = h * a
    if half is not None and half.op == "Mul" and x in half.inputs and _scalar(graph, _other(half, x) or "", 0.5) \
            and _only_user(graph, users, half.outputs[0]) is first:
        return x, [half] + nodes + [first], first.outputs[0]
    return None
