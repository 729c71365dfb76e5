"""The host branch of ``<name>_infer_one`` (no offload device): the whole-field loops on the host's
threads and SIMD lanes, C and Fortran from one table.

One ``omp parallel`` region holds the whole call, so the thread team is forked once per call, not
once per loop nest (a U-Net has about 90 nests). Inside it each region of :mod:`rosenna.parallel`
is a worksharing loop: the outer loops of its nest collapsed over the threads (``omp for``), the
innermost output loop (an op's last spatial axis, or its channels where the spatial position is
fixed) an ``omp simd`` loop whose iteration computes one output element: its accumulator lives in
a vector register over the whole kernel window and the channels, and every load of the window is
a contiguous vector. The ops' lowering already splits each conv and pool into an interior and its
borders (:mod:`rosenna.ops.conv`), so the interior's SIMD loop has no bounds test. Before
rendering, each parallel region is unrolled and jammed over its output channels (:func:`jam`), its
tap loops unrolled below the channel loop (:func:`unroll_taps`), and a fused activation moved to a
second SIMD loop (:func:`split_activation`); no sum is reordered. A serial
region is an ``omp single``. Regions that :func:`rosenna.parallel.launch_groups` puts in one launch
(they touch disjoint elements, e.g. the border pieces of one conv) share one barrier: every
worksharing loop but the group's last is ``nowait``.

Nested parallelism: called inside the solver's own active parallel region, the routine's
``omp parallel`` is a nested one, which OpenMP runs with a team of one thread unless the caller
raised ``max-active-levels`` (``OMP_MAX_ACTIVE_LEVELS``, ``omp_set_max_active_levels``): so a
solver thread may call it from ``omp single`` or ``omp master`` (one call at a time: the
intermediate buffers are shared) and the loops run there with their SIMD lanes, without
oversubscribing the cores. No orphaned worksharing construct is used, so such a call cannot bind
to the solver's team and wait for threads that never arrive.
"""

from dataclasses import dataclass, replace

from rosenna.emit.render import used_loop_vars, used_scalars
from rosenna.loopir import Assign, Bin, Fn, Idx, Loop, Num, Ref, Select, Var, walk, walk_expr
from rosenna.parallel import launch_groups

#: C's vectorisable exp and tanh (rosenna_host_math.h, inlined and branch-free): libm's are scalar
#: calls, which keep GCC from vectorising an ``omp simd`` loop that holds one (a fused Tanh).
HOST_MATH = {"single": {"exp": "rosenna_expf", "tanh": "rosenna_tanhf"},
             "double": {"exp": "rosenna_exp", "tanh": "rosenna_tanh"}}

#: At most this many output channels (copies of a region's body) share one pass over the inputs,
#: by default (the CUDA whole-field phases, rosenna/emit/cuda/whole_field.py, jam with this width).
JAM = 8
#: The host's width: sums a SIMD loop holds in vector registers at once, each input vector loaded
#: once per block of output channels. 12 accumulators and the input and weight vectors fit AVX2's
#: 16 registers (AVX-512 has 32): a 24-channel 1x1 conv is two passes of 12, 37 channels four of 10
#: and a remainder piece of 7.
HOST_JAM = 12
#: Independent sums a SIMD loop should carry (the FMA latency times the FMA units, in vectors).
CHAINS = 4
#: Tap loops inside a SIMD loop are unrolled below their outermost loop up to this many statements.
UNROLL = 128
#: Iterations apart over which GCC's predictive commoning relates memory references (its
#: MAX_DISTANCE, 8 on x86-64): see :func:`_stores_meet`.
PCOM_DISTANCE = 8
#: A nest of tap loops of at most this many statements is unrolled whole: a depthwise 3x3 conv
#: with 4 rows jammed (36 statements) then loads each input vector once for the rows that share
#: it, and its 9 weights stay in registers.
UNROLL_WHOLE = 48

