"""Refuse what cannot be lowered, all at once; then let each op put itself in canonical form."""

import shlex

from rosenna import ops
from rosenna.errors import ModelError, UnsupportedOp
from rosenna.ir import FLOAT_DTYPES, HELD_DTYPES, NARROW_DTYPES
from rosenna.quoting import terminal_text

WHERE_LISTED = "supported ops: `rosenna info --ops`, or docs/reference/operators.md"


def unknown_op_reason(node):
    """Why a node has no op module: a foreign domain, or a standard op rosenna does not know."""
    if node.domain == "ai.onnx.ml":
        if node.op == "ZipMap":
            return ("ZipMap turns a classifier's scores into a list of maps, which generated code cannot return; "
                    "convert the classifier without it (skl2onnx: options={id(model): {'zipmap': False}})")
        return "not an ai.onnx.ml op rosenna supports (`rosenna info --ops` lists those it lowers)"
    if node.op == "Scan" and node.domain in ("", "ai.onnx"):
        return ("Scan (a loop whose body is a graph) is not supported; skl2onnx writes it for pairwise distances "
                "(GaussianProcessRegressor, KNeighborsRegressor, KernelRidge): export the fitted estimator's "
                "prediction as matrix products instead (for a GaussianProcessRegressor with an RBF kernel: "
                "exp(-|x - X_train|^2 / (2 l^2)) @ alpha_ + y mean, written e.g. as a PyTorch module)")
    if node.domain not in ("", "ai.onnx"):
        return (f"an op of domain {node.domain!r}, which rosenna does not know (it lowers ops of the standard "
                "ONNX domain and ai.onnx.ml only)")
    return "not an op rosenna supports"


#: Node names shown per refused op before "and N more", and the length each is cut to.
NAMES_SHOWN, NAME_CHARS = 3, 40

#: Workarounds known for an op's whole domain, shown on its line.
DOMAIN_WORKAROUNDS = {
    "com.microsoft": "an onnxruntime contrib op, written when a model is saved after onnxruntime's graph "
                     "optimizations or its transformer optimizer: give rosenna the model as the exporter wrote it",
}


_QUANTIZED = ("a quantized model: give rosenna the float model from before quantization (it computes in float32 "
              "or float64)")
_CONTROL = ("control flow: export by tracing (torch.onnx.export with dynamo=False), which unrolls loops and "
            "records the branch taken, where they do not depend on the input's values")
#: Workarounds known for a standard op, shown on its line.
OP_WORKAROUNDS = {
    **dict.fromkeys(("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearMatMul", "QLinearConv",
                     "MatMulInteger", "ConvInteger"), _QUANTIZED),
    **dict.fromkeys(("If", "Loop", "Scan"), _CONTROL),
}


def op_label(node):
    """``domain.Op`` as the model names it, control characters escaped (a refusal keeps its newlines)."""
    return terminal_text(f"{node.domain + '.' if node.domain else ''}{node.op}")


def runtime_sources(graph, node):
    """The graph inputs that the node's inputs after the first are computed from (the values a
    ``--freeze`` would make constant); those of its only input when it has one."""
    producers = graph.producers()
    todo = [n for n in (node.inputs[1:] if len(node.inputs) > 1 else node.inputs) if n]
    found, seen = [], set()
    while todo:
        name = todo.pop(0)
        if name in seen or graph.is_const(name):
            continue
        seen.add(name)
        if name in graph.inputs:
            found.append(name)
        elif name in producers:
            todo.extend(n for n in producers[name].inputs if n)
    return found


def workaround(graph, nodes, reason):
    """What the user can do about ``reason`` on ``nodes``, or ''."""
    if graph is not None and "run time" in reason:
        inputs = list(dict.fromkeys(i for n in nodes for i in runtime_sources(graph, n)))
        if inputs:
            freeze = " ".join("--freeze " + terminal_text(shlex.quote(f"{i}={file_stem(i)}.npy")) for i in inputs[:3])
            more = f" (and {len(inputs) - 3} more)" if len(inputs) > 3 else ""
            return (f"{freeze}{more} makes the graph input{'s' if len(inputs) > 1 else ''} a constant, "
                    "when it holds the same values on every call (weights, a mesh's connectivity)")
    if nodes[0].domain in ("", "ai.onnx"):
        return OP_WORKAROUNDS.get(nodes[0].op, "")
    return DOMAIN_WORKAROUNDS.get(nodes[0].domain, "")


def file_stem(name):
    """A file-name stem for an input name in a suggested command line."""
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("._") or "input"
    return stem[:NAME_CHARS]


def unsupported(problems, graph=None):
    """The error for ``problems``, a list of ``(node, reason)``: one line per op and reason (the
    node's name for one node; for several, their count and the first names), with the
    workaround where one is known (:func:`workaround`; ``graph`` gives the graph inputs behind a
    run-time value); then where the supported ops are listed."""
    groups = {}
    for node, reason in problems:  # a reason may quote the model: its control characters escaped
        groups.setdefault((op_label(node), terminal_text(reason)), []).append(node)
    lines = []
    for (label, reason), nodes in groups.items():
        if len(nodes) == 1:
            line = f"node {nodes[0].name!r} ({label}): {reason}"
        else:
            names = ", ".join(repr(n.name if len(n.name) <= NAME_CHARS else n.name[:NAME_CHARS - 3] + "...")
                              for n in nodes[:NAMES_SHOWN])
            more = f" and {len(nodes) - NAMES_SHOWN} more" if len(nodes) > NAMES_SHOWN else ""
            line = f"{label}, {len(nodes)} nodes ({names}{more}): {reason}"
        fix = workaround(graph, nodes, reason)
        lines.append(f"{line}; workaround: {fix}" if fix else line)
    sep = " " if len(lines) == 1 else "\n  "
    count = len(problems)
    kinds = f" of {len(lines)} kinds" if len(lines) < count and len(lines) > 1 else ""
    return UnsupportedOp(f"the model uses {count} unsupported construct(s){kinds}:{sep}" + sep.join(lines)
                         + f"\n{WHERE_LISTED}")


def check_supported(graph):
    problems = []
    for node in graph.nodes:
        op = ops.find(node)
        if op is None:
            problems.append((node, unknown_op_reason(node)))
            continue
        try:
            reasons = op.check(node, graph)
        except Exception as exc:  # an op's check must never crash the tool
            reasons = [f"cannot be checked: {exc}"]
        problems.extend((node, reason) for reason in reasons)
    if problems:
        raise unsupported(problems, graph)
    for name in graph.outputs:
        if 0 in graph.shape_of(name):
            raise ModelError(f"output {name!r} is empty (shape {tuple(graph.shape_of(name))}); the generated code "
                             "computes outputs of at least one element")
    for name, value in graph.values.items():
        if value.dtype is not None and value.dtype not in FLOAT_DTYPES + HELD_DTYPES + NARROW_DTYPES:
            raise ModelError(
                f"value {name!r} has element type {value.dtype} at run time; rosenna computes float32 or "
                "float64 values (integer and bool ones held in the float type) only"
            )


def canonicalize(graph):
    for node in graph.nodes:
        ops.find(node).canonicalize(node, graph)
