/* Activations the MLP kernels compute with fewer transcendentals than the op's formula
   (rosenna.ops.activation defines each; rosenna/emit/cuda/mlp.py DEVICE_FORMS says which call a
   function here). */

/* Mish, x tanh(softplus(x)), with one exponential instead of exp, log and tanh. With e = exp(x)
   and n = e (e + 2): tanh(log(1 + e)) = ((1 + e)^2 - 1) / ((1 + e)^2 + 1) = n / (n + 2). n and
   n + 2 are sums of positive terms, so nothing cancels: the quotient is within a few ulp for every
   x, and __fdividef (2 ulp; the divisor lies in [2, 2.4e17]) spares the IEEE division's
   subroutine. The exponent is clamped at 20, where n / (n + 2) is 1 in float and in double
   (2 / n < 2^-57) and past which n would overflow: mish(x) = x there, inf at inf. Far below zero
   e underflows and the result is x e^x rounded, 0 below x = -104 (float), where mish is under
   1e-43. NaN stays NaN (x itself is the factor) and -inf gives NaN, as the op's formula does
   (-inf * tanh(0)). Branch-free: a select on x > 20 made ptxas spill in a deep FP32 kernel. */
__device__ __forceinline__ float rosenna_mish(float x)
{
    const float e = expf(fminf(x, 20.0f));
    const float n = e * (e + 2.0f);
    return x * __fdividef(n, n + 2.0f);
}

__device__ __forceinline__ double rosenna_mish(double x)
{
    const double e = exp(fmin(x, 20.0));
    const double n = e * (e + 2.0);
    return x * (n / (n + 2.0));
}
