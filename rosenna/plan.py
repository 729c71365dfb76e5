"""The plan: where every value lives, the x/y layouts, the weight list, the lowered loops, a hash.

- x holds the graph inputs concatenated in declaration order, y the outputs likewise.
- A graph output is computed straight into its slice of y; an intermediate value lives in a
  per-point scratch buffer. Scratch buffers are reused by liveness: a buffer is free again after
  the last reader of the value it holds, never within the node that writes into it.
- Alias nodes give their output the storage of their input.
- Weights get derived identifiers ``w<i>_<sanitized name>``; model names never reach the source.
"""

import dataclasses
import functools
import hashlib
import json
import re
from dataclasses import dataclass, field

import numpy as np

from rosenna import abi, limits, ops
from rosenna.errors import ModelError
from rosenna.loopir import (FAULT, FAULT_FLAGS, OP_FLAGS, Assign, Builder, Comment, Num, Ref, Var, counts_faults,
                            decimal_texts, flag_faults, runtime_indexed, walk, walk_expr)
from rosenna.ops.base import copy_lowering
from rosenna.passes.relabel import ALIAS
from rosenna.quoting import comment_text  # noqa: F401 (the plan's comments; generate.py reads it here)
from rosenna.strategy.tuning import Tuning

# The thresholds live in rosenna.limits (configuration and code import them from there).
EMBED_THRESHOLD, WHOLE_THRESHOLD = limits.EMBED_THRESHOLD, limits.WHOLE_THRESHOLD
#: Ops whose loop over time is sequential: a plan with one has no whole-field path.
SEQUENTIAL_OPS = ("LSTM", "GRU")


@dataclass
class Slice:
    """A graph input or output and its elements ``[offset, offset + size)`` of x or y."""
    name: str  # the model's name (shown by `info`, sanitized in comments)
    ident: str  # derived identifier
    shape: tuple
    offset: int
    size: int


@dataclass
class Weight:
    ident: str
    source: str  # the model's name for it
    array: np.ndarray  # flattened, in the generated precision

    @property
    def size(self):
        return int(self.array.size)

    @functools.cached_property
    def decimals(self):
        """The values as round-trip decimal texts, computed once and shared by every emitter."""
        return decimal_texts(self.array)


@dataclass(frozen=True)
class PlannedOp:
    """One node of the graph after the passes, as the plan lowered it."""
    op: str  # the ONNX op; for an alias, the op it stands for (Identity, Reshape, ...)
    activation: str = None  # the activation fused into it (Gemm, Conv), or None
    alias: bool = False  # True: no code, its output shares its input's storage
    nodes: tuple = ()  # the model's node names it stands for (several when a pass fused them)
    #: the fused activation's attributes (LeakyRelu's alpha, Clip's bounds, ...), for the kernels
    #: that apply it themselves (the CUDA MLP kernels)
    activation_attrs: dict = field(default_factory=dict, compare=False)
    #: A 2-D or N-D Conv's geometry (:meth:`rosenna.ops.conv.Conv.window`), for the kernels that
    #: compute it otherwise than the loops do (rosenna/emit/cuda/conv_igemm.py); {} for other ops
    window: dict = field(default_factory=dict, compare=False)
    #: ``(inputs, outputs)``, each a tuple of ``(value name, shape)``: the computed values the node
    #: reads (weights left out) and writes, for the comment over each of its loop nests
    #: (rosenna/emit/notes.py)
    values: tuple = field(default=((), ()), compare=False)
    #: How the op computes this node where it has several ways (a DFT: ``direct`` or ``FFT 4x4x4``,
    #: :meth:`rosenna.ops.dft.DFT.form`); "" for the others
    form: str = ""

    @property
    def label(self):
        """``Gemm+Relu``, ``Reshape (alias)``, ``DFT (direct)``: what `info` shows and the plan
        hash records."""
        if self.alias:
            return f"{self.op} (alias)"
        if self.form:
            return f"{self.op} ({self.form})"
        return f"{self.op}+{self.activation}" if self.activation else self.op

    @property
    def name(self):
        """The node's name after the passes (fused names joined by ``+``)."""
        return "+".join(self.nodes)


