// Times one generated model's <name>_infer_batch (the native CUDA kernel) on device data and
// writes the first points' x and y for bench/frontier.py to check against PyTorch.
//   nvcc -O3 -arch=sm_90 -DNAME=silu -DHDR='"silu.h"' -I<dir> bench/frontier.cu <dir>/libsilu.a -o <dir>/frontier
//   <dir>/frontier N[,N...] REPS DUMP_FILE [WEIGHTS.rwt]
// Built with -DFILE_WEIGHTS (a file-loaded model), it calls <name>_init(WEIGHTS.rwt) first
// (bench/families_h200.py). One line per N: "N <n> ms <median> min <min> max <max>" (bench/rosenna_bench.cuh's method: one
// <name>_infer_batch(n, x, y, 0) call between CUDA events, median of REPS after its warm-up calls).
// x is fill()'s hash of the element index in [-1, 1). DUMP_FILE gets the first min(N0, 4096) points
// of x then of y (REAL: float32, or float64 with -DREAL=double for a float64 model; row-major) from
// the first N.
#include <cstdlib>
#include <cstring>

#include "rosenna_bench.cuh"
#include HDR

#ifndef REAL
#define REAL float
#endif
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define BATCH CAT(NAME, _infer_batch)
#define INIT CAT(NAME, _init)

using namespace rosenna_bench;

#ifdef FILE_WEIGHTS
static int init(const char *path) { return INIT(path); }
#else
static int init(const char *) { return 0; }
#endif

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s N[,N...] REPS DUMP_FILE [WEIGHTS.rwt]\n", argv[0]);
        return 2;
    }
    if (argc == 5 && init(argv[4]) != 0) {
        fprintf(stderr, "init(%s) failed\n", argv[4]);
        return 1;
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
    fill_inputs(most * nx, x);
    CK(cudaMemset(y, 0xFF, (size_t)most * ny * sizeof(REAL)));  // NaN: an unwritten output shows
    for (size_t s = 0; s < sizes.size(); ++s) {
        const int n = (int)sizes[s];
        for (int i = 0; i < WARMUPS; ++i)
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
        Timing t;
        if (time_calls(reps, [&] { BATCH(n, x, y, 0); }, &t))
            return 1;
        printf("N %d ms %.6f min %.6f max %.6f\n", n, t.median, t.min, t.max);
    }
    return 0;
}
