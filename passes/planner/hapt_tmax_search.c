/* HAPT's t_max search within one mesh order: the window of t_max that can
 * still beat the best plan (the high side's cut by lower bounds; the low
 * side, the smallest t_max any plan could use, found by probes of the
 * feasibility DPs: galloping, bisecting, a (threads + 1)-ary search on
 * threads). */
#include "hapt_dp_impl.h"

#include <pthread.h>

/* Both filters of the low side; monotone in tmax, so binary-searchable. */
int tmax_possible(const Ctx *x, const Order *od, double tmax, Work *w)
{
    double t0 = cpu_s();
    w->n_relaxed++;
    int ok = dp_relaxed(x, od, tmax, 1, w->G) < INF;
    if (ok) {
        w->n_feasible++;
        ok = dp_feasible(x, od, tmax, w->Nm, w->Sm);
    }
    w->t_low += cpu_s() - t0;
    return ok;
}

/* The smallest candidate index in [lo0, limit) that dp_pareto accepts
 * (H-1F1B with memory checks; other schedules: dp_feasible's stage count
 * is already exact, return lo0), or limit when none does (the caller's
 * high-side cut then prunes the rest).  Galloping then bisecting, which
 * needs monotonicity: exact feasibility has it, so if any probe's front
 * overflowed the answer falls back to lo0 (every full DP from lo0 up runs,
 * as before). */
int exact_low(const Ctx *x, const Order *od, int lo0, int limit, Work *w)
{
    if (x->opt->schedule != SCHED_H1F1B || !x->opt->check_memory || !w->Fr)
        return lo0;
    int o;
    int hi = lo0, step = 1, prev = lo0 - 1; /* prev: known infeasible (or lo0 - 1) */
    for (;;) {
        double t0 = cpu_s();
        int ok = dp_pareto(x, od, x->tcand[hi], w, &o);
        w->n_pareto++;
        w->t_low += cpu_s() - t0;
        if (o)
            return lo0;
        if (ok)
            break;
        prev = hi;
        if (hi == limit - 1)
            return limit; /* nothing feasible below the high-side cut */
        hi = hi + step < limit - 1 ? hi + step : limit - 1;
        step *= 2;
    }
    int a = prev + 1, b = hi; /* first feasible in [a, b]; b is feasible */
    while (a < b) {
        int mid = a + (b - a) / 2;
        double t0 = cpu_s();
        int ok = dp_pareto(x, od, x->tcand[mid], w, &o);
        w->n_pareto++;
        w->t_low += cpu_s() - t0;
        if (o)
            return lo0;
        if (ok)
            b = mid;
        else
            a = mid + 1;
    }
    return a;
}

/* The smallest index in [a, b] where tmax_possible holds, b known to hold
 * (added by "plan5").  A (threads + 1)-ary search: each round probes
 * `threads` points at once, one per thread with its own tables; feasibility
 * is monotone in t_max, so the answer is the binary search's for any thread
 * count (one thread: exactly the binary search). */
typedef struct ProbeJob {
    const Ctx *x;
    const Order *od;
    double tmax;
    Work *w;
    int ok;
    int pareto;             /* 0: tmax_possible; 1: dp_pareto (exact, may overflow);
                               2: dp_relaxed only, its value in val */
    int ovf;                /* dp_pareto's front overflowed: ok means nothing */
    double val;
} ProbeJob;

static void *probe_main(void *arg)
{
    ProbeJob *j = arg;
    if (j->pareto == 2) {
        double t0 = cpu_s();
        j->val = dp_relaxed(j->x, j->od, j->tmax, 1, j->w->G);
        j->ok = j->val < INF;
        j->w->n_relaxed++;
        j->w->t_low += cpu_s() - t0;
    } else if (j->pareto) {
        double t0 = cpu_s();
        j->ok = dp_pareto(j->x, j->od, j->tmax, j->w, &j->ovf);
        j->w->n_pareto++;
        j->w->t_low += cpu_s() - t0;
    } else {
        j->ok = tmax_possible(j->x, j->od, j->tmax, j->w);
    }
    return NULL;
}

/* One probe of either kind on ws[0] (no thread). */
static int probe_one(const Ctx *x, const Order *od, double tmax, Work *w, int pareto, int *ovf)
{
    ProbeJob pj = {x, od, tmax, w, 0, pareto, 0, 0};
    probe_main(&pj);
    *ovf = pj.ovf;
    return pj.ok;
}

/* dp_pareto at tmax on w: returns whether it holds, *ovf, and *lb = a lower
 * bound of F at tmax where it holds.  Its bound needs no dp_relaxed beside it
 * (as it had, on a second thread): the Pareto DP's transitions are a subset
 * of the relaxed DP's (an admitted front entry has K >= K1, the relaxed
 * filter; the last stages are the same), summed in the same order, so by
 * induction over the rows its Fm >= the relaxed G at every state, and the
 * larger of the two is Fm.  Only where a front overflowed is the relaxed DP
 * run, its bound taken as before (at least 0).  Where dp_pareto fails
 * (exactly infeasible) *lb is INF, which no caller reads. */
