/* bf16 / fp16 tensor-core helpers (rosenna/emit/cuda/tc_lowp.py says how the fragments are laid
   out and why a layer's C fragments are the next layer's A fragments as they stand). T is
   __nv_bfloat16 or __half: the layers' weights and inputs, rounded to nearest even; sums in float32. */

/* The two 16-bit types' operations, by type: pack rounds two floats to nearest even into one
   register of T pairs (lo in the low 16 bits: the lower column of an A fragment); mma is d += a * b
   on the tensor cores, A 16x16 (four registers of pairs), B 16x8 (two), D float32. This file is
   not in the kernel file's anonymous namespace: inline definitions, identical in every model's
   file, and the type a file does not use leaves no unused function. */
template <typename T>
struct rosenna_lowp_ops;

template <>
struct rosenna_lowp_ops<__nv_bfloat16> {
    static __device__ __forceinline__ unsigned pack(float lo, float hi)
    {
        const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<const unsigned *>(&v);
    }
    static __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], uint2 b)
    {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
    }
};

template <>
struct rosenna_lowp_ops<__half> {
    static __device__ __forceinline__ unsigned pack(float lo, float hi)
    {
        const __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<const unsigned *>(&v);
    }
    static __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], uint2 b)
    {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
    }
};

/* The sums of one layer with KT k16 and NT n8 tiles for the warp's MT 16-row tiles: acc[MT][NT][4]
   C fragments, each started from the bias (float32, padded to NT*8) and accumulated by the tensor
   cores over the k16 tiles. in[MT][KT][4]: A fragments; F: the layer's B fragments, [kt][nt][lane]. */
template <typename T, int KT, int NT, int MT>
__device__ __forceinline__ void rosenna_lowp_sums(const uint2 *F, const float *bias, const unsigned (&in)[MT][KT][4],
                                                  float (&acc)[MT][NT][4])
{
    unsigned lane;  /* %laneid: threadIdx.x % 32 is the lane only for x extents that are multiples of 32 */
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    const int tig = lane % 4;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const float2 b = *reinterpret_cast<const float2 *>(bias + nt * 8 + 2 * tig);
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
            acc[mi][nt][0] = acc[mi][nt][2] = b.x;
            acc[mi][nt][1] = acc[mi][nt][3] = b.y;
        }
    }
#pragma unroll
    for (int kt = 0; kt < KT; ++kt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const uint2 b = F[(kt * NT + nt) * 32 + lane];
#pragma unroll
            for (int mi = 0; mi < MT; ++mi)
                rosenna_lowp_ops<T>::mma(acc[mi][nt], in[mi][kt], b);
        }
}

/* One hidden layer: its sums, its activation ACT in float32, and the result rounded to T as the next
   layer's A fragments: n8 tiles 2j and 2j+1 of the C fragments are k16 tile j of the next A
   (out[mi][j] = {c0c1 of 2j, c2c3 of 2j, c0c1 of 2j+1, c2c3 of 2j+1}); an odd NT's last tile meets
   zeros. */
template <typename T, int KT, int NT, float (*ACT)(float), int MT>
__device__ __forceinline__ void rosenna_lowp_layer(const uint2 *F, const float *bias, const unsigned (&in)[MT][KT][4],
                                                   unsigned (&out)[MT][(NT + 1) / 2][4])
{
    float acc[MT][NT][4];
    rosenna_lowp_sums<T, KT, NT, MT>(F, bias, in, acc);
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int j = 0; j < (NT + 1) / 2; ++j) {
            out[mi][j][0] = rosenna_lowp_ops<T>::pack(ACT(acc[mi][2 * j][0]), ACT(acc[mi][2 * j][1]));
            out[mi][j][1] = rosenna_lowp_ops<T>::pack(ACT(acc[mi][2 * j][2]), ACT(acc[mi][2 * j][3]));
            if (2 * j + 1 < NT) {
                out[mi][j][2] = rosenna_lowp_ops<T>::pack(ACT(acc[mi][2 * j + 1][0]), ACT(acc[mi][2 * j + 1][1]));
                out[mi][j][3] = rosenna_lowp_ops<T>::pack(ACT(acc[mi][2 * j + 1][2]), ACT(acc[mi][2 * j + 1][3]));
            } else {
                out[mi][j][2] = out[mi][j][3] = 0u;
            }
        }
}
