/* <n>_infer per point inside the program's own OpenMP target loop, as the gate's c-omp harness
   (rosenna/gate/templates/per_point.c), with launch clauses chosen at run time; built and run by
   bench/omp_point.sh. Usage: omp_point N REPS TL NT
   TL, NT: thread_limit and num_teams clauses (0: the loop without the clause). Prints ns/point
   (median of REPS) and the worst error against the host's <n>_infer (the plan's loops) in units
   of verify's float32 tolerance (atol 1e-6 + rtol 1e-5 |want|, rosenna/compare.py) on 20000 of
   the points spread over all of them; exits 1 when one is outside. Float32 models only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include MODEL_H

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void step(long n, const float *x, float *y, int tl, int nt)
{
    if (tl > 0 && nt > 0) {
#pragma omp target teams distribute parallel for num_teams(nt) thread_limit(tl)
        for (long i = 0; i < n; ++i)
            INFER(x + i * NX, y + i * NY);
    } else if (tl > 0) {
#pragma omp target teams distribute parallel for thread_limit(tl)
        for (long i = 0; i < n; ++i)
            INFER(x + i * NX, y + i * NY);
    } else {
#pragma omp target teams distribute parallel for
        for (long i = 0; i < n; ++i)
            INFER(x + i * NX, y + i * NY);
    }
}

int main(int argc, char **argv)
{
    const long n = argc > 1 ? atol(argv[1]) : 1000000;
    const int reps = argc > 2 ? atoi(argv[2]) : 7, tl = argc > 3 ? atoi(argv[3]) : 0, nt = argc > 4 ? atoi(argv[4]) : 0;
    float *x = malloc(sizeof(float) * n * NX), *y = calloc((size_t)n * NY, sizeof(float));
    double *t = malloc(sizeof(double) * reps);
    unsigned s = 12345u;
    for (long i = 0; i < n * NX; ++i) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) * (1.0 / 16777216.0) * 4.0 - 2.0);
    }
    int on_device = 0;
#pragma omp target map(from : on_device)
    on_device = !omp_is_initial_device();
#pragma omp target enter data map(to : x[0:n * NX]) map(alloc : y[0:n * NY])
    step(n, x, y, tl, nt);  /* warm-up */
    for (int r = 0; r < reps; ++r) {
        const double t0 = omp_get_wtime();
        step(n, x, y, tl, nt);
        t[r] = omp_get_wtime() - t0;
    }
#pragma omp target exit data map(from : y[0:n * NY]) map(release : x[0:n * NX])
    qsort(t, reps, sizeof(double), by_value);
    double worst = 0.0;
    long bad = 0;
    float want[NY];
    const long stride = n > 20000 ? n / 20000 : 1;
    for (long i = 0; i < n; i += stride) {
        INFER(x + i * NX, want);
        for (int e = 0; e < NY; ++e) {
            const double d = fabs((double)y[i * NY + e] - want[e]), tol = 1e-6 + 1e-5 * fabs((double)want[e]);
            if (d / tol > worst || isnan(d))
                worst = isnan(d) ? INFINITY : d / tol;
            bad += !(d <= tol);
        }
    }
    printf("on_device %d tl %d nt %d ns/pt %.4f (min %.4f) worst/tol %.3f outside %ld\n", on_device, tl, nt,
           t[reps / 2] * 1e9 / n, t[0] * 1e9 / n, worst, bad);
    return bad != 0;
}
