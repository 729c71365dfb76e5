/* A Poisson solve whose initial guess comes from a conv net, through rosenna's pguess_infer_one.
 *
 *   -lap(u) = f on the unit square, 64 x 64 interior nodes, u = 0 on the boundary,
 *   5-point Laplacian, h = 1/65; Jacobi until ||r|| <= tol ||f|| (checked every 10 sweeps),
 *   and, for comparison, conjugate gradients to the same tolerance.
 *
 * The program solves each right-hand side from u = 0 and from the net's guess (train_guess.py)
 * and prints the iteration counts. The net saw max |f| = 1 in training; the equation is linear, so
 * f is scaled to that and the guess scaled back. Exit status 1 unless every solve converges and the
 * guess cuts the total Jacobi sweeps by at least --min-cut (a fraction).
 *
 * Why Jacobi: the guess (about 8 % error) removes most of the smooth error, which is what Jacobi
 * is slow at. CG is indifferent to it: the guess's rough error makes a residual as large as f's,
 * and CG needs about as many iterations from there as from zero (the program prints both).
 *
 * The fields live on the device for the whole run (omp target data); pguess_infer_one takes
 * device pointers (use_device_ptr) and runs the net as one parallel loop per layer.
 *
 *   poisson [--cases K] [--tol T] [--min-cut C] [--require-device]   (defaults 8, 1e-6, 0.1)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "pguess.h"

#define N 64
#define CELLS (N * N)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A small deterministic generator, so every platform solves the same cases. */
static double uniform(unsigned long long *state, double lo, double hi)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (double)(*state >> 11) / 9007199254740992.0;
}

/* 1 to 4 Gaussian blobs, as in training; returns max |f|. */
static double make_rhs(unsigned long long seed, double *f)
{
    const double h = 1.0 / (N + 1);
    unsigned long long st = seed;
    const int blobs = 1 + (int)uniform(&st, 0.0, 4.0);
    double cx[4], cy[4], w[4], a[4];
    for (int b = 0; b < blobs; ++b) {
        cx[b] = uniform(&st, 0.15, 0.85);
        cy[b] = uniform(&st, 0.15, 0.85);
        w[b] = uniform(&st, 0.04, 0.12);
        a[b] = uniform(&st, -1.0, 1.0);
    }
    double fmax = 0.0;
    for (int j = 0; j < N; ++j)
        for (int i = 0; i < N; ++i) {
            const double x = (i + 1) * h, y = (j + 1) * h;
            double v = 0.0;
            for (int b = 0; b < blobs; ++b)
                v += a[b] * exp(-((x - cx[b]) * (x - cx[b]) + (y - cy[b]) * (y - cy[b])) / (2.0 * w[b] * w[b]));
            f[j * N + i] = v;
            fmax = fabs(v) > fmax ? fabs(v) : fmax;
        }
    return fmax;
}

/* q = A p, A the 5-point -lap with zero Dirichlet values outside. */
static void apply(const double *p, double *q)
{
    const double inv_h2 = (double)(N + 1) * (N + 1);
#pragma omp target teams distribute parallel for collapse(2)
    for (int j = 0; j < N; ++j)
        for (int i = 0; i < N; ++i) {
            const double c = p[j * N + i];
            const double w = i > 0 ? p[j * N + i - 1] : 0.0, e = i < N - 1 ? p[j * N + i + 1] : 0.0;
            const double s = j > 0 ? p[(j - 1) * N + i] : 0.0, n = j < N - 1 ? p[(j + 1) * N + i] : 0.0;
            q[j * N + i] = inv_h2 * (4.0 * c - w - e - s - n);
        }
}

static double dot(const double *a, const double *b)
{
    double s = 0.0;
#pragma omp target teams distribute parallel for reduction(+: s) map(tofrom: s)
    for (int c = 0; c < CELLS; ++c)
        s += a[c] * b[c];
    return s;
}

/* CG on A u = f from the u given; r, p, q are work arrays. Returns iterations, -1 if max_it hit. */
static int cg(const double *f, double *u, double *r, double *p, double *q, double tol, int max_it)
{
    apply(u, q);
#pragma omp target teams distribute parallel for
    for (int c = 0; c < CELLS; ++c) {
        r[c] = f[c] - q[c];
        p[c] = r[c];
    }
    const double stop = tol * tol * dot(f, f);
    double rr = dot(r, r);
    int it = 0;
    while (rr > stop) {
        if (it == max_it)
            return -1;
        apply(p, q);
        const double alpha = rr / dot(p, q);
#pragma omp target teams distribute parallel for
        for (int c = 0; c < CELLS; ++c) {
            u[c] += alpha * p[c];
            r[c] -= alpha * q[c];
        }
        const double rr_new = dot(r, r);
        const double beta = rr_new / rr;
        rr = rr_new;
#pragma omp target teams distribute parallel for
        for (int c = 0; c < CELLS; ++c)
            p[c] = r[c] + beta * p[c];
        ++it;
    }
    return it;
}

/* Jacobi sweeps on A u = f from the u given until ||f - A u|| <= tol ||f||, testing every 10
   sweeps; q is a work array. Returns the sweeps, -1 if max_it is reached. */
