! A 2-D advection-diffusion-reaction solver whose reaction rate is a learned surrogate: the Fortran
! twin of adr.c (same equations, constants, checks and output; see adr.c for the physics).
!
!   dY/dt + a.grad(Y) = D lap(Y) - omega,   dT/dt + a.grad(T) = D lap(T) + Q omega
!   reference omega = A Y exp(-Ta / T); surrogate omega = adr_rate_infer((Y, T)) from rosenna
!
! One source, two offload models: with -fopenmp the loops are `!$omp target` regions, with
! -fopenacc `!$acc parallel loop`s. The fields are mapped once around the time loop and stay on the
! device; the model's weights are resident module arrays (declare target / declare copyin in the
! generated module). The solver is double precision, the model single: converted at the call site.
!
!   adr_f [--n N] [--steps S] [--tol T] [--require-device]
!> The per-cell physics, in a module so the device routines are module procedures.
module adr_physics
  use, intrinsic :: iso_fortran_env, only: real64
  use adr_rate_model, only: adr_rate_infer, adr_rate_nx, adr_rate_ny, adr_rate_rk
  implicit none
  private
  public :: rk, heat_q, diffusivity, vel_x, vel_y, update_cell

  integer, parameter :: rk = real64
  ! Physical constants; train_rate.py uses the same A and Ta.
  real(rk), parameter :: rate_a = 20.0_rk, rate_ta = 6.0_rk, heat_q = 3.0_rk
  real(rk), parameter :: diffusivity = 5.0e-3_rk, vel_x = 1.0_rk, vel_y = 0.5_rk

contains

  !> Upwind flux through a face with velocity a between cells holding left and right.
  pure real(rk) function upwind(a, left, right)
    !$omp declare target
    !$acc routine seq
    real(rk), intent(in) :: a, left, right
    upwind = merge(a * left, a * right, a > 0.0_rk)
  end function upwind

  !> One cell's forward-Euler update from its value and its four neighbours' (west, east, south, north).
  pure subroutine update_cell(yv, tv, dt, dx, use_model, y_new, t_new)
    !$omp declare target
    !$acc routine seq
    real(rk), intent(in) :: yv(5), tv(5), dt, dx
    logical, intent(in) :: use_model
    real(rk), intent(out) :: y_new, t_new
    real(adr_rate_rk) :: state(adr_rate_nx), rate(adr_rate_ny)
    real(rk) :: omega, adv_y, adv_t, dif_y, dif_t

    if (use_model) then
      state = [real(yv(1), adr_rate_rk), real(tv(1), adr_rate_rk)]
      call adr_rate_infer(state, rate)
      omega = real(rate(1), rk)
    else
      omega = rate_a * yv(1) * exp(-rate_ta / tv(1))
    end if
    ! yv(1) centre, (2) west, (3) east, (4) south, (5) north; same operation order as adr.c.
    adv_y = (upwind(vel_x, yv(1), yv(3)) - upwind(vel_x, yv(2), yv(1)) &
             + upwind(vel_y, yv(1), yv(5)) - upwind(vel_y, yv(4), yv(1))) / dx
    adv_t = (upwind(vel_x, tv(1), tv(3)) - upwind(vel_x, tv(2), tv(1)) &
             + upwind(vel_y, tv(1), tv(5)) - upwind(vel_y, tv(4), tv(1))) / dx
    dif_y = diffusivity * (yv(3) + yv(2) + yv(5) + yv(4) - 4.0_rk * yv(1)) / (dx * dx)
    dif_t = diffusivity * (tv(3) + tv(2) + tv(5) + tv(4) - 4.0_rk * tv(1)) / (dx * dx)
    y_new = yv(1) + dt * (dif_y - adv_y - omega)
    t_new = tv(1) + dt * (dif_t - adv_t + heat_q * omega)
  end subroutine update_cell

end module adr_physics

program adr_f
  use, intrinsic :: iso_fortran_env, only: real64, int64, output_unit, error_unit
  use adr_physics, only: rk, heat_q, diffusivity, vel_x, vel_y, update_cell
#if defined(_OPENACC)
  use openacc, only: acc_on_device, acc_device_not_host
#elif defined(_OPENMP)
  use omp_lib, only: omp_is_initial_device
