"""Fusions: MatMul + Add -> Gemm, and an activation into the Gemm or Conv it alone follows."""

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
