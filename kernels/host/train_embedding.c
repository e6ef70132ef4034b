/* Backward of Embedding (Gather on axis 0 of a [V,D] table). */
#include <stdio.h>
#include <string.h>

#include "hk_parallel.h"
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

/* Check every id before writing so a bad batch leaves the output as it was. */
static int check_ids(HkDType idt, const void *ids, int64_t n, int64_t Vfull, const char *what,
                     char *err)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t id = 0;
        if (id_at(idt, ids, i, &id)) {
            if (err)
                snprintf(err, HK_ERRLEN, "%s: ids must be int32 or int64", what);
            return -1;
        }
        if (id < -Vfull || id >= Vfull) {
            if (err)
                snprintf(err, HK_ERRLEN, "%s: id %lld at position %lld outside [-%lld, %lld)",
                         what, (long long)id, (long long)i, (long long)Vfull, (long long)Vfull);
            return -1;
        }
    }
    return 0;
}

/* the row of the rank's table that id maps to, or -1 when another rank owns it */
static int64_t local_row(HkDType idt, const void *ids, int64_t i, int64_t start, int64_t V,
                         int64_t Vfull)
{
    int64_t id = 0;
    id_at(idt, ids, i, &id);
    if (id < 0)
        id += Vfull;
    id -= start;
    return id >= 0 && id < V ? id : -1;
}

int hk_embedding_shard_f32(HkDType idt, const void *ids, int64_t n, const float *table,
                           int64_t start, int64_t V, int64_t Vfull, int64_t D, float *y,
                           char *err)
{
    if (check_ids(idt, ids, n, Vfull, "embedding", err))
        return -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = local_row(idt, ids, i, start, V, Vfull);
        if (r >= 0)
            memcpy(y + i * D, table + r * D, sizeof(float) * (size_t)D);
        else
            memset(y + i * D, 0, sizeof(float) * (size_t)D);
    }
    return 0;
}

int hk_embedding_backward_shard_f32(HkDType idt, const void *ids, int64_t n, const float *dy,
                                    int64_t start, int64_t V, int64_t Vfull, int64_t D,
                                    float *dtable, int accum, char *err)
{
    if (check_ids(idt, ids, n, Vfull, "embedding backward", err))
        return -1;
    if (!accum) /* on the pool: GPT-2's [50257, 768] table is 154 MB */
        hk_parallel_memset0(dtable, sizeof(float) * (size_t)(V * D));
    /* fp32 scatter-add in id order, like torch's CPU embedding_backward */
    for (int64_t i = 0; i < n; i++) {
        int64_t r = local_row(idt, ids, i, start, V, Vfull);
        if (r < 0)
            continue;
        float *row = dtable + r * D;
        const float *g = dy + i * D;
        for (int64_t j = 0; j < D; j++)
            row[j] += g[j];
    }
    return 0;
}

int hk_embedding_backward_f32(HkDType idt, const void *ids, int64_t n, const float *dy,
                              int64_t V, int64_t D, float *dtable, int accum, char *err)
{
    return hk_embedding_backward_shard_f32(idt, ids, n, dy, 0, V, V, D, dtable, accum, err);
}
