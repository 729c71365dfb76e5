"""The verify harness: which entry points of a generated set verify calls and with how many
points (:class:`Call`), the one C and one Fortran driver program that makes every call
(:func:`harness_source`), and the judgement of what the calls wrote (:func:`judge_calls`).

Each call's points cycle through the reference cases; before it ``y`` is filled with the type's
largest value, and the :func:`guard` points after its last must stay so: an output never written, a
write past ``y[n]`` and a non-zero status all fail the call.
"""

from dataclasses import dataclass

import numpy as np

from rosenna.compare import Comparison, compare
from rosenna.strategy.point import host_block


@dataclass
class Result(Comparison):
    """One output's :class:`~rosenna.compare.Comparison` for one entry point in one generated
    language; ``call`` names the call its worst element came from."""

    lang: str = ""
    entry: str = "infer"
    call: str = ""
    points: int = 0  # the points of that call
    also: tuple = ()  # the point counts of the entry's other failing calls

    def message(self, got_label="got", want_label="want"):
        text = super().message(got_label, want_label)
        text = f"{self.call}: {text}" if self.call else text
        if not self.also:
            return text
        return f"{text}; also failing with {', '.join(map(str, self.also))} points"


#: The entry points verify runs, in this order; ``--entry`` picks among them.
ENTRIES = ("infer", "infer_batch", "infer_one")

#: Point counts of ``<name>_infer_batch`` on a per-point plan whose host SIMD block is 32 points
#: (single precision): one point, a partial block, a full block, a block and one point, and many
#: blocks shared by the threads (a partial one last). Another block size B gets 1, B-1, B, B+1, 1000.
BATCH_COUNTS = (1, 31, 32, 33, 1000)
#: Elements (one point's inputs, outputs and scratch, times the points) the batch calls of a
#: per-point plan may span: a plan of large points gets a shorter last call, or fewer calls
#: (:func:`batch_counts`).
BATCH_ELEMENTS = 1 << 22
#: Sample counts of ``<name>_infer_batch`` on a whole-field plan, whose samples are whole fields.
WHOLE_BATCH_COUNTS = (1, 3)
#: Threads the harness runs with (OMP_NUM_THREADS): the batch and the per-point loop are shared.
THREADS = 2
#: Points after each call's last that it must leave untouched (a write past y[n] is reported).
GUARD = 32
#: Elements the guard may hold: a plan of large points gets fewer guard points, at least one.
GUARD_ELEMENTS = 1 << 16


