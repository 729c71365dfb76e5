// Times one generated model's <name>_infer_batch (the native CUDA kernel) on device data and
// writes the first points' x and y for bench/frontier.py to check against PyTorch.
//   nvcc -O3 -arch=sm_90 -DNAME=silu -DHDR='"silu.h"' -I<dir> bench/frontier.cu <dir>/libsilu.a -o <dir>/frontier
//   <dir>/frontier N[,N...] REPS DUMP_FILE
// One line per N: "N <n> ms <median> min <min> max <max>" (CUDA events around one
// <name>_infer_batch(n, x, y, 0) call, median of REPS after 3 warm-up calls). x is a fixed hash of
// the element index in [-1, 1). DUMP_FILE gets the first min(N0, 4096) points of x then of y
// (REAL: float32, or float64 with -DREAL=double for a float64 model; row-major) from the first N.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include HDR

#ifndef REAL
#define REAL float
#endif
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define BATCH CAT(NAME, _infer_batch)

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));            \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

__global__ void fill(long count, REAL *x)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < count; i += (long)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ 777u;
        h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
        x[i] = (REAL)((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s N[,N...] REPS DUMP_FILE\n", argv[0]);
        return 2;
    }
    std::vector<long> sizes;
    for (char *tok = strtok(argv[1], ","); tok; tok = strtok(NULL, ","))
        sizes.push_back(atol(tok));
    const int reps = atoi(argv[2]);
    const long nx = FRONTIER_NX, ny = FRONTIER_NY;
    const long most = *std::max_element(sizes.begin(), sizes.end());
    REAL *x, *y;
    CK(cudaMalloc(&x, (size_t)most * nx * sizeof(REAL)));
    CK(cudaMalloc(&y, (size_t)most * ny * sizeof(REAL)));
    fill<<<1024, 256>>>(most * nx, x);
    CK(cudaMemset(y, 0xFF, (size_t)most * ny * sizeof(REAL)));  // NaN: an unwritten output shows
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (size_t s = 0; s < sizes.size(); ++s) {
        const int n = (int)sizes[s];
        for (int i = 0; i < 3; ++i)
            if (BATCH(n, x, y, 0) != 0) {
                fprintf(stderr, "infer_batch(%d) failed\n", n);
                return 1;
            }
        CK(cudaDeviceSynchronize());
        if (s == 0) {
            const long k = std::min(sizes[0], 4096L);
            std::vector<REAL> hx(k * nx), hy(k * ny);
            CK(cudaMemcpy(hx.data(), x, hx.size() * sizeof(REAL), cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hy.data(), y, hy.size() * sizeof(REAL), cudaMemcpyDeviceToHost));
            FILE *f = fopen(argv[3], "wb");
            if (!f || fwrite(hx.data(), sizeof(REAL), hx.size(), f) != hx.size() ||
                fwrite(hy.data(), sizeof(REAL), hy.size(), f) != hy.size()) {
                fprintf(stderr, "cannot write %s\n", argv[3]);
                return 1;
            }
            fclose(f);
        }
        std::vector<float> t;
        for (int r = 0; r < reps; ++r) {
            CK(cudaEventRecord(a));
            BATCH(n, x, y, 0);
            CK(cudaEventRecord(b));
            CK(cudaEventSynchronize(b));
            float ms;
            CK(cudaEventElapsedTime(&ms, a, b));
            t.push_back(ms);
        }
        CK(cudaGetLastError());
        std::sort(t.begin(), t.end());
        printf("N %d ms %.6f min %.6f max %.6f\n", n, t[t.size() / 2], t.front(), t.back());
    }
    return 0;
}
