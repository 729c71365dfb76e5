"""Fewer phases for the CUDA/HIP whole-field path: cheap ops computed where they are read.

Every phase of :func:`rosenna.parallel.launch_groups` costs a grid-wide barrier or a launch (1-3
µs on an H200) however little it computes; 14 of the 26 phases of examples/surrogates/poisson_guess's
U-Net are its AveragePools and the Concats and Adds of its nearest upsampling and skip
connections. :func:`schedule` can drop a phase when computing one element it stores takes at most
``max_loads`` loads of run-time data (counting through phases dropped before it): its readers
compute each element where they load it. Per region of the phase, ``<name>_value<k>_<r>(x, y, s,
<its loop indices>)`` runs the region's statements for one element of sample ``s``; a reader
whose index gives those loop indices exactly calls it with them (:func:`field_index.digits`: a
conv's taps reading a pool or an Add), any other calls ``<name>_value<k>(x, y, s, o)``, which
decodes element ``o`` against each region's store index (a mixed-radix number,
:func:`field_index.radix`) and picks the region (:func:`merged` makes the regions of a Concat of
one value with itself one region, so no branch). The same terms in the same order: the results do
not change by a bit.

Dropping a phase lengthens lives: the values it reads are now read by its readers' phases. The
plan's scratch buffers were shared by the op order (:func:`rosenna.plan.build`); the fused phases
get their own sharing (:func:`_storage`) by the same rule over the phases kept, a buffer free
after the last phase that reads what it holds, directly or through a value function.

Whether it pays is the H200's to say (results/measurement-log.md, "The whole-field phase study"): the tuning's ``field_inline_loads`` and
``field_decode`` hold the generator's choice.
"""

import dataclasses
import re

from rosenna.emit.lang import C
from rosenna.emit.render import Renderer, count, used_scalars
from rosenna.emit.whole import sample_pointers, sample_resolver
from rosenna.loopir import Assign, Loop, Ref, walk, walk_expr
from rosenna.emit.cuda import field_epilogue, field_rewrite
from rosenna.emit.cuda.field_index import digits, merged, radix
from rosenna.parallel import launch_groups

# The tuning's field_inline_loads: a phase is computed where it is read when one of its elements
# loads at most that many values of run-time data (a 2x2 average pool 4, an Add 2, a Concat's copy
# 1), loads of values computed in place counted at their own cost; 0: none is. Its field_decode:
# whether a reader may decode an element index at run time (divisions and a branch per region, at
# every load: the Concats of the U-Net's upsampling); without, a phase is computed in place only
# where every reader's indices give its loop indices exactly (:func:`digits`).

#: The storage kind of a value computed in place; its identifier is the value function's name.
INLINE = "v"


class Schedule:
    """The phases of the whole-field kernels.

    Attributes:
        plan: the plan with the storage of the phases kept (``scratch``, ``storage``; a value
            computed in place has storage ``(INLINE, function name, 0)``).
        phases: the :class:`rosenna.parallel.Launch` kept, in order.
        values: ``(function name, Launch)`` of each phase computed in place, in order.
    """

    def __init__(self, plan, phases, values):
        self.plan, self.phases, self.values = plan, phases, values

    def renderer(self):
        return FieldRenderer(self.plan, self.values)


class FieldRenderer(Renderer):
    """C over one sample's pointers (:func:`rosenna.emit.whole.sample_resolver`). A load of a value
    computed in place calls its region's function with the region's indices where they follow
    from the reader's (:func:`digits`; the reader's loops named by :meth:`enter`), else the
    function of element o, which decodes o."""

    def __init__(self, plan, values=()):
        super().__init__(C, plan.precision, sample_resolver(plan))
        self.storage, self.extents = plan.storage, {}
        self.producers = dict(values)

    def enter(self, chain, body):
        """The loops of the region about to be rendered (a name used twice: its larger extent)."""
        self.extents = {}
        for loop in list(chain) + [s for s in walk(body) if isinstance(s, Loop)]:
            self.extents[loop.var] = max(loop.extent, self.extents.get(loop.var, 0))

    def expr(self, e, parent=0, right=False):
        if isinstance(e, Ref) and self.storage[e.buf][0] == INLINE:
            fn = self.storage[e.buf][1]
            for k, m in enumerate(self.producers[fn].members):
                found = digits(e.idx, self.extents, m.body[-1].target.idx, m.chain)
                if found is not None:
                    return f"{fn}_{k}(x, y, s, {', '.join(self.index(d) for d in found)})"
            return f"{fn}(x, y, s, {self.index(e.idx)})"
        return super().expr(e, parent, right)


