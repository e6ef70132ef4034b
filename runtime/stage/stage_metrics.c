/* Metrics and measured timelines of a pipeline run (docs/TRAINING.md).
 *
 * Every rank sums, per step, where its time went: compute (the forward,
 * backward and update functions less the sends and receives they made),
 * communication (sends, completing them, the gradient and loss
 * all-reduces) and bubble (blocked in a receive: the peer stage had not
 * produced the value yet -- MPI cannot tell the wait from the transfer, so
 * the transfer time of a received value counts here too).  One gather per
 * step brings every rank's sums to the printer (the last stage's first
 * rank), which writes the step's metrics.jsonl line.  With --trace every
 * rank also records its spans on the monotonic clock, from a common origin
 * set after a barrier; the printer gathers them at the end and writes a
 * Chrome trace (one process per rank) and trace.svg: the last step as
 * measured under the plan's predicted iteration (the `ptl` records), drawn
 * by the planner's timeline drawer (common/timeline_svg.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stage_internal.h"

/* Spans kept per rank: a ring of the newest met.cap (--trace-spans, 131072 =
 * 3 MiB by default), allocated at setup, so tracing is on by default and the
 * step loop allocates nothing; a run longer than the ring keeps its last
 * steps (trace.svg draws the last). */

double stage_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void stage_span(StageRt *rt, char k, int mb, double t0, double t1) {
    StageMet *m = &rt->met;
    if (!m->trace || !m->spans) return;
    /* a validation forward's sends and receives: lower case, so the
     * measured step drawn in trace.svg is the training step alone */
    if (rt->in_val && k >= 'A' && k <= 'Z' && k != 'V') k = (char)(k - 'A' + 'a');
    m->spans[m->nspans % m->cap] =
        (StageSpan){.t0 = t0 - m->origin, .t1 = t1 - m->origin,
                    .step = (int32_t)(rt->step + 1), .mb = (int16_t)mb, .kind = k};
    m->nspans++;
}

static int is_printer(const StageRt *rt) {
    return rt->cfg.stage == rt->cfg.nstages - 1 && rt->ctx.dp_rank == 0 && rt->ctx.tp_rank == 0;
}

int stage_met_setup(StageRt *rt) {
    int r = is_printer(rt) ? rt->ctx.world_rank : -1;
    if (rt_allreduce(&rt->ctx, MPI_COMM_WORLD, &r, 1, MPI_INT, MPI_MAX, "printer rank"))
        return -1;
    rt->met.root = r;
    if (rt->met.trace) {
        rt->met.spans = malloc((size_t)rt->met.cap * sizeof *rt->met.spans);
        if (!rt->met.spans) {
            rt_log_error("trace: out of memory for %lld spans", (long long)rt->met.cap);
            return -1;
        }
    }
    if (rt_barrier(&rt->ctx, "trace clock origin")) return -1;
    rt->met.origin = stage_now();
    return 0;
}

enum { M_STAGE, M_COMPUTE, M_COMM, M_BUBBLE, M_STEP, M_FLOPS, M_PEAK, M_ARENA, M_RSS, M_N };

