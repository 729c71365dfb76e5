! 2-D compressible Navier-Stokes with a learned subgrid viscosity, MPI + OpenMP target: the Fortran
! twin of cns.c (same scheme, options, checks and output, and the same operation order, so the two
! agree to round-off; see cns.c for the method).
!
!   mpirun -np R cns_f [--nx NX] [--ny NY] [--steps S] [--device auto|none|K] [--dump FILE]
!                      [--require-device]
!
! Arrays are u(i, v, j): column i fastest, then the variable, then the row, so that the two halo
! rows of all four variables are one contiguous block for MPI and for `target update`.

!> The per-face numerics, in a module so the device routines are module procedures.
module cns_numerics
  use, intrinsic :: iso_fortran_env, only: real64
  implicit none
  private
  public :: rk, nv, halo, gamma, nu0, minmod, rusanov

  integer, parameter :: rk = real64
  integer, parameter :: nv = 4, halo = 2
  real(rk), parameter :: gamma = 1.4_rk, nu0 = 1.0e-4_rk

contains

  pure real(rk) function minmod(a, b)
    !$omp declare target
    real(rk), intent(in) :: a, b
    if (a * b <= 0.0_rk) then
      minmod = 0.0_rk
    else if (abs(a) < abs(b)) then
      minmod = a
    else
      minmod = b
    end if
  end function minmod

  !> Rusanov flux of primitive states wl, wr (rho, u, v, p) through a face normal to x (dir 0) or y.
  pure subroutine rusanov(wl, wr, dir, f)
    !$omp declare target
    real(rk), intent(in) :: wl(nv), wr(nv)
    integer, intent(in) :: dir
    real(rk), intent(out) :: f(nv)
    real(rk) :: ul, ur, el, er, ql(nv), qr(nv), fl(nv), fr(nv), sl, sr, s

    ul = merge(wl(2), wl(3), dir == 0)
    ur = merge(wr(2), wr(3), dir == 0)
    el = wl(4) / (gamma - 1.0_rk) + 0.5_rk * wl(1) * (wl(2) * wl(2) + wl(3) * wl(3))
    er = wr(4) / (gamma - 1.0_rk) + 0.5_rk * wr(1) * (wr(2) * wr(2) + wr(3) * wr(3))
    ql = [wl(1), wl(1) * wl(2), wl(1) * wl(3), el]
    qr = [wr(1), wr(1) * wr(2), wr(1) * wr(3), er]
    fl = [wl(1) * ul, wl(1) * wl(2) * ul, wl(1) * wl(3) * ul, (el + wl(4)) * ul]
    fr = [wr(1) * ur, wr(1) * wr(2) * ur, wr(1) * wr(3) * ur, (er + wr(4)) * ur]
    fl(2 + dir) = fl(2 + dir) + wl(4)
    fr(2 + dir) = fr(2 + dir) + wr(4)
    sl = abs(ul) + sqrt(gamma * wl(4) / wl(1))
    sr = abs(ur) + sqrt(gamma * wr(4) / wr(1))
    s = max(sl, sr)
    f = 0.5_rk * (fl + fr) - 0.5_rk * s * (qr - ql)
  end subroutine rusanov

end module cns_numerics

program cns_f
  use, intrinsic :: iso_fortran_env, only: int64, output_unit, error_unit
  use cns_numerics, only: rk, nv, halo, gamma, nu0, minmod, rusanov
  use mpi
#ifdef _OPENMP
  use omp_lib, only: omp_get_num_devices, omp_set_default_device, omp_get_initial_device, &
                     omp_is_initial_device