#: How each language writes the constructs; ``{nowait}`` is the clause or "", ``{private}`` the
#: private clause or "".
TABLE = {
    "c": {
        "team_open": ["#pragma omp parallel", "{"],
        "team_close": ["}"],
        "for": "#pragma omp for{collapse}{nowait}",
        "for_simd": "#pragma omp for simd{nowait}",
        "for_end": None,
        "for_simd_end": None,
        "simd": "#pragma omp simd{simdlen}",
        "single": "#pragma omp single{nowait}",
        "single_end": None,
        "block": ("{", "}"),
        "nowait": " nowait",
        "private": None,
        "scalar": "{t} {names};",
    },
    "fortran": {
        "team_open": ["!$omp parallel{private}"],
        "team_close": ["!$omp end parallel"],
        "for": "!$omp do{collapse}",
        "for_simd": "!$omp do simd{private}",
        "for_end": "!$omp end do{nowait}",
        "for_simd_end": "!$omp end do simd{nowait}",
        "simd": "!$omp simd{simdlen}{private}",
        "single": "!$omp single",
        "single_end": "!$omp end single{nowait}",
        "block": None,
        "nowait": " nowait",
        "private": " private({names})",
        "scalar": None,
    },
}


def vector_bytes(profile):
    """Bytes of the vectors the host loops are written for, from the toolchain profile's CPU
    target: 64 where it has AVX-512 (32 registers of 64 bytes: the SIMD loops then say
    ``simdlen``, since GCC's tuning for those CPUs otherwise picks 256-bit vectors, half the FMAs
    per instruction: dwsep's 1x1 convs 1.6x slower), else 32 (AVX2; the compiler's own width)."""
    import archspec.cpu

    target = archspec.cpu.TARGETS.get(getattr(profile, "target", "") or "")
    return 64 if target is not None and "avx512f" in target.features else 32


def _private(table, names):
    return table["private"].format(names=", ".join(names)) if table["private"] and names else ""


def host_regions(plan):
    """The regions of the host form, in order: ``(kind, chain, body, notes, nowait)`` with each
    parallel region's loops transformed (:func:`jam`, :func:`unroll_taps`), its body the list of
    :func:`simd_loops` around the innermost loop; computed once per plan."""
    cached = plan.__dict__.get("_host_regions")
    if cached is not None:
        return cached
    out = []
    launches = launch_groups(plan)
    for j, launch in enumerate(launches):
        for k, member in enumerate(launch.members):
            # a group's last region ends with a barrier; the team's own closing barrier ends the last
            nowait = k < len(launch.members) - 1 or j == len(launches) - 1
            chain, body = member.chain, member.body
            if member.kind != "parallel":
                out.append((member.kind, chain, body, member.notes, nowait))
                continue
            pieces = jam(plan, chain, body, HOST_JAM, uneven=True)
            for i, (chain, body) in enumerate(pieces):  # the pieces store disjoint elements
                body = unroll_taps(body)
                loops = (simd_loops(plan, chain, body) if len(chain) > 1 else
                         [Inner(chain[0].extent, body, simd=_contiguous(plan, chain[0].var, body))])
                out.append(("parallel", chain, loops, member.notes if i == 0 else [],
                            nowait or i < len(pieces) - 1))
    plan.__dict__["_host_regions"] = out
    return out


def host_names(plan):
    """The scalars and loop variables the host form uses (Fortran declares them)."""
    scalars, loops = set(), set()
    for kind, chain, body, _, _ in host_regions(plan):
        if kind == "parallel":
            loops.update(inner.vector_var for inner in body if inner.vectors)
            body = [s for inner in body for s in inner.body]
        scalars.update(used_scalars(body))
        loops.update(used_loop_vars(body))
        loops.update(loop.var for loop in chain)
    return sorted(scalars), sorted(loops)


