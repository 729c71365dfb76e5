// Times one generated model's <name>_infer_batch (the native CUDA kernel) for bench/families_h200.py,
// on device data, and writes the first points' x and y for the script to check.
//   nvcc -O3 -arch=sm_90 -DNAME=fno -DHDR='"fno.h"' -DNX=... -DNY=... -I<dir> bench/families_h200.cu <dir>/libfno.a -o <dir>/driver
//   <dir>/driver N[,N...] REPS DUMP_FILE [WEIGHTS.rwt]
// With a weights file (a file-loaded model) it calls <name>_init first. One line per N:
// "N <n> ms <median> min <min> max <max>" (bench/rosenna_bench.cuh: one <name>_infer_batch(n, x, y, 0)
// call between CUDA events, median of REPS after its warm-up calls). Every call must return
// ROSENNA_STATUS_OK. x is fill()'s hash of the element index in [-1, 1); DUMP_FILE gets the first
// min(N0, 4096) points of x, then of y, float32.
#include <cstdlib>
#include <cstring>

#include "rosenna_bench.cuh"
#include HDR

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
    const long nx = NX, ny = NY;
    const long most = *std::max_element(sizes.begin(), sizes.end());
    float *x, *y;
    CK(cudaMalloc(&x, (size_t)most * nx * sizeof(float)));
    CK(cudaMalloc(&y, (size_t)most * ny * sizeof(float)));
    fill_inputs(most * nx, x);
    CK(cudaMemset(y, 0xFF, (size_t)most * ny * sizeof(float)));  // NaN: an unwritten output shows
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
            std::vector<float> hx(k * nx), hy(k * ny);
            CK(cudaMemcpy(hx.data(), x, hx.size() * sizeof(float), cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hy.data(), y, hy.size() * sizeof(float), cudaMemcpyDeviceToHost));
            FILE *f = fopen(argv[3], "wb");
            if (!f || fwrite(hx.data(), sizeof(float), hx.size(), f) != hx.size() ||
                fwrite(hy.data(), sizeof(float), hy.size(), f) != hy.size()) {
                fprintf(stderr, "cannot write %s\n", argv[3]);
                return 1;
            }
            fclose(f);
        }
        Timing t;
        int status = 0;
        if (time_calls(reps, [&] { status |= BATCH(n, x, y, 0); }, &t))
            return 1;
        if (status != 0) {
            fprintf(stderr, "infer_batch(%d) returned %d\n", n, status);
            return 1;
        }
        printf("N %d ms %.6f min %.6f max %.6f\n", n, t.median, t.min, t.max);
    }
    return 0;
}