#endif
  implicit none

  real(rk), parameter :: drift_tol = 1.0e-12_rk
  integer :: nx, ny_global, steps, ny, j0, rank, nranks, south, north, ierr, dev, local_rank, node
  integer :: step, v, r, row0, rows, ndev
  logical :: require_device, use_device, on_device, ok, finite
  integer :: on_device_i, on_device_all, finite_i, finite_all, ok_i
  character(len=256) :: device, dump
  real(rk) :: dx, dy, dt, h, smax, elapsed, halo_seconds, before(nv), after(nv), per_step(2), worst(2)
  real(rk) :: digest(2), scale, drift
  real(rk), allocatable :: u(:, :, :), u1(:, :, :), w(:, :, :), mu(:, :), fx(:, :, :), fy(:, :, :)
  real(rk), allocatable :: mine(:, :), field(:), ordered(:, :, :)
  integer, allocatable :: counts(:), offsets(:)
  character(len=10), parameter :: names(nv) = [character(len=10) :: 'mass', 'x-momentum', &
                                                'y-momentum', 'energy']

  call mpi_init(ierr)
  call mpi_comm_rank(mpi_comm_world, rank, ierr)
  call mpi_comm_size(mpi_comm_world, nranks, ierr)
  call parse_args()
  if (nx < 4 .or. steps < 1 .or. ny_global < halo * nranks) then
    if (rank == 0) write (error_unit, '(a, i0, a)') 'cns_f: need --nx >= 4, --steps >= 1 and at least ', &
      halo, ' rows per rank'
    call mpi_finalize(ierr)
    stop 2
  end if

  ! The GPU of this rank: node-local rank modulo the node's devices, unless told otherwise.
  call mpi_comm_split_type(mpi_comm_world, mpi_comm_type_shared, rank, mpi_info_null, node, ierr)
  call mpi_comm_rank(node, local_rank, ierr)
  call mpi_comm_free(node, ierr)
  use_device = .false.
#ifdef _OPENMP
  ndev = omp_get_num_devices()
  if (trim(device) /= 'none' .and. ndev > 0) then
    if (trim(device) == 'auto') then
      dev = modulo(local_rank, ndev)
    else
      read (device, *) dev
    end if
    if (dev < 0 .or. dev >= ndev) then
      write (error_unit, '(a, i0, a, a, a, i0, a)') 'cns_f: rank ', rank, ': --device ', trim(device), &
        ', but there are ', ndev, ' devices'
      call mpi_abort(mpi_comm_world, 2, ierr)
    end if
    call omp_set_default_device(dev)
    use_device = .true.
  else
    call omp_set_default_device(omp_get_initial_device())
  end if
#endif

  ! Slabs of rows: the first mod(ny_global, nranks) ranks take one row more.
  ny = ny_global / nranks + merge(1, 0, rank < mod(ny_global, nranks))
  j0 = rank * (ny_global / nranks) + min(rank, mod(ny_global, nranks))
  south = modulo(rank - 1, nranks)
  north = modulo(rank + 1, nranks)
  dx = 1.0_rk / nx
  dy = 1.0_rk / ny_global
  allocate (u(nx, nv, 1 - halo:ny + halo), u1(nx, nv, 1 - halo:ny + halo), w(nx, nv, 1 - halo:ny + halo))
  allocate (mu(nx, 1 - halo:ny + halo), fx(nx, nv, ny), fy(nx, nv, ny + 1))
  u = 0.0_rk
  u1 = 0.0_rk
  w = 0.0_rk
  mu = 0.0_rk
  call initial_state()

  ! A fixed dt from the initial state: CFL 0.3 on the fastest wave, and the viscous limit.
  smax = max_wave_speed()
  call mpi_allreduce(mpi_in_place, smax, 1, mpi_double_precision, mpi_max, mpi_comm_world, ierr)
  h = min(dx, dy)
  dt = min(0.3_rk * h / smax, 0.2_rk * h * h / nu0)
  call totals(before)

  on_device = .false.
  elapsed = 0.0_rk
  halo_seconds = 0.0_rk
#ifdef _OPENMP
  !$omp target if(use_device) map(from: on_device)
  on_device = .not. omp_is_initial_device()
  !$omp end target