def host_lines(plan, lang, renderer, depth):
    """The host branch's statements of ``<name>_infer_one``, as lines indented to ``depth``."""
    table = TABLE[lang.name]
    t = plan.ctype
    pad = lang.indent * depth
    team = _private(table, [name for names in host_names(plan) for name in names])
    lines = [(pad if lang.indent_directives else "") + table["team_open"][0].format(private=team)]
    lines += [pad + text for text in table["team_open"][1:]]
    inner = depth + (1 if table["block"] else 0)
    for kind, chain, body, notes, nowait in host_regions(plan):
        for note in notes:
            lines.append(lang.indent * inner + lang.comment.format(text=note))
        nowait = table["nowait"] if nowait else ""
        if kind == "parallel":
            lines += _parallel(chain, body, lang, table, renderer, inner, nowait, t)
        else:
            lines += _serial(body, lang, table, renderer, inner, nowait, t)
    lines += [pad + text for text in table["team_close"]]
    return lines


def _directive(lang, depth, text):
    return (lang.indent * depth if lang.indent_directives else "") + text


def _declare(table, level, lang, t, scalars):
    if table["scalar"] and scalars:
        return [lang.indent * level + table["scalar"].format(t=t, names=", ".join(scalars))]
    return []


def _parallel(chain, loops, lang, table, renderer, depth, nowait, t):
    """A parallel region: its outer loops shared by the threads, its innermost loop the SIMD loops
    of :func:`simd_loops` (one alone for a region of one loop: ``omp for simd``)."""
    body = [s for inner in loops for s in inner.body]
    private = _private(table, used_scalars(body) + used_loop_vars(body))
    out = []
    scalar = len(chain) == 1 and not loops[0].simd  # a worksharing loop alone down a column
    if len(chain) == 1 and not scalar:
        out.append(_directive(lang, depth, table["for_simd"].format(nowait=nowait, private=private)))
    else:
        collapse = f" collapse({len(chain) - 1})" if len(chain) > 2 else ""
        out.append(_directive(lang, depth, table["for"].format(collapse=collapse, nowait=nowait)))
    level = depth
    for loop in chain[:-1]:
        out.append(lang.indent * level + lang.loop_open.format(var=loop.var, extent=loop.extent, last=loop.extent - 1))
        level += 1
    last = chain[-1]
    for inner in loops:
        at = level
        if inner.vectors:
            out.append(lang.indent * at + lang.loop_open.format(var=inner.vector_var, extent=inner.vectors,
                                                                last=inner.vectors - 1))
            at += 1
        if len(chain) > 1 and inner.simd:
            names = used_scalars(inner.body) + used_loop_vars(inner.body)
            simdlen = f" simdlen({inner.simdlen})" if inner.simdlen else ""
            out.append(_directive(lang, at, table["simd"].format(simdlen=simdlen, private=_private(table, names))))
        out.append(lang.indent * at + lang.loop_open.format(var=last.var, extent=inner.extent, last=inner.extent - 1))
        out += _declare(table, at + 1, lang, t, used_scalars(inner.body))
        out += renderer.lines(inner.body, at + 1)
        out.append(lang.indent * at + lang.loop_close)
        if inner.vectors:
            out.append(lang.indent * level + lang.loop_close)
    for level in range(depth + len(chain) - 2, depth - 1, -1):
        out.append(lang.indent * level + lang.loop_close)
    end = table["for_simd_end"] if len(chain) == 1 and not scalar else table["for_end"]
    if end:
        out.append(_directive(lang, depth, end.format(nowait=nowait)))
    return out


def _serial(body, lang, table, renderer, depth, nowait, t):
    """A serial region: one thread of the team runs it (the others wait at its end unless nowait)."""
    out = [_directive(lang, depth, table["single"].format(nowait=nowait))]
    level = depth
    if table["block"]:
        out.append(lang.indent * depth + table["block"][0])
        level += 1
    out += _declare(table, level, lang, t, used_scalars(body))
    out += renderer.lines(body, level)
    if table["block"]:
        out.append(lang.indent * depth + table["block"][1])
    if table["single_end"]:
        out.append(_directive(lang, depth, table["single_end"].format(nowait=nowait)))
    return out