int probe_bound(const Ctx *x, const Order *od, double tmax, Work *w, int *ovf, double *lb)
{
    int ok = probe_one(x, od, tmax, w, 1, ovf);
    if (!*ovf) {
        *lb = ok ? pareto_lb(x, od, w->Fm) : INF;
        return ok;
    }
    ProbeJob pr = {x, od, tmax, w, 0, 2, 0, 0}; /* the relaxed DP */
    probe_main(&pr);
    *lb = pr.val > 0.0 ? pr.val : 0.0;
    return ok;
}

/* The smallest index in [a, limit) where dp_pareto holds, or limit when
 * none does, by galloping up from a then bisecting (monotone); used where
 * no plan is known yet, so the range runs to the largest t_max, whose
 * probes cost the most, and the answer is usually near a.  *ovf: a front
 * overflowed (the answer is void). */
int gallop_pareto(const Ctx *x, const Order *od, int a, int limit, Work *w, int *ovf)
{
    int hi = a, step = 1, prev = a - 1; /* prev: known infeasible (or a - 1) */
    for (;;) {
        if (probe_one(x, od, x->tcand[hi], w, 1, ovf))
            break;
        if (*ovf)
            return limit;
        prev = hi;
        if (hi == limit - 1)
            return limit;
        hi = hi + step < limit - 1 ? hi + step : limit - 1;
        step *= 2;
    }
    if (*ovf)
        return limit;
    int lo = prev + 1; /* first feasible in [lo, hi]; hi is feasible */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (probe_one(x, od, x->tcand[mid], w, 1, ovf))
            hi = mid;
        else
            lo = mid + 1;
        if (*ovf)
            return limit;
    }
    return lo;
}

/* pareto: probe with dp_pareto (exact feasibility, which is monotone too);
 * *ovf is set when any probe's front overflowed (the answer is then void). */
int search_low(const Ctx *x, const Order *od, int a, int b, Work *ws, int nthreads,
               int pareto, int *ovf)
{
    *ovf = 0;
    if (nthreads > 64)
        nthreads = 64;
    while (a < b) {
        int n = nthreads < b - a ? nthreads : b - a;
        int mid[64];
        ProbeJob pj[64] = {0};
        pthread_t th[64];
        int started[64] = {0};
        for (int t = 0; t < n; t++) {
            mid[t] = a + (int)((long)(b - a) * (t + 1) / (n + 1)); /* in [a, b - 1], ascending */
            pj[t] = (ProbeJob){x, od, x->tcand[mid[t]], &ws[t], 0, pareto, 0, 0};
        }
        for (int t = 1; t < n; t++)
            started[t] = pthread_create(&th[t], NULL, probe_main, &pj[t]) == 0;
        probe_main(&pj[0]);
        for (int t = 1; t < n; t++) {
            if (started[t])
                pthread_join(th[t], NULL);
            else
                probe_main(&pj[t]); /* no thread: the same probe here */
        }
        for (int t = 0; t < n; t++)
            if (pj[t].ovf) {
                *ovf = 1;
                return b;
            }
        int first = n; /* first probe that holds */
        for (int t = 0; t < n && first == n; t++)
            if (pj[t].ok)
                first = t;
        if (first < n) {
            b = mid[first];
            if (first > 0)
                a = mid[first - 1] + 1;
        } else {
            a = mid[n - 1] + 1;
        }
    }
    return a;
}

/* The first q in [c0, c1) with (B-1) t_q + lb >= best, or c1 (ascending
 * t_q: the high side's cut). */
int first_cut(const Ctx *x, int c0, int c1, double lb, double best)
{
    while (c0 < c1) {
        int mid = c0 + (c1 - c0) / 2;
        if ((double)(x->B - 1) * x->tcand[mid] + lb >= best)
            c1 = mid;
        else
            c0 = mid + 1;
    }
    return c0;
}

/* The first q in [b0, b1] with t_q >= bn, or b1. */
static int first_at_least(const Ctx *x, int b0, int b1, double bn)
{
    while (b0 < b1) {
        int mid = b0 + (b1 - b0) / 2;
        if (x->tcand[mid] >= bn)
            b1 = mid;
        else
            b0 = mid + 1;
    }
    return b0;
}

/* (b) high side first: Eq. 13 >= (B-1) t_max + LB for every plan (LB: the
 * relaxed DP without filters), so once a plan is known only the t_max
 * below the cut can improve on it.  Feasibility is monotone in t_max: one
 * probe at cut - 1 tells whether any of them is feasible, and the search
 * for the smallest feasible one needs to look below the cut only.
 * (Searching the whole range first, as before, gave the same plan: every
 * t_max at or above the cut is pruned, every one below the smallest
 * feasible is skipped.)  Where dp_pareto applies (H-1F1B with memory
 * checks) it answers exact feasibility directly (added by "dp-speed": the
 * relaxed and feasibility probes first, as before, only where its front
 * overflows; the smallest exactly feasible t_max is the same).  Returns
 * the cut; *any: some t_max below it may be feasible (decided where
 * *use_pareto stays set); *galloped: the smallest exactly feasible one
 * where no plan was known yet (-1: not searched). */
