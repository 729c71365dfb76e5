// Batched per-point MLP kernels for the H200: the design study behind rosenna's <name>_kernel.cu.
//
// Layout, as the generated kernel has it: x[n][NX], y[n][NY] point-major, raw device pointers, the
// caller's stream, nothing allocated or synchronised inside a launch. Each variant is checked
// (poisoned output, every point written, a float64 reference on the host over a sample) and timed
// with CUDA events (median of repeats) over 1M and 16M points.
//
// Build:  nvcc -O3 -arch=sm_90 -Xptxas -v -o mlp_bench mlp_bench.cu             (the models)
//         nvcc -O3 -arch=sm_90 -DSWEEP_H=32 -o sweep_32 mlp_bench.cu           (constant sweep)
// Run:    ./mlp_bench [--peak] [--quick]
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
// them back into scalar loads in gemm_big (run 1: 2903 LDG for 2780 FMA, load-bound).
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
    // Output layer 128 -> 8: thread t takes point t/2 and columns (t%2)*4 .. +4, one pass per
    // T/2 points.
    const float* W3 = W + Mlp128::O3;
    for (int pp = threadIdx.x / 2; pp < BM; pp += T / 2) {
        const int c = (threadIdx.x % 2) * 4;
        float acc[4] = {0, 0, 0, 0};
#pragma unroll 8
        for (int k = 0; k < 128; k++) {
            const float a = bufA[k * LD + pp];
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
};

struct Ctx {
    std::vector<HostLayer> layers;
    std::vector<float> W;
};

static double g_peak_tflops = 0, g_copy_tbs = 0;
static FILE* g_csv = nullptr;

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
               hi * 1e6 / n, tflops, g_peak_tflops > 0 ? 100 * tflops / g_peak_tflops : 0.0, err,
               ok ? "ok" : (unwritten ? "UNWRITTEN" : "WRONG"));
        if (g_csv)
            fprintf(g_csv, "%s,%s,%s,%d,%ld,%.5f,%.5f,%.5f,%.3f,%.2e,%s\n", v.model.c_str(), v.name.c_str(),
                    v.weights.c_str(), v.weight_bytes, n, nspp, lo * 1e6 / n, hi * 1e6 / n, tflops, err,
                    ok ? "ok" : "FAIL");
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
        for (const Variant& v :
             {pt_variant<GemmBig, true, 1, false>(wb), pt_variant<GemmBig, true, 4, false>(wb),
              pt_variant<GemmBig, false, 1, false>(wb), pt_variant<GemmBig, false, 1, true>(wb),
              pt_variant<GemmBig, false, 2, true>(wb),
              Variant{"gemm_big", "point P=1 smemW", "shared", &launch_point_smem<GemmBig, 1>, 2, 1, GemmBig::FLOP, wb},
              Variant{"gemm_big", "point P=2 smemW", "shared", &launch_point_smem<GemmBig, 2>, 2, 1, GemmBig::FLOP, wb}})
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
        const int wb = Mlp128::SIZE * 4;
        const std::vector<Variant> vs = {
            {"mlp128", "tile 64pt x 8x8/thr", "device", &launch_mlp128_tile<8>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "tile 128pt x 8x8/thr", "device", &launch_mlp128_tile<16>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "tile1buf 64pt 8x8/thr", "device", &launch_mlp128_tile<8, true>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "tile1buf 128pt 8x8/thr", "device", &launch_mlp128_tile<16, true>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "col CB=8 1pt/thr smem", "device", &launch_mlp128_col<8>, 16, 8, Mlp128::FLOP, wb},
            {"mlp128", "col CB=16 1pt/thr smem", "device", &launch_mlp128_col<16>, 16, 8, Mlp128::FLOP, wb},
        };
        for (const Variant& v : vs) run_variant(v, c, sizes, reps);
    }
#endif
    if (g_csv) fclose(g_csv);
    return 0;
}
