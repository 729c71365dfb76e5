"""Fusions: MatMul + Add -> Gemm; the gated activations exporters spell out (SiLU, HardSwish, Mish)
back into one activation op; and an activation into the Gemm or Conv it alone follows."""

from rosenna import ops
from rosenna.ops.activation import Unary


def _sole_consumer(graph, name):
    users = graph.consumers().get(name, [])
    if len(users) != 1 or name in graph.outputs:
        return None
    return users[0]


def matmul_add_to_gemm(graph):
    """``Add(MatMul(A, B), C)`` with A rank 2, B a constant matrix, C a constant bias -> Gemm."""
    for node in list(graph.nodes):
        if node.op != "MatMul" or not graph.is_const(node.inputs[1]) or graph.is_const(node.inputs[0]):
            continue
        a_shape, b_shape = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        if len(a_shape) != 2 or len(b_shape) != 2:
            continue
        node.op, node.attrs = "Gemm", {}
        add = _sole_consumer(graph, node.outputs[0])
        if add is None or add.op != "Add":
            continue
        other = add.inputs[1] if add.inputs[0] == node.outputs[0] else add.inputs[0]
        n = b_shape[1]
        if not graph.is_const(other) or tuple(graph.shape_of(other)) not in ((n,), (1, n)):
            continue
        node.inputs = node.inputs[:2] + [other]
        graph.values.pop(node.outputs[0], None)
        node.outputs = [add.outputs[0]]
        graph.nodes.remove(add)


def fuse_activation(graph):
    for node in list(graph.nodes):
        if node.op not in ("Gemm", "Conv") or node.attrs.get("_activation"):
            continue
        act = _sole_consumer(graph, node.outputs[0])
        if act is None or not isinstance(ops.get(act.op), Unary):
            continue
        node.attrs["_activation"] = (act.op, dict(act.attrs))
        graph.values.pop(node.outputs[0], None)
        node.outputs = [act.outputs[0]]
        node.sources = (node.sources or (node.name,)) + (act.sources or (act.name,))
        node.name = f"{node.name}+{act.name}"
        graph.nodes.remove(act)


def _gate_of(graph, producers, gate, x):
    """The nodes that compute the gate ``gate`` from ``x`` in one of the patterns below, or None."""
    node = producers.get(gate)
    if node is None or gate in graph.outputs or len(graph.consumers().get(gate, [])) != 1:
        return None
    if node.op == "Sigmoid" and node.inputs[0] == x:
        return "Swish", {}, [node]
    if node.op == "HardSigmoid" and node.inputs[0] == x and \
            abs(node.attrs.get("alpha", 0.2) - 1.0 / 6.0) < 1e-7 and node.attrs.get("beta", 0.5) == 0.5:
        return "HardSwish", {}, [node]
    if node.op == "Tanh":
        inner = producers.get(node.inputs[0])
        if inner is not None and inner.op == "Softplus" and inner.inputs[0] == x and \
                len(graph.consumers().get(inner.outputs[0], [])) == 1 and inner.outputs[0] not in graph.outputs:
            return "Mish", {}, [node, inner]
    return None


def gated_activations(graph):
    """``Mul(x, Sigmoid(x))`` -> Swish (SiLU), ``Mul(x, HardSigmoid(x; 1/6, 1/2))`` -> HardSwish,
    ``Mul(x, Tanh(Softplus(x)))`` -> Mish, when the gate feeds only the Mul. The result is one
    Unary op, so ``fuse_activation`` can then put it into the Gemm or Conv before it."""
    for mul in list(graph.nodes):
        if mul.op != "Mul" or len(mul.inputs) != 2:
            continue
        producers = graph.producers()
        for x, gate in (mul.inputs, mul.inputs[::-1]):
            found = _gate_of(graph, producers, gate, x)
            if found is None or graph.is_const(x):
                continue
            op, attrs, dead = found
            mul.op, mul.attrs, mul.inputs = op, attrs, [x]
            for node in dead:
                graph.nodes.remove(node)
                graph.values.pop(node.outputs[0], None)
            break
