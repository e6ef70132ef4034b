/* Event-driven simulation of the §4.2.1 DAG (HAPT, seed 004).  See simulate.h.
 *
 * Every resource runs a fixed sequence: a stage runs its action list in
 * order (E_comp); link i carries forward transfers in the order stage i
 * finishes its forwards and backward transfers in the order stage i+1
 * finishes its backwards (E_comm, full duplex).  So a transfer's start is
 * known the moment its producer finishes, and the whole iteration is one
 * sweep: advance any stage whose next action has its inputs (E_dep), until
 * every list is done or none can move (deadlock).
 */
#include "simulate.h"

#include <stdlib.h>
#include <string.h>

typedef struct EvBuf {
    TimelineEvent *v;
    int n, cap;
} EvBuf;

static int ev_push(EvBuf *b, int stage, char kind, int mb, double s, double e)
{
    if (b->n == b->cap) {
        int nc = b->cap ? 2 * b->cap : 256;
        TimelineEvent *v = realloc(b->v, (size_t)nc * sizeof *v);
        if (!v)
            return -1;
        b->v = v;
        b->cap = nc;
    }
    b->v[b->n++] = (TimelineEvent){stage, kind, mb, s, e};
    return 0;
}

static int ev_cmp(const void *pa, const void *pb)
{
    const TimelineEvent *a = pa, *b = pb;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    if (a->stage != b->stage)
        return a->stage - b->stage;
    if (a->kind != b->kind)
        return a->kind - b->kind;
    return a->mb - b->mb;
}

void sim_result_free(SimResult *r)
{
    if (!r)
        return;
    free(r->busy);
    free(r->bubble);
    free(r->comm_total);
    free(r->comm_hidden);
    free(r->peak_inflight);
    free(r->peak_act_mem);
    free(r->events);
    memset(r, 0, sizeof *r);
}

static double dmax(double a, double b) { return a > b ? a : b; }

