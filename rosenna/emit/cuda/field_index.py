"""The index algebra of the fused whole-field phases (:mod:`rosenna.emit.cuda.field_fuse`): when a
region's store index decodes uniquely, and when a reader's index gives a region's loop indices
as affine indices of its own."""

from rosenna.loopir import Idx


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