# -- the loop transformations of the host form ------------------------------------------------------

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
      more than scalar code), in vectors of :func:`vector_bytes` (``plan.host_vector``);
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
    if not _contiguous(plan, var, body):
        return [Inner(extent, body, simd=False)]
    body, after = split_activation(body)
    stored = {s.target.buf for s in walk(body) if isinstance(s, Assign) and isinstance(s.target, Ref)}
    overlap = not any(ref.buf in stored for ref in _loads(body))
    return _vectors(body, var, extent, lanes, simdlen, overlap) + _vectors(after, var, extent, lanes, simdlen, False)


def _contiguous(plan, var, body):
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
        return Ref(e.buf, e.idx.substitute(var, value))
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


def jam(plan, chain, body, width=JAM, uneven=False):
    """Unroll-and-jam a parallel region's outer loops so that its SIMD loop carries several
    independent sums (one accumulator's chain of FMAs is bound by their latency). Returns the
    region as a list of ``(chain, body)`` pieces (a remainder of a loop that does not divide is
    its own piece).

    First the outermost loop whose variable indexes no run-time buffer among the loads (a conv's
    output channel): up to ``width`` of its iterations at once, so every input vector loaded feeds
    that many FMAs: a divisor of its extent, or with ``uneven`` the extent split into as few
    passes of at most ``width`` as it takes, balanced (24 -> 12 + 12, 37 -> 10 x 3 + a remainder
    piece of 7). Then, where that gives fewer than ``CHAINS`` sums
    and the body has a reduction loop (a one-channel output, a depthwise conv), the loop around
    the SIMD loop (the rows), its remainder apart. Each output's sum keeps its terms and their
    order: the results do not change by a bit."""
    if len(chain) < 2:
        return [(chain, body)]
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
        if jammed and not (uneven and any(_stores_meet(*piece) for piece in jammed)):
            pieces = jammed
            sums = [factor, loop.extent % factor or 1] if uneven else [factor]
            break
    else:
        sums = [1]
    out = []
    for (chain, body), n in zip(pieces, sums + sums[-1:]):
        rows = CHAINS // n
        if rows < 2 or len(chain) < 2 or not any(isinstance(s, Loop) for s in body) or chain[-2].extent < rows:
            out.append((chain, body))
            continue
        jammed = _jam_loop(chain, body, len(chain) - 2, rows)
        out += [(chain, body)] if uneven and any(_stores_meet(*piece) for piece in jammed) else jammed
    return out


def _stores_meet(chain, body):
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


def unroll_taps(stmts):
    """Inside a SIMD loop: each loop nest keeps only its outermost loop, the loops below it
    unrolled (GCC vectorises an outer loop around one inner loop, not around a nest), when that
    makes at most ``UNROLL`` statements; a nest of small loops is unrolled whole."""
    out = []
    for stmt in stmts:
        if not isinstance(stmt, Loop):
            out.append(stmt)
            continue
        inner = _flatten(stmt.body)
        if inner is None or len(inner) > UNROLL:
            out.append(Loop(stmt.var, stmt.extent, unroll_taps(stmt.body)))
        elif len(inner) * stmt.extent <= UNROLL_WHOLE:
            out.extend(s for t in range(stmt.extent) for s in _copy(inner, stmt.var, Idx((), t)))
        else:
            out.append(Loop(stmt.var, stmt.extent, inner))
    return out


def _flatten(stmts):
    """The statements with every loop unrolled, or None when that exceeds ``UNROLL``."""
    out = []
    for stmt in stmts:
        if isinstance(stmt, Loop):
            inner = _flatten(stmt.body)
            if inner is None or len(out) + len(inner) * stmt.extent > UNROLL:
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
