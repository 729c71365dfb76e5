// Batched per-point MLP kernels for the H200: the design study behind rosenna's <name>_kernel.cu.
//
// Layout, as the generated kernel has it: x[n][NX], y[n][NY] point-major, raw device pointers, the
// caller's stream, nothing allocated or synchronised inside a launch. Each variant is checked
// (poisoned output, every point written, a float64 reference on the host over a sample) and timed
// with CUDA events (median of repeats) over 1M and 16M points.
//
// Build:  nvcc -O3 -arch=sm_90 -Xptxas -v -o mlp_bench mlp_bench.cu             (the models)
//         nvcc -O3 -arch=sm_90 -DSWEEP_H=32 -o sweep_32 mlp_bench.cu           (constant sweep)
// Run:    ./mlp_bench [--peak] [--quick] [--csv FILE] [--only SUBSTR[,SUBSTR...]]
//         (--only: run the variants whose "model variant" label contains one of the substrings)
//
// Weights of a dense layer are stored [K][Np] (input-major, output columns contiguous, Np = N
// rounded up to 4 so that every row starts 16-byte aligned) followed by the bias [Np].
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

enum { A_NONE, A_RELU, A_SIG, A_TANH };

__host__ __device__ constexpr int pad4(int n) { return (n + 3) / 4 * 4; }
template <int K, int N> struct LayerSize { static constexpr int value = K * pad4(N) + pad4(N); };

#ifdef FAST_ACT
template <int A> __device__ __forceinline__ float act(float v) {
    if (A == A_RELU) return fmaxf(v, 0.0f);
    if (A == A_SIG) return __frcp_rn(1.0f + __expf(-v));
    if (A == A_TANH) return tanhf(v);
    return v;
}
#else
template <int A> __device__ __forceinline__ float act(float v) {
    if (A == A_RELU) return fmaxf(v, 0.0f);
    if (A == A_SIG) return 1.0f / (1.0f + expf(-v));
    if (A == A_TANH) return tanhf(v);
    return v;
}
#endif

