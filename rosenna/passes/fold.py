"""Constant folding (and static shapes), and dead-code elimination.

``fold_constants`` walks the nodes once, in order. A node whose inputs are all constant is
evaluated (the op's numpy rule, else onnxruntime on that single node) and becomes a weight; a Shape
or Size node is evaluated from its input's static shape. Every other node gets its output shapes
from its op's shape rule, so the Shape->Gather->Unsqueeze->Concat->Reshape chains of
dynamic-shape exports fold completely. Folding and shapes share one walk because each needs the
other.

Folding is bounded: no folded output may hold more than the budget's elements
(:data:`rosenna.limits.MAX_FOLD_ELEMENTS`, ``--max-fold-elements``), checked from the op's shape
rule before anything is allocated and again on the result; a 187-byte model of ConstantOfShape
[20000, 20000] is refused at once instead of taking 11 s and 1.6 GB.
"""

import math

import numpy as np

from rosenna import limits, ops
from rosenna.passes import support
from rosenna.errors import ModelError


def fold_constants(graph):
    kept = []
    for node in graph.nodes:
        op = ops.find(node)
        outputs = _try_fold(graph, node, op)
        if outputs is not None:
            for name, array in zip(node.outputs, outputs):
                if name:
                    graph.weights[name] = np.asarray(array)
                    graph.values.pop(name, None)
            continue
        _settle_shapes(graph, node, op)
        kept.append(node)
    graph.nodes = kept


def _try_fold(graph, node, op):
    present = [name for name in node.inputs if name]
    if op is not None and hasattr(op, "from_shape") and present:
        shape = graph.values[present[0]].shape if present[0] in graph.values else graph.shape_of(present[0])
        if shape is not None:
            return [op.from_shape(node, shape)]
    unread = getattr(op, "unread_inputs", ())  # inputs of which only the shape and type count
    if not all(graph.is_const(name) for k, name in enumerate(node.inputs) if name and k not in unread):
        return None
    if any(name and not graph.is_const(name) and None in (graph.values[name].shape, graph.values[name].dtype)
           for name in node.inputs):
        return None
    shapes = None
    if op is not None:
        try:
            shapes = op.shape(node, graph)
        except Exception:  # a rule that needs what folding gives: ONNX's inferred shapes, if any
            shapes = None
    if shapes is None:
        shapes = [graph.values[name].shape for name in node.outputs if name in graph.values]
    for shape in shapes:
        if shape is not None and all(isinstance(d, (int, np.integer)) for d in shape):
            _within_budget(graph, node, [int(d) for d in shape])
    inputs = [graph.weights[name] if graph.is_const(name) else
              np.zeros(graph.values[name].shape, graph.values[name].dtype) if name else None for name in node.inputs]
    result = op.evaluate(node, inputs) if op is not None else None
    if result is None:
        result = _fold_with_onnxruntime(graph, node)
    for array in result or ():
        if array is not None:
            _within_budget(graph, node, list(np.shape(array)))
    return result


def _within_budget(graph, node, shape):
    """Refuse folding ``node`` into an output of ``shape`` with a negative dimension or more
    elements than the folding budget."""
    label = f"node {node.name!r} ({node.op})"
    negative = next((axis for axis, d in enumerate(shape) if d < 0), None)
    if negative is not None:
        raise ModelError(f"{label}: its output would have the negative dimension {shape[negative]} at axis "
                         f"{negative} (shape {tuple(shape)}); the model is inconsistent")
    budget = graph.max_fold_elements or limits.MAX_FOLD_ELEMENTS
    count = math.prod(shape)
    if count > budget:
        raise ModelError(f"{label}: folding it makes a constant of {count} elements (shape {tuple(shape)}), over "
                         f"the folding budget of {budget}; raise it with --max-fold-elements N if the model "
                         "means it")


