"""Refuse what cannot be lowered, all at once; then let each op put itself in canonical form."""

from rosenna import ops
from rosenna.errors import ModelError, UnsupportedOp
from rosenna.ir import FLOAT_DTYPES, HELD_DTYPES, NARROW_DTYPES

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
        op = ops.find(node)
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
    for name, value in graph.values.items():
        if value.dtype is not None and value.dtype not in FLOAT_DTYPES + HELD_DTYPES + NARROW_DTYPES:
            raise ModelError(
                f"value {name!r} has element type {value.dtype} at run time; rosenna computes float32 or "
                "float64 values (integer and bool ones held in the float type) only"
            )


def canonicalize(graph):
    for node in graph.nodes:
        ops.find(node).canonicalize(node, graph)
