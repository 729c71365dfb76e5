"""The Fortran module ``<name>_model.F90`` and its ``<name>_fortran.mk`` recipe."""

import re

from rosenna import abi, plan as planner
from rosenna.emit import whole
from rosenna.emit.lang import FORTRAN
from rosenna.emit.render import Renderer, count, resolver, used_loop_vars, used_scalars

MAX_LINE = 132
VALUES_PER_LINE = 4
#: Arrays up to this many values are initialised in their declaration; larger ones by DATA
#: statements of DATA_CHUNK values (a declaration may not have more than 255 continuation lines).
INLINE_LIMIT = 800
DATA_CHUNK = 400


#: Sentinels of directive lines (OpenMP, OpenACC, OpenMP conditional compilation), which continue
#: with their sentinel; any other line whose first non-blank character is ``!`` is a comment.
_SENTINEL = re.compile(r"!\$(omp|acc)?(?=[ &]|$)", re.I)


def _comment_start(code):
    """Index of the ``!`` that starts ``code``'s trailing comment (``len(code)`` if none): the
    first ``!`` outside a character literal. A doubled quote inside a literal toggles twice."""
    quote = None
    for i, ch in enumerate(code):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "!":
            return i
    return len(code)


def _literal_mask(code):
    """Per character of ``code`` (no comment): True inside a character literal."""
    mask, quote = [], None
    for ch in code:
        if quote:
            mask.append(True)
            if ch == quote:
                quote = None
        else:
            quote = ch if ch in "'\"" else None
            mask.append(quote is not None)
    return mask


def _wrap_comment(prefix, text):
    """A comment as lines of at most MAX_LINE characters, each starting with ``prefix``; words
    longer than a line are split."""
    width = MAX_LINE - len(prefix)
    out, current = [], ""
    for word in text.split():
        while len(word) > width:
            if current:
                out.append(current)
                current = ""
            out.append(word[:width])
            word = word[width:]
        if current and len(current) + 1 + len(word) > width:
            out.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    out.append(current)
    return [(prefix + part).rstrip() for part in out]


def wrap(line):
    """Split a free-form line into lines of at most 132 characters.

    A comment line is word-wrapped into comment lines with the same marker (``!`` or ``!>``). A
    code line's trailing comment (the first ``!`` outside a character literal) moves to comment
    lines of its own above the code. Code is cut at a blank outside character literals and
    continued with ``&`` at the end of the line and ``    & `` on the next; where there is no such
    blank (a long literal or token) it is cut anywhere and the next line starts with ``&``, which
    continues the literal or token with its very next character (Fortran 2008, 3.3.2.4). A
    directive (``!$omp``, ``!$acc``, ``!$``) continues with its sentinel.
    """
    if len(line) <= MAX_LINE:
        return [line]
    stripped = line.lstrip()
    indent = line[: len(line) - len(stripped)]
    sentinel = _SENTINEL.match(stripped)
    if stripped.startswith("!") and not sentinel:
        marker = re.match(r"!+>?", stripped).group(0)
        return _wrap_comment(indent + marker + " ", stripped[len(marker):])
    head = indent + (sentinel.group(0) + " " if sentinel else "")
    body = stripped[sentinel.end():].lstrip() if sentinel else stripped
    at = _comment_start(body)
    if at < len(body):
        note = body[at + 1:].strip()
        notes = _wrap_comment(indent + "! ", note) if note else []
        return notes + wrap(head + body[:at].rstrip())
    lead = indent + (sentinel.group(0) + "& " if sentinel else "    & ")
    hard = indent + (sentinel.group(0) + "&" if sentinel else "&")
    mask = _literal_mask(body)
    out, prefix, pos = [], head, 0
    while len(prefix) + len(body) - pos > MAX_LINE:
        room = MAX_LINE - len(prefix) - 2
        cut = next((i for i in range(pos + room, pos, -1) if body[i] == " " and not mask[i]
                    and body[pos:i].strip()), -1)
        if cut > 0:
            out.append(prefix + body[pos:cut].rstrip() + " &")
            pos, prefix = cut + 1, lead
            while pos < len(body) and body[pos] == " ":
                pos += 1
        else:
            take = MAX_LINE - len(prefix) - 1
            out.append(prefix + body[pos:pos + take] + "&")
            pos, prefix = pos + take, hard
    out.append(prefix + body[pos:])
    return out


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
    for i, size in enumerate(plan.scratch):
        out.append(f"    real(rk) :: t{i}({size * (block or 1)})")
    ints = list(used_loop_vars(stmts)) + list(extra_int)
    if ints:
        out.append(f"    integer :: {', '.join(ints)}")
    return out