// One dense layer for P points held in registers (every index a compile-time constant once
// unrolled). VEC: read the weights as float4 (for __device__ weights: a quarter of the loads);
// scalar reads let nvcc put __constant__ weights straight into the FFMA as c[bank][offset].
// The bias is added after the dot product, as the generated C does.
// A 16-byte weight load that nvcc keeps 16 bytes wide: LD 0 plain dereference, 1 __ldg (global),
// 2 ld.shared.v4 (the pointer is into shared memory).
template <int LD> __device__ __forceinline__ float4 load4(const float* p) {
    if (LD == 1) return __ldg(reinterpret_cast<const float4*>(p));
    if (LD == 2) {
        float4 v;
        const unsigned a = (unsigned)__cvta_generic_to_shared(p);
        asm("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a));
        return v;
    }
    return *reinterpret_cast<const float4*>(p);
}

// LDG: VEC loads go through __ldg(float4*): written as a plain float4 dereference, nvcc split
// them back into scalar loads in gemm_big (the first kernel study: 2903 LDG for 2780 FMA, load-bound).
template <int K, int N, int A, int P, bool VEC, int LDG = 0>
__device__ __forceinline__ void dense(const float* __restrict__ W, const float (&in)[P][K],
                                      float (&out)[P][N]) {
    constexpr int NP = pad4(N);
    const float* b = W + K * NP;
    if (VEC) {
#pragma unroll
        for (int n0 = 0; n0 < N; n0 += 4) {
            float acc[P][4];
#pragma unroll
            for (int p = 0; p < P; p++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[p][j] = 0.0f;
#pragma unroll
            for (int k = 0; k < K; k++) {
                const float4 w = load4<LDG>(W + k * NP + n0);
#pragma unroll
                for (int p = 0; p < P; p++) {
                    acc[p][0] = fmaf(w.x, in[p][k], acc[p][0]);
                    acc[p][1] = fmaf(w.y, in[p][k], acc[p][1]);
                    acc[p][2] = fmaf(w.z, in[p][k], acc[p][2]);
                    acc[p][3] = fmaf(w.w, in[p][k], acc[p][3]);
                }
            }
            const float4 bb = load4<LDG>(b + n0);
            const float bj[4] = {bb.x, bb.y, bb.z, bb.w};
#pragma unroll
            for (int p = 0; p < P; p++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (n0 + j < N) out[p][n0 + j] = act<A>(acc[p][j] + bj[j]);
        }
    } else {
#pragma unroll
        for (int n = 0; n < N; n++) {
            float acc[P];
#pragma unroll
            for (int p = 0; p < P; p++) acc[p] = 0.0f;
#pragma unroll
            for (int k = 0; k < K; k++)
#pragma unroll
                for (int p = 0; p < P; p++) acc[p] = fmaf(W[k * NP + n], in[p][k], acc[p]);
#pragma unroll
            for (int p = 0; p < P; p++) out[p][n] = act<A>(acc[p] + b[n]);
        }
    }
}

// ----------------------------------------------------------------------------------------------
// The models. Each has NX, NY, SIZE (floats of weights), FLOP (multiply-adds x2 per point), a
// host reference and a register-resident forward pass for P points.

struct GemmSmall {
    static constexpr const char* name = "gemm_small";
    static constexpr int NX = 2, NY = 3;
    static constexpr int O0 = 0, O1 = O0 + LayerSize<2, 2>::value, SIZE = O1 + LayerSize<2, 3>::value;
    static constexpr double FLOP = 2.0 * (2 * 2 + 2 * 3);
    template <int P, bool VEC, int LDG = 0>
    __device__ static void forward(const float* W, const float (&x)[P][NX], float (&y)[P][NY]) {
        float h0[P][2];
        dense<2, 2, A_RELU, P, VEC, LDG>(W + O0, x, h0);
        dense<2, 3, A_RELU, P, VEC, LDG>(W + O1, h0, y);
    }
};

struct GemmBig {
    static constexpr const char* name = "gemm_big";
    static constexpr int NX = 2, NY = 1;
    static constexpr int O0 = 0, O1 = O0 + LayerSize<2, 20>::value, O2 = O1 + LayerSize<20, 30>::value,
                         O3 = O2 + LayerSize<30, 30>::value, O4 = O3 + LayerSize<30, 40>::value,
                         SIZE = O4 + LayerSize<40, 1>::value;
    static constexpr double FLOP = 2.0 * (2 * 20 + 20 * 30 + 30 * 30 + 30 * 40 + 40 * 1);
    template <int P, bool VEC, int LDG = 0>
    __device__ static void forward(const float* W, const float (&x)[P][NX], float (&y)[P][NY]) {
        float h0[P][20], h1[P][30], h2[P][30], h3[P][40];
        dense<2, 20, A_RELU, P, VEC, LDG>(W + O0, x, h0);
        dense<20, 30, A_SIG, P, VEC, LDG>(W + O1, h0, h1);
        dense<30, 30, A_RELU, P, VEC, LDG>(W + O2, h1, h2);
        dense<30, 40, A_TANH, P, VEC, LDG>(W + O3, h2, h3);
        dense<40, 1, A_SIG, P, VEC, LDG>(W + O4, h3, y);
    }
};

// 16 -> 128 -> 128 -> 128 -> 8, ReLU on the hidden layers. 145 KB of weights: over the 64 KB
// __constant__ bank, so __device__ only.
struct Mlp128 {
    static constexpr const char* name = "mlp128";
    static constexpr int NX = 16, NY = 8;
    static constexpr int O0 = 0, O1 = O0 + LayerSize<16, 128>::value, O2 = O1 + LayerSize<128, 128>::value,
                         O3 = O2 + LayerSize<128, 128>::value, SIZE = O3 + LayerSize<128, 8>::value;
    static constexpr double FLOP = 2.0 * (16 * 128 + 128 * 128 * 2 + 128 * 8);
};

// The constant-bank sweep: 4 -> H -> H -> H -> 1 with ReLU, weights 4*(2H^2+7H+2) bytes or so.
template <int H> struct Sweep {
    static constexpr const char* name = "sweep";
    static constexpr int NX = 4, NY = 1;
    static constexpr int O0 = 0, O1 = O0 + LayerSize<4, H>::value, O2 = O1 + LayerSize<H, H>::value,
                         O3 = O2 + LayerSize<H, H>::value, SIZE = O3 + LayerSize<H, 1>::value;
    static constexpr double FLOP = 2.0 * (4 * H + 2 * H * H + H);
    template <int P, bool VEC, int LDG = 0>
    __device__ static void forward(const float* W, const float (&x)[P][NX], float (&y)[P][NY]) {
        float h0[P][H], h1[P][H], h2[P][H];
        dense<4, H, A_RELU, P, VEC, LDG>(W + O0, x, h0);
        dense<H, H, A_RELU, P, VEC, LDG>(W + O1, h0, h1);
        dense<H, H, A_RELU, P, VEC, LDG>(W + O2, h1, h2);
        dense<H, 1, A_NONE, P, VEC, LDG>(W + O3, h2, y);
    }
};

// Host reference in float64, same layout.
static void host_dense(const std::vector<float>& W, int off, int K, int N, int A, const double* in, double* out) {
    const int NP = pad4(N);
    for (int n = 0; n < N; n++) {
        double acc = 0;
        for (int k = 0; k < K; k++) acc += (double)W[off + k * NP + n] * in[k];
        acc += W[off + K * NP + n];
        if (A == A_RELU) acc = acc > 0 ? acc : 0;
        if (A == A_SIG) acc = 1 / (1 + exp(-acc));
        if (A == A_TANH) acc = tanh(acc);
        out[n] = acc;
    }
}

struct HostLayer { int K, N, A; };

// ----------------------------------------------------------------------------------------------
// Weight storage. SWEEP_H builds hold only the sweep (so that its __constant__ array is alone in
// the 64 KB bank); the default build holds the three models.

#ifdef SWEEP_H
typedef Sweep<SWEEP_H> SweepM;
__constant__ float c_sweep[SweepM::SIZE];
__device__ __align__(16) float d_sweep[SweepM::SIZE];
#else
__constant__ float c_small[GemmSmall::SIZE];
__device__ __align__(16) float d_small[GemmSmall::SIZE];
__constant__ float c_big[GemmBig::SIZE];
__device__ __align__(16) float d_big[GemmBig::SIZE];
#endif

template <class M, bool CONST> struct Weights;
#ifdef SWEEP_H
template <> struct Weights<SweepM, true> { __device__ static const float* get() { return c_sweep; } };
template <> struct Weights<SweepM, false> { __device__ static const float* get() { return d_sweep; } };
#else
template <> struct Weights<GemmSmall, true> { __device__ static const float* get() { return c_small; } };
template <> struct Weights<GemmSmall, false> { __device__ static const float* get() { return d_small; } };
template <> struct Weights<GemmBig, true> { __device__ static const float* get() { return c_big; } };
template <> struct Weights<GemmBig, false> { __device__ static const float* get() { return d_big; } };
#endif

// ----------------------------------------------------------------------------------------------
// Kernel family 1: one thread, P points (strided by the block size, so every load and store of
// a point row is coalesced across the warp), all activations in registers.

constexpr int PT_THREADS = 256;

template <class M, bool CONST, int P, bool VEC>
__global__ void __launch_bounds__(PT_THREADS) k_point(int n, const float* __restrict__ x, float* __restrict__ y) {
    const float* W = Weights<M, CONST>::get();
    const long base = (long)blockIdx.x * PT_THREADS * P + threadIdx.x;
    float in[P][M::NX], out[P][M::NY];
#pragma unroll
    for (int p = 0; p < P; p++) {
        const long i = base + p * PT_THREADS;
#pragma unroll
        for (int j = 0; j < M::NX; j++) in[p][j] = i < n ? x[i * M::NX + j] : 0.0f;
    }
    M::template forward<P, VEC, (VEC && !CONST) ? 1 : 0>(W, in, out);
#pragma unroll
    for (int p = 0; p < P; p++) {
        const long i = base + p * PT_THREADS;
        if (i < n)
#pragma unroll
            for (int j = 0; j < M::NY; j++) y[i * M::NY + j] = out[p][j];
    }
}

template <class M, bool CONST, int P, bool VEC>
static void launch_point(int n, const float* x, float* y, cudaStream_t s) {
    const int per_block = PT_THREADS * P;
    k_point<M, CONST, P, VEC><<<(n + per_block - 1) / per_block, PT_THREADS, 0, s>>>(n, x, y);
}

// Kernel family 1b: weights copied once per block into shared memory (persistent grid, blocks
// loop over the points), read back as broadcast float4 (every lane the same address).
template <class M, int P>
__global__ void __launch_bounds__(PT_THREADS) k_point_smem(int n, const float* __restrict__ x, float* __restrict__ y) {
    __shared__ float4 sw4[(M::SIZE + 3) / 4];
    const float4* gw4 = reinterpret_cast<const float4*>(Weights<M, false>::get());
    for (int i = threadIdx.x; i < (M::SIZE + 3) / 4; i += PT_THREADS) sw4[i] = __ldg(gw4 + i);
    __syncthreads();
    const float* W = reinterpret_cast<const float*>(sw4);
    for (long base = (long)blockIdx.x * PT_THREADS * P + threadIdx.x; base - threadIdx.x < n;
         base += (long)gridDim.x * PT_THREADS * P) {
        float in[P][M::NX], out[P][M::NY];
#pragma unroll
        for (int p = 0; p < P; p++) {
            const long i = base + p * PT_THREADS;
#pragma unroll
            for (int j = 0; j < M::NX; j++) in[p][j] = i < n ? x[i * M::NX + j] : 0.0f;
        }
        M::template forward<P, true, 2>(W, in, out);
#pragma unroll
        for (int p = 0; p < P; p++) {
            const long i = base + p * PT_THREADS;
            if (i < n)
#pragma unroll
                for (int j = 0; j < M::NY; j++) y[i * M::NY + j] = out[p][j];
        }
    }
}

static int g_sms = 132;
template <class M, int P>
static void launch_point_smem(int n, const float* x, float* y, cudaStream_t s) {
    const int per_block = PT_THREADS * P;
    const int blocks = std::min((n + per_block - 1) / per_block, g_sms * 4);
    k_point_smem<M, P><<<blocks, PT_THREADS, 0, s>>>(n, x, y);
}

#ifndef SWEEP_H
// ----------------------------------------------------------------------------------------------
// Kernel family 2 (wide layers): a block owns BM = 8*TY points; activations live in shared
// memory input-major, act[k][BM+4]; each thread computes an 8-point x 8-column tile of a layer
// (64 FFMA per 2+2 128-bit loads). Weights come from global memory through L1 (__ldg).

template <int TY> struct Tile {
    static constexpr int THREADS = 16 * TY;  // 16 column groups of 8 = 128 columns
    static constexpr int BM = 8 * TY;        // points per block
    static constexpr int LD = BM + 4;        // row stride of an activation buffer
    static constexpr size_t SMEM = 2 * 128 * LD * sizeof(float);
};

template <int TY, int K, bool RELU, bool INPLACE = false>
__device__ __forceinline__ void tile_layer128(const float* __restrict__ W, const float* sin, float* sout) {
    constexpr int N = 128, LD = Tile<TY>::LD;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;
#pragma unroll 4
    for (int k = 0; k < K; k++) {
        const float4 a0 = *reinterpret_cast<const float4*>(sin + k * LD + ty * 8);
        const float4 a1 = *reinterpret_cast<const float4*>(sin + k * LD + ty * 8 + 4);
        const float4 w0 = __ldg(reinterpret_cast<const float4*>(W + k * N + tx * 8));
        const float4 w1 = __ldg(reinterpret_cast<const float4*>(W + k * N + tx * 8 + 4));
        const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const float w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) acc[i][j] = fmaf(w[j], a[i], acc[i][j]);
    }
    const float* b = W + K * N;
    if (INPLACE) __syncthreads();  // every thread has read sin: it may be overwritten
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float bj = __ldg(b + tx * 8 + j);
        float v[8];
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = RELU ? fmaxf(acc[i][j] + bj, 0.0f) : acc[i][j] + bj;
        float* o = sout + (tx * 8 + j) * LD + ty * 8;
        *reinterpret_cast<float4*>(o) = make_float4(v[0], v[1], v[2], v[3]);
        *reinterpret_cast<float4*>(o + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
}

// Output layer 128 -> 8 from act[k][LD]: thread t takes point t/2 and columns (t%2)*4 .. +4, one
// pass per T/2 points. 1.4% of the FLOP: left on FP32 with weights through L1.
template <int BM, int LD, int T>
__device__ __forceinline__ void mlp128_out_layer(const float* __restrict__ W3, const float* act, float* __restrict__ y,
                                                 long p0, int n) {
    for (int pp = threadIdx.x / 2; pp < BM; pp += T / 2) {
        const int c = (threadIdx.x % 2) * 4;
        float acc[4] = {0, 0, 0, 0};
#pragma unroll 8
        for (int k = 0; k < 128; k++) {
            const float a = act[k * LD + pp];
            const float4 w = __ldg(reinterpret_cast<const float4*>(W3 + k * 8 + c));
            acc[0] = fmaf(w.x, a, acc[0]);
            acc[1] = fmaf(w.y, a, acc[1]);
            acc[2] = fmaf(w.z, a, acc[2]);
            acc[3] = fmaf(w.w, a, acc[3]);
        }
        const float4 b = __ldg(reinterpret_cast<const float4*>(W3 + 128 * 8 + c));
        if (p0 + pp < n)
            *reinterpret_cast<float4*>(y + (p0 + pp) * 8 + c) =
                make_float4(acc[0] + b.x, acc[1] + b.y, acc[2] + b.z, acc[3] + b.w);
    }
}

template <int TY, bool ONEBUF = false>
__global__ void __launch_bounds__(16 * TY) k_mlp128_tile(int n, const float* __restrict__ x,
                                                         float* __restrict__ y, const float* __restrict__ W) {
    constexpr int BM = Tile<TY>::BM, LD = Tile<TY>::LD, T = Tile<TY>::THREADS;
    extern __shared__ float4 smem4[];
    float* bufA = reinterpret_cast<float*>(smem4);
    float* bufB = ONEBUF ? bufA : bufA + 128 * LD;
    const long p0 = (long)blockIdx.x * BM;
    // x[p0 .. p0+BM)[16] -> bufB[k][p], zero past n.
    for (int e = threadIdx.x; e < BM * 4; e += T) {
        const int p = e / 4, q = e % 4;
        float4 v = make_float4(0, 0, 0, 0);
        if (p0 + p < n) v = __ldg(reinterpret_cast<const float4*>(x + (p0 + p) * 16) + q);
        bufB[(q * 4 + 0) * LD + p] = v.x;
        bufB[(q * 4 + 1) * LD + p] = v.y;
        bufB[(q * 4 + 2) * LD + p] = v.z;
        bufB[(q * 4 + 3) * LD + p] = v.w;
    }
    __syncthreads();
    tile_layer128<TY, 16, true, ONEBUF>(W + Mlp128::O0, bufB, bufA);
    __syncthreads();
    tile_layer128<TY, 128, true, ONEBUF>(W + Mlp128::O1, bufA, bufB);
    __syncthreads();
    tile_layer128<TY, 128, true, ONEBUF>(W + Mlp128::O2, bufB, bufA);
    __syncthreads();
    mlp128_out_layer<BM, LD, T>(W + Mlp128::O3, bufA, y, p0, n);
}

static float* g_mlp128_w = nullptr;
template <int TY, bool ONEBUF = false> static void launch_mlp128_tile(int n, const float* x, float* y, cudaStream_t s) {
    k_mlp128_tile<TY, ONEBUF><<<(n + Tile<TY>::BM - 1) / Tile<TY>::BM, Tile<TY>::THREADS,
                               ONEBUF ? Tile<TY>::SMEM / 2 : Tile<TY>::SMEM, s>>>(n, x, y, g_mlp128_w);
}

// Kernel family 3 (mlp128, one point per thread, what a per-point routine in a user kernel
// does): activations in shared memory per thread, act[k][threads], output columns in blocks
// of CB, weights broadcast from global (every lane reads the same address).
template <int CB>
__device__ __forceinline__ void col_layer(const float* __restrict__ W, int K, int N, bool relu,
                                          const float* sin, float* sout, int stride) {
    for (int n0 = 0; n0 < N; n0 += CB) {
        float acc[CB];
#pragma unroll
        for (int j = 0; j < CB; j++) acc[j] = 0.0f;
#pragma unroll 4
        for (int k = 0; k < K; k++) {
            const float a = sin[k * stride];
#pragma unroll
            for (int j = 0; j < CB; j += 4) {
                const float4 w = __ldg(reinterpret_cast<const float4*>(W + k * N + n0 + j));
                acc[j] = fmaf(w.x, a, acc[j]);
                acc[j + 1] = fmaf(w.y, a, acc[j + 1]);
                acc[j + 2] = fmaf(w.z, a, acc[j + 2]);
                acc[j + 3] = fmaf(w.w, a, acc[j + 3]);
            }
        }
#pragma unroll
        for (int j = 0; j < CB; j++) {
            const float v = acc[j] + __ldg(W + K * N + n0 + j);
            sout[(n0 + j) * stride] = relu ? fmaxf(v, 0.0f) : v;
        }
    }
}

constexpr int COL_THREADS = 128;
template <int CB>
__global__ void __launch_bounds__(COL_THREADS) k_mlp128_col(int n, const float* __restrict__ x,
                                                            float* __restrict__ y, const float* __restrict__ W) {
    extern __shared__ float4 smem4[];
    float* bufA = reinterpret_cast<float*>(smem4) + threadIdx.x;
    float* bufB = bufA + 128 * COL_THREADS;
    const long i = (long)blockIdx.x * COL_THREADS + threadIdx.x;
    if (i >= n) return;
    for (int k = 0; k < 16; k++) bufB[k * COL_THREADS] = x[i * 16 + k];
    col_layer<CB>(W + Mlp128::O0, 16, 128, true, bufB, bufA, COL_THREADS);
    col_layer<CB>(W + Mlp128::O1, 128, 128, true, bufA, bufB, COL_THREADS);
    col_layer<CB>(W + Mlp128::O2, 128, 128, true, bufB, bufA, COL_THREADS);
    col_layer<8>(W + Mlp128::O3, 128, 8, false, bufA, bufB, COL_THREADS);
    for (int k = 0; k < 8; k++) y[i * 8 + k] = bufB[k * COL_THREADS];
}
template <int CB> static void launch_mlp128_col(int n, const float* x, float* y, cudaStream_t s) {
    k_mlp128_col<CB><<<(n + COL_THREADS - 1) / COL_THREADS, COL_THREADS, 2 * 128 * COL_THREADS * 4, s>>>(
        n, x, y, g_mlp128_w);
}

// ==============================================================================================
// The staged and tensor-core variants. Predictions, written before the run (H200: 132 SMs x 4 schedulers at ~1.98 GHz;
// FP32 FMA floor 1.11 ns/pt for mlp128 and 0.086 for gemm_big; one shared-memory wavefront
// (128 B) per clock per SM):
//
// mlp128 "stream" (SIMT, weights through shared memory by cp.async, 16-row stages, two deep):
//   per k-row a thread issues 64 FFMA + 4 LDS.128 (2 activation broadcasts, 2 weight reads that
//   are conflict-free: columns tx*4 and 64+tx*4) = 94% FFMA, and no load leaves the SM inside
//   the inner loop. Per warp and k-row: 6 wavefronts against 64 FFMA cycles on its scheduler,
//   so shared memory runs at ~40%. Left: 2 barriers per 16 rows, the epilogue stores
//   (4-way bank conflicts, once per layer), the FP32 output layer (1.4% of the FLOP).
//   64 pt/block (128 thr, 51 KB: 4 blocks = 16 warps/SM): ~1.75 ns (63% of peak).
//   128 pt/block (256 thr, 84 KB: 2 blocks = 16 warps/SM, 128-register cap): ~1.65 ns.
// mlp128 "mma 3xTF32" (mma.sync m16n8k8, A = activations split in registers, B = pre-split
//   weight fragments staged through shared memory by cp.async; warp tile 32 points x 64 columns):
//   102 MMA per point. Whether Hopper's legacy mma.sync reaches 0.5 or 1 m16n8k8 per clock per SM
//   is the unknown (wgmma's dense TF32 is ~1/clock/SM): 0.39-0.78 ns of MMA, plus per warp and k8
//   step 8 LDS + 24 split instructions + 8 LDS.128 (32 wavefronts per 48 MMA) and the barriers.
//   128 pt/block: ~0.9 ns; 64 pt/block: ~1.0 ns. 1xTF32 (not fp32-accurate, err ~1e-4 expected):
//   ~0.4 ns.
// gemm_big "colblk" (SIMT, weights in shared memory padded to 8 columns, the layer's inputs in
//   registers, outputs through a per-thread column of shared memory, `#pragma unroll 1` over
//   blocks of 8 output columns): ~2,990 FFMA (padding included), 750 weight LDS.128 (P=1) or 375
//   (P=2), ~250 activation LDS/STS, ~1,400 for 71 sigmoid/tanh: ~5,400 (P=1) / ~5,000 (P=2)
//   instructions per point, 0.16 / 0.15 ns at full issue; code ~25 KB instead of ~83 KB. If the
//   instruction cache was the limit: P=1 ~0.22, P=2 ~0.20 ns; if not, P=1 ~0.28 like the second kernel study.
// gemm_big "mma 3xTF32" (a warp runs 32 points through all five layers in registers: the C
//   fragment of one layer is the A fragment of the next once the next layer's weight rows are
//   permuted, so no shared memory between layers; widths padded to 8; weights as fragments in
//   shared memory, persistent grid): 10.5 MMA per point (0.04-0.08 ns at 1-0.5 MMA/clock/SM).
//   Per warp and 32 points ~2,600 instructions (336 MMA, 56 LDS.128, ~400 to split A, ~1,700
//   for the 71 sigmoid/tanh per point): 20 scheduler-cycles per point per SM, 0.08 ns at full
//   issue. ~0.12 ns. 1xTF32: ~0.09 ns (the activations dominate once the MMAs are cheap).

// Weight rows per cp.async stage.
constexpr int KC = 16;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
// Every group but the newest complete: the newest is the stage being prefetched.
__device__ __forceinline__ void cp_async_wait_prev() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

// mlp128's three 128-wide layers as one stream of 17 stages of KC weight rows: layer 0 (16 rows)
// is stage 0, layer 1 stages 1..8, layer 2 stages 9..16. Streaming across layer boundaries
// lets the next layer's first stage load while the current layer's last one is computed.
constexpr int MLP128_STAGES = 17;
__device__ __forceinline__ int stage_layer(int g) { return g == 0 ? 0 : (g - 1) / 8 + 1; }
__device__ __forceinline__ int stage_k0(int g) { return g == 0 ? 0 : ((g - 1) % 8) * KC; }
__device__ __forceinline__ bool stage_ends_layer(int g) { return g == 0 || g == 8 || g == 16; }
__device__ __forceinline__ int layer_offset(int l) { return l == 0 ? Mlp128::O0 : l == 1 ? Mlp128::O1 : Mlp128::O2; }
__device__ __forceinline__ int layer_k(int l) { return l == 0 ? 16 : 128; }

// Copies BYTES contiguous bytes global -> shared with T threads, 16 bytes each per step.
template <int BYTES, int T>
__device__ __forceinline__ void stage_copy(float* dst, const float* src) {
    static_assert(BYTES % (16 * T) == 0, "stage must split evenly over the threads");
#pragma unroll
    for (int i = 0; i < BYTES / (16 * T); i++) {
        const int e = (i * T + threadIdx.x) * 4;
        cp_async16(dst + e, src + e);
    }
}

// ----------------------------------------------------------------------------------------------
// Kernel family 4: mlp128 SIMT tile (as family 2, one activation buffer) with the weights staged
// through shared memory, so the inner loop issues no global load. Thread (tx, ty) owns points
// ty*8 .. +8 and columns tx*4 .. +4 and 64+tx*4 .. +4: a quarter-warp's 16-byte weight reads then
// cover 128 contiguous bytes (no bank conflict), where tx*8 .. +8 would conflict 2-way.
template <int TY> struct Stream128 {
    static constexpr int T = 16 * TY, BM = 8 * TY, LD = BM + 4;
    static constexpr int STAGE = KC * 128;  // floats
    static constexpr size_t SMEM = (128 * LD + 2 * STAGE) * sizeof(float);
};

template <int TY>
__global__ void __launch_bounds__(16 * TY, TY == 16 ? 2 : 4) k_mlp128_stream(int n, const float* __restrict__ x,
                                                                            float* __restrict__ y, const float* __restrict__ W) {
    using S = Stream128<TY>;
    constexpr int BM = S::BM, LD = S::LD, T = S::T;
    extern __shared__ float4 smem4[];
    float* act = reinterpret_cast<float*>(smem4);  // act[k][LD], k-major: points contiguous
    float* stage = act + 128 * LD;                 // two stages of [KC][128]
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const long p0 = (long)blockIdx.x * BM;

    stage_copy<S::STAGE * 4, T>(stage, W + Mlp128::O0);
    cp_async_commit();
    for (int e = threadIdx.x; e < BM * 4; e += T) {
        const int p = e / 4, q = e % 4;
        float4 v = make_float4(0, 0, 0, 0);
        if (p0 + p < n) v = __ldg(reinterpret_cast<const float4*>(x + (p0 + p) * 16) + q);
        act[(q * 4 + 0) * LD + p] = v.x;
        act[(q * 4 + 1) * LD + p] = v.y;
        act[(q * 4 + 2) * LD + p] = v.z;
        act[(q * 4 + 3) * LD + p] = v.w;
    }
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;

#pragma unroll 1
    for (int g = 0; g < MLP128_STAGES; g++) {
        if (g + 1 < MLP128_STAGES) {
            const int l = stage_layer(g + 1);
            stage_copy<S::STAGE * 4, T>(stage + ((g + 1) & 1) * S::STAGE, W + layer_offset(l) + stage_k0(g + 1) * 128);
        }
        cp_async_commit();  // possibly empty: keeps "all but the newest group" meaning stage g
        cp_async_wait_prev();
        __syncthreads();
        const float* sw = stage + (g & 1) * S::STAGE;
        const float* sa = act + stage_k0(g) * LD + ty * 8;
#pragma unroll
        for (int k = 0; k < KC; k++) {
            const float4 a0 = *reinterpret_cast<const float4*>(sa + k * LD);
            const float4 a1 = *reinterpret_cast<const float4*>(sa + k * LD + 4);
            const float4 w0 = *reinterpret_cast<const float4*>(sw + k * 128 + tx * 4);
            const float4 w1 = *reinterpret_cast<const float4*>(sw + k * 128 + 64 + tx * 4);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(w[j], a[i], acc[i][j]);
        }
        // Stage g&1 is refilled next iteration, and a finished layer overwrites act in place.
        __syncthreads();
        if (stage_ends_layer(g)) {
            const int l = stage_layer(g);
            const float* b = W + layer_offset(l) + layer_k(l) * 128;
            const float4 b0 = __ldg(reinterpret_cast<const float4*>(b + tx * 4));
            const float4 b1 = __ldg(reinterpret_cast<const float4*>(b + 64 + tx * 4));
            const float bj[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float v[8];
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    v[i] = fmaxf(acc[i][j] + bj[j], 0.0f);
                    acc[i][j] = 0.0f;
                }
                float* o = act + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4) * LD + ty * 8;
                *reinterpret_cast<float4*>(o) = make_float4(v[0], v[1], v[2], v[3]);
                *reinterpret_cast<float4*>(o + 4) = make_float4(v[4], v[5], v[6], v[7]);
            }
        }
    }
    __syncthreads();
    mlp128_out_layer<BM, LD, T>(W + Mlp128::O3, act, y, p0, n);
}

template <int TY> static void launch_mlp128_stream(int n, const float* x, float* y, cudaStream_t s) {
    using S = Stream128<TY>;
    k_mlp128_stream<TY><<<(n + S::BM - 1) / S::BM, S::T, S::SMEM, s>>>(n, x, y, g_mlp128_w);
}

// ----------------------------------------------------------------------------------------------
// Tensor cores, TF32 mma.sync.m16n8k8 (sm_80+; on Hopper the legacy path, not wgmma).
// 3xTF32: a = big + small with big = tf32(a), small = tf32(a - big); a*b ~ big*big' + big*small'
// + small*big' (small*small' is below fp32 rounding), accumulated in fp32. 1xTF32 keeps big*big'
// only: 10-bit mantissas, not fp32-accurate.
//
// Fragment layouts (PTX ISA, m16n8k8 .tf32), gid = lane/4, tig = lane%4:
//   A 16x8:  a0 (gid, tig)  a1 (gid+8, tig)  a2 (gid, tig+4)  a3 (gid+8, tig+4)
//   B 8x8:   b0 (tig, gid)  b1 (tig+4, gid)
//   C 16x8:  c0 (gid, 2tig) c1 (gid, 2tig+1) c2 (gid+8, 2tig) c3 (gid+8, 2tig+1)
// Weights are packed on the host per (k8 tile, n8 tile) as 32 lanes x float4
// {big(b0), big(b1), small(b0), small(b1)}: one conflict-free 16-byte load per lane.

__device__ __forceinline__ uint32_t tf32_rna(float f) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], float b0, float b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}

