"""The loop transformations of the host form of ``<name>_infer_one`` (applied once by
:mod:`rosenna.strategy.field.host`, rendered by :mod:`rosenna.emit.host_field`): unroll-and-jam
of output channels or rows (:func:`jam`), the tap loops unrolled (:func:`unroll_taps`), the SIMD loops around the innermost variable
(:func:`simd_loops`: one vector each, the last one overlapping, none down a column) and a fused
activation moved to a second SIMD loop (:func:`split_activation`). None reorders a sum: each
output's terms keep their order, so the results are the scalar loops'. The CUDA whole-field
phases reuse :func:`jam` with its defaults (:meth:`rosenna.strategy.Schedule.jammed`).
"""

from dataclasses import dataclass, replace

from rosenna.loopir import Assign, Bin, Fn, Idx, Loop, Num, Ref, Select, Var, walk, walk_expr

# How far the loops are jammed and unrolled is the tuning's: cuda_jam and host_jam (output channels
# sharing one pass over the inputs), jam_chains (independent sums a SIMD loop should carry),
# host_unroll and host_unroll_whole (statements of unrolled tap loops).
#: Fact of GCC, a correctness margin and no speed choice: iterations apart over which GCC's
#: predictive commoning relates memory references (its MAX_DISTANCE in tree-predcom.cc: 8 where the target has 16 or more registers, as x86-64 has):
#: see :func:`stores_meet`.
PCOM_DISTANCE = 8


@dataclass(frozen=True)
class Inner:
    """One loop over the innermost variable of a parallel region: ``extent`` iterations of
    ``body`` (which already holds any offset of the variable), SIMD or not, ``simdlen`` lanes
    asked for or 0 (the compiler's choice); with ``vectors``, inside a serial loop of that many
    iterations over ``vector_var`` (the body's index then steps by ``extent`` with it)."""
    extent: int
    body: list
    simd: bool = True
    simdlen: int = 0
    vectors: int = 0
    vector_var: str = ""


def simd_loops(plan, chain, body):
    """The loops a parallel region's innermost variable runs, as :class:`Inner`:

    - the statements SIMD where a run-time buffer's index steps by one element with the variable
      (a loop down a column, e.g. a conv's left border, would be gathers and scatters, which cost
      more than scalar code), in vectors of ``plan.host_vector`` bytes
      (the strategy's choice for the target: rosenna.strategy.point.vector_bytes);
    - one vector per SIMD loop, a serial loop over the vectors around it: GCC peels iterations
      off a SIMD loop to align its stores when it knows them misaligned (a conv interior's row
      starts one element in), up to 15 scalar iterations before each row's 3 vectors (dwsep 1.5x
      slower), but not off a loop of one vector's iterations;
    - where the extent is not a multiple of the vector (a 3x3 conv's interior, 62 wide), one more
      vector ending at the extent, overlapping the last (it stores the same values again: allowed
      where the statements read nothing they store), else the remainder as its own SIMD loop;
    - a fused activation applied in place in a second set of loops (:func:`split_activation`)."""
    var, extent = chain[-1].var, chain[-1].extent
    lanes = plan.host_vector // plan.itemsize
    simdlen = lanes if plan.host_vector > 32 else 0
    if not contiguous(plan, var, body):
        return [Inner(extent, body, simd=False)]
    body, after = split_activation(body)
    stored = {s.target.buf for s in walk(body) if isinstance(s, Assign) and isinstance(s.target, Ref)}
    overlap = not any(ref.buf in stored for ref in _loads(body))
    return _vectors(body, var, extent, lanes, simdlen, overlap) + _vectors(after, var, extent, lanes, simdlen, False)


def contiguous(plan, var, body):
    """Whether a SIMD loop over ``var`` loads or stores contiguous vectors: some run-time
    buffer's index steps by one element with it, or none depends on it."""
    refs = [ref for stmt in walk(body) if isinstance(stmt, Assign)
            for ref in (*walk_expr(stmt.target), *walk_expr(stmt.expr)) if isinstance(ref, Ref)]
    steps = {dict(ref.idx.terms).get(var, 0) for ref in refs if plan.storage[ref.buf][0] != "w"}
    return 1 in steps or not steps - {0}


