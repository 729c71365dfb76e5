"""The Fortran module's whole-field routines: ``<name>_infer_one(x, y, status)`` and, for a
whole-field plan, the body of ``<name>_infer_batch`` with its private batched routines.

Each routine has one branch per offload model, rendered from that model's entry of
:data:`rosenna.emit.whole.DIRECTIVES` ("fortran": OpenMP target, "fortran_acc": OpenACC), and
the host loops last. A branch is compiled where its preprocessor ``guard`` holds (the module is
a ``.F90`` file) and taken where its ``device`` macro is true at run time, as C's
``ROSENNA_OMP_DEVICE()`` and ``ROSENNA_ACC_DEVICE()`` choose (rosenna_rt.h): OpenMP with a
default device that is not the host; OpenACC, in a build without OpenMP, with a device of the
current type. Either macro given on the command line wins (``-DROSENNA_ACC_DEVICE=.true.`` runs
the OpenACC regions under GCC's host fallback; the tests do).

``<name>_infer_batch`` maps x and y once (nothing is copied for data already on the device) and
runs the samples in chunks of :func:`rosenna.emit.whole.batch_samples`: each op one region over
every sample of the chunk, the intermediates in the module's ``wsb<i>`` (``ws<i>`` are
``<name>_infer_one``'s). The chunk's routine takes x and y as explicit-shape arrays of the
chunk (sequence association from ``x(1, start)``), so a subscript is the one-sample subscript
plus ``s`` times the sample's size. Without a device it calls ``<name>_infer_one`` per sample.
"""

from rosenna.emit.host_field import ARRIVED, host_lines, host_names, yields
from rosenna.emit.lang import FORTRAN
from rosenna.emit.render import Renderer, buffer_ident, resolver, used_loop_vars, used_scalars
from rosenna.emit.whole import (DIRECTIVES, SAMPLE, available, batch_buffer, batch_samples, batched_regions, fault_check,
                                region_lines)

#: The offload models of the Fortran routines, in the order their branches are tried.
MODELS = ("fortran", "fortran_acc")
#: The preprocessor condition of a build with at least one of them (what only their branches use
#: is declared under it, so that a build with neither has no unused names).
ANY_MODEL = "defined(_OPENMP) || defined(_OPENACC)"


def _batched(plan):
    """Whether ``<name>_infer_batch`` takes the whole-field path (batched regions)."""
    return available(plan) and plan.path == "whole"


def preamble(plan):
    """Preprocessor lines before the module: each model's device macro, unless given."""
    if not available(plan):
        return []
    out = ["! Whether a branch of the whole-field routines runs on a device (else the host loops), as in",
           "! rosenna_rt.h. A definition on the command line wins, e.g. -DROSENNA_ACC_DEVICE=.true."]
    for model in MODELS:
        table = DIRECTIVES[model]
        out += [f"#if {table['guard']} && !defined({table['device']})",
                f"#define {table['device']} {table['test']}",
                "#endif"]
    return out


def uses(plan):
    """Module ``use`` lines the branches need beyond the module's own."""
    out = []
    for model in MODELS if available(plan) else ():
        if DIRECTIVES[model]["uses"]:
            out += [f"#if {DIRECTIVES[model]['guard']}", f"  {DIRECTIVES[model]['uses']}", "#endif"]
    return out


def paced(plan):
    """Whether the module's whole-field routine chooses its host team's size (pace_threads)."""
    return available(plan) and bool(plan.tuned.host_pace)


