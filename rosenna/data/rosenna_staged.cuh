/* The staged FP32 wide kernel's block (rosenna/emit/cuda/staged.py; the design study's k_mlp128_stream<8>).
   Thread (tx, ty) = (t % 16, t / 16) owns points 8ty .. +8 and columns 4tx .. +4, 64 + 4tx .. +4. */
constexpr int ROSENNA_FS_THREADS = 128, ROSENNA_FS_LDA = 68, ROSENNA_FS_STAGE4 = 512;

#if defined(__HIPCC__)
#define ROSENNA_FS_BOUNDS __launch_bounds__(128)
#else
#define ROSENNA_FS_BOUNDS __launch_bounds__(128, 4)
#endif
/* Stage g of the STAGES-stage stream (16 rows of a hidden layer, the first at row k0 of
   act[k][LDA]) multiplied into the thread's 8 x 8 tile. On entry stage g is in flight in buffer
   g & 1; this prefetches stage g + 1 (the next layer's first at a layer's last) into the other.
   W: the hidden layers' weights, stage g at W + g * ROSENNA_FS_STAGE4. */
template <int STAGES>
__device__ __forceinline__ void rosenna_fs_stage(float (&acc)[8][8], const float *act, float4 *stage,
                                                 const float4 *ROSENNA_RESTRICT W, int g, int k0)
{
    constexpr int LDA = ROSENNA_FS_LDA;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    if (g + 1 < STAGES)
        rosenna_stage_copy<ROSENNA_FS_STAGE4, ROSENNA_FS_THREADS>(stage + ((g + 1) & 1) * ROSENNA_FS_STAGE4,
                                                             W + (g + 1) * ROSENNA_FS_STAGE4);
    rosenna_stage_commit();  /* possibly empty: keeps "all but the newest group" meaning stage g */
    rosenna_stage_wait_prev();
    __syncthreads();  /* stage g and the last epilogue's act are visible to every thread */
    const float *sw = reinterpret_cast<const float *>(stage + (g & 1) * ROSENNA_FS_STAGE4);
    const float *sa = act + k0 * LDA + ty * 8;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const float4 a0 = *reinterpret_cast<const float4 *>(sa + k * LDA);
        const float4 a1 = *reinterpret_cast<const float4 *>(sa + k * LDA + 4);
        const float4 w0 = *reinterpret_cast<const float4 *>(sw + k * 128 + tx * 4);
        const float4 w1 = *reinterpret_cast<const float4 *>(sw + k * 128 + 64 + tx * 4);
        const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const float w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
                acc[i][j] = fmaf(w[j], a[i], acc[i][j]);
    }
    __syncthreads();  /* buffer g & 1 is refilled next stage, and an epilogue may overwrite act */
}

/* A hidden layer's end: bias and activation written over act[k][LDA] as the next layer's input
   (every thread has read this layer's: rosenna_fs_stage ends on a barrier); the accumulators
   start again from zero. bias: the layer's, padded to 128. */
template <float (*ACT)(float)>
__device__ __forceinline__ void rosenna_fs_epilogue(float (&acc)[8][8], float *act, const float *ROSENNA_RESTRICT bias)
{
    constexpr int LDA = ROSENNA_FS_LDA;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const float4 b0 = __ldg(reinterpret_cast<const float4 *>(bias + tx * 4));
    const float4 b1 = __ldg(reinterpret_cast<const float4 *>(bias + 64 + tx * 4));
    const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        float v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            v[i] = ACT(acc[i][j] + b[j]);
            acc[i][j] = 0.0f;
        }
        float *o = act + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4) * LDA + ty * 8;
        *reinterpret_cast<float4 *>(o) = make_float4(v[0], v[1], v[2], v[3]);
        *reinterpret_cast<float4 *>(o + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
}

/* The output layer (K -> N, W [K][NP] input-major, NP = N rounded up to 4) from act[k][LDA]: a
   point's outputs in NP / 4 groups of 4 columns, one thread per group, weights through L1. */
template <int K, int N, int NP, int BM, float (*ACT)(float)>
__device__ __forceinline__ void rosenna_fs_out(const float *ROSENNA_RESTRICT W, const float *ROSENNA_RESTRICT bias,
                                               const float *act, float *ROSENNA_RESTRICT y, long p0, int n)
{
    constexpr int CG = NP / 4, LDA = ROSENNA_FS_LDA;
    static_assert(ROSENNA_FS_THREADS % CG == 0, "whole points per pass");
    const int c = (threadIdx.x % CG) * 4;
    for (int pp = threadIdx.x / CG; pp < BM; pp += ROSENNA_FS_THREADS / CG) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 8
        for (int k = 0; k < K; ++k) {
            const float a = act[k * LDA + pp];
            const float4 w = __ldg(reinterpret_cast<const float4 *>(W + k * NP + c));
            acc[0] = fmaf(w.x, a, acc[0]);
            acc[1] = fmaf(w.y, a, acc[1]);
            acc[2] = fmaf(w.z, a, acc[2]);
            acc[3] = fmaf(w.w, a, acc[3]);
        }
        const float4 b4 = __ldg(reinterpret_cast<const float4 *>(bias + c));
        const float b[4] = {b4.x, b4.y, b4.z, b4.w};
        const long p = p0 + pp;
        if (p < n) {
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (c + j < N)
                    y[p * N + c + j] = ACT(acc[j] + b[j]);
        }
    }
}
