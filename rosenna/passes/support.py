"""Refuse what cannot be lowered, all at once; then let each op put itself in canonical form."""

from rosenna import ops
from rosenna.errors import ModelError, UnsupportedOp
from rosenna.ir import FLOAT_DTYPES, HELD_DTYPES, NARROW_DTYPES

WHERE_LISTED = "supported ops: `rosenna info --ops`, or docs/reference/operators.md"


def unknown_op_reason(node):
    """Why a node has no op module: a foreign domain, or a standard op rosenna does not know."""
    if node.domain not in ("", "ai.onnx"):
        return (f"an op of domain {node.domain!r}, which rosenna does not know (it lowers ops of the standard "
                "ONNX domain only)")
    return "not an op rosenna supports"


def unsupported(problems):
    """The error for a list of ``"node ...: reason"`` problems: one line for one problem, a list
    for several; then where the supported ops are listed."""
    sep = " " if len(problems) == 1 else "\n  "
    return UnsupportedOp(f"the model uses {len(problems)} unsupported construct(s):{sep}" + sep.join(problems)
                         + f"\n{WHERE_LISTED}")


def check_supported(graph):
    problems = []
    for node in graph.nodes:
        label = f"node {node.name!r} ({node.domain + '.' if node.domain else ''}{node.op})"
        op = ops.get(node.op) if node.domain in ("", "ai.onnx") else None
        if op is None:
            problems.append(f"{label}: {unknown_op_reason(node)}")
            continue
        try:
            reasons = op.check(node, graph)
        except Exception as exc:  # an op's check must never crash the tool
            reasons = [f"cannot be checked: {exc}"]
        problems.extend(f"{label}: {reason}" for reason in reasons)
    if problems:
        raise unsupported(problems)
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
        ops.get(node.op).canonicalize(node, graph)