#endif
  on_device_i = merge(1, 0, on_device)
  call mpi_allreduce(on_device_i, on_device_all, 1, mpi_integer, mpi_min, mpi_comm_world, ierr)
  if (require_device .and. on_device_all /= 1) then   ! before a long run on the host
    if (rank == 0) write (output_unit, '(a)') &
      'cns_f: --require-device, but an offload region ran on the host', 'FAIL'
    call mpi_finalize(ierr)
    stop 1
  end if
  !$omp target data if(use_device) map(tofrom: u) map(alloc: u1, w, mu, fx, fy)
  do step = 0, steps
    if (step == 1) then   ! step 0 is an untimed warm-up: it loads the kernels
      call mpi_barrier(mpi_comm_world, ierr)
      elapsed = mpi_wtime()
      halo_seconds = 0.0_rk
    end if
    ! SSP-RK2: u1 = u + dt L(u); u = 1/2 u + 1/2 (u1 + dt L(u1)).
    call exchange_halos(u)
    call stage(nx, ny, use_device, dx, dy, dt, u, u, u1, 0.0_rk, 1.0_rk, w, mu, fx, fy)
    call exchange_halos(u1)
    call stage(nx, ny, use_device, dx, dy, dt, u1, u, u, 0.5_rk, 0.5_rk, w, mu, fx, fy)
  end do
  elapsed = mpi_wtime() - elapsed
  !$omp end target data
  call totals(after)

  per_step = [elapsed / steps, halo_seconds / steps]
  call mpi_reduce(per_step, worst, 2, mpi_double_precision, mpi_max, 0, mpi_comm_world, ierr)
  finite = all(abs(u(:, :, 1:ny)) <= huge(1.0_rk))
  finite_i = merge(1, 0, finite)
  call mpi_allreduce(finite_i, finite_all, 1, mpi_integer, mpi_min, mpi_comm_world, ierr)

  ! rho and E of the whole field on rank 0, in global row order, for the dump and the digest.
  allocate (mine(nx, 2 * ny))
  mine(:, 1:ny) = u(:, 1, 1:ny)
  mine(:, ny + 1:2 * ny) = u(:, 4, 1:ny)
  if (rank == 0) then
    allocate (field(2 * nx * ny_global), counts(nranks), offsets(nranks), ordered(nx, ny_global, 2))
  else
    allocate (field(1), counts(1), offsets(1), ordered(1, 1, 1))
  end if
  call mpi_gather(2 * nx * ny, 1, mpi_integer, counts, 1, mpi_integer, 0, mpi_comm_world, ierr)
  if (rank == 0) then
    offsets(1) = 0
    do r = 2, nranks
      offsets(r) = offsets(r - 1) + counts(r - 1)
    end do
  end if
  call mpi_gatherv(mine, 2 * nx * ny, mpi_double_precision, field, counts, offsets, &
                   mpi_double_precision, 0, mpi_comm_world, ierr)

  ok = .true.
  if (rank == 0) then
    ! Rank r's block is its rho rows then its E rows: reorder into rho(NX, NY), E(NX, NY).
    row0 = 0
    do r = 1, nranks
      rows = counts(r) / (2 * nx)
      ordered(:, row0 + 1:row0 + rows, 1) = reshape(field(offsets(r) + 1:offsets(r) + rows * nx), [nx, rows])
      ordered(:, row0 + 1:row0 + rows, 2) = &
        reshape(field(offsets(r) + rows * nx + 1:offsets(r) + 2 * rows * nx), [nx, rows])
      row0 = row0 + rows
    end do
    digest = 0.0_rk
    do r = 1, ny_global          ! the same summation order as cns.c
      do v = 1, nx
        digest(1) = digest(1) + ordered(v, r, 1) * ordered(v, r, 1)
        digest(2) = digest(2) + ordered(v, r, 2) * ordered(v, r, 2)
      end do
    end do
    if (len_trim(dump) > 0) then
      open (newunit=r, file=trim(dump), access='stream', form='unformatted', status='replace', iostat=ierr)
      if (ierr == 0) write (r, iostat=ierr) ordered
      if (ierr /= 0) then
        write (error_unit, '(a, a)') 'cns_f: cannot write ', trim(dump)
        ok = .false.
      end if
      close (r)
    end if

    write (output_unit, '(a, i0, a, i0, a, i0, a, i0, a, es9.3, a, a)') 'cns (Fortran, OpenMP target): ', &
      nx, ' x ', ny_global, ' cells on ', nranks, ' ranks, ', steps, ' timed steps (+1 warm-up) of dt=', &
      dt, '; offload regions ran on ', trim(merge('the device (every rank)', 'the host               ', &
                                                  on_device_all == 1))
    do v = 1, nv
      ! Momentum starts near zero: measure its drift against the mass instead.
      scale = merge(abs(before(1)), abs(before(v)), v == 2 .or. v == 3)
      drift = abs(after(v) - before(v)) / scale
      write (output_unit, '(a10, a, es22.15, a, es22.15, a, es9.2)') names(v), ' before ', before(v), &
        ' after ', after(v), ' relative drift ', drift
      if (v == 1 .or. v == 4) ok = ok .and. drift <= drift_tol
    end do
    write (output_unit, '(a, es8.1, a)') 'conservation tolerance (mass, energy): ', drift_tol, ' relative'
    write (output_unit, '(a, es25.17, a, es25.17)') 'digest: sum(rho^2) ', digest(1), ' sum(E^2) ', digest(2)
    write (output_unit, '(9a)') 'time per step: ', fixed(1e3_rk * worst(1), 3), ' ms (halo exchange ', &
      fixed(1e3_rk * worst(2), 3), ' ms, ', fixed(100.0_rk * worst(2) / worst(1), 1), ' %), ', &
      fixed(1e9_rk * worst(1) / (real(nx, rk) * ny_global), 1), ' ns per cell'
    if (finite_all /= 1) write (output_unit, '(a)') 'non-finite values in the final state'
    ok = ok .and. finite_all == 1
    write (output_unit, '(a)') merge('PASS', 'FAIL', ok)
  end if
  ok_i = merge(1, 0, ok)
  call mpi_bcast(ok_i, 1, mpi_integer, 0, mpi_comm_world, ierr)
  call mpi_finalize(ierr)
  if (ok_i /= 1) stop 1

