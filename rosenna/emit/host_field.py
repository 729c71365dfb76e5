"""The host branch of ``<name>_infer_one`` (no offload device): the whole-field loops on the host's
threads and SIMD lanes, C and Fortran from one table.

One ``omp parallel`` region holds the whole call, so the thread team is forked once per call, not
once per loop nest (a U-Net has about 90 nests). Inside it each region of :mod:`rosenna.parallel`
is a worksharing loop: the outer loops of its nest collapsed over the threads (``omp for``), the
innermost output loop (an op's last spatial axis, or its channels where the spatial position is
fixed) an ``omp simd`` loop whose iteration computes one output element: its accumulator lives in
a vector register over the whole kernel window and the channels, and every load of the window is
a contiguous vector. The ops' lowering already splits each conv and pool into an interior and its
borders (:mod:`rosenna.ops.conv`), so the interior's SIMD loop has no bounds test. The strategy
has transformed each parallel region (``Strategy.host_regions``, :mod:`rosenna.strategy.field.host`):
unrolled and jammed over its output channels (register blocks of up to 12), its tap loops unrolled
below the channel loop, its innermost loop split into SIMD loops of one vector each, and a fused
activation moved to a second SIMD loop; no sum is reordered; this module only renders it. A serial
region is an ``omp single``. Regions that :func:`rosenna.parallel.launch_groups` puts in one launch
(they touch disjoint elements, e.g. the border pieces of one conv) share one barrier: every
worksharing loop but the group's last is ``nowait``. With the tuning's ``host_wait='yield'`` (the
default) every construct is ``nowait``, the loops are handed out dynamically, and the barriers are
rosenna_team_wait (rosenna_host_sync.h; the Fortran module's ``team_wait``), which sleeps after a
short poll instead of spinning against a descheduled partner or the solver (docs/benchmarks-host.md).

Nested parallelism: called inside the solver's own active parallel region, the routine's
``omp parallel`` is a nested one, which OpenMP runs with a team of one thread unless the caller
raised ``max-active-levels`` (``OMP_MAX_ACTIVE_LEVELS``, ``omp_set_max_active_levels``): so a
solver thread may call it from ``omp single`` or ``omp master`` (one call at a time: the
intermediate buffers are shared) and the loops run there with their SIMD lanes, without
oversubscribing the cores. No orphaned worksharing construct is used, so such a call cannot bind
to the solver's team and wait for threads that never arrive.
"""

from rosenna.emit import host_conv
from rosenna.emit.notes import annotate, note, op_of
from rosenna.emit.render import used_loop_vars, used_scalars
from rosenna.loopir import Loop

#: C's vectorisable exp and tanh (rosenna_host_math.h, inlined and branch-free): libm's are scalar
#: calls, which keep GCC from vectorising an ``omp simd`` loop that holds one (a fused Tanh).
HOST_MATH = {"single": {"exp": "rosenna_expf", "tanh": "rosenna_tanhf"},
             "double": {"exp": "rosenna_exp", "tanh": "rosenna_tanh"}}

#: The multiply-add the C host paths write for the tuning's host_fma (a key of the language's math
#: table, rosenna.emit.lang; None: a multiply and an add), one choice for every C path so that they
#: agree bit for bit.
HOST_MADD = {"auto": "madd", "on": "fma", "off": None}

#: How each language writes the constructs; ``{nowait}`` is the clause or "", ``{private}`` the
#: private clause or "".
TABLE = {
    "c": {
        "team_open": ["#pragma omp parallel{threads}", "{"],
        "team_close": ["}"],
        "for": "#pragma omp for{collapse}{schedule}{nowait}",
        "for_simd": "#pragma omp for simd{schedule}{nowait}",
        "for_end": None,
        "for_simd_end": None,
        "simd": "#pragma omp simd{simdlen}",
        "single": "#pragma omp single{nowait}",
        "single_end": None,
        "block": ("{", "}"),
        "nowait": " nowait",
        "private": None,
        "scalar": "{t} {names};",
        "arrived": "rosenna_team team = ROSENNA_TEAM_INIT;",
        "passed": "int team_passed = 0;",
        "wait": "rosenna_team_wait(&team, &team_passed, {spins});",
        "done": "rosenna_team_done(&team, &team_passed, {spins});",
        "team_end": "rosenna_team_end(&team);",
    },
    "fortran": {
        "team_open": ["!$omp parallel{threads}{private}"],
        "team_close": ["!$omp end parallel"],
        "for": "!$omp do{collapse}{schedule}",
        "for_simd": "!$omp do simd{schedule}{private}",
        "for_end": "!$omp end do{nowait}",
        "for_simd_end": "!$omp end do simd{nowait}",
        "simd": "!$omp simd{simdlen}{private}",
        "single": "!$omp single",
        "single_end": "!$omp end single{nowait}",
        "block": None,
        "nowait": " nowait",
        "private": " private({names})",
        "scalar": None,
        "arrived": "team = 0",
        "passed": "team_passed = 0",
        "wait": "call team_wait(team, team_passed, {spins}, .false.)",
        "done": "call team_wait(team, team_passed, {spins}, .true.)",
        "team_end": None,
    },
}