def _fold_with_onnxruntime(graph, node):
    """Evaluate one node whose inputs are constants with onnxruntime; None if it cannot (or when
    onnxruntime, the optional ``verify`` extra, is not installed: the node is then kept)."""
    from onnx import helper, numpy_helper

    try:
        import onnxruntime as ort
    except ImportError:
        return None

    try:
        attrs = [helper.make_attribute(k, v) for k, v in node.attrs.items() if not k.startswith("_")]
        proto = helper.make_node(node.op, node.inputs, node.outputs, domain=node.domain or None)
        proto.attribute.extend(attrs)
        inits = [numpy_helper.from_array(graph.weights[n], n) for n in node.inputs if n]
        outs = [helper.make_empty_tensor_value_info(n) for n in node.outputs if n]
        g = helper.make_graph([proto], "fold", [], outs, inits)
        model = helper.make_model(g, opset_imports=[helper.make_opsetid(node.domain or "", graph.opset)])
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, {})
    except Exception:
        return None


def _settle_shapes(graph, node, op):
    """Give the node's outputs static shapes by its op's rule, after checking the rule holds.

    ONNX's strict shape inference (in the frontend) already checked every shape it could infer;
    here each op's ``shape_errors`` checks the shapes only folding made static, and the op's rule
    must give what ONNX inferred wherever ONNX inferred a shape.
    """
    label = f"node {node.name!r} ({node.domain + '.' if node.domain else ''}{node.op})"
    if op is None:
        # Not folded, so it would need lowering: refuse it now, with every other op rosenna does
        # not know (its outputs have no shape, so nothing after it can be checked).
        raise support.unsupported([
            (n, support.unknown_op_reason(n))
            for n in graph.nodes if ops.find(n) is None
            and not all(out in graph.weights for out in n.outputs if out)], graph)
    known = all(graph.shape_of(n) is not None for n in node.inputs if n and (n in graph.values or graph.is_const(n)))
    if known:
        try:
            errors = op.shape_errors(node, graph)
        except Exception as exc:  # a rule that cannot even read its inputs' shapes
            errors = [f"its input shapes do not fit the op ({type(exc).__name__}: {exc})"]
        if errors:
            if graph.opset < 7:  # before opset 7, broadcasting was per-op (attributes), not numpy's
                raise ModelError(f"{label}: {errors[0]} by the rules of opset 7 and later; the model's opset "
                                 f"{graph.opset} broadcast by per-op rules rosenna does not follow: re-export it "
                                 "with opset 7 or later")
            raise ModelError(f"{label}: {errors[0]}; the model is inconsistent")
    shapes = None
    try:
        shapes = op.shape(node, graph)
    except Exception:
        shapes = None
    for i, name in enumerate(node.outputs):
        if not name:
            continue
        value = graph.values[name]
        if shapes is not None and i < len(shapes):
            computed = tuple(int(d) for d in shapes[i])
            if value.shape is not None and tuple(value.shape) != computed:
                try:
                    unsupported = op.check(node, graph)  # a form rosenna's rule does not model (e.g. a layout)
                except Exception:
                    unsupported = []
                if unsupported:
                    raise support.unsupported([(node, reason) for reason in unsupported], graph)
                raise ModelError(f"{label}: output {name!r} has shape {computed} by the op's rule but "
                                 f"{tuple(value.shape)} by ONNX shape inference; the model's shapes disagree")
            value.shape = computed
        if value.dtype is None and node.inputs and node.inputs[0] in graph.values:
            value.dtype = graph.values[node.inputs[0]].dtype
        if value.shape is None:
            raise ModelError(
                f"node {node.name!r} ({node.op}): the shape of its output {name!r} is not static; "
                "bind symbolic dimensions with --dim NAME=VALUE"
            )


def eliminate_dead_code(graph):
    """Drop nodes whose outputs nothing reads, then weights and values nothing references."""
    needed = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(out in needed for out in node.outputs if out):
            kept.append(node)
            needed.update(name for name in node.inputs if name)
    graph.nodes = kept[::-1]
    graph.weights = {k: v for k, v in graph.weights.items() if k in needed}
    live = needed | set(graph.inputs) | {o for n in graph.nodes for o in n.outputs if o}
    graph.values = {k: v for k, v in graph.values.items() if k in live}