def _vectors(body, var, extent, lanes, simdlen, overlap):
    """:func:`simd_loops`' loops of one statement list."""
    if not body:
        return []
    whole, left = divmod(extent, lanes)
    if not whole:
        return [Inner(extent, body, simdlen=simdlen)]
    step = f"{var}_v"
    loops = [Inner(lanes, _copy(body, var, Idx.of(var) + Idx.of(step) * lanes), simdlen=simdlen, vectors=whole,
                   vector_var=step) if whole > 1 else Inner(lanes, body, simdlen=simdlen)]
    if left:
        start, count = (extent - lanes, lanes) if overlap else (whole * lanes, left)
        loops.append(Inner(count, _copy(body, var, Idx.of(var) + start), simdlen=simdlen))
    return loops


def _subst(e, var, value, suffix):
    """``e`` with loop variable ``var`` replaced by the affine index ``value`` and every scalar
    renamed with ``suffix``."""
    if isinstance(e, Ref):
        return Ref(e.buf, e.idx.substitute(var, value), None if e.at is None else _subst(e.at, var, value, suffix))
    if isinstance(e, Var):
        return Var(e.name + suffix)
    if isinstance(e, Bin):
        return Bin(e.op, _subst(e.a, var, value, suffix), _subst(e.b, var, value, suffix))
    if isinstance(e, Fn):
        return Fn(e.name, tuple(_subst(a, var, value, suffix) for a in e.args))
    if isinstance(e, Select):
        return replace(e, lhs=_subst(e.lhs, var, value, suffix), rhs=_subst(e.rhs, var, value, suffix),
                       a=_subst(e.a, var, value, suffix), b=_subst(e.b, var, value, suffix))
    return e


def _copy(stmts, var, value, suffix=""):
    """The statements with ``var`` := ``value`` (scalars renamed with ``suffix``)."""
    out = []
    for stmt in stmts:
        if isinstance(stmt, Loop):
            out.append(Loop(stmt.var, stmt.extent, _copy(stmt.body, var, value, suffix)))
        elif isinstance(stmt, Assign):
            out.append(Assign(_subst(stmt.target, var, value, suffix), _subst(stmt.expr, var, value, suffix),
                              stmt.accumulate))
        else:
            out.append(stmt)
    return out


def _jammed(stmts, copies):
    """Interleave ``copies`` (lists of statements of one shape): each assignment once per copy, each
    loop once with the copies of its body interleaved inside."""
    out = []
    for parts in zip(*copies):
        if isinstance(parts[0], Loop):
            out.append(Loop(parts[0].var, parts[0].extent, _jammed(parts[0].body, [p.body for p in parts])))
        else:
            out.extend(parts)
    return out


def _loads(body):
    """Buffers and indices the body loads (an accumulating store counts as a load)."""
    refs = []
    for stmt in walk(body):
        if isinstance(stmt, Assign):
            refs += [e for e in walk_expr(stmt.expr) if isinstance(e, Ref)]
            if stmt.accumulate and isinstance(stmt.target, Ref):
                refs.append(stmt.target)
    return refs