def declarations(plan):
    """Module-level lines: the intermediates of ``<name>_infer_one`` (``ws<i>``) and of the
    batched path (``wsb<i>``, :func:`batch_samples` samples of each), on every device."""
    if not available(plan):
        return []
    def declare(name, size):
        return [f"  real(rk) :: {name}({size})", f"  !$omp declare target({name})", f"  !$acc declare create({name})"]

    out = [line for i, size in enumerate(plan.scratch) for line in declare(buffer_ident(i), size)]
    if paced(plan):  # pace_threads' state: the last three calls' seconds of each team size, calls made
        out += ["  real(real64) :: pace_times(3, 0:1) = 0", "  integer(int64) :: pace_calls = 0, pace_recorded(0:1) = 0",
                "  integer :: pace_backoff = 0"]
    if _batched(plan) and plan.scratch:
        samples = batch_samples(plan)
        out += [f"#if {ANY_MODEL}"] + [line for i, size in enumerate(plan.scratch)
                                       for line in declare(batch_buffer(plan, i, FORTRAN), samples * size)] + ["#endif"]
    return out


def interface(plan):
    """Lines inside the module's interface block: ``<name>_infer_one_dev`` bound to the C symbol."""
    if not available(plan):
        return []
    n = plan.name
    return [f"    !> The C library's {n}_infer_one over device pointers (link lib{n}.a).",
            f"    function {n}_infer_one_dev(x, y, stream) result(status) bind(C, name='{n}_infer_one')",
            "      import :: c_int, c_ptr",
            "      type(c_ptr), value :: x, y, stream",
            "      integer(c_int) :: status",
            f"    end function {n}_infer_one_dev"]


def publics(plan):
    return [f"{plan.name}_infer_one", f"{plan.name}_infer_one_dev"] if available(plan) else []


def _branch(table, why, body):
    """One model's branch of a routine: compiled under its guard, taken when its device is there,
    x and y mapped around ``body`` (lines at depth 3)."""
    return [f"#if {table['guard']}",
            f"    ! {why}.",
            f"    if ({table['device']}) then",
            f"      {table['data']}",
            *body,
            f"      {table['data_end']}",
            "      return",
            "    end if",
            "#endif"]


def _flags(plan, batched=False):
    """The module's array of the fault flags (:func:`rosenna.emit.whole.fault_check`): ``ws<i>``
    of ``<name>_infer_one``, with ``batched`` the batched path's ``wsb<i>``; None without one."""
    if plan.fault_buffer is None:
        return None
    if batched:
        return batch_buffer(plan, plan.fault_buffer, FORTRAN)
    return FORTRAN.symbol(plan.name, buffer_ident(plan.fault_buffer))


def _ready(plan):
    n = plan.name
    return (f"    if (.not. ready) then\n      status = {n}_status_device\n      return\n    end if\n"
            if not plan.embed else "")


def _locals(scalars, loops):
    """Declarations of real scalars and integer loop variables."""
    out = [f"    real(rk) :: {name}" for name in sorted(scalars)]
    return out + ([f"    integer :: {', '.join(sorted(loops))}"] if loops else [])


def subroutine(plan, regions):
    """The module procedure ``<name>_infer_one(x, y, status)``; ``regions``: the host form's
    (``Strategy.host_regions``)."""
    if not available(plan):
        return ""
    n = plan.name
    renderer = Renderer(FORTRAN, plan.precision, resolver(plan, FORTRAN, whole_field=True))
    branches, flags = [], _flags(plan)
    index = [f"status = {n}_status_index"]
    for model in MODELS:
        table = DIRECTIVES[model]
        branches += _branch(table, table["why"], region_lines(plan, FORTRAN, table, renderer, 3)
                            + fault_check(plan, FORTRAN, table, flags, 1, 3, index))
    period = plan.tuned.host_pace
    regions = regions.plain()  # the blocked convs as the plan's loops (rosenna/emit/host_conv.py is C)
    host = host_lines(plan, regions, FORTRAN, renderer, 2, "team_size" if period else None)
    names = host_names(plan, regions)
    decls = _locals(*names) + ([f"    integer :: {ARRIVED}"] if yields(plan) else [])
    if period:  # the team's size chosen by the time calls took (pace_threads)
        decls += ["    integer :: team_size", "    real(real64) :: started"]
        host = ([f"    team_size = pace_threads({period}, {plan.tuned.host_pace_cap})", "    started = pace_clock()"] + host
                + ["    call pace_record(team_size, pace_clock() - started)"])
    host += fault_check(plan, FORTRAN, None, flags, 1, 2, index)
    device = _locals(sorted(set(used_scalars(plan.field_body)) - set(names[0])),
                     sorted(set(used_loop_vars(plan.field_body)) - set(names[1])))
    if device:  # names only the offload branches use
        decls += [f"#if {ANY_MODEL}", *device, "#endif"]
    nl = "\n"
    return f"""
  !> One sample over the whole field, x({n}_nx) -> y({n}_ny): one parallel loop per op, the
  !> intermediate activations in module buffers on the device, shared by every call (calls must not
  !> overlap). Without an offload device the same loops run on the host's threads.
  subroutine {n}_infer_one(x, y, status)
    real(rk), intent(in) :: x({n}_nx)
    real(rk), intent(out) :: y({n}_ny)
    integer, intent(out) :: status
{nl.join(decls)}

{_ready(plan)}    status = {n}_status_ok
{nl.join(branches)}
    ! No offload device: the same loops on the host's threads.
{nl.join(host)}
  end subroutine {n}_infer_one
{PACE if period else ""}"""


