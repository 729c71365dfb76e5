"""The MLP chain of a plan, found once: per layer its widths, weights, bias and activation.

A plan is an MLP chain when, after the passes, it is one input, one output and a sequence of Gemm
nodes each reading the previous one's output, each with a weight W ``[N][K]`` and a bias ``[N]``
(the Gemm lowering's canonical form, rosenna/ops/gemm.py), each with at most one fused activation
and then any pointwise epilogue: the nodes between two Gemms that compute each element from the
same element of earlier values and scalar constants (GELU's tanh form as Mul/Add/Pow/Tanh nodes,
Softsign as Abs/Add/Div, x * sigmoid(x), a scaled tanh, a clamp), composed into one expression that
every fast kernel applies as it applies an activation. An expression must be finite at 0 (the
kernels' padded columns hold f(0) and meet zero weights downstream). The layers are read from the
plan's lowered statements (the weights each Gemm's loops load, in the order they load them; the
values each reads), not from the position of the weights in the plan's list: a layer records the
index of its W and bias in that list, which is also their index in the weights file. An
epilogue's scalar constants are compiled into the kernels' expression.
"""

from dataclasses import dataclass, field

import math

from rosenna import ops
from rosenna.ir import is_rounding
from rosenna.loopir import Assign, Bin, Comment, Fn, Idx, Loop, Num, Ref, Select, Var, element_of, loads, walk, walk_expr

#: Activations every MLP kernel applies (narrow FP32, staged FP32, tile, 3xTF32 chain and wide, the
#: routines, the offload body): each is rendered per layer, with its attributes, from its op
#: module's formula (rosenna.ops.activation), so no kernel spells an activation itself. Each is
#: finite at 0, which the kernels rely on (a padded column holds act(0) and meets zero weights
#: downstream). Swish (SiLU), Mish and HardSwish come from the patterns exporters write
#: (rosenna.passes), GELU's erf form from passes/gelu.py.
ACTIVATIONS = ("Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "Tanh", "Softplus", "Softsign",
               "Gelu", "Clip", "Swish", "Mish", "HardSwish")


@dataclass(frozen=True, eq=False)
class Layer:
    """One dense layer: ``y[n] = f(sum_k W[n][k] x[k] + b[n])``; ``expr`` is ``f`` as a loop-IR
    expression of ``Var("v")``: the fused activation's formula (``act`` its op name, ``attrs`` its
    attributes), composed with the pointwise epilogue that follows the Gemm in the graph, if any
    (``act`` then names the ops, e.g. ``Mul+Add+Tanh``); ``w_index`` / ``b_index``: W's and the
    bias's index in ``plan.weights`` (and in the weights file)."""
    k: int
    n: int
    act: str
    w: object  # numpy [n][k]
    b: object  # numpy [n]
    attrs: dict = field(default_factory=dict)
    w_index: int = 0
    b_index: int = 0
    expr: object = None  # None: linear
    #: True when ``expr`` came from pointwise nodes after the Gemm (not one fused activation).
    epilogue: bool = False
    #: The model's node names the layer computes (the Gemm's, its epilogue's), for comments.
    nodes: tuple = ()
@dataclass(frozen=True)
class Chain:
    """The analysis: ``layers`` (a tuple; empty when the plan is no MLP chain) and, then, ``reason``."""
    layers: tuple = ()
    reason: str = ""
    precision: str = "single"
    #: "bf16" / "fp16": every layer's input is rounded to that type and its weights hold values of
    #: it (rosenna.passes.low_precision; the rounding nodes are not part of any layer's ``expr``).
    low_precision: str = None

    def __bool__(self):
        return bool(self.layers)

    @property
    def widest(self):
        """The widest input or output of any layer (0 without layers)."""
        return max((max(layer.k, layer.n) for layer in self.layers), default=0)

    @property
    def hidden(self):
        """The hidden widths (every layer's output but the last)."""
        return tuple(layer.n for layer in self.layers[:-1])

    @property
    def macs(self):
        return sum(layer.k * layer.n for layer in self.layers)


