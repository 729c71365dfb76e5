/* Does OpenMP target offload reach the GPU with this compiler? Prints devices and where it ran. */
#include <omp.h>
#include <stdio.h>
int main(void) {
    int on_host = 1, n = 1 << 20;
    static float a[1 << 20];
    for (int i = 0; i < n; i++) a[i] = (float)i;
#pragma omp target teams distribute parallel for map(tofrom : a[0:n]) map(tofrom : on_host)
    for (int i = 0; i < n; i++) {
        if (i == 0) on_host = omp_is_initial_device();
        a[i] = 2.0f * a[i];
    }
    printf("devices=%d ran_on_host=%d a[n-1]=%g\n", omp_get_num_devices(), on_host, a[n - 1]);
    return on_host;
}