#: The variables of the yielding barrier (:func:`yields`): the arrivals of the call, shared, and
#: the barriers each thread has passed, private (an integer like the loop variables).
ARRIVED, PASSED = "team", "team_passed"


def yields(plan):
    """Whether the host threads wait at rosenna_team_wait (rosenna_host_sync.h; the Fortran
    module's ``team_wait``), which yields the core, instead of at OpenMP's spinning barriers
    (the tuning's ``host_wait``)."""
    return plan.tuned.host_wait == "yield"


def _private(table, names):
    return table["private"].format(names=", ".join(names)) if table["private"] and names else ""


def host_names(plan, regions):
    """The scalars and loop variables the host form uses (Fortran declares them); ``regions``:
    the strategy's :class:`rosenna.strategy.HostRegions`."""
    scalars, loops = set(), set()
    for kind, chain, body, _, _ in regions:
        if kind == "conv":  # C only (its own declarations): the Fortran module renders regions.plain()
            continue
        if kind == "parallel":
            loops.update(inner.vector_var for inner in body if inner.vectors)
            body = [s for inner in body for s in inner.body]
        scalars.update(used_scalars(body))
        loops.update(used_loop_vars(body))
        loops.update(loop.var for loop in chain)
    if yields(plan):
        loops.add(PASSED)
    return sorted(scalars), sorted(loops)


def host_lines(plan, regions, lang, renderer, depth, threads=None):
    """The host branch's statements of ``<name>_infer_one``, as lines indented to ``depth``:
    ``regions`` (the strategy's :class:`rosenna.strategy.HostRegions`) rendered.
    ``threads``: an expression for the team's size (``num_threads``), or None."""
    table = TABLE[lang.name]
    t = plan.ctype
    pad = lang.indent * depth
    team = _private(table, [name for names in host_names(plan, regions) for name in names])
    waits = yields(plan)
    lines = [pad + table["arrived"]] if waits else []
    size = f" num_threads({threads})" if threads else ""
    lines += [(pad if lang.indent_directives else "") + table["team_open"][0].format(private=team, threads=size)]
    lines += [pad + text for text in table["team_open"][1:]]
    inner = depth + (1 if table["block"] else 0)
    if waits:
        lines.append(lang.indent * inner + table["passed"])
    wait = lang.indent * inner + table["wait"].format(spins=plan.tuned.host_wait_spins)
    planned, op = op_of(plan), None
    for i, (kind, chain, body, notes, nowait) in enumerate(regions):
        for text in notes:
            lines.append(lang.indent * inner + lang.comment.format(text=text))
            op = planned.get(text)
        barrier = not nowait and waits  # the yielding barrier after the construct instead of its own
        nowait = table["nowait"] if nowait or waits else ""
        if kind == "parallel":
            lines.append(lang.indent * inner + lang.comment.format(text=_nest_note(op, chain, body)))
            lines += _parallel(chain, body, lang, table, renderer, inner, nowait, t, waits)
        elif kind == "conv":
            lines.append(lang.indent * inner + lang.comment.format(text=_conv_note(body)))
            lines += host_conv.lines(plan, body, renderer, inner, nowait, " schedule(dynamic)" if waits else "",
                                     lambda level, text: _directive(lang, level, text))
        else:
            lines += _serial(annotate(body, op), lang, table, renderer, inner, nowait, t)
        if waits and i == len(regions) - 1:  # the master waits for the rest before the join
            lines.append(lang.indent * inner + table["done"].format(spins=plan.tuned.host_wait_spins))
        elif barrier:
            lines.append(wait)
    lines += [pad + text for text in table["team_close"]]
    if waits and table["team_end"]:
        lines.append(pad + table["team_end"])
    return lines


