/* tanh in double precision without branches, for the FP64 tensor-core chain (rosenna/emit/cuda/dmma.py;
   CUDA sm_80+ only: inline PTX). libdevice's tanh takes one of two paths per element (a polynomial
   below 0.55, exp and a division above) and converts through float for its exponent: in a warp
   whose elements straddle 0.55 both paths run, and the branches keep ptxas from overlapping the
   32 independent tanh a thread computes per layer. This form is one straight line of 23 FP64
   instructions (sm_90 SASS: 16 DFMA, 4 DADD, 2 DMUL, 1 DSETP), one MUFU.RCP64H and a few integer
   ones (libdevice's: 28 DFMA, 3 DADD, 2 DMUL, 3 F2F, 2 MUFU and 2 branches per tanh):

     tanh(x) = -sign(x) m / (2 + m),  m = expm1(-2 c),  c = min(|x|, 20)

   m is in (-1, 0] and 2 + m in [1, 2], so the quotient never cancels: its relative error is that
   of m plus the division's. expm1(-2c) = 2^k expm1(-2u) + (2^k - 1) with k = round(-2c log2 e)
   (read from the low word of c (-2 log2 e) + 1.5 2^52) and u = c + k ln2/2, |u| <= ln2/4:
   2^k - 1 is exact (k in [-58, 0]) and 2^k expm1(-2u) has the polynomial's relative error, so
   the sum keeps it for every c (near 0 k = 0 and m = expm1(-2u) itself: tanh(x) = x to the last
   bit for tiny x, and -0 stays -0). expm1(-2u) = -2u + u^2 P(u), P of degree 9 fitted near-minimax
   to relative error 4e-17 on |u| <= 1.02 ln2/4 (bench/studies/f64-dmma/fit_dtanh.py). ln2/2 in one
   double is enough: k ln2/2 is off by at most 58 x 2^-56, which moves 2^k m by under 2^-60.
   The reciprocal of d = 2 + m: rcp.approx.f64 (MUFU.RCP64H, the high word of 1/d) and one
   cubic Newton step r (1 + e + e^2), e = 1 - d r (what libdevice's division also does).
   Measured error against long double tanhl: 3.2 ulp at worst on 84M points of [-25, 25] and
   log-spaced magnitudes (bench/studies/f64-dmma), 3.0 on tests/test_dmma.py's sweep.
   Past 20 (tanh(20) rounds to 1) c is 20, so +-inf gives +-1; NaN fails the comparison and
   stays NaN through every step. */
#ifndef ROSENNA_DTANH_RCP
__device__ __forceinline__ double rosenna_rcp_approx(double d)
{
    double r;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(d));
    return r;
}
#define ROSENNA_DTANH_RCP(d) rosenna_rcp_approx(d)
#endif

__device__ __forceinline__ double rosenna_tanh(double x)
{
    const double a = fabs(x);
    const double c = a > 20.0 ? 20.0 : a;
    const double t = fma(c, -2.8853900817779268, 6755399441055744.0); /* 1.5 2^52 + k */
    const double kf = t - 6755399441055744.0;
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
    p = fma(p, u, -2.0); /* expm1(-2u) / u */
    const double s = __hiloint2double((__double2loint(t) + 1023) << 20, 0); /* 2^k */
    const double m = fma(s * u, p, s - 1.0);
    const double d = m + 2.0;
    const double r0 = ROSENNA_DTANH_RCP(d);
    const double e = fma(-d, r0, 1.0);
    const double r = fma(r0, fma(e, e, e), r0);
    return copysign(m * r, x);
}
