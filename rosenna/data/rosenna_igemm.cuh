/* A 2-D convolution as an implicit GEMM on the tensor cores, 3xTF32 (rosenna/emit/cuda/conv_igemm.py
   says which convs take it and how the weights are packed; rosenna_tf32.cuh holds the split and
   the MMA). One warp computes a tile of WY x WX output pixels of one sample (WY * WX = 16 * MT,
   the GEMM's rows) for NT n8 tiles of its output channels (the GEMM's columns: F starts at the
   warp's first, NS n8 tiles in all per k8 tile); the GEMM's K is
   the taps x the input channels padded to CP (a multiple of 4), tap-major, so that each half of a
   k8 tile is one tap and four consecutive channels: which tap a load reads is known at compile
   time and only the channel varies across the lanes (tig).

   A (the im2col matrix) is never stored: each lane gathers its four fragment values per m16 tile
   and k8 tile from the input, at (channel c, iy, ix) = (c0 + tig, oy * SH - PH + ky * DH,
   ox * SW - PW + kx * DW). CHECK false: the tile is interior, every tap of every pixel inside the
   input (the caller knows it from the tile's position); CHECK true: a border tile, each load
   bounds-checked and a pixel past the output (a partial tile) reading zeros. B arrives split
   (F: per k8 tile and n8 tile, 32 lanes x {big b0, big b1, small b0, small b1}), so only A is
   split here, once per fragment for the warp's NT tiles. The products of S k8 tiles are summed by the
   tensor cores from zero and added to the running sum in fp32 (rosenna_tc_layer says why). */
template <int C, int CP, int H, int W, int KH, int KW, int SH, int SW, int PH, int PW, int DH, int DW,
          int OH, int OW, int KT, int NT, int NS, int MT, int WX, bool CHECK, int S, int U>
__device__ __forceinline__ void rosenna_igemm_tile(const float *__restrict__ in, int oy0, int ox0,
                                                   const float4 *__restrict__ F, float (&acc)[MT][NT][4])
{
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    const int gid = lane / 4, tig = lane % 4;
    /* The top-left input position of each of the lane's 2 MT pixels (rows gid and gid + 8 of each
       m16 tile); a pixel past the output gets a position no tap reaches. */
    int iy[MT][2], ix[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = mt * 16 + gid + 8 * h, oy = oy0 + r / WX, ox = ox0 + r % WX;
            const bool inside = !CHECK || (oy < OH && ox < OW);
            iy[mt][h] = inside ? oy * SH - PH : -(1 << 24);
            ix[mt][h] = inside ? ox * SW - PW : -(1 << 24);
        }
    const float *lane_in = in + tig * (H * W);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                acc[mt][nt][r] = 0.0f;
#pragma unroll U
    for (int k0 = 0; k0 < KT; k0 += S) {
        float t[MT][NT][4] = {};
#pragma unroll
        for (int kt = k0; kt < k0 + S && kt < KT; ++kt) {
            float a[MT][4];
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int kk = kt * 8 + 4 * half, tap = kk / CP, c0 = kk % CP;
                const int ky = tap / KW, kx = tap % KW, dy = ky * DH, dx = kx * DW;
                const bool channel = C % 4 == 0 || c0 + tig < C;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        float v = 0.0f;
                        if (tap < KH * KW) {
                            const int y = iy[mt][h] + dy, x = ix[mt][h] + dx;
                            const bool ok = !CHECK || ((unsigned)y < (unsigned)H && (unsigned)x < (unsigned)W);
                            if (ok && channel)
                                v = __ldg(lane_in + c0 * (H * W) + y * W + x);
                        }
                        a[mt][2 * half + h] = v;  /* a0 (gid, tig), a1 (gid+8, tig), a2 (gid, tig+4), a3 (gid+8, tig+4) */
                    }
            }
            unsigned big[MT][4], small[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    rosenna_tf32_split(a[mt][i], big[mt][i], small[mt][i]);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const float4 b = __ldg(F + (kt * NS + nt) * 32 + lane);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    rosenna_mma(t[mt][nt], small[mt], b.x, b.y);
                    rosenna_mma(t[mt][nt], big[mt], b.z, b.w);
                    rosenna_mma(t[mt][nt], big[mt], b.x, b.y);
                }
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    acc[mt][nt][r] += t[mt][nt][r];
    }
}

/* Where the lane's accumulator acc[mt][nt][r] belongs: output pixel (oy0 + dy, ox0 + dx) of the
   tile and output channel co (c0 (gid, 2tig), c1 (gid, 2tig+1), c2 (gid+8, 2tig), c3 (gid+8, 2tig+1)). */
template <int WX>
__device__ __forceinline__ void rosenna_igemm_where(int mt, int nt, int r, int &dy, int &dx, int &co)
{
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    const int row = mt * 16 + (int)lane / 4 + 8 * (r / 2);
    dy = row / WX;
    dx = row % WX;
    co = nt * 8 + 2 * ((int)lane % 4) + r % 2;
}