template <bool SPLIT3> struct ASplit {
    uint32_t big[4], small[4];
    __device__ __forceinline__ explicit ASplit(const float (&a)[4]) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            big[i] = tf32_rna(a[i]);
            if (SPLIT3) small[i] = tf32_rna(a[i] - __uint_as_float(big[i]));
        }
    }
};

// The small products first: they are the ones fp32 accumulation must not lose.
template <bool SPLIT3>
__device__ __forceinline__ void mma_split(float (&d)[4], const ASplit<SPLIT3>& a, const float4& b) {
    if (SPLIT3) {
        mma_tf32(d, a.small, b.x, b.y);
        mma_tf32(d, a.big, b.z, b.w);
    }
    mma_tf32(d, a.big, b.x, b.y);
}

// Host: tf32 with round-to-nearest, ties away (cvt.rna), on the bit pattern.
static float host_tf32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&f, &u, 4);
    return f;
}

// Packs one dense layer (W[off..], [K][NP] + bias) into B fragments, K padded to KP and N to
// NPAD with zeros, tiles ordered [kt][nt]. PAIRED: physical rows tig and tig+4 of k-tile kt hold
// logical rows kt*8+2tig and kt*8+2tig+1, the order in which the previous layer's C fragment
// leaves them in registers (gemm_big's register chain).
static void pack_frags(const std::vector<float>& W, int off, int K, int N, int KP, int NPAD, bool paired,
                       std::vector<float>& out) {
    const int NP = pad4(N);
    auto w = [&](int k, int c) { return k < K && c < N ? W[off + k * NP + c] : 0.0f; };
    for (int kt = 0; kt < KP / 8; kt++)
        for (int nt = 0; nt < NPAD / 8; nt++)
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane / 4, t = lane % 4, c = nt * 8 + g;
                const int k0 = paired ? kt * 8 + 2 * t : kt * 8 + t, k1 = paired ? k0 + 1 : k0 + 4;
                const float v0 = w(k0, c), v1 = w(k1, c), b0 = host_tf32(v0), b1 = host_tf32(v1);
                out.insert(out.end(), {b0, b1, host_tf32(v0 - b0), host_tf32(v1 - b1)});
            }
}

