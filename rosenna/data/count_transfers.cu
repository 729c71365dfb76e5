/* Counts every host<->device copy a CUDA program makes, without a profiler: a CUPTI injection
 * library, the transfer counter of `rosenna gpu-gate` and of examples/run_gpu.sh.
 *
 *   nvcc -shared -Xcompiler -fPIC -I$CUPTI/include count_transfers.cu -L$CUPTI/lib64 -lcupti \
 *        -o libcount_transfers.so
 *   CUDA_INJECTION64_PATH=$PWD/libcount_transfers.so [ROSENNA_TRANSFERS=report.txt] ./program
 *
 * The CUDA driver loads the library at cuInit and calls InitializeInjection, which enables CUPTI's
 * memcpy activity records: it sees the copies of every runtime in the program (the CUDA runtime,
 * libgomp's and libomptarget's plugins, the OpenACC runtime). At exit one line goes to stderr, or
 * is appended to $ROSENNA_TRANSFERS (one line per MPI rank):
 *
 *   ROSENNA_TRANSFERS htod <copies> <bytes> dtoh <copies> <bytes> other <copies> <bytes> small_htod <copies> <bytes>
 *
 * small_htod: host-to-device copies of at most LAUNCH_ARGS_MAX bytes, which is how libgomp's nvptx
 * plugin passes each target region's arguments (the mapped pointers), one or two per launch. To
 * attribute copies to a time loop, run the program at two step counts and take the difference.
 */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Every version of CUpti_ActivityMemcpy (1 to 6) begins with these fields. */
struct head {
    CUpti_ActivityKind kind;
    uint8_t copy_kind, src_kind, dst_kind, flags;
    uint64_t bytes;
};

static unsigned long long copies[3], bytes[3]; /* htod, dtoh, other */
/* Host-to-device copies of at most LAUNCH_ARGS_MAX bytes: libgomp's nvptx plugin passes each
   target region's arguments (the mapped pointers) in such a block, one per launch. */
#define LAUNCH_ARGS_MAX 256
static unsigned long long small_htod, small_htod_bytes;

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *size = 1 << 20;
    *buffer = (uint8_t *)aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    CUpti_Activity *record = NULL;
    (void)ctx, (void)stream, (void)size;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_MEMCPY)
            continue;
        const struct head *m = (const struct head *)record;
        const int k = m->copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD ? 0 : m->copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? 1 : 2;
        copies[k] += 1;
        bytes[k] += m->bytes;
        if (k == 0 && m->bytes <= LAUNCH_ARGS_MAX) {
            small_htod += 1;
            small_htod_bytes += m->bytes;
        }
    }
    free(buffer);
}

static void report(void)
{
    cuptiActivityFlushAll(1);
    const char *path = getenv("ROSENNA_TRANSFERS");
    FILE *out = path ? fopen(path, "a") : NULL;
    fprintf(out ? out : stderr, "ROSENNA_TRANSFERS htod %llu %llu dtoh %llu %llu other %llu %llu small_htod %llu %llu\n",
            copies[0], bytes[0], copies[1], bytes[1], copies[2], bytes[2], small_htod, small_htod_bytes);
    if (out)
        fclose(out);
}

/* libgomp destroys its context at exit, possibly before report() runs: flush first. */
static void CUPTIAPI on_resource(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void *data)
{
    (void)userdata, (void)data;
    if (domain == CUPTI_CB_DOMAIN_RESOURCE && id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
        cuptiActivityFlushAll(0);
}

extern "C" int InitializeInjection(void)
{
    static CUpti_SubscriberHandle subscriber;
    if (cuptiSubscribe(&subscriber, (CUpti_CallbackFunc)on_resource, NULL) == CUPTI_SUCCESS)
        cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS) {
        fprintf(stderr, "ROSENNA_TRANSFERS unavailable\n");
        return 0;
    }
    atexit(report);
    return 1;
}
