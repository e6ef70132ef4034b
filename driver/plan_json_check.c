/* plan.json range and enumeration checks; see plan_json_check.h. */
#include "plan_json_check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "planner.h"

/* The JSON text of x, shortened, for messages. */
static void show(const cJSON *x, char *out, size_t n)
{
    char *s = x ? cJSON_PrintUnformatted(x) : NULL;
    snprintf(out, n, "%s", s ? s : "nothing");
    if (s && strlen(s) >= n && n > 4)
        memcpy(out + n - 4, "...", 4);
    cJSON_free(s);
}

/* x must be a whole number in [lo, hi].  key: the key path as the other
 * plan errors spell it (compile_plan.c), e.g. stages[0]."dp". */
static int whole_in(const cJSON *x, long long lo, long long hi, const char *path, const char *key,
                    IrError *err)
{
    if (cJSON_IsNumber(x)) {
        double v = x->valuedouble;
        if (isfinite(v) && v == floor(v) && v >= (double)lo && v <= (double)hi)
            return 0;
    }
    char got[64];
    show(x, got, sizeof got);
    return ir_errorf(err, "%s: %s must be a whole number in [%lld, %lld], got %s", path, key, lo,
                     hi, got);
}

/* x, when present, must be a string shorter than cap. */
static int str_or_absent(const cJSON *x, size_t cap, const char *path, const char *key,
                         IrError *err)
{
    if (!x)
        return 0;
    char got[64];
    show(x, got, sizeof got);
    if (!cJSON_IsString(x))
        return ir_errorf(err, "%s: %s must be a string, got %s", path, key, got);
    if (strlen(x->valuestring) >= cap)
        return ir_errorf(err, "%s: %s is longer than %zu characters", path, key, cap - 1);
    return 0;
}

/* Mesh `name` of cluster.meshes, NULL when absent. */
static const cJSON *find_mesh(const cJSON *meshes, const char *name)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, meshes) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(m, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
            return m;
    }
    return NULL;
}

static int check_stage(const cJSON *o, int s, long long B, const cJSON *meshes, const char *path,
                       IrError *err)
{
    char key[96];
    if (!cJSON_IsObject(o))
        return ir_errorf(err, "%s: stages[%d] must be an object", path, s);
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(o, "layers");
    if (!cJSON_IsArray(ly) || cJSON_GetArraySize(ly) != 2)
        return ir_errorf(err, "%s: stages[%d].\"layers\" must be [first, last]", path, s);
    for (int k = 0; k < 2; k++) {
        snprintf(key, sizeof key, "stages[%d].\"layers\"[%d]", s, k);
        if (whole_in(cJSON_GetArrayItem(ly, k), 1, PLAN_MAX_LAYER, path, key, err))
            return -1;
    }
    static const struct { const char *k; long long lo, hi; int required; } ints[] = {
        {"dp", 1, PLAN_MAX_DP, 1}, {"tp", 1, PLAN_MAX_TP, 0}, {"zero", 0, 2, 0},
        {"warmup", 1, PLAN_MAX_MICROBATCHES, 1}, {"index", 0, PLAN_MAX_LAYER, 0},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, ints[i].k);
        if (!x && !ints[i].required)
            continue;
        snprintf(key, sizeof key, "stages[%d].\"%s\"", s, ints[i].k);
        long long hi = !strcmp(ints[i].k, "warmup") ? B : ints[i].hi;
        if (whole_in(x, ints[i].lo, hi, path, key, err))
            return -1;
    }
    /* version 2: each DP rank's rows of a microbatch (their sum, and an
     * array left over from before an edit of "dp": compile_plan.c) */
    const cJSON *rw = cJSON_GetObjectItemCaseSensitive(o, "rows");
    if (rw) {
        if (!cJSON_IsArray(rw))
            return ir_errorf(err, "%s: stages[%d].\"rows\" must be an array of row counts (one "
                             "per DP rank)", path, s);
        for (int k = 0; k < cJSON_GetArraySize(rw); k++) {
            snprintf(key, sizeof key, "stages[%d].\"rows\"[%d]", s, k);
            if (whole_in(cJSON_GetArrayItem(rw, k), 0, PLAN_MAX_GLOBAL_BATCH, path, key, err))
                return -1;
        }
    }
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(o, "recompute");
    snprintf(key, sizeof key, "stages[%d].\"recompute\"", s);
    if (str_or_absent(rc, 16, path, key, err))
        return -1;
    if (rc && strcmp(rc->valuestring, "none") && strcmp(rc->valuestring, "full") &&
        strcmp(rc->valuestring, "selective"))
        return ir_errorf(err, "%s: %s must be \"none\", \"full\" or \"selective\", got \"%s\"",
                         path, key, rc->valuestring);
    const cJSON *mp = cJSON_GetObjectItemCaseSensitive(o, "mem_pred_bytes");
    if (mp && !(cJSON_IsNumber(mp) && isfinite(mp->valuedouble) && mp->valuedouble >= 0)) {
        char got[64];
        show(mp, got, sizeof got);
        return ir_errorf(err, "%s: stages[%d].\"mem_pred_bytes\" must be a number >= 0, got %s",
                         path, s, got);
    }
    /* mesh and device: names the plan's own cluster section knows */
    const cJSON *me = cJSON_GetObjectItemCaseSensitive(o, "mesh");
    const cJSON *dv = cJSON_GetObjectItemCaseSensitive(o, "device");
    snprintf(key, sizeof key, "stages[%d].\"mesh\"", s);
    if (str_or_absent(me, 64, path, key, err))
        return -1;
    snprintf(key, sizeof key, "stages[%d].\"device\"", s);
    if (str_or_absent(dv, 64, path, key, err))
        return -1;
    if (me && meshes) {
        const cJSON *m = find_mesh(meshes, me->valuestring);
        if (!m)
            return ir_errorf(err, "%s: stages[%d].\"mesh\" \"%s\" is not a mesh of the plan's "
                             "cluster.\"meshes\"", path, s, me->valuestring);
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(m, "device");
        if (dv && cJSON_IsString(md) && strcmp(md->valuestring, dv->valuestring))
            return ir_errorf(err, "%s: stages[%d].\"device\" \"%s\" is not the device of mesh "
                             "'%s' (%s)", path, s, dv->valuestring, me->valuestring,
                             md->valuestring);
    }
    return 0;
}