int stage_met_step(StageRt *rt, const RtStepMetrics *base, double step_s) {
    StageMet *m = &rt->met;
    const StageConfig *c = &rt->cfg;
    double v[M_N] = {[M_STAGE] = c->stage, [M_COMPUTE] = m->compute, [M_COMM] = m->comm,
                     [M_BUBBLE] = m->bubble, [M_STEP] = step_s,
                     [M_FLOPS] = c->flops_mb * (double)c->accum, [M_PEAK] = c->peak_flops,
                     [M_ARENA] = (double)rt->desc->arena_bytes, [M_RSS] = rt_peak_rss_bytes()};
    m->compute = m->comm = m->bubble = 0;
    if (!m->metrics) return 0;
    int me = rt->ctx.world_rank, n = rt->ctx.world_size;
    int S = c->nstages;
    if (me == m->root && !m->all) {
        m->all = calloc((size_t)n * M_N, sizeof *m->all);
        m->st = calloc((size_t)S, sizeof *m->st);
        m->step_sum = calloc((size_t)S, sizeof *m->step_sum);
        if (!m->all || !m->st || !m->step_sum) return -1;
    }
    double *all = me == m->root ? m->all : NULL;
    if (rt_gather(&rt->ctx, v, M_N, MPI_DOUBLE, all, m->root, "the metrics gather")) {
        rt_log_error("the metrics gather of step %lld failed", (long long)base->step);
        return -1;
    }
    if (me != m->root) return 0;
    RtStageTimes *st = m->st;
    double *step_sum = m->step_sum;
    memset(st, 0, (size_t)S * sizeof *st);
    memset(step_sum, 0, (size_t)S * sizeof *step_sum);
    RtStepMetrics sm = *base;
    sm.step_s = step_s; /* the printer's wall time of the step */
    sm.flops = 0, sm.peak_flops = 0;
    for (int r = 0; r < n && st && step_sum; r++) {
        const double *x = all + (size_t)r * M_N;
        int s = (int)x[M_STAGE];
        if (s < 0 || s >= S) continue;
        RtStageTimes *t = &st[s];
        t->stage = s;
        t->ranks++;
        t->compute_s += x[M_COMPUTE];
        t->comm_s += x[M_COMM];
        t->bubble_s += x[M_BUBBLE];
        step_sum[s] += x[M_STEP];
        if (x[M_ARENA] > t->arena_bytes) t->arena_bytes = x[M_ARENA];
        if (x[M_RSS] > t->peak_rss_bytes) t->peak_rss_bytes = x[M_RSS];
        sm.flops += x[M_FLOPS];
        sm.peak_flops += x[M_PEAK];
    }
    int rc = -1;
    if (st && step_sum) {
        for (int s = 0; s < S; s++) {
            RtStageTimes *t = &st[s];
            double k = t->ranks ? (double)t->ranks : 1;
            t->stage = s;
            t->compute_s /= k, t->comm_s /= k, t->bubble_s /= k;
            t->other_s = step_sum[s] / k - t->compute_s - t->comm_s - t->bubble_s;
            if (t->other_s < 0) t->other_s = 0;
        }
        sm.stages = st, sm.nstages = S;
        sm.mfu_nominal = stage_be_is_host();
        rc = rt_metrics_step(&m->out, &sm);
        if (rc) rt_log_error("cannot write the metrics line of step %lld", (long long)sm.step);
    }
    return rc;
}

void stage_met_free(StageRt *rt) {
    StageMet *m = &rt->met;
    free(m->all), free(m->st), free(m->step_sum);
    m->all = m->step_sum = NULL, m->st = NULL;
}

/* ------------------------------------------------------------ trace files */

static const char *span_word(char k) {
    switch (k) {
    case 'F': return "F";
    case 'B': return "B";
    case 'S': return "send act";
    case 'R': return "send grad";
    case 'W': return "recv wait";
    case 'Q': return "send complete";
    case 'A': return "grad all-reduce";
    case 'U': return "update";
    case 'V': return "val F";
    default: return "?";
    }
}

static int span_is_compute(char k) { return k == 'F' || k == 'B' || k == 'U' || k == 'V'; }

static int write_chrome(FILE *f, const StageSpan *sp, const int64_t *cnt, const int *stage,
                        int n) {
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
    int first = 1;
    for (int r = 0; r < n; r++) {
        fprintf(f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":"
                   "\"rank %d: stage %d\"}},\n",
                first ? "" : "", r, r, stage[r]);
        fprintf(f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":"
                   "{\"sort_index\":%d}},\n", r, r);
        for (int t = 0; t < 2; t++)
            fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":"
                       "{\"name\":\"%s\"}},\n", r, t, t ? "comm" : "compute");
        first = 0;
    }
    int64_t off = 0, done = 0, total = 0;
    for (int r = 0; r < n; r++) total += cnt[r];
    for (int r = 0; r < n; r++) {
        for (int64_t i = 0; i < cnt[r]; i++, done++) {
            const StageSpan *s = &sp[off + i];
            char name[48];
            int val = s->kind >= 'a' && s->kind <= 'z';
            char up = val ? (char)(s->kind - 'a' + 'A') : s->kind;
            if (s->mb >= 0) snprintf(name, sizeof name, "%s%s%s%d", val ? "val " : "",
                                     span_word(up), span_is_compute(up) ? "" : " ", s->mb);
            else snprintf(name, sizeof name, "%s%s", val ? "val " : "", span_word(up));
            fprintf(f, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                       "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%d,\"mb\":%d,\"kind\":\"%c\"}}"
                       "%s\n",
                    name, span_is_compute(s->kind) ? "compute" : "comm", r,
                    span_is_compute(s->kind) ? 0 : 1, s->t0 * 1e6, (s->t1 - s->t0) * 1e6,
                    s->step, s->mb, s->kind, done + 1 < total ? "," : "");
        }
        off += cnt[r];
    }
    fputs("]}\n", f);
    return ferror(f) ? -1 : 0;
}