#endif
  implicit none

  real(rk), parameter :: drift_tol = 1.0e-12_rk

  integer :: n, steps, worst(2)
  logical :: require_device, on_device, ok
  real(rk) :: tol, dx, dt, max_diff, drift_ref, drift_sur
  real(rk), allocatable :: t_ref(:, :), t_sur(:, :)
  real(rk) :: ref(4), sur(4)   ! seconds per step, sum(H) before, sum(H) after, burnt fraction
  character(len=*), parameter :: model_kind = &
#if defined(_OPENACC)
    'OpenACC'
#elif defined(_OPENMP)
    'OpenMP target'
#else
    'serial'
#endif

  call parse_args(n, steps, tol, require_device)
  dx = 1.0_rk / n
  ! Monotone while 1 - dt ((|ax| + |ay|) / dx + 4 D / dx^2) > 0: keep 20 % (as adr.c).
  dt = 0.8_rk / ((abs(vel_x) + abs(vel_y)) / dx + 4.0_rk * diffusivity / (dx * dx))

  on_device = runs_on_device()
  write (output_unit, '(a, a, a, i0, a, i0, a, i0, a, es9.3, a, f5.3, a, a)') 'adr (Fortran, ', &
    model_kind, '): ', n, ' x ', n, ' cells, ', steps, ' timed steps (+1 warm-up) of dt=', dt, ' to t=', (steps + 1) * dt, &
    '; offload region ran on the ', trim(merge('device', 'host  ', on_device))
  if (require_device .and. .not. on_device) then
    write (error_unit, '(a)') 'adr_f: --require-device, but the offload region ran on the host'
    stop 1
  end if

  allocate (t_ref(n, n), t_sur(n, n))
  call simulate(.false., t_ref, ref)
  call simulate(.true., t_sur, sur)

  max_diff = maxval(abs(t_sur - t_ref))
  worst = maxloc(abs(t_sur - t_ref))
  drift_ref = abs(ref(3) - ref(2)) / ref(2)
  drift_sur = abs(sur(3) - sur(2)) / sur(2)
  write (output_unit, '(7a)') 'time per step: analytic rate ', fixed(1e3_rk * ref(1), 3), ' ms, surrogate ', &
    fixed(1e3_rk * sur(1), 3), ' ms (', fixed(1e9_rk * sur(1) / (real(n, rk)**2), 1), ' ns per cell)'
  write (output_unit, '(a, f8.6, a, f8.6)') 'burnt fraction: analytic ', ref(4), ', surrogate ', sur(4)
  write (output_unit, '(a, es10.3, a, i0, a, i0, a, f8.6, a, f8.6, a, es8.1, a)') &
    'max |T_surrogate - T_analytic| = ', max_diff, ' at cell (', worst(1) - 1, ', ', worst(2) - 1, &
    '): ', t_sur(worst(1), worst(2)), ' vs ', t_ref(worst(1), worst(2)), ' (tolerance ', tol, ')'
  write (output_unit, '(a, es9.2, a, es9.2, a, es8.1, a)') 'relative drift of sum(T + Q Y): analytic ', &
    drift_ref, ', surrogate ', drift_sur, ' (tolerance ', drift_tol, ')'
  ok = max_diff <= tol .and. drift_ref <= drift_tol .and. drift_sur <= drift_tol
  write (output_unit, '(a)') merge('PASS', 'FAIL', ok)
  if (.not. ok) stop 1

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

  subroutine parse_args(n, steps, tol, require_device)
    integer, intent(out) :: n, steps
    real(rk), intent(out) :: tol
    logical, intent(out) :: require_device
    character(len=64) :: arg, val
    integer :: a

    n = 128
    steps = 200
    tol = 0.02_rk
    require_device = .false.
    a = 1
    do while (a <= command_argument_count())
      call get_command_argument(a, arg)
      if (trim(arg) == '--require-device') then
        require_device = .true.
      else if (a < command_argument_count() .and. &
               (trim(arg) == '--n' .or. trim(arg) == '--steps' .or. trim(arg) == '--tol')) then
        a = a + 1
        call get_command_argument(a, val)
        select case (trim(arg))
        case ('--n')
          read (val, *) n
        case ('--steps')
          read (val, *) steps
        case ('--tol')
          read (val, *) tol
        end select
      else
        write (error_unit, '(a)') 'usage: adr_f [--n N] [--steps S] [--tol T] [--require-device]'
        stop 2
      end if
      a = a + 1
    end do
    if (n < 8 .or. steps < 1) then
      write (error_unit, '(a)') 'adr_f: need --n >= 8 and --steps >= 1'
      stop 2
    end if
  end subroutine parse_args

  !> Whether an offload region runs on a device (not the host fallback).
  logical function runs_on_device() result(dev)
    dev = .false.
