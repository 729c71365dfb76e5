// f64 study (issue #17 item 4): times one variant's <V>_infer_batch (the FP64 tensor-core chain as
// generated with the variant's switches) on n points and checks EVERY output against <R>_infer_batch,
// the same model's generic FP64 FMA kernel (-DROSENNA_NO_TENSOR_CORES: one point per thread,
// libdevice tanh), with verify's float64 rule (rosenna_bench.cuh, from rosenna/compare.py), timed as
// every bench driver times (rosenna_bench.cuh: median of REPS CUDA-event timings after the warm-ups).
//   nvcc -O3 -arch=sm_90 -DV=d4v -DR=d4ref -DVH='"d4v.h"' -DRH='"d4ref.h"' -DNX=4 -DNY=2 driver.cu libd4v.a libd4ref.a
// Prints: <tag> <ns/point> ns/pt <outside> outside <worst err/tol> worst
// With argv[1] == "tanh": the device sweep of rosenna_tanh against libdevice's tanh (ulp).
#include <cstdlib>
#include <cstring>

#include "rosenna_bench.cuh"
#include VH
#include RH

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define VBATCH CAT(V, _infer_batch)
#define RBATCH CAT(R, _infer_batch)

using namespace rosenna_bench;

__device__ unsigned long long bad_count;
__device__ unsigned long long worst_bits; /* the largest err/tol as double bits (non-negative: ordered) */

__global__ void compare(long count, const double *got, const double *want)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < count; i += (long)gridDim.x * blockDim.x) {
        const double r = ratio(got[i], want[i]);
        if (!(r <= 1.0))
            atomicAdd(&bad_count, 1ull);
        atomicMax(&worst_bits, (unsigned long long)__double_as_longlong(r < 1e300 ? r : 1e300));
    }
}

#ifdef SWEEP
#include "rosenna_dtanh.cuh"
__device__ unsigned long long sweep_worst, sweep_big;
/* rosenna_tanh against libdevice tanh on count points of [-lim, lim] and log-spaced magnitudes. */
__global__ void sweep(long count, double lim)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < count; i += (long)gridDim.x * blockDim.x) {
        double x = (2.0 * (double)i / (double)count - 1.0) * lim;
        if (i % 4 == 1)
            x = ldexp(1.0 + (double)(i % 997) / 997.0, (int)(i % 1100) - 1074) * ((i & 8) ? -1.0 : 1.0);
        const double g = rosenna_tanh(x), w = tanh(x);
        const long long d = llabs(__double_as_longlong(g) - __double_as_longlong(w));
        atomicMax(&sweep_worst, (unsigned long long)d);
        if (d > 4)
            atomicAdd(&sweep_big, 1ull);
    }
}

__global__ void special()
{
    const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 20.0, -19.5, 1e-300, -4.9e-324, 0.5493, -3.0};
    if (threadIdx.x < 11)
        printf("rosenna_tanh(%g) = %.17g (libdevice %.17g), sign bit %d\n", sp[threadIdx.x], rosenna_tanh(sp[threadIdx.x]),
               tanh(sp[threadIdx.x]), (int)signbit(rosenna_tanh(sp[threadIdx.x])));
}
#endif

int main(int argc, char **argv)
{
#ifdef SWEEP
    if (argc > 1 && !strcmp(argv[1], "tanh")) {
        const long count = 1L << 30;
        sweep<<<132 * 16, 256>>>(count, 25.0);
        CK(cudaDeviceSynchronize());
        unsigned long long worst = 0, big = 0;
        CK(cudaMemcpyFromSymbol(&worst, sweep_worst, sizeof worst));
        CK(cudaMemcpyFromSymbol(&big, sweep_big, sizeof big));
        printf("tanh sweep: %ld points, rosenna_tanh vs libdevice tanh: worst %llu ulp apart, %llu points more than 4 ulp apart\n",
               count, worst, big);
        special<<<1, 16>>>();
        CK(cudaDeviceSynchronize());
        return 0;
    }
#endif
    const char *tag = argc > 1 ? argv[1] : "variant";
    const long n = argc > 2 ? atol(argv[2]) : 1L << 24;
    const int reps = argc > 3 ? atoi(argv[3]) : 7;
    double *x, *y, *r;
    CK(cudaMalloc(&x, n * NX * sizeof(double)));
    CK(cudaMalloc(&y, n * NY * sizeof(double)));
    CK(cudaMalloc(&r, n * NY * sizeof(double)));
    fill_inputs(n * NX, x);
    CK(cudaMemset(y, 0xff, n * NY * sizeof(double))); /* NaN: an unwritten output is a mismatch */
    if (VBATCH((int)n, x, y, 0) != 0 || RBATCH((int)n, x, r, 0) != 0) {
        fprintf(stderr, "%s: infer_batch failed\n", tag);
        return 1;
    }
    CK(cudaDeviceSynchronize());
    compare<<<1024, 256>>>(n * NY, y, r);
    CK(cudaDeviceSynchronize());
    unsigned long long bad = 0, worst = 0;
    CK(cudaMemcpyFromSymbol(&bad, bad_count, sizeof bad));
    CK(cudaMemcpyFromSymbol(&worst, worst_bits, sizeof worst));
    double worst_ratio;
    memcpy(&worst_ratio, &worst, sizeof worst_ratio);
    for (int i = 0; i < WARMUPS; i++)
        VBATCH((int)n, x, y, 0);
    Timing t;
    if (time_calls(reps, [&] { VBATCH((int)n, x, y, 0); }, &t))
        return 1;
    printf("%s %.4f ns/pt %llu outside %.2e worst (of %ld outputs)\n", tag, t.median * 1e6 / n, bad,
           worst_ratio, n * NY);
    return bad != 0;
}
