"""The Fortran module ``<name>_model.F90`` and its ``<name>_fortran.mk`` recipe."""

from rosenna import abi, plan as planner
from rosenna.emit import fortran_reader, whole_fortran
from rosenna.emit.fortran_wrap import wrap
from rosenna.emit.host_field import ARRIVED, PASSED, fortran_team_wait, yields
from rosenna.emit.lang import FORTRAN
from rosenna.emit.notes import annotate
from rosenna.emit.render import Renderer, count, resolver, scratch_used, used_loop_vars, used_scalars
from rosenna.loopir import FAULT, counts_faults
from rosenna.strategy import of as strategy_of

#: Fact of the output's format, not of its speed: weight literals per line.
VALUES_PER_LINE = 4
#: Fact of Fortran: a declaration may not have more than 255 continuation lines, so arrays up to
#: this many values are initialised in their declaration (200 lines of 4), larger ones by DATA
#: statements of DATA_CHUNK values.
INLINE_LIMIT = 800
#: Fact of Fortran (the same limit): values per DATA statement.
DATA_CHUNK = 400


def _weight_decls(plan):
    out = []
    for w in plan.weights:
        if plan.embed and w.size <= INLINE_LIMIT:
            lit = FORTRAN.weight_literals(w, plan.precision)
            rows = [", ".join(lit[i:i + VALUES_PER_LINE]) for i in range(0, len(lit), VALUES_PER_LINE)]
            body = ", &\n      ".join(rows)
            out.append(f"  real(rk), protected :: {w.ident}({w.size}) = [ &\n      {body} ]")
        else:
            # file-loaded: zero until <name>_init succeeds (explicitly: -finit-real=nan must not change it)
            out.append(f"  real(rk), protected :: {w.ident}({w.size})" + ("" if plan.embed else " = 0.0_rk"))
            if plan.embed:
                lit = FORTRAN.weight_literals(w, plan.precision)
                for start in range(0, w.size, DATA_CHUNK):
                    chunk = lit[start:start + DATA_CHUNK]
                    rows = [", ".join(chunk[i:i + VALUES_PER_LINE]) for i in range(0, len(chunk), VALUES_PER_LINE)]
                    out.append(f"  data {w.ident}({start + 1}:{start + len(chunk)}) / &\n      "
                               + ", &\n      ".join(rows) + " /")
        out.append(f"  !$omp declare target({w.ident})")
        out.append(f"  !$acc declare {'copyin' if plan.embed else 'create'}({w.ident})")
    return out


def _declarations(plan, stmts, block=0, extra_int=()):
    out = []
    for name in used_scalars(stmts):
        out.append(f"    real(rk) :: {name}{f'({block})' if block else ''}")
    used = scratch_used(plan, stmts)
    for i, size in enumerate(plan.scratch):
        if i in used:
            out.append(f"    real(rk) :: t{i}({size * (block or 1)})")
    ints = list(used_loop_vars(stmts)) + list(extra_int)
    if ints:
        out.append(f"    integer :: {', '.join(ints)}")
    return out


