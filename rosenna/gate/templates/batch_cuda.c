/* Gate harness 3 (cuda backend): device-resident data handed to @n@_infer_batch. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include "@n@.h"

#define NX @N@_NX
#define NY @N@_NY
static void *DEVICE_ALLOC(size_t bytes) { void *p = NULL; return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL; }
#define TO_DEVICE(d, h, b) cudaMemcpy(d, h, b, cudaMemcpyHostToDevice)
#define TO_HOST(h, d, b) cudaMemcpy(h, d, b, cudaMemcpyDeviceToHost)
#define SYNC() cudaDeviceSynchronize()
#define STEP(n, x, y) @n@_infer_batch((int)(n), x, y, NULL)
#define ON_DEVICE 1
@body@
