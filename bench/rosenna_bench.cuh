// rosenna_bench.cuh: what every H200 bench driver shares (bench/frontier.cu, bench/gen_bench.cu,
// bench/studies/f64-dmma/driver.cu, bench/studies/tc17/driver.cu, and the drivers bench/studies/field18/field_variants.py and
// bench/studies/igemm18/igemm_study.py write). The Python scripts copy it beside the sources they build
// (bench/bench_header.py).
//
// One measurement method everywhere: WARMUPS calls first (the driver makes them, and checks what
// they wrote), then time_calls(): REPS calls, each alone between its own pair of CUDA events on
// the default stream and waited for; Timing holds the median (the middle of the sorted times; for
// an even REPS the upper middle one), the minimum and the maximum, in ms.
// Inputs: fill(), uniform in [-1, 1) from a hash of the element index (never zeros).
// Outputs: within() is verify's rule (rosenna/compare.py): |got - want| <= atol + rtol |want|, NaN
// matches NaN, an infinity the same infinity; the float32 and float64 constants below are written
// from rosenna/compare.py by bench/bench_header.py (tests/test_bench_header.py checks them).
// Without nvcc (a C++ compiler alone) only the host parts are seen: Timing, summary, within, outside.
#ifndef ROSENNA_BENCH_CUH
#define ROSENNA_BENCH_CUH

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

// BEGIN tolerance: written by bench/bench_header.py from rosenna/compare.py's TOLERANCE; do not edit
#define ROSENNA_BENCH_F32_ATOL 1e-06
#define ROSENNA_BENCH_F32_RTOL 1e-05
#define ROSENNA_BENCH_F64_ATOL 1e-12
#define ROSENNA_BENCH_F64_RTOL 1e-09
// END tolerance

#ifdef __CUDACC__
#include <cuda_runtime.h>
#define ROSENNA_BENCH_HD __host__ __device__
// A failed CUDA runtime call: its file, line and error on stderr, then `return 1` from the caller.
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));            \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#else
#define ROSENNA_BENCH_HD
#endif

namespace rosenna_bench {

const int WARMUPS = 3;

struct Timing {
    float median, min, max;  // ms
};

// One row of a variant study's table: a generated model's float32 <name>_infer_batch.
struct Variant {
    const char *model, *name;
    int phases;  // of its whole-field schedule (0: not counted)
    long nx, ny;
    int (*batch)(int, const float *, float *, void *);
};

// The median (upper middle for an even count), minimum and maximum of the times.
inline Timing summary(std::vector<float> t)
{
    std::sort(t.begin(), t.end());
    return Timing{t[t.size() / 2], t.front(), t.back()};
}

// The allowed |got - want| at want, for the element type T (float32 or float64's constants).
template <class T> ROSENNA_BENCH_HD inline double allowed(double want)
{
    return sizeof(T) == 8 ? ROSENNA_BENCH_F64_ATOL + ROSENNA_BENCH_F64_RTOL * fabs(want)
                          : ROSENNA_BENCH_F32_ATOL + ROSENNA_BENCH_F32_RTOL * fabs(want);
}

// |got - want| over the allowed difference for element type T (0 for a matching NaN or infinity,
// +inf for any other non-finite pair): within() is ratio() <= 1. ratio_of<T> takes the values in
// double (a float32 output against a float64 reference).
template <class T> ROSENNA_BENCH_HD inline double ratio_of(double g, double w)
{
    if (g != g || w != w)
        return g != g && w != w ? 0.0 : INFINITY;
    if (w - w != 0.0 || g - g != 0.0)  // an infinity
        return g == w ? 0.0 : INFINITY;
    return fabs(g - w) / allowed<T>(w);
}

template <class T> ROSENNA_BENCH_HD inline double ratio(T got, T want) { return ratio_of<T>(got, want); }

template <class T> ROSENNA_BENCH_HD inline bool within(T got, T want) { return ratio(got, want) <= 1.0; }

// How many of got[0..n) are outside verify's tolerance of want[0..n); *worst (when given) gets the
// largest ratio().
template <class T> inline long outside(const T *got, const T *want, size_t n, double *worst = nullptr)
{
    long bad = 0;
    double most = 0;
    for (size_t i = 0; i < n; ++i) {
        const double r = ratio(got[i], want[i]);
        bad += !(r <= 1.0);
        most = std::max(most, r);
    }
    if (worst)
        *worst = most;
    return bad;
}

#ifdef __CUDACC__
// x[i] = uniform in [-1, 1) from a hash of i (computed in float, then converted to T).
template <class T> __global__ void fill(long count, T *x)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < count; i += (long)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ 777u;
        h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
        x[i] = (T)((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

// fill() over count elements, as every driver launches it.
template <class T> inline void fill_inputs(long count, T *x) { fill<<<1024, 256>>>(count, x); }

// Times reps calls of call() (see the top of this file) into *out; 1 on a CUDA error (printed).
template <class F> inline int time_calls(int reps, F call, Timing *out)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int r = 0; r < reps; ++r) {
        CK(cudaEventRecord(a));
        call();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaGetLastError());
    *out = summary(t);
    return 0;
}
#endif

}  // namespace rosenna_bench

#endif