/* Length of [a, b] covered by the sorted, disjoint intervals [s[k], e[k]). */
static double covered(const double *s, const double *e, int n, double a, double b)
{
    int lo = 0, hi = n;
    while (lo < hi) { /* first interval ending after a */
        int mid = (lo + hi) / 2;
        if (e[mid] <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    double tot = 0;
    for (int k = lo; k < n && s[k] < b; k++) {
        double x = dmax(s[k], a), y = e[k] < b ? e[k] : b;
        if (y > x)
            tot += y - x;
    }
    return tot;
}

/* Iteration time, hidden communication, busy time, bubbles and peak
 * in-flight microbatches from the recorded actions (as, ae) and events. */
static void sim_stats(const SimStage *st, int S, const Schedule *sched, const double *as,
                      const double *ae, const EvBuf *ev, SimResult *out)
{
    const int n = 2 * sched->B;
    double T = 0;
    for (int k = 0; k < ev->n; k++)
        T = dmax(T, ev->v[k].end);
    out->iter_time = T;
    double ct = 0, ch = 0;
    for (int k = 0; k < ev->n; k++) {
        const TimelineEvent *e = &ev->v[k];
        if (e->kind != 'S' && e->kind != 'R')
            continue;
        int to = e->kind == 'S' ? e->stage + 1 : e->stage - 1;
        double len = e->end - e->start;
        double hid = covered(as + (size_t)to * n, ae + (size_t)to * n, n, e->start, e->end);
        out->comm_total[e->stage] += len;
        out->comm_hidden[e->stage] += hid;
        ct += len;
        ch += hid;
    }
    out->overlap = ct > 0 ? ch / ct : 1.0;
    for (int i = 0; i < S; i++) {
        int infl = 0, peak = 0;
        for (int k = 0; k < n; k++) {
            out->busy[i] += ae[(size_t)i * n + k] - as[(size_t)i * n + k];
            /* in flight: F done, B not yet started */
            infl += sched->actions[i][k].kind == 'F' ? 1 : -1;
            if (infl > peak)
                peak = infl;
        }
        out->peak_inflight[i] = peak;
        out->peak_act_mem[i] = peak * st[i].mem_act + st[i].mem_static;
        out->bubble[i] = T > 0 ? 1.0 - out->busy[i] / T : 0.0;
    }
}

int simulate(const SimStage *st, int S, const Schedule *sched, SimResult *out, IrError *err)
{
    memset(out, 0, sizeof *out);
    if (S <= 0 || !st || !sched || sched->S != S || sched->B <= 0)
        return ir_errorf(err, "simulate: %d stages given, schedule has %d", S, sched ? sched->S : -1);
    const int B = sched->B, n = 2 * B;
    size_t sb = (size_t)S * B, sn = (size_t)S * n;
    double *fend = malloc(sb * sizeof *fend), *recv_f = malloc(sb * sizeof *recv_f);
    double *recv_b = malloc(sb * sizeof *recv_b);
    double *as = malloc(sn * sizeof *as), *ae = malloc(sn * sizeof *ae);
    double *free_at = calloc((size_t)S, sizeof *free_at);
    double *linkf = calloc((size_t)S, sizeof *linkf), *linkb = calloc((size_t)S, sizeof *linkb);
    int *pc = calloc((size_t)S, sizeof *pc);
    EvBuf ev = {0};
    int rc = -1;
    out->nstages = S;
    out->busy = calloc((size_t)S, sizeof *out->busy);
    out->bubble = calloc((size_t)S, sizeof *out->bubble);
    out->comm_total = calloc((size_t)S, sizeof *out->comm_total);
    out->comm_hidden = calloc((size_t)S, sizeof *out->comm_hidden);
    out->peak_inflight = calloc((size_t)S, sizeof *out->peak_inflight);
    out->peak_act_mem = calloc((size_t)S, sizeof *out->peak_act_mem);
    if (!fend || !recv_f || !recv_b || !as || !ae || !free_at || !linkf || !linkb || !pc ||
        !out->busy || !out->bubble || !out->comm_total || !out->comm_hidden ||
        !out->peak_inflight || !out->peak_act_mem) {
        ir_errorf(err, "simulate: out of memory (S = %d, B = %d)", S, B);
        goto done;
    }
    for (size_t x = 0; x < sb; x++)
        fend[x] = recv_f[x] = recv_b[x] = -1.0;

    long remaining = (long)sn;
    while (remaining > 0) {
        int progress = 0;
        for (int i = 0; i < S; i++) {
            while (pc[i] < n) {
                SchedAction a = sched->actions[i][pc[i]];
                if (a.mb < 0 || a.mb >= B) {
                    ir_errorf(err, "simulate: stage %d action %d names microbatch %d of %d", i,
                              pc[i], a.mb, B);
                    goto done;
                }
                size_t x = (size_t)i * B + a.mb;
                double ready;
                if (a.kind == 'F') {
                    if (i > 0 && recv_f[x] < 0)
                        break;
                    ready = i > 0 ? recv_f[x] : 0.0;
                } else if (a.kind == 'B') {
                    if (fend[x] < 0 || (i < S - 1 && recv_b[x] < 0))
                        break;
                    ready = i < S - 1 ? dmax(fend[x], recv_b[x]) : fend[x];
                } else {
                    ir_errorf(err, "simulate: stage %d action %d has kind '%c'", i, pc[i], a.kind);
                    goto done;
                }
                double s = dmax(free_at[i], ready);
                double d = a.kind == 'F' ? st[i].t_f : st[i].t_b;
                double e = s + d;
                free_at[i] = e;
                as[(size_t)i * n + pc[i]] = s;
                ae[(size_t)i * n + pc[i]] = e;
                if (ev_push(&ev, i, a.kind, a.mb, s, e))
                    goto oom;
                if (a.kind == 'F') {
                    fend[x] = e;
                    if (i < S - 1) { /* C^F_{mb,i} on link i, forward direction */
                        double cs = dmax(e, linkf[i]), ce = cs + st[i].c_next;
                        linkf[i] = ce;
                        recv_f[x + B] = ce;
                        if (st[i].c_next > 0 && ev_push(&ev, i, 'S', a.mb, cs, ce))
                            goto oom;
                    }
                } else if (i > 0) { /* C^B_{mb,i-1} on link i-1, backward direction */
                    double cs = dmax(e, linkb[i - 1]), ce = cs + st[i - 1].c_back;
                    linkb[i - 1] = ce;
                    recv_b[x - B] = ce;
                    if (st[i - 1].c_back > 0 && ev_push(&ev, i, 'R', a.mb, cs, ce))
                        goto oom;
                }
                pc[i]++;
                remaining--;
                progress = 1;
            }
        }
        if (!progress) {
            int i = 0;
            while (i < S && pc[i] >= n)
                i++;
            SchedAction a = sched->actions[i][pc[i]];
            ir_errorf(err, "simulate: deadlock: stage %d waits at action %d (%c%d) for an input "
                      "no stage can produce under this schedule", i, pc[i], a.kind, a.mb);
            goto done;
        }
    }

    /* DP gradient all-reduce after each stage's last backward. */
    for (int i = 0; i < S; i++)
        if (st[i].t_sync > 0 &&
            ev_push(&ev, i, 'A', -1, free_at[i], free_at[i] + st[i].t_sync))
            goto oom;

    sim_stats(st, S, sched, as, ae, &ev, out);
    qsort(ev.v, (size_t)ev.n, sizeof *ev.v, ev_cmp);
    out->events = ev.v;
    out->nevents = ev.n;
    ev.v = NULL;
    rc = 0;
    goto done;
oom:
    ir_errorf(err, "simulate: out of memory recording events");
done:
    free(fend);
    free(recv_f);
    free(recv_b);
    free(as);
    free(ae);
    free(free_at);
    free(linkf);
    free(linkb);
    free(pc);
    free(ev.v);
    if (rc)
        sim_result_free(out);
    return rc;
}

int simulate_plan(const Plan *p, const double *sync_times, SimResult *out, IrError *err)
{
    memset(out, 0, sizeof *out);
    if (!p || p->nstages <= 0 || p->microbatches <= 0)
        return ir_errorf(err, "simulate: empty plan");
    int S = p->nstages;
    SimStage *st = calloc((size_t)S, sizeof *st);
    int *N = calloc((size_t)S, sizeof *N);
    if (!st || !N) {
        free(st);
        free(N);
        return ir_errorf(err, "simulate: out of memory");
    }
    for (int i = 0; i < S; i++) {
        const PlanStage *ps = &p->stages[i];
        st[i].t_f = ps->t_f;
        st[i].t_b = ps->t_b;
        st[i].c_next = st[i].c_back = i < S - 1 ? ps->c_next : 0.0;
        st[i].t_sync = sync_times ? sync_times[i] : 0.0;
        N[i] = ps->warmup;
    }
    Schedule sc;
    int rc = schedule_build(S, p->microbatches, N, &sc, err);
    if (rc == 0) {
        rc = simulate(st, S, &sc, out, err);
        schedule_free(&sc);
    }
    free(st);
    free(N);
    return rc;
}
