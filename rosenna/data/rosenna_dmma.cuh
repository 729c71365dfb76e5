/* FP64 tensor-core helpers (rosenna/emit/cuda/dmma.py says how the fragments are laid out): one
   DMMA m8n8k4 and one dense layer for a warp's M tiles of 8 points, all in registers. The m8n8k4
   step is a template so that an sm_90 build, whose layers may all take the m16 pairs below, has
   no unused function. */
template <int = 0>
__device__ __forceinline__ void rosenna_dmma(double (&d)[2], double a, double b)
{
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
        : "+d"(d[0]), "+d"(d[1])
        : "d"(a), "d"(b));
}

/* sm_90: DMMA m16n8k{4,8,16} (DMMA.16x8x*; m8n8k4 runs at half their rate there). Rows gid and gid + 8
   of the 16 are the lane's rows of two 8-point tiles (d0: tile 2j, d1: tile 2j + 1), and k columns
   tig + 4s are slot tig of k tile kt + s: the same fragments as m8n8k4, two tiles and KS k tiles
   per instruction (PTX ISA, mma .f64 fragments: A a_{v + 2s} at row gid + 8v, col tig + 4s; B b_s at
   row tig + 4s, col gid; C as two m8n8k4 C fragments). */
template <int KS>
__device__ __forceinline__ void rosenna_dmma16(double (&d0)[2], double (&d1)[2], const double (&a0)[KS],
                                               const double (&a1)[KS], const double (&b)[KS])
{
    if constexpr (KS == 1)
        asm("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
            : "+d"(d0[0]), "+d"(d0[1]), "+d"(d1[0]), "+d"(d1[1])
            : "d"(a0[0]), "d"(a1[0]), "d"(b[0]));
    else if constexpr (KS == 2)
        asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+d"(d0[0]), "+d"(d0[1]), "+d"(d1[0]), "+d"(d1[1])
            : "d"(a0[0]), "d"(a1[0]), "d"(a0[1]), "d"(a1[1]), "d"(b[0]), "d"(b[1]));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, {%0, %1, %2, %3};"
            : "+d"(d0[0]), "+d"(d0[1]), "+d"(d1[0]), "+d"(d1[1])
            : "d"(a0[0]), "d"(a1[0]), "d"(a0[1]), "d"(a1[1]), "d"(a0[2]), "d"(a1[2]), "d"(a0[3]), "d"(a1[3]),
              "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
}

/* One layer for the warp's M tiles of 8 points: in[M][KT] A fragments (row gid, k slot tig of k
   tile kt), out[M][2 NT] the activated C fragments, which are the next layer's A fragments as
   they stand (column 8 nt + 2 tig + h is slot tig of k tile 2 nt + h: the next layer's weight
   rows are packed in that order). F: the layer's B fragments [KT][NT][32 lanes]; bias: its bias
   padded to 8 NT. The bias starts the accumulators (fp64: the order is far below tolerance). */
/* k tiles per sm_90 instruction (1: m16n8k4, 2: m16n8k8, 4: m16n8k16, where KT allows); 0: m8n8k4
   everywhere. 4: the 4-32-32-2 Tanh MLP 0.203 -> 0.159 ns on the H200 (results/measurement-log.md, the float64 study). */
#ifndef ROSENNA_DMMA_KS
#define ROSENNA_DMMA_KS 4
#endif
template <int KT, int NT, int M, double (*ACT)(double)>
__device__ __forceinline__ void rosenna_dmma_layer(const double *ROSENNA_RESTRICT F, const double *ROSENNA_RESTRICT bias,
                                                   const double (&in)[M][KT], double (&out)[M][2 * NT], int lane)
{
    const int tig = lane % 4;
    double acc[M][NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const double b0 = bias[8 * nt + 2 * tig], b1 = bias[8 * nt + 2 * tig + 1];
#pragma unroll
        for (int mi = 0; mi < M; ++mi) {
            acc[mi][nt][0] = b0;
            acc[mi][nt][1] = b1;
        }
    }
#if __CUDA_ARCH__ >= 900
    constexpr bool pairs = M % 2 == 0 && ROSENNA_DMMA_KS > 0;
#else
    constexpr bool pairs = false;
#endif
    if constexpr (pairs) {
        /* k tiles per instruction: as many as ROSENNA_DMMA_KS (1, 2 or 4) that divide KT */
        constexpr int KS = ROSENNA_DMMA_KS >= 4 && KT % 4 == 0 ? 4 : ROSENNA_DMMA_KS >= 2 && KT % 2 == 0 ? 2 : 1;
#pragma unroll
        for (int kt = 0; kt < KT; kt += KS)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                double b[KS];
#pragma unroll
                for (int s = 0; s < KS; ++s)
                    b[s] = F[((kt + s) * NT + nt) * 32 + lane];
#pragma unroll
                for (int mi = 0; mi < M; mi += 2) {
                    double a0[KS], a1[KS];
#pragma unroll
                    for (int s = 0; s < KS; ++s) {
                        a0[s] = in[mi][kt + s];
                        a1[s] = in[mi + 1][kt + s];
                    }
                    rosenna_dmma16<KS>(acc[mi][nt], acc[mi + 1][nt], a0, a1, b);
                }
            }
    } else {
#pragma unroll
        for (int kt = 0; kt < KT; ++kt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const double b = F[(kt * NT + nt) * 32 + lane];
#pragma unroll
                for (int mi = 0; mi < M; ++mi)
                    rosenna_dmma(acc[mi][nt], in[mi][kt], b);
            }
    }
#pragma unroll
    for (int mi = 0; mi < M; ++mi)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            out[mi][2 * nt] = ACT(acc[mi][nt][0]);
            out[mi][2 * nt + 1] = ACT(acc[mi][nt][1]);
        }
}
