/* One dense layer for a block of BM points whose activations sit in shared memory input-major,
   act[k][LDA]. Work items are TM-point x TN-column tiles; a thread keeps its tile's TM*TN sums in
   registers over one pass through the K inputs (TM + TN loads feed TM*TN FMAs). W is [K][NP]
   input-major, then the bias [NP]. TO_Y writes the result to y[p][N] instead of shared memory.
   INPLACE (at most one item per thread): every thread finishes reading `in` before a barrier,
   then the results overwrite it, so one buffer serves all layers. */
template <int K, int NP, int TM, int TN, int LDA>
__device__ __forceinline__ void rosenna_tile_sums(const float *ROSENNA_RESTRICT W, const float *in, int item,
                                                  float (&acc)[TM][TN])
{
    constexpr int CG = NP / TN;
    const int cg = item % CG, pg = item / CG;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
            acc[i][j] = 0.0f;
#pragma unroll 4
    for (int k = 0; k < K; ++k) {
        float a[TM], w[TN];
        if (TM % 4 == 0) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4 *>(in + k * LDA + pg * TM + i);
                a[i] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < TM; ++i)
                a[i] = in[k * LDA + pg * TM + i];
        }
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(W + k * NP + cg * TN + j));
            w[j] = v.x; w[j + 1] = v.y; w[j + 2] = v.z; w[j + 3] = v.w;
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j)
                acc[i][j] = fmaf(w[j], a[i], acc[i][j]);
    }
}

template <int K, int N, int NP, int TM, int TN, float (*ACT)(float), bool TO_Y, int LDA>
__device__ __forceinline__ void rosenna_tile_store(const float *ROSENNA_RESTRICT W, int item, const float (&acc)[TM][TN],
                                                   float *out, float *ROSENNA_RESTRICT y, long p0, int n)
{
    constexpr int CG = NP / TN;
    const int cg = item % CG, pg = item / CG;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
        const int col = cg * TN + j;
        const float bias = __ldg(W + K * NP + col);
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const float v = ACT(acc[i][j] + bias);
            if (TO_Y) {
                const long p = p0 + pg * TM + i;
                if (p < n && col < N)
                    y[p * N + col] = v;
            } else {
                out[col * LDA + pg * TM + i] = v;
            }
        }
    }
}

template <int K, int N, int NP, int TM, int TN, float (*ACT)(float), bool TO_Y, bool INPLACE, int BM, int THREADS, int LDA>
__device__ __forceinline__ void rosenna_tile(const float *ROSENNA_RESTRICT W, const float *in, float *out,
                                             float *ROSENNA_RESTRICT y, long p0, int n)
{
    constexpr int ITEMS = (BM / TM) * (NP / TN);
    float acc[TM][TN];
    if (INPLACE) {
        static_assert(!INPLACE || ITEMS <= THREADS, "in place: at most one item per thread");
        const int item = threadIdx.x;
        if (item < ITEMS)
            rosenna_tile_sums<K, NP, TM, TN, LDA>(W, in, item, acc);
        __syncthreads();
        if (item < ITEMS)
            rosenna_tile_store<K, N, NP, TM, TN, ACT, TO_Y, LDA>(W, item, acc, out, y, p0, n);
    } else {
        for (int item = threadIdx.x; item < ITEMS; item += THREADS) {
            rosenna_tile_sums<K, NP, TM, TN, LDA>(W, in, item, acc);
            rosenna_tile_store<K, N, NP, TM, TN, ACT, TO_Y, LDA>(W, item, acc, out, y, p0, n);
        }
    }
}