def _f_bytes(data):
    """``data`` as a Fortran character expression: quoted printable runs and achar() for others."""
    parts, run = [], ""
    for b in data:
        if chr(b).isalnum():
            run += chr(b)
            continue
        if run:
            parts.append(f"'{run}'")
            run = ""
        parts.append(f"achar({b})")
    if run:
        parts.append(f"'{run}'")
    return " // ".join(parts)


def _reader_checks(plan, st):
    """The body of ``read_weights``: abi.RWT_CHECKS in order (the C reader renders the same table).
    ``status`` holds READ throughout, so a failed read just returns."""
    expected = abi.rwt_expected(plan.precision, plan.hash, len(plan.weights))
    out, in_loop = [], False
    for i, check in enumerate(abi.RWT_CHECKS):
        if check.per_tensor and not in_loop:
            out.append("    do t = 1, int(count)")
            in_loop = True
        elif not check.per_tensor and in_loop:
            out.append("    end do")
            in_loop = False
        pad = "      " if in_loop else "    "
        fail = [f"{pad}  status = {st[check.status]}", f"{pad}  return", f"{pad}end if"]
        # an error (not end of file) on the very first read: the path is no readable file
        opened = [f"{pad}if (ios > 0) status = {st['OPEN']}"] if i == 0 else []
        out.append(f"{pad}! {check.field}: {check.doc.replace('`', '')}")
        if check.kind == "bytes":
            out += [f"{pad}read (unit, iostat=ios) text(1:{check.size})"] + opened + [f"{pad}if (ios /= 0) return",
                    f"{pad}if (text(1:{check.size}) /= {_f_bytes(expected[check.expect])}) then"] + fail
        elif check.kind in ("u32", "u32_max"):
            var = {"count": "count", "name_len": "length", "rank": "rank"}.get(check.field, "value")
            limit = expected[check.expect] if check.kind == "u32" else getattr(abi, check.expect)
            test = f"{var} /= {limit}_int64" if check.kind == "u32" else f"{var} > {limit}_int64"
            out += [f"{pad}call read_u32(unit, {var}, ios)"] + opened + [f"{pad}if (ios /= 0) return",
                    f"{pad}if ({test}) then"] + fail
        elif check.kind == "name":
            out += [f"{pad}text = ''", f"{pad}if (length > 0) read (unit, iostat=ios) text(1:length)",
                    f"{pad}if (ios /= 0) return", f"{pad}k = 0"]
            out += [f"{pad}if (length == {len(w.ident)} .and. text(1:{len(w.ident)}) == '{w.ident}') k = {j + 1}"
                    for j, w in enumerate(plan.weights)]
            out += [f"{pad}if (k == 0) then"] + fail
        elif check.kind == "dims":
            out += [f"{pad}total = 1",
                    f"{pad}do r = 1, int(rank)",
                    f"{pad}  call read_u32(unit, value, ios)",
                    f"{pad}  if (ios /= 0) return",
                    f"{pad}  if (value > sizes(k)) return",
                    f"{pad}  if (value /= 0) then",
                    f"{pad}    if (total > sizes(k) / value) return",
                    f"{pad}  end if",
                    f"{pad}  total = total * value",
                    f"{pad}end do",
                    f"{pad}if (seen(k) .or. total /= sizes(k)) return"]
        elif check.kind == "data":
            out.append(f"{pad}select case (k)")
            for j, w in enumerate(plan.weights):
                out += [f"{pad}case ({j + 1})", f"{pad}  read (unit, iostat=ios) {w.ident}"]
            out += [f"{pad}end select", f"{pad}if (ios /= 0) return", f"{pad}seen(k) = .true."]
        elif check.kind == "checksum":
            out += [f"{pad}inquire (unit=unit, pos=pos)",
                    f"{pad}call read_u32(unit, value, ios)",
                    f"{pad}if (ios /= 0) return",
                    f"{pad}call checksum(unit, pos - 1, crc, ios)",
                    f"{pad}if (ios /= 0) return",
                    f"{pad}if (crc /= value) then"] + fail
        elif check.kind == "end":
            out += [f"{pad}read (unit, pos=pos + 4, iostat=ios) text(1:1)",
                    f"{pad}if (ios >= 0) then"] + fail
        else:
            raise ValueError(f"internal: no Fortran rendering of .rwt check kind {check.kind!r}")
    return "\n".join(out)


