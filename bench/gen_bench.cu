// Times a generated model's <name>_infer_batch (the native kernel), the same model's <name>_infer
// called one point per thread from a user kernel, and its <name>_infer_warp called by every lane,
// on identical inputs; checks the three agree (verify's tolerance for the model's type: rtol 1e-5,
// atol 1e-6 for float; 1e-9, 1e-12 for double) and every output is written. The gate compares
// with onnxruntime.
//   nvcc -O3 -arch=sm_90 -rdc=true -DNAME=gemm_big -DHDR='"gemm_big.h"' [-DREAL=double] -I<dir> gen_bench.cu <dir>/libgemm_big.a
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <vector>

#include HDR

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#ifndef REAL
#define REAL float
#endif
#define INFER CAT(NAME, _infer)
#define INFER_WARP CAT(NAME, _infer_warp)
#define BATCH CAT(NAME, _infer_batch)
#define STR2(x) #x
#define STR(x) STR2(x)

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));            \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

__global__ void user_kernel(int n, int nx, int ny, const REAL *x, REAL *y) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) INFER(x + i * nx, y + i * ny);
}

/* Every lane calls <name>_infer_warp (its contract); lanes past the end repeat the last point. */
__global__ void warp_kernel(int n, int nx, int ny, const REAL *x, REAL *y) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x, p = i < n ? i : n - 1;
    INFER_WARP(x + p * nx, y + p * ny);
}

__global__ void fill(long count, REAL *x) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < count; i += (long)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ 777u;
        h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
        x[i] = (REAL)((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

template <class F> static float median_ms(F f, int reps) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 3; i++) f();
    std::vector<float> t;
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(a);
        f();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

/* Elementwise, verify's tolerance, and normwise: the relative L2 difference, which is what
   separates an FP32 kernel (~1e-7) from a 3xTF32 one (~1e-6). */
static long compare(const char *what, const std::vector<REAL> &a, const std::vector<REAL> &b) {
    const double rtol = sizeof(REAL) == 8 ? 1e-9 : 1e-5, atol = sizeof(REAL) == 8 ? 1e-12 : 1e-6;
    long bad = 0;
    double worst = 0, diff2 = 0, norm2 = 0;
    for (size_t i = 0; i < a.size(); i++) {
        const double d = fabs((double)a[i] - b[i]), tol = atol + rtol * fabs((double)b[i]);
        if (!(d <= tol)) bad++;
        worst = std::max(worst, d);
        diff2 += d * d;
        norm2 += (double)b[i] * b[i];
    }
    printf("%-10s batch vs %s: %ld of %zu outside rtol %g atol %g (worst abs %.2e, relative L2 %.2e) %s\n",
           STR(NAME), what, bad, a.size(), rtol, atol, worst, sqrt(diff2 / (norm2 > 0 ? norm2 : 1)), bad ? "FAIL" : "ok");
    return bad;
}

int main(int argc, char **argv) {
    const int nx = CAT(NAME, _NX_M), ny = CAT(NAME, _NY_M);
    const long sizes[2] = {1L << 20, 1L << 24};
    REAL *x, *y1, *y2, *y3;
    CK(cudaMalloc(&x, sizes[1] * nx * sizeof(REAL)));
    CK(cudaMalloc(&y1, sizes[1] * ny * sizeof(REAL)));
    CK(cudaMalloc(&y2, sizes[1] * ny * sizeof(REAL)));
    CK(cudaMalloc(&y3, sizes[1] * ny * sizeof(REAL)));
#ifdef RWT
    if (CAT(NAME, _init)(RWT) != 0) { fprintf(stderr, "init failed\n"); return 1; }
#endif
    fill<<<1024, 256>>>(sizes[1] * nx, x);
    const int ncheck = 1000003;
    const size_t bytes = (size_t)ncheck * ny * sizeof(REAL);
    CK(cudaMemset(y1, 0xFF, bytes));
    CK(cudaMemset(y2, 0xFF, bytes));
    CK(cudaMemset(y3, 0xFF, bytes));
    if (BATCH(ncheck, x, y1, 0) != 0) { fprintf(stderr, "infer_batch failed\n"); return 1; }
    user_kernel<<<(ncheck + 255) / 256, 256>>>(ncheck, nx, ny, x, y2);
    warp_kernel<<<(ncheck + 255) / 256, 256>>>(ncheck, nx, ny, x, y3);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<REAL> a((size_t)ncheck * ny), b(a.size()), c(a.size());
    CK(cudaMemcpy(a.data(), y1, bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), y2, bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c.data(), y3, bytes, cudaMemcpyDeviceToHost));
    const long bad = compare("user-kernel infer", a, b) + compare("user-kernel infer_warp", a, c);
    for (long n : sizes) {
        const float tb = median_ms([&] { BATCH((int)n, x, y1, 0); }, 21);
        const float tu = median_ms([&] { user_kernel<<<(unsigned)((n + 255) / 256), 256>>>((int)n, nx, ny, x, y2); }, 21);
        const float tw = median_ms([&] { warp_kernel<<<(unsigned)((n + 255) / 256), 256>>>((int)n, nx, ny, x, y3); }, 21);
        CK(cudaGetLastError());
        printf("%-10s n=%9ld  infer_batch %8.4f ns/pt   user kernel + %s_infer %8.4f ns/pt   + %s_infer_warp %8.4f ns/pt\n",
               STR(NAME), n, tb * 1e6 / n, STR(NAME), tu * 1e6 / n, STR(NAME), tw * 1e6 / n);
    }
    return bad ? 1 : 0;
}
