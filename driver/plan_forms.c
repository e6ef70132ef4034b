/* Refusing the seed planners' forms the stage binaries lack; see plan_forms.h. */
#include "plan_forms.h"

#include "plan_holders.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Appends to a fixed buffer; a full buffer ends in "...". */
typedef struct Msg {
    char *b;
    size_t n, cap;
} Msg;

static void put(Msg *m, const char *fmt, ...)
{
    if (m->n + 1 >= m->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(m->b + m->n, m->cap - m->n, fmt, ap);
    va_end(ap);
    if (k < 0)
        return;
    m->n += (size_t)k;
    if (m->n >= m->cap) {
        m->n = m->cap - 1;
        memcpy(m->b + m->cap - 4, "...", 4);
    }
}

static int int_of(const cJSON *o, const char *key, int dflt)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) ? (int)x->valuedouble : dflt;
}

/* plan.json's "offload": true, or a non-zero number */
static int offloaded(const cJSON *o)
{
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(o, "offload");
    return cJSON_IsTrue(off) || (cJSON_IsNumber(off) && off->valuedouble != 0);
}

/* AutoHet's layer-wise gradient groups: which stages would all-reduce each
 * run of layers (plan_holders.h), or why the pipelines are no copies of the
 * model. */
static void holder_sets(Msg *m, const cJSON *root)
{
    PlanHolderSet hs[64];
    char e[256];
    int n = plan_holder_sets(root, hs, 64, e, sizeof e);
    if (n < 0) {
        put(m, " (and %s)", e);
        return;
    }
    put(m, " (the holder sets:");
    for (int i = 0; i < n; i++) {
        put(m, "%s layers %d-%d on stages", i ? ";" : "", hs[i].first, hs[i].last);
        for (int q = 0; q < hs[i].nholders; q++)
            put(m, "%s %d", q ? "," : "", hs[i].stage[q]);
    }
    put(m, ")");
}

int plan_forms_check(const cJSON *root, const char *path, IrError *err)
{
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(root, "stages");
    char buf[sizeof err->msg - 64];
    Msg m = {buf, 0, sizeof buf};
    buf[0] = 0;
    int bad = 0;
    const cJSON *o;
    /* "offload" runs since issue 18 item 4, "parts" (a DP group over
     * several meshes, its row table and ZeRO on it) since launch.sh places
     * each part's ranks on its mesh, and "group" (Zorse's ministages sharing
     * devices) since launch.sh co-locates a group's ranks on its devices:
     * compile_plan.c reads all three.  What is left is several pipelines. */
    int npipes = 0;
    cJSON_ArrayForEach(o, stages) {
        int p = int_of(o, "pipe", 0);
        npipes = p > npipes ? p : npipes;
    }
    if (npipes > 1) {
        /* AutoHet's DP groups: they run (every parameter shared among its
         * holder set's stages, driver/compile_stage.c) unless a pipeline is
         * no whole copy of the model, or a stage cuts a gradient its own
         * way: ZeRO's shards, TP's slices and an offloaded store are not the
         * holder set's whole-tensor sum */
        PlanHolderSet hs[64];
        char e[256];
        int nh = plan_holder_sets(root, hs, 64, e, sizeof e), nkeys = 0;
        cJSON_ArrayForEach(o, stages)
            nkeys += int_of(o, "zero", 0) > 0 || int_of(o, "tp", 1) > 1 || offloaded(o) ||
                     int_of(o, "group", 0) > 0;
        if (nh > 0 && !nkeys)
            return 0;
        put(&m, "the plan is %d pipelines, each a whole copy of the model with its own stage "
            "boundaries (", npipes);
        for (int q = 1; q <= npipes; q++) {
            int k = 0, first = -1, last = -1, lay = 0;
            put(&m, "%spipeline %d: stages ", q > 1 ? ", " : "", q);
            cJSON_ArrayForEach(o, stages) {
                if (int_of(o, "pipe", 0) == q) {
                    first = first < 0 ? k : first;
                    last = k;
                }
                k++;
            }
            put(&m, "%d-%d, layers", first, last);
            k = 0;
            cJSON_ArrayForEach(o, stages) {
                if (int_of(o, "pipe", 0) == q) {
                    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(o, "layers");
                    put(&m, "%s%d-%d", lay++ ? " | " : " ",
                        (int)cJSON_GetArrayItem(ly, 0)->valuedouble,
                        (int)cJSON_GetArrayItem(ly, 1)->valuedouble);
                }
                k++;
            }
        }
        put(&m, "): the stage binaries run them with each layer's gradients all-reduced among "
            "the pipelines' ranks that hold it");
        holder_sets(&m, root);
        int k = 0, said = 0;
        cJSON_ArrayForEach(o, stages) {
            int z = int_of(o, "zero", 0), tp = int_of(o, "tp", 1), g = int_of(o, "group", 0);
            int of = offloaded(o);
            if (z > 0 || tp > 1 || of || g > 0) {
                put(&m, "%s stage %d (pipeline %d)", said++ ? "," : ", but not these forms "
                    "on such pipelines (the layer-wise sum needs whole gradients):", k,
                    int_of(o, "pipe", 0));
                if (z > 0) put(&m, " \"zero\" %d", z);
                if (tp > 1) put(&m, " \"tp\" %d", tp);
                if (of) put(&m, " \"offload\" true");
                if (g > 0) put(&m, " \"group\" %d (ministages sharing devices: in one "
                               "pipeline only)", g);
            }
            k++;
        }
        if (nh < 0 || nkeys)
            bad++;
    }
    if (!bad)
        return 0;
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(root, "planner");
    return ir_errorf(err, "%s: %s%s%sthe stage binaries do not run this plan: %s", path,
                     cJSON_IsString(pl) ? "(planner " : "",
                     cJSON_IsString(pl) ? pl->valuestring : "", cJSON_IsString(pl) ? ") " : "",
                     buf);
}
