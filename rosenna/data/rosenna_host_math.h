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
/* The multiply-add of the generated C's dot products (the tuning's host_fma="auto"; "on" writes
   fma() and "off" a multiply and an add without it): fma() where the compiler says the fused
   operation is fast (C99's FP_FAST_FMAF / FP_FAST_FMA from math.h, GCC's __FP_FAST_FMAF, the x86
   and Arm FMA feature macros for clang, a GPU's device pass), else a multiply and an add, rounded
   apart under -ffp-contract=off: an FMA instruction or two operations, never a library call. Every
   C path of a model (the per-point routine, its SIMD variants, the batch path, the whole-field
   host branch) uses it, so they agree bit for bit in one build. -DROSENNA_FMA=0 makes a build
   bit-reproducible across CPUs (the Fortran module's results); -DROSENNA_FMA=1 fuses always. */
#include <math.h>
#if defined(ROSENNA_FMA)
#define ROSENNA_FMA_FAST ROSENNA_FMA
#elif defined(FP_FAST_FMAF) || defined(__FP_FAST_FMAF) || defined(__FMA__) || defined(__ARM_FEATURE_FMA) \
    || defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__) || defined(__NVPTX__) || defined(__AMDGPU__)
#define ROSENNA_FMA_FAST 1
#else
#define ROSENNA_FMA_FAST 0
#endif
#if ROSENNA_FMA_FAST
#define ROSENNA_MADDF(a, b, c) fmaf(a, b, c)
#define ROSENNA_MADD(a, b, c) fma(a, b, c)
#else
#define ROSENNA_MADDF(a, b, c) ((a) * (b) + (c))
#define ROSENNA_MADD(a, b, c) ((a) * (b) + (c))
#endif

#if !defined(__CUDACC__) && !defined(__HIPCC__)
#include <math.h>

/* Inlined always: a call in an `omp simd` loop keeps GCC from vectorising it, and GCC 12 stopped
   inlining tanh into a large block routine once its steps were fmaf calls. */
#if defined(__GNUC__)
#define ROSENNA_MATH_INLINE static inline __attribute__((always_inline))
#else
#define ROSENNA_MATH_INLINE static inline
#endif

/* <name>_infer calls them too (its results then equal its SIMD variant's and the batch path's):
   an offload device compiles them with it (OpenMP's declare target, OpenACC's routine seq). */
#pragma omp declare target

#if defined(_OPENACC)
#pragma acc routine seq
#endif
ROSENNA_MATH_INLINE float rosenna_keep_nan(float x, float y)
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
ROSENNA_MATH_INLINE double rosenna_keep_nan_d(double x, double y)
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
ROSENNA_MATH_INLINE float rosenna_exp_parts(float x, float *scale)
{
    union { float f; int i; unsigned u; } v, s;
    float r, q;
    int k;

    v.f = x;
    v.u = v.u > 0xc2ae0000u ? 0xc2ae0000u : v.u; /* x < -87 */
    v.i = v.i > 0x42b00000 ? 0x42b00000 : v.i;   /* x > 88 */
    x = v.f;
    k = (int)(x * 1.44269504f + copysignf(0.5f, x));
    r = ROSENNA_MADDF((float)k, -0.693145752f, x);
    r = ROSENNA_MADDF((float)k, -1.42860677e-6f, r);
    q = ROSENNA_MADDF(r, 1.98412701e-4f, 0.00138888892f);
    q = ROSENNA_MADDF(r, q, 0.00833333377f);
    q = ROSENNA_MADDF(r, q, 0.0416666679f);
    q = ROSENNA_MADDF(r, q, 0.166666672f);
    q = ROSENNA_MADDF(r, q, 0.5f);
    s.i = (k + 127) << 23;
    *scale = s.f;
    return ROSENNA_MADDF(r * r, q, r);
}

#if defined(_OPENACC)
#pragma acc routine seq
#endif
ROSENNA_MATH_INLINE float rosenna_expf(float x)
{
    float scale, m = rosenna_exp_parts(x, &scale);
    return rosenna_keep_nan(x, (1.0f + m) * scale);
}

#if defined(_OPENACC)
#pragma acc routine seq
#endif
ROSENNA_MATH_INLINE float rosenna_tanhf(float x)
{
    float scale, m = rosenna_exp_parts(2.0f * x, &scale);
    float e = ROSENNA_MADDF(m, scale, scale - 1.0f); /* exp(2x) - 1 without the cancellation near 0 */
    return rosenna_keep_nan(x, e / (e + 2.0f));
}

#if defined(_OPENACC)
#pragma acc routine seq
#endif
ROSENNA_MATH_INLINE double rosenna_exp_parts_d(double x, double *scale)
{
    union { double f; long long i; unsigned long long u; } v, s;
    double r, p;
    int k;

    v.f = x;
    v.u = v.u > 0xc086200000000000ull ? 0xc086200000000000ull : v.u; /* x < -708 */
    v.i = v.i > 0x4086280000000000ll ? 0x4086280000000000ll : v.i;     /* x > 709 */
    x = v.f;
    k = (int)(x * 1.4426950408889634 + copysign(0.5, x));
    r = ROSENNA_MADD((double)k, -0.69314718036912382, x);
    r = ROSENNA_MADD((double)k, -1.9082149292705877e-10, r);
    p = 1.0 / 6227020800.0;
    p = ROSENNA_MADD(r, p, 1.0 / 479001600.0);
    p = ROSENNA_MADD(r, p, 1.0 / 39916800.0);
    p = ROSENNA_MADD(r, p, 1.0 / 3628800.0);
    p = ROSENNA_MADD(r, p, 1.0 / 362880.0);
    p = ROSENNA_MADD(r, p, 1.0 / 40320.0);
    p = ROSENNA_MADD(r, p, 1.0 / 5040.0);
    p = ROSENNA_MADD(r, p, 1.0 / 720.0);
    p = ROSENNA_MADD(r, p, 1.0 / 120.0);
    p = ROSENNA_MADD(r, p, 1.0 / 24.0);
    p = ROSENNA_MADD(r, p, 1.0 / 6.0);
    p = ROSENNA_MADD(r, p, 0.5);
    s.i = (long long)(k + 1023) << 52;
    *scale = s.f;
    return ROSENNA_MADD(r * r, p, r);
}

#if defined(_OPENACC)
#pragma acc routine seq
#endif
ROSENNA_MATH_INLINE double rosenna_exp(double x)
{
    double scale, m = rosenna_exp_parts_d(x, &scale);
    return rosenna_keep_nan_d(x, (1.0 + m) * scale);
}

#if defined(_OPENACC)
#pragma acc routine seq
#endif
ROSENNA_MATH_INLINE double rosenna_tanh(double x)
{
    double scale, m = rosenna_exp_parts_d(2.0 * x, &scale);
    double e = ROSENNA_MADD(m, scale, scale - 1.0); /* exp(2x) - 1 without the cancellation near 0 */
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