def module(plan, stamp, block, host_body=(), widths=(), host_regions=None):
    """``<name>_model.F90``; ``host_body``: the host batch block's statements (the plan's when
    empty), rosenna.strategy.Strategy.host_body; ``widths``: the lanes of the C library's SIMD
    variants that ``<name>_infer_simd`` binds to (rosenna.emit.c.simd_widths); ``host_regions``:
    the host form of ``<name>_infer_one``, rosenna.strategy.Strategy.host_regions (None: the
    default strategy's for ``plan``)."""
    if host_regions is None and plan.emits_infer_one:
        host_regions = strategy_of(plan).host_regions
    n = plan.name
    host_body = list(host_body) or plan.body
    point = Renderer(FORTRAN, plan.precision, resolver(plan, FORTRAN))
    blocked = Renderer(FORTRAN, plan.precision, resolver(plan, FORTRAN, block), block=block)
    kind = "real64" if plan.precision == "double" else "real32"
    width = max(len(f"{n}_status_{key.lower()}") for _, key, _ in abi.STATUS_CODES)
    statuses = "\n".join(f"  integer, parameter, public :: {f'{n}_status_{key.lower()}':<{width}} = {code:>2}  ! {text}"
                         for code, key, text in abi.STATUS_CODES)
    layout = [f"! x: {count(plan.nx, 'value')} per point; y: {count(plan.ny, 'value')} per point."]
    for tag, slices in (("x", plan.inputs), ("y", plan.outputs)):
        for s in slices:
            layout.append(f"!   {tag}({s.offset + 1}:{s.offset + s.size})  {s.ident}  shape {list(s.shape)}")
    publics = [f"{n}_infer", f"{n}_infer_batch", f"{n}_infer_batch_dev"] + ([] if plan.embed else [f"{n}_init", f"{n}_reload", f"{n}_set_weights"])
    publics += [f"{n}_infer_simd"] if widths else []
    publics += whole_fortran.publics(plan)
    file_loaded = not plan.embed

    point_lines = _declarations(plan, plan.body) + [""] + point.lines(annotate(plan.body), 2)
    block_lines = (_declarations(plan, host_body, block, extra_int=("p", "e"))
                   + [f"    real(rk) :: xb({n}_nx * {block}), yb({n}_ny * {block})", "",
                      "    ! the block's inputs transposed, point index innermost (zeros past count)",
                      f"    do e = 0, {n}_nx - 1",
                      "      !$omp simd",
                      f"      do p = 0, {block - 1}",
                      f"        xb(e*{block} + p + 1) = merge(x(e + 1, min(p + 1, count)), 0.0_rk, p < count)",
                      "      end do",
                      "    end do"]
                   + blocked.lines(annotate(host_body), 2)
                   + ["    ! the outputs back, one point a column",
                      "    do p = 0, count - 1",
                      f"      do e = 0, {n}_ny - 1",
                      f"        y(e + 1, p + 1) = yb(e*{block} + p + 1)",
                      "      end do",
                      "    end do"])
    faults = counts_faults(plan.body)
    if faults:  # a point with an index outside its axis: the INDEX status (its outputs are NaN)
        block_lines += ["    faults = 0", "    ! whether a point met an index outside its axis", "    do p = 0, count - 1", f"      if ({FAULT}(p + 1) > 0) faults = 1",
                        "    end do"]
    ready_check = ("    if (.not. ready) then\n"
                   f"      status = {n}_status_device\n      return\n    end if\n") if file_loaded else ""
    batch_decls = "    logical :: on_device\n    integer :: i, start\n" + ("    integer :: faults, fault\n" if faults else "")
    call = f"call infer_block(min({block}, n - start + 1), x(:, start:), y(:, start:){', fault' if faults else ''})"
    blocks = [f"do start = 1, n, {block}", f"  {call}", *(["  faults = max(faults, fault)"] if faults else []), "end do"]
    reduction = " reduction(max: faults)" if faults else ""
    if yields(plan):  # blocks handed out as threads come; the yielding barrier before the join
        batch_decls += f"    integer :: {ARRIVED}, {PASSED}\n"
        batch_host = [f"{ARRIVED} = 0", f"!$omp parallel private(start, {PASSED}{', fault' if faults else ''}){reduction}",
                      f"{PASSED} = 0", f"! the points in blocks of {block}, handed out as threads come",
                      "!$omp do schedule(dynamic)", *blocks, "!$omp end do nowait",
                      f"call team_wait({ARRIVED}, {PASSED}, {plan.tuned.host_wait_spins}, .true.)", "!$omp end parallel"]
    else:
        batch_host = [f"! the points in blocks of {block}, a block per thread",
                      f"!$omp parallel do schedule(static){' private(fault)' if faults else ''}{reduction}", *blocks]
    if faults:
        batch_host = ["faults = 0", *batch_host, f"if (faults > 0) status = {n}_status_index"]
    batch_host = "".join(f"      {line}\n" for line in batch_host)
    if faults:  # each point's faults reduced into one integer that the target region brings back
        device_loop = ("      faults = 0\n      !$omp target teams distribute parallel do map(to: x) map(from: y) "
                       "private(fault) reduction(max: faults)\n      do i = 1, n\n"
                       "        call infer_point(x(:, i), y(:, i), fault)\n        faults = max(faults, fault)\n"
                       f"      end do\n      if (faults > 0) status = {n}_status_index\n")
    else:
        device_loop = ("      ! one point per device thread\n"
                       "      !$omp target teams distribute parallel do map(to: x) map(from: y)\n      do i = 1, n\n"
                       f"        call {n}_infer(x(:, i), y(:, i))\n      end do\n")
    batch_stmts = f"""    on_device = .false.
    !$ on_device = omp_get_num_devices() > 0 .and. omp_get_default_device() /= omp_get_initial_device()
    if (on_device) then
{device_loop}    else
{batch_host}    end if
"""
    block_sub = f"""
  !> Host path of {n}_infer_batch: point index innermost, so statements run in SIMD lanes.
  subroutine infer_block(count, x, y{', faults' if faults else ''})
    integer, intent(in) :: count
    real(rk), intent(in) :: x({n}_nx, count)
    real(rk), intent(inout) :: y({n}_ny, count)
{'    integer, intent(out) :: faults' + chr(10) if faults else ''}{chr(10).join(block_lines)}
  end subroutine infer_block
"""
    batch_doc = (f"on the offload device when there is one (data\n  !> already mapped there is not copied "
                 f"again), else on the host in SIMD blocks of {block}.")
    if plan.path == "whole":  # per-point locals too large: one region per op over the samples
        batch_doc, batch_decls, batch_stmts = whole_fortran.batch_statements(plan)
        block_sub = whole_fortran.batch_routines(plan)
    point_subroutines = f"""  !> One point: x({n}_nx) -> y({n}_ny). Callable inside !$omp target and !$acc compute regions.
  pure subroutine {n}_infer(x, y)
    !$omp declare target
    !$acc routine seq
    real(rk), intent(in) :: x({n}_nx)
    real(rk), intent(out) :: y({n}_ny)
{chr(10).join(point_lines)}
  end subroutine {n}_infer
"""
    if faults:  # the offload batch needs each point's faults: infer_point returns them, <name>_infer drops them
        point_subroutines = f"""  !> One point, and faults = 1 when one of its indices was outside its axis (its outputs are NaN).
  pure subroutine infer_point(x, y, faults)
    !$omp declare target
    !$acc routine seq
    real(rk), intent(in) :: x({n}_nx)
    real(rk), intent(out) :: y({n}_ny)
    integer, intent(out) :: faults
{chr(10).join(point_lines)}
    faults = merge(1, 0, {FAULT} > 0)
  end subroutine infer_point

  !> One point: x({n}_nx) -> y({n}_ny). Callable inside !$omp target and !$acc compute regions.
  pure subroutine {n}_infer(x, y)
    !$omp declare target
    !$acc routine seq
    real(rk), intent(in) :: x({n}_nx)
    real(rk), intent(out) :: y({n}_ny)
    integer :: faults
    call infer_point(x, y, faults)
  end subroutine {n}_infer
"""
    uses = "".join(line + "\n" for line in whole_fortran.uses(plan))
    pace_uses = ", omp_get_max_threads, omp_in_parallel, omp_get_wtime" if whole_fortran.paced(plan) else ""
    text = f"""! {stamp}
{chr(10).join(layout + whole_fortran.preamble(plan))}
module {n}_model
  use, intrinsic :: iso_c_binding, only: c_int, c_ptr
  use, intrinsic :: iso_fortran_env, only: int8, int32, int64, real32, real64
  !$ use omp_lib, only: omp_get_num_devices, omp_get_default_device, omp_get_initial_device, omp_get_num_threads, omp_get_thread_num{pace_uses}
{uses}  implicit none
  private
  public :: {', '.join(publics)}

  !> The working precision of this generated code.
  integer, parameter, public :: {n}_rk = {kind}
  integer, parameter :: rk = {n}_rk
  integer, parameter, public :: {n}_nx = {plan.nx}, {n}_ny = {plan.ny}
{layout_constants(plan)}
  ! Status codes returned by {n}_init and {n}_infer_batch.
{statuses}

{chr(10).join(_weight_decls(plan) + whole_fortran.declarations(plan))}
{chr(10).join(['  logical :: ready = .false.'] + fortran_reader.declarations(plan)) if file_loaded else ''}

  interface
    !> The C library's {n}_infer_batch over device pointers (link lib{n}.a).
    function {n}_infer_batch_dev(n, x, y, stream) result(status) bind(C, name='{n}_infer_batch')
      import :: c_int, c_ptr
      integer(c_int), value :: n
      type(c_ptr), value :: x, y, stream
      integer(c_int) :: status
    end function {n}_infer_batch_dev
{simd_interface(plan, widths)}{chr(10).join(whole_fortran.interface(plan))}
  end interface

contains

{point_subroutines}
  !> n points, x({n}_nx, n) -> y({n}_ny, n): {batch_doc}
  subroutine {n}_infer_batch(n, x, y, status)
    integer, intent(in) :: n
    real(rk), intent(in) :: x({n}_nx, n)
    real(rk), intent(out) :: y({n}_ny, n)
    integer, intent(out) :: status
{batch_decls}
{ready_check}    status = {n}_status_ok
{batch_stmts}  end subroutine {n}_infer_batch
{block_sub}{whole_fortran.subroutine(plan, host_regions)}{fortran_team_wait(plan)}{fortran_reader.reader(plan) if file_loaded else ''}
end module {n}_model
"""
    lines = []
    for line in text.split("\n"):
        lines.extend(wrap(line))
    return "\n".join(lines).replace("\n\n\n", "\n\n")


