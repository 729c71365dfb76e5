"""Loop, Scan and If with trip counts and conditions known at generation time, unrolled into the
graph before the IR is built (the IR has no subgraphs).

- If: a constant condition (or one computed from constants only, evaluated here by onnx's
  reference evaluator) inlines the branch it picks; a condition computed at run time inlines
  both branches and selects between their outputs with Where (both are computed, as the
  generated code computes every value; the branches' outputs must have equal shapes).
- Loop: the trip count M a constant (or computed from constants) and the condition absent or a
  constant true, and the body's
  condition output its condition input passed on (or a constant true): the body is copied M
  times, each copy reading the previous one's loop-carried values and its iteration number as a
  constant; scan outputs are the copies' values stacked along a new first axis (Unsqueeze, Concat).
- Scan (opset 8: each batch entry, axis 0, unrolled apart and the results stacked; opset 9 on):
  the sequence length is the scan inputs' static extent along their axes; copy
  k reads slice k of each scan input (Gather with a constant index, reversed for a reverse
  direction), scan outputs are stacked along their axes (Unsqueeze, Concat).

A body's names are given fresh ones per copy; a name a body reads from the enclosing graph stays
as it is; a subgraph inside a body (an If in a Loop) is copied with its own references renamed and
unrolled in the next round. ONNX shape inference runs again after each round that changed the
graph.

Refused, with the reason: a Loop whose trip count or condition is computed at run time (the
shapes of its scan outputs, and what the generated code would compute, depend on data), an If
whose branches give outputs of different shapes, an opset-8 Scan whose ``sequence_lens`` is not
the full length for every batch entry (variable-length sequences).
"""

import numpy as np
import onnx
from onnx import helper, numpy_helper

from rosenna.errors import ModelError

#: How many rounds (a control-flow op inside a body is unrolled in the round after its parent).
MAX_ROUNDS = 8
#: The most body copies rosenna writes for one Loop or Scan.
MAX_COPIES = 4096


def _constants(graph):
    """name -> array of the initializers and Constant nodes' outputs."""
    found = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.attribute:
            attr = node.attribute[0]
            if attr.name == "value":
                found[node.output[0]] = numpy_helper.to_array(attr.t)
            elif attr.name in ("value_float", "value_int"):
                found[node.output[0]] = np.asarray(helper.get_attribute_value(attr))
            elif attr.name in ("value_floats", "value_ints"):
                found[node.output[0]] = np.asarray(helper.get_attribute_value(attr))
    return found


def _evaluated(model, name, consts):
    """The value of ``name`` when it is computed from constants only (onnx's reference evaluator
    runs the nodes that compute it), else None."""
    if name in consts:
        return consts[name]
    producers = {out: node for node in model.graph.node for out in node.output if out}
    needed, stack, seen = [], [name], set()
    while stack:
        value = stack.pop()
        if not value or value in consts or value in seen:
            continue
        seen.add(value)
        node = producers.get(value)
        if node is None or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                               for a in node.attribute):
            return None  # a graph input, or a subgraph: not known here
        needed.append(node)
        stack.extend(node.input)
    order = {id(node): k for k, node in enumerate(model.graph.node)}
    needed = sorted({id(n): n for n in needed}.values(), key=lambda n: order[id(n)])
    used = {i for n in needed for i in n.input if i in consts}
    graph = helper.make_graph(needed, "constant", [], [helper.make_empty_tensor_value_info(name)],
                              [numpy_helper.from_array(np.asarray(consts[u]), u) for u in used])
    try:
        from onnx.reference import ReferenceEvaluator

        piece = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
        value = ReferenceEvaluator(piece).run(None, {})[0]
    except Exception:
        return None
    consts[name] = np.asarray(value)
    return consts[name]


def _names(graph):
    names = {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)}
    names |= {i.name for i in graph.initializer}
    for node in graph.node:
        names |= set(node.input) | set(node.output)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                names |= _names(sub)
    return names