#: The Fortran form of rosenna_rt.h's rosenna_pace (rosenna_host_sync.h: the reasons there).
PACE = """
  !> The team size of the host branch of this module's whole-field routine: every thread OpenMP
  !> offers, or one, whichever ran faster by the median of its last three calls, the other once
  !> every gap calls (period, doubled after each such trial that loses up to cap, period again once
  !> the choice changes). With a core held by other work a team waits a scheduler's time slice for
  !> a descheduled partner at its fork and joins; then one thread is faster. The results do not
  !> depend on the team size.
  function pace_threads(period, cap) result(threads)
    integer, intent(in) :: period, cap
    integer :: threads, backoff
    integer(int64) :: calls, gap
    real(real64) :: team, solo

    threads = 1
    !$ threads = omp_get_max_threads()
    !$ if (omp_in_parallel()) return
    if (threads < 2 .or. period < 1) return
    !$omp atomic capture
    calls = pace_calls
    pace_calls = pace_calls + 1
    !$omp end atomic
    team = pace_median(1)
    solo = pace_median(0)
    if (team <= 0) return
    !$omp atomic read
    backoff = pace_backoff
    gap = min(int(max(cap, period), int64), ishft(int(period, int64), max(0, backoff)))
    if (solo <= 0 .or. ((solo < team) .neqv. (mod(calls, gap) == 0))) threads = 1
  end function pace_threads

  !> The median of the last three times of team size size (0: one thread, 1: the team; 0: none).
  function pace_median(size) result(median)
    integer, intent(in) :: size
    real(real64) :: median, a, b, c

    !$omp atomic read
    a = pace_times(1, size)
    !$omp atomic read
    b = pace_times(2, size)
    !$omp atomic read
    c = pace_times(3, size)
    median = max(min(a, b), min(max(a, b), c))
  end function pace_median

  !> Whether team size size is the slower by the medians (false while either is not timed).
  function pace_slower(size) result(slower)
    integer, intent(in) :: size
    logical :: slower
    real(real64) :: mine, other

    mine = pace_median(size)
    other = pace_median(1 - size)
    slower = mine > 0 .and. other > 0 .and. (mine > other .or. (size == 0 .and. .not. mine < other))
  end function pace_slower

  !> Takes the time of a call made with threads threads (pace_threads); a trial that lost backs
  !> off, a change of the choice starts the trials afresh.
  subroutine pace_record(threads, seconds)
    integer, intent(in) :: threads
    real(real64), intent(in) :: seconds
    integer(int64) :: slot
    integer :: most, size, k, backoff
    logical :: trial, winner

    most = 1
    !$ most = omp_get_max_threads()
    size = 1
    if (threads == 1 .and. most > 1) size = 0
    trial = pace_slower(size)
    winner = pace_slower(1 - size)
    !$omp atomic capture
    slot = pace_recorded(size)
    pace_recorded(size) = pace_recorded(size) + 1
    !$omp end atomic
    do k = 1, 3  ! the first two calls of a size fill all three slots (the first starts the threads)
      if (slot < 2 .or. k == mod(slot, 3_int64) + 1) then
        !$omp atomic write
        pace_times(k, size) = max(seconds, 1e-9_real64)  ! 0 stands for "not timed"
      end if
    end do
    if (trial .or. winner) then
      !$omp atomic read
      backoff = pace_backoff
      if (pace_slower(size) .neqv. trial) then
        backoff = 0
      else if (trial) then
        backoff = min(backoff + 1, 30)
      end if
      !$omp atomic write
      pace_backoff = backoff
    end if
  end subroutine pace_record

  !> Wall-clock seconds (OpenMP's clock; 0 without OpenMP, where pace_threads gives one thread).
  function pace_clock() result(seconds)
    real(real64) :: seconds

    seconds = 0
    !$ seconds = omp_get_wtime()
  end function pace_clock
"""