@dataclass(frozen=True)
class Plan:
    """The planned model, frozen: the strategy stage (rosenna.strategy) and the emitters read it
    and never change it."""
    name: str
    precision: str  # "single" | "double"
    inputs: list  # Slice
    outputs: list  # Slice
    nx: int
    ny: int
    weights: list  # Weight, in first-use order
    scratch: list  # sizes of the per-point scratch buffers t0, t1, ...
    storage: dict  # buffer name (value/weight) -> (kind, ident, offset); kind in x y t w
    body: list  # kernel statements
    ops: list  # PlannedOp per node after the passes, aliases included
    embed: bool
    producer: str = ""
    hash: str = field(default="")
    #: Asked for ``<name>_infer_one`` although the plan runs per point (``generate --infer-one``).
    infer_one: bool = False
    #: Bytes of the host CPU's vectors the host whole-field loops are written for: the strategy
    #: stage's copy of the plan carries the target's (rosenna.strategy.point.vector_bytes).
    host_vector: int = 32
    #: The tuning the plan was built for and the emitters render with (rosenna.strategy.Tuning;
    #: None: the defaults, :attr:`tuned`). Its ``whole_threshold`` decides :attr:`path`.
    tuning: object = field(default=None, compare=False)
    #: ``--precision bf16`` / ``fp16``: the dense layers round their weights and inputs to that type
    #: (rosenna.passes.low_precision); None: the plain float32 or float64 plan.
    low_precision: str = None
    #: The statements of the whole-field form (``<name>_infer_one``) where they differ from
    #: :attr:`body`: a plan that counts out-of-range indices sets a flag in device memory instead
    #: (:func:`rosenna.loopir.flag_faults`); None: :attr:`body`.
    flagged_body: list = field(default=None, compare=False)

    @property
    def field_body(self):
        """The statements the whole-field analyses and emitters read (:attr:`flagged_body`)."""
        return self.body if self.flagged_body is None else self.flagged_body

    @property
    def fault_buffer(self):
        """The scratch buffer ``t<i>`` of the whole-field form's fault flag: its number i, or None
        when the plan reads no index at run time (:data:`rosenna.loopir.FAULT_FLAGS`)."""
        where = self.storage.get(FAULT_FLAGS)
        return int(where[1][1:]) if where and where[0] == "t" else None

    @property
    def whole_threshold(self):
        """Per-point scratch bytes above which the plan runs over the whole field."""
        return self.tuned.whole_threshold

    @property
    def tuned(self):
        """The tuning to render with: :attr:`tuning`, or the defaults."""
        return self.tuning if self.tuning is not None else Tuning()

    @property
    def ctype(self):
        return "double" if self.precision == "double" else "float"

    @property
    def itemsize(self):
        return 8 if self.precision == "double" else 4

    @property
    def parameters(self):
        return sum(w.size for w in self.weights)

    @property
    def scratch_bytes(self):
        return sum(self.scratch) * self.itemsize

    @property
    def path(self):
        """"whole" (``<name>_infer_batch`` runs ``<name>_infer_one`` per sample) or "point"."""
        return "whole" if self.has_infer_one and self.scratch_bytes > self.whole_threshold else "point"

    @property
    def has_infer_one(self):
        """Whether the plan can run one sample over the whole field (``<name>_infer_one``): not
        with an LSTM or GRU, whose time loop is sequential. Loads and stores at run-time offsets
        (gathers, scatters, tree walks) count as reading or writing the whole buffer they index
        (rosenna.parallel), so they run there too."""
        return not any(op.op in SEQUENTIAL_OPS for op in self.ops)

    @property
    def runtime_indexed(self):
        """Whether the plan loads or stores at offsets computed at run time (:func:`rosenna.loopir.runtime_indexed`)."""
        return runtime_indexed(self.body)

    @property
    def infer_one_obstacle(self):
        """Why the plan has no ``<name>_infer_one`` ("" when it has one)."""
        if any(op.op in SEQUENTIAL_OPS for op in self.ops):
            return "its LSTM or GRU runs its time steps in sequence"
        return ""

    @property
    def emits_infer_one(self):
        """Whether the generated files hold ``<name>_infer_one``: for a whole-field plan, whose
        batch runs it, or on request. A per-point MLP without it is a third of the code (the
        kernels, buffers and weights of infer_one are not there)."""
        return self.has_infer_one and (self.path == "whole" or self.infer_one)


_IDENT_BAD = re.compile(r"[^a-z0-9_]+")