// ----------------------------------------------------------------------------------------------
// Kernel family 5: mlp128 on tensor cores. Block of BM points, BM/16 warps; warp (wm, wn) owns
// points wm*32 .. +32 and columns wn*64 .. +64 (2 x 8 MMA tiles, 64 accumulators). Activations
// act[p][LDA] in shared memory, point-major as the A fragment wants them: LDA = 132 puts the
// warp's 32 A reads (rows gid, columns tig) in 32 distinct banks. Weight fragments stream
// through two cp.async stages of 16 KB (2 k8-tiles x 16 n8-tiles), the same 17-stage schedule as
// family 4.
template <int BM> struct Mma128 {
    static constexpr int WARPS = BM / 16, T = 32 * WARPS, LDA = 132;
    static constexpr int STAGE = 2 * 16 * 32;  // float4 per stage
    static constexpr size_t SMEM = BM * LDA * sizeof(float) + 2 * STAGE * sizeof(float4);
};
// Fragment offsets (float4) of mlp128's layers in the packed array: stages 0..16, then the output
// layer (16 k-tiles x 1 n-tile).
constexpr int MLP128_F3 = MLP128_STAGES * Mma128<64>::STAGE;

template <int BM, bool SPLIT3>
__global__ void __launch_bounds__(Mma128<BM>::T, BM == 128 ? 2 : 3)
    k_mlp128_mma(int n, const float* __restrict__ x, float* __restrict__ y, const float4* __restrict__ F,
                 const float* __restrict__ W) {
    using S = Mma128<BM>;
    constexpr int LDA = S::LDA, T = S::T;
    extern __shared__ float4 smem4[];
    float* act = reinterpret_cast<float*>(smem4);
    float4* stage = smem4 + BM * LDA / 4;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    const int wm = warp / 2, wn = warp % 2;
    const long p0 = (long)blockIdx.x * BM;

    stage_copy<S::STAGE * 16, T>(reinterpret_cast<float*>(stage), reinterpret_cast<const float*>(F));
    cp_async_commit();
    for (int e = threadIdx.x; e < BM * 4; e += T) {
        const int p = e / 4, q = e % 4;
        float4 v = make_float4(0, 0, 0, 0);
        if (p0 + p < n) v = __ldg(reinterpret_cast<const float4*>(x + (p0 + p) * 16) + q);
        *reinterpret_cast<float4*>(act + p * LDA + q * 4) = v;
    }
    float acc[2][8][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 8; ni++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[mi][ni][r] = 0.0f;

#pragma unroll 1
    for (int g = 0; g < MLP128_STAGES; g++) {
        if (g + 1 < MLP128_STAGES)
            stage_copy<S::STAGE * 16, T>(reinterpret_cast<float*>(stage + ((g + 1) & 1) * S::STAGE),
                                         reinterpret_cast<const float*>(F + (g + 1) * S::STAGE));
        cp_async_commit();
        cp_async_wait_prev();
        __syncthreads();
        const float4* sb = stage + (g & 1) * S::STAGE + wn * 8 * 32 + lane;
#pragma unroll
        for (int kt = 0; kt < 2; kt++) {
            const float* sa = act + (wm * 32 + gid) * LDA + stage_k0(g) + kt * 8 + tig;
            ASplit<SPLIT3> a[2] = {ASplit<SPLIT3>({sa[0], sa[8 * LDA], sa[4], sa[8 * LDA + 4]}),
                                   ASplit<SPLIT3>({sa[16 * LDA], sa[24 * LDA], sa[16 * LDA + 4], sa[24 * LDA + 4]})};
#pragma unroll
            for (int ni = 0; ni < 8; ni++) {
                const float4 b = sb[(kt * 16 + ni) * 32];
#pragma unroll
                for (int mi = 0; mi < 2; mi++) mma_split<SPLIT3>(acc[mi][ni], a[mi], b);
            }
        }
        __syncthreads();
        if (stage_ends_layer(g)) {
            const int l = stage_layer(g);
            const float* bias = W + layer_offset(l) + layer_k(l) * 128 + wn * 64 + 2 * tig;
#pragma unroll
            for (int ni = 0; ni < 8; ni++) {
                const float2 b = __ldg(reinterpret_cast<const float2*>(bias + ni * 8));
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    float* o = act + (wm * 32 + mi * 16 + gid) * LDA + wn * 64 + ni * 8 + 2 * tig;
                    float(&c)[4] = acc[mi][ni];
                    *reinterpret_cast<float2*>(o) = make_float2(fmaxf(c[0] + b.x, 0.0f), fmaxf(c[1] + b.y, 0.0f));
                    *reinterpret_cast<float2*>(o + 8 * LDA) =
                        make_float2(fmaxf(c[2] + b.x, 0.0f), fmaxf(c[3] + b.y, 0.0f));
                    c[0] = c[1] = c[2] = c[3] = 0.0f;
                }
            }
        }
    }
    __syncthreads();
    // Output layer 128 -> 8: one 16-point MMA row tile per warp, fragments from L1/L2.
    const float* b3 = W + Mlp128::O3 + 128 * 8 + 2 * tig;
    float c[4] = {__ldg(b3), __ldg(b3 + 1), __ldg(b3), __ldg(b3 + 1)};
    const float* sa = act + (warp * 16 + gid) * LDA + tig;
#pragma unroll 4
    for (int kt = 0; kt < 16; kt++) {
        const ASplit<SPLIT3> a({sa[kt * 8], sa[kt * 8 + 8 * LDA], sa[kt * 8 + 4], sa[kt * 8 + 8 * LDA + 4]});
        mma_split<SPLIT3>(c, a, __ldg(F + MLP128_F3 + kt * 32 + lane));
    }
    const long r = p0 + warp * 16 + gid;
    if (r < n) *reinterpret_cast<float2*>(y + r * 8 + 2 * tig) = make_float2(c[0], c[1]);
    if (r + 8 < n) *reinterpret_cast<float2*>(y + (r + 8) * 8 + 2 * tig) = make_float2(c[2], c[3]);
}

