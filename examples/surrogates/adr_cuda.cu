/* The solver of adr.c with its time loop in CUDA kernels, the reaction rate from rosenna's native
 * CUDA backend in either of its two forms:
 *
 *   per cell (default)  the solver's own step kernel calls adr_rate_infer for its cell: the
 *                       __device__ routine of libadr_rate_device.a (relocatable device code);
 *   --batch             a small kernel packs (Y, T) of every cell into x[cells][2], then
 *                       adr_rate_infer_batch(cells, x, omega, stream) runs the generated batched
 *                       kernel on those device pointers, then the step kernel reads omega.
 *
 * The physics is adr_physics.h, the same inline functions adr.c's OpenMP/OpenACC loops use, and
 * so are the checks: the surrogate's temperature against the analytic rate's within --tol, and
 * sum(T + Q Y) conserved to round-off by both runs. The fields are copied to the GPU once and back
 * once; inside the time loop nothing moves between host and device (the weights are __constant__
 * or __device__ data of the generated kernel file). Steps are timed with CUDA events.
 *
 *   adr_cuda [--n N] [--steps S] [--tol T] [--batch]
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adr_physics.h"
#include "adr_rate.h"

#define CHECK(call)                                                                         \
    do {                                                                                    \
        cudaError_t err_ = (call);                                                          \
        if (err_ != cudaSuccess) {                                                          \
            fprintf(stderr, "adr_cuda: %s: %s\n", #call, cudaGetErrorString(err_));         \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

enum rate_source { RATE_ANALYTIC, RATE_PER_CELL, RATE_BATCH };

#define BLOCK_X 32
#define BLOCK_Y 8

/* One step for every cell. omega_in: the batch path's rates (NULL otherwise). */
__global__ void step_kernel(int n, long src, long dst, double dx, double dt, int source,
                            const float *omega_in, double *y, double *t)
{
    const int i = blockIdx.x * BLOCK_X + threadIdx.x, j = blockIdx.y * BLOCK_Y + threadIdx.y;
    if (i >= n || j >= n)
        return;
    const long c = src + (long)j * n + i;
    double omega;
    if (source == RATE_PER_CELL) {
        float state[ADR_RATE_NX] = {(float)y[c], (float)t[c]}, rate[ADR_RATE_NY];
        adr_rate_infer(state, rate);
        omega = (double)rate[0];
    } else if (source == RATE_BATCH) {
        omega = (double)omega_in[c - src];
    } else {
        omega = arrhenius(y[c], t[c]);
    }
    adr_cell(n, i, j, src, dst, dx, dt, omega, y, t);
}

/* The batch path's model input: x[cell] = (Y, T) in single precision. */
__global__ void pack_kernel(long cells, long src, const double *y, const double *t, float *x)
{
    const long c = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cells) {
        x[2 * c] = (float)y[src + c];
        x[2 * c + 1] = (float)t[src + c];
    }
}

/* `steps` steps of the current plane `cur`; returns the plane that holds the result. */
static int advance(int n, int steps, double dt, int source, double *y, double *t, float *x, float *omega, int cur)
{
    const long cells = (long)n * n;
    const dim3 block(BLOCK_X, BLOCK_Y), grid((n + BLOCK_X - 1) / BLOCK_X, (n + BLOCK_Y - 1) / BLOCK_Y);
    for (int s = 0; s < steps; ++s) {
        const long src = cur * cells, dst = (1 - cur) * cells;
        if (source == RATE_BATCH) {
            pack_kernel<<<(unsigned)((cells + 255) / 256), 256>>>(cells, src, y, t, x);
            const int status = adr_rate_infer_batch((int)cells, x, omega, NULL);
            if (status != ROSENNA_STATUS_OK) {
                fprintf(stderr, "adr_cuda: adr_rate_infer_batch returned %d\n", status);
                exit(1);
            }
        }
        step_kernel<<<grid, block>>>(n, src, dst, 1.0 / n, dt, source, omega, y, t);
        CHECK(cudaGetLastError());
        cur = 1 - cur;
    }
    return cur;
}

