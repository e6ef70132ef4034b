/* Holder sets of unaligned pipelines; see plan_holders.h. */
#include "plan_holders.h"

#include <stdio.h>
#include <string.h>

static int int_of(const cJSON *o, const char *key, int dflt) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) ? (int)x->valuedouble : dflt;
}

/* The stage's "layers" [first, last]; 0 when absent or malformed. */
static int layers_of(const cJSON *o, int *a, int *b) {
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(o, "layers");
    if (!cJSON_IsArray(ly) || cJSON_GetArraySize(ly) != 2 ||
        !cJSON_IsNumber(cJSON_GetArrayItem(ly, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(ly, 1)))
        return 0;
    *a = (int)cJSON_GetArrayItem(ly, 0)->valuedouble;
    *b = (int)cJSON_GetArrayItem(ly, 1)->valuedouble;
    return *a >= 1 && *b >= *a;
}

/* The plan.json index of pipeline q's stage holding layer l: -1 none, -2
 * more than one. */
static int holder(const cJSON *stages, int q, int l) {
    int k = 0, at = -1;
    const cJSON *o;
    cJSON_ArrayForEach(o, stages) {
        int a, b;
        if (int_of(o, "pipe", 0) == q && layers_of(o, &a, &b) && a <= l && l <= b)
            at = at == -1 ? k : -2;
        k++;
    }
    return at;
}

int plan_holder_sets(const cJSON *root, PlanHolderSet *out, int max, char *err, size_t errlen) {
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(root, "stages");
    const cJSON *o;
    int J = 0, L = 0;
    cJSON_ArrayForEach(o, stages) {
        int p = int_of(o, "pipe", 0), a, b;
        if (p < 1 || p > PLAN_HOLD_MAX_PIPES) {
            snprintf(err, errlen, "every stage needs a \"pipe\" in 1..%d for several pipelines",
                     PLAN_HOLD_MAX_PIPES);
            return -1;
        }
        J = p > J ? p : J;
        if (layers_of(o, &a, &b) && b > L) L = b;
    }
    if (J < 2) {
        snprintf(err, errlen, "one pipeline: no holder sets");
        return -1;
    }
    int n = 0;
    for (int l = 1; l <= L; l++) {
        PlanHolderSet h = {.first = l, .last = l, .nholders = J};
        for (int q = 1; q <= J; q++) {
            int s = holder(stages, q, l);
            if (s < 0) {
                snprintf(err, errlen, "pipeline %d: %s of its stages hold%s layer %d (each "
                         "pipeline must be a whole copy of the model's %d layers)", q,
                         s == -1 ? "none" : "two", s == -1 ? "s" : "", l, L);
                return -1;
            }
            h.stage[q - 1] = s;
        }
        if (n > 0 && !memcmp(out[n - 1].stage, h.stage, sizeof h.stage)) {
            out[n - 1].last = l;
            continue;
        }
        if (n >= max) {
            snprintf(err, errlen, "more than %d holder sets", max);
            return -1;
        }
        out[n++] = h;
    }
    return n;
}
