/* HAPT inter-op DP (seed 004 §5.2.1, Eq. 13-24, Algorithm 1) generalised to
 * any number of meshes, with the three search optimisations of §5.2.2.
 * See hapt_dp.h for the state and indexing, docs/PLANNER.md for the reading
 * of the paper.
 *
 * Outline of hapt_dp_plan():
 *   1. tabulate the oracle: every (mesh, submesh, k, i) stage candidate and
 *      every boundary C(i, a, b);
 *   2. the t_max candidates: the distinct t = t_f + t_b of feasible
 *      candidates (Algorithm 1 line 3), ascending;
 *   3. for every mesh order: (b) find the smallest t_max any plan could use
 *      (binary search on a relaxed DP without the stage-count dimension) and
 *      a lower bound LB of the first term of Eq. 13; take the remaining t_max
 *      in fixed-size batches, (c) the candidates of a batch in parallel;
 *      stop at the first t_max with (B-1) t_max + LB >= best so far, skip a
 *      t_max whose relaxed DP already cannot beat the best, and inside a
 *      full DP drop partial sums that cannot (branch and bound);
 *      (added by "dp-speed") prune runs of t_max with one probe
 *      (skip_bounded: the bounds are non-increasing in t_max), cut from the
 *      top after every improvement (shrink_top), bound each full-DP state
 *      by its prefix too (dp_prefix); every DP enumerates its transitions
 *      with one walk (walk_kp), which skips successors no DP could extend;
 *   4. rebuild the best plan and fill its schedule (schedule.c).
 * The result does not depend on threads or batch size: batches are formed
 * the same way for any thread count and reduced in t_max order, and a
 * candidate is only skipped when it cannot be strictly better.
 */
#include "hapt_dp_impl.h"

/* ------------------------------------------------------------ plan fill */

int plan_fill_schedule(Plan *p, const CostOracle *o, IrError *err)
{
    int S = p->nstages;
    if (S <= 0)
        return ir_errorf(err, "plan: no stages");
    double *c = calloc((size_t)S, sizeof *c);
    int *N = calloc((size_t)S, sizeof *N), *dl = calloc((size_t)S, sizeof *dl),
        *bey = calloc((size_t)S, sizeof *bey);
    if (!c || !N || !dl || !bey) {
        free(c);
        free(N);
        free(dl);
        free(bey);
        return ir_errorf(err, "plan: out of memory");
    }
    for (int i = 0; i < S; i++) {
        PlanStage *ps = &p->stages[i];
        c[i] = i + 1 < S ? o->comm(o->ctx, ps->last_layer, ps->mesh, p->stages[i + 1].mesh) : 0.0;
        ps->c_next = c[i];
    }
    schedule_warmups(p->schedule, S, p->microbatches, c, p->t_max, p->eps, N, dl, bey);
    int rc = 0;
    for (int i = 0; i < S && !rc; i++) {
        PlanStage *ps = &p->stages[i];
        StageCost sc;
        memset(&sc, 0, sizeof sc);
        if (o->stage(o->ctx, ps->first_layer, ps->last_layer, ps->mesh, ps->sub, &sc) != 0) {
            rc = ir_errorf(err, "plan: cost oracle failed for stage %d (layers %d..%d)", i,
                           ps->first_layer, ps->last_layer);
            break;
        }
        ps->t_f = sc.t_f;
        ps->t_b = sc.t_b;
        ps->dp = sc.dp;
        ps->tp = sc.tp;
        ps->zero = sc.zero;
        ps->recompute = sc.recompute;
        ps->warmup = N[i];
        ps->delta = dl[i];
        ps->delta_beyond_paper = bey[i];
        ps->mem_pred = sc.mem_static + (double)N[i] * sc.mem_act;
        ps->mem_static = sc.mem_static;
        ps->mem_act = sc.mem_act;
        ps->mem_scratch = sc.mem_scratch;
    }
    free(c);
    free(N);
    free(dl);
    free(bey);
    return rc;
}

