"""The gate's harness programs, one per way a solver calls a generated model.

Every harness takes ``N REPS STEPS XFILE YFILE [PLANT]`` (a file-loaded model, built with
-DROSENNA_WEIGHTS, reads its weights file from $ROSENNA_GATE_WEIGHTS): it reads N points of x from XFILE,
maps or copies them to the device outside any timed window, times REPS passes over the N points
(median reported, ns per point), then runs STEPS further passes over the resident data (the
loop whose host-device transfers the gate counts: it runs each harness at STEPS=0 and STEPS=4
and takes the difference), and writes the first points of y to YFILE. PLANT=1 makes each of those
steps copy 4 bytes back to the host on purpose, so that the gate can show its counter sees a
transfer. Output lines: ``ON_DEVICE 0|1`` (checked inside the offload region: libgomp falls back
to the host silently) and ``NS_PER_POINT x``.

Placeholders: ``{n}`` the model name, ``{N}`` its upper-case form, ``{check}`` points written back.
"""

from pathlib import Path

_C_PER_POINT = r"""/* Gate harness @TITLE@ */
#include <stdio.h>
#include <stdlib.h>
@INCLUDES@
#include "{n}.h"

#define NX {N}_NX
#define NY {N}_NY

static int by_value(const void *a, const void *b)
{{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}}

@CLOCK@static void step(long n, const float *x, float *y)
{{
@LOOP@
    for (long i = 0; i < n; ++i)
        {n}_infer(x + i * NX, y + i * NY);
}}

int main(int argc, char **argv)
{{
    if (argc < 6)
        return 2;
    const long n = atol(argv[1]);
    const int reps = atoi(argv[2]), steps = atoi(argv[3]), plant = argc > 6 && atoi(argv[6]);
    float *x = malloc(sizeof(float) * n * NX), *y = calloc((size_t)n * NY, sizeof(float));
    double *t = malloc(sizeof(double) * reps);
    FILE *f = fopen(argv[4], "rb");
    if (!f || fread(x, sizeof(float), (size_t)n * NX, f) != (size_t)n * NX)
        return 3;
    fclose(f);
#ifdef ROSENNA_WEIGHTS
    if ({n}_init(getenv("ROSENNA_GATE_WEIGHTS")) != 0) {{
        fprintf(stderr, "{n}_init failed\n");
        return 4;
    }}
#endif
    int on_device = 0;
@ON_DEVICE@
@ENTER@
    for (int r = 0; r < reps; ++r) {{
        const double t0 = @NOW@;
        step(n, x, y);
        t[r] = @NOW@ - t0;
    }}
    for (int s = 0; s < steps; ++s) {{
        step(n, x, y);
        if (plant) {{
@PLANT@
        }}
    }}
@EXIT@
    qsort(t, reps, sizeof(double), by_value);
    f = fopen(argv[5], "wb");
    fwrite(y, sizeof(float), (size_t)(n < {check} ? n : {check}) * NY, f);
    fclose(f);
    printf("ON_DEVICE %d\nNS_PER_POINT %.6f\n", on_device, t[reps / 2] * 1e9 / n);
    return 0;
}}
"""

#: Where the C per-point harnesses differ: the offload model's directives, as a table.
_C_MODELS = {
    "omp": {
        "TITLE": "1: {n}_infer per point inside the harness's own OpenMP target loop.",
        "INCLUDES": "#include <omp.h>",
        "CLOCK": "",
        "LOOP": "#pragma omp target teams distribute parallel for",
        "ON_DEVICE": "#pragma omp target map(from : on_device)\n    on_device = !omp_is_initial_device();",
        "ENTER": "#pragma omp target enter data map(to : x[0:n * NX]) map(alloc : y[0:n * NY])",
        "NOW": "omp_get_wtime()",
        "PLANT": "#pragma omp target update from(y[0:1])",
        "EXIT": "#pragma omp target exit data map(from : y[0:n * NY]) map(release : x[0:n * NX])",
    },
    "acc": {
        "TITLE": "1b: {n}_infer per point inside the harness's own OpenACC parallel loop.",
        "INCLUDES": "#include <time.h>\n#include <openacc.h>",
        "CLOCK": ("static double now(void)\n{{\n    struct timespec ts;\n    clock_gettime(CLOCK_MONOTONIC, &ts);\n"
                  "    return ts.tv_sec + 1e-9 * ts.tv_nsec;\n}}\n\n"),
        "LOOP": "#pragma acc parallel loop gang vector present(x[0:n * NX], y[0:n * NY])",
        "ON_DEVICE": "#pragma acc serial copyout(on_device)\n    on_device = !acc_on_device(acc_device_host);",
        "ENTER": "#pragma acc enter data copyin(x[0:n * NX]) create(y[0:n * NY])",
        "NOW": "now()",
        "PLANT": "#pragma acc update self(y[0:1])",
        "EXIT": "#pragma acc exit data copyout(y[0:n * NY]) delete(x[0:n * NX])",
    },
}


