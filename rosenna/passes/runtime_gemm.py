"""Gemm whose B or C is computed at run time (weights fed as graph inputs, per-point bilinear
forms), or whose constant bias is not one value per output: spelled out as the ops that compute it.

``Y = alpha * A' @ B' + beta * C`` becomes ``Transpose`` (for transA / transB), ``MatMul`` (which
takes two run-time operands), ``Mul`` by the constant alpha and beta when they are not 1, and an
``Add`` that broadcasts C as ONNX does. The Gemm lowering (rosenna.ops.gemm) keeps the form it is
fast for: a constant B stored once as W[n][k], a bias per output. The new nodes keep the Gemm's name
in their provenance (``Node.sources``)."""

import numpy as np

from rosenna.ir import Node, Value


def _needs_rewrite(graph, node):
    if not graph.is_const(node.inputs[1]):
        return True
    if len(node.inputs) > 2 and node.inputs[2]:
        if not graph.is_const(node.inputs[2]):
            return True
        a, bshape = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        m = a[1] if node.attrs.get("transA", 0) else a[0]
        n = bshape[0] if node.attrs.get("transB", 0) else bshape[1]
        return tuple(graph.shape_of(node.inputs[2])) not in ((n,), (1, n), (m, n))
    return False


def runtime_gemm_operands(graph):
    """Rewrite each Gemm that the Gemm lowering does not take (see the module docstring)."""
    for node in list(graph.nodes):
        if node.op != "Gemm" or node.domain not in ("", "ai.onnx") or not _needs_rewrite(graph, node):
            continue
        dtype = graph.values[node.outputs[0]].dtype if node.outputs[0] in graph.values else graph.dtype
        new_nodes = []

        def emit(op, inputs, shape, attrs=None, out=None):
            out = out or graph.new_name(f"{node.outputs[0]}_{op.lower()}")
            graph.values[out] = Value(out, tuple(shape), dtype)
            new_nodes.append(Node(op, f"{node.name}/{op}{len(new_nodes)}", inputs, [out], attrs or {},
                                  sources=node.sources or (node.name,)))
            return out

        def constant(value):
            name = graph.new_name(f"{node.name}_scale")
            graph.weights[name] = np.asarray(value, dtype=graph.dtype)
            return name

        a, bmat = node.inputs[0], node.inputs[1]
        shape_a, shape_b = graph.shape_of(a), graph.shape_of(bmat)
        if node.attrs.get("transA", 0):
            shape_a = shape_a[::-1]
            a = emit("Transpose", [a], shape_a, {"perm": [1, 0]})
        if node.attrs.get("transB", 0):
            shape_b = shape_b[::-1]
            bmat = emit("Transpose", [bmat], shape_b, {"perm": [1, 0]})
        shape = (shape_a[0], shape_b[1])
        bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
        last = bias is None and alpha == 1.0
        y = emit("MatMul", [a, bmat], shape, out=node.outputs[0] if last else None)
        if alpha != 1.0:
            y = emit("Mul", [y, constant(alpha)], shape, out=node.outputs[0] if bias is None else None)
        if bias is not None:
            if beta != 1.0:
                bias = emit("Mul", [bias, constant(beta)], graph.shape_of(bias))
            emit("Add", [y, bias], shape, out=node.outputs[0])
        at = graph.nodes.index(node)
        graph.nodes[at:at + 1] = new_nodes