def buffer_symbol(plan, i):
    """The kernel file's buffer of scratch buffer i of the fused phases, for every sample."""
    return C.symbol(plan.name, f"wsf{i}")


def pointers(plan, text, buffer=None):
    """Declarations of sample ``s``'s pointers into x, y and the fused phases' buffers that ``text``
    uses (``buffer(plan, i)``: buffer i's array, by default :func:`buffer_symbol`)."""
    return sample_pointers(plan, text, buffer=buffer or buffer_symbol)


def schedule(plan, max_loads=None, decode=None, epilogues=None):
    """The plan's phases with the producer-side epilogues made (:mod:`field_epilogue`, with
    ``epilogues``, by default where the tuning's ``field_epilogues`` has the launched phases) and every phase that qualifies computed in
    place (see the module); ``max_loads`` and ``decode`` default to the tuning's
    ``field_inline_loads`` and ``field_decode``."""
    max_loads = plan.tuned.field_inline_loads if max_loads is None else max_loads
    decode = plan.tuned.field_decode if decode is None else decode
    groups = launch_groups(plan)
    version = _versions(plan, groups)
    epilogues = "launches" in field_epilogue.forms(plan.tuned) if epilogues is None else epilogues
    fewer = groups
    if version is not None and epilogues:
        fewer = field_epilogue.fuse(plan, groups, version, lambda launch: _value_of(plan, launch, version))
    if len(fewer) < len(groups):
        plan, groups = _storage(plan, fewer, version, {}), fewer
    if version is None or not max_loads:
        return Schedule(plan, groups, [])
    stored_by = {}
    for k, launch in enumerate(groups):
        for m in launch.members:
            for name in _stored(m.body):
                if name in version:
                    stored_by.setdefault(version[name], set()).add(k)
    read_later = set()
    for launch in groups:
        for m in launch.members:
            read_later |= {version[n] for n in _loaded(m.body) if n in version}
    cost, inline, kept, values = {}, {}, [], []
    for k, launch in enumerate(groups):
        target = _value_of(plan, launch, version)
        loads = max((_loads(plan, m.body, version, cost) for m in launch.members), default=0)
        if (target and loads <= max_loads and stored_by.get(target) == {k} and target in read_later
                and not any(plan.storage[n][0] == "y" for m in launch.members for n in _loaded(m.body))
                and (decode or _exact(groups[k + 1:], launch, target, version))):
            cost[target] = loads
            inline[target] = (C.symbol(plan.name, f"value{k}"), merged(launch))
            values.append(inline[target])
        else:
            kept.append(launch)
    return Schedule(_storage(plan, kept, version, inline), kept, values)