int plan_json_check(const cJSON *root, const char *path, IrError *err)
{
    if (!cJSON_IsObject(root))
        return ir_errorf(err, "%s: a plan is a JSON object", path);
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsNumber(ver))
        return ir_errorf(err, "%s: \"version\" must be a number", path);
    if (ver->valuedouble != 1 && ver->valuedouble != 2) /* the same words as compile_plan.c */
        return ir_errorf(err, "%s: plan version %g is not supported (this hetc reads versions 1 "
                         "and 2)", path, ver->valuedouble);
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(root, "microbatches");
    if (whole_in(mb, 1, PLAN_MAX_MICROBATCHES, path, "\"microbatches\"", err))
        return -1;
    long long B = (long long)mb->valuedouble;
    if (whole_in(cJSON_GetObjectItemCaseSensitive(root, "global_batch"), 1, PLAN_MAX_GLOBAL_BATCH,
                 path, "\"global_batch\"", err))
        return -1;
    const cJSON *sq = cJSON_GetObjectItemCaseSensitive(root, "seq");
    if (sq && !cJSON_IsNull(sq) && whole_in(sq, 1, PLAN_MAX_SEQ, path, "\"seq\"", err))
        return -1;
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(root, "schedule");
    if (str_or_absent(sc, 16, path, "\"schedule\"", err))
        return -1;
    if (sc && schedule_from_name(sc->valuestring) < 0) {
        char names[160];
        schedule_names(names, sizeof names, "\"");
        return ir_errorf(err, "%s: \"schedule\" must be %s, got \"%s\"", path, names,
                         sc->valuestring);
    }
    /* the cluster section, when present, names the meshes stages and links may use */
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(root, "cluster");
    const cJSON *meshes = cl ? cJSON_GetObjectItemCaseSensitive(cl, "meshes") : NULL;
    if (meshes && !cJSON_IsArray(meshes))
        return ir_errorf(err, "%s: cluster.\"meshes\" must be an array", path);
    const cJSON *lk = cl ? cJSON_GetObjectItemCaseSensitive(cl, "links") : NULL;
    const cJSON *l, *links = cJSON_IsArray(lk) ? lk : NULL;
    int li = 0;
    cJSON_ArrayForEach(l, links) {
        const cJSON *bt = cJSON_GetObjectItemCaseSensitive(l, "between");
        for (int k = 0; meshes && cJSON_IsArray(bt) && k < cJSON_GetArraySize(bt); k++) {
            const cJSON *n = cJSON_GetArrayItem(bt, k);
            if (cJSON_IsString(n) && !find_mesh(meshes, n->valuestring))
                return ir_errorf(err, "%s: cluster.links[%d].\"between\"[%d] \"%s\" is not a mesh "
                                 "of cluster.\"meshes\"", path, li, k, n->valuestring);
        }
        li++;
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stages");
    if (!cJSON_IsArray(st) || cJSON_GetArraySize(st) < 1)
        return ir_errorf(err, "%s: \"stages\" must be a non-empty array", path);
    if (cJSON_GetArraySize(st) > PLAN_MAX_LAYER)
        return ir_errorf(err, "%s: \"stages\" has more than %d entries", path, PLAN_MAX_LAYER);
    int s = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, st) {
        if (check_stage(o, s++, B, meshes, path, err))
            return -1;
    }
    return 0;
}