static int search_check(const ClusterSpec *c, int L, const CostOracle *o, DpOptions *opt,
                        IrError *err)
{
    if (!c || c->nmeshes <= 0 || !o || !o->stage || !o->comm)
        return ir_errorf(err, "plan: no meshes or no cost oracle");
    if (L <= 0)
        return ir_errorf(err, "plan: the model has %d layers", L);
    if (opt->microbatches <= 0)
        return ir_errorf(err, "plan: %d microbatches (need >= 1)", opt->microbatches);
    if (opt->threads < 1)
        opt->threads = 1;
    if (opt->threads > 64)
        opt->threads = 64;
    if (opt->batch < 1)
        opt->batch = 1;
    if (c->nmeshes > L)
        return ir_errorf(err, "plan: %d meshes but only %d layers: every mesh needs a stage of "
                         "at least one layer (every device is used, §5.2.1)", c->nmeshes, L);
    return 0;
}

/* One thread's DP tables. */
static int work_alloc(Search *S, Work *w, size_t wsz, IrError *err)
{
    const Ctx *x = &S->x;
    const int L = x->L;
    w->F = malloc(wsz * sizeof *w->F);
    w->N = malloc(wsz * sizeof *w->N);
    w->ch = malloc(wsz * sizeof *w->ch);
    w->G = malloc((size_t)(L + 2) * x->D * sizeof *w->G);
    w->H = malloc((size_t)(L + 2) * x->D * sizeof *w->H);
    w->slo = malloc((size_t)(L + 2) * x->D * sizeof *w->slo);
    w->shi = malloc((size_t)(L + 2) * x->D * sizeof *w->shi);
    w->Nm = malloc((size_t)(L + 2) * x->D * sizeof *w->Nm);
    w->Sm = malloc((size_t)(L + 2) * x->D * sizeof *w->Sm);
    w->Ks = malloc((size_t)(x->Smax + 2) * sizeof *w->Ks);
    /* dp_pareto's packed pairs hold s <= Smax and N <= B (else the
     * search goes without it, as with another schedule: same plan) */
    int pareto = S->opt.schedule == SCHED_H1F1B && S->opt.check_memory && S->opt.prune_tmax &&
                 x->B <= FRONT_LIM && x->Smax <= FRONT_LIM;
    if (pareto) {
        w->Fr = malloc((size_t)(L + 2) * x->D * sizeof *w->Fr);
        w->Frn = malloc((size_t)(L + 2) * x->D * sizeof *w->Frn);
        w->Fm = malloc((size_t)(L + 2) * x->D * sizeof *w->Fm);
    }
    if (!w->F || !w->N || !w->ch || !w->G || !w->H || !w->slo || !w->shi || !w->Nm || !w->Sm ||
        !w->Ks || (pareto && (!w->Fr || !w->Frn || !w->Fm)))
        return ir_errorf(err, "plan: out of memory for the DP table (%zu states)", wsz);
    return 0;
}

static void work_free(Work *w)
{
    free(w->F);
    free(w->N);
    free(w->ch);
    free(w->G);
    free(w->H);
    free(w->slo);
    free(w->shi);
    free(w->Nm);
    free(w->Sm);
    free(w->Fr);
    free(w->Frn);
    free(w->Fm);
    free(w->Ks);
}

/* Everything the search allocates after the tables (ctx_build). */
static int search_alloc(Search *S, IrError *err)
{
    Ctx *x = &S->x;
    const int L = x->L;
    S->ws = calloc((size_t)S->opt.threads, sizeof *S->ws);
    S->slots = calloc((size_t)S->opt.batch, sizeof *S->slots);
    S->recs = calloc((size_t)S->opt.batch * x->Smax, sizeof *S->recs);
    S->best_st = calloc((size_t)x->Smax, sizeof *S->best_st);
    S->G = malloc((size_t)(L + 2) * x->D * sizeof *S->G);
    S->od.mesh = malloc((size_t)x->P * sizeof(int));
    S->od.Dp = malloc((size_t)x->P * sizeof(int));
    S->od.off = malloc((size_t)(x->P + 1) * sizeof(int));
    S->od.rem_after = malloc((size_t)(x->P + 1) * sizeof(int));
    if (!S->ws || !S->slots || !S->recs || !S->best_st || !S->G || !S->od.mesh || !S->od.Dp ||
        !S->od.off || !S->od.rem_after)
        return ir_errorf(err, "plan: out of memory");
    size_t wsz = widx(x, 0, L + 2, 0);
    for (int t = 0; t < S->opt.threads; t++)
        if (work_alloc(S, &S->ws[t], wsz, err))
            return -1;
    for (int q = 0; q < S->opt.batch; q++)
        S->slots[q].st = S->recs + (size_t)q * x->Smax;
    return 0;
}