def value_functions(sched, code, qualifier="static __device__ __forceinline__"):
    """The value functions of the phases computed in place that ``code`` calls (directly or
    through another), in dependence order: per region ``<fn>_<k>(x, y, s, <its loop indices>)``,
    which runs the region's statements for one element, and ``<fn>(x, y, s, o)``, which finds
    the region and indices of element o."""
    plan, t = sched.plan, sched.plan.ctype
    renderer = sched.renderer()
    params = f"const {t} *ROSENNA_RESTRICT x, {t} *ROSENNA_RESTRICT y, long s"
    out = _Functions()
    for fn, launch in sched.values:
        notes = "; ".join(launch.notes) or "a phase"
        several = len(launch.members) > 1
        decode = []
        for k, m in enumerate(launch.members):
            renderer.enter(m.chain, m.body)
            store = m.body[-1]
            scalars = used_scalars(m.body)
            run = ([f"    {t} {', '.join(scalars)};"] if scalars else []) + renderer.lines(m.body[:-1], 1) + \
                [f"    return {renderer.expr(store.expr)};"]
            variables = [loop.var for loop in m.chain]
            head = [f"    {d}" for d in pointers(plan, "\n".join(run))]
            head += [f"    (void){p};" for p in ["x", "y", "s"] + variables if not _uses(run, head, p)]
            what = " x ".join(str(loop.extent) for loop in m.chain)
            out.append(f"{fn}_{k}", f"/* {notes}{f', region {k}' if several else ''}: the element of indices {', '.join(variables)} "
                       f"({what}) of sample s. */\n"
                       f"{qualifier} {t} {fn}_{k}({params}, {', '.join('int ' + v for v in variables)})\n"
                       "{\n" + "\n".join(head + run) + "\n}")
            decode += _decode(m, f"{fn}_{k}", k == len(launch.members) - 1)
        out.append(fn, f"/* {notes}: element o of sample s ({count(len(launch.members), 'region')}). */\n"
                   f"{qualifier} {t} {fn}({params}, int o)\n"
                   "{\n" + "\n".join(decode) + "\n}")
    called, text = set(), code
    while True:
        found = {name for name, _ in out.items if f"{name}(x, y, s, " in text} - called
        if not found:
            break
        called |= found
        text = "\n".join(body for name, body in out.items if name in found)
    return "\n\n".join(body for name, body in out.items if name in called)


class _Functions:
    """Named function texts in order."""

    def __init__(self):
        self.items = []

    def append(self, name, text):
        self.items.append((name, text))


def _uses(lines, head, p):
    """Whether parameter ``p`` appears in the function's code (comments aside)."""
    code = re.sub(r"/\*.*?\*/", "", "\n".join(list(lines) + list(head)))
    return re.search(rf"\b{p}\b", code) is not None


def _decode(m, fn, last):
    """One region's part of ``<fn>(x, y, s, o)``: o decoded into the region's loop indices
    (coefficients in decreasing order) and, but for the last region, checked to be one of its
    elements (indices in range, nothing left over)."""
    idx = m.body[-1].target.idx
    terms = sorted(idx.terms, key=lambda term: -term[1])
    extents = {loop.var: loop.extent for loop in m.chain}
    r = f"o - {idx.const}" if idx.const else "o"
    lines, done = [], []
    if last:  # o is this region's: unsigned, so that a division by a power of two is a shift
        lines.append(f"const unsigned r = {r};")
        r = "r"
    for var, coef in terms:
        rest = f"{r} - " + " - ".join(done) if done else r
        rest = f"({rest})" if done or (r != "r" and idx.const and coef > 1) else rest
        lines.append(f"const int {var} = {rest}" + (f" / {coef};" if coef > 1 else ";"))
        done.append(var if coef == 1 else f"{coef} * {var}")
    call = f"return {fn}(x, y, s, {', '.join(loop.var for loop in m.chain)});"
    if last:
        return [f"    {line}" for line in lines] + [f"    {call}"]
    checks = [f"{r} == " + " + ".join(done)] + [f"{v} >= 0 && {v} < {extents[v]}" for v, _ in terms]
    return ["    {"] + [f"        {line}" for line in lines] + [f"        if ({' && '.join(checks)})", f"            {call}", "    }"]


def _exact(later, launch, target, version):
    """Whether every load of ``target`` in the ``later`` phases finds its region's loop indices
    exactly (:func:`digits`), with no decoding at run time."""
    for phase in later:
        for m in phase.members:
            extents = {}
            for loop in list(m.chain) + [s for s in walk(m.body) if isinstance(s, Loop)]:
                extents[loop.var] = max(loop.extent, extents.get(loop.var, 0))
            for s in walk(m.body):
                if not isinstance(s, Assign):
                    continue
                for e in walk_expr(s.expr):
                    if isinstance(e, Ref) and version.get(e.buf) == target and not any(
                            digits(e.idx, extents, r.body[-1].target.idx, r.chain) is not None for r in launch.members):
                        return False
    return True


def _stored(body):
    return [s.target.buf for s in walk(body) if isinstance(s, Assign) and isinstance(s.target, Ref)]


