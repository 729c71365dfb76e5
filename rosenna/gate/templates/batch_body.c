
typedef @real@ real;

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 6)
        return 2;
    const long n = atol(argv[1]);
    const int reps = atoi(argv[2]), steps = atoi(argv[3]), plant = argc > 6 && atoi(argv[6]);
    real *x = (real *)malloc(sizeof(real) * n * NX), *y = (real *)calloc((size_t)n * NY, sizeof(real));
    double *t = (double *)malloc(sizeof(double) * reps);
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
    real *dx = (real *)DEVICE_ALLOC(sizeof(real) * n * NX), *dy = (real *)DEVICE_ALLOC(sizeof(real) * n * NY);
    if (!dx || !dy)
        return 5;
    TO_DEVICE(dx, x, sizeof(real) * n * NX);
    for (int r = 0; r < reps; ++r) {
        const double t0 = now();
        if (STEP(n, dx, dy) != 0)
            return 6;
        SYNC();
        t[r] = now() - t0;
    }
    for (int s = 0; s < steps; ++s) {
        if (STEP(n, dx, dy) != 0)
            return 6;
        if (plant)
            TO_HOST(y, dy, sizeof(real));
    }
    SYNC();
    TO_HOST(y, dy, sizeof(real) * (n < @check@ ? n : @check@) * NY);
    qsort(t, reps, sizeof(double), by_value);
    f = fopen(argv[5], "wb");
    fwrite(y, sizeof(real), (size_t)(n < @check@ ? n : @check@) * NY, f);
    fclose(f);
    printf("ON_DEVICE %d\nNS_PER_POINT %.6f\n", ON_DEVICE, t[reps / 2] * 1e9 / n);
    return 0;
}