/* trace.svg: the last step every rank recorded, one row per rank, under the
 * plan's predicted iteration (one row per stage). */
static int write_svg(FILE *f, const StageRt *rt, const StageSpan *sp, const int64_t *cnt,
                     const int *stage, int n) {
    int32_t last = 0;
    int64_t total = 0;
    for (int r = 0; r < n; r++) total += cnt[r];
    for (int64_t i = 0; i < total; i++)
        if (sp[i].step > last && sp[i].kind != 'V') last = sp[i].step;
    TlSvgEvent *ev = calloc((size_t)(total ? total : 1), sizeof *ev);
    char (*lab)[64] = calloc((size_t)n, sizeof *lab);
    const char **labels = calloc((size_t)n, sizeof *labels);
    int nst = rt->cfg.nstages;
    char (*plab)[32] = calloc((size_t)nst, sizeof *plab);
    const char **plabels = calloc((size_t)nst, sizeof *plabels);
    if (!ev || !lab || !labels || !plab || !plabels) {
        free(ev), free(lab), free(labels), free(plab), free(plabels);
        return -1;
    }
    int nev = 0;
    double t0 = INFINITY, t1 = -INFINITY;
    int64_t off = 0;
    for (int r = 0; r < n; r++) {
        snprintf(lab[r], sizeof lab[r], "rank %d: stage %d (measured)", r, stage[r]);
        labels[r] = lab[r];
        for (int64_t i = 0; i < cnt[r]; i++) {
            const StageSpan *s = &sp[off + i];
            if (s->step != last) continue;
            char k = s->kind;
            if (k != 'F' && k != 'B' && k != 'S' && k != 'R' && k != 'W' && k != 'A') continue;
            ev[nev++] = (TlSvgEvent){.stage = r, .kind = k, .mb = k == 'A' ? -1 : s->mb,
                                     .start = s->t0, .end = s->t1};
            if (s->t0 < t0) t0 = s->t0;
            if (s->t1 > t1) t1 = s->t1;
        }
        off += cnt[r];
    }
    for (int i = 0; i < nev; i++) ev[i].start -= t0, ev[i].end -= t0;
    double pend = 0;
    for (int i = 0; i < rt->cfg.nptl; i++)
        if (rt->cfg.ptl[i].end > pend) pend = rt->cfg.ptl[i].end;
    for (int s = 0; s < nst; s++) {
        snprintf(plab[s], sizeof plab[s], "stage %d (predicted)", s);
        plabels[s] = plab[s];
    }
    char title[256], t_meas[96], t_pred[96];
    snprintf(title, sizeof title, "hetc: step %d as measured (%.3f ms) and the plan's predicted "
             "iteration (%.3f ms)", last, nev ? (t1 - t0) * 1e3 : 0.0, pend * 1e3);
    snprintf(t_pred, sizeof t_pred, "predicted (the plan's timeline.svg, its own time scale)%s",
             rt->cfg.nptl ? "" : ": not in this binary (an older hetc compile)");
    snprintf(t_meas, sizeof t_meas, "measured: step %d, one row per rank", last);
    TlSvgPanel pn[2] = {
        {.title = t_pred, .labels = plabels, .nrows = nst, .ev = rt->cfg.ptl, .nev = rt->cfg.nptl},
        {.title = t_meas, .labels = labels, .nrows = n, .ev = ev, .nev = nev}};
    int rc = tl_svg_write(f, title, pn, 2, 1); /* each on its own time scale */
    free(ev), free(lab), free(labels), free(plab), free(plabels);
    return rc;
}