contains

  !> x in fixed notation with d decimals, no leading blanks (f0.d would drop the zero of 0.5).
  function fixed(x, d) result(s)
    real(rk), intent(in) :: x
    integer, intent(in) :: d
    character(len=:), allocatable :: s
    character(len=32) :: buf, spec
    write (spec, '(a, i0, a)') '(f24.', d, ')'
    write (buf, spec) x
    s = trim(adjustl(buf))
  end function fixed

  subroutine parse_args()
    character(len=256) :: arg, val
    integer :: a
    nx = 128
    ny_global = 128
    steps = 100
    device = 'auto'
    dump = ''
    require_device = .false.
    a = 1
    do while (a <= command_argument_count())
      call get_command_argument(a, arg)
      if (trim(arg) == '--require-device') then
        require_device = .true.
      else if (a < command_argument_count() .and. (trim(arg) == '--nx' .or. trim(arg) == '--ny' .or. &
               trim(arg) == '--steps' .or. trim(arg) == '--device' .or. trim(arg) == '--dump')) then
        a = a + 1
        call get_command_argument(a, val)
        select case (trim(arg))
        case ('--nx')
          read (val, *) nx
        case ('--ny')
          read (val, *) ny_global
        case ('--steps')
          read (val, *) steps
        case ('--device')
          device = val
        case ('--dump')
          dump = val
        end select
      else
        if (rank == 0) write (error_unit, '(a)') 'usage: cns_f [--nx NX] [--ny NY] [--steps S] ' // &
          '[--device auto|none|K] [--dump FILE] [--require-device]'
        call mpi_finalize(ierr)
        stop 2
      end if
      a = a + 1
    end do
  end subroutine parse_args

  !> Kelvin-Helmholtz double shear layer on the slab's interior rows.
  subroutine initial_state()
    real(rk) :: x, y, band, rho, vel_u, vel_v, p, pi
    integer :: i, j
    pi = acos(-1.0_rk)
    do j = 1, ny
      y = (j0 + j - 1 + 0.5_rk) * dy
      band = tanh((0.25_rk - abs(y - 0.5_rk)) / 0.025_rk)
      do i = 1, nx
        x = (i - 1 + 0.5_rk) * dx
        rho = 1.5_rk + 0.5_rk * band
        vel_u = 0.5_rk * band
        p = 2.5_rk
        vel_v = 0.01_rk * sin(4.0_rk * pi * x) &
                * (exp(-((y - 0.25_rk) / 0.05_rk)**2) + exp(-((y - 0.75_rk) / 0.05_rk)**2))
        u(i, 1, j) = rho
        u(i, 2, j) = rho * vel_u
        u(i, 3, j) = rho * vel_v
        u(i, 4, j) = p / (gamma - 1.0_rk) + 0.5_rk * rho * (vel_u * vel_u + vel_v * vel_v)
      end do
    end do
  end subroutine initial_state

  real(rk) function max_wave_speed() result(smax)
    real(rk) :: rho, vx, vy, p, c
    integer :: i, j
    smax = 0.0_rk
    do j = 1, ny
      do i = 1, nx
        rho = u(i, 1, j)
        vx = u(i, 2, j) / rho
        vy = u(i, 3, j) / rho
        p = (gamma - 1.0_rk) * (u(i, 4, j) - 0.5_rk * rho * (vx * vx + vy * vy))
        c = sqrt(gamma * p / rho) + max(abs(vx), abs(vy))
        smax = max(smax, c)
      end do
    end do
  end function max_wave_speed

  !> Global sums of the conserved variables over the interior (host copy of u), compensated
  !> (Neumaier) as in cns.c: a plain running sum of a million cells rounds by ~1e-12 of the total.
  subroutine totals(out)
    real(rk), intent(out) :: out(nv)
    real(rk) :: local(nv), carry(nv), x, t
    integer :: i, j, v
    local = 0.0_rk
    carry = 0.0_rk
    do j = 1, ny          ! the same summation order as cns.c
      do v = 1, nv
        do i = 1, nx
          x = u(i, v, j)
          t = local(v) + x
          if (abs(local(v)) >= abs(x)) then
            carry(v) = carry(v) + ((local(v) - t) + x)
          else
            carry(v) = carry(v) + ((x - t) + local(v))
          end if
          local(v) = t
        end do
      end do
    end do
    local = local + carry
    call mpi_allreduce(local, out, nv, mpi_double_precision, mpi_sum, mpi_comm_world, ierr)
  end subroutine totals

  !> Halo exchange: interior rows 1..halo go south, ny-halo+1..ny north. On a device, only those
  !> rows travel between device and host. Passing the first element hands MPI the contiguous block.
  subroutine exchange_halos(a)
    real(rk), intent(inout) :: a(nx, nv, 1 - halo:ny + halo)
    real(rk) :: t0
    integer :: block
    t0 = mpi_wtime()
    block = halo * nv * nx
    !$omp target update if(use_device) from(a(:, :, 1:halo), a(:, :, ny - halo + 1:ny))
    call mpi_sendrecv(a(1, 1, 1), block, mpi_double_precision, south, 0, &
                      a(1, 1, ny + 1), block, mpi_double_precision, north, 0, &
                      mpi_comm_world, mpi_status_ignore, ierr)
    call mpi_sendrecv(a(1, 1, ny - halo + 1), block, mpi_double_precision, north, 1, &
                      a(1, 1, 1 - halo), block, mpi_double_precision, south, 1, &
                      mpi_comm_world, mpi_status_ignore, ierr)
    !$omp target update if(use_device) to(a(:, :, 1 - halo:0), a(:, :, ny + 1:ny + halo))
    halo_seconds = halo_seconds + (mpi_wtime() - t0)
  end subroutine exchange_halos

