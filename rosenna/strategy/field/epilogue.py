"""Producer-side epilogues of the CUDA/HIP whole-field phases: a phase's threads also compute what
the cheap phases right after it need, so those phases (and their barriers) disappear, with no
element computed twice and no extra load.

Two shapes, recognised in the loop IR by their index maps (not by op names):

- **a window reduction after its producer** (:func:`pull`; a kxk stride-k AveragePool or MaxPool
  after a conv): the reducing phase's thread, one per window, computes the window's producer
  elements itself, in the order the reduction reads them, then reduces them. Every producer
  element must lie in exactly one window (checked element by element); where the producer's
  value has other readers (a skip connection) the windows must cover it all, and each element is
  also stored. The producer's regions (a padded conv's interior, edges and corners) split the
  windows into boxes within which each window element comes from one region
  (:func:`_boxes`), so each box is a region of the fused phase, its indices affine.
- **element maps after a producer** (:func:`push`; the Concat(v, v) copies of exported nearest
  upsampling, an Add of a skip connection): a phase each of whose elements reads one element of
  the producer's value; the producer's thread, having computed element e, computes and stores
  every element that reads e (the consumer's indices that do not reach the load, the copies,
  become loops). Repeated, a conv's thread writes ``v + skip`` at its four upsampled positions.

Each sum keeps its terms and their order: the results do not change by a bit. A store nothing
else reads is dropped (:func:`finish`), the scratch buffers are shared anew over the phases kept
(:func:`rosenna.strategy.field.fusion.schedule`). Measured on the H200: results/measurement-log.md, "The epilogue study".
"""

import copy

import numpy as np

from rosenna.strategy.field.index import digits, merged
from rosenna.strategy.field.rewrite import (boxes, index_values, namer, rewrite, rewrite_expr, stored_elements, subst,
                                             unroll)
from rosenna.loopir import Assign, Comment, Idx, Loop, Ref, Var, walk, walk_expr
from rosenna.parallel import Launch, Member

#: The forms of ``<name>_run`` that may have the epilogues (:func:`rosenna.strategy.field.decide`):
#: "launches" (the default schedule of :func:`rosenna.strategy.field.fusion.schedule`),
#: "persistent" and "cluster"; the tuning's ``field_epilogues`` names those that do (:func:`forms`).
ALL_FORMS = ("launches", "persistent", "cluster")


def forms(tuning):
    """The forms whose phases have the epilogues under ``tuning`` (its ``field_epilogues``)."""
    chosen = tuning.field_epilogues
    return frozenset(ALL_FORMS if chosen == "all" else (chosen,) if chosen else ())

# Which epilogues :func:`fuse` makes is the tuning's: epilogue_pull (window reductions pulled into
# their producer's phase) and epilogue_push (element maps pushed into it).

#: The most producer elements one window of a reduction may read (a 4x4 pool: 16).
MAX_WINDOW = 16

#: Above this many index evaluations (elements x reads) a fusion is not checked, so not made.
MAX_CHECKED = 1 << 23


class _Tail:
    """Where a pushed region's current value is: its scalar, the value (plan name) it holds, its
    element index over the region's loop indices (chain and copy loops), their extents, the path
    to the statement list a further consumer's statements go into (:func:`_at`)."""

    def __init__(self, var, value, index, extents, path):
        self.var, self.value, self.index, self.extents, self.path = var, value, index, extents, path


def _loop_vars(member):
    return [lp.var for lp in member.chain] + [s.var for s in walk(member.body) if isinstance(s, Loop)]


def _store_of(member):
    """The region's last statement when it is its one store (not accumulating), else None."""
    stores = [s for s in walk(member.body) if isinstance(s, Assign) and isinstance(s.target, Ref)]
    last = member.body[-1] if member.body else None
    if member.kind != "parallel" or len(stores) != 1 or stores[0] is not last or last.accumulate:
        return None
    return last


