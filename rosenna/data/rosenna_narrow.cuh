/* 16 bytes from shared memory in one load (a plain float4 dereference was split into four). */
__device__ __forceinline__ float4 rosenna_lds4(const float *p)
{
#if defined(__HIPCC__)
    return *reinterpret_cast<const float4 *>(p);
#else
    float4 v;
    asm("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"((unsigned)__cvta_generic_to_shared(p)));
    return v;
#endif
}

/* One dense layer for one point, every index a constant once unrolled: K inputs in registers,
   N outputs in registers. W is [K][NP] input-major, then the bias [NP]. LD 0 reads scalars (from
   __constant__ they become FFMA operands), LD 1 reads 16 bytes at a time through __ldg, LD 2 16
   bytes from shared memory. The bias is added after the dot product, as in the C routine. */
template <int K, int N, int NP, int LD, float (*ACT)(float)>
__device__ __forceinline__ void rosenna_dense(const float *ROSENNA_RESTRICT W, const float (&in)[K], float (&out)[N])
{
#pragma unroll
    for (int n0 = 0; n0 < N; n0 += 4) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < K; ++k) {
            float w[4];
            if (LD == 1 || LD == 2) {
                const float4 v = LD == 1 ? __ldg(reinterpret_cast<const float4 *>(W + k * NP + n0))
                                         : rosenna_lds4(W + k * NP + n0);
                w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    w[j] = W[k * NP + n0 + j];
            }
#pragma unroll
            for (int j = 0; j < 4; ++j)
                acc[j] = fmaf(w[j], in[k], acc[j]);
        }
        float b[4];
        if (LD == 1 || LD == 2) {
            const float4 v = LD == 1 ? __ldg(reinterpret_cast<const float4 *>(W + K * NP + n0))
                                     : rosenna_lds4(W + K * NP + n0);
            b[0] = v.x; b[1] = v.y; b[2] = v.z; b[3] = v.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
                b[j] = W[K * NP + n0 + j];
        }
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (n0 + j < N)
                out[n0 + j] = ACT(acc[j] + b[j]);
    }
}