static float4* g_mlp128_frag = nullptr;
template <int BM, bool SPLIT3> static void launch_mlp128_mma(int n, const float* x, float* y, cudaStream_t s) {
    k_mlp128_mma<BM, SPLIT3><<<(n + BM - 1) / BM, Mma128<BM>::T, Mma128<BM>::SMEM, s>>>(n, x, y, g_mlp128_frag,
                                                                                         g_mlp128_w);
}

static std::vector<float> pack_mlp128_frags(const std::vector<float>& W) {
    std::vector<float> f;
    pack_frags(W, Mlp128::O0, 16, 128, 16, 128, false, f);
    pack_frags(W, Mlp128::O1, 128, 128, 128, 128, false, f);
    pack_frags(W, Mlp128::O2, 128, 128, 128, 128, false, f);
    if (f.size() != (size_t)MLP128_F3 * 4) { fprintf(stderr, "mlp128 fragments misplaced\n"); exit(1); }
    pack_frags(W, Mlp128::O3, 128, 8, 128, 8, false, f);
    return f;
}

// ----------------------------------------------------------------------------------------------
// Kernel family 6: gemm_big with loops over blocks of 8 output columns (`#pragma unroll 1`), a
// few KB of code per layer instead of the fully unrolled ~83 KB: tests whether family 1b is bound
// by the instruction cache. A layer's inputs sit in registers (k unrolled); its outputs go to a
// per-thread column of shared memory, act[k][T*P] (the column block index is a run-time value,
// so they cannot stay in registers), and are read back as the next layer's inputs. Each column is
// private to its thread: no barrier. Weights in shared memory, rows padded to 8 columns with
// zeros, read as broadcast LDS.128.
__host__ __device__ constexpr int pad8(int n) { return (n + 7) / 8 * 8; }
template <int K, int N> struct CbSize { static constexpr int value = K * pad8(N) + pad8(N); };
struct BigCb {
    static constexpr int O0 = 0, O1 = O0 + CbSize<2, 20>::value, O2 = O1 + CbSize<20, 30>::value,
                         O3 = O2 + CbSize<30, 30>::value, O4 = O3 + CbSize<30, 40>::value,
                         SIZE = O4 + CbSize<40, 1>::value;
};
constexpr int CB_THREADS = 128, CB_ROWS = 40;  // widest layer output
template <int P> constexpr size_t cb_smem() { return (size_t)CB_ROWS * CB_THREADS * P * sizeof(float); }

template <int K, int N, int A, int P>
__device__ __forceinline__ void cb_layer(const float* sW, const float (&in)[P][K], float* col) {
    constexpr int NP = pad8(N), STRIDE = CB_THREADS * P;
#pragma unroll 1
    for (int n0 = 0; n0 < NP; n0 += 8) {
        const float4 b0 = load4<2>(sW + K * NP + n0), b1 = load4<2>(sW + K * NP + n0 + 4);
        float acc[P][8];
#pragma unroll
        for (int p = 0; p < P; p++) {
            acc[p][0] = b0.x; acc[p][1] = b0.y; acc[p][2] = b0.z; acc[p][3] = b0.w;
            acc[p][4] = b1.x; acc[p][5] = b1.y; acc[p][6] = b1.z; acc[p][7] = b1.w;
        }
#pragma unroll
        for (int k = 0; k < K; k++) {
            const float4 w0 = load4<2>(sW + k * NP + n0), w1 = load4<2>(sW + k * NP + n0 + 4);
            const float w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
            for (int p = 0; p < P; p++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[p][j] = fmaf(w[j], in[p][k], acc[p][j]);
        }
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int j = 0; j < 8; j++) col[(n0 + j) * STRIDE + p * CB_THREADS] = act<A>(acc[p][j]);
    }
}

