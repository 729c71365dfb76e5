"""Host throughput of a generated model: <name>_infer_batch (SIMD blocks on all cores) and a plain
per-point loop, C and Fortran, against onnxruntime's session.run over the same points in one batch,
with the same number of threads.

    python bench/host_batch.py [--model gemm_big [mlp128 ...]] [--points 1000000] [--repeats 5] [--threads N]
                               [--cflags "-O3 -march=native"]

Prints ns per point (median of the repeats), each path's time as a fraction of onnxruntime's, and
writes nothing else. On a machine shared with other work, the wall-clock medians move with the
load; ``--cpu-time`` measures the process's CPU time instead (one thread: what the code costs,
whatever else runs).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from rosenna import zoo
from rosenna.generate import Options, generate

C_DRIVER = r"""#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include "mdl.h"

static int cmp(const void *a, const void *b) { double d = *(const double *)a - *(const double *)b; return (d > 0) - (d < 0); }
#ifdef CPU_TIME
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
#else
static double now(void) { return omp_get_wtime(); }
#endif

int main(int argc, char **argv)
{
    int n = atoi(argv[1]), reps = atoi(argv[2]);
    float *x = malloc(sizeof(float) * (size_t)n * MDL_NX), *y = malloc(sizeof(float) * (size_t)n * MDL_NY);
    double tb[64], tp[64], sum = 0;
    for (long i = 0; i < (long)n * MDL_NX; ++i) x[i] = (float)((i * 2654435761u) % 2000) / 1000.0f - 1.0f;
    for (int r = 0; r < reps; ++r) {
        double t0 = now();
        mdl_infer_batch(n, x, y, NULL);
        tb[r] = now() - t0;
        t0 = now();
#pragma omp parallel for schedule(static)
        for (int i = 0; i < n; ++i) mdl_infer(x + (size_t)i * MDL_NX, y + (size_t)i * MDL_NY);
        tp[r] = now() - t0;
    }
    for (long i = 0; i < (long)n * MDL_NY; ++i) sum += y[i];
    qsort(tb, reps, sizeof(double), cmp); qsort(tp, reps, sizeof(double), cmp);
    printf("%.3f %.3f %g\n", tb[reps / 2] * 1e9 / n, tp[reps / 2] * 1e9 / n, sum);
    return 0;
}
"""

F_DRIVER = """program bench
  use omp_lib
  use mdl_model
  implicit none
  integer :: n, reps, r, i, status
  character(len=32) :: arg
  real(mdl_rk), allocatable :: x(:, :), y(:, :)
  double precision :: tb(64), tp(64), t0
#ifdef CPU_TIME
#define NOW cpu_now()
#else
#define NOW omp_get_wtime()
#endif
  call get_command_argument(1, arg); read (arg, *) n
  call get_command_argument(2, arg); read (arg, *) reps
  allocate (x(mdl_nx, n), y(mdl_ny, n))
  call random_number(x)
  x = 2 * x - 1
  do r = 1, reps
    t0 = NOW
    call mdl_infer_batch(n, x, y, status)
    tb(r) = NOW - t0
    t0 = NOW
    !$omp parallel do schedule(static)
    do i = 1, n
      call mdl_infer(x(:, i), y(:, i))
    end do
    tp(r) = NOW - t0
  end do
  call sort(tb(1:reps)); call sort(tp(1:reps))
  print '(f0.3, 1x, f0.3, 1x, g0)', tb(reps / 2 + 1) * 1d9 / n, tp(reps / 2 + 1) * 1d9 / n, sum(y)
contains
  double precision function cpu_now()
    real :: t
    call cpu_time(t)
    cpu_now = t
  end function cpu_now

  subroutine sort(a)
    double precision, intent(inout) :: a(:)
    integer :: i, j
    double precision :: t
    do i = 2, size(a)
      t = a(i); j = i - 1
      do while (j >= 1)
        if (a(j) <= t) exit
        a(j + 1) = a(j); j = j - 1
      end do
      a(j + 1) = t
    end do
  end subroutine sort
end program bench
"""


def onnxruntime_ns(path, nx, points, repeats, threads, cpu_time=False):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    x = np.random.default_rng(0).uniform(-1, 1, (points, nx)).astype(np.float32)
    clock = time.process_time if cpu_time else time.perf_counter
    sess.run(None, {name: x[:1000]})  # warm-up
    times = []
    for _ in range(repeats):
        t0 = clock()
        sess.run(None, {name: x})
        times.append(clock() - t0)
    return sorted(times)[len(times) // 2] * 1e9 / points


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="+", default=["gemm_big"], choices=sorted(zoo.MODELS),
                    help="one or more zoo models, measured one after the other")
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cflags", default="-O3 -march=native")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for every path (default: all cores)")
    ap.add_argument("--cpu-time", action="store_true", help="process CPU time instead of wall clock (use one thread)")
    args = ap.parse_args(argv)
    for model in args.model:
        measure(model, args)
    return 0


def measure(model, args):
    work = tempfile.mkdtemp(prefix="rosenna-bench-")
    path = zoo.save(model, os.path.join(work, "m.onnx"))
    plan, _ = generate(path, work, Options(name="mdl"))
    flags = args.cflags.split() + (["-DCPU_TIME"] if args.cpu_time else [])
    with open(os.path.join(work, "drv.c"), "w") as fh:
        fh.write(C_DRIVER)
    with open(os.path.join(work, "drv.F90"), "w") as fh:
        fh.write(F_DRIVER)
    subprocess.run(["gcc", *flags, "-fopenmp", "-I", work, os.path.join(work, "drv.c"), os.path.join(work, "mdl.c"),
                    "-o", os.path.join(work, "drv_c"), "-lm"], check=True)
    subprocess.run(["gfortran", *flags, "-fopenmp", "-J", work, os.path.join(work, "mdl_model.F90"),
                    os.path.join(work, "drv.F90"), "-o", os.path.join(work, "drv_f")], check=True)
    rows = []
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    for lang in ("c", "f"):
        out = subprocess.run([os.path.join(work, f"drv_{lang}"), str(args.points), str(args.repeats)],
                             capture_output=True, text=True, check=True, env=env).stdout.split()
        rows.append((lang, float(out[0]), float(out[1])))
    ort_ns = onnxruntime_ns(path, plan.nx, args.points, args.repeats, args.threads, args.cpu_time)
    clock = "CPU time" if args.cpu_time else "wall clock"
    print(f"model {model}, {args.points} points, {args.threads} threads of {os.cpu_count()} cores, "
          f"cflags {args.cflags}, {clock}, median of {args.repeats}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'path':<38} {'ns/point':>9} {'x onnxruntime':>14}")
    print(f"{'onnxruntime session.run (1 batch)':<38} {ort_ns:>9.1f} {1.0:>14.2f}")
    for lang, batch, point in rows:
        label = "C" if lang == "c" else "Fortran"
        print(f"{label + ' <name>_infer_batch':<38} {batch:>9.1f} {batch / ort_ns:>14.2f}")
        print(f"{label + ' per-point loop (omp parallel)':<38} {point:>9.1f} {point / ort_ns:>14.2f}")
    print(flush=True)


if __name__ == "__main__":
    sys.exit(main())