def _segments(plan):
    """``[(planned op or None, [statements])]``: the plan's body cut at the comments it puts
    before each op's loops (None: an output copy)."""
    out = []
    for stmt in plan.body:
        if isinstance(stmt, Comment):
            out.append((stmt.op, []))
        elif out:
            out[-1][1].append(stmt)
        else:
            out.append((None, [stmt]))
    return out


def _weights_read(plan, stmts, index):
    """The weights ``stmts`` load, in first-load order, as indices into ``plan.weights``."""
    seen = []
    for stmt in walk(stmts):
        if not isinstance(stmt, Assign):
            continue
        for ref in walk_expr(stmt.expr):
            if isinstance(ref, Ref) and ref.buf in index and index[ref.buf] not in seen:
                seen.append(index[ref.buf])
    return seen


#: numpy-free evaluation of the math functions an expression may call, for the check at 0.
_EVAL = {"exp": math.exp, "tanh": math.tanh, "log": math.log, "sqrt": math.sqrt, "erf": math.erf, "abs": abs,
         "max": max, "min": min, "pow": lambda a, b: math.pow(a, b), "floor": math.floor, "ceil": math.ceil,
         "sin": math.sin, "cos": math.cos, "trunc": math.trunc, "sigmoid": lambda a: 1.0 / (1.0 + math.exp(-a))}
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}
_CMP = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
        "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def value_at(expr, v):
    """``expr`` (of ``Var("v")``) at ``v``, in float64; None where it cannot be evaluated (an
    unknown function or a domain error), inf or nan where that is what it is."""
    try:
        if isinstance(expr, Num):
            return float(expr.value)
        if isinstance(expr, Var):
            return v if expr.name == "v" else None
        if isinstance(expr, Bin) and expr.op in _OPS:
            a, b = value_at(expr.a, v), value_at(expr.b, v)
            if a is None or b is None:
                return None
            if expr.op == "/" and b == 0:
                return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)
            return _OPS[expr.op](a, b)
        if isinstance(expr, Fn) and expr.name in _EVAL:
            args = [value_at(arg, v) for arg in expr.args]
            return None if any(a is None for a in args) else float(_EVAL[expr.name](*args))
        if isinstance(expr, Select) and expr.cmp in _CMP:
            lhs, rhs = value_at(expr.lhs, v), value_at(expr.rhs, v)
            if lhs is None or rhs is None:
                return None
            return value_at(expr.a if _CMP[expr.cmp](lhs, rhs) else expr.b, v)
    except (ValueError, OverflowError, ZeroDivisionError):
        return None
    return None


def _pointwise(plan, stmts, n, env):
    """``(value name, expression)`` when ``stmts`` (one op's lowered loops) compute n elements each
    from the same element of values in ``env`` and constants; None otherwise."""
    if len(stmts) != 1 or not isinstance(stmts[0], Loop) or stmts[0].extent != n:
        return None
    loop = stmts[0]
    if len(loop.body) != 1 or not isinstance(loop.body[0], Assign) or loop.body[0].accumulate:
        return None
    assign, index = loop.body[0], Idx(((loop.var, 1),), 0)
    if not isinstance(assign.target, Ref) or assign.target.idx != index:
        return None
    expr = element_of(assign.expr, {buf: env.get(_where(plan, buf)) for buf in loads(assign.expr)}, index)
    return (assign.target.buf, expr) if expr is not None else None



def _where(plan, name):
    """A value's storage location (aliases and reused scratch resolve to the buffer they use)."""
    return plan.storage.get(name)


