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

/* A compact fragment that holds the weights themselves (rosenna/emit/cuda/tf32.py pack_compact,
   form "weight") split as the host splits 16-byte fragments: big the weight rounded to TF32 (half
   a TF32 ulp added to its bits, the low 13 cleared), small = w - big exact, with half a TF32 ulp
   added to its bits: the tensor cores' truncation of it is small rounded to nearest. The same
   operands as the 16-byte fragment, in four instructions per weight. A template, as rosenna_tcw_b. */
template <int = 0>
__device__ __forceinline__ float4 rosenna_tcw_w(float2 w)
{
    const float big0 = __uint_as_float((__float_as_uint(w.x) + 0x1000u) & 0xffffe000u);
    const float big1 = __uint_as_float((__float_as_uint(w.y) + 0x1000u) & 0xffffe000u);
    return make_float4(big0, big1, __uint_as_float(__float_as_uint(w.x - big0) + 0x1000u),
                       __uint_as_float(__float_as_uint(w.y - big1) + 0x1000u));
}

/* A lane's B fragment of tile `tile` (k8 x n8 tiles in [kt][nt] order, 32 lanes each): {big, big,
   small, small}. GATHER: F holds fragments in the natural row order (the wide kernel's: lane (gid,
   tig) has rows tig and tig + 4) but the A fragments are paired (rosenna_tc_layer's C-to-A reorder:
   rows 2tig and 2tig + 1 of the k8 tile, every layer after the first), so a lane reads the
   fragments of lanes (gid, 2tig % 4) and (gid, 2tig % 4 + 1), 32 adjacent bytes, component tig / 2
   of each half: the paired fragment's four numbers, in four 4-byte loads instead of one 16-byte
   load (compact: two 4-byte loads; two 16-byte loads and a select took mlp128's warp body, inlined,
   from 106 registers to 147). Otherwise F is read as it is: one 16-byte load, or 8 bytes of
   a compact fragment. COMPACT: 8-byte fragments, split by rosenna_tcw_b, or rosenna_tcw_w where
   they hold the weights themselves (WEIGHT). LDG: F is global memory, read through the read-only
   data cache. */
template <bool LDG, bool COMPACT, bool GATHER, bool WEIGHT = false>
__device__ __forceinline__ float4 rosenna_tc_b(const float4 *F, int tile, unsigned lane)
{
    if (GATHER && COMPACT) {  /* 8-byte fragments: the same lanes, component tig / 2 of each */
        const int l = lane;
        const float2 *q = reinterpret_cast<const float2 *>(F) + tile * 32 + (l & ~3) + 2 * (l & 1);
        const float *p = reinterpret_cast<const float *>(q) + (l >> 1 & 1);
        const float2 w = LDG ? make_float2(__ldg(p), __ldg(p + 2)) : make_float2(p[0], p[2]);
        return WEIGHT ? rosenna_tcw_w(w) : rosenna_tcw_b(w);
    }
    if (GATHER) {
        const int l = lane;  /* (signed: the unrolled tiles' addresses fold into one base and offsets) */
        const float *p = reinterpret_cast<const float *>(F + tile * 32 + (l & ~3) + 2 * (l & 1)) + (l >> 1 & 1);
        return LDG ? make_float4(__ldg(p), __ldg(p + 4), __ldg(p + 2), __ldg(p + 6)) : make_float4(p[0], p[4], p[2], p[6]);
    }
    const int e = tile * 32 + lane;
    const float2 *F2 = reinterpret_cast<const float2 *>(F);
    if (COMPACT) {
        const float2 w = LDG ? __ldg(F2 + e) : F2[e];
        return WEIGHT ? rosenna_tcw_w(w) : rosenna_tcw_b(w);
    }
    return LDG ? __ldg(F + e) : F[e];
}

/* The split-accumulated sums of n8 tiles NT0 .. NT0 + NG of a layer with KT k8 and NT n8 tiles, for
   the warp's MT 16-row tiles: in[MT][KT][4] A fragments, F the layer's B fragments ([kt][nt][lane],
   LDT n8 tiles a k8 row: NT, or the wide kernel's padded width), bias its bias padded to NT*8. The
   products of each pair of k8 tiles are summed by the tensor cores from zero and added to the bias
   and the running sum in fp32 (round to nearest): the tensor cores' truncating accumulation never
   carries the running sum (rosenna_tcw_stage says why). acc: C fragments. LDG, COMPACT, GATHER, WEIGHT:
   how F is read (rosenna_tc_b; F's offsets in float4 in every form). */
template <int KT, int NT, int NG, int MT, bool LDG = false, bool COMPACT = false, bool GATHER = false, int LDT = NT,
          bool WEIGHT = false>
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
                const float4 b = rosenna_tc_b<LDG, COMPACT, GATHER, WEIGHT>(F, kt * LDT + nt0 + nt, lane);
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
   layer's B fragments, bias: its bias padded to NT*8 (rosenna_tc_sums, which says what LDG to LDT are). */
template <int KT, int NT, float (*ACT)(float), int MT = 2, bool LDG = false, bool COMPACT = false, bool GATHER = false,
          int LDT = NT, bool WEIGHT = false>
__device__ __forceinline__ void rosenna_tc_layer(const float4 *F, const float *bias, const float (&in)[MT][KT][4],
                                                 float (&out)[MT][NT][4])
{
    float acc[MT][NT][4];
    rosenna_tc_sums<KT, NT, NT, MT, LDG, COMPACT, GATHER, LDT, WEIGHT>(F, bias, in, 0, acc);
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
