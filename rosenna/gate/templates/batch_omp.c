/* Gate harness 3 (omp backend): device-resident data (omp_target_alloc) handed to
   @n@_infer_batch; on a machine without a device these are host pointers. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <omp.h>
#include "@n@.h"

#define NX @N@_NX
#define NY @N@_NY
#define DEVICE_ALLOC(b) omp_target_alloc(b, omp_get_default_device())
#define TO_DEVICE(d, h, b) omp_target_memcpy(d, h, b, 0, 0, omp_get_default_device(), omp_get_initial_device())
#define TO_HOST(h, d, b) omp_target_memcpy(h, d, b, 0, 0, omp_get_initial_device(), omp_get_default_device())
#define SYNC() ((void)0)
#define STEP(n, x, y) @n@_infer_batch((int)(n), x, y, NULL)
#define ON_DEVICE (omp_get_default_device() != omp_get_initial_device())
@body@
