/* HAPT's t_max batches: the candidates of a batch evaluated in parallel on
 * worker threads (one full DP each, unless a bound prunes it), reduced in
 * t_max order by the caller; and the cuts that skip runs of t_max (by
 * intervals, from the top). */
#include "hapt_dp_impl.h"

#include <pthread.h>

typedef struct Job {
    Batch *b;
    Work *w;
} Job;

/* One t_max: (b) the relaxed DP bounds the full one from below (same
 * candidates, every K at its smallest), so when (B-1) t_max + bound cannot
 * beat the best value known before the batch the full DP is skipped; else
 * Eq. 14-23 and the trace.  Which slot a thread takes does not matter: a
 * slot's result depends only on its t_max and the batch's starting best. */
static void slot_eval(const Batch *b, Work *w, Slot *sl)
{
    const Ctx *x = b->x;
    sl->nst = 0;
    sl->value = INF;
    sl->pruned = 0;
    if (x->opt->prune_tmax) {
        double t0 = cpu_s();
        double lbt = sl->lbt;
        /* lbt_known: skip_bounded ran both tests below at this t_max with
         * this best (and found nothing to prune) */
        if (!sl->lbt_known) {
            lbt = dp_relaxed(x, b->od, sl->tmax, 1, w->G);
            w->n_relaxed++;
        }
        if (lbt == INF || (b->best < INF && (double)(x->B - 1) * sl->tmax + lbt >= b->best)) {
            sl->pruned = 1;
            w->t_bounds += cpu_s() - t0;
            return;
        }
        /* The same test with the bound of layouts that fit (H-1F1B):
         * tighter where memory forces many or small stages; and no plan
         * at all where nothing fits (dp_pareto is exact feasibility). */
        int ovf;
        if (w->Fr && b->best < INF && !sl->lbt_known) {
            w->n_pareto++;
            int ok = dp_pareto(x, b->od, sl->tmax, w, &ovf);
            if (!ovf && (!ok || (double)(x->B - 1) * sl->tmax + pareto_lb(x, b->od, w->Fm) >=
                                    b->best)) {
                sl->pruned = 1;
                w->t_bounds += cpu_s() - t0;
                return;
            }
        }
        w->t_bounds += cpu_s() - t0;
    }
    double t1 = cpu_s();
    int s;
    /* Only a total below best - (B-1) t_max can improve on the best. */
    double bound = INF;
    if (x->opt->prune_tmax && b->best < INF && x->nonneg)
        bound = b->best - (double)(x->B - 1) * sl->tmax;
    const double *Gb = NULL, *Hf = NULL;
    if (x->opt->prune_tmax && w->H) { /* bounds for the full DP at this t_max */
        dp_relaxed(x, b->od, sl->tmax, 1, w->G);
        dp_prefix(x, b->od, sl->tmax, w->H);
        Gb = w->G;
        Hf = w->H;
    }
    double f = dp_run(x, b->od, sl->tmax, bound, Gb, Hf, w, &s);
    if (f < INF) {
        sl->nst = dp_trace(x, b->od, w, s, sl->st);
        if (sl->nst > 0)
            sl->value = f + (double)(x->B - 1) * sl->tmax; /* Eq. 22 */
    }
    w->t_full += cpu_s() - t1;
}

/* (b) by intervals (added by "dp-speed"): the relaxed DP is non-increasing
 * in t_max (more candidates, looser comm bound, smaller δ-based K), so for
 * every t in [t_q, t_r] (B-1) t + relaxed(t) >= (B-1) t_q + relaxed(t_r):
 * when that is >= best, one relaxed DP prunes the whole run q..r, each of
 * which the per-t_max test (slot_eval) would prune as well (its best is
 * never larger than this one).  Galloping: the span doubles while runs are
 * pruned and halves when not.  Returns how many t_max from q on are pruned
 * (candidates below `hi` only); where the answer is 0, *lbt0 gets
 * relaxed(t_q) for the slot (or *known stays 0). */
