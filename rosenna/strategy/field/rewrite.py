"""Loop-IR rewriting and index enumeration for the whole-field epilogues
(:mod:`rosenna.strategy.field.epilogue`): substituting affine indices, unrolling, renaming
loops, and the element indices a store reaches, evaluated with numpy."""

import itertools

import numpy as np

from rosenna.loopir import Assign, Bin, Fn, Idx, Loop, Ref, Select, walk, walk_expr


def subst(idx, mapping):
    """``idx`` with each variable in ``mapping`` replaced by its affine index, all at once."""
    out = Idx((), idx.const)
    for var, coef in idx.terms:
        out = out + (mapping[var] * coef if var in mapping else Idx(((var, coef),), 0))
    return out


def _moved(ref, mapping, replace):
    """``ref`` with its index substituted, and its run-time offset (if any) rewritten too."""
    at = None if ref.at is None else rewrite_expr(ref.at, mapping, replace)
    return Ref(ref.buf, subst(ref.idx, mapping), at)


def rewrite_expr(e, mapping, replace):
    if isinstance(e, Ref):
        found = replace(e)
        return found if found is not None else _moved(e, mapping, replace)
    if isinstance(e, Bin):
        return Bin(e.op, rewrite_expr(e.a, mapping, replace), rewrite_expr(e.b, mapping, replace))
    if isinstance(e, Fn):
        return Fn(e.name, tuple(rewrite_expr(a, mapping, replace) for a in e.args))
    if isinstance(e, Select):
        return Select(*(rewrite_expr(p, mapping, replace) for p in (e.lhs, e.rhs, e.a, e.b)), e.cmp)
    return e


def rewrite(stmts, mapping, replace=lambda ref: None, fresh=None):
    """Statements with indices substituted, loads replaced where ``replace`` says, and (with
    ``fresh``) every loop variable renamed to a fresh name."""
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            var = fresh() if fresh else s.var
            inner = dict(mapping, **{s.var: Idx.of(var)})
            out.append(Loop(var, s.extent, rewrite(s.body, inner, replace, fresh)))
        elif isinstance(s, Assign):
            target = _moved(s.target, mapping, replace) if isinstance(s.target, Ref) else s.target
            out.append(Assign(target, rewrite_expr(s.expr, mapping, replace), s.accumulate))
        else:
            out.append(s)
    return out


def unroll(stmts, reads):
    """``stmts`` with every loop around a load ``reads`` accepts unrolled."""
    out = []
    for s in stmts:
        if isinstance(s, Loop) and any(isinstance(e, Ref) and reads(e) for t in walk(s.body) if isinstance(t, Assign)
                                       for e in walk_expr(t.expr)):
            for k in range(s.extent):
                out += unroll(rewrite(s.body, {s.var: Idx((), k)}), reads)
        else:
            out.append(s)
    return out


def index_values(idx, loops):
    """Every value of ``idx`` over ``loops`` ((var, extent) pairs, row-major), as an int64 array."""
    values = np.full((1,), idx.const, np.int64)
    coefs = dict(idx.terms)
    for var, extent in loops:
        values = (values[:, None] + coefs.get(var, 0) * np.arange(extent, dtype=np.int64)[None, :]).ravel()
    return values


def store_values(stmts, loops, want):
    """The element indices that the stores ``want`` accepts reach, over ``loops`` and the loops inside."""
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            out += store_values(s.body, loops + [(s.var, s.extent)], want)
        elif isinstance(s, Assign) and isinstance(s.target, Ref) and want(s.target.buf):
            out.append(index_values(s.target.idx, loops))
    return out


def stored_elements(members, want):
    """The sorted element indices the members' stores accepted by ``want`` reach, repeats kept."""
    parts = [v for m in members for v in store_values(m.body, [(lp.var, lp.extent) for lp in m.chain], want)]
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def reach(phases, version):
    """Value (its plan name) -> one past the last element the phases store of it: the floats its
    buffer needs, where the plan's buffer that held it may have been larger (shared)."""
    out = {}
    for phase in phases:
        for m in phase.members:
            loops = [(lp.var, lp.extent) for lp in m.chain]
            for s in walk(m.body):
                if isinstance(s, Assign) and isinstance(s.target, Ref) and s.target.buf in version:
                    top = max(int(v.max()) for v in store_values([s], loops + around(m.body, s), lambda b: True))
                    out[version[s.target.buf]] = max(out.get(version[s.target.buf], 0), top + 1)
    return out


def around(body, target, loops=()):
    """The loops (var, extent) around statement ``target`` inside ``body``, outermost first."""
    for s in body:
        if s is target:
            return list(loops)
        if isinstance(s, Loop):
            found = around(s.body, target, loops + ((s.var, s.extent),))
            if found is not None:
                return found
    return None


def namer(used):
    """A function handing out loop variable names ``i<k>`` not in ``used``."""
    used = set(used)

    def fresh():
        k = 0
        while f"i{k}" in used:
            k += 1
        used.add(f"i{k}")
        return f"i{k}"
    return fresh


def boxes(sig, extents):
    """The boxes (a ``(lo, hi)`` pair per loop) within which ``sig`` (an array of the loops'
    shape plus one axis) is constant: each loop cut wherever the next index changes it anywhere."""
    cuts = []
    for axis, extent in enumerate(extents):
        a = np.take(sig, range(1, extent), axis=axis)
        b = np.take(sig, range(extent - 1), axis=axis)
        change = np.flatnonzero((a != b).reshape(a.shape[:axis + 1] + (-1,)).swapaxes(0, axis).reshape(extent - 1, -1).any(1))
        bounds = [0] + [int(t) + 1 for t in change] + [extent]
        cuts.append(list(zip(bounds, bounds[1:])))
    return [[(lo, hi - 1) for lo, hi in box] for box in itertools.product(*cuts)]