def _gemm_io(plan, stmts, weights):
    """``(input value, output value)`` of a Gemm's loops: the one non-weight value they load and
    the value they store; None when that is not one of each."""
    inputs, stores = set(), set()
    for stmt in walk(stmts):
        if isinstance(stmt, Assign):
            inputs |= {buf for buf in loads(stmt.expr) if buf not in weights}
            if isinstance(stmt.target, Ref):
                stores.add(stmt.target.buf)
    return (inputs.pop(), stores.pop()) if len(inputs) == 1 and len(stores) == 1 else None


def analyse(plan):
    """The plan's :class:`Chain` (``layers`` empty and ``reason`` set when it is not one)."""
    low = getattr(plan, "low_precision", None)

    def no(reason):
        return Chain((), reason, plan.precision, low)

    def rounding(segment):
        return segment[0] is not None and segment[0].op == "Cast" and is_rounding(segment[0].nodes)

    if len(plan.inputs) != 1 or len(plan.outputs) != 1:
        return no(f"{len(plan.inputs)} inputs and {len(plan.outputs)} outputs, not one of each")
    index = {w.source: i for i, w in enumerate(plan.weights)}
    layers, k, current = [], plan.nx, _where(plan, plan.inputs[0].name)
    segments = [seg for seg in _segments(plan)]
    if not segments:
        return no("no computed op")
    i = 0
    while i < len(segments):
        if low:
            io = _gemm_io(plan, segments[i][1], index) if rounding(segments[i]) else None
            if io is None or _where(plan, io[0]) != current:
                return no(f"layer {len(layers)}'s input is not rounded to {low} alone")
            current = _where(plan, io[1])
            i += 1
            if i == len(segments):
                return no(f"a {low} rounding is the last node")
        op, stmts = segments[i]
        if op is None:
            return no("an output is a copy of another value")
        if op.op != "Gemm":
            return no(f"the first computed node is a {op.label}, not a Gemm")
        if op.activation and op.activation not in ACTIVATIONS:
            return no(f"activation {op.activation} is not one the MLP kernels take")
        read = _weights_read(plan, stmts, index)
        if len(read) != 2:
            return no(f"layer {len(layers)} reads {len(read)} weights, not W and a bias")
        io = _gemm_io(plan, stmts, index)
        if io is None or _where(plan, io[0]) != current:
            return no(f"layer {len(layers)} does not read the previous layer's output alone")
        w, b = plan.weights[read[0]].array, plan.weights[read[1]].array
        n = b.size
        if n == 0 or w.size != n * k:
            return no(f"layer {len(layers)}: W of {w.size} values is not {n} x {k}")
        attrs = dict(op.activation_attrs) if op.activation else {}
        expr = ops.get(op.activation).expr(attrs, Var("v")) if op.activation else None
        env = {_where(plan, io[1]): expr or Var("v")}
        out, names, nodes = io[1], [], list(op.nodes)
        i += 1
        while i < len(segments) and segments[i][0] is not None and segments[i][0].op != "Gemm" \
                and not rounding(segments[i]):
            step = _pointwise(plan, segments[i][1], n, env)
            if step is None:
                return no(f"a {segments[i][0].label} node after layer {len(layers)} is not pointwise")
            out, env[_where(plan, step[0])] = step[0], step[1]
            names.append(segments[i][0].op)
            nodes += segments[i][0].nodes
            i += 1
        if names:
            expr = env[_where(plan, out)]
            at0 = value_at(expr, 0.0)
            if at0 is None or not math.isfinite(at0):
                return no(f"the pointwise nodes after layer {len(layers)} are not finite at 0 ({at0})")
        act = "+".join(([op.activation] if op.activation else []) + names) or None
        layers.append(Layer(k, n, act, w.reshape(n, k), b, attrs, read[0], read[1], expr, bool(names), tuple(nodes)))
        k, current = n, _where(plan, out)
    if k != plan.ny or current[0] != "y":
        return no(f"the last layer's {k} outputs are not y's {plan.ny}")
    return Chain(tuple(layers), "", plan.precision, low)
