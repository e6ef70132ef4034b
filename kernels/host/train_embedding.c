/* Backward of Embedding (Gather on axis 0 of a [V,D] table). */
#include <stdio.h>
#include <string.h>

#include "hk_train.h"

static int id_at(HkDType idt, const void *ids, int64_t i, int64_t *out)
{
    if (idt == HK_I64)
        *out = ((const int64_t *)ids)[i];
    else if (idt == HK_I32)
        *out = ((const int32_t *)ids)[i];
    else
        return -1;
    return 0;
}

int hk_embedding_backward_f32(HkDType idt, const void *ids, int64_t n, const float *dy,
                              int64_t V, int64_t D, float *dtable, int accum, char *err)
{
    /* Check every id before writing so a bad batch leaves dtable as it was. */
    for (int64_t i = 0; i < n; i++) {
        int64_t id = 0;
        if (id_at(idt, ids, i, &id)) {
            if (err)
                snprintf(err, HK_ERRLEN, "embedding backward: ids must be int32 or int64");
            return -1;
        }
        if (id < -V || id >= V) {
            if (err)
                snprintf(err, HK_ERRLEN,
                         "embedding backward: id %lld at position %lld outside [-%lld, %lld)",
                         (long long)id, (long long)i, (long long)V, (long long)V);
            return -1;
        }
    }
    if (!accum)
        memset(dtable, 0, sizeof(float) * (size_t)(V * D));
    /* fp32 scatter-add in id order, like torch's CPU embedding_backward */
    for (int64_t i = 0; i < n; i++) {
        int64_t id = 0;
        id_at(idt, ids, i, &id);
        if (id < 0)
            id += V;
        float *row = dtable + id * D;
        const float *g = dy + i * D;
        for (int64_t j = 0; j < D; j++)
            row[j] += g[j];
    }
    return 0;
}
