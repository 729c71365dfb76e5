/* FP64 tensor-core helpers (rosenna/emit/cuda/dmma.py says how the fragments are laid out): one
   DMMA m8n8k4 and one dense layer for a warp's M tiles of 8 points, all in registers. */
__device__ __forceinline__ void rosenna_dmma(double (&d)[2], double a, double b)
{
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
        : "+d"(d[0]), "+d"(d[1])
        : "d"(a), "d"(b));
}

/* One layer for the warp's M tiles of 8 points: in[M][KT] A fragments (row gid, k slot tig of k
   tile kt), out[M][2 NT] the activated C fragments, which are the next layer's A fragments as
   they stand (column 8 nt + 2 tig + h is slot tig of k tile 2 nt + h: the next layer's weight
   rows are packed in that order). F: the layer's B fragments [KT][NT][32 lanes]; bias: its bias
   padded to 8 NT. The bias starts the accumulators (fp64: the order is far below tolerance). */
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
#pragma unroll
    for (int kt = 0; kt < KT; ++kt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const double b = F[(kt * NT + nt) * 32 + lane];
#pragma unroll
            for (int mi = 0; mi < M; ++mi)
                rosenna_dmma(acc[mi][nt], in[mi][kt], b);
        }
#pragma unroll
    for (int mi = 0; mi < M; ++mi)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            out[mi][2 * nt] = ACT(acc[mi][nt][0]);
            out[mi][2 * nt + 1] = ACT(acc[mi][nt][1]);
        }
}
