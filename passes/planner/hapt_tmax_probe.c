/* The low side of HAPT's t_max search: the smallest t_max any plan of an
 * order could use, found by probes of the feasibility DPs (galloping,
 * bisecting, a (threads + 1)-ary search on threads). */
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
