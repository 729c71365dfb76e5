/* The per-point routines' device code (rosenna/emit/cuda/routine.py).

   The warp-cooperative FP32 MLP body of <name>_infer_warp: a warp
   computes 16 points per pass with no shared memory. Lane (py, cx) = (lane / 16, lane % 16) holds
   points 8py .. +8 of the pass and, of every layer, the columns cx * C .. + C (C = the layer's
   width / 16, rounded up): a layer's input column k = c * KC + j of point i is register in[i][j]
   of lane (py, c), fetched with one shuffle and used for NC multiply-adds. */
#if defined(__HIPCC__)
/* 32-lane groups: each half of a 64-wide wavefront is one "warp" of the routine. */
#define ROSENNA_SHFL(v, lane) __shfl((v), (lane), 32)
#define ROSENNA_SHFL_XOR(v, mask) __shfl_xor((v), (mask), 32)
#else
#define ROSENNA_SHFL(v, lane) __shfl_sync(0xffffffffu, (v), (lane))
#define ROSENNA_SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask))
#endif

/* Lane src's pointer (each lane of a warp routine passes its own point's x and y). */
template <typename T>
__device__ __forceinline__ T *rosenna_lane_ptr(T *p, int src)
{
    return reinterpret_cast<T *>(ROSENNA_SHFL((unsigned long long)p, src));
}

/* N consecutive floats of a 16-byte aligned row (N a multiple of 4) or any row (scalars). */
template <int N>
__device__ __forceinline__ void rosenna_warp_row(const float *ROSENNA_RESTRICT p, float (&w)[N])
{
    if (N % 4 == 0) {
#pragma unroll
        for (int j = 0; j < N; j += 4) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(p + j));
            w[j] = v.x; w[j + 1] = v.y; w[j + 2] = v.z; w[j + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < N; ++j)
            w[j] = __ldg(p + j);
    }
}

/* One hidden layer: W [16 KC][16 NC] input-major (zero rows and columns past the layer's own),
   then the bias [16 NC]. */
template <int KC, int NC, float (*ACT)(float)>
__device__ __forceinline__ void rosenna_warp_layer(const float *ROSENNA_RESTRICT W, const float (&in)[8][KC],
                                                   float (&out)[8][NC], int py, int cx)
{
    constexpr int LDW = 16 * NC;
    float acc[8][NC];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < NC; ++j)
            acc[i][j] = 0.0f;
#pragma unroll 1
    for (int c = 0; c < 16; ++c) {
#pragma unroll
        for (int j = 0; j < KC; ++j) {
            float w[NC];
            rosenna_warp_row<NC>(W + (c * KC + j) * LDW + cx * NC, w);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float a = ROSENNA_SHFL(in[i][j], py * 16 + c);
#pragma unroll
                for (int jj = 0; jj < NC; ++jj)
                    acc[i][jj] = fmaf(w[jj], a, acc[i][jj]);
            }
        }
    }
    float b[NC];
    rosenna_warp_row<NC>(W + 16 * KC * LDW + cx * NC, b);
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < NC; ++j)
            out[i][j] = ACT(acc[i][j] + b[j]);
}

/* The output layer (at most 8 outputs): W [16 KC][8], then the bias [8]. Each lane sums its own
   KC columns for its 8 points x 8 outputs, then a reduce-scatter over the 16 lanes of its half
   (xor 8, 4, 2, 1; the lane whose bit is set keeps the upper half) leaves lane cx the full sums of
   point cx / 2, outputs 4 (cx % 2) .. + 4. Returns them; *point is that point (0 .. 7). */
template <int KC, float (*ACT)(float)>
__device__ __forceinline__ float4 rosenna_warp_out(const float *ROSENNA_RESTRICT W, const float (&in)[8][KC], int cx)
{
    float p[64];
#pragma unroll
    for (int e = 0; e < 64; ++e)
        p[e] = 0.0f;
#pragma unroll
    for (int j = 0; j < KC; ++j) {
        float w[8];
        rosenna_warp_row<8>(W + (cx * KC + j) * 8, w);
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int o = 0; o < 8; ++o)
                p[i * 8 + o] = fmaf(w[o], in[i][j], p[i * 8 + o]);
    }
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        const int half = 32 >> s, bit = 8 >> s;
        const bool upper = (cx & bit) != 0;
#pragma unroll
        for (int e = 0; e < half; ++e) {
            const float send = upper ? p[e] : p[e + half];
            const float keep = upper ? p[e + half] : p[e];
            p[e] = keep + ROSENNA_SHFL_XOR(send, bit);
        }
    }
    const float4 b = __ldg(reinterpret_cast<const float4 *>(W + 16 * KC * 8 + 4 * (cx % 2)));
    return make_float4(ACT(p[0] + b.x), ACT(p[1] + b.y), ACT(p[2] + b.z), ACT(p[3] + b.w));
}

/* One-thread dense layer for layers too wide for registers in and out: the N outputs accumulate
   in registers while the K inputs are read one at a time from memory (a local array or x); W is
   [K][NP] input-major then the bias [NP], read as uniform 16-byte loads. The bias is added after
   the dot product, as in the C routine. */
template <int K, int N, int NP, float (*ACT)(float)>
__device__ __forceinline__ void rosenna_dense_kouter(const float *ROSENNA_RESTRICT W, const float *in, float *out)
{
    float acc[NP];
#pragma unroll
    for (int j = 0; j < NP; ++j)
        acc[j] = 0.0f;
#pragma unroll 4
    for (int k = 0; k < K; ++k) {
        const float a = in[k];
#pragma unroll
        for (int j = 0; j < NP; j += 4) {
            const float4 w = __ldg(reinterpret_cast<const float4 *>(W + k * NP + j));
            acc[j] = fmaf(w.x, a, acc[j]);
            acc[j + 1] = fmaf(w.y, a, acc[j + 1]);
            acc[j + 2] = fmaf(w.z, a, acc[j + 2]);
            acc[j + 3] = fmaf(w.w, a, acc[j + 3]);
        }
    }
#pragma unroll
    for (int j = 0; j < NP; j += 4) {
        const float4 b = __ldg(reinterpret_cast<const float4 *>(W + K * NP + j));
        const float v[4] = {acc[j] + b.x, acc[j + 1] + b.y, acc[j + 2] + b.z, acc[j + 3] + b.w};
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (j + e < N)
                out[j + e] = ACT(v[e]);
    }
}
