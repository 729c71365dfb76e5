/* mdl_infer inside an OpenMP target loop, built by clang with OpenMP offload (or any OpenMP compiler).
   Prints ON_DEVICE 0|1, then y per point. */
#include <stdio.h>
#include <omp.h>
#include "mdl.h"

#define N 64

int main(void) {
    static float x[N * MDL_NX], y[N * MDL_NY];
    int on_device = 0;
    for (int i = 0; i < N * MDL_NX; i++) x[i] = (float)((i % 17) - 8) / 8.0f;
#pragma omp target map(from: on_device)
    on_device = !omp_is_initial_device();
#pragma omp target teams distribute parallel for map(to: x) map(from: y)
    for (int i = 0; i < N; i++)
        mdl_infer(x + i * MDL_NX, y + i * MDL_NY);
    printf("ON_DEVICE %d\n", on_device);
    for (int i = 0; i < N * MDL_NY; i++) printf("%.9g\n", y[i]);
    return 0;
}