def _c_per_point(model):
    text = _C_PER_POINT
    for key, value in _C_MODELS[model].items():
        text = text.replace(f"@{key}@", value)
    return text


C_OMP = _c_per_point("omp")

FORTRAN_OMP = r"""! Gate harness 2: {n}_infer per point inside the harness's own OpenMP target loop, arrays passed
! to the loop's subroutine as explicit-shape dummies (no descriptor re-mapped per step).
program gate_fortran
  use, intrinsic :: iso_fortran_env, only: real32
  use omp_lib
  use {n}_model
  implicit none
  integer, parameter :: nx = {n}_nx, ny = {n}_ny
  integer :: n, reps, steps, plant, r, s, u, on_device, status, m
  character(len=4096) :: arg, xfile, yfile
  real({n}_rk), allocatable :: x(:, :), y(:, :)
  double precision, allocatable :: t(:)
  double precision :: t0, tmp

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
  call {n}_init(trim(arg), status)
  if (status /= 0) stop 4
#endif
  on_device = 0
  !$omp target map(from: on_device)
  if (.not. omp_is_initial_device()) on_device = 1
  !$omp end target
  !$omp target enter data map(to: x) map(alloc: y)
  do r = 1, reps
    t0 = omp_get_wtime()
    call step(n, x, y)
    t(r) = omp_get_wtime() - t0
  end do
  do s = 1, steps
    call step(n, x, y)
    if (plant /= 0) then
      !$omp target update from(y(1:1, 1:1))
    end if
  end do
  !$omp target exit data map(from: y) map(delete: x)
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
  m = min(n, {check})
  open (newunit=u, file=trim(yfile), access='stream', form='unformatted', status='replace')
  write (u) y(:, 1:m)
  close (u)
  print '(a,i0)', 'ON_DEVICE ', on_device
  print '(a,f12.6)', 'NS_PER_POINT ', t(reps / 2 + 1) * 1d9 / n
contains
  subroutine step(n, x, y)
    integer, intent(in) :: n
    real({n}_rk), intent(in) :: x(nx, n)
    real({n}_rk), intent(inout) :: y(ny, n)
    integer :: i
    !$omp target teams distribute parallel do
    do i = 1, n
      call {n}_infer(x(:, i), y(:, i))
    end do
    !$omp end target teams distribute parallel do
  end subroutine step
end program gate_fortran
"""

# Harness 3 and 4 share this body; DEVICE_ALLOC etc. differ between the CUDA runtime and OpenMP.
_BATCH_BODY = r"""
static int by_value(const void *a, const void *b)
{{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}}

static double now(void)
{{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}}

int main(int argc, char **argv)
{{
    if (argc < 6)
        return 2;
    const long n = atol(argv[1]);
    const int reps = atoi(argv[2]), steps = atoi(argv[3]), plant = argc > 6 && atoi(argv[6]);
    float *x = (float *)malloc(sizeof(float) * n * NX), *y = (float *)calloc((size_t)n * NY, sizeof(float));
    double *t = (double *)malloc(sizeof(double) * reps);
    FILE *f = fopen(argv[4], "rb");
    if (!f || fread(x, sizeof(float), (size_t)n * NX, f) != (size_t)n * NX)
        return 3;
    fclose(f);
#ifdef ROSENNA_WEIGHTS
    if ({n}_init(getenv("ROSENNA_GATE_WEIGHTS")) != 0) {{
        fprintf(stderr, "{n}_init failed\n");
        return 4;
    }}
#endif
    float *dx = (float *)DEVICE_ALLOC(sizeof(float) * n * NX), *dy = (float *)DEVICE_ALLOC(sizeof(float) * n * NY);
    if (!dx || !dy)
        return 5;
    TO_DEVICE(dx, x, sizeof(float) * n * NX);
    for (int r = 0; r < reps; ++r) {{
        const double t0 = now();
        if (STEP(n, dx, dy) != 0)
            return 6;
        SYNC();
        t[r] = now() - t0;
    }}
    for (int s = 0; s < steps; ++s) {{
        if (STEP(n, dx, dy) != 0)
            return 6;
        if (plant)
            TO_HOST(y, dy, sizeof(float));
    }}
    SYNC();
    TO_HOST(y, dy, sizeof(float) * (n < {check} ? n : {check}) * NY);
    qsort(t, reps, sizeof(double), by_value);
    f = fopen(argv[5], "wb");
    fwrite(y, sizeof(float), (size_t)(n < {check} ? n : {check}) * NY, f);
    fclose(f);
    printf("ON_DEVICE %d\nNS_PER_POINT %.6f\n", ON_DEVICE, t[reps / 2] * 1e9 / n);
    return 0;
}}
"""

