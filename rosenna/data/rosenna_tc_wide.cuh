/* The wide tensor-core kernel's block (rosenna/emit/cuda/tc_wide.py): WM x WN warps; warp
   (wm, wn) = (warp / WN, warp % WN) owns points 32wm .. +32 and columns 8 NI wn .. +8 NI of every
   hidden layer, 2 x NI m16n8 tiles. A stage is KS k8 tiles of all WN NI n8 tiles; act[p][LDA]. */

/* Every cp.async group has landed (rosenna_cp_async.cuh; the staged FP32 kernel waits for all but
   the newest only). */
__device__ __forceinline__ void rosenna_stage_wait_all()
{
#if defined(ROSENNA_CP_ASYNC)
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
}

/* An A fragment split once into its TF32 halves: each serves the warp's NI n8 tiles. */
struct rosenna_split {
    unsigned big[4], small[4];
};

__device__ __forceinline__ rosenna_split rosenna_split_a(float a0, float a1, float a2, float a3)
{
    const float a[4] = {a0, a1, a2, a3};
    rosenna_split s;
#pragma unroll
    for (int i = 0; i < 4; ++i)
        rosenna_tf32_split(a[i], s.big[i], s.small[i]);
    return s;
}

/* The A fragment of a k8 tile whose row gid starts at s (act[p][LDA]), split. The k index in
   mma.sync's order: columns tig and tig + 4 (each row's four lanes' loads in distinct banks for
   LDA = 4 mod 32); PAIRED: columns 2 tig (a0, a1) and 2 tig + 1 (a2, a3), one 8-byte load per row
   (conflict-free per half warp for LDA = 8 mod 32), for B fragments that hold rows 2 tig and
   2 tig + 1 (the paired packing of rosenna/emit/cuda/tf32.py): the same products of the k8 tile,
   summed in another order. */
template <int LDA, bool PAIRED>
__device__ __forceinline__ rosenna_split rosenna_tcw_a(const float *s, int tig)
{
    if (PAIRED) {
        const float2 r0 = *reinterpret_cast<const float2 *>(s + 2 * tig);
        const float2 r8 = *reinterpret_cast<const float2 *>(s + 8 * LDA + 2 * tig);
        return rosenna_split_a(r0.x, r8.x, r0.y, r8.y);
    }
    return rosenna_split_a(s[tig], s[8 * LDA + tig], s[tig + 4], s[8 * LDA + tig + 4]);
}

/* rosenna_mma3 with the A fragment already split: the small products first. */
__device__ __forceinline__ void rosenna_mma3s(float (&d)[4], const rosenna_split &a, const float4 &b)
{
    rosenna_mma(d, a.small, b.x, b.y);
    rosenna_mma(d, a.big, b.z, b.w);
    rosenna_mma(d, a.big, b.x, b.y);
}

/* One stage g of the STAGES-stage weight stream (8 KS input rows of a hidden layer, the first at
   column k0 of act[p][LDA]) multiplied into the warp's accumulators. The stage's products are
   summed by the tensor cores from zero and added to the accumulators in fp32 (round to nearest):
   the tensor cores' truncating accumulation then never carries a layer's running sum (a single
   accumulation over K = 128 left ~1 output in a million outside verify's tolerance). On entry
   stage g is in flight in buffer slot; once it has landed and every warp has passed the barrier
   (one per stage; two, before and after, cost 1 % on mlp128), this prefetches the next stage
   into the other buffer: the next layer's first stage at a layer's last, stage 0 for the block's
   next points after the last (again), so the stream stops neither at a layer boundary nor
   between a block's tiles of points. F: all fragments, stage g at F + g * STAGE4. COMPACT: 8-byte
   fragments (rosenna_tcw_b; rosenna_tcw_w where they hold the weights themselves, WEIGHT). PAIRED: a
   k8 tile's k index in the paired order (rosenna_tcw_a). */
