"""The index algebra of the fused whole-field phases (:mod:`rosenna.strategy.field.fusion`): when a
region's store index decodes uniquely, and when a reader's index gives a region's loop indices
as affine indices of its own; and a Concat of one value with itself as one region (:func:`merged`)."""

from rosenna.loopir import Assign, Idx, Loop, Ref, walk
from rosenna.parallel import Launch, Member


def digits(idx, extents, store, chain):
    """The loop indices of the region (``chain``, storing at ``store``) whose element index
    ``idx`` reads, as affine indices of the reader's variables (``extents``: each one's extent),
    when they are that for every value of those variables: each coefficient of ``store`` a
    multiple of the next smaller, each index provably within its loop. Else None."""
    bounds = {loop.var: loop.extent for loop in chain}
    terms = sorted(store.terms, key=lambda term: term[1])
    coefs = [c for _, c in terms]
    if any(b % a for a, b in zip(coefs, coefs[1:])):
        return None
    parts = [Idx() for _ in terms]
    for var, d in idx.terms:
        fits = [k for k, c in enumerate(coefs) if d % c == 0]
        if var not in extents or not fits:
            return None
        parts[fits[-1]] = parts[fits[-1]] + Idx(((var, d // coefs[fits[-1]]),), 0)
    rest, found = idx.const - store.const, {}
    for k, (var, c) in enumerate(terms):
        if rest % c:
            return None
        lo = sum(min(0, co * (extents[v] - 1)) for v, co in parts[k].terms)
        hi = sum(max(0, co * (extents[v] - 1)) for v, co in parts[k].terms)
        q = rest // c
        if k + 1 < len(terms):  # the least q of its class modulo the next digit that keeps lo + q >= 0
            m = coefs[k + 1] // c
            q %= m
            q += m * -((lo + q) // m) if lo + q < 0 else -m * ((lo + q) // m)
        if lo + q < 0 or hi + q >= bounds[var]:
            return None
        found[var] = parts[k] + q
        rest -= q * c
    return [found[loop.var] for loop in chain] if rest == 0 else None


def radix(chain, idx):
    """Whether the store index decodes uniquely: positive coefficients of the chain's variables,
    each above what the smaller ones reach together."""
    extents = {loop.var: loop.extent for loop in chain}
    if idx.const < 0 or set(extents) != {v for v, _ in idx.terms}:
        return False
    reach = 0
    for var, coef in sorted(idx.terms, key=lambda term: term[1]):
        if coef <= reach:
            return False
        reach += coef * (extents[var] - 1)
    return True


def merged(launch):
    """``launch`` as one region when its regions differ only in their store's constant (a
    Concat of one value with itself, as exported nearest upsampling is): the constants ``c + d j``
    for ``j < len(regions)`` become one more loop index ``j`` of coefficient ``d`` (when the index
    still decodes uniquely), so a reader decodes an element without choosing a region (no
    branch). Else ``launch`` itself."""
    first = launch.members[0]
    if len(launch.members) < 2:
        return launch
    store = first.body[-1].target
    consts = [m.body[-1].target.idx.const for m in launch.members]
    step = consts[1] - consts[0]
    same = all(m.body[:-1] == first.body[:-1] and m.body[-1].expr == first.body[-1].expr and [(lp.var, lp.extent) for lp in m.chain] == [(lp.var, lp.extent) for lp in first.chain]
               and m.body[-1].target.idx.terms == store.idx.terms and m.body[-1].target.buf == store.buf
               for m in launch.members)
    if not same or step <= 0 or consts != [consts[0] + step * j for j in range(len(consts))]:
        return launch
    var = f"i{len(first.chain) + sum(isinstance(s, Loop) for s in walk(first.body))}"
    idx = store.idx + Idx(((var, step),), 0)
    if not radix(list(first.chain) + [Loop(var, len(consts), [])], idx):
        return launch
    body = first.body[:-1] + [Assign(Ref(store.buf, idx), first.body[-1].expr)]
    member = Member("parallel", list(first.chain) + [Loop(var, len(consts), [])], body, launch.notes, first.op,
                    first.reads, first.writes)
    return Launch([member])
