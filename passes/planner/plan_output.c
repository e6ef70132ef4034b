/* Plan output files (docs/PLAN_FORMAT.md): plan.json, plan.txt,
 * timeline.json (Chrome trace event format) and timeline.svg.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plan_output.h"
#include "atomic_file.h"
#include "cost_model.h"   /* recompute_name */

#define PLAN_FORMAT_VERSION 2 /* 2: stages[].rows */
#define GIB 1073741824.0

/* ---------------------------------------------------------------- JSON writer */

/* A small streaming writer: it tracks, per nesting level, whether a comma is
 * due, so callers emit keys and values in order without comma bookkeeping. */
typedef struct Jw {
    FILE *f;
    int depth;
    int need_comma[64];
    int after_key;
    int pretty;
} Jw;

static void jw_escape(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

static void jw_indent(Jw *w)
{
    if (!w->pretty)
        return;
    fputc('\n', w->f);
    for (int i = 0; i < w->depth; i++)
        fputs("  ", w->f);
}

/* Before any value or key: a comma if one is due, then indentation. */
static void jw_pre(Jw *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (w->need_comma[w->depth])
        fputc(',', w->f);
    if (w->depth > 0)
        jw_indent(w);
    w->need_comma[w->depth] = 1;
}

static void jw_key(Jw *w, const char *k)
{
    jw_pre(w);
    jw_escape(w->f, k);
    fputs(w->pretty ? ": " : ":", w->f);
    w->after_key = 1;
}

static void jw_open(Jw *w, char c)
{
    jw_pre(w);
    fputc(c, w->f);
    if (w->depth < 63)
        w->depth++;
    w->need_comma[w->depth] = 0;
}

static void jw_close(Jw *w, char c)
{
    int had = w->need_comma[w->depth];
    if (w->depth > 0)
        w->depth--;
    if (had)
        jw_indent(w);
    fputc(c, w->f);
}

/* A short array of scalars on one line: [1, 22]. */
static int jw_open_inline(Jw *w)
{
    int saved = w->pretty;
    jw_open(w, '[');
    w->pretty = 0;
    return saved;
}

static void jw_close_inline(Jw *w, int saved)
{
    jw_close(w, ']');
    w->pretty = saved;
}

static void jw_str(Jw *w, const char *s)
{
    jw_pre(w);
    jw_escape(w->f, s);
}

static void jw_num(Jw *w, double v)
{
    jw_pre(w);
    if (isfinite(v)) {
        /* shortest of %.15g / %.17g that reads back exactly */
        char buf[32];
        snprintf(buf, sizeof buf, "%.15g", v);
        if (strtod(buf, NULL) != v)
            snprintf(buf, sizeof buf, "%.17g", v);
        fputs(buf, w->f);
    }
    else
        fputs("null", w->f);   /* JSON has no inf/nan */
}

static void jw_int(Jw *w, long v)
{
    jw_pre(w);
    fprintf(w->f, "%ld", v);
}

static void jw_null(Jw *w)
{
    jw_pre(w);
    fputs("null", w->f);
}

#define KSTR(w, k, v) (jw_key(w, k), jw_str(w, v))
#define KNUM(w, k, v) (jw_key(w, k), jw_num(w, v))
#define KINT(w, k, v) (jw_key(w, k), jw_int(w, v))

/* ---------------------------------------------------------------- figures */

static const char *dtype_of(const ClusterSpec *c)
{
    return c->dtype[0] ? c->dtype : "bf16";
}

double plan_eta(const Plan *p, const ClusterSpec *c)
{
    /* Eq. 25: η = 1 - Σ_i (td_max - td_i) Peak_i / (td_max Σ_i Peak_i),
     * summed over all d devices of the cluster. */
    double td_max = 0;
    for (int s = 0; s < p->nstages; s++) {
        double td = p->microbatches * (p->stages[s].t_f + p->stages[s].t_b);
        if (td > td_max)
            td_max = td;
    }
    if (!(td_max > 0))
        return 0;
    double num = 0, den = 0;
    for (int a = 0; a < c->nmeshes; a++) {
        const MeshSpec *m = &c->meshes[a];
        double peak = device_peak_flops(&m->dev, dtype_of(c));
        long used = 0;
        for (int s = 0; s < p->nstages; s++) {
            const PlanStage *st = &p->stages[s];
            if (st->mesh != a)
                continue;
            long d = (long)st->sub.n * st->sub.m;
            double td = p->microbatches * (st->t_f + st->t_b);
            num += d * (td_max - td) * peak;
            used += d;
        }
        long all = (long)m->nodes * m->per_node;
        if (used < all)
            num += (all - used) * td_max * peak;   /* idle devices: td = 0 */
        den += all * peak;
    }
    return 1.0 - num / (td_max * den);
}

double plan_iteration_time(const Plan *p, const PlanOutputInfo *info,
                           const TimelineEvent *ev, int nev)
{
    if (info && info->iteration_time > 0)
        return info->iteration_time;
    double end = 0;
    for (int i = 0; i < nev; i++)
        if (ev[i].end > end)
            end = ev[i].end;
    return end > 0 ? end : p->objective;
}

static const char *mesh_name(const ClusterSpec *c, int a)
{
    return a >= 0 && a < c->nmeshes ? c->meshes[a].name : "?";
}

static const DeviceSpec *mesh_dev(const ClusterSpec *c, int a)
{
    return a >= 0 && a < c->nmeshes ? &c->meshes[a].dev : NULL;
}

/* ---------------------------------------------------------------- plan.json */

/* Each DP rank's rows of a microbatch of R rows (plan.json "rows", version
 * 2).  A stage whose DP group spans meshes (parts) gives each part one row
 * per DP rank first (a rank without a row runs nothing: plan.json must not
 * hold one), then the rest of the R rows one at a time to the part furthest
 * below its share (share x R), splitting each part's rows evenly over its
 * ranks; any other stage splits them as the runtime does (rt_row_split: the
 * first R mod dp ranks one row more).  R >= dp: every planner's result is
 * checked for it (alt_plan_check_rows).  plan_output.h. */
void plan_stage_rows(const PlanStage *st, long R, long *out) {
    int dp = st->dp, tp = st->tp > 1 ? st->tp : 1, n = 0;
    for (int j = 0; st->nparts > 1 && j < st->nparts && j < PLAN_MAX_PARTS; j++)
        n += st->parts[j].devices / tp;
    if (st->nparts > 1 && n == dp && R >= dp) {
        long got[PLAN_MAX_PARTS];
        int np = st->nparts < PLAN_MAX_PARTS ? st->nparts : PLAN_MAX_PARTS;
        for (int j = 0; j < np; j++)
            got[j] = st->parts[j].devices / tp;
        for (long left = R - dp; left > 0; left--) {
            int b = 0;
            for (int j = 1; j < np; j++)
                b = st->parts[j].share * (double)R - (double)got[j] >
                            st->parts[b].share * (double)R - (double)got[b] ? j : b;
            got[b]++;
        }
        int r = 0;
        for (int j = 0; j < np; j++) {
            int k = st->parts[j].devices / tp;
            for (int i = 0; i < k; i++)
                out[r++] = got[j] / k + (i < got[j] % k ? 1 : 0);
        }
        return;
    }
    for (int r = 0; r < dp; r++)
        out[r] = R / dp + (r < R % dp ? 1 : 0);
}

/* plan.json's "cluster": the meshes and links the plan was made for. */
static void json_cluster(Jw *w, const ClusterSpec *c)
{
    jw_key(w, "cluster");
    jw_open(w, '{');
    KSTR(w, "name", c->name);
    KSTR(w, "dtype", dtype_of(c));
    KINT(w, "devices", cluster_total_devices(c));
    jw_key(w, "meshes");
    jw_open(w, '[');
    for (int a = 0; a < c->nmeshes; a++) {
        const MeshSpec *m = &c->meshes[a];
        jw_open(w, '{');
        KSTR(w, "name", m->name);
        KSTR(w, "device", m->dev.name);
        KINT(w, "nodes", m->nodes);
        KINT(w, "devices_per_node", m->per_node);
        KNUM(w, "peak_flops", device_peak_flops(&m->dev, dtype_of(c)));
        KNUM(w, "mem_bytes", m->dev.mem_bytes);
        jw_close(w, '}');
    }
    jw_close(w, ']');
    jw_key(w, "links");
    jw_open(w, '[');
    for (int l = 0; l < c->nlinks; l++) {
        const LinkSpec *k = &c->links[l];
        jw_open(w, '{');
        jw_key(w, "between");
        int sv = jw_open_inline(w);
        jw_str(w, mesh_name(c, k->a));
        jw_str(w, mesh_name(c, k->b));
        jw_close_inline(w, sv);
        KNUM(w, "bandwidth_bytes_per_s", k->bw);
        KNUM(w, "latency_s", k->lat);
        KSTR(w, "transport", k->cpu_mediated ? "cpu-mediated" : "device-direct");
        jw_close(w, '}');
    }
    jw_close(w, ']');
    jw_close(w, '}');

}

/* plan.json's "search", "iteration_time", "throughput" and "eta". */
static void json_search(Jw *w, const Plan *p, const ClusterSpec *c, const PlanOutputInfo *info,
                        double iter)
{
    jw_key(w, "search");
    jw_open(w, '{');
    jw_key(w, "complete");
    jw_pre(w);
    fputs(p->time_limited ? "false" : "true", w->f);
    KSTR(w, "result", p->time_limited ? "best found within the time limit, not proven optimal"
                                       : "optimal over the searched shapes");
    KINT(w, "node_grouped_meshes", p->coarse_meshes);
    jw_close(w, '}');
    KNUM(w, "iteration_time", iter);
    jw_key(w, "throughput");
    jw_open(w, '{');
    KNUM(w, "microbatches_per_s", iter > 0 ? p->microbatches / iter : 0);
    jw_key(w, "samples_per_s");
    if (info && info->global_batch > 0 && iter > 0)
        jw_num(w, info->global_batch / iter);
    else
        jw_null(w);
    jw_key(w, "tokens_per_s");
    if (info && info->global_batch > 0 && info->seq > 0 && iter > 0)
        jw_num(w, (double)info->global_batch * info->seq / iter);
    else
        jw_null(w);
    jw_close(w, '}');
    KNUM(w, "eta", plan_eta(p, c));
}

/* One element of plan.json's "stages". */
static void json_stage(Jw *w, const Plan *p, const ClusterSpec *c, const PlanOutputInfo *info,
                       int s)
{
    int sv;
    const PlanStage *st = &p->stages[s];
    const DeviceSpec *d = mesh_dev(c, st->mesh);
    jw_open(w, '{');
    KINT(w, "index", s);
    jw_key(w, "layers");
    sv = jw_open_inline(w);
    jw_int(w, st->first_layer);
    jw_int(w, st->last_layer);
    jw_close_inline(w, sv);
    KSTR(w, "mesh", mesh_name(c, st->mesh));
    KSTR(w, "device", d ? d->name : "?");
    jw_key(w, "submesh");
    sv = jw_open_inline(w);
    jw_int(w, st->sub.n);
    jw_int(w, st->sub.m);
    jw_close_inline(w, sv);
    KINT(w, "dp", st->dp);
    if (info && info->global_batch > 0 && p->microbatches > 0 && st->dp > 1) {
        long *rw = calloc((size_t)st->dp, sizeof *rw);
        if (rw) {
            plan_stage_rows(st, (long)(info->global_batch / p->microbatches), rw);
            jw_key(w, "rows");
            jw_open(w, '[');
            for (int r = 0; r < st->dp; r++)
                jw_int(w, rw[r]);
            jw_close(w, ']');
            free(rw);
        }
    }
    KINT(w, "tp", st->tp);
    KINT(w, "zero", st->zero);
    KSTR(w, "recompute", recompute_name(st->recompute));
    KINT(w, "warmup", st->warmup);
    KINT(w, "delta", st->delta);
    jw_key(w, "delta_beyond_paper");
    jw_pre(w);
    fputs(st->delta_beyond_paper ? "true" : "false", w->f);
    KNUM(w, "t_f", st->t_f);
    KNUM(w, "t_b", st->t_b);
    KNUM(w, "c_next", st->c_next);
    KNUM(w, "mem_pred_bytes", st->mem_pred);
    if (info && info->has_reserve) { /* the arena's part: the rest is the runtime's reserve */
        KNUM(w, "mem_arena_pred_bytes", st->mem_pred - info->reserve_bytes);
        if (st->mem_static > 0) { /* its parts, as the stage binary's arena has them */
            KNUM(w, "mem_static_pred_bytes", st->mem_static - info->reserve_bytes);
            KNUM(w, "mem_act_pred_bytes", st->mem_act);
            KNUM(w, "mem_scratch_pred_bytes", st->mem_scratch);
        }
    }
    KNUM(w, "mem_capacity_bytes", d ? d->mem_bytes : 0);
    /* issue 18: a seed planner's forms (absent in plans the binaries run) */
    if (st->nparts > 1) {
        jw_key(w, "parts");
        jw_open(w, '[');
        for (int j = 0; j < st->nparts && j < PLAN_MAX_PARTS; j++) {
            jw_open(w, '{');
            KSTR(w, "mesh", mesh_name(c, st->parts[j].mesh));
            KINT(w, "devices", st->parts[j].devices);
            KNUM(w, "share", st->parts[j].share);
            jw_close(w, '}');
        }
        jw_close(w, ']');
    }
    if (st->group > 0)
        KINT(w, "group", st->group);
    if (st->pipe > 0) {
        KINT(w, "pipe", st->pipe);
        KINT(w, "pipes", st->npipes);
        KINT(w, "pipe_microbatches", st->pipe_microbatches);
    }
    if (st->offload) {
        jw_key(w, "offload");
        jw_pre(w);
        fputs("true", w->f);
    }
    jw_close(w, '}');
}

int plan_write_json(FILE *f, const Plan *p, const ClusterSpec *c, const PlanOutputInfo *info,
                    const TimelineEvent *ev, int nev)
{
    Jw w = {.f = f, .pretty = 1};
    double iter = plan_iteration_time(p, info, ev, nev);
    jw_open(&w, '{');
    KINT(&w, "version", PLAN_FORMAT_VERSION);
    KSTR(&w, "model", info && info->model ? info->model : "unknown");

    json_cluster(&w, c);
    if (info && info->precision)
        KSTR(&w, "precision", info->precision);
    if (info && info->cluster_dtype && strcmp(info->cluster_dtype, dtype_of(c)))
        KSTR(&w, "cluster_file_dtype", info->cluster_dtype);
    if (info && info->grad_reduce_bf16)
        KSTR(&w, "grad_reduce_dtype", "bf16");
    if (info && info->tp_reduce_bf16)
        KSTR(&w, "tp_reduce_dtype", "bf16");
    if (info && info->has_reserve)
        KNUM(&w, "runtime_reserve_bytes", info->reserve_bytes);
    if (info && info->planner)
        KSTR(&w, "planner", info->planner);
    KSTR(&w, "schedule", schedule_name(p->schedule));
    KINT(&w, "microbatches", p->microbatches);
    if (info && info->global_batch > 0) {
        KINT(&w, "global_batch", info->global_batch);
        /* the rows of one microbatch, global_batch / microbatches (what
         * hetc compile binds the stage binaries' batch dim to) */
        if (p->microbatches > 0)
            KINT(&w, "microbatch_rows", info->global_batch / p->microbatches);
    }
    if (info && info->mb_ncand > 0) {
        /* the microbatch search: every size tried, its Eq. 13 objective
         * (null: no feasible plan at that size); the plan is the smallest */
        jw_key(&w, "microbatch_search");
        jw_open(&w, '[');
        for (int i = 0; i < info->mb_ncand; i++) {
            int sv = w.pretty;
            jw_open(&w, '{');
            w.pretty = 0; /* one candidate per line */
            KINT(&w, "rows", info->mb_cands[i].rows);
            KNUM(&w, "objective", info->mb_cands[i].objective);
            jw_close(&w, '}');
            w.pretty = sv;
        }
        jw_close(&w, ']');
    }
    if (info && info->seq > 0)
        KINT(&w, "seq", info->seq);
    KNUM(&w, "eps", p->eps);
    jw_key(&w, "mesh_order");
    int sv = jw_open_inline(&w);
    for (int i = 0; i < p->nmesh_order; i++)
        jw_str(&w, mesh_name(c, p->mesh_order[i]));
    jw_close_inline(&w, sv);
    KNUM(&w, "t_max", p->t_max);
    KNUM(&w, "objective", p->objective);
    /* (issue 16) how the search ended: "complete" is false when --time-limit
     * stopped it (the best plan found so far); node_grouped_meshes > 0 when
     * the node-group heuristic (--max-node-groups) restricted some meshes. */
    json_search(&w, p, c, info, iter);
    if (info && info->counters) {
        const CostCounters *k = info->counters;
        jw_key(&w, "profile");
        jw_open(&w, '{');
        KINT(&w, "total", k->total);
        KINT(&w, "duplicates", k->duplicates);
        KINT(&w, "unique", k->unique);
        KINT(&w, "pruned_imbalance", k->pruned_imbalance);
        KINT(&w, "costed", k->costed);
        KINT(&w, "pruned_memory", k->pruned_memory);
        KINT(&w, "pruned_rows", k->pruned_rows);
        jw_close(&w, '}');
    }
    jw_key(&w, "stages");
    jw_open(&w, '[');
    for (int s = 0; s < p->nstages; s++)
        json_stage(&w, p, c, info, s);
    jw_close(&w, ']');
    jw_close(&w, '}');
    fputc('\n', f);
    return ferror(f) ? -1 : 0;
}

/* ---------------------------------------------------------------- plan.txt */

#define NCOL 10

typedef struct Row {
    char cell[NCOL][64];
} Row;

/* plan.txt's lines above the table: model, cluster, precision, memory
 * terms, schedule and mesh order, the microbatch size (searched or pinned) */
static void txt_header(FILE *f, const Plan *p, const ClusterSpec *c, const PlanOutputInfo *info)
{
    fprintf(f, "hetc plan: model %s on cluster %s (%d devices, %s)\n",
            info && info->model ? info->model : "unknown", c->name, cluster_total_devices(c),
            dtype_of(c));
    if (info && info->precision) {
        int other = info->cluster_dtype && strcmp(info->cluster_dtype, dtype_of(c));
        fprintf(f, "precision %s (%s)%s%s%s\n", info->precision,
                !strcmp(info->precision, "fp32")
                    ? "weights, gradients, AdamW m and v, activations 4 B; fp32 peak: what "
                      "the stage binaries run"
                : !strcmp(dtype_of(c), "fp32") /* --precision bf16-mixed */
                    ? "the stage binaries run every Linear on bf16 operands: those FLOPs at "
                      "each device's bf16 peak (fp32's where it has none), the rest at the "
                      "fp32 peak; memory from the bf16-mixed arena, fp32 master weights, "
                      "gradients and AdamW m and v"
                    : "16-bit weights and gradients, fp32 master and AdamW moments: a "
                      "planning what-if, the stage binaries run fp32",
                other ? "; the cluster file's dtype " : "", other ? info->cluster_dtype : "",
                other ? " is not used" : "");
        if (info->grad_reduce_bf16)
            fprintf(f, "gradients reduced in bf16 (--grad-reduce-dtype bf16): the DP sync moves "
                    "half the bytes\n");
        if (info->tp_reduce_bf16)
            fprintf(f, "TP sums in bf16 (--tp-reduce-dtype bf16): the TP all-reduces of "
                    "activations and their gradients move half the bytes\n");
    }
    if (info && info->has_reserve)
        fprintf(f, "memory per device = arena (model states + K_i activation slots + scratch, "
                "from each layer's memory plan; docs/PLANNER.md) + %.2f GiB runtime reserve\n",
                info->reserve_bytes / GIB);
    fprintf(f, "schedule %s, B = %d microbatches, eps = %g; mesh order:", schedule_name(p->schedule),
            p->microbatches, p->eps);
    for (int i = 0; i < p->nmesh_order; i++)
        fprintf(f, "%s %s", i ? " ->" : "", mesh_name(c, p->mesh_order[i]));
    fputs("\n", f);
    if (info && info->global_batch > 0 && p->microbatches > 0) {
        fprintf(f, "microbatch: %ld rows x B = %d = global batch %ld (%s", info->global_batch /
                p->microbatches, p->microbatches, info->global_batch,
                info->mb_ncand > 0 ? "searched; Eq. 13 per size:" : "pinned");
        for (int i = 0; i < info->mb_ncand; i++) {
            if (isfinite(info->mb_cands[i].objective))
                fprintf(f, " %ld: %.4g s", info->mb_cands[i].rows, info->mb_cands[i].objective);
            else
                fprintf(f, " %ld: no plan", info->mb_cands[i].rows);
            fputc(i + 1 < info->mb_ncand ? ',' : ')', f);
        }
        fputs(info->mb_ncand > 0 ? "\n" : ")\n", f);
    }
}

int plan_write_txt(FILE *f, const Plan *p, const ClusterSpec *c, const PlanOutputInfo *info,
                   const TimelineEvent *ev, int nev)
{
    static const char *const head[NCOL] = {"stage", "layers", "mesh", "device", "submesh",
                                           "intra-op", "K_i", "fwd ms", "bwd ms", "comm ms"};
    /* memory is the 11th column, kept apart: it is the widest */
    double iter = plan_iteration_time(p, info, ev, nev);
    txt_header(f, p, c, info);
    fputs("\n", f);

    int nrows = p->nstages;
    Row *rows = calloc((size_t)(nrows ? nrows : 1), sizeof *rows);
    char (*mem)[64] = calloc((size_t)(nrows ? nrows : 1), 64);
    if (!rows || !mem) {
        free(rows);
        free(mem);
        return -1;
    }
    int width[NCOL + 1];
    for (int j = 0; j < NCOL; j++)
        width[j] = (int)strlen(head[j]);
    /* with the reserve known, the arena part too: what stages.txt lays out */
    const char *memhead = info && info->has_reserve ? "memory GiB used/capacity, arena MiB"
                                                    : "memory GiB used/capacity";
    width[NCOL] = (int)strlen(memhead);
    long devices_used = 0;
    for (int s = 0; s < nrows; s++) {
        const PlanStage *st = &p->stages[s];
        const DeviceSpec *d = mesh_dev(c, st->mesh);
        Row *r = &rows[s];
        devices_used += (long)st->sub.n * st->sub.m;
        snprintf(r->cell[0], 64, "%d", s);
        snprintf(r->cell[1], 64, "%d-%d", st->first_layer, st->last_layer);
        snprintf(r->cell[2], 64, "%s", mesh_name(c, st->mesh));
        snprintf(r->cell[3], 64, "%s", d ? d->name : "?");
        snprintf(r->cell[4], 64, "(%d,%d)", st->sub.n, st->sub.m);
        snprintf(r->cell[5], 64, "DP%dxTP%d%s%s%s", st->dp, st->tp,
                 st->zero == 1 ? " Z1" : st->zero == 2 ? " Z2" : "",
                 st->recompute == RECOMPUTE_SELECTIVE ? " RC-sel" : "",
                 st->recompute == RECOMPUTE_FULL ? " RC-full" : "");
        snprintf(r->cell[6], 64, "%d", st->warmup);
        snprintf(r->cell[7], 64, "%.3f", st->t_f * 1e3);
        snprintf(r->cell[8], 64, "%.3f", st->t_b * 1e3);
        snprintf(r->cell[9], 64, "%.3f", st->c_next * 1e3);
        int w = snprintf(mem[s], 64, "%.2f / %.2f", st->mem_pred / GIB,
                         d ? d->mem_bytes / GIB : 0.0);
        if (info && info->has_reserve && w > 0 && w < 64)
            snprintf(mem[s] + w, (size_t)(64 - w), ", %.2f",
                     (st->mem_pred - info->reserve_bytes) / 1048576.0);
        for (int j = 0; j < NCOL; j++)
            if ((int)strlen(r->cell[j]) > width[j])
                width[j] = (int)strlen(r->cell[j]);
        if ((int)strlen(mem[s]) > width[NCOL])
            width[NCOL] = (int)strlen(mem[s]);
    }
    /* Text columns left-aligned, numbers right-aligned. */
    static const int left[NCOL] = {0, 1, 1, 1, 1, 1, 0, 0, 0, 0};
    for (int j = 0; j < NCOL; j++)
        fprintf(f, "%s%*s", j ? "  " : "", left[j] ? -width[j] : width[j], head[j]);
    fprintf(f, "  %*s\n", width[NCOL], memhead);
    int total_w = 0;
    for (int j = 0; j <= NCOL; j++)
        total_w += width[j] + (j ? 2 : 0);
    for (int i = 0; i < total_w; i++)
        fputc('-', f);
    fputc('\n', f);
    for (int s = 0; s < nrows; s++) {
        for (int j = 0; j < NCOL; j++)
            fprintf(f, "%s%*s", j ? "  " : "", left[j] ? -width[j] : width[j], rows[s].cell[j]);
        fprintf(f, "  %*s\n", width[NCOL], mem[s]);
    }
    for (int i = 0; i < total_w; i++)
        fputc('-', f);
    fputc('\n', f);

    fprintf(f, "stages %d, devices used %ld of %d\n", p->nstages, devices_used, cluster_total_devices(c));
    fprintf(f, "t_max %.3f ms; objective (Eq. 13) %.3f ms; predicted iteration %.3f ms%s\n",
            p->t_max * 1e3, p->objective * 1e3, iter * 1e3,
            info && info->iteration_time > 0 ? "" : nev > 0 ? " (simulated)" : " (Eq. 13)");
    if (p->time_limited)
        fprintf(f, "search: stopped by the time limit: best plan found so far, not proven "
                "optimal\n");
    if (p->coarse_meshes)
        fprintf(f, "search: heuristic: %d mesh(es) searched in node groups (whole groups, no "
                "sub-node stages there)\n", p->coarse_meshes);
    fprintf(f, "throughput %.3f microbatches/s", iter > 0 ? p->microbatches / iter : 0.0);
    if (info && info->global_batch > 0 && iter > 0)
        fprintf(f, ", %.3f samples/s", info->global_batch / iter);
    if (info && info->global_batch > 0 && info->seq > 0 && iter > 0)
        fprintf(f, ", %.0f tokens/s", (double)info->global_batch * info->seq / iter);
    fputc('\n', f);
    fprintf(f, "eta (Eq. 25, per-device compute-time balance) %.1f %%\n", 100.0 * plan_eta(p, c));
    if (info && info->counters) {
        char line[512];
        cost_counters_summary(info->counters, line, sizeof line);
        fprintf(f, "%s\n", line);
    }
    for (int s = 0; s < nrows; s++) {
        const PlanStage *st = &p->stages[s];
        if (st->delta_beyond_paper)
            fprintf(f, "note: stage %d: c = %.3f ms > t_max = %.3f ms, which Eq. 2 excludes; "
                    "delta = ceil(1 + 2c/t_max) = %d (Eq. 11's form)\n",
                    s, st->c_next * 1e3, p->t_max * 1e3, st->delta);
        if (st->nparts > 1) {
            fprintf(f, "note: stage %d: one DP group over", s);
            for (int j = 0; j < st->nparts && j < PLAN_MAX_PARTS; j++)
                fprintf(f, "%s %d x %s (%.0f%% of the rows)", j ? " +" : "",
                        st->parts[j].devices, mesh_name(c, st->parts[j].mesh),
                        100 * st->parts[j].share);
            fputc('\n', f);
        }
        if (st->group > 0 || st->pipe > 0 || st->offload)
            fprintf(f, "note: stage %d:%s%.0d%s%.0d%s%.0d%s\n", s,
                    st->group > 0 ? " ministage group " : "", st->group,
                    st->pipe > 0 ? " pipeline " : "", st->pipe, st->pipe > 0 ? " of " : "",
                    st->npipes, st->offload ? " parameters and optimizer state offloaded to the host" : "");
    }
    free(rows);
    free(mem);
    return ferror(f) ? -1 : 0;
}

/* ---------------------------------------------------------------- timeline */

static int is_compute(char k)
{
    return tl_svg_is_compute(k);
}

static void event_name(const TimelineEvent *e, char *buf, size_t cap)
{
    tl_svg_event_name(e, buf, cap);
}

static void stage_label(const Plan *p, const ClusterSpec *c, int s, char *buf, size_t cap)
{
    if (s >= 0 && s < p->nstages) {
        const PlanStage *st = &p->stages[s];
        snprintf(buf, cap, "stage %d: %s (%d,%d) L%d-%d", s, mesh_name(c, st->mesh), st->sub.n,
                 st->sub.m, st->first_layer, st->last_layer);
    } else {
        snprintf(buf, cap, "stage %d", s);
    }
}

int timeline_write_json(FILE *f, const Plan *p, const ClusterSpec *c,
                        const TimelineEvent *ev, int nev)
{
    Jw w = {.f = f, .pretty = 0};
    char buf[256];
    jw_open(&w, '{');
    KSTR(&w, "displayTimeUnit", "ms");
    jw_key(&w, "traceEvents");
    jw_open(&w, '[');
    w.pretty = 1;   /* one event per line: diffable, still compact */
    /* Metadata: name each stage's process and its compute/comm threads. */
    for (int s = 0; s < p->nstages; s++) {
        stage_label(p, c, s, buf, sizeof buf);
        jw_open(&w, '{');
        w.pretty = 0;
        KSTR(&w, "name", "process_name");
        KSTR(&w, "ph", "M");
        KINT(&w, "pid", s);
        jw_key(&w, "args");
        jw_open(&w, '{');
        KSTR(&w, "name", buf);
        jw_close(&w, '}');
        jw_close(&w, '}');
        w.pretty = 1;
        for (int t = 0; t < 2; t++) {
            jw_open(&w, '{');
            w.pretty = 0;
            KSTR(&w, "name", "thread_name");
            KSTR(&w, "ph", "M");
            KINT(&w, "pid", s);
            KINT(&w, "tid", t);
            jw_key(&w, "args");
            jw_open(&w, '{');
            KSTR(&w, "name", t ? "comm" : "compute");
            jw_close(&w, '}');
            jw_close(&w, '}');
            w.pretty = 1;
        }
    }
    for (int i = 0; i < nev; i++) {
        const TimelineEvent *e = &ev[i];
        event_name(e, buf, sizeof buf);
        jw_open(&w, '{');
        w.pretty = 0;
        KSTR(&w, "name", buf);
        KSTR(&w, "cat", is_compute(e->kind) ? "compute" : "comm");
        KSTR(&w, "ph", "X");
        KINT(&w, "pid", e->stage);
        KINT(&w, "tid", is_compute(e->kind) ? 0 : 1);
        KNUM(&w, "ts", e->start * 1e6);
        KNUM(&w, "dur", (e->end - e->start) * 1e6);
        jw_key(&w, "args");
        jw_open(&w, '{');
        KINT(&w, "mb", e->mb);
        jw_close(&w, '}');
        jw_close(&w, '}');
        w.pretty = 1;
    }
    jw_close(&w, ']');
    w.pretty = 0;
    jw_close(&w, '}');
    fputc('\n', f);
    return ferror(f) ? -1 : 0;
}

/* The drawer is common/timeline_svg.h: the stage runtime draws a run's
 * measured timeline (trace.svg) with it, beside this predicted one. */
int timeline_write_svg(FILE *f, const Plan *p, const ClusterSpec *c,
                       const TimelineEvent *ev, int nev)
{
    double t0 = 0, t1 = 0;
    for (int i = 0; i < nev; i++) {
        if (ev[i].start < t0)
            t0 = ev[i].start;
        if (ev[i].end > t1)
            t1 = ev[i].end;
    }
    if (!(t1 > t0))
        t1 = t0 + 1e-3;
    char title[160];
    snprintf(title, sizeof title, "hetc timeline: %s, B = %d, one iteration (%.3f ms)",
             schedule_name(p->schedule), p->microbatches, (t1 - t0) * 1e3);
    int nst = p->nstages;
    char (*lab)[256] = calloc((size_t)(nst > 0 ? nst : 1), sizeof *lab);
    const char **labels = calloc((size_t)(nst > 0 ? nst : 1), sizeof *labels);
    if (!lab || !labels) {
        free(lab);
        free(labels);
        return -1;
    }
    for (int s = 0; s < nst; s++) {
        stage_label(p, c, s, lab[s], sizeof lab[s]);
        labels[s] = lab[s];
    }
    TlSvgPanel panel = {.title = NULL, .labels = labels, .nrows = nst, .ev = ev, .nev = nev};
    int rc = tl_svg_write(f, title, &panel, 1, 0);
    free(lab);
    free(labels);
    return rc;
}

/* ---------------------------------------------------------------- files */

typedef struct OutCtx {
    const Plan *p;
    const ClusterSpec *c;
    const PlanOutputInfo *info;
    const TimelineEvent *ev;
    int nev;
} OutCtx;

static int w_plan_json(FILE *f, const void *x)
{
    const OutCtx *o = x;
    return plan_write_json(f, o->p, o->c, o->info, o->ev, o->nev);
}

static int w_plan_txt(FILE *f, const void *x)
{
    const OutCtx *o = x;
    return plan_write_txt(f, o->p, o->c, o->info, o->ev, o->nev);
}

static int w_tl_json(FILE *f, const void *x)
{
    const OutCtx *o = x;
    return timeline_write_json(f, o->p, o->c, o->ev, o->nev);
}

static int w_tl_svg(FILE *f, const void *x)
{
    const OutCtx *o = x;
    return timeline_write_svg(f, o->p, o->c, o->ev, o->nev);
}

/* Write dir/name atomically (common/atomic_file.h): a reader never sees a
 * half-written plan, and the old one stays if writing fails. */
static int write_atomic(const char *dir, const char *name, AtomicWriteFn fn, const void *ctx,
                        IrError *err)
{
    char path[4096], msg[sizeof err->msg];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return ir_errorf(err, "%s/%s: path too long", dir, name);
    if (atomic_write_file(path, 0644, fn, ctx, msg, sizeof msg))
        return ir_errorf(err, "%s", msg);
    return 0;
}

int plan_write_outputs(const char *dir, const Plan *p, const ClusterSpec *c,
                       const PlanOutputInfo *info, const TimelineEvent *ev, int nev,
                       IrError *err)
{
    if (!dir || !p || !c)
        return ir_errorf(err, "plan output: missing folder, plan or cluster");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ir_errorf(err, "%s: cannot create folder: %s", dir, strerror(errno));
    OutCtx o = {p, c, info, ev, nev};
    if (write_atomic(dir, "plan.json", w_plan_json, &o, err) ||
        write_atomic(dir, "plan.txt", w_plan_txt, &o, err))
        return -1;
    if (nev > 0 && (write_atomic(dir, "timeline.json", w_tl_json, &o, err) ||
                    write_atomic(dir, "timeline.svg", w_tl_svg, &o, err)))
        return -1;
    return 0;
}