def pull(plan, prod, cons, value, version, stored_by_prod):
    """The phase ``cons`` (a reduction over windows of ``value``, which phase ``prod`` stores)
    with ``prod``'s elements computed by its threads (see the module), or None where it does not
    qualify."""
    if len(cons.members) != 1 or cons.members[0].kind != "parallel":
        return None
    m = cons.members[0]
    store = _store_of(m)
    reads = lambda ref: version.get(ref.buf) == value  # noqa: E731
    if store is None or any(reads(r) for r in [store.target]):
        return None
    body = unroll(m.body, reads)
    refs = [e for s in walk(body) if isinstance(s, Assign) for e in walk_expr(s.expr) if isinstance(e, Ref)]
    window = list(dict.fromkeys(e.idx for e in refs if reads(e)))
    if not window or len(window) > MAX_WINDOW or any(isinstance(s, Loop) and any(
            isinstance(e, Ref) and reads(e) for t in walk(s.body) if isinstance(t, Assign) for e in walk_expr(t.expr))
            for s in walk(body)):
        return None
    if any(version.get(e.buf, e.buf) in stored_by_prod for e in refs if not reads(e)):
        return None
    loops = [(lp.var, lp.extent) for lp in m.chain]
    points = int(np.prod([e for _, e in loops]))
    if points * len(window) > MAX_CHECKED:
        return None
    stores = [_store_of(p) for p in prod.members]
    if any(s is None for s in stores):
        return None
    size = 1 + max(int(v.max()) for p, s in zip(prod.members, stores)
                   for v in [index_values(s.target.idx, [(lp.var, lp.extent) for lp in p.chain])])
    owner = np.full(size, -1, np.int64)
    for k, (p, s) in enumerate(zip(prod.members, stores)):
        owner[index_values(s.target.idx, [(lp.var, lp.extent) for lp in p.chain])] = k
    where = np.stack([index_values(idx, loops) for idx in window], axis=1)
    read = where.ravel()
    if read.min() < 0 or read.max() >= size or (owner[read] < 0).any() or np.unique(read).size != read.size:
        return None  # a window element outside the producer's stores, or one read by two windows
    sig = owner[where].reshape([e for _, e in loops] + [len(window)])
    members = []
    for box in boxes(sig, [e for _, e in loops]):
        # a loop of one iteration in the box is a constant; the others start at the box's corner
        chain = [Loop(var, hi - lo + 1, []) for (var, _), (lo, hi) in zip(loops, box) if hi > lo]
        if not chain:
            return None
        offset = {var: Idx.of(var) + lo if hi > lo else Idx((), lo) for (var, _), (lo, hi) in zip(loops, box)}
        extents = {lp.var: lp.extent for lp in chain}
        fresh = namer(extents)
        names, lines = {}, []
        for r, idx in enumerate(window):
            k = int(sig[tuple(lo for lo, _ in box) + (r,)])
            p, s = prod.members[k], stores[k]
            found = digits(subst(idx, offset), extents, s.target.idx, p.chain)
            if found is None:
                return None
            mapping = dict(zip((lp.var for lp in p.chain), found))
            names[idx] = Var(f"e{r}")
            copy = rewrite(p.body[:-1], mapping, fresh=fresh)
            lines += [Comment(f"window element {r}: {p.op}")] + copy + [
                Assign(names[idx], rewrite_expr(s.expr, mapping, lambda ref: None)),
                Assign(Ref(s.target.buf, subst(s.target.idx, mapping)), names[idx])]
        lines.append(Comment(f"{m.op} of the {len(window)} window elements"))
        lines += rewrite(body, offset, lambda ref: names[ref.idx] if reads(ref) else None)
        notes = prod.notes + m.notes if not members else []
        members.append(Member("parallel", chain, lines, notes, f"{prod.members[0].op}, then {m.op}", set(), {}))
    return _checked(Launch(members), prod, cons, version)