def _loaded(body):
    """Names a region loads (an accumulating store counts), but those it stores first itself."""
    names, stored = [], set(_stored(body))
    for s in walk(body):
        if not isinstance(s, Assign):
            continue
        names += [e.buf for e in walk_expr(s.expr) if isinstance(e, Ref)]
        if s.accumulate and isinstance(s.target, Ref):
            names.append(s.target.buf)
    return [n for n in dict.fromkeys(names) if n not in stored]


def _loads(plan, body, version, cost, scale=1):
    """Loads of run-time data one run of ``body`` makes, a value computed in place at its cost."""
    total = 0
    for s in body:
        if isinstance(s, Loop):
            total += _loads(plan, s.body, version, cost, scale * s.extent)
        elif isinstance(s, Assign):
            refs = [e for e in walk_expr(s.expr) if isinstance(e, Ref)] + ([s.target] if s.accumulate else [])
            total += sum(scale * cost.get(version.get(e.buf), 1) for e in refs
                         if isinstance(e, Ref) and plan.storage[e.buf][0] != "w")
    return total


def _versions(plan, groups):
    """Scratch value name -> the value whose stores it reads: itself when stored, its root for an
    alias (the last value stored into its buffer before it is read). None when a name would stand
    for two."""
    current, version = {}, {}
    for launch in groups:
        for m in launch.members:
            for name in _loaded(m.body):
                kind, ident, _ = plan.storage[name]
                if kind != "t":
                    continue
                if ident not in current or version.setdefault(name, current[ident]) != current[ident]:
                    return None
        for m in launch.members:
            for name in _stored(m.body):
                kind, ident, _ = plan.storage[name]
                if kind == "t":
                    if version.setdefault(name, name) != name:
                        return None
                    current[ident] = name
    return version


def _value_of(plan, launch, version):
    """The value a phase stores if its elements can be computed where read: every region parallel,
    its last statement its one store (not accumulating) into scratch, a mixed-radix index."""
    target = None
    for m in launch.members:
        if m.kind != "parallel" or not m.body:
            return None
        store = m.body[-1]
        stores = _stored(m.body)
        if not isinstance(store, Assign) or not isinstance(store.target, Ref) or store.accumulate or len(stores) != 1:
            return None
        name = store.target.buf
        if name not in version or target not in (None, version[name]) or not radix(m.chain, store.target.idx):
            return None
        target = version[name]
    return target


def _storage(plan, kept, version, inline):
    """The plan with scratch buffers shared over the kept phases (see the module docstring)."""
    def reads(names):
        out = set()
        for name in names:
            v = version.get(name)
            if v is None:
                continue
            if v in inline:
                out |= reads(n for m in inline[v][1].members for n in _loaded(m.body))
            else:
                out.add(v)
        return out

    first, last, size = {}, {}, {}
    for q, launch in enumerate(kept):
        for m in launch.members:
            for v in reads(_loaded(m.body)):
                last[v] = max(last.get(v, q), q)
            for name in _stored(m.body):
                if name in version:
                    first.setdefault(version[name], q)
                    last[version[name]] = max(last.get(version[name], q), q)
    reach = field_rewrite.reach(kept, version)
    scratch, free, holder, where = [], [], {}, {}
    for q in range(len(kept)):
        for v, pick in list(holder.items()):
            if last[v] < q:
                free.append(pick)
                del holder[v]
        for v in [v for v, f in first.items() if f == q]:
            held = plan.scratch[int(plan.storage[v][1][1:])]  # the plan's buffer, maybe shared with a larger value
            size[v] = min(held, reach.get(v, held))
            pick = min(free, key=lambda b: (scratch[b] < size[v], abs(scratch[b] - size[v])), default=None)
            if pick is None:
                pick = len(scratch)
                scratch.append(size[v])
            else:
                free.remove(pick)
                scratch[pick] = max(scratch[pick], size[v])
            holder[v] = where[v] = pick
    storage = dict(plan.storage)
    for name, v in version.items():
        storage[name] = (INLINE, inline[v][0], 0) if v in inline else ("t", f"t{where[v]}", 0) if v in where \
            else storage[name]
    return dataclasses.replace(plan, scratch=scratch, storage=storage)

