/* The advection-diffusion-reaction physics shared by adr.c (OpenMP target and OpenACC loops) and
 * adr_cuda.cu (CUDA kernels): constants, the analytic rate, one cell's forward-Euler update and
 * the initial state. Every device-callable function is inline and marked for each offload model,
 * so each solver compiles the same arithmetic into its own loops. */
#ifndef ADR_PHYSICS_H
#define ADR_PHYSICS_H

#include <math.h>
#include <stdio.h>

/* Physical constants; train_rate.py uses the same A and Ta. */
#define RATE_A 20.0
#define RATE_TA 6.0
#define HEAT_Q 3.0
#define DIFFUSIVITY 5e-3
#define VEL_X 1.0
#define VEL_Y 0.5

#if defined(__CUDACC__) || defined(__HIPCC__)
#define ADR_FN static inline __host__ __device__
#else
#define ADR_FN static inline
#endif

#if defined(_OPENMP)
#pragma omp declare target
#endif

/* Upwind flux through a face with velocity a between cells holding `left` and `right`. */
#if defined(_OPENACC)
#pragma acc routine seq
#endif
ADR_FN double upwind(double a, double left, double right)
{
    return a > 0.0 ? a * left : a * right;
}

/* The reference reaction rate: Arrhenius, omega = A Y exp(-Ta / T). */
#if defined(_OPENACC)
#pragma acc routine seq
#endif
ADR_FN double arrhenius(double y, double t)
{
    return RATE_A * y * exp(-RATE_TA / t);
}

/* Cell (i, j) of the periodic n x n grid: reads plane `src` of y and t (offsets into the arrays),
 * writes plane `dst`, given the cell's reaction rate omega. First-order upwind advection, central
 * diffusion, forward Euler. */
#if defined(_OPENACC)
#pragma acc routine seq
#endif
ADR_FN void adr_cell(int n, int i, int j, long src, long dst, double dx, double dt, double omega,
                     double *y, double *t)
{
    const long c = src + (long)j * n + i;
    const long w = src + (long)j * n + (i + n - 1) % n, e = src + (long)j * n + (i + 1) % n;
    const long s = src + (long)((j + n - 1) % n) * n + i, nn = src + (long)((j + 1) % n) * n + i;
    const double ay = (upwind(VEL_X, y[c], y[e]) - upwind(VEL_X, y[w], y[c])
                       + upwind(VEL_Y, y[c], y[nn]) - upwind(VEL_Y, y[s], y[c])) / dx;
    const double at = (upwind(VEL_X, t[c], t[e]) - upwind(VEL_X, t[w], t[c])
                       + upwind(VEL_Y, t[c], t[nn]) - upwind(VEL_Y, t[s], t[c])) / dx;
    const double dy = DIFFUSIVITY * (y[e] + y[w] + y[nn] + y[s] - 4.0 * y[c]) / (dx * dx);
    const double dtt = DIFFUSIVITY * (t[e] + t[w] + t[nn] + t[s] - 4.0 * t[c]) / (dx * dx);
    y[dst + (c - src)] = y[c] + dt * (dy - ay - omega);
    t[dst + (c - src)] = t[c] + dt * (dtt - at + HEAT_Q * omega);
}

#if defined(_OPENMP)
#pragma omp end declare target
#endif

/* A burnt disc (Y = 0, T = 1 + Q) of radius 0.1 at (0.3, 0.5) in fresh gas (Y = 1, T = 1). */
static inline void adr_initial_state(int n, double *y, double *t)
{
    for (int j = 0; j < n; ++j) {
        for (int i = 0; i < n; ++i) {
            double cx = (i + 0.5) / n - 0.3, cy = (j + 0.5) / n - 0.5;
            double burnt = 0.5 * (1.0 - tanh((sqrt(cx * cx + cy * cy) - 0.1) / 0.02));
            y[(long)j * n + i] = 1.0 - burnt;
            t[(long)j * n + i] = 1.0 + HEAT_Q * burnt;
        }
    }
}

/* The time step: forward Euler with upwind advection and central diffusion stays monotone (no new
 * extrema) while the centre coefficient 1 - dt ((|ax| + |ay|) / dx + 4 D / dx^2) is positive:
 * keep 20 %. */
static inline double adr_time_step(int n)
{
    const double dx = 1.0 / n;
    return 0.8 / ((fabs(VEL_X) + fabs(VEL_Y)) / dx + 4.0 * DIFFUSIVITY / (dx * dx));
}

/* One run of a solver: time per step, sum(T + Q Y) before and after, the burnt fraction. */
struct adr_run {
    double seconds_per_step, h_before, h_after, burnt;
};

/* The checks every solver makes, printed: the surrogate's temperature against the analytic rate's
 * within tol (max norm), and sum(T + Q Y) conserved to round-off by both runs. Returns whether they
 * hold (the program's PASS). */
static inline int adr_report(int n, struct adr_run ref, struct adr_run sur, const double *t_ref, const double *t_sur,
                             double tol)
{
    double max_diff = 0.0;
    long worst = 0;
    for (long c = 0; c < (long)n * n; ++c) {
        if (fabs(t_sur[c] - t_ref[c]) > max_diff) {
            max_diff = fabs(t_sur[c] - t_ref[c]);
            worst = c;
        }
    }
    const double drift_ref = fabs(ref.h_after - ref.h_before) / ref.h_before;
    const double drift_sur = fabs(sur.h_after - sur.h_before) / sur.h_before;
    const double drift_tol = 1e-12;
    printf("time per step: analytic rate %.3f ms, surrogate %.3f ms (%.2f ns per cell)\n",
           1e3 * ref.seconds_per_step, 1e3 * sur.seconds_per_step, 1e9 * sur.seconds_per_step / ((double)n * n));
    printf("burnt fraction: analytic %.6f, surrogate %.6f\n", ref.burnt, sur.burnt);
    printf("max |T_surrogate - T_analytic| = %.3e at cell (%ld, %ld): %.6f vs %.6f (tolerance %.1e)\n",
           max_diff, worst % n, worst / n, t_sur[worst], t_ref[worst], tol);
    printf("relative drift of sum(T + Q Y): analytic %.2e, surrogate %.2e (tolerance %.0e)\n",
           drift_ref, drift_sur, drift_tol);
    const int ok = max_diff <= tol && drift_ref <= drift_tol && drift_sur <= drift_tol;
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok;
}

#endif /* ADR_PHYSICS_H */
