! Gate harness @title@, arrays passed
! to the loop's subroutine as explicit-shape dummies (no descriptor re-mapped per step).
program gate_fortran
  use @runtime_module@
  use @n@_model
  implicit none
  integer, parameter :: nx = @n@_nx, ny = @n@_ny
  integer :: n, reps, steps, plant, r, s, u, on_device, status, m
  character(len=4096) :: arg, xfile, yfile
  real(@n@_rk), allocatable :: x(:, :), y(:, :)
  double precision, allocatable :: t(:)
@clock_declarations@

  call get_command_argument(1, arg); read (arg, *) n
  call get_command_argument(2, arg); read (arg, *) reps
  call get_command_argument(3, arg); read (arg, *) steps
  call get_command_argument(4, xfile)
  call get_command_argument(5, yfile)
  plant = 0
  if (command_argument_count() > 5) then
    call get_command_argument(6, arg); read (arg, *) plant
  end if
  allocate (x(nx, n), y(ny, n), t(reps))
  y = 0
  open (newunit=u, file=trim(xfile), access='stream', form='unformatted', status='old')
  read (u) x
  close (u)
  status = 0
#ifdef ROSENNA_WEIGHTS
  call get_environment_variable('ROSENNA_GATE_WEIGHTS', arg)
  call @n@_init(trim(arg), status)
  if (status /= 0) stop 4
#endif
  on_device = 0
@on_device@
@enter@
  do r = 1, reps
@tic@
    call step(n, x, y)
@toc@
  end do
  do s = 1, steps
    call step(n, x, y)
    if (plant /= 0) then
@plant@
    end if
  end do
@exit@
  do r = 2, reps
    tmp = t(r)
    s = r - 1
    do while (s >= 1)
      if (t(s) <= tmp) exit
      t(s + 1) = t(s)
      s = s - 1
    end do
    t(s + 1) = tmp
  end do
  m = min(n, @check@)
  open (newunit=u, file=trim(yfile), access='stream', form='unformatted', status='replace')
  write (u) y(:, 1:m)
  close (u)
  print '(a,i0)', 'ON_DEVICE ', on_device
  print '(a,es16.8e3)', 'NS_PER_POINT ', t(reps / 2 + 1) * 1d9 / n
contains
  subroutine step(n, x, y)
    integer, intent(in) :: n
    real(@n@_rk), intent(in) :: x(nx, n)
    real(@n@_rk), intent(inout) :: y(ny, n)
@step@
  end subroutine step
end program gate_fortran