class _Fresh:
    """Fresh value names, unique in the model."""

    def __init__(self, taken):
        self.taken = taken

    def __call__(self, base):
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name


def _const_node(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name))


def _rename_subgraph(graph, rename, fresh, tag):
    """In place: a nested subgraph of a copied body reads the copy's names, and every name the
    subgraph defines is made fresh too (ONNX names are unique across a model's graphs)."""
    rename = dict(rename)
    for value in list(graph.input) + list(graph.initializer):
        rename[value.name] = value.name = fresh(f"{tag}_{value.name}")
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in rename:
                node.input[k] = rename[name]
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _rename_subgraph(sub, rename, fresh, tag)
        for k, name in enumerate(node.output):
            if name:
                rename[name] = node.output[k] = fresh(f"{tag}_{name}")
    for value in list(graph.output) + list(graph.value_info):
        value.name = rename.get(value.name, value.name)


def _copy_body(body, bindings, fresh, tag):
    """The body's nodes with its inputs bound to ``bindings`` (name -> outer name) and every name
    it defines made fresh; returns (nodes, names of the body's outputs in the copy)."""
    rename = dict(bindings)
    nodes = []
    for init in body.initializer:
        rename[init.name] = fresh(f"{tag}_{init.name}")
        nodes.append(_const_node(rename[init.name], numpy_helper.to_array(init)))
    for node in body.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        for k, name in enumerate(node.input):
            copy.input[k] = rename.get(name, name) if name else ""
        for k, name in enumerate(node.output):
            if name:
                rename[name] = fresh(f"{tag}_{name}")
                copy.output[k] = rename[name]
        if copy.name:
            copy.name = f"{tag}/{copy.name}"
        for attr in copy.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _rename_subgraph(sub, rename, fresh, tag)
        nodes.append(copy)
    return nodes, [rename.get(out.name, out.name) for out in body.output]


def _label(node):
    return f"node {node.name or node.output[0]!r} ({node.op_type})"


def _is_true(consts, name):
    return name in consts and bool(np.asarray(consts[name]).reshape(-1)[0]) and np.asarray(consts[name]).size == 1


def _stack(parts, out, axis, fresh, tag, rank, opset):
    """``out`` = the ``parts`` stacked along a new axis ``axis`` (Unsqueeze each, then Concat)."""
    axis = axis % (rank + 1)
    nodes, lifted = [], []
    if opset >= 13:  # the axes an input from opset 13, an attribute before
        axes = fresh(f"{tag}_axes")
        nodes.append(_const_node(axes, np.asarray([axis], np.int64)))
    for part in parts:
        lifted.append(fresh(f"{part}_lifted"))
        nodes.append(helper.make_node("Unsqueeze", [part, axes], [lifted[-1]]) if opset >= 13 else
                     helper.make_node("Unsqueeze", [part], [lifted[-1]], axes=[axis]))
    nodes.append(helper.make_node("Concat", lifted, [out], axis=axis))
    return nodes