static void search_free(Search *S)
{
    if (S->ws)
        for (int t = 0; t < S->opt.threads; t++)
            work_free(&S->ws[t]);
    free(S->ws);
    free(S->slots);
    free(S->recs);
    free(S->best_st);
    free(S->G);
    free(S->od.mesh);
    free(S->od.Dp);
    free(S->od.off);
    free(S->od.rem_after);
    free(S->ol.v);
    free(S->okeys);
    ctx_free(&S->x);
}

/* (b) across orders (added by "plan5"): search the orders by ascending
 * lower bound of Eq. 13, (B-1) bottleneck + LB, so a good plan is known
 * early and most orders are cut whole (an order whose bound is >= the
 * best cannot improve on it: its every t_max is pruned, high or low).
 * The sort is a fixed function of the instance (ties by index), and ties
 * of the final objective between orders still go to the lower index in
 * the reduction (batch_reduce), except where a bound cut the tied order. */
static int order_keys(Search *S, const ClusterSpec *c, IrError *err)
{
    const OrderList *ol = &S->ol;
    S->okeys = malloc((size_t)ol->n * sizeof *S->okeys);
    if (!S->okeys)
        return ir_errorf(err, "plan: out of memory");
    for (int oi = 0; oi < ol->n; oi++) {
        S->okeys[oi].oi = oi;
        S->okeys[oi].key = S->okeys[oi].lb = S->okeys[oi].bn = 0;
    }
    if (S->opt.prune_tmax && keys_compute(&S->x, c, ol, S->okeys, S->ws, S->opt.threads))
        return ir_errorf(err, "plan: out of memory");
    if (S->opt.prune_tmax)
        qsort(S->okeys, (size_t)ol->n, sizeof *S->okeys, cmp_orderkey);
    return 0;
}

/* The next batch of t_max from *q_io on: runs the bounds prune go, the
 * others fill bt's slots.  While no plan is known nothing bounds a full
 * DP: one t_max per thread until one is found (added by "dp-speed"; the
 * result does not depend on the batch size). */
static void batch_fill(Search *S, Batch *bt, int *q_io, int qend, double lb, int *span,
                       long *order_done)
{
    const Ctx *x = &S->x;
    const DpOptions *opt = &S->opt;
    const double best = S->best;
    Slot *slots = S->slots;
    int q = *q_io;
    int nb = best == INF && opt->threads < opt->batch ? opt->threads : opt->batch;
    while (bt->n < nb && q < x->ntcand) {
        double t = x->tcand[q];
        if (q >= qend || (opt->prune_tmax && best < INF && (double)(x->B - 1) * t + lb >= best)) {
            if (S->stats)
                S->stats->tmax_pruned_high += x->ntcand - q;
            q = x->ntcand; /* ascending: every later t_max is pruned too */
            break;
        }
        if (opt->prune_tmax && best < INF) {
            int hi = first_cut(x, q + 1, qend, lb, best); /* the high-side cut (q is below it) */
            int known;
            double lbt = 0;
            int n = skip_bounded(x, &S->od, q, hi, best, &S->ws[0], span, &lbt, &known);
            if (n > 0) {
                if (S->stats)
                    S->stats->tmax_pruned_bound += n;
                if (S->pg)
                    atomic_fetch_add(&S->pg->tmax_done, n);
                *order_done += n;
                q += n;
                continue;
            }
            slots[bt->n].lbt_known = known;
            slots[bt->n].lbt = lbt;
        } else {
            slots[bt->n].lbt_known = 0;
        }
        slots[bt->n++].tmax = t;
        q++;
    }
    *q_io = q;
}

/* Reduce a batch in t_max order (deterministic) into the best plan. */
static void batch_reduce(Search *S, const Batch *bt, int oi, const int *perm)
{
    const Slot *slots = S->slots;
    for (int r = 0; r < bt->n; r++) {
        if (S->pg && !slots[r].pruned)
            atomic_fetch_add(&S->pg->full_dps, 1);
        if (S->stats) {
            S->stats->tmax_pruned_bound += slots[r].pruned;
            S->stats->tmax_evaluated += !slots[r].pruned;
        }
        if (slots[r].value < S->best || (slots[r].value == S->best && oi < S->best_order)) {
            S->best = slots[r].value;
            S->best_tmax = slots[r].tmax;
            S->best_n = slots[r].nst;
            S->best_order = oi;
            for (int z = 0; z < S->best_n; z++) {
                S->best_st[z] = slots[r].st[z];
                S->best_st[z].p = perm[slots[r].st[z].p]; /* store the cluster mesh */
            }
        }
    }
}

