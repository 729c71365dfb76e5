"""Standard ops that rosenna has no module for, replaced by the function body ONNX defines for them.

Many ops of the standard domain are defined by ONNX itself as a function of other ops (Celu, Shrink,
MeanVarianceNormalization, RMSNormalization, Attention, the losses, ...): the op schema holds the
body, fixed or built for the node's attributes and input types (a "context-dependent" function).
A node whose op has no module in :mod:`rosenna.ops` (of any domain: ai.onnx.preview's too) but has
such a body is replaced by the body's nodes, inlined: the function's formal inputs and outputs
renamed to the node's, its other values given fresh names (inside a body's subgraphs too), its
attribute references (``ref_attr_name``) replaced by the node's attribute values or the function's
defaults. The rounds repeat while a body brings in another such op; ONNX shape inference then runs
again over the whole graph.

This runs on the ModelProto, after shape inference (a context-dependent body needs the input
types) and before the IR is built. Numerically the result is the op as ONNX defines it, computed
by the ops of the body (its casts included); where the body computes in a type narrower than the
working float type (float16), rosenna computes it in the working type.
"""

import onnx
from onnx import helper

from rosenna import ops
from rosenna.passes.control import _rename_subgraph

#: How many rounds of expansion (a body inside a body) before giving up on a model.
MAX_ROUNDS = 8


def _opset(model, domain):
    for entry in model.opset_import:
        if entry.domain == domain or (domain in ("", "ai.onnx") and entry.domain in ("", "ai.onnx")):
            return entry.version
    return None


def function_body(node, model, types):
    """The :class:`onnx.FunctionProto` ONNX defines for ``node`` at the model's opset, or None.

    ``types``: value name -> :class:`onnx.TypeProto` (a context-dependent body needs the inputs')."""
    version = _opset(model, node.domain)
    if version is None:
        return None
    try:
        schema = onnx.defs.get_schema(node.op_type, version, node.domain)
    except Exception:  # no such op at this opset: the checker and the op registry say so elsewhere
        return None
    data = None
    if schema.has_function:
        try:
            data = schema.get_function_with_opset_version(version)
        except Exception:
            data = None
    if not data and schema.has_context_dependent_function:
        if any(name and name not in types for name in node.input):
            return None
        inputs = [types[name].SerializeToString() if name else onnx.TypeProto().SerializeToString()
                  for name in node.input]
        try:
            data = schema.get_context_dependent_function_with_opset_version(version, node.SerializeToString(), inputs)
        except Exception:
            data = None
    if not data:
        return None
    body = onnx.FunctionProto()
    body.ParseFromString(data)
    return body if body.node else None


def _needs_body(node):
    """An op rosenna has no module for (any op outside the standard domain has none)."""
    return node.domain not in ("", "ai.onnx") or ops.get(node.op_type) is None


def _inline(node, body, taken, tag):
    """The body's nodes with the node's inputs, outputs and attributes put in."""
    rename = {formal: actual for formal, actual in zip(body.input, node.input)}
    rename.update({formal: "" for formal in list(body.input)[len(node.input):]})
    rename.update(zip(body.output, node.output))
    given = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in body.attribute_proto}

    def unique(base):
        candidate, k = base, 1
        while candidate in taken:
            candidate, k = f"{base}_{k}", k + 1
        taken.add(candidate)
        return candidate

    def fresh(name):
        if not name:
            return ""
        if name not in rename:
            rename[name] = unique(f"{tag}_{name}")
        return rename[name]

    out = []
    for index, inner in enumerate(body.node):
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        del copy.input[:], copy.output[:], copy.attribute[:]
        copy.input.extend(fresh(n) for n in inner.input)
        copy.output.extend(fresh(n) for n in inner.output)
        copy.name = f"{node.name or node.op_type}/{inner.name or inner.op_type + str(index)}"
        for attr in inner.attribute:
            if attr.ref_attr_name:
                source = given.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
                if source is None:
                    continue  # an optional attribute the node leaves out: so does the inner node
                value = onnx.AttributeProto()
                value.CopyFrom(source)
                value.name = attr.name
                copy.attribute.append(value)
            else:
                copy.attribute.append(attr)
        for attr in copy.attribute:  # a body's Scan or If: its reads of the body's names follow them
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _rename_subgraph(sub, rename, unique, tag)
        out.append(copy)
    return out


def _all_names(graph):
    names = {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)}
    names |= {i.name for i in graph.initializer}
    names |= {n for node in graph.node for n in list(node.input) + list(node.output)}
    return names


def expand_functions(model, infer):
    """Replace every node of a standard op without a module by its ONNX function body, in rounds;
    ``infer(model)`` is shape inference (run after each round that changed something). Returns the
    model (the same object when nothing changed)."""
    for _ in range(MAX_ROUNDS):
        graph = model.graph
        types = {v.name: v.type for v in list(graph.input) + list(graph.value_info) + list(graph.output)}
        for init in graph.initializer:
            types.setdefault(init.name, helper.make_tensor_type_proto(init.data_type, list(init.dims)))
        taken = _all_names(graph)
        nodes, changed = [], False
        for index, node in enumerate(graph.node):
            body = function_body(node, model, types) if _needs_body(node) else None
            if body is None:
                nodes.append(node)
                continue
            for entry in body.opset_import:  # a body may use another domain's ops (rare)
                if _opset(model, entry.domain) is None:
                    model.opset_import.append(helper.make_opsetid(entry.domain, entry.version))
            nodes.extend(_inline(node, body, taken, f"{node.op_type.lower()}{index}"))
            changed = True
        if not changed:
            return model
        del graph.node[:]
        graph.node.extend(nodes)
        model = infer(model)
    return model