static int write_file(const char *path, int (*fn)(FILE *, const void *), const void *ctx) {
    char err[512];
    if (rt_mkdirs_for(path, err, sizeof err)) {
        rt_log_error("--trace: %s", err);
        return -1;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        rt_log_error("--trace: cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    int rc = fn(f, ctx);
    if (fclose(f) || rc) {
        rt_log_error("--trace: writing '%s' failed", path);
        return -1;
    }
    return 0;
}

typedef struct TraceCtx {
    const StageRt *rt;
    const StageSpan *sp;
    const int64_t *cnt;
    const int *stage;
    int n;
} TraceCtx;

static int w_chrome(FILE *f, const void *x) {
    const TraceCtx *t = x;
    return write_chrome(f, t->sp, t->cnt, t->stage, t->n);
}
static int w_svg(FILE *f, const void *x) {
    const TraceCtx *t = x;
    return write_svg(f, t->rt, t->sp, t->cnt, t->stage, t->n);
}

int stage_met_finish(StageRt *rt, const char *trace_json, const char *trace_svg) {
    StageMet *m = &rt->met;
    if (!m->trace) return 0;
    int me = rt->ctx.world_rank, n = rt->ctx.world_size, root = m->root;
    if (m->nspans > m->cap) { /* the ring wrapped: oldest first, the older ones dropped */
        int64_t head = m->nspans % m->cap;
        StageSpan *ord = malloc((size_t)m->cap * sizeof *ord);
        if (!ord) {
            rt_log_error("trace: out of memory ordering %lld spans", (long long)m->cap);
            return -1;
        }
        memcpy(ord, m->spans + head, (size_t)(m->cap - head) * sizeof *ord);
        memcpy(ord + (m->cap - head), m->spans, (size_t)head * sizeof *ord);
        free(m->spans);
        m->spans = ord;
        m->dropped = m->nspans - m->cap;
        m->nspans = m->cap;
    }
    long long mine[3] = {m->nspans, rt->cfg.stage, m->dropped};
    long long *all = me == root ? calloc((size_t)n * 3, sizeof *all) : NULL;
    if (rt_gather(&rt->ctx, mine, 3, MPI_LONG_LONG, all, root, "--trace: span counts")) {
        free(all);
        rt_log_error("--trace: the span count gather failed");
        return -1;
    }
    int *bytes = NULL, *displ = NULL, *stage = NULL;
    int64_t *cnt = NULL;
    StageSpan *sp = NULL;
    int rc = 0;
    if (me == root) {
        bytes = calloc((size_t)n, sizeof *bytes);
        displ = calloc((size_t)n, sizeof *displ);
        stage = calloc((size_t)n, sizeof *stage);
        cnt = calloc((size_t)n, sizeof *cnt);
        int64_t total = 0;
        for (int r = 0; r < n; r++) total += all[3 * r];
        sp = malloc((size_t)(total ? total : 1) * sizeof *sp);
        if (!bytes || !displ || !stage || !cnt || !sp ||
            total * (int64_t)sizeof *sp > INT32_MAX) {
            rt_log_error("--trace: %lld spans do not fit one gather", (long long)total);
            rc = -1;
            total = 0; /* still take part in the gather below, receiving nothing */
        }
        int64_t o = 0;
        for (int r = 0; r < n && bytes && displ && cnt && stage; r++) {
            cnt[r] = rc ? 0 : all[3 * r];
            stage[r] = (int)all[3 * r + 1];
            bytes[r] = (int)(cnt[r] * (int64_t)sizeof *sp);
            displ[r] = (int)o;
            o += bytes[r];
            if (all[3 * r + 2] > 0)
                fprintf(stderr, "note: trace: rank %d keeps its newest %lld spans (%lld older "
                        "ones dropped)\n", r, all[3 * r], all[3 * r + 2]);
        }
    }
    /* a root that could not allocate still receives (nothing: counts 0) */
    int sendb = (int)(m->nspans * (int64_t)sizeof *m->spans);
    if (me == root && rc) sendb = 0;
    if (rt_gatherv(&rt->ctx, m->spans, sendb, MPI_BYTE, sp, bytes, displ, root,
                   "--trace: spans")) {
        rt_log_error("--trace: the span gather failed");
        rc = -1;
    }
    if (me == root && !rc) {
        TraceCtx t = {.rt = rt, .sp = sp, .cnt = cnt, .stage = stage, .n = n};
        rc = write_file(trace_json, w_chrome, &t);
        if (!rc) rc = write_file(trace_svg, w_svg, &t);
    }
    free(all), free(bytes), free(displ), free(stage), free(cnt), free(sp);
    free(m->spans);
    m->spans = NULL, m->nspans = m->cap = 0;
    return rc;
}
