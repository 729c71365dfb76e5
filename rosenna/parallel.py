"""Which loops of the loop IR may run in parallel, and which regions may share one GPU launch.

The whole-field path (``<name>_infer_one``, :mod:`rosenna.emit.whole` and
:mod:`rosenna.emit.cuda.whole_field`) runs each op's loops as parallel regions. The analysis
here reads only the loop IR (:mod:`rosenna.loopir`) and the plan's storage; the emitters render
what it decides.

Every op lowers with the loops over its output elements outermost (the convention the ops
follow). :func:`regions` splits each top-level loop nest into its perfectly nested outer loops,
the collapsed parallel loop, and the body inside them, run per output element with its scalars
private. A nest is parallel only when every store in it indexes with every parallel loop
variable (distinct iterations write distinct elements) and every scalar is written in an
iteration before it is read there; anything else is one serial region. :func:`launch_groups`
then groups consecutive regions that may run at the same time into one kernel launch.

Run-time offsets (a gather's, a scatter's, a tree walk's: :class:`rosenna.loopir.Ref` with
``at``) are taken as reaching the whole buffer they index: a load at one reads all of it (the
region waits for every writer of that buffer, no launch shares it with one), and a store at one
writes all of it. A nest with such a store is parallel only over those of its outer loops whose
iterations provably never meet (:func:`_exclusive`: a scatter's columns), the loops inside run by
each thread in order; else it is one serial region. Either way every element's updates are applied
in index order by one thread: repeated targets combine in the same order on every device, the
per-point routine's order. The flags of the whole-field form (:func:`rosenna.loopir.flag_faults`)
are set by conditional stores of 1, in any order: those neither make a region serial nor, for the
call's fault flag, order regions.
"""

import numpy as np

from rosenna.loopir import FAULT_FLAGS, Assign, Bin, Comment, Loop, Num, Ref, Var, flag_store, walk, walk_expr


def regions(stmts):
    """Split the plan's statements into ``(kind, header_loops, body)`` regions.

    kind is "comment", "parallel" (``header_loops`` the collapsed Loops, ``body`` what runs per
    iteration) or "serial" (``body`` a list of statements run by one thread).
    """
    out, serial = [], []

    def flush():
        if serial:
            out.append(("serial", [], list(serial)))
            serial.clear()

    for stmt in stmts:
        if isinstance(stmt, Comment):
            flush()
            out.append(("comment", [], [stmt]))
            continue
        if isinstance(stmt, Loop):
            chain = [stmt]
            while len(chain[-1].body) == 1 and isinstance(chain[-1].body[0], Loop):
                chain.append(chain[-1].body[0])
            # a nest that stores at run-time offsets: its outer loops alone may be parallel (a
            # scatter's columns, each applying its updates in order in the loop inside)
            tries = range(len(chain), 0, -1) if _runtime_stores(stmt) else (len(chain),)
            found = next((m for m in tries if _independent(chain[:m], chain[m - 1].body)), None)
            if found:
                flush()
                out.append(("parallel", chain[:found], chain[found - 1].body))
                continue
        serial.append(stmt)
    flush()
    return out


def _independent(chain, body):
    """Whether the iterations of ``chain`` may run in parallel: every store indexes with every
    loop variable of the chain, and every scalar is written in an iteration before it is read
    there (so it is private, not a reduction across iterations)."""
    loop_vars = {loop.var for loop in chain}
    stores, defined = 0, set()
    for stmt in walk(body):
        if not isinstance(stmt, Assign):
            continue
        reads = {e.name for e in walk_expr(stmt.expr) if isinstance(e, Var)}
        if stmt.accumulate and isinstance(stmt.target, Var):
            reads.add(stmt.target.name)
        if not reads <= defined:
            return False
        if flag_store(stmt):
            continue
        if isinstance(stmt.target, Ref):
            stores += 1
            if stmt.target.at is not None:  # a run-time offset may meet another iteration's, unless
                if not _exclusive(stmt.target, chain, body):
                    return False
                continue
            used = {var for var, coef in stmt.target.idx.terms if coef}
            if not loop_vars <= used:
                return False
        else:
            defined.add(stmt.target.name)
    return stores > 0


def _runtime_stores(stmt):
    return any(isinstance(s, Assign) and isinstance(s.target, Ref) and s.target.at is not None and not flag_store(s)
               for s in walk([stmt]))


def _step(at):
    """A whole number every value of the run-time offset ``at`` is a multiple of (its terms: whole
    numbers, loopir.Ref, times constants), or None when that is not plain."""
    if isinstance(at, Var):
        return 1
    if isinstance(at, Bin) and at.op == "*" and isinstance(at.b, Num) and float(at.b.value).is_integer():
        inner = _step(at.a)
        return None if inner is None else inner * int(at.b.value)
    if isinstance(at, Bin) and at.op == "+":
        a, b = _step(at.a), _step(at.b)
        return None if a is None or b is None else int(np.gcd(a, b))
    return None