/* Every t_max of the order okeys[oq] that can still beat the best, in
 * batches. */
static void order_search(Search *S, int oq)
{
    Ctx *x = &S->x;
    const int oi = S->okeys[oq].oi;
    const int *perm = S->ol.v + (size_t)oi * x->P;
    order_set(&S->od, x, perm);
    if (S->stats) {
        S->stats->orders++;
        S->stats->tmax_candidates += x->ntcand;
    }
    int lo, qend; /* qend: every t_max from it on is cut */
    double lb;
    if (order_window(S, oq, &lo, &qend, &lb))
        return;
    if (S->pg)
        atomic_fetch_add(&S->pg->tmax_done, lo);
    long order_done = lo;
    int span = 1;
    for (int q = lo; q < x->ntcand;) {
        Batch bt;
        bt.x = x;
        bt.od = &S->od;
        bt.slots = S->slots;
        bt.best = S->best;
        bt.n = 0;
        batch_fill(S, &bt, &q, qend, lb, &span, &order_done);
        if (bt.n == 0 || out_of_time(x))
            break;
        run_batch(&bt, S->ws, S->opt.threads);
        if (S->pg)
            atomic_fetch_add(&S->pg->tmax_done, bt.n);
        order_done += bt.n;
        double best_before = S->best;
        batch_reduce(S, &bt, oi, perm);
        if (S->opt.prune_tmax && S->ws[0].Fr && S->best < best_before && q < qend) {
            /* a better plan: cut this order's remaining t_max from the top
             * as before its search (the high side's cut by LB first) */
            int top = first_cut(x, q, qend, lb, S->best);
            qend = shrink_top(x, &S->od, q, top, S->best, &S->ws[0]);
        }
    }
    if (S->pg) { /* the rest of this order's candidates were cut by the high side */
        atomic_fetch_add(&S->pg->tmax_done, x->ntcand - order_done);
        atomic_fetch_add(&S->pg->orders_done, 1);
    }
}

static void stats_collect(const Search *S, double t_start)
{
    DpStats *stats = S->stats;
    if (!stats)
        return;
    for (int t = 0; t < S->opt.threads; t++) {
        stats->transitions += S->ws[t].transitions;
        stats->seconds_keys += S->ws[t].t_keys;
        stats->seconds_low += S->ws[t].t_low;
        stats->seconds_bounds += S->ws[t].t_bounds;
        stats->seconds_full += S->ws[t].t_full;
        stats->relaxed_runs += S->ws[t].n_relaxed;
        stats->pareto_runs += S->ws[t].n_pareto;
        stats->feasible_runs += S->ws[t].n_feasible;
    }
    stats->seconds = now_s() - t_start;
}

/* The best plan found, rebuilt with its schedule; -1 with err where none
 * was (*no_plan_in_time: the time limit stopped the search first). */
static int search_result(Search *S, const CostOracle *o, Plan *out, IrError *err,
                         int *no_plan_in_time)
{
    const Ctx *x = &S->x;
    int stopped = atomic_load(&S->stop);
    if (S->best == INF && stopped) {
        *no_plan_in_time = 1;
        return ir_errorf(err, "plan: no plan found within the time limit of %g s",
                         S->opt.time_limit);
    }
    if (S->best == INF)
        return ir_errorf(err, "plan: no feasible plan for %d layers on %d meshes (%d devices), "
                         "B = %d: every layout breaks the memory limit (Eq. 24)%s or leaves a "
                         "device unused", x->L, x->P, x->D, x->B,
                         S->opt.comm_bound ? ", the comm bound C(i) <= t_max" : "");
    out->stages = calloc((size_t)S->best_n, sizeof *out->stages);
    out->mesh_order = malloc((size_t)x->P * sizeof *out->mesh_order);
    if (!out->stages || !out->mesh_order)
        return ir_errorf(err, "plan: out of memory");
    out->nstages = S->best_n;
    out->nmesh_order = x->P;
    memcpy(out->mesh_order, S->ol.v + (size_t)S->best_order * x->P, (size_t)x->P * sizeof(int));
    out->microbatches = x->B;
    out->t_max = S->best_tmax;
    out->objective = S->best;
    out->schedule = S->opt.schedule;
    out->eps = S->opt.eps;
    out->time_limited = stopped;
    out->coarse_meshes = x->ncoarse;
    for (int z = 0; z < S->best_n; z++) {
        PlanStage *ps = &out->stages[z];
        ps->first_layer = S->best_st[z].k;
        ps->last_layer = S->best_st[z].i;
        ps->mesh = S->best_st[z].p;
        ps->sub = x->subs[(size_t)ps->mesh * x->nsubmax + S->best_st[z].j];
    }
    return plan_fill_schedule(out, o, err);
}

