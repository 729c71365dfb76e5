/* Gate harness @title@ */
#include <stdio.h>
#include <stdlib.h>
@includes@
#include "@n@.h"

#define NX @N@_NX
#define NY @N@_NY

typedef @real@ real;

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

@clock@
static void step(long n, const real *x, real *y)
{
@loop@
    for (long i = 0; i < n; ++i)
        @n@_infer(x + i * NX, y + i * NY);
}

int main(int argc, char **argv)
{
    if (argc < 6)
        return 2;
    const long n = atol(argv[1]);
    const int reps = atoi(argv[2]), steps = atoi(argv[3]), plant = argc > 6 && atoi(argv[6]);
    real *x = malloc(sizeof(real) * n * NX), *y = calloc((size_t)n * NY, sizeof(real));
    double *t = malloc(sizeof(double) * reps);
    FILE *f = fopen(argv[4], "rb");
    if (!f || fread(x, sizeof(real), (size_t)n * NX, f) != (size_t)n * NX)
        return 3;
    fclose(f);
#ifdef ROSENNA_WEIGHTS
    if (@n@_init(getenv("ROSENNA_GATE_WEIGHTS")) != 0) {
        fprintf(stderr, "@n@_init failed\n");
        return 4;
    }
#endif
    int on_device = 0;
@on_device@
@enter@
    for (int r = 0; r < reps; ++r) {
        const double t0 = @now@;
        step(n, x, y);
        t[r] = @now@ - t0;
    }
    for (int s = 0; s < steps; ++s) {
        step(n, x, y);
        if (plant) {
@plant@
        }
    }
@exit@
    qsort(t, reps, sizeof(double), by_value);
    f = fopen(argv[5], "wb");
    fwrite(y, sizeof(real), (size_t)(n < @check@ ? n : @check@) * NY, f);
    fclose(f);
    printf("ON_DEVICE %d\nNS_PER_POINT %.6f\n", on_device, t[reps / 2] * 1e9 / n);
    return 0;
}
