"""Pointwise epilogues of the host batch: the chain of elementwise nodes after a Gemm, MatMul or
Conv folded into the producer's store, as a fused activation is.

The plan lowers each node to its own loops, so GELU's tanh form (the Pow/Mul/Add/Tanh nodes
PyTorch's ``approximate='tanh'`` exports), Softsign (Abs/Add/Div), x * sigmoid(x), a scaled tanh
or a clamp is eight, three or two passes over the producer's output, each through a scratch
buffer. :func:`fuse` finds each such chain and gives the host batch one store instead:
``W[i] = g(f(E))`` where ``V[i] = E`` was the producer's store and ``f``, ``g`` the nodes' element
formulas, composed as :mod:`rosenna.strategy.mlp.analysis` composes them for the CUDA kernels.
Each node's arithmetic is kept as it was (the same operations in the same order, in the same
precision), so the results are the unfused loops', bit for bit.

A chain is a run of op segments right after the producer's, each one loop nest whose one store
writes element ``idx`` of its output from element ``idx`` of the producer's output or of earlier
nodes of the chain, and scalar constants (no weight array, no other value). It is cut where a
value inside it is read after it (a second consumer outside the chain, an output of the model: a
value that must stay stored). The producer's store must be its output's only store (no
accumulation into memory, no read of it back). Where the chain's last output shares storage with
something the producer reads (the plan reuses a dead input's buffer), the fused store goes to the
producer's own buffer and one copy loop moves it: one pass instead of the chain's.
"""

import dataclasses
import math

from rosenna.loopir import Assign, Bin, Comment, Fn, Idx, Loop, Ref, Select, Var, element_of, walk, walk_expr
from rosenna.quoting import comment_text

#: The ops whose store takes an epilogue (the ops with a fused activation, and MatMul).
PRODUCERS = ("Gemm", "MatMul", "Conv", "ConvTranspose")


def _segments(body):
    """``[[comment or None, statements]]``: the body cut at its op comments."""
    out = []
    for stmt in body:
        if isinstance(stmt, Comment):
            out.append([stmt, []])
        elif out:
            out[-1][1].append(stmt)
        else:
            out.append([None, [stmt]])
    return out


def _refs(expr):
    return [e for e in walk_expr(expr) if isinstance(e, Ref)]


def _reads(stmt):
    """The buffers one assignment reads (its target too when it accumulates; an indirect index)."""
    refs = _refs(stmt.expr) + [e for e in walk_expr(stmt.target) if isinstance(e, Ref) and e is not stmt.target]
    if stmt.accumulate and isinstance(stmt.target, Ref):
        refs.append(stmt.target)
    return [ref.buf for ref in refs]


def _pointwise(stmts, size, env):
    """``(output value, its expression of env's values)`` when ``stmts`` (one op's loops) store
    each of ``size`` elements from the same element of ``env``'s values and constants."""
    if len(stmts) != 1 or not isinstance(stmts[0], Loop):
        return None
    nest, extent = stmts[0], 1
    while True:
        extent *= nest.extent
        if len(nest.body) != 1:
            return None
        if not isinstance(nest.body[0], Loop):
            break
        nest = nest.body[0]
    assign = nest.body[0]
    if extent != size or not isinstance(assign, Assign) or assign.accumulate or not isinstance(assign.target, Ref) \
            or assign.target.at is not None or assign.target.buf in env:
        return None
    expr = element_of(assign.expr, env, assign.target.idx)
    return (assign.target.buf, expr) if expr is not None else None


def _put(stmts, value, expr_of, to):
    """The producer's statements with each store ``value[i] = E`` made ``to[i] = expr_of(E)``."""
    out = []
    for stmt in stmts:
        if isinstance(stmt, Loop):
            out.append(Loop(stmt.var, stmt.extent, _put(stmt.body, value, expr_of, to)))
        elif isinstance(stmt, Assign) and isinstance(stmt.target, Ref) and stmt.target.buf == value:
            out.append(Assign(Ref(to, stmt.target.idx), expr_of(stmt.expr)))
        else:
            out.append(stmt)
    return out