/* One search; *no_plan_in_time is set when the time limit stopped it
 * before any full DP had found a plan. */
static int dp_plan_once(const ClusterSpec *c, int L, const CostOracle *o, const DpOptions *opt_in,
                        Plan *out, DpStats *stats, IrError *err, int *no_plan_in_time)
{
    *no_plan_in_time = 0;
    memset(out, 0, sizeof *out);
    if (stats)
        memset(stats, 0, sizeof *stats);
    Search *S = calloc(1, sizeof *S);
    if (!S)
        return ir_errorf(err, "plan: out of memory");
    S->opt = *opt_in;
    int rc = search_check(c, L, o, &S->opt, err);
    if (rc) {
        free(S);
        return rc;
    }
    Ctx *x = &S->x;
    x->c = c;
    x->o = o;
    x->opt = &S->opt;
    x->L = L;
    x->P = c->nmeshes;
    x->B = S->opt.microbatches;
    atomic_store(&S->stop, 0);
    x->stop = &S->stop;
    S->stats = stats;
    S->best = INF;
    S->best_order = -1;
    rc = -1;
    double t_start = now_s();
    if (S->opt.time_limit > 0)
        x->deadline = t_start + S->opt.time_limit; /* the tabulation counts too */
    if (ctx_build(x, stats, err)) {
        *no_plan_in_time = atomic_load(&S->stop);
        goto done;
    }
    if (orders_make(c, &S->opt, &S->ol)) {
        ir_errorf(err, "plan: out of memory");
        goto done;
    }
    if (search_alloc(S, err))
        goto done;
    S->pg = S->opt.progress;
    if (S->pg) {
        atomic_store(&S->pg->keys_done, 0);
        atomic_store(&S->pg->orders_done, 0);
        atomic_store(&S->pg->tmax_done, 0);
        atomic_store(&S->pg->orders_total, S->ol.n);
        atomic_store(&S->pg->tmax_total, (long)S->ol.n * x->ntcand);
    }
    S->od.P = x->P;
    if (order_keys(S, c, err))
        goto done;
    for (int oq = 0; oq < S->ol.n; oq++) {
        if (out_of_time(x))
            break; /* (issue 16) --time-limit: keep the best plan found so far */
        order_search(S, oq);
    }
    stats_collect(S, t_start);
    if (search_result(S, o, out, err, no_plan_in_time))
        goto done;
    rc = 0;
done:
    if (rc)
        plan_free(out);
    search_free(S);
    free(S);
    return rc;
}

/* (issue 16) With a time limit, a search stopped before any full DP found a
 * plan falls back to a coarse search without a limit: every mesh of more
 * than 8 nodes in at most 8 node groups (mesh_group), a DP of at most
 * 8 units per such mesh, so it is fast wherever the exact search is slow.
 * Its plan is returned marked time-limited (not proven optimal). */
int hapt_dp_plan(const ClusterSpec *c, int L, const CostOracle *o, const DpOptions *opt_in,
                 Plan *out, DpStats *stats, IrError *err)
{
    int no_plan = 0;
    int rc = dp_plan_once(c, L, o, opt_in, out, stats, err, &no_plan);
    if (rc == 0 || !no_plan)
        return rc;
    DpOptions o2 = *opt_in;
    o2.time_limit = 0;
    o2.max_groups = opt_in->max_groups > 0 && opt_in->max_groups < 8 ? opt_in->max_groups : 8;
    DpStats st2;
    double spent = stats ? stats->seconds : 0;
    rc = dp_plan_once(c, L, o, &o2, out, stats ? &st2 : NULL, err, &no_plan);
    if (stats && rc == 0) {
        long orders = stats->orders;
        *stats = st2;
        stats->orders += orders;
        stats->seconds += spent;
    }
    if (rc == 0)
        out->time_limited = 1;
    return rc;
}
