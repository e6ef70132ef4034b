/* The metrics records of a stage's config (docs/STAGE_ABI.md): `vocab`,
 * `flops`, `peak_flops` and, in the last stage's (the printer's), the
 * plan's predicted timeline as `ptl` lines, which the run's trace.svg
 * draws above the measured step (runtime/stage/stage_metrics.c). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile_stage.h"
#include "input_file.h"
#include "op_cost.h"

/* The vocabulary the token reads index: the rows of the Embedding /
 * Gather the token input `ids` feeds, or the classes of the loss the
 * "targets" input feeds (vocab_size when the node is a TP rank's slice).
 * The smallest when several; 0: none. */
int64_t graph_token_vocab(const IrGraph *g, const IrValue *ids) {
    int64_t v = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        int64_t here = 0;
        if (n->nin < 2 || !n->in[0] || !n->in[1]) continue;
        const char *idx = n->in[1]->name;
        int reads_ids = ids && n->in[1] == ids;
        int reads_tg = idx && !strcmp(idx, "targets");
        const IrShape *s0 = &n->in[0]->shape;
        if ((n->op == IR_OP_EMBEDDING || (n->op == IR_OP_GATHER && !ir_attr_int(n, "axis", 0))) &&
            reads_ids && s0->rank >= 1)
            here = ir_attr_int(n, "vocab_size", s0->dims[0]);
        else if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_VOCAB_CROSS_ENTROPY ||
                  n->op == IR_OP_VOCAB_CE_STATS) && reads_tg && s0->rank >= 1)
            here = ir_attr_int(n, "vocab_size", s0->dims[s0->rank - 1]);
        if (here > 0 && (v == 0 || here < v)) v = here;
    }
    return v;
}

static int64_t stage_vocab(const PartStage *ps) {
    IrValue *ids = ps->data_input ? ir_graph_find_value(ps->train, ps->data_input) : NULL;
    return graph_token_vocab(ps->train, ids);
}

/* FLOPs one rank runs per microbatch: op_cost's figure for every node of
 * its train graph (forward and backward nodes alike; a node without static
 * shapes counts 0). */
double graph_flops(const IrGraph *g) {
    double f = 0;
    for (int i = 0; i < g->nnodes; i++) {
        OpCost c;
        IrError e = {{0}};
        if (op_cost_node(g->nodes[i], &c, &e) == 0 && c.fwd_flops > 0) f += c.fwd_flops;
    }
    return f;
}

static char kind_of(const char *name) {
    if (!strncmp(name, "gsend", 5)) return 'R';
    if (!strncmp(name, "send", 4)) return 'S';
    if (!strncmp(name, "sync", 4)) return 'A';
    if (name[0] == 'F' || name[0] == 'B') return name[0];
    return 0;
}

/* timeline.json beside plan.json -> ptl lines (appended to *out); a
 * missing or unreadable timeline adds nothing (a hand-written plan has none). */
static void ptl_lines(const char *plan_path, char **out, size_t *len) {
    char path[4200], eb[256];
    const char *slash = plan_path ? strrchr(plan_path, '/') : NULL;
    if (!plan_path) return;
    snprintf(path, sizeof path, "%.*stimeline.json", slash ? (int)(slash - plan_path + 1) : 0,
             plan_path);
    FILE *f = input_fopen(path, eb, sizeof eb);
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *t = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (t && fread(t, 1, (size_t)n, f) == (size_t)n) t[n] = 0;
    else free(t), t = NULL;
    fclose(f);
    cJSON *root = t ? cJSON_Parse(t) : NULL;
    free(t);
    const cJSON *ev = root ? cJSON_GetObjectItemCaseSensitive(root, "traceEvents") : NULL;
    const cJSON *e;
    cJSON_ArrayForEach(e, ev) {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(e, "pid");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(e, "ts");
        const cJSON *du = cJSON_GetObjectItemCaseSensitive(e, "dur");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        const cJSON *mb = args ? cJSON_GetObjectItemCaseSensitive(args, "mb") : NULL;
        if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X") || !cJSON_IsString(nm) ||
            !cJSON_IsNumber(pid) || !cJSON_IsNumber(ts) || !cJSON_IsNumber(du))
            continue;
        char k = kind_of(nm->valuestring);
        if (!k) continue;
        char line[160];
        int w = snprintf(line, sizeof line, "ptl %d %c %d %.9g %.9g\n", pid->valueint, k,
                         cJSON_IsNumber(mb) ? mb->valueint : -1, ts->valuedouble * 1e-6,
                         (ts->valuedouble + du->valuedouble) * 1e-6);
        char *p = realloc(*out, *len + (size_t)w + 1);
        if (!p) break;
        memcpy(p + *len, line, (size_t)w + 1);
        *out = p, *len += (size_t)w;
    }
    cJSON_Delete(root);
}

char *compile_metrics_lines(const CompileStages *cs, const PartStage *ps, int s) {
    char head[256];
    const CpStage *st = &cs->plan->stages[s];
    int64_t v = stage_vocab(ps);
    int n = 0;
    if (v > 0) n += snprintf(head + n, sizeof head - (size_t)n, "vocab %lld\n", (long long)v);
    n += snprintf(head + n, sizeof head - (size_t)n, "flops %.17g\npeak_flops %.17g\n",
                  graph_flops(ps->train), st->peak_flops);
    size_t len = (size_t)n;
    char *out = malloc(len + 1);
    if (!out) return NULL;
    memcpy(out, head, len + 1);
    if (s == cs->plan->nstages - 1) ptl_lines(cs->plan_path, &out, &len);
    return out;
}