def jam(plan, chain, body, width=None, uneven=False):
    """Unroll-and-jam a parallel region's outer loops so that its SIMD loop carries several
    independent sums (one accumulator's chain of FMAs is bound by their latency). Returns the
    region as a list of ``(chain, body)`` pieces (a remainder of a loop that does not divide is
    its own piece).

    First the outermost loop whose variable indexes no run-time buffer among the loads (a conv's
    output channel): up to ``width`` (by default the tuning's ``cuda_jam``) of its iterations at once, so every input vector loaded feeds
    that many FMAs: a divisor of its extent, or with ``uneven`` the extent split into as few
    passes of at most ``width`` as it takes, balanced (24 -> 12 + 12, 37 -> 10 x 3 + a remainder
    piece of 7). Then, where that gives fewer than the tuning's ``jam_chains`` sums
    and the body has a reduction loop (a one-channel output, a depthwise conv), the loop around
    the SIMD loop (the rows), its remainder apart. Each output's sum keeps its terms and their
    order: the results do not change by a bit."""
    if len(chain) < 2:
        return [(chain, body)]
    width = plan.tuned.cuda_jam if width is None else width
    stored = {s.target.buf for s in walk(body) if isinstance(s, Assign) and isinstance(s.target, Ref)}
    loads = _loads(body)
    if any(ref.buf in stored for ref in loads):
        return [(chain, body)]
    runtime = [ref for ref in loads if plan.storage[ref.buf][0] != "w"]
    pieces = [(chain, body)]
    for pos, loop in enumerate(chain[:-1]):
        if any(v == loop.var for ref in runtime for v, _ in ref.idx.terms):
            continue
        factor = max(d for d in range(1, width + 1) if loop.extent % d == 0)
        if uneven:
            factor = -(-loop.extent // -(-loop.extent // width))
        jammed = _jam_loop(chain, body, pos, factor, jam_left=uneven) if factor > 1 else []
        if jammed and not (uneven and any(stores_meet(*piece) for piece in jammed)):
            pieces = jammed
            sums = [factor, loop.extent % factor or 1] if uneven else [factor]
            break
    else:
        sums = [1]
    out = []
    for (chain, body), n in zip(pieces, sums + sums[-1:]):
        rows = plan.tuned.jam_chains // n
        if rows < 2 or len(chain) < 2 or not any(isinstance(s, Loop) for s in body) or chain[-2].extent < rows:
            out.append((chain, body))
            continue
        jammed = _jam_loop(chain, body, len(chain) - 2, rows)
        out += [(chain, body)] if uneven and any(stores_meet(*piece) for piece in jammed) else jammed
    return out


def stores_meet(chain, body):
    """Whether two stores of a piece whose one loop the threads share would write one element
    up to ``PCOM_DISTANCE`` iterations apart, were that loop longer (the loop a thread runs is
    its chunk, of a length the compiler does not know): a depthwise conv with a
    channel multiplier, its groups jammed, stores channel ``g*m + k`` for ``g`` = 0, 2, 4, 6 in
    the iteration over ``k``. GCC 12's predictive commoning (-O3) then moves stores between
    iterations, and with the loop split between threads an element can keep the value it had
    before the call (seen: 1 run in 15 wrong on 2 threads; none in 100 with
    -fno-predictive-commoning, or with such pieces left unjammed)."""
    if len(chain) != 1:  # the threads share the outer loops; GCC's pass changes innermost ones
        return False
    outer = {chain[0].var}
    targets = [s.target for s in walk(body) if isinstance(s, Assign) and isinstance(s.target, Ref)]
    for i, a in enumerate(targets):
        for b in targets[i + 1:]:
            gap = a.idx - b.idx
            if a.buf != b.buf or gap.terms or not gap.const:
                continue
            for var, coef in a.idx.terms:
                if var in outer and gap.const % coef == 0 and abs(gap.const // coef) <= PCOM_DISTANCE:
                    return True
    return False


def _jam_loop(chain, body, pos, factor, jam_left=False):
    """``chain[pos]`` run ``factor`` iterations at a time (scalars of copy j get the suffix _j);
    the iterations left over (extent not a multiple) as a second piece: a loop over them, or with
    ``jam_left`` all of them at once."""
    loop = chain[pos]
    outer, left = divmod(loop.extent, factor)
    base = Idx.of(loop.var) * factor if outer > 1 else Idx()
    copies = [_copy(body, loop.var, base + j, f"_{j}") for j in range(factor)]
    pieces = [(_replace(chain, pos, outer), _jammed(body, copies))]
    if left and jam_left:
        copies = [_copy(body, loop.var, Idx.of(outer * factor + j), f"_{j}") for j in range(left)]
        pieces.append((_replace(chain, pos, 1), _jammed(body, copies)))
    elif left:
        start = Idx.of(loop.var) + outer * factor if left > 1 else Idx.of(outer * factor)
        pieces.append((_replace(chain, pos, left), _copy(body, loop.var, start)))
    return pieces


def _replace(chain, pos, extent):
    """``chain`` with loop ``pos`` of a new extent (dropped when 1)."""
    keep = [Loop(chain[pos].var, extent, [])] if extent > 1 else []
    return list(chain[:pos]) + keep + list(chain[pos + 1:])


def unroll_taps(stmts, tuning):
    """Inside a SIMD loop: each loop nest keeps only its outermost loop, the loops below it
    unrolled (GCC vectorises an outer loop around one inner loop, not around a nest), when that
    makes at most the tuning's ``host_unroll`` statements; a nest of at most ``host_unroll_whole``
    is unrolled whole."""
    out = []
    for stmt in stmts:
        if not isinstance(stmt, Loop):
            out.append(stmt)
            continue
        inner = _flatten(stmt.body, tuning.host_unroll)
        if inner is None or len(inner) > tuning.host_unroll:
            out.append(Loop(stmt.var, stmt.extent, unroll_taps(stmt.body, tuning)))
        elif len(inner) * stmt.extent <= tuning.host_unroll_whole:
            out.extend(s for t in range(stmt.extent) for s in _copy(inner, stmt.var, Idx((), t)))
        else:
            out.append(Loop(stmt.var, stmt.extent, inner))
    return out


def _flatten(stmts, limit):
    """The statements with every loop unrolled, or None when that exceeds ``limit``."""
    out = []
    for stmt in stmts:
        if isinstance(stmt, Loop):
            inner = _flatten(stmt.body, limit)
            if inner is None or len(out) + len(inner) * stmt.extent > limit:
                return None
            for t in range(stmt.extent):
                out.extend(_copy(inner, stmt.var, Idx((), t)))
        else:
            out.append(stmt)
    return out


def _arith(e):
    return all(isinstance(sub, (Num, Var, Ref, Bin)) for sub in walk_expr(e))


def _argument(e):
    """The one arithmetic expression over scalars that a store's value applies functions to (the
    activation's argument, e.g. ``acc + b`` in ``relu(acc + b)``), or None if there are several."""
    found = set()

    def visit(x):
        if _arith(x):
            if any(isinstance(sub, Var) for sub in walk_expr(x)):
                found.add(x)
            return
        for part in ((x.a, x.b) if isinstance(x, Bin) else x.args if isinstance(x, Fn) else
                     (x.lhs, x.rhs, x.a, x.b) if isinstance(x, Select) else ()):
            visit(part)

    visit(e)
    return found.pop() if len(found) == 1 else None


def _put(e, old, new):
    if e == old:
        return new
    if isinstance(e, Bin):
        return Bin(e.op, _put(e.a, old, new), _put(e.b, old, new))
    if isinstance(e, Fn):
        return Fn(e.name, tuple(_put(a, old, new) for a in e.args))
    if isinstance(e, Select):
        return replace(e, lhs=_put(e.lhs, old, new), rhs=_put(e.rhs, old, new), a=_put(e.a, old, new),
                       b=_put(e.b, old, new))
    return e


def split_activation(body):
    """A SIMD body with a reduction loop whose stores apply a function or a select (a fused
    activation) -> ``(body, activations)``: the stores write the activation's argument, and a
    second SIMD loop applies the activation in place. GCC if-converts (and so vectorises) only
    innermost loops: with the select beside the reduction loop the whole SIMD loop stayed scalar.
    The values are the same: the argument is rounded to the working type either way."""
    if not any(isinstance(s, Loop) for s in body):
        return body, []
    out, after = [], []
    for stmt in body:
        arg = None
        if isinstance(stmt, Assign) and isinstance(stmt.target, Ref) and not stmt.accumulate and not _arith(stmt.expr):
            arg = _argument(stmt.expr)
        if arg is None:
            out.append(stmt)
            continue
        out.append(Assign(stmt.target, arg))
        after.append(Assign(stmt.target, _put(stmt.expr, arg, stmt.target)))
    return out, after