C_BATCH_CUDA = r"""/* Gate harness 3 (cuda backend): device-resident data handed to {n}_infer_batch. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include "{n}.h"

#define NX {N}_NX
#define NY {N}_NY
static void *DEVICE_ALLOC(size_t bytes) {{ void *p = NULL; return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL; }}
#define TO_DEVICE(d, h, b) cudaMemcpy(d, h, b, cudaMemcpyHostToDevice)
#define TO_HOST(h, d, b) cudaMemcpy(h, d, b, cudaMemcpyDeviceToHost)
#define SYNC() cudaDeviceSynchronize()
#define STEP(n, x, y) {n}_infer_batch((int)(n), x, y, NULL)
#define ON_DEVICE 1
""" + _BATCH_BODY

C_BATCH_OMP = r"""/* Gate harness 3 (omp backend): device-resident data (omp_target_alloc) handed to
   {n}_infer_batch; on a machine without a device these are host pointers. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <omp.h>
#include "{n}.h"

#define NX {N}_NX
#define NY {N}_NY
#define DEVICE_ALLOC(b) omp_target_alloc(b, omp_get_default_device())
#define TO_DEVICE(d, h, b) omp_target_memcpy(d, h, b, 0, 0, omp_get_default_device(), omp_get_initial_device())
#define TO_HOST(h, d, b) omp_target_memcpy(h, d, b, 0, 0, omp_get_initial_device(), omp_get_default_device())
#define SYNC() ((void)0)
#define STEP(n, x, y) {n}_infer_batch((int)(n), x, y, NULL)
#define ON_DEVICE (omp_get_default_device() != omp_get_initial_device())
""" + _BATCH_BODY

CUDA_USER = r"""/* Gate harness 4: the user's own CUDA kernel calls {n}_infer once per thread. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda_runtime.h>
#include "{n}.h"

#define NX {N}_NX
#define NY {N}_NY

__global__ void user_step(long n, const float *x, float *y)
{{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        {n}_infer(x + i * NX, y + i * NY);
}}

static int launch(long n, const float *x, float *y)
{{
    user_step<<<(unsigned)((n + 255) / 256), 256>>>(n, x, y);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}}

static void *DEVICE_ALLOC(size_t bytes) {{ void *p = NULL; return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL; }}
#define TO_DEVICE(d, h, b) cudaMemcpy(d, h, b, cudaMemcpyHostToDevice)
#define TO_HOST(h, d, b) cudaMemcpy(h, d, b, cudaMemcpyDeviceToHost)
#define SYNC() cudaDeviceSynchronize()
#define STEP(n, x, y) launch(n, x, y)
#define ON_DEVICE 1
""" + _BATCH_BODY

#: A CUPTI injection library (CUDA_INJECTION64_PATH) that counts every host<->device copy the
#: program's runtimes make and prints the totals at exit; examples/run_gpu.sh builds the same file.
COUNTER = (Path(__file__).resolve().parent.parent / "data" / "count_transfers.cu").read_text()

C_ACC = _c_per_point("acc")

FORTRAN_ACC = FORTRAN_OMP.replace(
    "! Gate harness 2: {n}_infer per point inside the harness's own OpenMP target loop",
    "! Gate harness 2b: {n}_infer per point inside the harness's own OpenACC parallel loop").replace(
    "  use omp_lib\n", "  use openacc\n").replace(
    "  !$omp target map(from: on_device)\n  if (.not. omp_is_initial_device()) on_device = 1\n  !$omp end target\n",
    "  !$acc serial copyout(on_device)\n  if (.not. acc_on_device(acc_device_host)) on_device = 1\n  !$acc end serial\n").replace(
    "  !$omp target enter data map(to: x) map(alloc: y)\n", "  !$acc enter data copyin(x) create(y)\n").replace(
    "      !$omp target update from(y(1:1, 1:1))\n", "      !$acc update self(y(1:1, 1:1))\n").replace(
    "  !$omp target exit data map(from: y) map(delete: x)\n", "  !$acc exit data copyout(y) delete(x)\n").replace(
    "    t0 = omp_get_wtime()\n", "    call system_clock(clock0, rate)\n").replace(
    "    t(r) = omp_get_wtime() - t0\n", "    call system_clock(clock1)\n    t(r) = dble(clock1 - clock0) / dble(rate)\n").replace(
    "  double precision :: t0, tmp\n", "  double precision :: tmp\n  integer(8) :: clock0, clock1, rate\n").replace(
    "    !$omp target teams distribute parallel do\n", "    !$acc parallel loop gang vector present(x, y)\n").replace(
    "    !$omp end target teams distribute parallel do\n", "")
