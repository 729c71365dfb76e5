// Times a generated model's <name>_infer_batch (the native kernel) and the same model's
// <name>_infer called one point per thread from a user kernel, on identical inputs; checks the
// two agree (rtol 1e-5) and every output is written. The gate compares with onnxruntime.
//   nvcc -O3 -arch=sm_90 -rdc=true -DNAME=gemm_big -DHDR='"gemm_big.h"' -I<dir> gen_bench.cu <dir>/libgemm_big.a
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <vector>

#include HDR

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define INFER CAT(NAME, _infer)
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

__global__ void user_kernel(int n, int nx, int ny, const float *x, float *y) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) INFER(x + i * nx, y + i * ny);
}

__global__ void fill(long count, float *x) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < count; i += (long)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ 777u;
        h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
        x[i] = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
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

int main(int argc, char **argv) {
    const int nx = CAT(NAME, _NX_M), ny = CAT(NAME, _NY_M);
    const long sizes[2] = {1L << 20, 1L << 24};
    float *x, *y1, *y2;
    CK(cudaMalloc(&x, sizes[1] * nx * 4));
    CK(cudaMalloc(&y1, sizes[1] * ny * 4));
    CK(cudaMalloc(&y2, sizes[1] * ny * 4));
#ifdef RWT
    if (CAT(NAME, _init)(RWT) != 0) { fprintf(stderr, "init failed\n"); return 1; }
#endif
    fill<<<1024, 256>>>(sizes[1] * nx, x);
    const int ncheck = 1000003;
    CK(cudaMemset(y1, 0xFF, (size_t)ncheck * ny * 4));
    CK(cudaMemset(y2, 0xFF, (size_t)ncheck * ny * 4));
    if (BATCH(ncheck, x, y1, 0) != 0) { fprintf(stderr, "infer_batch failed\n"); return 1; }
    user_kernel<<<(ncheck + 255) / 256, 256>>>(ncheck, nx, ny, x, y2);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> a((size_t)ncheck * ny), b((size_t)ncheck * ny);
    CK(cudaMemcpy(a.data(), y1, a.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), y2, b.size() * 4, cudaMemcpyDeviceToHost));
    // Elementwise, verify's float32 tolerance (rtol 1e-5, atol 1e-6), and normwise: the relative L2
    // difference, which is what separates an FP32 kernel (~1e-7) from a 3xTF32 one (~1e-6).
    long bad = 0;
    double worst = 0, diff2 = 0, norm2 = 0;
    for (size_t i = 0; i < a.size(); i++) {
        const double d = fabs((double)a[i] - b[i]), tol = 1e-6 + 1e-5 * fabs((double)b[i]);
        if (!(d <= tol)) bad++;
        worst = std::max(worst, d);
        diff2 += d * d;
        norm2 += (double)b[i] * b[i];
    }
    printf("%-10s batch vs user-kernel infer: %ld of %zu outside rtol 1e-5 atol 1e-6 (worst abs %.2e, relative L2 %.2e) %s\n",
           STR(NAME), bad, a.size(), worst, sqrt(diff2 / (norm2 > 0 ? norm2 : 1)), bad ? "FAIL" : "ok");
    for (long n : sizes) {
        const float tb = median_ms([&] { BATCH((int)n, x, y1, 0); }, 21);
        const float tu = median_ms([&] { user_kernel<<<(unsigned)((n + 255) / 256), 256>>>((int)n, nx, ny, x, y2); }, 21);
        CK(cudaGetLastError());
        printf("%-10s n=%9ld  infer_batch %8.4f ns/pt   user kernel + %s_infer %8.4f ns/pt\n", STR(NAME), n,
               tb * 1e6 / n, STR(NAME), tu * 1e6 / n);
    }
    return bad ? 1 : 0;
}
