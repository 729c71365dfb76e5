/* exp and tanh for the host batch path: branch-free and inlined, so the `omp simd` loops that
   call them vectorise (libm's are scalar calls there). exp(x) = 2^k exp(r), k = round(x / ln 2),
   |r| <= ln 2 / 2, exp(r) = 1 + (r + r^2 q(r)) with q the Taylor series from 1/2 (the leading
   1 + r added last keeps the rounding to about one step): within 1.01 ulp of the exact value in
   float32 over the whole range (libm's expf: 0.50). tanh(x) = e / (e + 2) with e = exp(2x) - 1
   from the same parts (2^k m + (2^k - 1): no cancellation near 0): within 2.5 ulp of the exact
   value over [-20, 20] (the form 1 - 2 / (exp(2x) + 1) lost all relative accuracy near 0). The
   argument is clamped to the normal range with integer compares on its bits (a floating-point
   compare would keep GCC from vectorising): below it exp gives about the smallest normal, above
   it a large finite value; a NaN argument gives that NaN back. */
#if !defined(__CUDACC__) && !defined(__HIPCC__)
#include <math.h>

/* <name>_infer calls them too (its results then equal its SIMD variant's and the batch path's):
   an offload device compiles them with it (OpenMP's declare target, OpenACC's routine seq). */
#pragma omp declare target

#if defined(_OPENACC)
#pragma acc routine seq
#endif
static inline float rosenna_keep_nan(float x, float y)
{
    /* y, or x where x is a NaN (selected on the bits: an integer mask vectorises) */
    union { float f; unsigned u; } a, b;
    unsigned nan;

    a.f = x;
    b.f = y;
    nan = -(unsigned)((a.u & 0x7fffffffu) > 0x7f800000u);
    b.u = (b.u & ~nan) | (a.u & nan);
    return b.f;
}

#if defined(_OPENACC)
#pragma acc routine seq
#endif
static inline double rosenna_keep_nan_d(double x, double y)
{
    union { double f; unsigned long long u; } a, b;
    unsigned long long nan;

    a.f = x;
    b.f = y;
    nan = -(unsigned long long)((a.u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull);
    b.u = (b.u & ~nan) | (a.u & nan);
    return b.f;
}

#if defined(_OPENACC)
#pragma acc routine seq
#endif
static inline float rosenna_exp_parts(float x, float *scale)
{
    union { float f; int i; unsigned u; } v, s;
    float r, q;
    int k;

    v.f = x;
    v.u = v.u > 0xc2ae0000u ? 0xc2ae0000u : v.u; /* x < -87 */
    v.i = v.i > 0x42b00000 ? 0x42b00000 : v.i;   /* x > 88 */
    x = v.f;
    k = (int)(x * 1.44269504f + copysignf(0.5f, x));
    r = x - (float)k * 0.693145752f - (float)k * 1.42860677e-6f;
    q = 0.5f + r * (0.166666672f + r * (0.0416666679f + r * (0.00833333377f + r * (0.00138888892f
        + r * 1.98412701e-4f))));
    s.i = (k + 127) << 23;
    *scale = s.f;
    return r + (r * r) * q;
}

#if defined(_OPENACC)
#pragma acc routine seq
#endif
static inline float rosenna_expf(float x)
{
    float scale, m = rosenna_exp_parts(x, &scale);
    return rosenna_keep_nan(x, (1.0f + m) * scale);
}

#if defined(_OPENACC)
#pragma acc routine seq
#endif
static inline float rosenna_tanhf(float x)
{
    float scale, m = rosenna_exp_parts(2.0f * x, &scale);
    float e = m * scale + (scale - 1.0f); /* exp(2x) - 1 without the cancellation near 0 */
    return rosenna_keep_nan(x, e / (e + 2.0f));
}

#if defined(_OPENACC)
#pragma acc routine seq
#endif
static inline double rosenna_exp_parts_d(double x, double *scale)
{
    union { double f; long long i; unsigned long long u; } v, s;
    double r, p;
    int k;

    v.f = x;
    v.u = v.u > 0xc086200000000000ull ? 0xc086200000000000ull : v.u; /* x < -708 */
    v.i = v.i > 0x4086280000000000ll ? 0x4086280000000000ll : v.i;     /* x > 709 */
    x = v.f;
    k = (int)(x * 1.4426950408889634 + copysign(0.5, x));
    r = x - (double)k * 0.69314718036912382 - (double)k * 1.9082149292705877e-10;
    p = 1.0 / 6227020800.0;
    p = 1.0 / 479001600.0 + r * p;
    p = 1.0 / 39916800.0 + r * p;
    p = 1.0 / 3628800.0 + r * p;
    p = 1.0 / 362880.0 + r * p;
    p = 1.0 / 40320.0 + r * p;
    p = 1.0 / 5040.0 + r * p;
    p = 1.0 / 720.0 + r * p;
    p = 1.0 / 120.0 + r * p;
    p = 1.0 / 24.0 + r * p;
    p = 1.0 / 6.0 + r * p;
    p = 0.5 + r * p;
    s.i = (long long)(k + 1023) << 52;
    *scale = s.f;
    return r + (r * r) * p;
}

#if defined(_OPENACC)
#pragma acc routine seq
#endif
static inline double rosenna_exp(double x)
{
    double scale, m = rosenna_exp_parts_d(x, &scale);
    return rosenna_keep_nan_d(x, (1.0 + m) * scale);
}

#if defined(_OPENACC)
#pragma acc routine seq
#endif
static inline double rosenna_tanh(double x)
{
    double scale, m = rosenna_exp_parts_d(2.0 * x, &scale);
    double e = m * scale + (scale - 1.0); /* exp(2x) - 1 without the cancellation near 0 */
    return rosenna_keep_nan_d(x, e / (e + 2.0));
}

#pragma omp end declare target
#else
/* CUDA/HIP compiles of <name>_infer: the device's own exp and tanh. */
#define rosenna_expf expf
#define rosenna_tanhf tanhf
#define rosenna_exp exp
#define rosenna_tanh tanh
#endif