def _nest_note(op, chain, loops):
    """:func:`rosenna.emit.notes.note` of a parallel region: its outer loops, and its innermost
    variable as each of its SIMD loops (:class:`rosenna.strategy.field.host_loops.Inner`) runs it."""
    outer = {loop.var: loop.extent for loop in chain[:-1]}
    return note(op, [stmt for inner in loops for stmt in
                     ([Loop(inner.vector_var, inner.vectors, [Loop(chain[-1].var, inner.extent, inner.body)])]
                      if inner.vectors else [Loop(chain[-1].var, inner.extent, inner.body)])], outer)


def _conv_note(conv):
    """The comment over a blocked Conv: its form and block."""
    return (f"register-blocked direct convolution: {conv.channels} channels x {conv.rows} rows x {conv.lanes} columns "
            f"per block, over a zero-padded tile of the input rows")


def _directive(lang, depth, text):
    return (lang.indent * depth if lang.indent_directives else "") + text


def _declare(table, level, lang, t, scalars):
    if table["scalar"] and scalars:
        return [lang.indent * level + table["scalar"].format(t=t, names=", ".join(scalars))]
    return []


def _parallel(chain, loops, lang, table, renderer, depth, nowait, t, dynamic=False):
    """A parallel region: its outer loops shared by the threads, its innermost loop the SIMD loops
    of :func:`simd_loops` (one alone for a region of one loop: ``omp for simd``). ``dynamic``: the
    iterations handed out as threads come (with the yielding barrier), so a thread that runs
    takes the share of one that is descheduled instead of waiting for it."""
    schedule = " schedule(dynamic)" if dynamic else ""
    body = [s for inner in loops for s in inner.body]
    private = _private(table, used_scalars(body) + used_loop_vars(body))
    out = []
    scalar = len(chain) == 1 and not loops[0].simd  # a worksharing loop alone down a column
    if len(chain) == 1 and not scalar:
        simd_schedule = " schedule(simd:dynamic)" if dynamic else ""  # chunks of whole vectors
        out.append(_directive(lang, depth, table["for_simd"].format(nowait=nowait, private=private, schedule=simd_schedule)))
    else:
        collapse = f" collapse({len(chain) - 1})" if len(chain) > 2 else ""
        out.append(_directive(lang, depth, table["for"].format(collapse=collapse, nowait=nowait, schedule=schedule)))
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


def fortran_team_wait(plan):
    """The Fortran module's ``team_wait``, rosenna_team_wait of rosenna_host_sync.h: polls the
    shared count of arrivals ``spins`` times, then sleeps between polls ("" when the threads wait
    at OpenMP's barriers)."""
    if not yields(plan):
        return ""
    return """
  !> The barrier of the host threads (rosenna_rt.h's rosenna_team_wait): arrived counts the arrivals
  !> of every thread of the innermost parallel region since the call began (shared, zero before the
  !> region), passed the barriers this thread has passed (private, zero at the region's start). It
  !> polls arrived spins times, then sleeps 20 us between polls (usleep; C's routine sleeps on a
  !> condition variable, which Fortran cannot declare portably), so a thread that arrives first
  !> does not hold the core a descheduled partner (or the solver) needs, as OpenMP's spinning
  !> barriers do. The seq_cst atomics are flushes: every write before the barrier is seen after it.
  !> done: the wait before the region's end, where only the master waits (the others go on to the
  !> region's join, so the master never spins there for a partner that slept here).
  subroutine team_wait(arrived, passed, spins, done)
    integer, intent(inout) :: arrived, passed
    integer, intent(in) :: spins
    logical, intent(in) :: done
    interface
      function usleep(microseconds) result(status) bind(C, name='usleep')
        import :: c_int
        integer(c_int), value :: microseconds
        integer(c_int) :: status
      end function usleep
    end interface
    integer :: team, now, polls, me
    integer(c_int) :: slept

    team = 1
    me = 0
    !$ team = omp_get_num_threads()
    !$ me = omp_get_thread_num()
    passed = passed + 1
    !$omp atomic capture seq_cst
    arrived = arrived + 1
    now = arrived
    !$omp end atomic
    if (done .and. me /= 0) return
    polls = 0
    do while (now < team * passed)
      if (polls >= spins) slept = usleep(20_c_int)
      polls = polls + 1
      !$omp atomic read seq_cst
      now = arrived
    end do
  end subroutine team_wait
"""