#if defined(_OPENACC)
    !$acc serial copyout(dev)
    dev = acc_on_device(acc_device_not_host)
    !$acc end serial
#elif defined(_OPENMP)
    !$omp target map(from: dev)
    dev = .not. omp_is_initial_device()
    !$omp end target
#endif
  end function runs_on_device

  !> Advances y and t (planes 0 and 1: current and next) by steps steps; returns the plane
  !> holding the result. The arrays are explicit-shape dummies of data already on the device.
  integer function advance(n, steps, dt, dx, use_model, y, t, first) result(cur)
    integer, intent(in) :: n, steps, first
    real(rk), intent(in) :: dt, dx
    logical, intent(in) :: use_model
    real(rk), intent(inout) :: y(n, n, 0:1), t(n, n, 0:1)
    integer :: step, i, j, iw, ie, js, jn, nxt

    cur = first
    do step = 1, steps
      nxt = 1 - cur
      !$omp target teams distribute parallel do collapse(2) private(iw, ie, js, jn)
      !$acc parallel loop gang vector collapse(2) present(y, t) private(iw, ie, js, jn)
      do j = 1, n
        do i = 1, n
          iw = modulo(i - 2, n) + 1
          ie = modulo(i, n) + 1
          js = modulo(j - 2, n) + 1
          jn = modulo(j, n) + 1
          call update_cell([y(i, j, cur), y(iw, j, cur), y(ie, j, cur), y(i, js, cur), y(i, jn, cur)], &
                           [t(i, j, cur), t(iw, j, cur), t(ie, j, cur), t(i, js, cur), t(i, jn, cur)], &
                           dt, dx, use_model, y(i, j, nxt), t(i, j, nxt))
        end do
      end do
      cur = nxt
    end do
  end function advance

  !> One run: initial state, steps steps on the device, final temperature into t_out;
  !> stats = (seconds per step, sum(H) before, sum(H) after, burnt fraction).
  subroutine simulate(use_model, t_out, stats)
    logical, intent(in) :: use_model
    real(rk), intent(out) :: t_out(:, :), stats(4)
    real(rk), allocatable :: y(:, :, :), t(:, :, :)
    real(rk) :: cx, cy, burnt
    integer(int64) :: c0, c1, rate
    integer :: i, j, cur

    allocate (y(n, n, 0:1), t(n, n, 0:1))
    ! A burnt disc (Y = 0, T = 1 + Q) of radius 0.1 at (0.3, 0.5) in fresh gas (Y = 1, T = 1).
    do j = 1, n
      do i = 1, n
        cx = (i - 0.5_rk) / n - 0.3_rk
        cy = (j - 0.5_rk) / n - 0.5_rk
        burnt = 0.5_rk * (1.0_rk - tanh((sqrt(cx * cx + cy * cy) - 0.1_rk) / 0.02_rk))
        y(i, j, :) = 1.0_rk - burnt
        t(i, j, :) = 1.0_rk + heat_q * burnt
      end do
    end do
    stats(2) = sum(t(:, :, 0) + heat_q * y(:, :, 0))

    !$omp target data map(tofrom: y, t)
    !$acc data copy(y, t)
    cur = advance(n, 1, dt, dx, use_model, y, t, 0)   ! warm-up: loads the kernels, not timed
    call system_clock(c0, rate)
    cur = advance(n, steps, dt, dx, use_model, y, t, cur)
    call system_clock(c1)
    !$acc end data
    !$omp end target data

    stats(1) = real(c1 - c0, rk) / real(rate, rk) / steps
    stats(3) = sum(t(:, :, cur) + heat_q * y(:, :, cur))
    stats(4) = sum(1.0_rk - y(:, :, cur)) / (real(n, rk)**2)
    t_out = t(:, :, cur)
  end subroutine simulate

end program adr_f