def _exclusive(target, chain, body):
    """Whether the store ``target`` (at a run-time offset) never meets itself in two iterations of
    ``chain``, nor any load of its buffer in another iteration: its offset a multiple of s
    (:func:`_step`), its affine index of the chain's variables one-to-one and spanning less than s
    (each iteration its own residue modulo s: a scatter's column), of any other variable a
    multiple of s; and every load and store of the buffer in ``body`` this very element."""
    s = _step(target.at)
    extents = {loop.var: loop.extent for loop in chain}
    if not s:
        return False
    outer = sorted((coef, var) for var, coef in target.idx.terms if var in extents)
    if any(coef % s for var, coef in target.idx.terms if var not in extents) or {v for _, v in outer} != set(extents):
        return False
    reach = 0
    for coef, var in outer:
        if coef <= reach:
            return False
        reach += coef * (extents[var] - 1)
    if reach >= s:
        return False
    return all(e == target for stmt in walk(body) if isinstance(stmt, Assign)
               for e in (*walk_expr(stmt.expr), stmt.target) if isinstance(e, Ref) and e.buf == target.buf)


def launch_groups(plan):
    """The plan's regions (comments dropped) grouped into kernel launches, in order: a list of
    :class:`Launch`.

    A region joins the launch being built when it can run at the same time as every region
    already in it, in any interleaving of their threads: it reads no storage (a scratch buffer
    ``ws*`` or ``y``; ``x`` and the weights are never written) that an earlier member writes,
    writes no storage an earlier member reads (an accumulating store counts as a read), and every
    element it stores is stored by no earlier member (checked element by element: the tap
    segments of one conv write disjoint parts of one output). Otherwise the launch is closed and
    the region starts the next one; launches on one stream run in order. So one op's segments
    share a launch, and an op that reads its predecessor's output starts a new one.
    """
    launches, notes, op = [], [], ""
    for kind, chain, body in regions(plan.field_body):
        if kind == "comment":
            notes.append(body[0].text)
            op = body[0].text
            continue
        reads, writes = _accesses(plan, chain, body)
        member = Member(kind, chain, body, notes, op, reads, writes)
        notes = []
        if not launches or not launches[-1].admits(member):
            launches.append(Launch([]))
        launches[-1].members.append(member)
    return launches


class Member:
    """One region inside a launch: ``kind``, ``chain`` and ``body`` as :func:`regions` gives them,
    the comments right before it (``notes``), the last comment before it (``op``: the op it belongs
    to), the storage it reads and the elements it stores."""

    def __init__(self, kind, chain, body, notes, op, reads, writes):
        self.kind, self.chain, self.body, self.notes, self.op = kind, chain, body, list(notes), op
        self.reads, self.writes = reads, writes

    @property
    def threads(self):
        """The threads it takes: one per element of its collapsed loops, or one if serial."""
        total = 1
        for loop in self.chain:
            total *= loop.extent
        return total


class Launch:
    """Regions run by one kernel launch, each on its own range of the thread index."""

    def __init__(self, members):
        self.members = members

    @property
    def threads(self):
        return sum(m.threads for m in self.members)

    @property
    def notes(self):
        return [note for m in self.members for note in m.notes]

    def admits(self, new):
        """Whether ``new`` may run concurrently with every member (see :func:`launch_groups`)."""
        for m in self.members:
            if new.reads & set(m.writes) or set(new.writes) & m.reads:
                return False
            for store in set(new.writes) & set(m.writes):
                if new.writes[store] is None or m.writes[store] is None:
                    return False  # too many elements to list: assume they meet
                if np.intersect1d(new.writes[store], m.writes[store], assume_unique=True).size:
                    return False
        return True


#: Above this many stored elements a region's stores are not listed, only assumed to meet others.
_MAX_LISTED = 1 << 22


def _accesses(plan, chain, body):
    """What a region touches, by storage (``x``, ``y``, a scratch buffer; weights left out):
    ``reads``, the set of storage it loads from (an accumulating store included), and ``writes``,
    storage -> the sorted array of element offsets it stores (None when more than _MAX_LISTED)."""
    reads, writes = set(), {}

    def key(buf):
        kind, ident, offset = plan.storage[buf]
        return None if kind == "w" or buf == FAULT_FLAGS else (ident, offset)

    def visit(stmts, extents):
        for stmt in stmts:
            if isinstance(stmt, Loop):
                visit(stmt.body, {**extents, stmt.var: stmt.extent})
                continue
            if not isinstance(stmt, Assign):
                continue
            for e in walk_expr(stmt.expr):
                if isinstance(e, Ref) and key(e.buf):
                    reads.add(key(e.buf)[0])
            target = stmt.target
            if not isinstance(target, Ref) or not key(target.buf):
                continue
            ident, offset = key(target.buf)
            if stmt.accumulate or target.at is not None:
                reads.add(ident)
            elements = _elements(target.idx, offset, extents) if target.at is None else None
            if elements is None or writes.get(ident, ()) is None:
                writes[ident] = None
            else:
                writes[ident] = _unique(np.concatenate([writes.get(ident, np.zeros(0, np.int64)), elements]))

    visit(body, {loop.var: loop.extent for loop in chain})
    return reads, writes


def _elements(idx, offset, extents):
    """The element offsets an affine store index reaches over the loop extents (None if too many)."""
    count = 1
    for var, _ in idx.terms:
        count *= extents[var]
    if count > _MAX_LISTED:
        return None
    values = np.array([idx.const + offset], np.int64)
    for var, coef in idx.terms:
        values = (values[:, None] + coef * np.arange(extents[var], dtype=np.int64)[None, :]).ravel()
    return _unique(values)


def _unique(values):
    """``np.unique(values)`` by sorting: numpy 2.4's np.unique hashes integers, and on these
    evenly spaced offsets it took 1.5 s for a million of them (sorting: 25 ms); the 32^3 U-Net's
    generate spent 28 of its 34 s there."""
    values = np.sort(values)
    keep = np.empty(values.size, bool)
    keep[:1] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]