template <int STAGES, int THREADS, int WN, int NI, int KS, int LDA, bool COMPACT, bool WEIGHT = false, bool PAIRED = false>
__device__ __forceinline__ void rosenna_tcw_stage(float (&acc)[2][NI][4], const float *act, float4 *stage,
                                                  const float4 *ROSENNA_RESTRICT F, int g, int k0, int slot, bool again)
{
    constexpr int NT = WN * NI, STAGE4 = KS * NT * (COMPACT ? 16 : 32);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    const int wm = warp / WN, wn = warp % WN;
    rosenna_stage_wait_all();  /* stage g, the one group in flight, has landed */
    __syncthreads();  /* stage g and the last epilogue's act are visible to every warp, and every warp is
                         done with the stage before, whose buffer takes the prefetch */
    if (g + 1 < STAGES || again)
        rosenna_stage_copy<STAGE4, THREADS>(stage + (slot ^ 1) * STAGE4, F + (g + 1 < STAGES ? g + 1 : 0) * STAGE4);
    rosenna_stage_commit();
    const float4 *sb = stage + slot * STAGE4 + wn * NI * 32 + lane;
    const float2 *sb2 = reinterpret_cast<const float2 *>(stage + slot * STAGE4) + wn * NI * 32 + lane;
    rosenna_split a[KS][2];
#pragma unroll
    for (int kt = 0; kt < KS; ++kt) {
        a[kt][0] = rosenna_tcw_a<LDA, PAIRED>(act + (wm * 32 + gid) * LDA + k0 + kt * 8, tig);
        a[kt][1] = rosenna_tcw_a<LDA, PAIRED>(act + (wm * 32 + 16 + gid) * LDA + k0 + kt * 8, tig);
    }
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
        float4 b[KS];
#pragma unroll
        for (int kt = 0; kt < KS; ++kt)
            b[kt] = !COMPACT ? sb[(kt * NT + ni) * 32]
                    : WEIGHT ? rosenna_tcw_w(sb2[(kt * NT + ni) * 32]) : rosenna_tcw_b(sb2[(kt * NT + ni) * 32]);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
            float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int kt = 0; kt < KS; ++kt)
                rosenna_mma3s(t, a[kt][mi], b[kt]);
#pragma unroll
            for (int r = 0; r < 4; ++r)
                acc[mi][ni][r] += t[r];
        }
    }
}

/* A hidden layer's end: bias and activation, written over act[p][LDA] as the next layer's input
   once every warp has read this layer's input (the barrier); the accumulators start again from
   zero. bias: the layer's, WN NI 8 floats. */
template <float (*ACT)(float), int WN, int NI, int LDA>
__device__ __forceinline__ void rosenna_tcw_epilogue(float (&acc)[2][NI][4], float *act, const float *ROSENNA_RESTRICT bias)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    const int wm = warp / WN, wn = warp % WN;
    __syncthreads();
    /* C fragment: c0, c1 at (row gid, columns 2tig, 2tig+1), c2, c3 at row gid + 8. */
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
        const int col = (wn * NI + ni) * 8 + 2 * tig;
        const float2 b = __ldg(reinterpret_cast<const float2 *>(bias + col));
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
            float *o = act + (wm * 32 + mi * 16 + gid) * LDA + col;
            float(&c)[4] = acc[mi][ni];
            *reinterpret_cast<float2 *>(o) = make_float2(ACT(c[0] + b.x), ACT(c[1] + b.y));
            *reinterpret_cast<float2 *>(o + 8 * LDA) = make_float2(ACT(c[2] + b.x), ACT(c[3] + b.y));
            c[0] = c[1] = c[2] = c[3] = 0.0f;
        }
    }
}

/* The output layer for the 16 points of act rows p .. p + 15: KT k8 tiles x one n8 tile, each k8
   tile's products summed from zero and added in fp32 (as rosenna_tcw_stage), fragments F through
   L1. c: the C fragment (no bias). PAIRED: as rosenna_tcw_stage. */
template <int KT, int LDA, bool PAIRED = false>
__device__ __forceinline__ void rosenna_tcw_out(float (&c)[4], const float *act, int p, const float4 *ROSENNA_RESTRICT F)
{
    const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
    const float *sa = act + (p + gid) * LDA;
#pragma unroll 4
    for (int kt = 0; kt < KT; ++kt) {
        const rosenna_split a = rosenna_tcw_a<LDA, PAIRED>(sa + kt * 8, tig);
        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        rosenna_mma3s(t, a, __ldg(F + kt * 32 + lane));
#pragma unroll
        for (int r = 0; r < 4; ++r)
            c[r] += t[r];
    }
}
