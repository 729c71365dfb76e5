/* Gate harness 5: the user's own CUDA kernel calls @n@_infer_warp: every lane of every warp calls
   it, each with its own point (lanes past the end repeat the last point, writing the same y). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda_runtime.h>
#include "@n@.h"

#define NX @N@_NX
#define NY @N@_NY

__global__ void user_step(long n, const @real@ *x, @real@ *y)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    const long p = i < n ? i : n - 1;
    @n@_infer_warp(x + p * NX, y + p * NY);
}

static int launch(long n, const @real@ *x, @real@ *y)
{
    user_step<<<(unsigned)((n + 255) / 256), 256>>>(n, x, y);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

static void *DEVICE_ALLOC(size_t bytes) { void *p = NULL; return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL; }
#define TO_DEVICE(d, h, b) cudaMemcpy(d, h, b, cudaMemcpyHostToDevice)
#define TO_HOST(h, d, b) cudaMemcpy(h, d, b, cudaMemcpyDeviceToHost)
#define SYNC() cudaDeviceSynchronize()
#define STEP(n, x, y) launch(n, x, y)
#define ON_DEVICE 1
@body@