def _unroll_loop(node, consts, types, fresh, opset, model):
    body = helper.get_attribute_value(next(a for a in node.attribute if a.name == "body"))
    trip, cond = (list(node.input) + ["", ""])[:2]
    for name in (trip, cond):
        if name:
            _evaluated(model, name, consts)
    if not trip or trip not in consts:
        raise ModelError(f"{_label(node)}: the trip count is computed at run time (or absent); rosenna unrolls "
                         "loops whose trip count and condition are known at generation time")
    if cond and not _is_true(consts, cond):
        raise ModelError(f"{_label(node)}: the loop condition is computed at run time; rosenna unrolls loops whose "
                         "trip count and condition are known at generation time")
    cond_in, cond_out = body.input[1].name, body.output[0].name
    passed_on = cond_out == cond_in or any(n.op_type == "Identity" and n.output[0] == cond_out and n.input[0] == cond_in
                                           for n in body.node)
    if not passed_on and not _is_true(_constants(body), cond_out):
        raise ModelError(f"{_label(node)}: the body computes its condition from data; rosenna unrolls loops whose "
                         "trip count and condition are known at generation time")
    count = int(np.asarray(consts[trip]).reshape(-1)[0])
    if count > MAX_COPIES:
        raise ModelError(f"{_label(node)}: {count} iterations; rosenna unrolls loops of at most {MAX_COPIES}")
    carried = list(node.input[2:])
    n_carried = len(carried)
    scans = [[] for _ in body.output[1 + n_carried:]]
    nodes = []
    true_name = fresh(f"{node.output[0]}_true")
    nodes.append(_const_node(true_name, np.asarray(True)))
    for i in range(count):
        tag = f"{node.name or 'loop'}_it{i}"
        it = fresh(f"{tag}_iter")
        nodes.append(_const_node(it, np.asarray(i, np.int64)))
        bindings = {body.input[0].name: it, cond_in: true_name}
        bindings.update({b.name: v for b, v in zip(body.input[2:], carried)})
        copied, outs = _copy_body(body, bindings, fresh, tag)
        nodes += copied
        carried = outs[1:1 + n_carried]
        for k, name in enumerate(outs[1 + n_carried:]):
            scans[k].append(name)
    for final, value in zip(node.output[:n_carried], carried):
        if final:
            nodes.append(helper.make_node("Identity", [value], [final]))
    for out, parts in zip(node.output[n_carried:], scans):
        if not out:
            continue
        if not parts:
            raise ModelError(f"{_label(node)}: a scan output of zero iterations is empty; rosenna computes outputs "
                             "of at least one element")
        rank = len(body.output[1 + n_carried + scans.index(parts)].type.tensor_type.shape.dim)
        nodes += _stack(parts, out, 0, fresh, out, rank, opset)
    return nodes


def _scan_length(node, names, axes, types):
    lengths = set()
    for name, axis in zip(names, axes):
        dims = types[name].tensor_type.shape.dim if name in types else []
        if not dims or not dims[axis % len(dims)].HasField("dim_value"):
            raise ModelError(f"{_label(node)}: scan input {name!r} has no static shape; rosenna unrolls scans of "
                             "static length")
        lengths.add(dims[axis % len(dims)].dim_value)
    if len(lengths) != 1:
        raise ModelError(f"{_label(node)}: the scan inputs have different lengths {sorted(lengths)}")
    count = lengths.pop()
    if count > MAX_COPIES:
        raise ModelError(f"{_label(node)}: {count} iterations; rosenna unrolls scans of at most {MAX_COPIES}")
    return count


def _scan_copies(body, state, pieces, count, fresh, tag):
    """The ``count`` copies of a Scan body: ``pieces(i, k, tag)`` gives the nodes and the name of
    slice i of scan input k. Returns (nodes, the final state names, per scan output its parts)."""
    n_state = len(state)
    outs = [[] for _ in range(len(body.output) - n_state)]
    nodes = []
    for i in range(count):
        copy_tag = f"{tag}_it{i}"
        bindings = {b.name: v for b, v in zip(body.input[:n_state], state)}
        for k, value in enumerate(body.input[n_state:]):
            made, piece = pieces(i, k, copy_tag)
            nodes += made
            bindings[value.name] = piece
        copied, results = _copy_body(body, bindings, fresh, copy_tag)
        nodes += copied
        state = results[:n_state]
        for k, name in enumerate(results[n_state:]):
            outs[k].append(name)
    return nodes, state, outs