static struct adr_run simulate(int n, int steps, double dt, int source, double *t_out)
{
    const long cells = (long)n * n;
    const size_t plane = cells * sizeof(double);
    double *y = (double *)malloc(2 * plane), *t = (double *)malloc(2 * plane);
    if (!y || !t) {
        fprintf(stderr, "adr_cuda: out of memory for n=%d\n", n);
        exit(2);
    }
    adr_initial_state(n, y, t);
    struct adr_run r = {0.0, 0.0, 0.0, 0.0};
    for (long c = 0; c < cells; ++c)
        r.h_before += t[c] + HEAT_Q * y[c];

    double *dy, *dt_field;
    float *x = NULL, *omega = NULL;
    CHECK(cudaMalloc(&dy, 2 * plane));
    CHECK(cudaMalloc(&dt_field, 2 * plane));
    if (source == RATE_BATCH) {
        CHECK(cudaMalloc(&x, cells * ADR_RATE_NX * sizeof(float)));
        CHECK(cudaMalloc(&omega, cells * ADR_RATE_NY * sizeof(float)));
    }
    CHECK(cudaMemcpy(dy, y, plane, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dt_field, t, plane, cudaMemcpyHostToDevice));

    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    int cur = advance(n, 1, dt, source, dy, dt_field, x, omega, 0); /* warm-up, not timed */
    CHECK(cudaEventRecord(start));
    cur = advance(n, steps, dt, source, dy, dt_field, x, omega, cur);
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    r.seconds_per_step = 1e-3 * ms / steps;

    CHECK(cudaMemcpy(y, dy + cur * cells, plane, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(t, dt_field + cur * cells, plane, cudaMemcpyDeviceToHost));
    for (long c = 0; c < cells; ++c) {
        r.h_after += t[c] + HEAT_Q * y[c];
        r.burnt += 1.0 - y[c];
        t_out[c] = t[c];
    }
    r.burnt /= (double)cells;
    cudaFree(dy);
    cudaFree(dt_field);
    cudaFree(x);
    cudaFree(omega);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    free(y);
    free(t);
    return r;
}

static int usage(void)
{
    fprintf(stderr, "usage: adr_cuda [--n N] [--steps S] [--tol T] [--batch]\n");
    return 2;
}

int main(int argc, char **argv)
{
    int n = 128, steps = 200, batch = 0;
    double tol = 0.02;
    for (int a = 1; a < argc; ++a) {
        if (!strcmp(argv[a], "--n") && a + 1 < argc)
            n = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--steps") && a + 1 < argc)
            steps = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--tol") && a + 1 < argc)
            tol = atof(argv[++a]);
        else if (!strcmp(argv[a], "--batch"))
            batch = 1;
        else
            return usage();
    }
    if (n < 8 || steps < 1 || (long)n * n > 0x7fffffffL)
        return usage();
    const double dt = adr_time_step(n);
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("adr (CUDA, rate %s): %d x %d cells, %d timed steps (+1 warm-up) of dt=%.3e to t=%.3f on %s\n",
           batch ? "through adr_rate_infer_batch" : "per cell through adr_rate_infer", n, n, steps, dt,
           (steps + 1) * dt, prop.name);

    double *t_ref = (double *)malloc((size_t)n * n * sizeof *t_ref);
    double *t_sur = (double *)malloc((size_t)n * n * sizeof *t_sur);
    struct adr_run ref = simulate(n, steps, dt, RATE_ANALYTIC, t_ref);
    struct adr_run sur = simulate(n, steps, dt, batch ? RATE_BATCH : RATE_PER_CELL, t_sur);

    const int ok = adr_report(n, ref, sur, t_ref, t_sur, tol);
    free(t_ref);
    free(t_sur);
    return ok ? 0 : 1;
}