def batch_statements(plan):
    """``<name>_infer_batch`` of a whole-field plan: (the end of its doc comment, its
    declarations, its statements after the ready check and ``status = ok``)."""
    n, samples = plan.name, batch_samples(plan)
    lines, index = [], [f"status = {n}_status_index"]
    for model in MODELS:
        table = DIRECTIVES[model]
        lines += _branch(table, f"{table['why']} over up to {samples} samples", [
            f"      ! the samples in chunks of {samples}, each op one region over a chunk",
            f"      do i = 1, n, {samples}",
            f"        call {table['samples']}(min({samples}, n - i + 1), x(1, i), y(1, i))",
            "      end do"] + fault_check(plan, FORTRAN, table, _flags(plan, batched=True), samples, 3, index))
    lines += [f"    ! On the host: one sample at a time, each through the host loops of {n}_infer_one."]
    if plan.fault_buffer is None:
        lines += ["    do i = 1, n",
                  f"      call {n}_infer_one(x(:, i), y(:, i), status)",
                  f"      if (status /= {n}_status_ok) return",
                  "    end do"]
        decls = "    integer :: i\n"
    else:  # every sample runs; an index outside its axis in any gives INDEX at the end
        lines += ["    faulted = 0",
                  "    do i = 1, n",
                  f"      call {n}_infer_one(x(:, i), y(:, i), status)",
                  f"      if (status == {n}_status_index) then",
                  "        faulted = 1",
                  f"      else if (status /= {n}_status_ok) then",
                  "        return",
                  "      end if",
                  "    end do",
                  f"    if (faulted /= 0) status = {n}_status_index"]
        decls = "    integer :: i, faulted\n"
    doc = (f"on an offload device each op one region over up to {samples} samples at once (data already "
           f"mapped there is not copied again), else one sample at a time through {n}_infer_one.")
    return doc, decls, "\n".join(lines) + "\n"


def batch_routines(plan):
    """The private routines of the batched regions, one per offload model (in the builds that
    have it)."""
    n = plan.name
    decls = [f"    real(rk) :: {name}" for name in used_scalars(plan.field_body)]
    decls.append(f"    integer :: {', '.join([SAMPLE] + used_loop_vars(plan.field_body))}")
    nl, out = "\n", []
    for model in MODELS:
        table = DIRECTIVES[model]
        body = batched_regions(plan, FORTRAN, table, 2, "x, y")
        out.append(f"""
#if {table['guard']}
  !> The {table['title']} regions of {n}_infer_batch: each op one region over the count samples
  !> here. x and y are the samples' part of its arrays, on the device; the intermediates are wsb<i>.
  subroutine {table['samples']}(count, x, y)
    integer, intent(in) :: count
    real(rk), intent(in) :: x({n}_nx * count)
    real(rk), intent(inout) :: y({n}_ny * count)
{nl.join(decls)}

{nl.join(body)}
  end subroutine {table['samples']}
#endif
""")
    return "".join(out)
