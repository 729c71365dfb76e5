/* The tensor-core warp body of <name>_infer_warp for layers too wide for the chain's registers
   (rosenna/emit/cuda/routine.py). A layer's NT n8 tiles are computed in NT / NG groups of NG: the
   whole input stays in registers (in[MT][KT][4], the A fragments), each group's sums are NG x MT
   C fragments, and the activated outputs of every group but the last are parked in local memory
   (each lane's own, one 16-byte store per fragment: coalesced, L1-resident) until the layer is
   done, then read back as the next layer's A fragments. The group loop is not unrolled: one
   group's code, its k loop unrolled. F, bias: global memory (LDG to WEIGHT as rosenna_tc_sums). */
template <int KT, int NT, int NG, float (*ACT)(float), int MT, bool LDG, bool COMPACT, bool GATHER = false, int LDT = NT,
          bool WEIGHT = false>
__device__ __forceinline__ void rosenna_tc_layer_parked(const float4 *F, const float *bias, const float (&in)[MT][KT][4],
                                                        float (&out)[MT][NT][4])
{
    static_assert(NT % NG == 0 && NT > NG, "groups of NG n8 tiles, more than one");
    constexpr int G = NT / NG;
    float4 park[G - 1][MT][NG];
#pragma unroll 1
    for (int g = 0; g < G - 1; ++g) {
        float acc[MT][NG][4];
        rosenna_tc_sums<KT, NT, NG, MT, LDG, COMPACT, GATHER, LDT, WEIGHT>(F, bias, in, g * NG, acc);
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int nt = 0; nt < NG; ++nt) {
                const float(&c)[4] = acc[mi][nt];
                park[g][mi][nt] = make_float4(ACT(c[0]), ACT(c[2]), ACT(c[1]), ACT(c[3]));
            }
    }
    float acc[MT][NG][4];
    rosenna_tc_sums<KT, NT, NG, MT, LDG, COMPACT, GATHER, LDT, WEIGHT>(F, bias, in, (G - 1) * NG, acc);
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int nt = 0; nt < NG; ++nt) {
            float(&o)[4] = out[mi][(G - 1) * NG + nt];
            o[0] = ACT(acc[mi][nt][0]);
            o[1] = ACT(acc[mi][nt][2]);
            o[2] = ACT(acc[mi][nt][1]);
            o[3] = ACT(acc[mi][nt][3]);
        }
#pragma unroll
    for (int g = 0; g < G - 1; ++g)
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int nt = 0; nt < NG; ++nt) {
                const float4 v = park[g][mi][nt];
                float(&o)[4] = out[mi][g * NG + nt];
                o[0] = v.x;
                o[1] = v.y;
                o[2] = v.z;
                o[3] = v.w;
            }
}

/* The same layer with its input in local memory: in[KT][MT] and out[NT][MT] hold each lane's A
   fragments, one float4 per k8 tile and 16-row tile (each lane's own: coalesced). The n8 tiles in
   groups of NG (the sums in registers), the k loop over pairs of k8 tiles not unrolled: few
   registers (mlp128, 128 wide, NG 8: 134 inlined), at the price of reading the input once per
   group. Split accumulation, and F's forms, as rosenna_tc_sums. */
template <int KT, int NT, int NG, float (*ACT)(float), int MT, bool LDG, bool COMPACT, bool GATHER = false, int LDT = NT,
          bool WEIGHT = false>
__device__ __forceinline__ void rosenna_tc_layer_local(const float4 *F, const float *bias, const float4 (*in)[MT],
                                                       float4 (*out)[MT])
{
    static_assert(NT % NG == 0, "groups of NG n8 tiles");
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    const int tig = lane % 4;
#pragma unroll 1
    for (int g = 0; g < NT / NG; ++g) {
        float acc[MT][NG][4];
#pragma unroll
        for (int nt = 0; nt < NG; ++nt) {
            const float2 b = *reinterpret_cast<const float2 *>(bias + (g * NG + nt) * 8 + 2 * tig);
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) {
                acc[mi][nt][0] = acc[mi][nt][2] = b.x;
                acc[mi][nt][1] = acc[mi][nt][3] = b.y;
            }
        }
#pragma unroll 1
        for (int k0 = 0; k0 < KT; k0 += 2) {
            float a[2][MT][4];
#pragma unroll
            for (int s = 0; s < 2; ++s)
#pragma unroll
                for (int mi = 0; mi < MT; ++mi) {
                    const float4 v = k0 + s < KT ? in[k0 + s][mi] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    a[s][mi][0] = v.x;
                    a[s][mi][1] = v.y;
                    a[s][mi][2] = v.z;
                    a[s][mi][3] = v.w;
                }
#pragma unroll
            for (int nt = 0; nt < NG; ++nt) {
                float t[MT][4] = {};
#pragma unroll
                for (int s = 0; s < 2; ++s) {
                    if (k0 + s >= KT)
                        break;
                    const float4 b = rosenna_tc_b<LDG, COMPACT, GATHER, WEIGHT>(F, (k0 + s) * LDT + g * NG + nt, lane);
#pragma unroll
                    for (int mi = 0; mi < MT; ++mi)
                        rosenna_mma3(t[mi], a[s][mi], b);
                }
#pragma unroll
                for (int mi = 0; mi < MT; ++mi)
#pragma unroll
                    for (int r = 0; r < 4; ++r)
                        acc[mi][nt][r] += t[mi][r];
            }
        }
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int nt = 0; nt < NG; ++nt) {
                const float(&c)[4] = acc[mi][nt];
                out[g * NG + nt][mi] = make_float4(ACT(c[0]), ACT(c[2]), ACT(c[1]), ACT(c[3]));
            }
    }
}