static int order_high(Search *S, const OrderKey *k, int *use_pareto, int *galloped, int *any)
{
    const Ctx *x = &S->x;
    const Order *od = &S->od;
    const double best = S->best;
    int cut = x->ntcand;
    if (k->key == INF || (best < INF && k->key >= best))
        cut = 0; /* no layout at all, or none that can beat the best */
    else if (best < INF)
        cut = first_cut(x, 0, x->ntcand, k->lb, best);
    *use_pareto = S->ws[0].Fr != NULL;
    *any = 0;
    *galloped = -1;
    if (cut > 0 && *use_pareto && best == INF) {
        /* no plan yet: gallop up from the bottleneck rather than probe
         * the largest t_max first */
        int ovf, b0 = first_at_least(x, 0, cut - 1, k->bn);
        *galloped = gallop_pareto(x, od, b0, cut, &S->ws[0], &ovf);
        if (ovf)
            *use_pareto = 0, *galloped = -1;
        else
            *any = *galloped < cut;
    } else if (cut > 0 && *use_pareto) {
        int ovf;
        double lbt;
        *any = probe_bound(x, od, x->tcand[cut - 1], &S->ws[0], &ovf, &lbt);
        if (ovf)
            *use_pareto = 0;
        /* (added by "dp-speed") the cut from the top: every t_max
         * below the probe has (B-1) t + F >= (B-1) t + LB(top) (LB:
         * the relaxed DP and dp_pareto's bound at the probe, both
         * non-increasing in t_max), so the t_max where that reaches
         * best are cut as well; repeat at the new cut while it moves. */
        while (*any && *use_pareto) {
            int c0 = first_cut(x, 0, cut, lbt, best);
            if (c0 == cut)
                break;
            cut = c0;
            if (cut == 0 || x->tcand[cut - 1] < k->bn) {
                *any = 0;
                break;
            }
            *any = probe_bound(x, od, x->tcand[cut - 1], &S->ws[0], &ovf, &lbt);
            if (ovf) { /* fall back to the relaxed probe at this cut */
                *use_pareto = 0;
                break;
            }
        }
    }
    return cut;
}

/* The low side: the smallest t_max below cut that any plan could use.
 * tmax_possible(t) needs a layout whose stages and boundaries are all <= t
 * and fit with K >= 1: t >= the bottleneck, so the search starts at the
 * first candidate >= it (exact); every smaller t_max is infeasible for the
 * full DP as well. */
static int order_low(Search *S, const OrderKey *k, int cut, int use_pareto, int galloped)
{
    const Ctx *x = &S->x;
    const Order *od = &S->od;
    int lo = 0;
    int a0 = first_at_least(x, 0, cut - 1, k->bn);
    int ovf = 0, a = a0, limit = a0;
    if (use_pareto && galloped >= 0) {
        lo = galloped;
        limit = cut;
    } else if (use_pareto) {
        lo = search_low(x, od, a0, cut - 1, S->ws, S->opt.threads, 1, &ovf);
        limit = cut;
    }
    if (!use_pareto || ovf) {
        a = search_low(x, od, a0, cut - 1, S->ws, S->opt.threads, 0, &ovf);
        /* exact feasibility from there, up to where the high side prunes */
        limit = a;
        while (limit < x->ntcand &&
               !(S->best < INF && (double)(x->B - 1) * x->tcand[limit] + k->lb >= S->best))
            limit++;
        lo = limit > a ? exact_low(x, od, a, limit, &S->ws[0]) : a;
    }
    return lo;
}

/* The t_max window of the order okeys[oq]: *lo, the first t_max a plan
 * could use, and *qend, from which on every t_max is cut.  Returns 0, or 1
 * when the order has none (counted as pruned). */
int order_window(Search *S, int oq, int *lo, int *qend, double *lb)
{
    const Ctx *x = &S->x;
    const OrderKey *k = &S->okeys[oq];
    *lo = 0;
    *qend = x->ntcand;
    *lb = 0.0;
    if (!S->opt.prune_tmax)
        return 0;
    *lb = k->lb;
    int use_pareto, galloped, any;
    int cut = order_high(S, k, &use_pareto, &galloped, &any);
    *qend = cut;
    if (cut > 0 && !use_pareto)
        any = tmax_possible(x, &S->od, x->tcand[cut - 1], &S->ws[0]);
    if (!any) {
        if (S->stats) { /* no layout at all: low; else below the cut low, above high */
            int low = k->key == INF ? x->ntcand : cut;
            S->stats->tmax_pruned_low += low;
            S->stats->tmax_pruned_high += x->ntcand - low;
        }
        if (S->pg) {
            atomic_fetch_add(&S->pg->tmax_done, x->ntcand);
            atomic_fetch_add(&S->pg->orders_done, 1);
        }
        return 1;
    }
    *lo = order_low(S, k, cut, use_pareto, galloped);
    if (S->stats)
        S->stats->tmax_pruned_low += *lo;
    return 0;
}