int skip_bounded(const Ctx *x, const Order *od, int q, int hi, double best, Work *w,
                 int *span_io, double *lbt0, int *known)
{
    *known = 0;
    if (!x->opt->prune_tmax || best == INF || q >= hi)
        return 0;
    double t0 = cpu_s();
    int n = 0, span = *span_io > 1 ? *span_io : 1;
    while (q + n < hi) {
        int r = q + n + span - 1;
        if (r > hi - 1)
            r = hi - 1;
        double v;
        int infeasible = 0;
        if (w->Fr) {
            /* with dp_pareto (H-1F1B, memory checked): its bound
             * of F is non-increasing in t_max as well (every layout that
             * fits at t fits at t' > t with warm-ups no larger, and its
             * front is exact when it did not overflow), and exact
             * infeasibility at t_r holds for every smaller t_max */
            int ovf;
            int ok = probe_bound(x, od, x->tcand[r], w, &ovf, &v);
            infeasible = !ok && !ovf;
        } else {
            v = dp_relaxed(x, od, x->tcand[r], 1, w->G);
            w->n_relaxed++;
        }
        if (infeasible || v == INF || (double)(x->B - 1) * x->tcand[q + n] + v >= best) {
            n = r - q + 1;
            span *= 2;
            continue;
        }
        if (r == q + n) { /* a single t_max that the bound does not prune */
            if (n == 0) {
                *lbt0 = v;
                *known = 1;
            }
            break;
        }
        span = (r - (q + n) + 1) / 2;
    }
    *span_io = span;
    w->t_bounds += cpu_s() - t0;
    return n;
}

/* The cut from the top (added by "dp-speed"): with a plan of value best
 * known, the t_max in [lo, top) that can still beat it.  A probe at
 * t_{top-1} gives exact feasibility (none: nothing below is feasible either)
 * and a lower bound LB of F for every t_max <= t_{top-1} (dp_relaxed and
 * dp_pareto at the probe, both non-increasing in t_max), so every t_max with
 * (B-1) t + LB >= best goes; repeat while the cut moves.  Returns the new
 * top (lo: nothing left), or top unchanged where a front overflowed. */
int shrink_top(const Ctx *x, const Order *od, int lo, int top, double best, Work *w)
{
    while (top > lo) {
        int ovf;
        double lbt;
        int ok = probe_bound(x, od, x->tcand[top - 1], w, &ovf, &lbt);
        if (ovf)
            return top;
        if (!ok)
            return lo;
        int c0 = lo, c1 = top;
        while (c0 < c1) {
            int mid = c0 + (c1 - c0) / 2;
            if ((double)(x->B - 1) * x->tcand[mid] + lbt >= best)
                c1 = mid;
            else
                c0 = mid + 1;
        }
        if (c0 == top)
            break;
        top = c0;
    }
    return top;
}

static void *job_main(void *arg)
{
    Job *j = arg;
    for (;;) {
        int q = atomic_fetch_add(&j->b->next, 1);
        if (q >= j->b->n)
            break;
        slot_eval(j->b, j->w, &j->b->slots[q]);
    }
    return NULL;
}

int run_batch(Batch *b, Work *ws, int nthreads)
{
    if (nthreads > b->n)
        nthreads = b->n;
    atomic_store(&b->next, 0);
    pthread_t th[64];
    Job jobs[64];
    int started = 1;
    for (int t = 0; t < nthreads; t++)
        jobs[t] = (Job){b, &ws[t]};
    for (int t = 1; t < nthreads; t++, started++)
        if (pthread_create(&th[t], NULL, job_main, &jobs[t]) != 0)
            break;
    /* Threads that did not start leave their slots to this one: the
     * result is the same either way. */
    job_main(&jobs[0]);
    for (int t = 1; t < started; t++)
        pthread_join(th[t], NULL);
    return 0;
}