def _gather(source, index, axis, fresh, tag, opset):
    """Nodes giving ``source`` indexed at the constant ``index`` along ``axis`` (the axis dropped):
    a Gather; before opset 9 (no int64 Constant) a Slice and a Squeeze by attributes."""
    piece = fresh(f"{tag}_slice")
    if opset < 9:
        row = fresh(f"{tag}_row")
        return [helper.make_node("Slice", [source], [row], axes=[axis], starts=[index], ends=[index + 1]),
                helper.make_node("Squeeze", [row], [piece], axes=[axis])], piece
    at = fresh(f"{tag}_index")
    nodes = [_const_node(at, np.asarray(index, np.int64)), helper.make_node("Gather", [source, at], [piece], axis=axis)]
    return nodes, piece


def _unroll_scan(node, types, fresh, opset, consts):
    if opset < 9:
        return _unroll_scan8(node, types, fresh, opset, consts)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    body, m = attrs["body"], int(attrs["num_scan_inputs"])
    n_state = len(node.input) - m
    scan_inputs = list(node.input[n_state:])
    in_axes = list(attrs.get("scan_input_axes") or [0] * m)
    in_dirs = list(attrs.get("scan_input_directions") or [0] * m)
    n_out = len(body.output) - n_state
    out_axes = list(attrs.get("scan_output_axes") or [0] * n_out)
    out_dirs = list(attrs.get("scan_output_directions") or [0] * n_out)
    count = _scan_length(node, scan_inputs, in_axes, types)

    def pieces(i, k, tag):
        rank = len(types[scan_inputs[k]].tensor_type.shape.dim)
        index = count - 1 - i if in_dirs[k] else i
        return _gather(scan_inputs[k], index, in_axes[k] % rank, fresh, f"{tag}_{k}", opset)

    nodes, state, outs = _scan_copies(body, list(node.input[:n_state]), pieces, count, fresh, node.name or "scan")
    for final, value in zip(node.output[:n_state], state):
        if final:
            nodes.append(helper.make_node("Identity", [value], [final]))
    for k, (out, parts) in enumerate(zip(node.output[n_state:], outs)):
        if out:
            rank = len(body.output[n_state + k].type.tensor_type.shape.dim)
            nodes += _stack(parts[::-1] if out_dirs[k] else parts, out, out_axes[k], fresh, out, rank, opset)
    return nodes