def _replace_v(expr, by):
    """``expr`` (of ``Var("v")``) with ``v`` replaced by the expression ``by``."""
    if isinstance(expr, Var):
        return by if expr.name == "v" else expr
    if isinstance(expr, Bin):
        return Bin(expr.op, _replace_v(expr.a, by), _replace_v(expr.b, by))
    if isinstance(expr, Fn):
        return Fn(expr.name, tuple(_replace_v(arg, by) for arg in expr.args))
    if isinstance(expr, Select):
        return Select(*(_replace_v(getattr(expr, k), by) for k in ("lhs", "rhs", "a", "b")), expr.cmp)
    return expr


def _dead(plan, names, last, later):
    """Whether no statement of ``later`` reads the storage of ``names`` before storing into it
    (the storage of ``last``, the chain's output, holds that value after the chain)."""
    pending = {plan.storage[name] for name in names} - {plan.storage[last]}
    for stmt in walk(later):
        if not isinstance(stmt, Assign):
            continue
        if any(plan.storage.get(buf) in pending for buf in _reads(stmt)):
            return False
        if isinstance(stmt.target, Ref):
            pending.discard(plan.storage.get(stmt.target.buf))
    return True


def _producer(plan, comment, stmts):
    """``(output value, its size)`` when the segment is a producer whose output is stored once
    per element, never read back, and not the model's output; else None."""
    op = comment.op if comment is not None else None
    if op is None or op.op not in PRODUCERS or len(op.values[1]) != 1:
        return None
    value, shape = op.values[1][0]
    stores = [s for s in walk(stmts) if isinstance(s, Assign) and isinstance(s.target, Ref)]
    if not stores or any(s.target.buf != value or s.accumulate or s.target.at is not None for s in stores):
        return None
    if any(value in _reads(s) for s in walk(stmts) if isinstance(s, Assign)) or plan.storage[value][0] != "t":
        return None
    return value, math.prod(shape)


@dataclasses.dataclass(frozen=True)
class Fused:
    """One epilogue folded into its producer: the nodes, their ops, and whether a copy loop moves
    the result (the chain's output shares storage with what the producer reads)."""
    nodes: tuple
    ops: tuple
    copy: bool


def fuse(plan):
    """``(statements, fused)``: the plan's statements with every pointwise chain after a
    producer folded into its store (a tuple of :class:`Fused`, in order)."""
    segments, out, fused, i = _segments(plan.body), [], [], 0
    while i < len(segments):
        comment, stmts = segments[i]
        found = _producer(plan, comment, stmts)
        chain, env = [], {}
        if found:
            value, size = found
            env = {value: Var("v")}
            for later_comment, later in segments[i + 1:]:
                op = later_comment.op if later_comment is not None else None
                if op is None or op.alias or op.op in PRODUCERS:
                    break
                step = _pointwise(later, size, env)
                if step is None:
                    break
                env[step[0]] = step[1]
                chain.append((later_comment, step[0]))
        while chain:  # the longest run whose values inside are read nowhere after it
            inside = [value] + [name for _, name in chain[:-1]]
            if _dead(plan, inside, chain[-1][1], [s for _, seg in segments[i + 1 + len(chain):] for s in seg]):
                break
            chain.pop()
        if not chain:
            out += ([comment] if comment is not None else []) + stmts
            i += 1
            continue
        last = chain[-1][1]
        expr = env[last]
        reads = {plan.storage.get(buf) for s in walk(stmts) if isinstance(s, Assign) for buf in _reads(s)}
        copy = plan.storage[last] in reads
        ops = tuple(c.op for c, _ in chain)
        op = dataclasses.replace(comment.op, activation="+".join(([comment.op.activation] if comment.op.activation
                                                                   else []) + [o.op for o in ops]),
                                 nodes=comment.op.nodes + tuple(n for o in ops for n in o.nodes),
                                 values=(comment.op.values[0], ops[-1].values[1]))
        out.append(Comment(f"{op.label}: {comment_text(op.name)}", op))
        out += _put(stmts, value, lambda e: _replace_v(expr, e), value if copy else last)
        if copy:
            var = Idx.of("i0")
            out.append(Loop("i0", size, [Assign(Ref(last, var), Ref(value, var))]))
        fused.append(Fused(op.nodes, tuple(o.op for o in ops), copy))
        i += 1 + len(chain)
    return tuple(out), tuple(fused)
