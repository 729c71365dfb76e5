// Times a generated model's <name>_infer_batch (the native kernel), the same model's <name>_infer
// called one point per thread from a user kernel, and its <name>_infer_warp called by every lane,
// on identical inputs; checks the three agree (verify's tolerance for the model's type,
// rosenna_bench.cuh) and every output is written; each timed as every bench driver times
// (rosenna_bench.cuh: median of 21 CUDA-event timings after the warm-ups). The gate compares with
// onnxruntime.
//   nvcc -O3 -arch=sm_90 -rdc=true -DNAME=gemm_big -DHDR='"gemm_big.h"' [-DREAL=double] -I<dir> gen_bench.cu <dir>/libgemm_big.a
#include "rosenna_bench.cuh"
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

using namespace rosenna_bench;

__global__ void user_kernel(int n, int nx, int ny, const REAL *x, REAL *y) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) INFER(x + i * nx, y + i * ny);
}

/* Every lane calls <name>_infer_warp (its contract); lanes past the end repeat the last point. */
__global__ void warp_kernel(int n, int nx, int ny, const REAL *x, REAL *y) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x, p = i < n ? i : n - 1;
    INFER_WARP(x + p * nx, y + p * ny);
}

/* The median ms of 21 timed calls of f after the warm-ups; -1 on a CUDA error (printed). */
template <class F> static float median_ms(F f) {
    for (int i = 0; i < WARMUPS; i++) f();
    Timing t;
    return time_calls(21, f, &t) ? -1.0f : t.median;
}

/* Elementwise, verify's tolerance, and normwise: the relative L2 difference, which is what
   separates an FP32 kernel (~1e-7) from a 3xTF32 one (~1e-6). */
static long compare(const char *what, const std::vector<REAL> &a, const std::vector<REAL> &b) {
    const long bad = outside(a.data(), b.data(), a.size());
    double worst = 0, diff2 = 0, norm2 = 0;
    for (size_t i = 0; i < a.size(); i++) {
        const double d = fabs((double)a[i] - b[i]);
        worst = std::max(worst, d);
        diff2 += d * d;
        norm2 += (double)b[i] * b[i];
    }
    printf("%-10s batch vs %s: %ld of %zu outside verify's tolerance (worst abs %.2e, relative L2 %.2e) %s\n",
           STR(NAME), what, bad, a.size(), worst, sqrt(diff2 / (norm2 > 0 ? norm2 : 1)), bad ? "FAIL" : "ok");
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
    fill_inputs(sizes[1] * nx, x);
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
#ifdef DUMP
    /* The batched kernel's and <name>_infer_warp's outputs, for a bit-for-bit comparison between
       builds (bench/routine_layout.sh). */
    FILE *dump = fopen(DUMP, "wb");
    if (dump == NULL || fwrite(a.data(), sizeof(REAL), a.size(), dump) != a.size() ||
        fwrite(c.data(), sizeof(REAL), c.size(), dump) != c.size() || fclose(dump) != 0) {
        fprintf(stderr, "cannot write %s\n", DUMP);
        return 1;
    }
#endif
    for (long n : sizes) {
        const float tb = median_ms([&] { BATCH((int)n, x, y1, 0); });
        const float tu = median_ms([&] { user_kernel<<<(unsigned)((n + 255) / 256), 256>>>((int)n, nx, ny, x, y2); });
        const float tw = median_ms([&] { warp_kernel<<<(unsigned)((n + 255) / 256), 256>>>((int)n, nx, ny, x, y3); });
        if (tb < 0 || tu < 0 || tw < 0)
            return 1;
        printf("%-10s n=%9ld  infer_batch %8.4f ns/pt   user kernel + %s_infer %8.4f ns/pt   + %s_infer_warp %8.4f ns/pt\n",
               STR(NAME), n, tb * 1e6 / n, STR(NAME), tu * 1e6 / n, STR(NAME), tw * 1e6 / n);
    }
    return bad ? 1 : 0;
}
