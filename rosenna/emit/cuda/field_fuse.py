"""The phases computed where they are read, rendered: the value functions a reader of such a
phase calls, and the C of a phase over one sample's pointers.

Which phases are computed where they are read, and the storage of those kept, is the strategy's
(:class:`rosenna.strategy.Schedule`, decided by rosenna/strategy/field/fusion.py). Per region
of such a phase, ``<name>_value<k>_<r>(x, y, s, <its loop indices>)`` runs the region's
statements for one element of sample ``s``; a reader whose index gives those loop indices
exactly (:meth:`rosenna.strategy.Schedule.region_indices`) calls it with them, any other calls
``<name>_value<k>(x, y, s, o)``, which decodes element ``o`` against each region's store index
and picks the region. The same terms in the same order: the results do not change by a bit.
"""

import re

from rosenna.emit.lang import C
from rosenna.emit.render import Renderer, count, used_scalars
from rosenna.emit.whole import sample_pointers, sample_resolver
from rosenna.loopir import Loop, Ref, walk
from rosenna.strategy import Schedule


def renderer(sched):
    """The :class:`FieldRenderer` of a schedule's phases."""
    return FieldRenderer(sched.plan, sched.values)


class FieldRenderer(Renderer):
    """C over one sample's pointers (:func:`rosenna.emit.whole.sample_resolver`). A load of a value
    computed in place calls its region's function with the region's indices where they follow
    from the reader's (:meth:`rosenna.strategy.Schedule.region_indices`; the reader's loops named by :meth:`enter`), else the
    function of element o, which decodes o."""

    def __init__(self, plan, values=()):
        super().__init__(C, plan.precision, sample_resolver(plan))
        self.name, self.storage, self.extents = plan.name, plan.storage, {}
        self.producers = dict(values)

    def enter(self, chain, body):
        """The loops of the region about to be rendered (a name used twice: its larger extent)."""
        self.extents = {}
        for loop in list(chain) + [s for s in walk(body) if isinstance(s, Loop)]:
            self.extents[loop.var] = max(loop.extent, self.extents.get(loop.var, 0))

    def expr(self, e, parent=0, right=False):
        if isinstance(e, Ref) and self.storage[e.buf][0] == Schedule.INLINE:
            ident = self.storage[e.buf][1]
            fn = C.symbol(self.name, ident)
            for k, m in enumerate(self.producers[ident].members):
                found = Schedule.region_indices(e.idx, self.extents, m)
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


def value_functions(sched, code, qualifier="static __device__ __forceinline__"):
    """The value functions of the phases computed in place that ``code`` calls (directly or
    through another), in dependence order: per region ``<fn>_<k>(x, y, s, <its loop indices>)``,
    which runs the region's statements for one element, and ``<fn>(x, y, s, o)``, which finds
    the region and indices of element o."""
    plan, t = sched.plan, sched.plan.ctype
    render = renderer(sched)
    params = f"const {t} *ROSENNA_RESTRICT x, {t} *ROSENNA_RESTRICT y, long s"
    out = _Functions()
    for ident, launch in sched.values:
        fn = C.symbol(plan.name, ident)
        notes = "; ".join(launch.notes) or "a phase"
        several = len(launch.members) > 1
        decode = []
        for k, m in enumerate(launch.members):
            render.enter(m.chain, m.body)
            store = m.body[-1]
            scalars = used_scalars(m.body)
            run = ([f"    {t} {', '.join(scalars)};"] if scalars else []) + render.lines(m.body[:-1], 1) + \
                [f"    return {render.expr(store.expr)};"]
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