def _unroll_scan8(node, types, fresh, opset, consts):
    """Opset-8 Scan: every input and output has a batch axis first (the scan axis is 1); the body
    runs on one batch entry at a time. Each batch entry's scan is unrolled as opset 9's, and the
    entries' results stacked along axis 0. ``sequence_lens`` absent, or a constant of the full
    length for every entry."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    body, m = attrs["body"], int(attrs["num_scan_inputs"])
    lens, inputs = (list(node.input) + [""])[0], list(node.input[1:])
    n_state = len(inputs) - m
    scan_inputs = inputs[n_state:]
    dirs = list(attrs.get("directions") or [0] * m)
    count = _scan_length(node, scan_inputs, [1] * m, types)
    batch = _scan_length(node, inputs, [0] * len(inputs), types) if inputs else 1
    if lens:
        given = consts.get(lens)
        if given is None or np.any(np.asarray(given).reshape(-1) != count):
            raise ModelError(f"{_label(node)}: sequence_lens is computed at run time or shorter than the scan "
                             f"inputs' length {count} for some batch entry; rosenna unrolls scans of one static "
                             "length (drop sequence_lens or make every entry full length)")
    tag = node.name or "scan"
    nodes, finals, scanned = [], [[] for _ in range(n_state)], [[] for _ in range(len(body.output) - n_state)]
    for entry in range(batch):
        state = []
        for j, name in enumerate(inputs[:n_state]):
            made, piece = _gather(name, entry, 0, fresh, f"{tag}_b{entry}_state{j}", opset)
            nodes += made
            state.append(piece)
        rows = []
        for k, name in enumerate(scan_inputs):
            made, row = _gather(name, entry, 0, fresh, f"{tag}_b{entry}_input{k}", opset)
            nodes += made
            rows.append(row)

        def pieces(i, k, copy_tag, rows=rows):
            return _gather(rows[k], count - 1 - i if dirs[k] else i, 0, fresh, f"{copy_tag}_{k}", opset)

        made, state, outs = _scan_copies(body, state, pieces, count, fresh, f"{tag}_b{entry}")
        nodes += made
        for j, value in enumerate(state):
            finals[j].append(value)
        for k, parts in enumerate(outs):
            rank = len(body.output[n_state + k].type.tensor_type.shape.dim)
            stacked = fresh(f"{tag}_b{entry}_output{k}")
            nodes += _stack(parts, stacked, 0, fresh, stacked, rank, opset)
            scanned[k].append(stacked)
    for j, (out, parts) in enumerate(zip(node.output[:n_state], finals)):
        if out:
            rank = len(body.output[j].type.tensor_type.shape.dim)
            nodes += _stack(parts, out, 0, fresh, out, rank, opset)
    for k, (out, parts) in enumerate(zip(node.output[n_state:], scanned)):
        if out:
            rank = len(body.output[n_state + k].type.tensor_type.shape.dim) + 1
            nodes += _stack(parts, out, 0, fresh, out, rank, opset)
    return nodes


def _inline_if(node, consts, fresh, model):
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    cond = node.input[0]
    if _evaluated(model, cond, consts) is not None:
        branch = attrs["then_branch"] if bool(np.asarray(consts[cond]).reshape(-1)[0]) else attrs["else_branch"]
        side = "then" if branch is attrs["then_branch"] else "else"
        nodes, outs = _copy_body(branch, {}, fresh, f"{node.name or 'if'}_{side}")
        return nodes + [helper.make_node("Identity", [o], [final]) for o, final in zip(outs, node.output) if final]
    for a, b in zip(attrs["then_branch"].output, attrs["else_branch"].output):
        shapes = [tuple(d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim)
                  if v.type.tensor_type.HasField("shape") else None for v in (a, b)]
        if None in shapes or shapes[0] != shapes[1] or None in shapes[0]:
            raise ModelError(f"{_label(node)}: the condition is computed at run time and the branches' outputs do "
                             f"not have one static shape ({shapes[0]} and {shapes[1]}); rosenna computes both "
                             "branches and selects, which needs equal shapes")
    then_nodes, then_outs = _copy_body(attrs["then_branch"], {}, fresh, f"{node.name or 'if'}_then")
    else_nodes, else_outs = _copy_body(attrs["else_branch"], {}, fresh, f"{node.name or 'if'}_else")
    nodes = then_nodes + else_nodes
    for a, b, final in zip(then_outs, else_outs, node.output):
        if final:
            nodes.append(helper.make_node("Where", [cond, a, b], [final]))
    return nodes


def unroll_control_flow(model, infer):
    """Unroll every Loop, Scan and If of the main graph (module docstring), in rounds; ``infer`` is
    shape inference. Returns the model (the same object when there is none)."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    for _ in range(MAX_ROUNDS):
        graph = model.graph
        if not any(n.op_type in ("Loop", "Scan", "If") and n.domain in ("", "ai.onnx") for n in graph.node):
            return model
        consts = _constants(graph)
        types = {v.name: v.type for v in list(graph.input) + list(graph.value_info) + list(graph.output)}
        for init in graph.initializer:
            types.setdefault(init.name, helper.make_tensor_type_proto(init.data_type, list(init.dims)))
        fresh = _Fresh(_names(graph))
        nodes = []
        for node in graph.node:
            if node.domain not in ("", "ai.onnx") or node.op_type not in ("Loop", "Scan", "If"):
                nodes.append(node)
            elif node.op_type == "Loop":
                nodes += _unroll_loop(node, consts, types, fresh, opset, model)
            elif node.op_type == "Scan":
                nodes += _unroll_scan(node, types, fresh, opset, consts)
            else:
                nodes += _inline_if(node, consts, fresh, model)
        del graph.node[:]
        graph.node.extend(nodes)
        model = infer(model)
    return model