def guard(plan):
    """The guard points after each call's last: :data:`GUARD`, fewer for large points (one point
    after y[n] catches a write past it; more catch a block that skips points)."""
    return max(1, min(GUARD, GUARD_ELEMENTS // max(plan.ny, 1)))


@dataclass(frozen=True)
class Call:
    """One call the harness makes: ``entry`` over ``count`` points (one call of the batch entry,
    ``count`` calls of the per-point ones), point ``i`` being reference case ``i % cases``."""

    entry: str
    count: int

    def label(self, name):
        if self.entry == "infer_batch":
            return f"{name}_infer_batch with {self.count} point{'s' if self.count != 1 else ''}"
        return f"{name}_{self.entry} on {self.count} point{'s' if self.count != 1 else ''}"


def entries_of(plan):
    """The entry points the generated set offers for ``plan``."""
    return tuple(e for e in ENTRIES if e != "infer_one" or plan.emits_infer_one)


def _per_point(plan):
    return max(plan.nx + plan.ny + sum(plan.scratch), 1)


def batch_counts(plan):
    """The point counts of the batch calls for ``plan``: :data:`WHOLE_BATCH_COUNTS` for a
    whole-field plan; else 1, B-1, B, B+1 for its host block of B points
    (:func:`rosenna.strategy.point.host_block`) and :data:`BATCH_COUNTS`' last, shortened to fit
    :data:`BATCH_ELEMENTS` (left out when no longer than B+1); for points so large that the first
    four do not fit either, 1 and B+1 (a lone partial block; a full block and a partial one, one per
    thread)."""
    if plan.path == "whole":
        return WHOLE_BATCH_COUNTS
    block = host_block(plan, plan.tuned)
    short = tuple(sorted({1, max(block - 1, 1), block, block + 1}))
    fits = BATCH_ELEMENTS // _per_point(plan)
    if sum(short) > fits:
        return (1, block + 1)
    last = min(BATCH_COUNTS[-1], fits)
    return short + ((last,) if last > short[-1] else ())


def calls_for(plan, entries, cases):
    """The :class:`Call` list for ``entries`` (names from :data:`ENTRIES`) on ``cases`` reference points."""
    calls = []
    for entry in entries:
        if entry == "infer_batch":
            calls.extend(Call(entry, n) for n in batch_counts(plan))
        else:
            calls.append(Call(entry, cases))
    return calls


def points_needed(plan, entries, cases):
    """Reference points to draw: ``cases``, or the largest batch count when larger and within
    :data:`BATCH_ELEMENTS` (each point of a batch its own input, so a lane that reads another's point
    shows); past that the batch's points cycle through the cases."""
    largest = max([c.count for c in calls_for(plan, entries, cases) if c.entry == "infer_batch"], default=0)
    return max(cases, largest) if largest * _per_point(plan) <= BATCH_ELEMENTS else cases


C_HARNESS = """#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "{name}.h"

/* verify harness: argv[1]=points argv[2]=x.bin argv[3]=y.bin [argv[4]=weights]. Each call's
   points cycle through the points of x.bin; y.bin gets each call's outputs and then {guard}
   points the call must leave untouched; stdout one "status CALL CODE" line per call. */
#define GUARD {guard}
static {t} *y;

static void fill(int count)
{{
    for (size_t k = 0; k < (size_t)(count + GUARD) * {NY}; ++k)
        y[k] = {huge};
}}

static int put(FILE *f, int count)
{{
    size_t size = (size_t)(count + GUARD) * {NY};
    return fwrite(y, sizeof({t}), size, f) == size;
}}

int main(int argc, char **argv)
{{
    int points = atoi(argv[1]), status = 0;
    {t} *x = malloc(sizeof({t}) * (size_t)points * {NX});
    {t} *xb = malloc(sizeof({t}) * (size_t){most} * {NX});
    FILE *f = fopen(argv[2], "rb");
    y = malloc(sizeof({t}) * (size_t)({most} + GUARD) * {NY});
    if (!x || !xb || !y || !f || fread(x, sizeof({t}), (size_t)points * {NX}, f) != (size_t)points * {NX}) return 3;
    fclose(f);
    for (int i = 0; i < {most}; ++i)
        memcpy(xb + (size_t)i * {NX}, x + (size_t)(i % points) * {NX}, sizeof({t}) * {NX});
{init}    f = fopen(argv[3], "wb");
    if (!f) return 3;
{calls}    fclose(f);
    free(x);
    free(xb);
    free(y);
    (void)argc;
    (void)status;
    return 0;
}}
"""

C_CALLS = {
    "infer": """    fill({n});
#pragma omp parallel for schedule(static)
    for (int i = 0; i < {n}; ++i)
        {name}_infer(xb + (size_t)i * {NX}, y + (size_t)i * {NY});
    printf("status {k} 0\\n");
""",
    "infer_batch": """    fill({n});
    status = {name}_infer_batch({n}, xb, y, NULL);
    printf("status {k} %d\\n", status);
""",
    "infer_one": """    fill({n});
    status = 0;
    for (int i = 0; i < {n} && status == 0; ++i)
        status = {name}_infer_one(xb + (size_t)i * {NX}, y + (size_t)i * {NY}, NULL);
    printf("status {k} %d\\n", status);
""",
}
C_PUT = "    if (!put(f, {n})) return 3;\n"

F_HARNESS = """program verify_{name}
  use {name}_model
  implicit none
  integer, parameter :: guard = {guard}
  integer :: points, i, unit, out, status
  character(len=4096) :: arg
  real({name}_rk), allocatable :: x(:, :), xb(:, :), y(:, :)

  call get_command_argument(1, arg)
  read (arg, *) points
  allocate (x({name}_nx, points), xb({name}_nx, {most}), y({name}_ny, {most} + guard))
  call get_command_argument(2, arg)
  open (newunit=unit, file=trim(arg), access='stream', form='unformatted', status='old', action='read')
  read (unit) x
  close (unit)
  do i = 1, {most}
    xb(:, i) = x(:, mod(i - 1, points) + 1)
  end do
{init}  call get_command_argument(3, arg)
  open (newunit=out, file=trim(arg), access='stream', form='unformatted', status='replace', action='write')
{calls}  close (out)
end program verify_{name}
"""

F_CALLS = {
    "infer": """  y = huge(y)
  !$omp parallel do schedule(static)
  do i = 1, {n}
    call {name}_infer(xb(:, i), y(:, i))
  end do
  !$omp end parallel do
  print '(a, i0, a)', 'status ', {k}, ' 0'
""",
    "infer_batch": """  y = huge(y)
  call {name}_infer_batch({n}, xb, y, status)
  print '(a, i0, a, i0)', 'status ', {k}, ' ', status
""",
    "infer_one": """  y = huge(y)
  status = 0
  do i = 1, {n}
    if (status /= 0) exit
    call {name}_infer_one(xb(:, i), y(:, i), status)
  end do
  print '(a, i0, a, i0)', 'status ', {k}, ' ', status
""",
}
F_PUT = "  write (out) y(:, 1:{n} + guard)\n"


def harness_source(plan, lang, calls):
    """The verify harness for ``calls`` in ``lang`` ("c" or "fortran"): one program for every call."""
    most = max(c.count for c in calls)
    fmt = {"name": plan.name, "t": plan.ctype, "NX": plan.nx, "NY": plan.ny, "guard": guard(plan), "most": most,
           "huge": "DBL_MAX" if plan.precision == "double" else "FLT_MAX"}
    if lang == "c":
        init = "" if plan.embed else (
            f"    if ({plan.name}_init(argv[4]) != 0) {{ fprintf(stderr, \"init failed\\n\"); return 4; }}\n")
        body = "".join(C_CALLS[c.entry].format(n=c.count, k=k, **fmt) + C_PUT.format(n=c.count)
                       for k, c in enumerate(calls))
        return C_HARNESS.format(init=init, calls=body, **fmt)
    init = "" if plan.embed else (
        "  call get_command_argument(4, arg)\n"
        f"  call {plan.name}_init(trim(arg), status)\n  if (status /= 0) error stop 4\n")
    body = "".join(F_CALLS[c.entry].format(n=c.count, k=k, **fmt) + F_PUT.format(n=c.count)
                   for k, c in enumerate(calls))
    return F_HARNESS.format(init=init, calls=body, **fmt)


def compare_outputs(plan, lang, got, want, tolerance, call=""):
    """One :class:`Result` per output: the generated ``got`` (points x ny) against ``want`` (a list
    in output order, each stacked over the same points; one tensor may be listed twice)."""
    results = []
    for s, expected in zip(plan.outputs, want):
        cmp = compare(got[:, s.offset:s.offset + s.size], expected, output=s.name, tolerance=tolerance)
        results.append(Result(lang=lang, call=call, **vars(cmp)))
    return results


def judge_calls(plan, lang, calls, y, statuses, ref, tolerance):
    """The harness's outputs ``y`` (every call's points and guard, flat) against the reference:
    one :class:`Result` per entry and output, the worst of that entry's calls. A call that returned
    a non-zero status, or wrote into the guard points after its last, fails every output it touched."""
    huge, spare = np.finfo(y.dtype).max, guard(plan)
    per_entry = {}
    offset = 0
    for k, call in enumerate(calls):
        block = y[offset:offset + (call.count + spare) * plan.ny].reshape(call.count + spare, plan.ny)
        offset += (call.count + spare) * plan.ny
        order = np.arange(call.count) % ref.cases
        label = call.label(plan.name)
        rows = compare_outputs(plan, lang, block[:call.count], [w[order] for w in ref.outputs], tolerance, label)
        for index, (s, row) in enumerate(zip(plan.outputs, rows)):
            touched = np.flatnonzero((block[call.count:, s.offset:s.offset + s.size] != huge).any(axis=1))
            if statuses.get(k, 0) != 0:
                row.shape_error = f"returned status {statuses[k]}"
            elif touched.size:
                row.shape_error = (f"wrote past its last point (the {s.name!r} elements of point "
                                   f"{call.count + int(touched[0])} changed)")
            row.entry, row.points = call.entry, call.count
            per_entry.setdefault((call.entry, index), []).append(row)
    results = []
    for rows in per_entry.values():
        failing = [r for r in rows if not r.passed]
        worst = failing[0] if failing else max(rows, key=lambda r: r.rel_err)
        worst.also = tuple(r.points for r in failing[1:])
        worst.abs_err = max(r.abs_err for r in rows)
        worst.rel_err = max(r.rel_err for r in rows)
        results.append(worst)
    return results


def describe_calls(name, calls):
    """One line per entry: what the harnesses ran, e.g. ``m_infer_batch with 1, 31, 32, 33, 1000 points``."""
    lines = []
    for entry in ENTRIES:
        counts = [c.count for c in calls if c.entry == entry]
        if not counts:
            continue
        if entry == "infer_batch":
            lines.append(f"{name}_infer_batch with {', '.join(map(str, counts))} points per call, {THREADS} threads")
        elif entry == "infer":
            lines.append(f"{name}_infer on {counts[0]} points, one call each in a loop over {THREADS} threads")
        else:
            lines.append(f"{name}_{entry} on {counts[0]} points, one call each")
    return lines