def sanitize(text, limit=24):
    """A lowercase C/Fortran-safe fragment of ``text`` (may be empty)."""
    frag = _IDENT_BAD.sub("_", text.lower()).strip("_")
    frag = re.sub(r"_+", "_", frag)
    return frag[:limit].rstrip("_")


def _within_nest_budget(graph, node, nests):
    """Refuse an op whose code took more than the budget's loop nests (statements at the op's top
    level: a loop nest, or one unrolled assignment): generated code grows with ops, not pixels."""
    budget = graph.max_op_nests or limits.MAX_OP_NESTS
    if nests > budget:
        raise ModelError(f"node {node.name!r} ({node.op}): its code takes {nests} loop nests, over the budget of "
                         f"{budget} per op; raise it with --max-op-nests N if the model means it")


def build(graph, name, precision, embed=None, embed_threshold=EMBED_THRESHOLD, infer_one=False, tuning=None,
          low_precision=None):
    """Lay out the graph (after the passes) and lower every node. ``infer_one``: emit
    ``<name>_infer_one`` for a per-point plan too; ``tuning``: see :attr:`Plan.tuning`;
    ``low_precision``: see :attr:`Plan.low_precision` (the graph already rounded)."""
    storage, inputs, outputs = {}, [], []
    offset = 0
    for i, vname in enumerate(graph.inputs):
        shape = graph.shape_of(vname)
        size = int(np.prod(shape, dtype=np.int64))
        inputs.append(Slice(vname, _io_ident("in", i, vname), shape, offset, size))
        storage[vname] = ("x", "x", offset)
        offset += size
    nx = offset

    # Alias classes: every value maps to the root whose storage it shares.
    root = {}
    for node in graph.nodes:
        if node.op == ALIAS:
            root[node.outputs[0]] = root.get(node.inputs[0], node.inputs[0])

    def root_of(vname):
        return root.get(vname, vname)

    producer_of = {out: i for i, node in enumerate(graph.nodes) if node.op != ALIAS for out in node.outputs if out}

    # Graph outputs go straight into y when their root is computed here and no other output holds it.
    copies, y_taken = [], set()
    offset = 0
    for i, vname in enumerate(graph.outputs):
        shape = graph.shape_of(vname)
        size = int(np.prod(shape, dtype=np.int64))
        outputs.append(Slice(vname, _io_ident("out", i, vname), shape, offset, size))
        r = root_of(vname)
        if r in producer_of and r not in y_taken:
            storage[r] = ("y", "y", offset)
            y_taken.add(r)
        else:
            copies.append((r, f"__y{i}", size, vname))
            storage[f"__y{i}"] = ("y", "y", offset)
        offset += size
    ny = offset

    # Scratch by liveness over the lowered nodes.
    last_use = {}
    for i, node in enumerate(graph.nodes):
        for vname in node.inputs:
            if vname:
                last_use[root_of(vname)] = i
    for r, _, _, _ in copies:
        last_use[r] = len(graph.nodes)
    scratch, free, holder = [], [], {}
    for i, node in enumerate(graph.nodes):
        if node.op == ALIAS:
            continue
        for out in node.outputs:
            if not out or out in storage:
                continue
            size = int(np.prod(graph.shape_of(out), dtype=np.int64))
            pick = min(free, key=lambda b: (scratch[b] < size, abs(scratch[b] - size)), default=None)
            if pick is None:
                pick = len(scratch)
                scratch.append(size)
            else:
                free.remove(pick)
                scratch[pick] = max(scratch[pick], size)
            storage[out] = ("t", f"t{pick}", 0)
            holder[out] = pick
        for out, pick in list(holder.items()):
            if last_use.get(out, -1) <= i:  # free after the node, so no output shares an input's buffer
                free.append(pick)
                del holder[out]

    # Lower.
    b = Builder(gemm_columns=(tuning if tuning is not None else Tuning()).gemm_columns)
    op_list = []
    for node in graph.nodes:
        label = comment_text(node.name)
        sources = tuple(node.sources) or (node.name,)
        if node.op == ALIAS:
            op_list.append(PlannedOp(node.attrs["of"], alias=True, nodes=sources))
            continue
        activation, attrs = node.attrs.get("_activation") or (None, {})
        window = getattr(ops.get(node.op), "window", None)
        form = getattr(ops.get(node.op), "form", None)
        planned = PlannedOp(node.op, activation, nodes=sources, activation_attrs=dict(attrs),
                            window=window(node, graph) if window else {}, form=form(node, graph) if form else "",
                            values=tuple(tuple((v, tuple(graph.shape_of(v))) for v in names if v and v not in graph.weights)
                                         for names in (node.inputs, node.outputs)))
        op_list.append(planned)
        b.emit(Comment(f"{planned.label}: {label}", planned))
        first = len(b.stmts)
        ops.get(node.op).lower(node, graph, b)
        _within_nest_budget(graph, node, len(b.stmts) - first)
    for r, ybuf, size, vname in copies:
        b.emit(Comment(f"output {comment_text(vname)}: a copy of {comment_text(r)}"))
        copy_lowering(b, r, ybuf, size)
    flagged = None
    if counts_faults(b.stmts):  # the count of out-of-range indices starts at 0 (loopir.FAULT)
        flagged, scatters = flag_faults(b.stmts)  # the whole-field form's flags, buffers of their own
        storage[FAULT_FLAGS] = ("t", f"t{len(scratch)}", 0)
        scratch.append(2)
        if scatters:
            storage[OP_FLAGS] = ("t", f"t{len(scratch)}", 0)
            scratch.append(2 * scatters)
        b.stmts.insert(0, Assign(Var(FAULT), Num(0.0)))

    # Resolve every buffer a statement names; weights in first-use order.
    weights, wident = [], {}
    dtype = np.float64 if precision == "double" else np.float32
    for stmt in walk(b.stmts):
        if not isinstance(stmt, Assign):
            continue
        for expr in (stmt.target, stmt.expr):
            for sub in walk_expr(expr):
                if not isinstance(sub, Ref):
                    continue
                buf = sub.buf
                if buf in graph.weights and buf not in wident:
                    ident = f"w{len(weights)}" + (f"_{sanitize(buf)}" if sanitize(buf) else "")
                    wident[buf] = ident
                    weights.append(Weight(ident, buf, np.ascontiguousarray(graph.weights[buf], dtype=dtype).reshape(-1)))
                    storage[buf] = ("w", ident, 0)
                elif buf not in storage:
                    storage[buf] = storage[root_of(buf)]

    params = sum(w.size for w in weights)
    # A model without weights has nothing to load: it is embedded whatever was asked.
    embedded = (params <= embed_threshold if embed is None else bool(embed)) or not weights
    plan = Plan(name, precision, inputs, outputs, nx, ny, weights, scratch, storage, b.stmts, op_list,
                embed=embedded, producer=graph.producer, infer_one=bool(infer_one), tuning=tuning,
                low_precision=low_precision, flagged_body=flagged)
    return dataclasses.replace(plan, hash=plan_hash(plan))


