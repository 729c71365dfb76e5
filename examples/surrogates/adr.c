/* A 2-D advection-diffusion-reaction solver whose reaction rate is a learned surrogate.
 *
 *   dY/dt + a.grad(Y) = D lap(Y) - omega          fuel mass fraction Y
 *   dT/dt + a.grad(T) = D lap(T) + Q omega        temperature T
 *   omega = A Y exp(-Ta / T)                       reference: the analytic Arrhenius rate
 *   omega = adr_rate(Y, T)                         surrogate: the MLP of train_rate.py, via rosenna
 *
 * Periodic unit square, N x N cells, finite volumes: first-order upwind advection, central
 * diffusion, forward Euler. A hot burnt disc ignites a premixed field and the flame spreads while
 * the flow carries it. The program runs the reference and the surrogate with the same steps and
 * checks (exit status 1 on failure):
 *   - the surrogate's temperature matches the reference's within --tol (max norm);
 *   - H = T + Q Y, which the reaction leaves unchanged, is conserved by both runs to round-off.
 *
 * One source, two offload models: compiled with -fopenmp the loops are `omp target` regions,
 * with -fopenacc they are `acc parallel loop`s. Either way the fields are copied to the device
 * once, stay there for every step, and come back once at the end; the model's weights are
 * resident device globals (the generated code declares them so): nothing moves in the loop.
 * The solver is double precision, the model single: the conversion happens at the call site.
 *
 *   adr [--n N] [--steps S] [--tol T] [--require-device]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef _OPENACC
#include <openacc.h>
#endif

#include "adr_physics.h"
#include "adr_rate.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether an offload region runs on a device (not the host fallback). */
static int runs_on_device(void)
{
    int on_device = 0;
#if defined(_OPENACC)
#pragma acc serial copyout(on_device)
    on_device = acc_on_device(acc_device_not_host);
#elif defined(_OPENMP)
#pragma omp target map(from: on_device)
    on_device = !omp_is_initial_device();
#endif
    return on_device;
}

/* Advances (y, t) by `steps` steps of dt. y and t hold two n*n planes each (current and next);
 * the state starts in plane `first`; returns the plane that holds the result. */
static int advance(int n, int steps, double dt, int use_model, double *y, double *t, int first)
{
    const long cells = (long)n * n;
    const double dx = 1.0 / n;
    int cur = first;
    for (int step = 0; step < steps; ++step) {
        const long src = cur * cells, dst = (1 - cur) * cells;
#pragma omp target teams distribute parallel for collapse(2)
#pragma acc parallel loop gang vector collapse(2) present(y[0:2*cells], t[0:2*cells])
        for (int j = 0; j < n; ++j) {
            for (int i = 0; i < n; ++i) {
                const long c = src + (long)j * n + i;
                double omega;
                if (use_model) {
                    float state[ADR_RATE_NX] = {(float)y[c], (float)t[c]}, rate[ADR_RATE_NY];
                    adr_rate_infer(state, rate);
                    omega = (double)rate[0];
                } else {
                    omega = arrhenius(y[c], t[c]);
                }
                adr_cell(n, i, j, src, dst, dx, dt, omega, y, t);
            }
        }
        cur = 1 - cur;
    }
    return cur;
}

/* One run: initial state, `steps` steps on the device, the final temperature into t_out. */
static struct adr_run simulate(int n, int steps, double dt, int use_model, double *t_out)
{
    const long cells = (long)n * n;
    double *y = malloc(2 * cells * sizeof *y), *t = malloc(2 * cells * sizeof *t);
    if (!y || !t) {
        fprintf(stderr, "adr: out of memory for n=%d\n", n);
        exit(2);
    }
    adr_initial_state(n, y, t);
    struct adr_run r = {0.0, 0.0, 0.0, 0.0};
    for (long c = 0; c < cells; ++c)
        r.h_before += t[c] + HEAT_Q * y[c];
    int cur;
    double elapsed;
#pragma omp target data map(tofrom: y[0:2*cells], t[0:2*cells])
#pragma acc data copy(y[0:2*cells], t[0:2*cells])
    {
        cur = advance(n, 1, dt, use_model, y, t, 0); /* warm-up: loads the kernels, not timed */
        elapsed = now();
        cur = advance(n, steps, dt, use_model, y, t, cur);
        elapsed = now() - elapsed;
    }
    const long plane = cur * cells;
    r.seconds_per_step = elapsed / steps;
    for (long c = 0; c < cells; ++c) {
        r.h_after += t[plane + c] + HEAT_Q * y[plane + c];
        r.burnt += 1.0 - y[plane + c];
        t_out[c] = t[plane + c];
    }
    r.burnt /= (double)cells;
    free(y);
    free(t);
    return r;
}

static int usage(void)
{
    fprintf(stderr, "usage: adr [--n N] [--steps S] [--tol T] [--require-device]\n");
    return 2;
}

int main(int argc, char **argv)
{
    int n = 128, steps = 200, require_device = 0;
    double tol = 0.02;
    for (int a = 1; a < argc; ++a) {
        if (!strcmp(argv[a], "--n") && a + 1 < argc)
            n = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--steps") && a + 1 < argc)
            steps = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--tol") && a + 1 < argc)
            tol = atof(argv[++a]);
        else if (!strcmp(argv[a], "--require-device"))
            require_device = 1;
        else
            return usage();
    }
    if (n < 8 || steps < 1)
        return usage();

    const double dt = adr_time_step(n);

    const int on_device = runs_on_device();
#if defined(_OPENACC)
    const char *model = "OpenACC";
#elif defined(_OPENMP)
    const char *model = "OpenMP target";
#else
    const char *model = "serial";
#endif
    printf("adr (C, %s): %d x %d cells, %d timed steps (+1 warm-up) of dt=%.3e to t=%.3f; offload region ran on %s\n",
           model, n, n, steps, dt, (steps + 1) * dt, on_device ? "the device" : "the host");
    if (require_device && !on_device) {
        fprintf(stderr, "adr: --require-device, but the offload region ran on the host\n");
        return 1;
    }

    double *t_ref = malloc((size_t)n * n * sizeof *t_ref), *t_sur = malloc((size_t)n * n * sizeof *t_sur);
    struct adr_run ref = simulate(n, steps, dt, 0, t_ref);
    struct adr_run sur = simulate(n, steps, dt, 1, t_sur);

    const int ok = adr_report(n, ref, sur, t_ref, t_sur, tol);
    free(t_ref);
    free(t_sur);
    return ok ? 0 : 1;
}