static int jacobi(const double *f, double *u, double *q, double tol, int max_it)
{
    const double h2 = 1.0 / ((double)(N + 1) * (N + 1));
    const double stop = tol * tol * dot(f, f);
    for (int it = 0; it <= max_it; it += 10) {
        apply(u, q);
        double rr = 0.0;
#pragma omp target teams distribute parallel for reduction(+: rr) map(tofrom: rr)
        for (int c = 0; c < CELLS; ++c)
            rr += (f[c] - q[c]) * (f[c] - q[c]);
        if (rr <= stop)
            return it;
        for (int sweep = 0; sweep < 10; sweep += 2) { /* u -> q -> u */
            const double *src = u;
            double *dst = q;
            for (int half = 0; half < 2; ++half) {
#pragma omp target teams distribute parallel for collapse(2)
                for (int j = 0; j < N; ++j)
                    for (int i = 0; i < N; ++i) {
                        const double w = i > 0 ? src[j * N + i - 1] : 0.0, e = i < N - 1 ? src[j * N + i + 1] : 0.0;
                        const double s = j > 0 ? src[(j - 1) * N + i] : 0.0, n = j < N - 1 ? src[(j + 1) * N + i] : 0.0;
                        dst[j * N + i] = 0.25 * (h2 * f[j * N + i] + w + e + s + n);
                    }
                src = q;
                dst = u;
            }
        }
    }
    return -1;
}

static int usage(void)
{
    fprintf(stderr, "usage: poisson [--cases K] [--tol T] [--min-cut C] [--require-device]\n");
    return 2;
}

int main(int argc, char **argv)
{
    int cases = 8, require_device = 0;
    double tol = 1e-6, min_cut = 0.1;
    for (int a = 1; a < argc; ++a) {
        if (!strcmp(argv[a], "--cases") && a + 1 < argc)
            cases = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--tol") && a + 1 < argc)
            tol = atof(argv[++a]);
        else if (!strcmp(argv[a], "--min-cut") && a + 1 < argc)
            min_cut = atof(argv[++a]);
        else if (!strcmp(argv[a], "--require-device"))
            require_device = 1;
        else
            return usage();
    }
    if (cases < 1)
        return usage();

    static double f[CELLS], u[CELLS], r[CELLS], p[CELLS], q[CELLS];
    static float f32[CELLS], g32[CELLS];
    int on_device = 0, ok = 1;
    int jac_zero = 0, jac_guess = 0, cg_zero = 0, cg_guess = 0;
    double t_net = 0.0, t_zero = 0.0, t_guess = 0.0;
    const int max_it = 100 * CELLS;

#pragma omp target data map(alloc: f, u, r, p, q, f32, g32)
    {
#ifdef _OPENMP
#pragma omp target map(from: on_device)
        on_device = !omp_is_initial_device();
#endif
        printf("poisson (C, OpenMP target): %d x %d nodes, solves to ||r|| <= %.0e ||f||, %d cases; "
               "offload regions ran on %s\n", N, N, tol, cases, on_device ? "the device" : "the host");
        printf("%6s %14s %14s %9s %10s %10s\n", "case", "Jacobi from 0", "from net", "cut", "CG from 0", "from net");
        for (int k = 0; k < cases; ++k) {
            const double fmax = make_rhs(1000 + (unsigned long long)k, f);
            for (int c = 0; c < CELLS; ++c)
                f32[c] = (float)(f[c] / fmax);
#pragma omp target update to(f, f32)

            /* From zero. */
            double t0 = now();
#pragma omp target teams distribute parallel for
            for (int c = 0; c < CELLS; ++c)
                u[c] = 0.0;
            const int jz = jacobi(f, u, q, tol, max_it);
            t_zero += now() - t0;
#pragma omp target teams distribute parallel for
            for (int c = 0; c < CELLS; ++c)
                u[c] = 0.0;
            const int cz = cg(f, u, r, p, q, tol, max_it);

            /* From the net's guess: f / max|f| in, guess * max|f| out, on the device. */
            t0 = now();
            int status;
            float *fp = f32, *gp = g32; /* use_device_ptr takes pointers, not arrays */
#pragma omp target data use_device_ptr(fp, gp)
            status = pguess_infer_one(fp, gp, NULL);
#pragma omp target teams distribute parallel for
            for (int c = 0; c < CELLS; ++c)
                u[c] = fmax * (double)g32[c];
            t_net += now() - t0;
            t0 = now();
            const int jg = jacobi(f, u, q, tol, max_it);
            t_guess += now() - t0;
#pragma omp target teams distribute parallel for
            for (int c = 0; c < CELLS; ++c)
                u[c] = fmax * (double)g32[c];
            const int cgg = cg(f, u, r, p, q, tol, max_it);

            if (status != 0 || jz < 0 || jg < 0 || cz < 0 || cgg < 0) {
                printf("case %d: %s\n", k, status != 0 ? "pguess_infer_one failed" : "a solve did not converge");
                ok = 0;
            }
            jac_zero += jz;
            jac_guess += jg;
            cg_zero += cz;
            cg_guess += cgg;
            printf("%6d %14d %14d %8.1f%% %10d %10d\n", k, jz, jg, 100.0 * (jz - jg) / jz, cz, cgg);
        }
    }
    const double cut = (double)(jac_zero - jac_guess) / jac_zero;
    printf("total Jacobi sweeps: from 0 %d, from the net's guess %d: %.1f %% fewer (required: %.0f %%)\n",
           jac_zero, jac_guess, 100.0 * cut, 100.0 * min_cut);
    printf("total CG iterations: from 0 %d, from the net's guess %d (not checked)\n", cg_zero, cg_guess);
    printf("time per case: net %.3f ms, Jacobi from 0 %.3f ms, Jacobi from the guess %.3f ms\n",
           1e3 * t_net / cases, 1e3 * t_zero / cases, 1e3 * t_guess / cases);
    if (require_device && !on_device) {
        printf("--require-device, but the offload regions ran on the host\n");
        ok = 0;
    }
    ok &= cut >= min_cut;
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
