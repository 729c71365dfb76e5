"""The MLP chain of a plan, found once: per layer its widths, weights, bias and activation.

A plan is an MLP chain when, after the passes, it is one input, one output and a sequence of Gemm
nodes each reading the previous one's output, each with a weight W ``[N][K]`` and a bias ``[N]``
(the Gemm lowering's canonical form, rosenna/ops/gemm.py), each with at most one fused activation
of :data:`ACTIVATIONS`. The layers are read from the plan's lowered statements (the weights each
Gemm's loops load, in the order they load them), not from the position of the weights in the
plan's list: a layer records the index of its W and bias in that list, which is also their index
in the weights file.
"""

from dataclasses import dataclass, field

from rosenna.loopir import Assign, Comment, Ref, walk, walk_expr

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
    """One dense layer: ``y[n] = act(sum_k W[n][k] x[k] + b[n])``; ``act`` the activation's op name
    (None: linear), ``attrs`` its attributes; ``w_index`` / ``b_index``: W's and the bias's index
    in ``plan.weights`` (and in the weights file)."""
    k: int
    n: int
    act: str
    w: object  # numpy [n][k]
    b: object  # numpy [n]
    attrs: dict = field(default_factory=dict)
    w_index: int = 0
    b_index: int = 0


@dataclass(frozen=True)
class Chain:
    """The analysis: ``layers`` (a tuple; empty when the plan is no MLP chain) and, then, ``reason``."""
    layers: tuple = ()
    reason: str = ""
    precision: str = "single"

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


def analyse(plan):
    """The plan's :class:`Chain` (``layers`` empty and ``reason`` set when it is not one)."""
    def no(reason):
        return Chain((), reason, plan.precision)

    if len(plan.inputs) != 1 or len(plan.outputs) != 1:
        return no(f"{len(plan.inputs)} inputs and {len(plan.outputs)} outputs, not one of each")
    index = {w.source: i for i, w in enumerate(plan.weights)}
    layers, k = [], plan.nx
    segments = _segments(plan)
    if not segments:
        return no("no computed op")
    for op, stmts in segments:
        if op is None:
            return no("an output is a copy of another value")
        if op.op != "Gemm":
            return no(f"a {op.label} node, not Gemm")
        if op.activation and op.activation not in ACTIVATIONS:
            return no(f"activation {op.activation} is not one the MLP kernels take")
        read = _weights_read(plan, stmts, index)
        if len(read) != 2:
            return no(f"layer {len(layers)} reads {len(read)} weights, not W and a bias")
        w, b = plan.weights[read[0]].array, plan.weights[read[1]].array
        n = b.size
        if n == 0 or w.size != n * k:
            return no(f"layer {len(layers)}: W of {w.size} values is not {n} x {k}")
        attrs = dict(op.activation_attrs) if op.activation else {}
        layers.append(Layer(k, n, op.activation or None, w.reshape(n, k), b, attrs, read[0], read[1]))
        k = n
    if k != plan.ny:
        return no(f"the last layer's {k} outputs are not y's {plan.ny}")
    if sum(1 for op in plan.ops if not op.alias) != len(layers):
        return no("ops besides the Gemm chain")
    return Chain(tuple(layers), "", plan.precision)