template <int K, int P> __device__ __forceinline__ void cb_load(const float* col, float (&in)[P][K]) {
#pragma unroll
    for (int p = 0; p < P; p++)
#pragma unroll
        for (int k = 0; k < K; k++) in[p][k] = col[k * CB_THREADS * P + p * CB_THREADS];
}

// P=1: 5 blocks (20 warps) per SM caps it at 96 registers; ptxas then keeps 5 loop-invariant
// values in local memory (20 B), reloaded once per point. Uncapped it takes 128 and still spills.
template <int P>
__global__ void __launch_bounds__(CB_THREADS, P == 1 ? 5 : 3) k_big_colblk(int n, const float* __restrict__ x, float* __restrict__ y,
                                                         const float* __restrict__ Wcb) {
    __shared__ float4 sw4[BigCb::SIZE / 4];
    extern __shared__ float cols[];  // [CB_ROWS][CB_THREADS * P]
    for (int i = threadIdx.x; i < BigCb::SIZE / 4; i += CB_THREADS) sw4[i] = __ldg(reinterpret_cast<const float4*>(Wcb) + i);
    __syncthreads();
    const float* W = reinterpret_cast<const float*>(sw4);
    float* col = cols + threadIdx.x;
    for (long base = (long)blockIdx.x * CB_THREADS * P + threadIdx.x; base - threadIdx.x < n;
         base += (long)gridDim.x * CB_THREADS * P) {
        float in0[P][2], in1[P][20], in2[P][30], in3[P][30], in4[P][40];
#pragma unroll
        for (int p = 0; p < P; p++) {
            const long i = base + p * CB_THREADS;
            in0[p][0] = i < n ? x[i * 2] : 0.0f;
            in0[p][1] = i < n ? x[i * 2 + 1] : 0.0f;
        }
        cb_layer<2, 20, A_RELU, P>(W + BigCb::O0, in0, col);
        cb_load<20, P>(col, in1);
        cb_layer<20, 30, A_SIG, P>(W + BigCb::O1, in1, col);
        cb_load<30, P>(col, in2);
        cb_layer<30, 30, A_RELU, P>(W + BigCb::O2, in2, col);
        cb_load<30, P>(col, in3);
        cb_layer<30, 40, A_TANH, P>(W + BigCb::O3, in3, col);
        cb_load<40, P>(col, in4);
        // Output layer 40 -> 1: column 0 of rows padded to 8.
#pragma unroll
        for (int p = 0; p < P; p++) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < 40; k++) acc = fmaf(W[BigCb::O4 + k * 8], in4[p][k], acc);
            const long i = base + p * CB_THREADS;
            if (i < n) y[i] = act<A_SIG>(acc + W[BigCb::O4 + 40 * 8]);
        }
    }
}

// Persistent grids: as many blocks as are resident at once.
template <class KernelT> static int resident_blocks(KernelT kernel, int threads, size_t smem) {
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    return std::max(per_sm, 1) * g_sms;
}

static float* g_big_cb = nullptr;
template <int P> static void launch_big_colblk(int n, const float* x, float* y, cudaStream_t s) {
    static const int resident = resident_blocks(k_big_colblk<P>, CB_THREADS, cb_smem<P>());
    const int per_block = CB_THREADS * P;
    k_big_colblk<P><<<std::min((n + per_block - 1) / per_block, resident), CB_THREADS, cb_smem<P>(), s>>>(n, x, y,
                                                                                                       g_big_cb);
}

static std::vector<float> pack_big_cb(const std::vector<float>& W) {
    std::vector<float> out;
    const int K[5] = {2, 20, 30, 30, 40}, N[5] = {20, 30, 30, 40, 1};
    int off = 0;
    for (int l = 0; l < 5; l++) {
        const int NP = pad4(N[l]), N8 = pad8(N[l]);
        for (int k = 0; k <= K[l]; k++)  // row K is the bias
            for (int c = 0; c < N8; c++) out.push_back(c < N[l] ? W[off + k * NP + c] : 0.0f);
        off += K[l] * NP + NP;
    }
    if (out.size() != (size_t)BigCb::SIZE) { fprintf(stderr, "gemm_big colblk layout\n"); exit(1); }
    return out;
}

// ----------------------------------------------------------------------------------------------
// Kernel family 7: gemm_big on tensor cores, a warp runs 32 points (two 16-row MMA tiles) through
// all five layers in registers. Layer l's C fragment, activated, is layer l+1's A fragment once
// l+1's weight rows are paired (pack_frags PAIRED): c0, c2, c1, c3 -> a0, a1, a2, a3. Widths padded
// to 8 with zero weights, so the padding columns (sigmoid(0) = 0.5 after layer 1) add nothing.
// Weight fragments (28 KB) and biases in shared memory once per block, persistent grid.
constexpr int BIG_KT[5] = {1, 3, 4, 4, 5}, BIG_NT[5] = {3, 4, 4, 5, 1};  // k8 and n8 tiles per layer
// float4 offset of layer l's fragments; after the last layer's, the padded biases (136 floats).
__host__ __device__ constexpr int big_frag_off(int l) {
    return l == 0 ? 0 : big_frag_off(l - 1) + 32 * BIG_KT[l - 1] * BIG_NT[l - 1];
}
__host__ __device__ constexpr int big_bias_off(int l) { return l == 0 ? 0 : big_bias_off(l - 1) + 8 * BIG_NT[l - 1]; }
constexpr int BIG_MMA_SIZE = big_frag_off(5) + big_bias_off(5) / 4;  // float4
constexpr int BIG_MMA_THREADS = 128;

template <int KT, int NT, int A, bool SPLIT3>
__device__ __forceinline__ void tc_layer(const float4* F, const float* bias, const float (&in)[2][KT][4],
                                         float (&out)[2][NT][4]) {
    const int lane = threadIdx.x % 32, tig = lane % 4;
    float acc[2][NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const float2 b = *reinterpret_cast<const float2*>(bias + nt * 8 + 2 * tig);
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            acc[mi][nt][0] = acc[mi][nt][2] = b.x;
            acc[mi][nt][1] = acc[mi][nt][3] = b.y;
        }
    }
#pragma unroll
    for (int kt = 0; kt < KT; kt++) {
        const ASplit<SPLIT3> a[2] = {ASplit<SPLIT3>(in[0][kt]), ASplit<SPLIT3>(in[1][kt])};
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const float4 b = F[(kt * NT + nt) * 32 + lane];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) mma_split<SPLIT3>(acc[mi][nt], a[mi], b);
        }
    }
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            out[mi][nt][0] = act<A>(acc[mi][nt][0]);
            out[mi][nt][1] = act<A>(acc[mi][nt][2]);
            out[mi][nt][2] = act<A>(acc[mi][nt][1]);
            out[mi][nt][3] = act<A>(acc[mi][nt][3]);
        }
}

template <bool SPLIT3>
__global__ void __launch_bounds__(BIG_MMA_THREADS) k_big_mma(int n, const float* __restrict__ x, float* __restrict__ y,
                                                             const float4* __restrict__ G) {
    __shared__ float4 s[BIG_MMA_SIZE];
    for (int i = threadIdx.x; i < BIG_MMA_SIZE; i += BIG_MMA_THREADS) s[i] = __ldg(G + i);
    __syncthreads();
    const float* bias = reinterpret_cast<const float*>(s + big_frag_off(5));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    constexpr int WARPS = BIG_MMA_THREADS / 32;
    for (long base = ((long)blockIdx.x * WARPS + warp) * 32; base < n; base += (long)gridDim.x * WARPS * 32) {
        // Layer 0's A: x in columns 0..1 of the k-tile, zeros elsewhere.
        float in0[2][1][4];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            const long r = base + mi * 16 + gid;
            in0[mi][0][0] = tig < 2 && r < n ? x[r * 2 + tig] : 0.0f;
            in0[mi][0][1] = tig < 2 && r + 8 < n ? x[(r + 8) * 2 + tig] : 0.0f;
            in0[mi][0][2] = in0[mi][0][3] = 0.0f;
        }
        float h0[2][3][4], h1[2][4][4], h2[2][4][4], h3[2][5][4], o[2][1][4];
        tc_layer<1, 3, A_RELU, SPLIT3>(s + big_frag_off(0), bias + big_bias_off(0), in0, h0);
        tc_layer<3, 4, A_SIG, SPLIT3>(s + big_frag_off(1), bias + big_bias_off(1), h0, h1);
        tc_layer<4, 4, A_RELU, SPLIT3>(s + big_frag_off(2), bias + big_bias_off(2), h1, h2);
        tc_layer<4, 5, A_TANH, SPLIT3>(s + big_frag_off(3), bias + big_bias_off(3), h2, h3);
        tc_layer<5, 1, A_NONE, SPLIT3>(s + big_frag_off(4), bias + big_bias_off(4), h3, o);
        // Column 0 of the output tile: c0 and c2 (now o[..][0], o[..][1]) of the lanes with tig 0.
        if (tig == 0)
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const long r = base + mi * 16 + gid;
                if (r < n) y[r] = act<A_SIG>(o[mi][0][0]);
                if (r + 8 < n) y[r + 8] = act<A_SIG>(o[mi][0][1]);
            }
    }
}