def _reader(plan):
    """The .rwt reader, generated from abi.RWT_CHECKS (as the C reader is)."""
    n = plan.name
    clears = "\n".join(f"      {w.ident} = 0" for w in plan.weights)
    updates = ", ".join(w.ident for w in plan.weights)
    # gfortran 12 compiles `acc update device(w)` of a module `acc declare` array into an update of
    # nothing; an explicit section is honoured (the C emitter says the same).
    sections = ", ".join(f"{w.ident}(1:{w.size})" for w in plan.weights)
    count = len(plan.weights)
    sizes = ", ".join(f"{w.size}_int64" for w in plan.weights)
    st = {key: f"{n}_status_{key.lower()}" for _, key, _ in abi.STATUS_CODES}
    return f"""
  !> Read the weights file and copy the weights to the device. Call once, before any offload
  !> region that calls {n}_infer. status is one of the {n}_status_* codes. After a failure the
  !> weights are zero.
  subroutine {n}_init(path, status)
    character(len=*), intent(in) :: path
    integer, intent(out) :: status
    integer :: unit, ios

    open (newunit=unit, file=path, access='stream', form='unformatted', status='old', &
          action='read', iostat=ios)
    if (ios /= 0) then
      status = {st['OPEN']}
    else
      call read_weights(unit, status)
      close (unit)
    end if
    if (status /= {st['OK']}) then
{clears}
    end if
    !$omp target update to({updates})
    !$acc update device({sections})
    ready = status == {st['OK']}
  end subroutine {n}_init

  !> One unsigned 32-bit integer of the file, as int64.
  subroutine read_u32(unit, value, ios)
    integer, intent(in) :: unit
    integer(int64), intent(out) :: value
    integer, intent(out) :: ios
    integer(int32) :: word

    value = 0
    read (unit, iostat=ios) word
    if (ios == 0) value = iand(int(word, int64), int(z'{abi.RWT_CRC_INIT:08X}', int64))
  end subroutine read_u32

  !> CRC-32C (reflected polynomial {abi.RWT_CRC_POLY:#010x}), table-driven, of the file's first `bytes`
  !> bytes, read again in blocks.
  subroutine checksum(unit, bytes, crc, ios)
    integer, intent(in) :: unit
    integer(int64), intent(in) :: bytes
    integer(int64), intent(out) :: crc
    integer, intent(out) :: ios
    integer(int8) :: block({abi.RWT_CRC_BLOCK})
    integer(int64) :: table(0:255), c, left, start
    integer :: i, j, m

    do i = 0, 255
      c = i
      do j = 1, 8
        if (btest(c, 0)) then
          c = ieor(shiftr(c, 1), int(z'{abi.RWT_CRC_POLY:08X}', int64))
        else
          c = shiftr(c, 1)
        end if
      end do
      table(i) = c
    end do
    crc = int(z'{abi.RWT_CRC_INIT:08X}', int64)
    left = bytes
    start = 1
    ios = 0
    do while (left > 0)
      m = int(min(left, int(size(block), int64)))
      read (unit, pos=start, iostat=ios) block(1:m)
      if (ios /= 0) return
      do i = 1, m
        crc = ieor(table(iand(ieor(crc, int(block(i), int64)), 255_int64)), shiftr(crc, 8))
      end do
      left = left - m
      start = start + m
    end do
    crc = ieor(crc, int(z'{abi.RWT_CRC_INIT:08X}', int64))
  end subroutine checksum

  !> The checks of rosenna.abi.RWT_CHECKS, in order; status is the first failure's, else ok.
  subroutine read_weights(unit, status)
    integer, intent(in) :: unit
    integer, intent(out) :: status
    integer(int64), parameter :: sizes({count}) = [{sizes}]
    character(len={max(abi.RWT_HASH_LEN, abi.RWT_MAX_NAME, len(abi.RWT_MAGIC))}) :: text
    integer(int64) :: value, count, length, rank, total, crc, pos
    integer :: ios, t, k, r
    logical :: seen({count})

    seen = .false.
    k = 0
    status = {st['READ']}
{_reader_checks(plan, st)}
    status = {st['OK']}
  end subroutine read_weights
"""


