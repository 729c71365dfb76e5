/* Study variant: rosenna_tanh with its clamp and its k off the FP64 pipe (21 FP64 instructions
   instead of 23, the same polynomial, the same relative accuracy). The clamp at 20 on the words of
   |x| (NaN kept: only finite values and inf compare); k = round(-2c log2 e) in float32 from c's
   words (exponent rebased, 23 mantissa bits; c below 2^-126 reads as 2^-127 or less: k = 0), with
   |u| <= ln2/4 + 1e-5 (the polynomial is fitted to 1.02 ln2/4); 1.5 2^52 + k built in integers. */
__device__ __forceinline__ double rosenna_tanh_int(double x)
{
    const int hi = __double2hiint(x) & 0x7fffffff, lo = __double2loint(x);
    const bool nan = hi > 0x7ff00000 || (hi == 0x7ff00000 && lo != 0);
    const bool big = hi >= 0x40340000 && !nan; /* 20.0 = 0x4034000000000000 */
    const int chi = big ? 0x40340000 : hi, clo = big ? 0 : lo;
    const double c = __hiloint2double(chi, clo);
    const int fb = ((max(chi, 0x38000000) - 0x38000000) << 3) | (int)((unsigned)clo >> 29);
    const float tf = fmaf(__int_as_float(fb), -2.88539008f, 12582912.0f); /* 1.5 2^23 + k */
    const int k = __float_as_int(tf) - 0x4B400000;
    const double kf = __hiloint2double(0x43380000 + (k >> 31), k) - 6755399441055744.0;
    const double u = fma(kf, 0.34657359027997264, c);
    double p = -5.13102486473773e-05;
    p = fma(p, u, 0.00028291885952739273);
    p = fma(p, u, -0.0014109396381055753);
    p = fma(p, u, 0.00634918363300793);
    p = fma(p, u, -0.02539682522067827);
    p = fma(p, u, 0.08888888919615398);
    p = fma(p, u, -0.26666666666877265);
    p = fma(p, u, 0.6666666666649839);
    p = fma(p, u, -1.3333333333333257);
    p = fma(p, u, 2.0000000000000027);
    p = fma(p, u, -2.0);
    const double s = __hiloint2double((k + 1023) << 20, 0);
    const double m = fma(s * u, p, s - 1.0);
    const double d = m + 2.0;
    const double r0 = ROSENNA_DTANH_RCP(d);
    const double e = fma(-d, r0, 1.0);
    const double r = fma(r0, fma(e, e, e), r0);
    return copysign(m * r, x);
}
