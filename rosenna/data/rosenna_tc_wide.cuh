/* The wide tensor-core kernel's block (rosenna/emit/cuda/tc_wide.py, run 3 of the design study):
   ROSENNA_TCW_THREADS threads, 8 warps; warp (wm, wn) = (warp / 2, warp % 2) owns points
   32wm .. +32 and columns 64wn .. +64, 2 x 8 m16n8 tiles, 64 accumulators per thread. */
constexpr int ROSENNA_TCW_THREADS = 256, ROSENNA_TCW_LDA = 132, ROSENNA_TCW_STAGE = 1024;

/* An A fragment split once into its TF32 halves: each serves the warp's 8 n8 tiles. */
struct rosenna_split {
    unsigned big[4], small[4];
};

__device__ __forceinline__ rosenna_split rosenna_split_a(float a0, float a1, float a2, float a3)
{
    const float a[4] = {a0, a1, a2, a3};
    rosenna_split s;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        s.big[i] = rosenna_tf32(a[i]);
        s.small[i] = rosenna_tf32(a[i] - __uint_as_float(s.big[i]));
    }
    return s;
}

/* rosenna_mma3 with the A fragment already split: the small products first. */
__device__ __forceinline__ void rosenna_mma3s(float (&d)[4], const rosenna_split &a, const float4 &b)
{
    rosenna_mma(d, a.small, b.x, b.y);
    rosenna_mma(d, a.big, b.z, b.w);
    rosenna_mma(d, a.big, b.x, b.y);
}

/* One stage g of the STAGES-stage weight stream (16 input rows of a hidden layer, the first at
   column k0 of act[p][LDA]) multiplied into the warp's accumulators. On entry stage g is in
   flight in buffer g & 1; this prefetches stage g + 1 into the other buffer, the next layer's
   first stage at a layer's last, so the stream never stops at a layer boundary. F: all
   fragments, stage g at F + g * ROSENNA_TCW_STAGE. */
template <int STAGES>
__device__ __forceinline__ void rosenna_tcw_stage(float (&acc)[2][8][4], const float *act, float4 *stage,
                                                  const float4 *ROSENNA_RESTRICT F, int g, int k0)
{
    constexpr int LDA = ROSENNA_TCW_LDA;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    const int wm = warp / 2, wn = warp % 2;
    if (g + 1 < STAGES)
        rosenna_stage_copy<ROSENNA_TCW_STAGE, ROSENNA_TCW_THREADS>(stage + ((g + 1) & 1) * ROSENNA_TCW_STAGE,
                                                                 F + (g + 1) * ROSENNA_TCW_STAGE);
    rosenna_stage_commit();  /* possibly empty: keeps "all but the newest group" meaning stage g */
    rosenna_stage_wait_prev();
    __syncthreads();  /* stage g and the last epilogue's act are visible to every warp */
    const float4 *sb = stage + (g & 1) * ROSENNA_TCW_STAGE + wn * 8 * 32 + lane;
#pragma unroll
    for (int kt = 0; kt < 2; ++kt) {
        const float *sa = act + (wm * 32 + gid) * LDA + k0 + kt * 8 + tig;
        const rosenna_split a[2] = {rosenna_split_a(sa[0], sa[8 * LDA], sa[4], sa[8 * LDA + 4]),
                                    rosenna_split_a(sa[16 * LDA], sa[24 * LDA], sa[16 * LDA + 4], sa[24 * LDA + 4])};
#pragma unroll
        for (int ni = 0; ni < 8; ++ni) {
            const float4 b = sb[(kt * 16 + ni) * 32];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                rosenna_mma3s(acc[mi][ni], a[mi], b);
        }
    }
    __syncthreads();  /* buffer g & 1 is refilled next stage, and an epilogue may overwrite act */
}

/* A hidden layer's end: bias and activation, written over act[p][LDA] as the next layer's input
   (every warp has read this layer's input: rosenna_tcw_stage ends on a barrier); the
   accumulators start again from zero. bias: the layer's, 128 floats. */
template <float (*ACT)(float)>
__device__ __forceinline__ void rosenna_tcw_epilogue(float (&acc)[2][8][4], float *act, const float *ROSENNA_RESTRICT bias)
{
    constexpr int LDA = ROSENNA_TCW_LDA;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    const int wm = warp / 2, wn = warp % 2;
    /* C fragment: c0, c1 at (row gid, columns 2tig, 2tig+1), c2, c3 at row gid + 8. */
#pragma unroll
    for (int ni = 0; ni < 8; ++ni) {
        const float2 b = __ldg(reinterpret_cast<const float2 *>(bias + wn * 64 + ni * 8 + 2 * tig));
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
            float *o = act + (wm * 32 + mi * 16 + gid) * LDA + wn * 64 + ni * 8 + 2 * tig;
            float(&c)[4] = acc[mi][ni];
            *reinterpret_cast<float2 *>(o) = make_float2(ACT(c[0] + b.x), ACT(c[1] + b.y));
            *reinterpret_cast<float2 *>(o + 8 * LDA) = make_float2(ACT(c[2] + b.x), ACT(c[3] + b.y));
            c[0] = c[1] = c[2] = c[3] = 0.0f;
        }
    }
}