def module(plan, stamp, block):
    n = plan.name
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
    publics = [f"{n}_infer", f"{n}_infer_batch", f"{n}_infer_batch_dev"] + ([] if plan.embed else [f"{n}_init"])
    publics += whole.fortran_publics(plan)
    file_loaded = not plan.embed

    point_lines = _declarations(plan, plan.body) + [""] + point.lines(plan.body, 2)
    block_lines = (_declarations(plan, plan.body, block, extra_int=("p", "e"))
                   + [f"    real(rk) :: xb({n}_nx * {block}), yb({n}_ny * {block})", "",
                      f"    do e = 0, {n}_nx - 1",
                      "      !$omp simd",
                      f"      do p = 0, {block - 1}",
                      f"        xb(e*{block} + p + 1) = merge(x(e + 1, min(p + 1, count)), 0.0_rk, p < count)",
                      "      end do",
                      "    end do"]
                   + blocked.lines(plan.body, 2)
                   + ["    do p = 0, count - 1",
                      f"      do e = 0, {n}_ny - 1",
                      f"        y(e + 1, p + 1) = yb(e*{block} + p + 1)",
                      "      end do",
                      "    end do"])
    ready_check = ("    if (.not. ready) then\n"
                   f"      status = {n}_status_device\n      return\n    end if\n") if file_loaded else ""
    batch_decls = "    logical :: on_device\n    integer :: i, start\n"
    batch_stmts = f"""    on_device = .false.
    !$ on_device = omp_get_num_devices() > 0 .and. omp_get_default_device() /= omp_get_initial_device()
    if (on_device) then
      !$omp target teams distribute parallel do map(to: x) map(from: y)
      do i = 1, n
        call {n}_infer(x(:, i), y(:, i))
      end do
    else
      !$omp parallel do schedule(static)
      do start = 1, n, {block}
        call infer_block(min({block}, n - start + 1), x(:, start:), y(:, start:))
      end do
    end if
"""
    block_sub = f"""
  !> Host path of {n}_infer_batch: point index innermost, so statements run in SIMD lanes.
  subroutine infer_block(count, x, y)
    integer, intent(in) :: count
    real(rk), intent(in) :: x({n}_nx, count)
    real(rk), intent(inout) :: y({n}_ny, count)
{chr(10).join(block_lines)}
  end subroutine infer_block
"""
    if plan.path == "whole":  # per-point locals too large: one sample at a time (emit/whole.py)
        batch_decls, batch_stmts, block_sub = "    integer :: i\n", whole.fortran_batch_loop(plan), ""
    text = f"""! {stamp}
{chr(10).join(layout)}
module {n}_model
  use, intrinsic :: iso_c_binding, only: c_int, c_ptr
  use, intrinsic :: iso_fortran_env, only: int8, int32, int64, real32, real64
  !$ use omp_lib, only: omp_get_num_devices, omp_get_default_device, omp_get_initial_device
  implicit none
  private
  public :: {', '.join(publics)}

  !> The working precision of this generated code.
  integer, parameter, public :: {n}_rk = {kind}
  integer, parameter :: rk = {n}_rk
  integer, parameter, public :: {n}_nx = {plan.nx}, {n}_ny = {plan.ny}
{layout_constants(plan)}
  ! Status codes returned by {n}_init and {n}_infer_batch.
{statuses}

{chr(10).join(_weight_decls(plan) + whole.fortran_declarations(plan))}
{'  logical :: ready = .false.' if file_loaded else ''}

  interface
    !> The C library's {n}_infer_batch over device pointers (link lib{n}.a).
    function {n}_infer_batch_dev(n, x, y, stream) result(status) bind(C, name='{n}_infer_batch')
      import :: c_int, c_ptr
      integer(c_int), value :: n
      type(c_ptr), value :: x, y, stream
      integer(c_int) :: status
    end function {n}_infer_batch_dev
{chr(10).join(whole.fortran_interface(plan))}
  end interface

contains

  !> One point: x({n}_nx) -> y({n}_ny). Callable inside !$omp target and !$acc compute regions.
  pure subroutine {n}_infer(x, y)
    !$omp declare target
    !$acc routine seq
    real(rk), intent(in) :: x({n}_nx)
    real(rk), intent(out) :: y({n}_ny)
{chr(10).join(point_lines)}
  end subroutine {n}_infer

  !> n points, x({n}_nx, n) -> y({n}_ny, n): on the offload device when there is one (data
  !> already mapped there is not copied again), else on the host in SIMD blocks of {block}.
  subroutine {n}_infer_batch(n, x, y, status)
    integer, intent(in) :: n
    real(rk), intent(in) :: x({n}_nx, n)
    real(rk), intent(out) :: y({n}_ny, n)
    integer, intent(out) :: status
{batch_decls}
{ready_check}    status = {n}_status_ok
{batch_stmts}  end subroutine {n}_infer_batch
{block_sub}{whole.fortran_subroutine(plan)}{_reader(plan) if file_loaded else ''}
end module {n}_model
"""
    lines = []
    for line in text.split("\n"):
        lines.extend(wrap(line))
    return "\n".join(lines).replace("\n\n\n", "\n\n")


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