end program cns_f

!> One SSP-RK2 stage: uout = a base + b (u + dt L(u)), with u's halos filled. uout may be base (each
!> element is read, then written by the same thread), never u. An external subroutine with
!> explicit-shape dummies, so the device sees plain arrays already mapped by the caller.
subroutine stage(nx, ny, dev, dx, dy, dt, u, base, uout, a, b, w, mu, fx, fy)
  use cns_numerics, only: rk, nv, halo, gamma, nu0, minmod, rusanov
  use sgs_model, only: sgs_infer, sgs_nx, sgs_ny, sgs_rk
  implicit none
  integer, intent(in) :: nx, ny
  logical, intent(in) :: dev
  real(rk), intent(in) :: dx, dy, dt, a, b
  real(rk), intent(in) :: u(nx, nv, 1 - halo:ny + halo), base(nx, nv, 1 - halo:ny + halo)
  real(rk), intent(inout) :: uout(nx, nv, 1 - halo:ny + halo)
  real(rk), intent(inout) :: w(nx, nv, 1 - halo:ny + halo), mu(nx, 1 - halo:ny + halo)
  real(rk), intent(inout) :: fx(nx, nv, ny), fy(nx, nv, ny + 1)
  real(rk) :: delta, rho, vx, vy, wl(nv), wr(nv), f(nv), m, ux, uy, vxx, vyy, txx, txy, tyy, uf, vf
  real(rk) :: a2, a1, b1, b2, div
  real(sgs_rk) :: g(sgs_nx), nu_over_delta(sgs_ny)
  integer :: i, j, v, ie, iw, im2, im1, ip1

  delta = sqrt(dx * dy)

  ! Primitive variables on every row; the viscosity on all but the outermost halo rows.
  !$omp target teams distribute parallel do collapse(2) if(target: dev) private(rho, vx, vy)
  do j = 1 - halo, ny + halo
    do i = 1, nx
      rho = u(i, 1, j)
      vx = u(i, 2, j) / rho
      vy = u(i, 3, j) / rho
      w(i, 1, j) = rho
      w(i, 2, j) = vx
      w(i, 3, j) = vy
      w(i, 4, j) = (gamma - 1.0_rk) * (u(i, 4, j) - 0.5_rk * rho * (vx * vx + vy * vy))
    end do
  end do
  !$omp target teams distribute parallel do collapse(2) if(target: dev) private(ie, iw, g, nu_over_delta)
  do j = 2 - halo, ny + halo - 1
    do i = 1, nx
      ie = modulo(i, nx) + 1
      iw = modulo(i - 2, nx) + 1
      ! Velocity differences across the cell: Delta times the central gradients.
      g(1) = real(delta * (w(ie, 2, j) - w(iw, 2, j)) / (2.0_rk * dx), sgs_rk)
      g(2) = real(delta * (w(i, 2, j + 1) - w(i, 2, j - 1)) / (2.0_rk * dy), sgs_rk)
      g(3) = real(delta * (w(ie, 3, j) - w(iw, 3, j)) / (2.0_rk * dx), sgs_rk)
      g(4) = real(delta * (w(i, 3, j + 1) - w(i, 3, j - 1)) / (2.0_rk * dy), sgs_rk)
      call sgs_infer(g, nu_over_delta)
      mu(i, j) = w(i, 1, j) * (nu0 + delta * real(nu_over_delta(1), rk))
    end do
  end do

  ! x faces: face i lies between cells i-1 and i of an interior row.
  !$omp target teams distribute parallel do collapse(2) if(target: dev) &
  !$omp private(im2, im1, ip1, v, a2, a1, b1, b2, wl, wr, f, m, ux, vxx, uy, vyy, txx, txy, uf, vf)
  do j = 1, ny
    do i = 1, nx
      im2 = modulo(i - 3, nx) + 1
      im1 = modulo(i - 2, nx) + 1
      ip1 = modulo(i, nx) + 1
      do v = 1, nv
        a2 = w(im2, v, j)
        a1 = w(im1, v, j)
        b1 = w(i, v, j)
        b2 = w(ip1, v, j)
        wl(v) = a1 + 0.5_rk * minmod(a1 - a2, b1 - a1)
        wr(v) = b1 - 0.5_rk * minmod(b1 - a1, b2 - b1)
      end do
      call rusanov(wl, wr, 0, f)
      m = 0.5_rk * (mu(im1, j) + mu(i, j))
      ux = (w(i, 2, j) - w(im1, 2, j)) / dx
      vxx = (w(i, 3, j) - w(im1, 3, j)) / dx
      uy = (w(im1, 2, j + 1) + w(i, 2, j + 1) - w(im1, 2, j - 1) - w(i, 2, j - 1)) / (4.0_rk * dy)
      vyy = (w(im1, 3, j + 1) + w(i, 3, j + 1) - w(im1, 3, j - 1) - w(i, 3, j - 1)) / (4.0_rk * dy)
      txx = m * (2.0_rk * ux - (2.0_rk / 3.0_rk) * (ux + vyy))
      txy = m * (uy + vxx)
      uf = 0.5_rk * (w(im1, 2, j) + w(i, 2, j))
      vf = 0.5_rk * (w(im1, 3, j) + w(i, 3, j))
      fx(i, 1, j) = f(1)
      fx(i, 2, j) = f(2) - txx
      fx(i, 3, j) = f(3) - txy
      fx(i, 4, j) = f(4) - (uf * txx + vf * txy)
    end do
  end do

  ! y faces: face j lies between rows j-1 and j, for the ny + 1 faces of the interior rows.
  !$omp target teams distribute parallel do collapse(2) if(target: dev) &
  !$omp private(ie, iw, v, a2, a1, b1, b2, wl, wr, f, m, uy, vyy, ux, vxx, tyy, txy, uf, vf)
  do j = 1, ny + 1
    do i = 1, nx
      ie = modulo(i, nx) + 1
      iw = modulo(i - 2, nx) + 1
      do v = 1, nv
        a2 = w(i, v, j - 2)
        a1 = w(i, v, j - 1)
        b1 = w(i, v, j)
        b2 = w(i, v, j + 1)
        wl(v) = a1 + 0.5_rk * minmod(a1 - a2, b1 - a1)
        wr(v) = b1 - 0.5_rk * minmod(b1 - a1, b2 - b1)
      end do
      call rusanov(wl, wr, 1, f)
      m = 0.5_rk * (mu(i, j - 1) + mu(i, j))
      uy = (w(i, 2, j) - w(i, 2, j - 1)) / dy
      vyy = (w(i, 3, j) - w(i, 3, j - 1)) / dy
      ux = (w(ie, 2, j - 1) + w(ie, 2, j) - w(iw, 2, j - 1) - w(iw, 2, j)) / (4.0_rk * dx)
      vxx = (w(ie, 3, j - 1) + w(ie, 3, j) - w(iw, 3, j - 1) - w(iw, 3, j)) / (4.0_rk * dx)
      tyy = m * (2.0_rk * vyy - (2.0_rk / 3.0_rk) * (ux + vyy))
      txy = m * (uy + vxx)
      uf = 0.5_rk * (w(i, 2, j - 1) + w(i, 2, j))
      vf = 0.5_rk * (w(i, 3, j - 1) + w(i, 3, j))
      fy(i, 1, j) = f(1)
      fy(i, 2, j) = f(2) - txy
      fy(i, 3, j) = f(3) - tyy
      fy(i, 4, j) = f(4) - (uf * txy + vf * tyy)
    end do
  end do

  ! Update of the interior rows from the face fluxes.
  !$omp target teams distribute parallel do collapse(3) if(target: dev) private(div)
  do j = 1, ny
    do v = 1, nv
      do i = 1, nx
        div = (fx(modulo(i, nx) + 1, v, j) - fx(i, v, j)) / dx + (fy(i, v, j + 1) - fy(i, v, j)) / dy
        uout(i, v, j) = a * base(i, v, j) + b * (u(i, v, j) - dt * div)
      end do
    end do
  end do
end subroutine stage
