/* Pipelines whose stages line up, as one pipeline; see plan_pipes.h. */
#include "plan_pipes.h"

#include <stdio.h>
#include <string.h>

#define MAX_PIPES 16
#define MAX_PSTAGES 256

static int int_of(const cJSON *o, const char *key, int dflt) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) ? (int)x->valuedouble : dflt;
}

static int truthy(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsTrue(x) || (cJSON_IsNumber(x) && x->valuedouble != 0);
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : "";
}

/* Stage a and b hold the same layers in the same form. */
static int same_form(const cJSON *a, const cJSON *b) {
    const cJSON *la = cJSON_GetObjectItemCaseSensitive(a, "layers");
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(b, "layers");
    return cJSON_Compare(la, lb, 1) && int_of(a, "tp", 1) == int_of(b, "tp", 1) &&
           int_of(a, "zero", 0) == int_of(b, "zero", 0) &&
           !strcmp(str_of(a, "recompute"), str_of(b, "recompute")) &&
           truthy(a, "offload") == truthy(b, "offload") && int_of(a, "group", 0) <= 0 &&
           int_of(b, "group", 0) <= 0;
}

/* Appends stage o's DP ranks' rows (its "rows", else rt_row_split's split of
 * R) to rows and its parts (its "parts", else its mesh) to parts. */
static void add_ranks(const cJSON *o, long R, cJSON *rows, cJSON *parts) {
    int dp = int_of(o, "dp", 1), tp = int_of(o, "tp", 1);
    const cJSON *rw = cJSON_GetObjectItemCaseSensitive(o, "rows");
    for (int r = 0; r < dp; r++) {
        const cJSON *x = cJSON_IsArray(rw) && cJSON_GetArraySize(rw) == dp
                             ? cJSON_GetArrayItem(rw, r) : NULL;
        long n = cJSON_IsNumber(x) ? (long)x->valuedouble : R / dp + (r < R % dp ? 1 : 0);
        cJSON_AddItemToArray(rows, cJSON_CreateNumber((double)n));
    }
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(o, "parts");
    if (cJSON_IsArray(pa) && cJSON_GetArraySize(pa) > 0) {
        const cJSON *q;
        cJSON_ArrayForEach(q, pa) cJSON_AddItemToArray(parts, cJSON_Duplicate(q, 1));
        return;
    }
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "mesh", str_of(o, "mesh"));
    cJSON_AddNumberToObject(q, "devices", dp * tp);
    cJSON_AddItemToArray(parts, q);
}

int plan_pipes_merge(cJSON *root, const char *path) {
    cJSON *stages = cJSON_GetObjectItemCaseSensitive(root, "stages");
    int J = 0, n = cJSON_IsArray(stages) ? cJSON_GetArraySize(stages) : 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, stages) {
        int p = int_of(o, "pipe", 0);
        if (p < 1 || p > MAX_PIPES)
            return 0; /* one pipeline (or a form this does not know) */
        J = p > J ? p : J;
    }
    if (J < 2 || n % J || n / J > MAX_PSTAGES)
        return 0;
    int S = n / J, cnt[MAX_PIPES + 1] = {0};
    const cJSON *at[MAX_PIPES + 1][MAX_PSTAGES];
    int pm = -1;
    cJSON_ArrayForEach(o, stages) {
        int p = int_of(o, "pipe", 0), m = int_of(o, "pipe_microbatches", -1);
        if (cnt[p] >= S || (pm >= 0 && m != pm))
            return 0;
        pm = m;
        at[p][cnt[p]++] = o;
    }
    int B = int_of(root, "microbatches", 0);
    const cJSON *gb = cJSON_GetObjectItemCaseSensitive(root, "global_batch");
    long G = cJSON_IsNumber(gb) ? (long)gb->valuedouble : 0;
    /* every pipeline runs all B microbatches of G / (B J) rows: merged, a
     * microbatch of G / B rows, each pipeline's ranks their G / (B J) */
    if (pm != B || B < 1 || G % ((long)B * J))
        return 0;
    long R = G / ((long)B * J);
    for (int p = 1; p <= J; p++) {
        if (cnt[p] != S)
            return 0;
        for (int k = 0; k < S; k++)
            if (!same_form(at[1][k], at[p][k]) || int_of(at[p][k], "dp", 1) > R)
                return 0;
    }
    cJSON *merged = cJSON_CreateArray();
    for (int k = 0; k < S; k++) {
        cJSON *m = cJSON_Duplicate(at[1][k], 1);
        cJSON *rows = cJSON_CreateArray(), *parts = cJSON_CreateArray();
        int dp = 0, warm = int_of(at[1][k], "warmup", 1), one_mesh = 1;
        for (int p = 1; p <= J; p++) {
            const cJSON *q = at[p][k];
            dp += int_of(q, "dp", 1);
            int w = int_of(q, "warmup", 1);
            warm = w < warm ? w : warm; /* non-increasing along the pipe, as each pipeline's */
            one_mesh &= !cJSON_GetObjectItemCaseSensitive(q, "parts") &&
                        !strcmp(str_of(q, "mesh"), str_of(at[1][k], "mesh"));
            add_ranks(q, R, rows, parts);
        }
        cJSON_DeleteItemFromObjectCaseSensitive(m, "pipe");
        cJSON_DeleteItemFromObjectCaseSensitive(m, "pipes");
        cJSON_DeleteItemFromObjectCaseSensitive(m, "pipe_microbatches");
        cJSON_DeleteItemFromObjectCaseSensitive(m, "index");
        cJSON_ReplaceItemInObjectCaseSensitive(m, "dp", cJSON_CreateNumber(dp));
        cJSON_ReplaceItemInObjectCaseSensitive(m, "warmup", cJSON_CreateNumber(warm));
        cJSON_DeleteItemFromObjectCaseSensitive(m, "rows");
        cJSON_AddItemToObject(m, "rows", rows);
        cJSON_DeleteItemFromObjectCaseSensitive(m, "parts");
        if (one_mesh)
            cJSON_Delete(parts);
        else
            cJSON_AddItemToObject(m, "parts", parts);
        cJSON_AddItemToArray(merged, m);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(root, "stages", merged);
    fprintf(stderr, "hetc compile: %s: its %d pipelines cut the model at the same layers (%d "
            "stages each, the same tp, ZeRO, recompute and offload): compiled as one pipeline "
            "whose stage k's DP group holds every pipeline's stage k, each rank with its "
            "pipeline's %ld rows of a microbatch and on its pipeline's mesh; each layer's "
            "gradients are all-reduced among the ranks that hold it, as the pipelines' would be\n",
            path, J, S, R);
    return 1;
}