def makefile(plan, stamp, profile):
    from rosenna.emit.c import profile_comment

    n = plan.name
    return f"""# {stamp}
# Builds lib{n}_f.a and {n}_model.mod beside this file:
#   make -f {n}_fortran.mk
{profile_comment(profile, f"make -f {n}_fortran.mk FC=nvfortran FFLAGS=-O2 ROSENNA_OFFLOAD_FLAGS='-mp=gpu -gpu=cc90'")}\

ROSENNA_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
ifeq ($(origin FC),default)
FC = {profile.fc}
endif
FFLAGS ?= {profile.optimize_fortran}
ROSENNA_OFFLOAD_FLAGS ?= {profile.offload_flags}

all: $(ROSENNA_DIR)/lib{n}_f.a

$(ROSENNA_DIR)/lib{n}_f.a: $(ROSENNA_DIR)/{n}_model.o
\t$(AR) rcs $@ $^

$(ROSENNA_DIR)/{n}_model.o: $(ROSENNA_DIR)/{n}_model.F90
\t$(FC) $(FFLAGS) $(ROSENNA_OFFLOAD_FLAGS) -J$(ROSENNA_DIR) -c $< -o $@

clean:
\trm -f $(ROSENNA_DIR)/{n}_model.o $(ROSENNA_DIR)/{n}_model.mod $(ROSENNA_DIR)/lib{n}_f.a

.PHONY: all clean
"""