static float4* g_big_frag = nullptr;
template <bool SPLIT3> static void launch_big_mma(int n, const float* x, float* y, cudaStream_t s) {
    static const int resident = resident_blocks(k_big_mma<SPLIT3>, BIG_MMA_THREADS, 0);
    const int per_block = BIG_MMA_THREADS;  // 32 points per warp
    k_big_mma<SPLIT3><<<std::min((n + per_block - 1) / per_block, resident), BIG_MMA_THREADS, 0, s>>>(n, x, y,
                                                                                                      g_big_frag);
}

static std::vector<float> pack_big_frags(const std::vector<float>& W) {
    const int K[5] = {2, 20, 30, 30, 40}, N[5] = {20, 30, 30, 40, 1};
    std::vector<float> f, bias;
    int off = 0;
    for (int l = 0; l < 5; l++) {
        const int NP = pad4(N[l]);
        pack_frags(W, off, K[l], N[l], BIG_KT[l] * 8, BIG_NT[l] * 8, l > 0, f);
        for (int c = 0; c < BIG_NT[l] * 8; c++) bias.push_back(c < N[l] ? W[off + K[l] * NP + c] : 0.0f);
        off += K[l] * NP + NP;
    }
    if (f.size() != (size_t)big_frag_off(5) * 4 || bias.size() != (size_t)big_bias_off(5)) {
        fprintf(stderr, "gemm_big fragment layout\n");
        exit(1);
    }
    f.insert(f.end(), bias.begin(), bias.end());
    return f;
}
#endif

// ----------------------------------------------------------------------------------------------
// Harness.

static uint64_t lcg_state = 0x9E3779B97F4A7C15ull;
static float urand() {  // uniform in [-1, 1)
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((lcg_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static std::vector<float> make_weights(const std::vector<HostLayer>& layers, int size) {
    std::vector<float> W(size, 0.0f);
    int off = 0;
    for (const HostLayer& L : layers) {
        const int NP = pad4(L.N);
        const float scale = 1.0f / sqrtf((float)L.K);  // torch.nn.Linear's default range
        for (int k = 0; k < L.K; k++)
            for (int n = 0; n < L.N; n++) W[off + k * NP + n] = scale * urand();
        for (int n = 0; n < L.N; n++) W[off + L.K * NP + n] = scale * urand();
        off += L.K * NP + NP;
    }
    if (off != size) { fprintf(stderr, "layer sizes %d != %d\n", off, size); exit(1); }
    return W;
}

__global__ void fill_inputs(long count, float* x, uint32_t seed) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < count; i += (long)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
        x[i] = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
}

typedef void (*Launcher)(int, const float*, float*, cudaStream_t);

struct Variant {
    std::string model, name, weights;
    Launcher launch;
    int nx, ny;
    double flop;
    int weight_bytes;
    // false: a reduced-precision reference (1xTF32): its error is printed, and it is not a pass.
    bool fp32 = true;
};

struct Ctx {
    std::vector<HostLayer> layers;
    std::vector<float> W;
};

static double g_peak_tflops = 0, g_copy_tbs = 0;
static FILE* g_csv = nullptr;
// --only: substrings of "model variant"; a variant runs when any of them occurs in its label.
static std::vector<std::string> g_only;
static bool selected(const Variant& v) {
    const std::string label = v.model + " " + v.name;
    if (g_only.empty()) return true;
    for (const std::string& sub : g_only)
        if (label.find(sub) != std::string::npos) return true;
    return false;
}

static double ref_error(const Ctx& c, int nx, int ny, const std::vector<float>& xs, const std::vector<float>& ys,
                        int count) {
    double num = 0, den = 0;
    std::vector<double> a(256), b(256);
    for (int p = 0; p < count; p++) {
        for (int j = 0; j < nx; j++) a[j] = xs[p * nx + j];
        int off = 0;
        for (const HostLayer& L : c.layers) {
            host_dense(c.W, off, L.K, L.N, L.A, a.data(), b.data());
            std::swap(a, b);
            off += L.K * pad4(L.N) + pad4(L.N);
        }
        for (int j = 0; j < ny; j++) {
            const double d = ys[p * ny + j] - a[j];
            num += d * d;
            den += a[j] * a[j];
        }
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static void run_variant(const Variant& v, const Ctx& ctx, const std::vector<long>& sizes, int reps) {
    if (!selected(v)) return;
    const long nmax = *std::max_element(sizes.begin(), sizes.end());
    float *x, *y;
    CK(cudaMalloc(&x, nmax * v.nx * sizeof(float)));
    CK(cudaMalloc(&y, nmax * v.ny * sizeof(float)));
    fill_inputs<<<1024, 256>>>(nmax * v.nx, x, 12345u);
    CK(cudaGetLastError());
    // Correctness at an odd size: poison y, run, check every output written and a sample
    // (first 2048 and last 2048 points) against float64.
    const int ncheck = 1000003;
    CK(cudaMemset(y, 0xFF, (size_t)ncheck * v.ny * sizeof(float)));
    v.launch(ncheck, x, y, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> yall((size_t)ncheck * v.ny);
    CK(cudaMemcpy(yall.data(), y, yall.size() * sizeof(float), cudaMemcpyDeviceToHost));
    long unwritten = 0;
    for (float f : yall) unwritten += std::isnan(f) ? 1 : 0;
    const int s = 2048;
    std::vector<float> xs(2 * s * v.nx), ys(2 * s * v.ny);
    CK(cudaMemcpy(xs.data(), x, s * v.nx * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(xs.data() + s * v.nx, x + (long)(ncheck - s) * v.nx, s * v.nx * sizeof(float),
                  cudaMemcpyDeviceToHost));
    memcpy(ys.data(), yall.data(), s * v.ny * sizeof(float));
    memcpy(ys.data() + s * v.ny, yall.data() + (size_t)(ncheck - s) * v.ny, s * v.ny * sizeof(float));
    const double err = ref_error(ctx, v.nx, v.ny, xs, ys, 2 * s);
    const bool ok = unwritten == 0 && err < 1e-5;
    const char* status = ok ? "ok" : unwritten ? "UNWRITTEN" : v.fp32 ? "WRONG" : "NOT-FP32";

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (long n : sizes) {
        for (int w = 0; w < 3; w++) v.launch((int)n, x, y, 0);
        CK(cudaGetLastError());
        std::vector<float> ms;
        for (int r = 0; r < reps; r++) {
            CK(cudaEventRecord(e0));
            v.launch((int)n, x, y, 0);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float t;
            CK(cudaEventElapsedTime(&t, e0, e1));
            ms.push_back(t);
        }
        CK(cudaGetLastError());
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2], lo = ms.front(), hi = ms.back();
        const double nspp = med * 1e6 / n;
        const double tflops = v.flop * n / (med * 1e-3) / 1e12;
        printf("%-10s %-26s %-9s %6dB %9ld  %8.4f ns/pt  [%7.4f..%7.4f]  %6.2f TFLOP/s (%4.1f%% of peak)  err %.1e  %s\n",
               v.model.c_str(), v.name.c_str(), v.weights.c_str(), v.weight_bytes, n, nspp, lo * 1e6 / n,
               hi * 1e6 / n, tflops, g_peak_tflops > 0 ? 100 * tflops / g_peak_tflops : 0.0, err, status);
        if (g_csv)
            fprintf(g_csv, "%s,%s,%s,%d,%ld,%.5f,%.5f,%.5f,%.3f,%.2e,%s\n", v.model.c_str(), v.name.c_str(),
                    v.weights.c_str(), v.weight_bytes, n, nspp, lo * 1e6 / n, hi * 1e6 / n, tflops, err,
                    ok ? "ok" : unwritten || v.fp32 ? "FAIL" : "not-fp32");
        fflush(stdout);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(x));
    CK(cudaFree(y));
}

// Ceilings: FP32 FMA rate (independent chains in registers) and device-to-device copy.
__global__ void fma_peak(float* out, float seed, int iters) {
    float a[8];
#pragma unroll
    for (int i = 0; i < 8; i++) a[i] = seed + threadIdx.x + i;
    const float m = 0.999999f, c = 1e-7f;
    for (int it = 0; it < iters; it++)
#pragma unroll
        for (int r = 0; r < 16; r++)
#pragma unroll
            for (int i = 0; i < 8; i++) a[i] = fmaf(a[i], m, c);
    float s = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) s += a[i];
    if (s == 12345.678f) out[0] = s;
}

static void measure_peaks() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    float* out;
    CK(cudaMalloc(&out, 4));
    const int blocks = prop.multiProcessorCount * 8, threads = 256, iters = 4096;
    fma_peak<<<blocks, threads>>>(out, 1.0f, 16);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int r = 0; r < 7; r++) {
        CK(cudaEventRecord(e0));
        fma_peak<<<blocks, threads>>>(out, 1.0f, iters);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    g_peak_tflops = 2.0 * blocks * threads * (double)iters * 16 * 8 / (ms[3] * 1e-3) / 1e12;
    const size_t bytes = 2ull << 30;
    char *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 1, bytes));
    ms.clear();
    for (int r = 0; r < 7; r++) {
        CK(cudaEventRecord(e0));
        CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    g_copy_tbs = 2.0 * bytes / (ms[3] * 1e-3) / 1e12;
    printf("device %s, %d SMs, L2 %d MB, smem/SM %zu KB; measured FP32 FMA peak %.2f TFLOP/s, D2D copy %.2f TB/s (read+write)\n",
           prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, prop.sharedMemPerMultiprocessor >> 10,
           g_peak_tflops, g_copy_tbs);
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(out));
}

template <class M, bool CONST, int P, bool VEC>
static Variant pt_variant(int wbytes) {
    char nm[64];
    snprintf(nm, sizeof nm, "point P=%d%s", P, VEC ? " vec4" : "");
    return Variant{M::name, nm, CONST ? "constant" : "device", &launch_point<M, CONST, P, VEC>, M::NX, M::NY,
                   M::FLOP, wbytes};
}

int main(int argc, char** argv) {
    bool peak = false, quick = false;
    const char* csv = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--peak")) peak = true;
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            for (std::string list = argv[++i]; !list.empty();) {
                const size_t comma = list.find(',');
                if (comma) g_only.push_back(list.substr(0, comma));
                list = comma == std::string::npos ? "" : list.substr(comma + 1);
            }
        }
        else if (!strcmp(argv[i], "--probe")) {  // does this binary start on this machine?
            int count = 0;
            CK(cudaGetDeviceCount(&count));
            return count > 0 ? 0 : 1;
        }
    }
    if (csv) g_csv = fopen(csv, "a");
    if (peak) measure_peaks();
    {
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, 0));
        g_sms = prop.multiProcessorCount;
    }
    const std::vector<long> sizes = quick ? std::vector<long>{1L << 20} : std::vector<long>{1L << 20, 1L << 24};
    const int reps = 21;