def simd_interface(plan, widths):
    """``<name>_infer_simd``: the C library's ``<name>_infer`` with its ``declare simd`` (the header's,
    :func:`rosenna.emit.c.simd_declaration`), so that a ``!$omp simd`` or ``!$omp do simd`` loop
    over points calls the C library's SIMD variants ("" without them). The module's own
    ``<name>_infer`` gets no ``declare simd``: gfortran would clone its body, whose loops and locals
    it keeps per lane (slower than the scalar loop: docs/benchmarks-host.md). The directive only
    on x86-64 (the variants' names are its vector ABI's; gfortran 12's preprocessor defines no
    __x86_64__, but real(10), __GFC_REAL_10__, is x87's) and not in a device compiler's pass."""
    if not widths:
        return ""
    n = plan.name
    lanes = " or ".join(str(w) for w in widths)
    kind = "c_double" if plan.precision == "double" else "c_float"  # rk's kind, interoperable by name
    directives = "".join(f"      !$omp declare simd simdlen({w}) linear(ref(x)) linear(ref(y)) notinbranch\n" for w in widths)
    return f"""
    !> The C library's {n}_infer (link lib{n}.a): in a !$omp simd or !$omp do simd loop over points,
    !> call {n}_infer_simd(x(:, i), y(:, i)) runs {lanes} points per call in the C library's SIMD variants.
    pure subroutine {n}_infer_simd(x, y) bind(C, name='{n}_infer')
      use, intrinsic :: iso_c_binding, only: {kind}
#if (defined(__x86_64__) || defined(__GFC_REAL_10__)) && !defined(__NVPTX__) && !defined(__AMDGPU__)
{directives}#endif
      real({kind}), intent(in) :: x({plan.nx})
      real({kind}), intent(out) :: y({plan.ny})
    end subroutine {n}_infer_simd
"""


def layout_constants(plan):
    """The module's ``<name>_x_<input>_offset`` / ``_size`` (and y) constants, the header's macros:
    input k of point i is ``x(off+1 : off+size, i)`` with ``off = <name>_x_<k>_offset``."""
    from rosenna.emit.c import io_key_limit

    n = plan.name
    lines = ["  ! Where each input and output lies in one point's x and y: x(off+1:off+size)."]
    for side in ("x", "y"):
        for s, key in planner.io_keys(plan, side, io_key_limit(plan)):
            lines.append(f"  integer, parameter, public :: {n}_{side}_{key}_offset = {s.offset}")
            lines.append(f"  integer, parameter, public :: {n}_{side}_{key}_size = {s.size}")
    return "\n".join(lines) + "\n"