def push(plan, prod, cons, value, version, stored_by_prod):
    """Phase ``prod`` (which stores ``value``, or a pushed phase whose current value it is) with
    the element map ``cons`` computed by its threads (see the module), or None. Each region of
    ``cons`` (a Resize's nests) is pushed from every place the producer's thread holds the value."""
    maps = []
    for m in merged(cons).members:
        store = _store_of(m)
        if store is None or len(m.body) != 1 or version.get(store.target.buf, store.target.buf) in stored_by_prod:
            return None
        refs = [e for e in walk_expr(store.expr) if isinstance(e, Ref)]
        loads = {e.idx for e in refs if version.get(e.buf) == value}
        if len(loads) != 1 or any(version.get(e.buf, e.buf) in stored_by_prod for e in refs
                                  if version.get(e.buf) != value):
            return None
        load = loads.pop()
        used = {v for v, _ in load.terms}
        if maps and store.target.buf != maps[0][1].target.buf:
            return None  # regions of two values
        maps.append((m, store, load, [lp for lp in m.chain if lp.var in used], [lp for lp in m.chain if lp.var not in used]))
    members = []
    for p in prod.members:
        body, tails, count = _open(p)
        if body is None:
            return None
        fresh, new = namer(_loop_vars(p) + [v for tail in tails for v in tail.extents]), []
        for tail in tails:
            for m, store, load, matched, copies in maps:
                found = digits(tail.index, tail.extents, load, matched)
                if found is None:
                    return None
                names = [fresh() for _ in copies]
                mapping = dict(zip((lp.var for lp in matched), found), **{lp.var: Idx.of(n) for lp, n in zip(copies, names)})
                expr = rewrite_expr(store.expr, mapping, lambda ref: Var(tail.var) if version.get(ref.buf) == value else None)
                var, lines = tail.var, []
                if expr != Var(tail.var):
                    var, count = f"e{count}", count + 1
                    lines.append(Assign(Var(var), expr))
                lines.append(Assign(Ref(store.target.buf, subst(store.target.idx, mapping)), Var(var)))
                for lp, n in reversed(list(zip(copies, names))):
                    lines = [Loop(n, lp.extent, lines)]
                inner = _at(body, tail.path)
                copied = " x ".join(str(lp.extent) for lp in copies)
                inner.append(Comment(f"{m.op}" + (f", the {copied} elements that read it" if copies else ", its element")))
                path = list(tail.path) + ([len(inner)] + [0] * (len(copies) - 1) if copies else [])
                inner += lines
                extents = dict(tail.extents, **{n: lp.extent for lp, n in zip(copies, names)})
                new.append(_Tail(var, version.get(store.target.buf, store.target.buf), subst(store.target.idx, mapping),
                                 extents, path))
        op = f"{p.op}, then {maps[0][0].op}"
        # new loop objects: the phase is no longer its conv's alone (conv_igemm.conv_phases, which
        # gives a conv a kernel of its own, knows a conv's phase by the loops of its regions)
        chain = [Loop(lp.var, lp.extent, []) for lp in p.chain]
        fused = Member("parallel", chain, body, p.notes + (cons.notes if not members else []), op, set(), {})
        fused.tails, fused.count = new, count
        members.append(fused)
    return _checked(Launch(members), prod, cons, version)


def store_hook(plan, groups, k, value, version, dims):
    """The element maps right after phase ``k`` (which stores ``value``) as statements a kernel of
    its own for that phase (a shared-memory conv tile) runs after computing one element: ``(phases
    consumed, statements)``, the element held in scalar ``e0`` and indexed by ``dims`` ((var,
    extent) pairs, the value's layout row-major, those names its indices), or None. The statements
    store the element itself where another phase reads it, and every element that reads it."""
    chain = [Loop(var, extent, []) for var, extent in dims]
    index = Idx(tuple((var, int(np.prod([e for _, e in dims[d + 1:]], dtype=np.int64))) for d, (var, _) in
                      enumerate(dims)), 0)
    buf = next(name for name, v in version.items() if v == value and name == value)
    phase = Launch([Member("parallel", chain, [Assign(Ref(buf, index), Var("e0"))], [], "", set(), {})])
    done, stored = 0, {value}
    while k + 1 + done < len(groups):
        pushed = push(plan, phase, groups[k + 1 + done], value, version, stored)
        if pushed is None:
            break
        phase, done, value = pushed, done + 1, pushed.members[0].tails[0].value
        stored.add(value)
    if not done:
        return None
    read = _read([g for q, g in enumerate(groups) if not k <= q <= k + done], version)
    return done, _kept(plan, phase.members[0].body[1:], version, read)


def _at(body, path):
    """The statement list at ``path`` (indices of loops, outermost first) in ``body``."""
    for k in path:
        body = body[k].body
    return body


