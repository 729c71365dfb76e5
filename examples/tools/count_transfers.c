/* Counts host<->device copies of a CUDA program without a profiler: a CUPTI injection library.
 *
 *   nvcc -shared -Xcompiler -fPIC -I$CUPTI/include count_transfers.c -L$CUPTI/lib64 -lcupti \
 *        -o libcount_transfers.so
 *   CUDA_INJECTION64_PATH=$PWD/libcount_transfers.so ROSENNA_TRANSFERS=report.txt ./program
 *
 * The CUDA driver loads the library at cuInit and calls InitializeInjection, which enables CUPTI's
 * memcpy activity records; each record adds its direction and size to the totals. At exit the
 * library flushes the records and writes one line to $ROSENNA_TRANSFERS (or stderr):
 *
 *   transfers: htod <copies> <bytes> dtoh <copies> <bytes> dtod <copies> <bytes>
 *
 * It sees every copy the program's runtime makes: libgomp's and the OpenACC runtime's mappings
 * and updates, and the small argument blocks libgomp copies to the device for each kernel launch.
 * To attribute copies to a time loop, run the program at two step counts and take the difference
 * (examples/run_gpu.sh does).
 */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Every version of CUpti_ActivityMemcpy (1 to 6) begins with these fields. */
struct memcpy_head {
    CUpti_ActivityKind kind;
    uint8_t copy_kind, src_kind, dst_kind, flags;
    uint64_t bytes;
};

static unsigned long long copies[3], bytes[3]; /* htod, dtoh, dtod */

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *size = 1 << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    CUpti_Activity *record = NULL;
    (void)ctx, (void)stream, (void)size;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_MEMCPY)
            continue;
        const struct memcpy_head *m = (const struct memcpy_head *)record;
        const int k = m->copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? 0
                      : m->copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? 1
                                                                        : 2;
        copies[k] += 1;
        bytes[k] += m->bytes;
    }
    free(buffer);
}

static void report(void)
{
    cuptiActivityFlushAll(1);
    const char *path = getenv("ROSENNA_TRANSFERS");
    FILE *out = path ? fopen(path, "a") : NULL;
    fprintf(out ? out : stderr, "transfers: htod %llu %llu dtoh %llu %llu dtod %llu %llu\n", copies[0],
            bytes[0], copies[1], bytes[1], copies[2], bytes[2]);
    if (out)
        fclose(out);
}

/* libgomp destroys its context at exit, possibly before report() runs: flush first. */
static void CUPTIAPI on_resource(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                 const void *data)
{
    (void)userdata, (void)data;
    if (domain == CUPTI_CB_DOMAIN_RESOURCE && id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
        cuptiActivityFlushAll(0);
}

int InitializeInjection(void)
{
    static CUpti_SubscriberHandle subscriber;
    if (cuptiSubscribe(&subscriber, (CUpti_CallbackFunc)on_resource, NULL) == CUPTI_SUCCESS)
        cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS
        || cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS) {
        fprintf(stderr, "count_transfers: CUPTI activity tracing unavailable\n");
        return 0;
    }
    atexit(report);
    return 1;
}
