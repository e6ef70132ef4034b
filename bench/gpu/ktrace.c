/* bench/gpu: a whole-run GPU timeline of a --backend=cuda stage binary at
 * almost no cost, where Nsight Compute (kernel_profile.py) serialises every
 * kernel and covers a few hundred launches in minutes.
 *
 *     LD_PRELOAD=libktrace.so HETC_KTRACE_DIR=DIR build/launch.sh ...
 *
 * Loaded into every process of the job, it starts only in the stage
 * binaries (program name stage_*): CUPTI's activity API records every
 * kernel, memset and memcpy with its device start and end times, and each
 * full buffer is appended to DIR/ktrace.<pid>.csv as
 *
 *     K,<start ns>,<end ns>,<kernel name>      (M memset, C memcpy)
 *
 * ktrace_report.py cuts the records into training steps and prints where
 * each step's GPU time goes and how long the GPU sat idle.  Built by
 * bench/gpu/pack.sh against the CUDA toolkit's CUPTI. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cupti.h>

#define KT_BUF (1u << 20) /* small buffers: delivered as they fill, not all at exit */

static FILE *kt_out;

static void CUPTIAPI kt_request(uint8_t **buf, size_t *size, size_t *max_records) {
    *buf = aligned_alloc(8, KT_BUF);
    *size = *buf ? KT_BUF : 0;
    *max_records = 0;
}

static void CUPTIAPI kt_complete(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                 size_t valid) {
    CUpti_Activity *r = NULL;
    while (kt_out && cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        switch (r->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
            fprintf(kt_out, "K,%llu,%llu,%s\n", (unsigned long long)k->start,
                    (unsigned long long)k->end, k->name ? k->name : "?");
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)r;
            fprintf(kt_out, "M,%llu,%llu,memset %llu B\n", (unsigned long long)m->start,
                    (unsigned long long)m->end, (unsigned long long)m->bytes);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
            fprintf(kt_out, "C,%llu,%llu,memcpy kind %d %llu B\n", (unsigned long long)m->start,
                    (unsigned long long)m->end, (int)m->copyKind, (unsigned long long)m->bytes);
            break;
        }
        default:
            break;
        }
    }
    if (kt_out) fflush(kt_out);
    free(buf);
}

__attribute__((constructor)) static void kt_start(void) {
    const char *dir = getenv("HETC_KTRACE_DIR");
    if (!dir || strncmp(program_invocation_short_name, "stage_", 6)) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/ktrace.%d.csv", dir, (int)getpid());
    if (!(kt_out = fopen(path, "w"))) {
        fprintf(stderr, "ktrace: cannot write %s: %s\n", path, strerror(errno));
        return;
    }
    if (cuptiActivityRegisterCallbacks(kt_request, kt_complete) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS) {
        fprintf(stderr, "ktrace: CUPTI activity tracing did not start\n");
        fclose(kt_out);
        kt_out = NULL;
        return;
    }
    cuptiActivityFlushPeriod(200); /* ms: records reach the file while the run goes on */
}

__attribute__((destructor)) static void kt_stop(void) {
    if (!kt_out) return;
    cuptiActivityFlushAll(1);
    fclose(kt_out);
    kt_out = NULL;
}
