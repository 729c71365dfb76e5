#ifndef ROSENNA_HOST_TF32_H
#define ROSENNA_HOST_TF32_H
#include <math.h>

#if defined(__has_builtin) && !defined(ROSENNA_TF32_ARITHMETIC)
#if __has_builtin(__builtin_bit_cast)
#define ROSENNA_TF32_BIT_CAST 1
#endif
#endif

/* TF32 rounding on the host (C++14), in code that a constant expression may use: the kernel file
   packs its embedded copies with it while it compiles, <name>_device_upload its file-loaded ones
   at init. To nearest, ties away from zero (cvt.rna.tf32.f32: the operation on the bit pattern
   (u + 0x1000) & 0xffffe000), or with `half` 0 truncated (u & 0xffffe000); infinities and NaN come
   back unchanged. Where the compiler has __builtin_bit_cast it is that operation (the least work
   for a constant evaluator); elsewhere the same in arithmetic, which gives the same bits for every
   finite float (all 4,278,190,080 compared by tests/tf32_rounding.cpp). */
constexpr float rosenna_host_tf32_round(float f, double half)
{
    if (f != f || f > 3.40282347e38f || f < -3.40282347e38f)
        return f;
#if defined(ROSENNA_TF32_BIT_CAST)
    const unsigned u = __builtin_bit_cast(unsigned, f);
    return __builtin_bit_cast(float, (u + (half > 0.0 ? 0x1000u : 0u)) & 0xffffe000u);
#else
    if (f == 0.0f)
        return f;
    const double two32 = 4294967296.0;
    const double steps[8] = {two32 * two32 * two32 * two32, two32 * two32, two32, 65536.0, 256.0, 16.0, 4.0, 2.0};
    const double a = f < 0.0f ? -(double)f : (double)f;
    /* q: the TF32 quantum of a, 2^(e - 10) for 2^e <= a < 2^(e+1), and 2^-136 at least (a subnormal
       float keeps its mantissa's 13 low bits apart, as a normal one does). */
    double q = 1.0 / (two32 * two32 * two32 * two32) / 256.0;
    for (int s = 0; s < 8; ++s)
        if (a >= q * 1024.0 * steps[s])
            q *= steps[s];
    const double r = (double)(long long)(a / q + half) * q;
    if (r >= two32 * two32 * two32 * two32)
        return (float)(f < 0.0f ? -HUGE_VAL : HUGE_VAL);  /* FLT_MAX rounded up */
    return (float)(f < 0.0f ? -r : r);
#endif
}

constexpr float rosenna_host_tf32(float f)
{
    return rosenna_host_tf32_round(f, 0.5);
}
#endif
