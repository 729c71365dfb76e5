"""The schedule of the CUDA/HIP whole-field phases: which regions share a phase, which phases
are fused into their producer's (the producer-side epilogues, :mod:`~rosenna.strategy.field.epilogue`)
and which are computed where they are read, and the storage of the phases kept.

Every phase of :func:`rosenna.parallel.launch_groups` costs a grid-wide barrier or a launch (1-3
µs on an H200) however little it computes; 14 of the 26 phases of examples/surrogates/poisson_guess's
U-Net are its AveragePools and the Concats and Adds of its nearest upsampling and skip
connections. :func:`schedule` can drop a phase when computing one element it stores takes at most
``max_loads`` loads of run-time data (counting through phases dropped before it): its readers
compute each element where they load it. The renderer (rosenna/emit/cuda/field_fuse.py) writes,
per region of such a phase, a function of one element; a reader whose index gives the region's
loop indices exactly (:meth:`Schedule.region_indices`, :func:`~rosenna.strategy.field.index.digits`:
a conv's taps reading a pool or an Add) calls it with them, any other decodes the element index
against each region's store index (a mixed-radix number, :func:`~rosenna.strategy.field.index.radix`;
:func:`~rosenna.strategy.field.index.merged` makes the regions of a Concat of one value with itself
one region, so no branch). The same terms in the same order: the results do not change by a bit.

Dropping a phase lengthens lives: the values it reads are now read by its readers' phases. The
plan's scratch buffers were shared by the op order (:func:`rosenna.plan.build`); the fused phases
get their own sharing (:func:`_storage`) by the same rule over the phases kept, a buffer free
after the last phase that reads what it holds, directly or through a value function.

Whether it pays is the H200's to say (results/measurement-log.md, "The whole-field phase study"):
the tuning's ``field_inline_loads`` (a phase is computed where it is read when one of its elements
loads at most that many values of run-time data: a 2x2 average pool 4, an Add 2, a Concat's copy
1; 0: none is) and ``field_decode`` (whether a reader may decode an element index at run time:
divisions and a branch per region, at every load) hold the generator's choice.
"""

import dataclasses
from dataclasses import dataclass

from rosenna.loopir import Assign, Loop, Ref, runtime_indexed, walk, walk_expr
from rosenna.parallel import Launch, Member, launch_groups
from rosenna.strategy.field import epilogue, rewrite
from rosenna.strategy.field.host_loops import jam
from rosenna.strategy.field.index import digits, merged, radix

#: The storage kind of a value computed in place; its identifier names the value function
#: (``value<k>``, k the phase's index before any was dropped).
INLINE = "v"


@dataclass(frozen=True)
class Schedule:
    """The phases of the whole-field kernels.

    Attributes:
        plan: the plan with the storage of the phases kept (``scratch``, ``storage``; a value
            computed in place has storage ``(INLINE, "value<k>", 0)``).
        phases: the :class:`rosenna.parallel.Launch` kept, in order.
        values: ``(identifier, Launch)`` of each phase computed in place, in order.
        unfused: the phases before any was fused or computed in place (one per op, in practice).
    """

    plan: object
    phases: tuple
    values: tuple = ()
    unfused: int = 0

    INLINE = INLINE

    def jammed(self):
        """The phases of ``<name>_phases``: each parallel member region unrolled-and-jammed
        (:func:`~rosenna.strategy.field.host_loops.jam` with its defaults, the host form's
        transformation): a thread computes up to 8 output channels of a conv from one pass over its
        inputs, or, where the channels index the inputs (depthwise, one output channel), a few
        neighbouring rows. Each sum keeps its terms and their order, so the results do not change
        by a bit; a loop that does not divide leaves a remainder region of its own."""
        out = []
        for launch in self.phases:
            members = []
            for m in launch.members:
                pieces = jam(self.plan, m.chain, m.body) if m.kind == "parallel" and not runtime_indexed(m.body) \
                    else [(m.chain, m.body)]
                for k, (chain, body) in enumerate(pieces):
                    members.append(Member(m.kind, chain, body, m.notes if k == 0 else [], m.op, m.reads, m.writes))
            out.append(Launch(members))
        return out

    @staticmethod
    def region_indices(idx, extents, region):
        """The loop indices of ``region`` (a :class:`rosenna.parallel.Member` of a value computed
        in place) that the load index ``idx`` reads, as affine indices of the reader's loop
        variables (``extents``: each one's extent), or None when they do not follow exactly."""
        return digits(idx, extents, region.body[-1].target.idx, region.chain)


def schedule(plan, max_loads=None, decode=None, epilogues=None):
    """The plan's phases with the producer-side epilogues made (:mod:`~rosenna.strategy.field.epilogue`,
    with ``epilogues``, by default where the tuning's ``field_epilogues`` has the launched phases)
    and every phase that qualifies computed in place (see the module); ``max_loads`` and
    ``decode`` default to the tuning's ``field_inline_loads`` and ``field_decode``."""
    max_loads = plan.tuned.field_inline_loads if max_loads is None else max_loads
    decode = plan.tuned.field_decode if decode is None else decode
    groups = launch_groups(plan)
    unfused = len(groups)
    if plan.runtime_indexed:  # no fusion across a run-time offset: one phase per region group, as planned
        return Schedule(plan, tuple(groups), (), unfused)
    version = _versions(plan, groups)
    epilogues = "launches" in epilogue.forms(plan.tuned) if epilogues is None else epilogues
    fewer = groups
    if version is not None and epilogues:
        fewer = epilogue.fuse(plan, groups, version, lambda launch: _value_of(plan, launch, version))
    if len(fewer) < len(groups):
        plan, groups = _storage(plan, fewer, version, {}), fewer
    if version is None or not max_loads:
        return Schedule(plan, tuple(groups), (), unfused)
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
            inline[target] = (f"value{k}", merged(launch))
            values.append(inline[target])
        else:
            kept.append(launch)
    return Schedule(_storage(plan, kept, version, inline), tuple(kept), tuple(values), unfused)


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
    reach = rewrite.reach(kept, version)
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