def _open(p):
    """A copy of producer region ``p``'s body to push into, the :class:`_Tail` of each place its
    thread holds the current value and the scalars ``e<k>`` used so far; ``(None, None, 0)`` where
    ``p`` has no one store to start from. Before any push, its stored value is held in ``e0``."""
    tails = getattr(p, "tails", None)
    if tails is not None:
        return copy.deepcopy(p.body), tails, p.count
    store = _store_of(p)
    if store is None:
        return None, None, 0
    body = p.body[:-1] + [Assign(Var("e0"), store.expr), Assign(store.target, Var("e0"))]
    return body, [_Tail("e0", None, store.target.idx, {lp.var: lp.extent for lp in p.chain}, [])], 1


def _checked(launch, prod, cons, version):
    """``launch`` when it stores exactly the elements ``prod`` and ``cons`` stored, each value's
    elements as often (once), else None."""
    key = lambda buf: version.get(buf, buf)  # noqa: E731
    values = {key(s.target.buf) for phase in (prod, cons) for m in phase.members for s in walk(m.body)
              if isinstance(s, Assign) and isinstance(s.target, Ref)}
    for v in values:
        want = lambda buf: key(buf) == v  # noqa: E731
        before = np.sort(np.concatenate([stored_elements(prod.members, want), stored_elements(cons.members, want)]))
        if not np.array_equal(stored_elements(launch.members, want), before):
            return None
    return launch


def fuse(plan, groups, version, value_of):
    """The phases with every producer-side epilogue that qualifies made (:func:`pull` of a window
    reduction right after its producer, else :func:`push` of the element maps that follow it),
    then :func:`finish`. ``value_of(launch)``: the value a phase stores as its one result, or None."""
    out, k = [], 0
    while k < len(groups):
        phase, k = groups[k], k + 1
        value = value_of(phase)
        if value is not None and k < len(groups):
            stored = {value}
            fused = pull(plan, phase, groups[k], value, version, stored) if plan.tuned.epilogue_pull else None
            if fused is not None:
                phase, k = fused, k + 1
            while plan.tuned.epilogue_push and fused is None and k < len(groups):
                pushed = push(plan, phase, groups[k], value, version, stored)
                if pushed is None:
                    break
                phase, k, value = pushed, k + 1, pushed.members[0].tails[0].value
                stored.add(value)
        out.append(phase)
    return finish(plan, out, version, len(out) < len(groups))


def finish(plan, phases, version, changed):
    """The phases with the stores of fused phases that no phase reads dropped (a value computed
    and used in one thread; the model's output y is always stored)."""
    if not changed:
        return phases
    read = _read(phases, version)
    for phase in phases:
        if any(m.op and ", then " in m.op for m in phase.members):
            for m in phase.members:
                m.body = _kept(plan, m.body, version, read)
    return phases


def _read(phases, version):
    """The values (plan names) the phases load."""
    read = set()
    for phase in phases:
        for m in phase.members:
            for s in walk(m.body):
                if isinstance(s, Assign):
                    read |= {version.get(e.buf, e.buf) for e in walk_expr(s.expr) if isinstance(e, Ref)}
                    if s.accumulate and isinstance(s.target, Ref):
                        read.add(version.get(s.target.buf, s.target.buf))
    return read


def _kept(plan, stmts, version, read):
    """``stmts`` without the stores of a held scalar into scratch values not in ``read``, each kept
    one under a comment saying why it is stored."""
    out, pending = [], None  # a section's comment, written once a statement of its section is kept
    for s in stmts:
        if isinstance(s, Comment):
            pending = s
            continue
        if isinstance(s, Loop):
            s = Loop(s.var, s.extent, _kept(plan, s.body, version, read))
            if not s.body:
                continue
        held = isinstance(s, Assign) and isinstance(s.target, Ref) and isinstance(s.expr, Var)
        if held and plan.storage[s.target.buf][0] == "t" and version.get(s.target.buf, s.target.buf) not in read:
            continue
        if pending is not None:
            out.append(pending)
            pending = None
        if held:
            out.append(Comment("stored: a later phase reads it too")
                       if plan.storage[s.target.buf][0] == "t" else Comment("the model's output"))
        out.append(s)
    return out
