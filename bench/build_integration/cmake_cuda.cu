// Prints one line per point and output element: y from the user's kernel, then from mdl_infer_batch.
#include <stdio.h>
#include <cuda_runtime.h>
#include "mdl.h"

#define N 64

__global__ void step(int n, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) mdl_infer(x + i * MDL_NX, y + i * MDL_NY);
}

int main(void) {
    float x[N * MDL_NX], y1[N * MDL_NY], y2[N * MDL_NY];
    for (int i = 0; i < N * MDL_NX; i++) x[i] = (float)((i % 17) - 8) / 8.0f;
    float *dx, *dy;
    if (cudaMalloc(&dx, sizeof x) != cudaSuccess || cudaMalloc(&dy, sizeof y1) != cudaSuccess) return 3;
    cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice);
    step<<<(N + 63) / 64, 64>>>(N, dx, dy);
    if (cudaDeviceSynchronize() != cudaSuccess) return 4;
    cudaMemcpy(y1, dy, sizeof y1, cudaMemcpyDeviceToHost);
    if (mdl_infer_batch(N, dx, dy, 0) != ROSENNA_STATUS_OK || cudaDeviceSynchronize() != cudaSuccess) return 5;
    cudaMemcpy(y2, dy, sizeof y2, cudaMemcpyDeviceToHost);
    for (int i = 0; i < N * MDL_NY; i++) printf("%.9g %.9g\n", y1[i], y2[i]);
    return 0;
}