#ifdef SWEEP_H
    {
        Ctx c;
        c.layers = {{4, SWEEP_H, A_RELU}, {SWEEP_H, SWEEP_H, A_RELU}, {SWEEP_H, SWEEP_H, A_RELU}, {SWEEP_H, 1, A_NONE}};
        c.W = make_weights(c.layers, SweepM::SIZE);
        CK(cudaMemcpyToSymbol(c_sweep, c.W.data(), SweepM::SIZE * 4));
        CK(cudaMemcpyToSymbol(d_sweep, c.W.data(), SweepM::SIZE * 4));
        const int wb = SweepM::SIZE * 4;
        char model[32];
        snprintf(model, sizeof model, "sweep_H%d", SWEEP_H);
        std::vector<Variant> vs = {pt_variant<SweepM, true, 1, false>(wb), pt_variant<SweepM, false, 1, true>(wb),
                                   pt_variant<SweepM, true, 2, false>(wb), pt_variant<SweepM, false, 2, true>(wb)};
        for (Variant& v : vs) { v.model = model; run_variant(v, c, sizes, reps); }
    }
#else
    {
        Ctx c;
        c.layers = {{2, 2, A_RELU}, {2, 3, A_RELU}};
        c.W = make_weights(c.layers, GemmSmall::SIZE);
        CK(cudaMemcpyToSymbol(c_small, c.W.data(), GemmSmall::SIZE * 4));
        CK(cudaMemcpyToSymbol(d_small, c.W.data(), GemmSmall::SIZE * 4));
        const int wb = GemmSmall::SIZE * 4;
        for (const Variant& v : {pt_variant<GemmSmall, true, 1, false>(wb), pt_variant<GemmSmall, false, 1, false>(wb),
                                 pt_variant<GemmSmall, true, 2, false>(wb), pt_variant<GemmSmall, true, 4, false>(wb)})
            run_variant(v, c, sizes, reps);
    }
    {
        Ctx c;
        c.layers = {{2, 20, A_RELU}, {20, 30, A_SIG}, {30, 30, A_RELU}, {30, 40, A_TANH}, {40, 1, A_SIG}};
        c.W = make_weights(c.layers, GemmBig::SIZE);
        CK(cudaMemcpyToSymbol(c_big, c.W.data(), GemmBig::SIZE * 4));
        CK(cudaMemcpyToSymbol(d_big, c.W.data(), GemmBig::SIZE * 4));
        const int wb = GemmBig::SIZE * 4;
        const std::vector<float> cb = pack_big_cb(c.W), frag = pack_big_frags(c.W);
        CK(cudaMalloc(&g_big_cb, cb.size() * 4));
        CK(cudaMemcpy(g_big_cb, cb.data(), cb.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&g_big_frag, frag.size() * 4));
        CK(cudaMemcpy(g_big_frag, frag.data(), frag.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaFuncSetAttribute(k_big_colblk<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cb_smem<1>()));
        CK(cudaFuncSetAttribute(k_big_colblk<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cb_smem<2>()));
        for (const Variant& v :
             {pt_variant<GemmBig, true, 1, false>(wb), pt_variant<GemmBig, true, 4, false>(wb),
              pt_variant<GemmBig, false, 1, false>(wb), pt_variant<GemmBig, false, 1, true>(wb),
              pt_variant<GemmBig, false, 2, true>(wb),
              Variant{"gemm_big", "point P=1 smemW", "shared", &launch_point_smem<GemmBig, 1>, 2, 1, GemmBig::FLOP, wb},
              Variant{"gemm_big", "point P=2 smemW", "shared", &launch_point_smem<GemmBig, 2>, 2, 1, GemmBig::FLOP, wb},
              Variant{"gemm_big", "colblk CB=8 P=1 smemW", "shared", &launch_big_colblk<1>, 2, 1, GemmBig::FLOP, wb},
              Variant{"gemm_big", "colblk CB=8 P=2 smemW", "shared", &launch_big_colblk<2>, 2, 1, GemmBig::FLOP, wb},
              Variant{"gemm_big", "mma 3xTF32 32pt/warp", "shared", &launch_big_mma<true>, 2, 1, GemmBig::FLOP, wb},
              Variant{"gemm_big", "mma 1xTF32 32pt/warp NOT-FP32", "shared", &launch_big_mma<false>, 2, 1, GemmBig::FLOP,
                      wb, false}})
            run_variant(v, c, sizes, reps);
    }
    {
        Ctx c;
        c.layers = {{16, 128, A_RELU}, {128, 128, A_RELU}, {128, 128, A_RELU}, {128, 8, A_NONE}};
        c.W = make_weights(c.layers, Mlp128::SIZE);
        CK(cudaMalloc(&g_mlp128_w, Mlp128::SIZE * 4));
        CK(cudaMemcpy(g_mlp128_w, c.W.data(), Mlp128::SIZE * 4, cudaMemcpyHostToDevice));
        CK(cudaFuncSetAttribute(k_mlp128_tile<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Tile<8>::SMEM));
        CK(cudaFuncSetAttribute(k_mlp128_tile<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Tile<16>::SMEM));
        CK(cudaFuncSetAttribute(k_mlp128_tile<8, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Tile<8>::SMEM / 2));
        CK(cudaFuncSetAttribute(k_mlp128_tile<16, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Tile<16>::SMEM / 2));
        CK(cudaFuncSetAttribute(k_mlp128_col<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * 128 * COL_THREADS * 4));
        CK(cudaFuncSetAttribute(k_mlp128_col<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * 128 * COL_THREADS * 4));
        const std::vector<float> frag = pack_mlp128_frags(c.W);
        CK(cudaMalloc(&g_mlp128_frag, frag.size() * 4));
        CK(cudaMemcpy(g_mlp128_frag, frag.data(), frag.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaFuncSetAttribute(k_mlp128_stream<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Stream128<8>::SMEM));
        CK(cudaFuncSetAttribute(k_mlp128_stream<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Stream128<16>::SMEM));
        CK(cudaFuncSetAttribute(k_mlp128_mma<64, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Mma128<64>::SMEM));
        CK(cudaFuncSetAttribute(k_mlp128_mma<128, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Mma128<128>::SMEM));
        CK(cudaFuncSetAttribute(k_mlp128_mma<128, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Mma128<128>::SMEM));
        const int wb = Mlp128::SIZE * 4;
        const std::vector<Variant> vs = {
            {"mlp128", "tile 64pt x 8x8/thr", "device", &launch_mlp128_tile<8>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "tile 128pt x 8x8/thr", "device", &launch_mlp128_tile<16>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "tile1buf 64pt 8x8/thr", "device", &launch_mlp128_tile<8, true>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "tile1buf 128pt 8x8/thr", "device", &launch_mlp128_tile<16, true>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "col CB=8 1pt/thr smem", "device", &launch_mlp128_col<8>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "col CB=16 1pt/thr smem", "device", &launch_mlp128_col<16>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "stream 64pt 8x8 cp.async", "staged", &launch_mlp128_stream<8>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "stream 128pt 8x8 cp.async", "staged", &launch_mlp128_stream<16>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "mma 3xTF32 64pt", "staged", &launch_mlp128_mma<64, true>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "mma 3xTF32 128pt", "staged", &launch_mlp128_mma<128, true>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "mma 1xTF32 128pt NOT-FP32", "staged", &launch_mlp128_mma<128, false>, 16, 8, Mlp128::FLOP, wb,
             false},
        };
        for (const Variant& v : vs) run_variant(v, c, sizes, reps);
    }
#endif
    if (g_csv) fclose(g_csv);
    return 0;
}
