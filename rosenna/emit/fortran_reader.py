"""The Fortran reader of ``.rwt`` weights files (``<name>_init``), generated from
:data:`rosenna.abi.RWT_CHECKS` as the C reader (:mod:`rosenna.emit.c_reader`) is."""

from rosenna import abi


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


def _checks(plan, st):
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
            offset = 0
            for j, w in enumerate(plan.weights):
                out += [f"{pad}case ({j + 1})",
                        f"{pad}  if (staged) then",
                        f"{pad}    read (unit, iostat=ios) next_weights({offset + 1}:{offset + w.size})",
                        f"{pad}  else",
                        f"{pad}    read (unit, iostat=ios) {w.ident}",
                        f"{pad}  end if"]
                offset += w.size
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


def declarations(plan):
    """The module's second copy of the weights, read by ``<name>_reload`` / ``<name>_set_weights``
    before it replaces the weights in force (host memory only)."""
    total = max(1, sum(w.size for w in plan.weights))
    return [f"  !> The weights {plan.name}_reload and {plan.name}_set_weights read before they replace those in force.",
            f"  real(rk) :: next_weights({total})"]


def reader(plan):
    """The .rwt reader, generated from abi.RWT_CHECKS (as the C reader is), and ``<name>_reload``
    and ``<name>_set_weights``, which read into a second copy and replace the weights only when
    every check passed."""
    n = plan.name
    clears = "\n".join(f"      {w.ident} = 0" for w in plan.weights)
    # One directive per array, never a continued one: gfortran 12 built with both -fopenmp and
    # -fopenacc rejects an `!$acc&` continuation after an `!$omp&` one ("Wrong OpenMP continuation").
    # gfortran 12 compiles `acc update device(w)` of a module `acc declare` array into an update of
    # nothing; an explicit section is honoured (the C emitter says the same).
    updates = "\n".join(f"    !$omp target update to({w.ident})" for w in plan.weights)
    sections = "\n".join(f"    !$acc update device({w.ident}(1:{w.size}))" for w in plan.weights)
    count = len(plan.weights)
    sizes = ", ".join(f"{w.size}_int64" for w in plan.weights)
    commits, offset = [], 0
    for w in plan.weights:
        commits.append(f"    {w.ident} = next_weights({offset + 1}:{offset + w.size})")
        offset += w.size
    commits = "\n".join(commits)
    st = {key: f"{n}_status_{key.lower()}" for _, key, _ in abi.STATUS_CODES}
    return f"""
  !> Read the weights file and copy the weights to the device. Call once, before any offload
  !> region that calls {n}_infer. status is one of the {n}_status_* codes. After a failure the
  !> weights are zero.
  subroutine {n}_init(path, status)
    character(len=*), intent(in) :: path
    integer, intent(out) :: status
    integer :: unit, ios
    integer(int64) :: bytes

    ! A path that holds no bytes by its size (an empty file, a FIFO, a device) is not opened: a FIFO
    ! would block the read until a writer came. Trailing blanks are not part of path (as in C's reader).
    bytes = -1
    inquire (file=path, size=bytes)
    ios = 0
    if (bytes /= 0) open (newunit=unit, file=path, access='stream', form='unformatted', status='old', &
                          action='read', iostat=ios)
    if (bytes == 0) then
      status = {st['READ']}
    else if (ios /= 0) then
      status = {st['OPEN']}
    else
      call read_weights(unit, status, .false.)
      close (unit)
    end if
    if (status /= {st['OK']}) then
{clears}
    end if
    call to_device()
    ready = status == {st['OK']}
  end subroutine {n}_init

  !> Replace the weights between calls by those of another weights file of this model (same plan
  !> hash), checked as {n}_init checks. On any error the weights in force stay and status says
  !> why. Device copies are updated in place; call it where no offload region runs.
  subroutine {n}_reload(path, status)
    character(len=*), intent(in) :: path
    integer, intent(out) :: status
    integer :: unit, ios

    open (newunit=unit, file=path, access='stream', form='unformatted', status='old', &
          action='read', iostat=ios)
    if (ios /= 0) then
      status = {st['OPEN']}
      return
    end if
    call read_weights(unit, status, .true.)
    close (unit)
    if (status == {st['OK']}) call commit_next()
  end subroutine {n}_reload

  !> The same from a weights file's bytes in memory (e.g. exported without a file system).
  subroutine {n}_set_weights(image, status)
    integer(int8), intent(in) :: image(:)
    integer, intent(out) :: status
    integer :: unit, ios

    ! the reader reads a stream unit: a scratch file holds the image
    open (newunit=unit, status='scratch', access='stream', form='unformatted', action='readwrite', &
          iostat=ios)
    if (ios /= 0) then
      status = {st['OPEN']}
      return
    end if
    write (unit, iostat=ios) image
    if (ios == 0) rewind (unit, iostat=ios)
    if (ios /= 0) then
      status = {st['READ']}
    else
      call read_weights(unit, status, .true.)
    end if
    close (unit)
    if (status == {st['OK']}) call commit_next()
  end subroutine {n}_set_weights

  !> The weights just read by {n}_reload or {n}_set_weights become those in force.
  subroutine commit_next()
{commits}
    call to_device()
    ready = .true.
  end subroutine commit_next

  !> The weights to the offload device's copies, in place.
  subroutine to_device()
{updates}
{sections}
  end subroutine to_device

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

  !> The checks of rosenna.abi.RWT_CHECKS, in order; status is the first failure's, else ok. The
  !> tensors go to the weights themselves, or with staged to next_weights.
  subroutine read_weights(unit, status, staged)
    integer, intent(in) :: unit
    integer, intent(out) :: status
    logical, intent(in) :: staged
    integer(int64), parameter :: sizes({count}) = [{sizes}]
    character(len={max(abi.RWT_HASH_LEN, abi.RWT_MAX_NAME, len(abi.RWT_MAGIC))}) :: text
    integer(int64) :: value, count, length, rank, total, crc, pos
    integer :: ios, t, k, r
    logical :: seen({count})

    seen = .false.
    k = 0
    status = {st['READ']}
{_checks(plan, st)}
    status = {st['OK']}
  end subroutine read_weights
"""