def _io_ident(kind, index, vname):
    frag = sanitize(vname, 20)
    return f"{kind}{index}" + (f"_{frag}" if frag else "")


def plan_hash(plan):
    """What generated code and its weights file must agree on: 32 hex digits."""
    record = {
        "abi": abi.RWT_VERSION,
        "precision": plan.precision,
        "nx": plan.nx,
        "ny": plan.ny,
        "weights": [(w.ident, w.size) for w in plan.weights],
        "ops": [op.label for op in plan.ops],
    }
    if plan.low_precision:  # absent otherwise: the float32 and float64 plans keep their hashes
        record["low_precision"] = plan.low_precision
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:32]


def io_keys(plan, side, limit):
    """``[(slice, key)]`` for the inputs (``side`` "x") or outputs ("y"): the key names the slice in
    the header's ``<NAME>_X_<KEY>_OFFSET`` / ``_SIZE`` macros and the Fortran module's constants.

    The key is the sanitized value name, at most ``limit`` characters. When two names of one side
    sanitize to the same key (``a.b`` and ``a_b``, ``A`` and ``a`` under Fortran's case folding) or
    one sanitizes to nothing, every key of that side is index-prefixed (``in0_a_b``, ``in1_a_b``),
    so a slice's key never depends on which other name happens to collide with it.
    """
    slices, kind = (plan.inputs, "in") if side == "x" else (plan.outputs, "out")
    keys = [sanitize(s.name, limit) for s in slices]
    if len(set(keys)) < len(keys) or not all(keys):
        keys = []
        for i, s in enumerate(slices):
            prefix = f"{kind}{i}"
            frag = sanitize(s.name, max(0, limit - len(prefix) - 1))
            keys.append(f"{prefix}_{frag}" if frag else prefix)
    return list(zip(slices, keys))
