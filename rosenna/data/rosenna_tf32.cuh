/* TF32 tensor-core helpers (rosenna/emit/cuda/tf32.py says how the 3xTF32 split keeps fp32
   accuracy and how the fragments are laid out). */

/* An fp32 operand a as big + small, both read by the tensor cores (which take the top 19 bits of
   an fp32 register and ignore the rest): big is a with its low 13 bits cleared, a TF32 number (NaN
   and the infinities stay what they are); small = a - big is exact, of a's sign and under 2^-10 |a|;
   adding half a TF32 ulp to its bits makes the cores' truncation round it to nearest. Three
   instructions (LOP3, FADD, IADD) where cvt.rna.tf32.f32 twice was ten on sm_90. */
__device__ __forceinline__ void rosenna_tf32_split(float a, unsigned &big, unsigned &small)
{
    big = __float_as_uint(a) & 0xffffe000u;
    small = __float_as_uint(a - __uint_as_float(big)) + 0x1000u;
}

__device__ __forceinline__ void rosenna_mma(float (&d)[4], const unsigned (&a)[4], float b0, float b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}

/* d += a * b in 3xTF32, the small products first: they are the ones fp32 accumulation must not
   lose. b = {big(b0), big(b1), small(b0), small(b1)}. A template, as the layers that call it are:
   a kernel file whose kernels do not (the implicit-GEMM convs) has no unused function. */
template <int = 0>
__device__ __forceinline__ void rosenna_mma3(float (&d)[4], const float (&a)[4], const float4 &b)
{
    unsigned big[4], small[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        rosenna_tf32_split(a[i], big[i], small[i]);
    rosenna_mma(d, small, b.x, b.y);
    rosenna_mma(d, big, b.z, b.w);
    rosenna_mma(d, big, b.x, b.y);
}

/* A compact fragment (rosenna/emit/cuda/tf32.py compact: each weight big + small, both TF32) split
   back into {big(b0), big(b1), small(b0), small(b1)}: big is the weight with its low 13 bits
   cleared, small the rest, exact. A template for the same reason. */
template <int = 0>
__device__ __forceinline__ float4 rosenna_tcw_b(float2 w)
{
    const float big0 = __uint_as_float(__float_as_uint(w.x) & 0xffffe000u);
    const float big1 = __uint_as_float(__float_as_uint(w.y) & 0xffffe000u);
    return make_float4(big0, big1, w.x - big0, w.y - big1);
}

/* The split-accumulated sums of n8 tiles NT0 .. NT0 + NG of a layer with KT k8 and NT n8 tiles, for
   the warp's MT 16-row tiles: in[MT][KT][4] A fragments, F the layer's B fragments ([kt][nt][lane]),
   bias its bias padded to NT*8. The products of each pair of k8 tiles are summed by the tensor cores
   from zero and added to the bias and the running sum in fp32 (round to nearest): the tensor cores'
   truncating accumulation never carries the running sum (rosenna_tcw_stage says why). acc: C
   fragments. LDG: F is global memory, read through the read-only data cache. COMPACT: F holds
   compact fragments (8 bytes per lane and tile, rosenna_tcw_b), F's offsets still in float4. */
template <int KT, int NT, int NG, int MT, bool LDG = false, bool COMPACT = false>
__device__ __forceinline__ void rosenna_tc_sums(const float4 *F, const float *bias, const float (&in)[MT][KT][4], int nt0,
                                                float (&acc)[MT][NG][4])
{
    constexpr int S = 2;  /* k8 tiles per partial sum */
    unsigned lane;  /* %laneid: threadIdx.x % 32 is the lane only for x extents that are multiples of 32 */
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    const int tig = lane % 4;
#pragma unroll
    for (int nt = 0; nt < NG; ++nt) {
        const float2 b = *reinterpret_cast<const float2 *>(bias + (nt0 + nt) * 8 + 2 * tig);
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
            acc[mi][nt][0] = acc[mi][nt][2] = b.x;
            acc[mi][nt][1] = acc[mi][nt][3] = b.y;
        }
    }
#pragma unroll
    for (int k0 = 0; k0 < KT; k0 += S) {
#pragma unroll
        for (int nt = 0; nt < NG; ++nt) {
            float t[MT][4] = {};
#pragma unroll
            for (int kt = k0; kt < k0 + S && kt < KT; ++kt) {
                const int e = (kt * NT + nt0 + nt) * 32 + lane;
                const float2 *F2 = reinterpret_cast<const float2 *>(F);
                const float4 b = COMPACT ? rosenna_tcw_b(LDG ? __ldg(F2 + e) : F2[e]) : LDG ? __ldg(F + e) : F[e];
#pragma unroll
                for (int mi = 0; mi < MT; ++mi)
                    rosenna_mma3(t[mi], in[mi][kt], b);
            }
#pragma unroll
            for (int mi = 0; mi < MT; ++mi)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    acc[mi][nt][r] += t[mi][r];
        }
    }
}

/* One layer for the warp's 16 MT points: in[MT][KT][4] A fragments (MT 16-row tiles), out[MT][NT][4]
   the activated C fragments reordered (c0, c2, c1, c3) into the next layer's A fragments. F: the
   layer's B fragments, bias: its bias padded to NT*8 (rosenna_tc_sums). */
template <int KT, int NT, float (*ACT)(float), int MT = 2, bool LDG = false, bool COMPACT = false>
__device__ __forceinline__ void rosenna_tc_layer(const float4 *F, const float *bias, const float (&in)[MT][KT][4],
                                                 float (&out)[MT][NT][4])
{
    float acc[MT][NT][4];
    rosenna_tc_sums<KT, NT, NT, MT, LDG, COMPACT>(F, bias, in, 0, acc);
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            out[mi][nt][0] = ACT(acc[mi][nt][0]);
            out[mi][nt][1] = ACT(acc[mi][nt][2]);
            out[mi][nt][2] = ACT(acc[mi][nt][1]);
            out[mi][nt][3] = ACT(acc[mi][nt][3]);
        }
}
