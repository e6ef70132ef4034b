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
#include "hapt_dp.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdio.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define INF DBL_MAX

void dp_options_default(DpOptions *o)
{
    memset(o, 0, sizeof *o);
    o->microbatches = 1;
    o->eps = 0.1;
    o->schedule = SCHED_H1F1B;
    o->check_memory = 1;
    o->comm_bound = 1;
    o->sparse_index = 1;
    o->prune_tmax = 1;
    o->threads = 1;
    o->batch = 8;
    o->max_perm_meshes = 5;
    o->fixed_order = 0;
    o->tmax_comm_candidates = 0;
    o->time_limit = 0;
    o->max_groups = 0;
}

void plan_free(Plan *p)
{
    if (!p)
        return;
    free(p->stages);
    free(p->mesh_order);
    memset(p, 0, sizeof *p);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread: the profile's parts (DpStats) stay
 * meaningful when other work shares the cores. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------ tables */

typedef struct Tab {
    double t, t_f, t_b;
    double mem_static, mem_act;
    int dp, tp;
    int feasible;
    int kmax;               /* largest K <= B with stage_fits_memory (0: none) */
} Tab;

/* Eq. 24 as a threshold on K, computed with stage_fits_memory itself (it is
 * monotone in K: mem_act >= 0), so "K <= kmax" and the helper agree on
 * every K in 1..B. */
static int kmax_of(double mem_static, double mem_act, double mem_dev, int B)
{
    if (!stage_fits_memory(mem_static, mem_act, 1, mem_dev))
        return 0;
    if (!(mem_act > 0) || stage_fits_memory(mem_static, mem_act, B, mem_dev))
        return B;
    double e = floor((mem_dev - mem_static) / mem_act);
    int k = e < 1 ? 1 : e > B ? B : (int)e;
    while (k < B && stage_fits_memory(mem_static, mem_act, k + 1, mem_dev))
        k++;
    while (k > 1 && !stage_fits_memory(mem_static, mem_act, k, mem_dev))
        k--;
    return k;
}

typedef struct CandRef {  /* sparse index entry (§5.2.2 (1)) */
    double t;
    int i;
    int kmax;               /* Tab.kmax, INT_MAX without memory checks: with t, all the
                               DPs read of a candidate, so they do not touch the (large,
                               cache-missing) Tab in their loops */
} CandRef;

typedef struct Ctx {
    const ClusterSpec *c;
    const CostOracle *o;
    const DpOptions *opt;
    int L, P, B;
    int nsubmax;
    int *nsub;              /* [P] submeshes per mesh */
    Submesh *subs;          /* [P][nsubmax] */
    Tab *tab;               /* [P][nsubmax][L+2][L+2] */
    double *comm;           /* [L+1][P][P] */
    /* sparse index: per (mesh, sub, k) the feasible i sorted by (t, i) */
    int *sp_off;            /* [P][L+2][nsubmax] + 1 (sp_key): the lists of one (mesh,
                               k) lie together, in the order the DPs read them */
    CandRef *sp;
    double *tcand;          /* distinct t, ascending */
    int ntcand;
    int *unit;              /* [P] devices per DP unit: 1, or g·M for a mesh searched in
                               groups of g nodes (DpOptions.max_groups) */
    int *size;              /* [P][nsubmax] submesh sizes in units of its mesh */
    int D;                  /* DP units in the cluster (devices when every unit is 1) */
    int ncoarse;            /* meshes searched in node groups */
    double deadline;        /* now_s() at which the search stops (0: none) */
    atomic_int *stop;       /* set once the deadline has passed: every DP stops */
    int nonneg;             /* every boundary cost >= 0 (stage times are) */
    int Smax;
} Ctx;

static Tab *tab_at(const Ctx *x, int a, int j, int k, int i)
{
    size_t L2 = (size_t)x->L + 2;
    return &x->tab[(((size_t)a * x->nsubmax + j) * L2 + k) * L2 + i];
}

static double comm_at(const Ctx *x, int i, int a, int b)
{
    return x->comm[((size_t)i * x->P + a) * x->P + b];
}

static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return a < b ? -1 : a > b;
}

static int cmp_candref(const void *pa, const void *pb)
{
    const CandRef *a = pa, *b = pb;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    return a->i - b->i;
}

static void ctx_free(Ctx *x)
{
    free(x->nsub);
    free(x->subs);
    free(x->tab);
    free(x->comm);
    free(x->sp_off);
    free(x->sp);
    free(x->tcand);
    free(x->unit);
    free(x->size);
}

/* (issue 16) The time limit, checked once per DP row (walk_back,
 * dp_prefix): once it has passed, every DP stops before its next row, so
 * its root state (row k = 1, computed last) stays infinite and no probe or
 * full DP started after the deadline yields a plan; hapt_dp_plan then
 * returns the best plan found by the full DPs that finished. */
static int out_of_time(const Ctx *x)
{
    if (!(x->deadline > 0))
        return 0;
    if (atomic_load_explicit(x->stop, memory_order_relaxed))
        return 1;
    if (now_s() < x->deadline)
        return 0;
    atomic_store(x->stop, 1);
    return 1;
}

static int mesh_group(int N, int G);

int hapt_dp_units(const ClusterSpec *c, int max_groups)
{
    long d = 0;
    for (int a = 0; a < c->nmeshes; a++) {
        const MeshSpec *m = &c->meshes[a];
        int g = mesh_group(m->nodes, max_groups);
        d += g ? m->nodes / g : (long)m->nodes * m->per_node;
    }
    return d > INT_MAX ? INT_MAX : (int)d;
}

int hapt_dp_searches_shape(const ClusterSpec *c, int max_groups, int mesh, Submesh sub)
{
    const MeshSpec *m = &c->meshes[mesh];
    int g = mesh_group(m->nodes, max_groups);
    return !g || (sub.m == m->per_node && sub.n % g == 0);
}

/* Nodes per group for a mesh of N nodes under DpOptions.max_groups G: 0
 * (search every shape of submesh_enumerate, device by device) when G is 0
 * or N <= G, else the smallest divisor g of N with N / g <= G (N itself
 * when no smaller one exists).  A HEURISTIC, not an exact reduction: the
 * mesh is then offered only the shapes (n·g, M), n = 1..N/g, and the DP
 * counts its devices in units of g·M, so plans with sub-node stages or
 * node counts that are not multiples of g on this mesh are not searched. */
static int mesh_group(int N, int G)
{
    if (G <= 0 || N <= G)
        return 0;
    for (int g = 2; g < N; g++)
        if (N % g == 0 && N / g <= G)
            return g;
    return N;
}

static int ctx_build(Ctx *x, DpStats *st, IrError *err)
{
    const int P = x->P, L = x->L;
    x->nsub = calloc((size_t)P, sizeof *x->nsub);
    if (!x->nsub)
        return ir_errorf(err, "plan: out of memory");
    x->unit = calloc((size_t)P, sizeof *x->unit);
    int *group = calloc((size_t)P, sizeof *group);
    if (!x->unit || !group) {
        free(group);
        return ir_errorf(err, "plan: out of memory");
    }
    x->nsubmax = 0;
    x->D = 0;
    x->ncoarse = 0;
    for (int a = 0; a < P; a++) {
        const MeshSpec *m = &x->c->meshes[a];
        if (m->nodes <= 0 || m->per_node <= 0) {
            free(group);
            return ir_errorf(err, "plan: mesh %d '%s' has %d nodes x %d devices", a, m->name,
                             m->nodes, m->per_node);
        }
        group[a] = mesh_group(m->nodes, x->opt->max_groups);
        x->unit[a] = group[a] ? group[a] * m->per_node : 1;
        x->nsub[a] = group[a] ? m->nodes / group[a]
                              : submesh_enumerate(m->nodes, m->per_node, NULL, 0);
        x->ncoarse += group[a] > 0;
        if (x->nsub[a] > x->nsubmax)
            x->nsubmax = x->nsub[a];
        x->D += m->nodes * m->per_node / x->unit[a];
    }
    /* the DP's choice packs (last layer i <= L, submesh j < nsubmax) in
     * an int (choice_pack) */
    if ((long long)(L + 1) * x->nsubmax > INT_MAX)
        return ir_errorf(err, "plan: %d layers x %d submesh shapes is too many to search", L,
                         x->nsubmax);
    x->Smax = L < x->D ? L : x->D;
    if (x->opt->max_stages > 0 && x->opt->max_stages < x->Smax)
        x->Smax = x->opt->max_stages;
    size_t L2 = (size_t)L + 2;
    size_t ntab = (size_t)P * x->nsubmax * L2 * L2;
    x->subs = calloc((size_t)P * x->nsubmax, sizeof *x->subs);
    x->size = calloc((size_t)P * x->nsubmax, sizeof *x->size);
    x->tab = calloc(ntab, sizeof *x->tab);
    x->comm = calloc(L2 * P * P, sizeof *x->comm);
    x->sp_off = calloc((size_t)P * x->nsubmax * L2 + 1, sizeof *x->sp_off);
    x->tcand = malloc((ntab + L2 * P * P) * sizeof *x->tcand);   /* + boundary costs */
    if (!x->subs || !x->size || !x->tab || !x->comm || !x->sp_off || !x->tcand) {
        free(group);
        return ir_errorf(err, "plan: out of memory tabulating %zu stage candidates", ntab);
    }
    for (int a = 0; a < P; a++) {
        const MeshSpec *m = &x->c->meshes[a];
        Submesh *sa = x->subs + (size_t)a * x->nsubmax;
        if (group[a])
            for (int j = 0; j < x->nsub[a]; j++)
                sa[j] = (Submesh){(j + 1) * group[a], m->per_node};
        else
            submesh_enumerate(m->nodes, m->per_node, sa, x->nsubmax);
        for (int j = 0; j < x->nsub[a]; j++)
            x->size[(size_t)a * x->nsubmax + j] = sa[j].n * sa[j].m / x->unit[a];
    }
    free(group);

    double t0 = now_s();
    long calls = 0, nfeas = 0;
    for (int a = 0; a < P; a++)
        for (int j = 0; j < x->nsub[a]; j++) {
            if (out_of_time(x)) /* (issue 16) a huge table: the limit holds here too */
                return ir_errorf(err, "plan: the time limit of %g s passed while tabulating the "
                                 "stage candidates", x->opt->time_limit);
            for (int k = 1; k <= L; k++)
                for (int i = k; i <= L; i++) {
                    StageCost sc;
                    memset(&sc, 0, sizeof sc);
                    calls++;
                    Submesh sub = x->subs[(size_t)a * x->nsubmax + j];
                    if (x->o->stage(x->o->ctx, k, i, a, sub, &sc) != 0)
                        return ir_errorf(err, "plan: cost oracle failed for layers %d..%d on mesh "
                                         "%d '%s' submesh (%d,%d)", k, i, a,
                                         x->c->meshes[a].name, sub.n, sub.m);
                    Tab *t = tab_at(x, a, j, k, i);
                    t->t_f = sc.t_f;
                    t->t_b = sc.t_b;
                    t->t = sc.t_f + sc.t_b;
                    t->mem_static = sc.mem_static;
                    t->mem_act = sc.mem_act;
                    t->dp = sc.dp;
                    t->tp = sc.tp;
                    t->feasible = sc.feasible && isfinite(t->t) && t->t >= 0;
                    t->kmax = kmax_of(sc.mem_static, sc.mem_act, x->c->meshes[a].dev.mem_bytes, x->B);
                    if (t->feasible)
                        x->tcand[nfeas++] = t->t;
                }
        }
    x->nonneg = 1;
    for (int i = 1; i < L; i++)
        for (int a = 0; a < P; a++)
            for (int b = 0; b < P; b++) {
                double cv = x->o->comm(x->o->ctx, i, a, b);
                x->comm[((size_t)i * P + a) * P + b] = cv;
                x->nonneg &= cv >= 0;
                calls++;
                /* (added by "plan") Where a slow link forces t_max above every
                 * stage time (constraint (ii), C(i) <= t_max), the stage times
                 * alone offer no usable t_max near C(i): offer C(i) itself. */
                if (x->opt->tmax_comm_candidates && x->opt->comm_bound && nfeas > 0 &&
                    isfinite(cv) && cv > 0)
                    x->tcand[nfeas++] = cv;
            }
    if (st) {
        st->oracle_calls += calls;
        st->seconds_tabulate += now_s() - t0;
    }
    if (nfeas == 0)
        return ir_errorf(err, "plan: no stage candidate fits on any submesh (every (layers, "
                         "submesh) pair was reported infeasible: memory or imbalance)");
    qsort(x->tcand, (size_t)nfeas, sizeof *x->tcand, cmp_double);
    int nd = 0;
    for (long q = 0; q < nfeas; q++)
        if (nd == 0 || x->tcand[q] != x->tcand[nd - 1])
            x->tcand[nd++] = x->tcand[q];
    x->ntcand = nd;

    /* Sparse index: the feasible ends i of each (mesh, submesh, start k),
     * sorted by stage time so a given t_max visits a prefix only. */
    size_t nk = (size_t)P * x->nsubmax * L2;
    for (size_t q = 0; q < nk; q++) {
        int a = (int)(q / ((size_t)x->nsubmax * L2)), k = (int)(q / x->nsubmax % L2),
            j = (int)(q % x->nsubmax);
        int cnt = 0;
        if (j < x->nsub[a] && k >= 1 && k <= L)
            for (int i = k; i <= L; i++)
                cnt += tab_at(x, a, j, k, i)->feasible;
        x->sp_off[q + 1] = x->sp_off[q] + cnt;
    }
    x->sp = malloc(((size_t)x->sp_off[nk] + 1) * sizeof *x->sp);
    if (!x->sp)
        return ir_errorf(err, "plan: out of memory building the sparse index");
    for (size_t q = 0; q < nk; q++) {
        int a = (int)(q / ((size_t)x->nsubmax * L2)), k = (int)(q / x->nsubmax % L2),
            j = (int)(q % x->nsubmax);
        CandRef *r = x->sp + x->sp_off[q];
        int cnt = 0;
        if (j < x->nsub[a] && k >= 1 && k <= L)
            for (int i = k; i <= L; i++) {
                const Tab *t = tab_at(x, a, j, k, i);
                if (t->feasible)
                    r[cnt++] = (CandRef){t->t, i, x->opt->check_memory ? t->kmax : INT_MAX};
            }
        qsort(r, (size_t)cnt, sizeof *r, cmp_candref);
    }
    return 0;
}

/* ------------------------------------------------------------ one order */

typedef struct Order {
    int P;
    int *mesh;              /* [P] π: cluster mesh index at each position */
    int *Dp;                /* [P] devices of π_p */
    int *off;               /* [P+1] first position index of mesh p */
    int *rem_after;         /* [P] devices in the meshes after p */
} Order;

/* ------------------------------------------------------------ transitions */

/* Every DP below (dp_run, dp_relaxed, dp_prefix, dp_feasible, dp_pareto,
 * dp_bottleneck) visits the same transitions: at layer k on mesh π_p, a
 * candidate stage k..i on submesh j of π_p (nm = n·m devices) with
 * t <= tmax, followed by one kind of successor, by d (the devices of π_p
 * still free before the stage):
 *   TR_SAME  d = nm+1..Dp, i < L: the next stage on π_p, d - nm free;
 *   TR_NEXT  d = nm, i < L, p < P-1: π_p is done, the next stage on π_{p+1}
 *            with all of it free;
 *   TR_LAST  d = nm, i = L, p = P-1: the last stage (F(0, L+1, ...) = 0, c = 0).
 * walk_kp enumerates them once, for one (k, p), and hands each (candidate,
 * successor kind) with its whole d range to a per-transition function.  It
 * is always inlined with a constant function, so every DP gets its own
 * specialised loop (no call per transition: this is the search's hot path).
 * Candidates come from the sparse index (§5.2.2 (1): a t-sorted prefix) or,
 * without it, a scan of i = k..L; the visiting order differs, the DPs'
 * tie-breaks make their results independent of it. */
typedef enum { TR_SAME, TR_NEXT, TR_LAST } TransKind;

typedef struct Trans {
    TransKind kind;
    int k, i, p, j, nm;
    double t;               /* t_f + t_b of the stage */
    int kmax;               /* Eq. 24: K <= kmax (INT_MAX without memory checks) */
    int K1;                 /* with want_k1, H-1F1B's K for N_next = 1 across c:
                               K(N) = min(B, N + K1 - 1) for N >= 1 (Eq. 1, δ of Eq. 2) */
    double c;               /* C(i) across the boundary (TR_LAST: 0) */
    int d0, d1;             /* the d covered (TR_NEXT, TR_LAST: d0 = d1 = nm) */
    size_t cur;             /* (k, d0) in a [L+2][D] table; (k, d) is cur + d - d0 */
    size_t nxt;             /* its successor (i+1, d0 - nm or all of π_{p+1}); that of
                               (k, d) is nxt + d - d0 (TR_LAST: none) */
} Trans;

typedef void (*TransFn)(void *env, const Trans *t);

/* Whether state q of a [L+2][D] table is dead: F infinite, no suffix (the
 * DPs' own "nothing to extend" test). */
typedef int (*DeadFn)(const void *env, size_t q);

/* The d (1-based, devices of π_p free) of row k, mesh p with a live state:
 * lo..hi (empty: lo > hi).  A transition whose successor is dead does
 * nothing in any DP, and most are (in dp_pareto at L = 98 with intra-op
 * choices, 95 % of the successors visited), so the walk clamps each
 * transition's d range to the successor row's live range. */
typedef struct Live {
    int lo, hi;
} Live;

/* K1 for boundary cost c at tmax, remembered for the last c of each kind:
 * C(i, a, a) and C(i, a, b) take few distinct values. */
static inline int k1_memo(const Ctx *x, double c, double tmax, double *mc, int *mk)
{
    if (c != *mc) {
        *mk = schedule_warmup_step(SCHED_H1F1B, 1, 0, c, tmax, x->opt->eps, x->B, NULL, NULL);
        *mc = c;
    }
    return *mk;
}

/* The transitions of (k, p) with t <= tmax and C(i) <= cmax (the comm bound
 * of §5.2.1 (ii); INFINITY: none), each passed to fn(env, ...). */
static inline __attribute__((always_inline)) void
walk_kp(const Ctx *x, const Order *od, int k, int p, double tmax, double cmax, int want_k1,
        const Live *lv, TransFn fn, void *env)
{
    const int L = x->L, a = od->mesh[p], Dp = od->Dp[p], last = p + 1 == od->P;
    const int b = last ? a : od->mesh[p + 1];
    const size_t row = (size_t)k * x->D + od->off[p];
    const size_t next_all = last ? 0 : (size_t)od->off[p + 1] + od->Dp[p + 1] - 1;
    double mc[2] = {NAN, NAN}; /* NaN: nothing remembered yet */
    int mk[2] = {0, 0};
    Trans t;
    t.k = k;
    t.p = p;
    t.K1 = 0;
    for (int j = 0; j < x->nsub[a]; j++) {
        int nm = x->size[(size_t)a * x->nsubmax + j]; /* in DP units */
        if (nm > Dp)
            continue;
        t.j = j;
        t.nm = nm;
        const CandRef *r = NULL;
        int n = L - k + 1; /* scan: i = k + q */
        if (x->opt->sparse_index) {
            size_t q = ((size_t)a * ((size_t)L + 2) + k) * x->nsubmax + j; /* sp_off's order */
            r = x->sp + x->sp_off[q];
            n = x->sp_off[q + 1] - x->sp_off[q];
        }
        for (int q = 0; q < n; q++) {
            int i;
            if (r) {
                if (!(r[q].t <= tmax))
                    break; /* sorted by t */
                i = r[q].i;
                t.t = r[q].t;
                t.kmax = r[q].kmax;
            } else {
                i = k + q;
                const Tab *tb = tab_at(x, a, j, k, i);
                if (!tb->feasible || !(tb->t <= tmax))
                    continue;
                t.t = tb->t;
                t.kmax = x->opt->check_memory ? tb->kmax : INT_MAX;
            }
            t.i = i;
            if (i == L) {
                if (last) {
                    t.kind = TR_LAST;
                    t.c = 0.0;
                    t.d0 = t.d1 = nm;
                    t.cur = row + nm - 1;
                    t.nxt = 0;
                    fn(env, &t);
                }
                continue;
            }
            const size_t rown = (size_t)(i + 1) * x->D;
            /* d = nm+1..Dp, successor d - nm: within the live range + nm */
            int d0 = nm + 1, d1 = Dp;
            if (lv) {
                const Live *l = &lv[(size_t)(i + 1) * od->P + p];
                d0 = l->lo + nm > d0 ? l->lo + nm : d0;
                d1 = l->hi + nm < d1 ? l->hi + nm : d1;
            }
            double c = comm_at(x, i, a, a);
            if (d0 <= d1 && !(c > cmax)) {
                t.kind = TR_SAME;
                t.c = c;
                if (want_k1)
                    t.K1 = k1_memo(x, c, tmax, &mc[0], &mk[0]);
                t.d0 = d0;
                t.d1 = d1;
                t.cur = row + d0 - 1;
                t.nxt = rown + od->off[p] + (d0 - nm - 1);
                fn(env, &t);
            }
            if (last)
                continue;
            /* the successor has all of π_{p+1} free: the live range's top */
            if (lv && lv[(size_t)(i + 1) * od->P + p + 1].hi != od->Dp[p + 1])
                continue;
            c = comm_at(x, i, a, b);
            if (!(c > cmax)) {
                t.kind = TR_NEXT;
                t.c = c;
                if (want_k1)
                    t.K1 = k1_memo(x, c, tmax, &mc[1], &mk[1]);
                t.d0 = t.d1 = nm;
                t.cur = row + nm - 1;
                t.nxt = rown + next_all;
                fn(env, &t);
            }
        }
    }
}

/* walk_kp over the whole table in the backward DPs' order: k = L..1
 * (every successor row i+1 > k is final before row k is read), all p.
 * With dead (NULL: none), the live ranges of each row once it is final
 * (without memory for them, the walk visits every d: the same result). */
static inline __attribute__((always_inline)) void
walk_back(const Ctx *x, const Order *od, double tmax, double cmax, int want_k1, TransFn fn,
          DeadFn dead, void *env)
{
    const int P = od->P;
    Live *lv = dead ? malloc((size_t)(x->L + 2) * P * sizeof *lv) : NULL;
    for (int k = x->L; k >= 1; k--) {
        if (out_of_time(x))
            break; /* the root row stays unset: this DP yields nothing */
        for (int p = 0; p < P; p++)
            walk_kp(x, od, k, p, tmax, cmax, want_k1, lv, fn, env);
        for (int p = 0; lv && p < P; p++) {
            size_t q0 = (size_t)k * x->D + od->off[p] - 1; /* d = 1 at q0 + 1 */
            int lo = 1, hi = od->Dp[p];
            while (lo <= hi && dead(env, q0 + lo))
                lo++;
            while (hi >= lo && dead(env, q0 + hi))
                hi--;
            if (lo > hi)
                lo = 1, hi = 0; /* none (hi != Dp: the top is dead too) */
            lv[(size_t)k * P + p] = (Live){lo, hi};
        }
    }
    free(lv);
}

/* The comm-bound limit of the DPs at tmax (INFINITY: no bound). */
static double cmax_of(const Ctx *x, double tmax)
{
    return x->opt->comm_bound ? tmax : INFINITY;
}

typedef struct StageRec {
    int k, i, p, j;
} StageRec;

/* dp_pareto's per-state front: see there. */
#define PARETO_MAX 8

/* Pairs (s, N) packed as s << 16 | N (dp_pareto runs only where both fit
 * 16 bits: B and the stage cap <= FRONT_LIM); the count of pairs in use
 * lies in a separate byte array (Work.Frn), so the test "no suffix here"
 * reads one byte, and a front is 32 bytes (half the unpacked size: the
 * probes are bound by these reads). */
#define FRONT_LIM 0xffff

typedef struct Front {
    uint32_t sn[PARETO_MAX];
} Front;

typedef struct Work {
    double *G;              /* [L+2][D] relaxed DP */
    double *F;              /* [L+2][D][Smax+1] */
    int *N;                 /* warm-up of the first stage of the substructure */
    int *ch;                /* choice: i * nsubmax + j (choice_pack), -1 none */
    int *slo, *shi;         /* [L+2][D]: range of s with finite F (empty: lo > hi) */
    int *Nm, *Sm;           /* [L+2][D]: dp_feasible */
    int *Ks;                /* [Smax+1]: K by stage count (schedules other than H-1F1B) */
    Front *Fr;              /* [L+2][D]: dp_pareto (H-1F1B only) */
    unsigned char *Frn;     /* [L+2][D]: pairs in use in Fr */
    double *Fm;             /* [L+2][D]: dp_pareto's lower bound of F */
    double *H;              /* [L+2][D]: dp_prefix */
    long transitions;
    /* profile (DpStats): thread time per part and DP runs */
    double t_keys, t_low, t_bounds, t_full;
    long n_relaxed, n_pareto, n_feasible;
} Work;

/* Layout [k][pos][s]: the stage count is the innermost index, so one
 * transition (a candidate stage and a device count) updates a contiguous
 * run of s from a contiguous run of s - 1. */
static size_t widx(const Ctx *x, int s, int k, int pos)
{
    return ((size_t)k * x->D + pos) * (size_t)(x->Smax + 1) + s;
}

static int better(double v, int n, int ch, double v0, int n0, int ch0)
{
    /* (F, N, i, j) lexicographic: min F (Eq. 14/18), then the smaller
     * warm-up (less memory upstream), then a fixed order. */
    if (v != v0)
        return v < v0;
    if (n != n0)
        return n < n0;
    return ch < ch0;
}

/* A stage choice (last layer i, submesh index j) as one int: i major, so
 * comparing packed values orders by (i, j) as better() wants.  The radix is
 * the largest submesh count (a mesh of N nodes has N + log2(M) shapes,
 * more than 256 on 256 x 8 devices); ctx_build checks it fits. */
static inline int choice_pack(const Ctx *x, int i, int j)
{
    return i * x->nsubmax + j;
}

typedef struct RunEnv {     /* dp_run's state for its transition function */
    const Ctx *x;
    const Order *od;
    Work *w;
    double bound;
    const double *Gb, *Hf;
    int h1, Kterm;
    long trans;
} RunEnv;

/* Offer (F, N, choice) = (v, K, chv) to the state of stage count s at
 * (k, pos) = cstate (its F index q); keep it if better. */
static inline void run_offer(Work *w, size_t q, size_t cstate, int s, double v, int K, int chv)
{
    if (!better(v, K, chv, w->F[q], w->N[q], w->ch[q]))
        return;
    w->F[q] = v;
    w->N[q] = K;
    w->ch[q] = chv;
    if (s < w->slo[cstate])
        w->slo[cstate] = s;
    if (s > w->shi[cstate])
        w->shi[cstate] = s;
}

/* Eq. 14 / 18 for one transition over its d range: F(s, k, d) from
 * F(s - 1, successor) + t + 2C(i), with Eq. 24 and the bounds. */
static inline __attribute__((always_inline)) void run_tr(void *env, const Trans *t)
{
    RunEnv *e = env;
    const Ctx *x = e->x;
    Work *w = e->w;
    const int L = x->L, B = x->B, S1 = x->Smax + 1, p = t->p;
    const int terminal = t->kind == TR_LAST, kmax = t->kmax, K1 = t->K1;
    const int chv = choice_pack(x, t->i, t->j);
    const double w0 = 2.0 * t->c + t->t;
    /* s stages for layers k..L: at most one per layer and per free device
     * (d here and the meshes after p), at least one per remaining mesh */
    const int smax0 = L - t->k + 1 < x->Smax ? L - t->k + 1 : x->Smax;
    const int smin = e->od->P - p, rem = e->od->rem_after[p];
    const int s_lo0 = terminal ? 1 : (smin > 2 ? smin : 2);
    /* H-1F1B between stages: K = min(B, N + K1 - 1), and Eq. 24 (K <= kmax)
     * as a limit on N, hoisted */
    const int nlim = kmax >= B ? INT_MAX : kmax - K1 + 1;
    for (int d = t->d0; d <= t->d1; d++) {
        const size_t cstate = t->cur + (size_t)(d - t->d0), nstate = t->nxt + (size_t)(d - t->d0);
        int s_lo = s_lo0, s_hi = 1;
        if (!terminal) { /* only where F(s - 1, next) is finite */
            s_hi = smax0 < d + rem ? smax0 : d + rem;
            if (w->shi[nstate] < 0)
                continue;
            if (s_lo < w->slo[nstate] + 1)
                s_lo = w->slo[nstate] + 1;
            if (s_hi > w->shi[nstate] + 1)
                s_hi = w->shi[nstate] + 1;
        }
        /* (added by "dp-speed") thr: the bound for this state's suffix; Hf
         * (a lower bound of every prefix reaching the state) makes it
         * tighter, Gb (a lower bound of F at the next state) skips the whole
         * stage-count run. */
        double thr = e->bound;
        if (e->Hf) {
            double h = e->Hf[cstate];
            if (h == INF)
                continue; /* no prefix reaches this state */
            if (thr < INF)
                thr = thr - h + 1e-9 * (fabs(thr) + h);
        }
        if (e->Gb && !terminal && thr < INF && e->Gb[nstate] + w0 >= thr)
            continue;
        const size_t cur = cstate * (size_t)S1;
        if (terminal) { /* F(0, L+1, 0..0) = 0, N(0, L+1, ...) = 0: s = 1 only */
            e->trans++;
            if (e->Kterm <= kmax && w0 < thr) /* Eq. 24; the bound */
                run_offer(w, cur + 1, cstate, 1, w0, e->Kterm, chv);
            continue;
        }
        const double *Fn = w->F + nstate * (size_t)S1 - 1; /* F(s - 1, next) at Fn[s] */
        const int *Nn = w->N + nstate * (size_t)S1 - 1;
        for (int s = s_lo; s <= s_hi; s++) {
            double fn = Fn[s];
            if (fn == INF)
                continue;
            e->trans++;
            int K;
            if (e->h1) {
                int nn = Nn[s];
                if (nn > nlim)
                    continue; /* Eq. 24 */
                K = nn + K1 - 1 < B ? nn + K1 - 1 : B;
            } else {
                K = w->Ks[s];
                if (K > kmax)
                    continue; /* Eq. 24 */
            }
            double v = fn + w0;
            if (v < thr)
                run_offer(w, cur + s, cstate, s, v, K, chv);
        }
    }
}

static inline int run_dead(const void *env, size_t q)
{
    return ((const RunEnv *)env)->w->shi[q] < 0; /* no s with a finite F */
}

/* Full DP of Eq. 14-23 for one t_max.  Returns min_s F(s, 1, all devices)
 * (INF if infeasible); *best_s gets the s.
 * bound: partial sums >= bound are dropped (branch and bound; INF: none).
 * Stage times and boundary costs are >= 0, so a dropped partial sum can
 * only lead to a total >= bound, and every state whose F stays below the
 * bound keeps the same F, N and choice as without it. */
static double dp_run(const Ctx *x, const Order *od, double tmax, double bound, const double *Gb,
                     const double *Hf, Work *w, int *best_s)
{
    const int L = x->L, S1 = x->Smax + 1;
    const DpOptions *opt = x->opt;
    size_t total = widx(x, 0, L + 2, 0);
    for (size_t q = 0; q < total; q++) {
        w->F[q] = INF;
        w->N[q] = 0;
        w->ch[q] = -1;
    }
    for (size_t q = 0; q < (size_t)(L + 2) * x->D; q++) {
        w->slo[q] = INT_MAX;
        w->shi[q] = -1;
    }
    /* K of Eq. 23 is the warm-up this stage gets in the emitted schedule:
     * schedule_warmup_step, the same function, evaluated outside the
     * transition loop.  H-1F1B: K(N_next) = min(B, N_next + δ) for
     * N_next >= 1, so K(n) = min(B, n + K(1) - 1) (also when K(1) = B;
     * Trans.K1).  The others depend on s only. */
    RunEnv e = {x, od, w, bound, Gb, Hf, opt->schedule == SCHED_H1F1B, 0, 0};
    for (int s = 1; s <= x->Smax; s++)
        w->Ks[s] = schedule_warmup_step(opt->schedule, 1, s, 0.0, tmax, opt->eps, x->B, NULL, NULL);
    e.Kterm = schedule_warmup_step(opt->schedule, 0, 1, 0.0, tmax, opt->eps, x->B, NULL, NULL);
    walk_back(x, od, tmax, cmax_of(x, tmax), e.h1, run_tr, run_dead, &e);
    w->transitions += e.trans;
    double best = INF;
    size_t b0 = widx(x, 0, 1, od->off[0] + od->Dp[0] - 1);
    *best_s = -1;
    for (int s = 1; s < S1; s++) {
        double v = w->F[b0 + s];
        if (v < best) {
            best = v;
            *best_s = s;
        }
    }
    return best;
}

/* Follow the choices from (s, 1, all devices) and write the stages. */
static int dp_trace(const Ctx *x, const Order *od, const Work *w, int s, StageRec *out)
{
    int k = 1, p = 0, d = od->Dp[0], n = 0;
    while (s > 0) {
        int chv = w->ch[widx(x, s, k, od->off[p] + d - 1)];
        if (chv < 0)
            return -1;
        int i = chv / x->nsubmax, j = chv % x->nsubmax;
        out[n++] = (StageRec){k, i, p, j};
        d -= x->size[(size_t)od->mesh[p] * x->nsubmax + j];
        if (d == 0 && p + 1 < od->P) {
            p++;
            d = od->Dp[p];
        }
        k = i + 1;
        s--;
    }
    return n;
}

/* g[d] = min(g[d], h[d] + w) for d in [0, n): the inner loop of the relaxed,
 * prefix and bottleneck DPs (most of their time).  g and h are different
 * rows of a table.  With SSE2, two lanes at a time: _mm_min_pd(v, g) is
 * "v < g ? v : g" and _mm_max_pd(h, w) "h > w ? h : w", the scalar
 * expressions below, bit for bit (no NaN occurs: INF + w stays INF). */
static inline void row_min_add(double *restrict g, const double *restrict h, double w, int n)
{
    int d = 0;
#ifdef __SSE2__
    const __m128d wv = _mm_set1_pd(w);
    for (; d + 2 <= n; d += 2) {
        __m128d v = _mm_add_pd(_mm_loadu_pd(h + d), wv);
        _mm_storeu_pd(g + d, _mm_min_pd(v, _mm_loadu_pd(g + d)));
    }
#endif
    for (; d < n; d++) {
        double v = h[d] + w;
        g[d] = v < g[d] ? v : g[d];
    }
}

static inline void row_min_max(double *restrict g, const double *restrict h, double w, int n)
{
    int d = 0;
#ifdef __SSE2__
    const __m128d wv = _mm_set1_pd(w);
    for (; d + 2 <= n; d += 2) {
        __m128d v = _mm_max_pd(_mm_loadu_pd(h + d), wv);
        _mm_storeu_pd(g + d, _mm_min_pd(v, _mm_loadu_pd(g + d)));
    }
#endif
    for (; d < n; d++) {
        double v = h[d] > w ? h[d] : w;
        g[d] = v < g[d] ? v : g[d];
    }
}

/* Relaxed DP over (k, pos) without the stage count: min Σ (t + 2c) over
 * layouts whose candidates have t <= tmax, whose boundaries obey the comm
 * bound, and whose stages fit with the smallest K the schedule could give
 * them (δ + 1 for H-1F1B, 1 otherwise).  Every plan the full DP can return
 * at tmax is such a layout, so: INF here => the full DP is infeasible at
 * tmax (monotone in tmax: the low side of (b)); with tmax = INF and no
 * filters it is a lower bound of Eq. 13's first term (the high side). */
typedef struct RowEnv {     /* dp_relaxed, dp_prefix, dp_bottleneck */
    const Ctx *x;
    double *G;
    int filters, h1;        /* dp_bottleneck: filters = the comm bound */
    int dlo;                /* dp_prefix: first d - 1 with a finite prefix there */
} RowEnv;

/* Eq. 24 with the smallest K a stage could get across this transition (the
 * relaxed filter; the walk applied the comm bound). */
static inline int relaxed_ok(const RowEnv *e, const Trans *t)
{
    return (e->h1 && t->kind != TR_LAST ? t->K1 : 1) <= t->kmax;
}

static inline __attribute__((always_inline)) void relaxed_tr(void *env, const Trans *t)
{
    RowEnv *e = env;
    if (e->filters && !relaxed_ok(e, t))
        return;
    if (t->kind == TR_LAST) {
        if (t->t < e->G[t->cur])
            e->G[t->cur] = t->t;
        return;
    }
    /* G(k, d) from G(successor of d) for d = d0..d1 */
    row_min_add(e->G + t->cur, e->G + t->nxt, 2.0 * t->c + t->t, t->d1 - t->d0 + 1);
}

/* G infinite: INF + w stays INF (w >= 0), the row minima keep their value
 * (dp_relaxed: only with boundary costs >= 0). */
static inline int row_dead(const void *env, size_t q)
{
    return !(((const RowEnv *)env)->G[q] < INF);
}

static double dp_relaxed(const Ctx *x, const Order *od, double tmax, int filters, double *G)
{
    const int D = x->D;
    for (size_t q = 0; q < (size_t)(x->L + 2) * D; q++)
        G[q] = INF;
    RowEnv e = {x, G, filters, filters && x->opt->check_memory && x->opt->schedule == SCHED_H1F1B,
                0};
    walk_back(x, od, filters ? tmax : INF, filters ? cmax_of(x, tmax) : INFINITY, e.h1,
              relaxed_tr, x->nonneg ? row_dead : NULL, &e);
    return G[(size_t)1 * D + od->off[0] + od->Dp[0] - 1];
}

/* Forward twin of dp_relaxed (added by "dp-speed"): H[k][pos] = the
 * smallest Σ (t + 2c) of the stages before layer k over prefixes from the
 * root (layer 1, all of π_1 free) to state (k, pos), with the same filters
 * at tmax.  Every prefix of a plan the full DP can return is such a prefix,
 * so H is a lower bound of it, and INF means no plan passes the state.
 * Sums run in the other direction than the full DP's, so its users allow
 * a relative slack for rounding. */
static inline __attribute__((always_inline)) void prefix_tr(void *env, const Trans *t)
{
    RowEnv *e = env;
    if (t->kind == TR_LAST || !relaxed_ok(e, t))
        return; /* a stage ending at L ends the plan: nothing to push */
    /* H(successor of d) from H(k, d) for d = d0..d1 with a finite H(k, d) */
    int d0 = t->d0 > e->dlo + 1 ? t->d0 : e->dlo + 1;
    if (d0 > t->d1)
        return;
    size_t sh = (size_t)(d0 - t->d0);
    row_min_add(e->G + t->nxt + sh, e->G + t->cur + sh, 2.0 * t->c + t->t, t->d1 - d0 + 1);
}

static void dp_prefix(const Ctx *x, const Order *od, double tmax, double *H)
{
    const int L = x->L, D = x->D;
    for (size_t q = 0; q < (size_t)(L + 2) * D; q++)
        H[q] = INF;
    H[(size_t)1 * D + od->off[0] + od->Dp[0] - 1] = 0.0;
    RowEnv e = {x, H, 1, x->opt->check_memory && x->opt->schedule == SCHED_H1F1B, 0};
    for (int k = 1; k < L; k++) { /* a stage starting at L ends the plan: nothing to push */
        if (out_of_time(x))
            break;
        for (int p = 0; p < od->P; p++) {
            const double *hk = &H[(size_t)k * D + od->off[p]];
            e.dlo = 0; /* first d - 1 with a finite prefix */
            while (e.dlo < od->Dp[p] && hk[e.dlo] == INF)
                e.dlo++;
            if (e.dlo < od->Dp[p])
                walk_kp(x, od, k, p, tmax, cmax_of(x, tmax), e.h1, NULL, prefix_tr, &e);
        }
    }
}

/* Exact-feasibility filter (added by "plan2"): a relaxation of the full DP
 * without its F and stage-count dimensions that answers "can any layout be
 * feasible at tmax?" in the time of dp_relaxed.  Two scalar DPs over
 * (k, pos), both sound (full DP finite => both finite), both monotone in
 * tmax (more candidates, δ of Eq. 2 non-increasing, comm bound looser):
 *   Nm: the smallest warm-up N the first stage of any feasible suffix can
 *       have.  The emitted K of a stage is a non-decreasing function of the
 *       next stage's N (H-1F1B: N_next + δ, Eq. 1) or of the suffix's stage
 *       count (1F1B: s, Eager-1F1B: 2s - 1, GPipe: B), and Eq. 24 only gets
 *       harder as K grows, so the smallest N (H-1F1B) is the best any
 *       upstream stage can hope for: Nm is exact feasibility without the
 *       stage cap.
 *   Sm: the fewest stages of any suffix whose stages fit with a lower bound
 *       of their K (H-1F1B: N >= min(B, stages in the suffix), since every
 *       δ >= 1); Sm(start) > Smax means the stage cap cannot be met.
 * The full DP keeps one (F, N) per state, so it may miss a feasible layout
 * (min-F substructure) but never finds one these miss: skipping a tmax that
 * fails here leaves the result unchanged. */
typedef struct FeasEnv {    /* dp_feasible */
    const Ctx *x;
    int *Nm, *Sm;
    double tmax;
    int h1, Kterm;
} FeasEnv;

static inline __attribute__((always_inline)) void feasible_tr(void *env, const Trans *t)
{
    FeasEnv *e = env;
    const Ctx *x = e->x;
    const int B = x->B, kmax = t->kmax;
    int *Nm = e->Nm, *Sm = e->Sm;
    if (t->kind == TR_LAST) { /* Eq. 24 at the last stage's K (in 1..B: kmax agrees) */
        if (e->Kterm <= kmax) {
            if (e->Kterm < Nm[t->cur])
                Nm[t->cur] = e->Kterm;
            Sm[t->cur] = 1;
        }
        return;
    }
    /* H-1F1B: K(n) = min(B, n + K1 - 1) for n >= 1 (Eq. 1 with δ fixed by
     * c), and Eq. 24 is K <= kmax: no call per d. */
    const int K1 = t->K1;
    if (e->h1 && K1 > kmax)
        return; /* every K >= K1 (n >= 1, K1 <= B) */
    for (int d = t->d0; d <= t->d1; d++) {
        size_t q = t->nxt + (size_t)(d - t->d0), o = t->cur + (size_t)(d - t->d0);
        int sv = Sm[q], nv = Nm[q];
        if (sv == INT_MAX)
            continue; /* Nm finite implies Sm finite */
        /* any suffix from q has N >= Nm[q] (H-1F1B) */
        int K;
        if (e->h1) {
            int n = nv != INT_MAX && nv > sv ? nv : sv;
            n = n < B ? n : B;
            K = n + K1 - 1 < B ? n + K1 - 1 : B;
        } else {
            K = schedule_warmup_step(x->opt->schedule, 0, sv + 1, t->c, e->tmax, x->opt->eps, B,
                                     NULL, NULL);
        }
        if (K <= kmax && sv + 1 < Sm[o])
            Sm[o] = sv + 1;
        if (!e->h1 || nv == INT_MAX)
            continue;
        K = nv + K1 - 1 < B ? nv + K1 - 1 : B;
        if (K <= kmax && K < Nm[o])
            Nm[o] = K;
    }
}

static inline int feasible_dead(const void *env, size_t q)
{
    return ((const FeasEnv *)env)->Sm[q] == INT_MAX; /* Nm finite implies Sm finite */
}

static int dp_feasible(const Ctx *x, const Order *od, double tmax, int *Nm, int *Sm)
{
    const int D = x->D;
    for (size_t q = 0; q < (size_t)(x->L + 2) * D; q++)
        Nm[q] = Sm[q] = INT_MAX;
    FeasEnv e = {x, Nm, Sm, tmax, x->opt->schedule == SCHED_H1F1B,
                 schedule_warmup_step(x->opt->schedule, 0, 1, 0.0, tmax, x->opt->eps, x->B, NULL,
                                      NULL)};
    walk_back(x, od, tmax, cmax_of(x, tmax), e.h1, feasible_tr, feasible_dead, &e);
    size_t root = (size_t)1 * D + od->off[0] + od->Dp[0] - 1;
    if (e.h1 && Nm[root] == INT_MAX)
        return 0;
    return Sm[root] != INT_MAX && Sm[root] <= x->Smax;
}

/* Exact feasibility under H-1F1B with the stage cap (added by "plan2").
 * Per (k, pos) the Pareto front of (stages in the suffix, N of its first
 * stage) over suffixes whose every stage fits (Eq. 24 with its emitted K)
 * with at most Smax stages: upstream stages need only a small N (K is
 * N_next + δ, non-decreasing in N_next) and a small stage count (the cap),
 * so a dominated pair can never help.  The front is exact while it holds at
 * most PARETO_MAX pairs; *overflow is set otherwise (the caller then trusts
 * nothing from this run).  Exact feasibility is monotone in tmax, which
 * makes it binary-searchable.  Cost: like dp_feasible times the front size
 * (a few), against the full DP's whole stage-count range per transition. */

/* Insert (s, N) into the front f of *n pairs; returns 0, or -1 when the
 * front would exceed PARETO_MAX. */
static inline int front_add(Front *f, unsigned char *n, int s, int N)
{
    const int cnt = *n;
    for (int q = 0; q < cnt; q++)
        if ((int)(f->sn[q] >> 16) <= s && (int)(f->sn[q] & 0xffff) <= N)
            return 0; /* dominated */
    int m = 0;
    for (int q = 0; q < cnt; q++) /* keep what the new pair does not dominate */
        if (!(s <= (int)(f->sn[q] >> 16) && N <= (int)(f->sn[q] & 0xffff)))
            f->sn[m++] = f->sn[q];
    if (m >= PARETO_MAX)
        return -1;
    f->sn[m] = (uint32_t)s << 16 | (uint32_t)N;
    *n = (unsigned char)(m + 1);
    return 0;
}

typedef struct ParetoEnv {  /* dp_pareto */
    const Ctx *x;
    Front *Fr;
    unsigned char *Frn;
    double *Fm;
    int Kterm, overflow;
} ParetoEnv;

static inline __attribute__((always_inline)) void pareto_tr(void *env, const Trans *t)
{
    ParetoEnv *e = env;
    const int B = e->x->B, Smax = e->x->Smax, kmax = t->kmax;
    Front *Fr = e->Fr;
    unsigned char *Frn = e->Frn;
    double *Fm = e->Fm;
    if (t->kind == TR_LAST) { /* Eq. 24 at the last stage's K (in 1..B: kmax agrees) */
        if (e->Kterm <= kmax) {
            if (front_add(&Fr[t->cur], &Frn[t->cur], 1, e->Kterm))
                e->overflow = 1;
            if (t->t < Fm[t->cur])
                Fm[t->cur] = t->t;
        }
        return;
    }
    /* front N >= 1: K(N) = min(B, N + K1 - 1); Eq. 24 as K <= kmax, so
     * nothing passes where K1 (<= B) already exceeds kmax */
    const int K1 = t->K1;
    if (K1 > kmax)
        return;
    const double w0 = 2.0 * t->c + t->t;
    for (int d = t->d0; d <= t->d1; d++) {
        size_t q = t->nxt + (size_t)(d - t->d0), o = t->cur + (size_t)(d - t->d0);
        const int nq = Frn[q];
        int admitted = 0;
        for (int r = 0; r < nq; r++) {
            const int sr = (int)(Fr[q].sn[r] >> 16), Nr = (int)(Fr[q].sn[r] & 0xffff);
            if (sr + 1 > Smax)
                continue;
            int K = Nr + K1 - 1 < B ? Nr + K1 - 1 : B;
            if (K > kmax)
                continue;
            admitted = 1;
            if (front_add(&Fr[o], &Frn[o], sr + 1, K))
                e->overflow = 1;
        }
        double v = Fm[q] + w0;
        if (admitted && v < Fm[o])
            Fm[o] = v;
    }
}

static inline int pareto_dead(const void *env, size_t q)
{
    return ((const ParetoEnv *)env)->Frn[q] == 0; /* no suffix fits */
}

/* dp_pareto on w's tables (w->Fr set: H-1F1B with memory checks, B and the
 * stage cap <= FRONT_LIM). */
static int dp_pareto(const Ctx *x, const Order *od, double tmax, Work *w, int *overflow)
{
    const int D = x->D;
    memset(w->Frn, 0, (size_t)(x->L + 2) * D);
    for (size_t q = 0; q < (size_t)(x->L + 2) * D; q++)
        w->Fm[q] = INF;
    ParetoEnv e = {x, w->Fr, w->Frn, w->Fm,
                   schedule_warmup_step(SCHED_H1F1B, 0, 1, 0.0, tmax, x->opt->eps, x->B, NULL, NULL),
                   0};
    walk_back(x, od, tmax, cmax_of(x, tmax), 1, pareto_tr, pareto_dead, &e);
    *overflow = e.overflow;
    return w->Frn[(size_t)1 * D + od->off[0] + od->Dp[0] - 1] > 0;
}

/* Root of Fm after dp_pareto: a lower bound of Eq. 14's F over every
 * layout that fits at tmax (valid when the front did not overflow). */
static double pareto_lb(const Ctx *x, const Order *od, const double *Fm)
{
    return Fm[(size_t)1 * x->D + od->off[0] + od->Dp[0] - 1];
}

/* Bottleneck bound of an order (added by "plan5"): the smallest t_max any
 * layout could use, min over layouts of the largest stage time (and, with
 * the comm bound, boundary cost), over candidates that fit with K = 1.
 * Every plan the full DP returns at t_max is such a layout with all of those
 * <= t_max, so Eq. 13 >= (B-1) bottleneck + LB (LB: dp_relaxed unfiltered)
 * for every plan of the order: a key to search orders by, and a cut. */
static inline __attribute__((always_inline)) void bottleneck_tr(void *env, const Trans *t)
{
    RowEnv *e = env;
    if (t->kmax < 1)
        return; /* does not fit even K = 1 */
    if (t->kind == TR_LAST) {
        if (t->t < e->G[t->cur])
            e->G[t->cur] = t->t;
        return;
    }
    double w = t->t;
    if (e->filters && t->c > w) /* filters: the comm bound */
        w = t->c;
    row_min_max(e->G + t->cur, e->G + t->nxt, w, t->d1 - t->d0 + 1);
}

static double dp_bottleneck(const Ctx *x, const Order *od, double *G)
{
    const int D = x->D;
    for (size_t q = 0; q < (size_t)(x->L + 2) * D; q++)
        G[q] = INF;
    RowEnv e = {x, G, x->opt->comm_bound, 0, 0};
    walk_back(x, od, INF, INFINITY, 0, bottleneck_tr, row_dead, &e);
    return G[(size_t)1 * D + od->off[0] + od->Dp[0] - 1];
}

/* Both filters of the low side; monotone in tmax, so binary-searchable. */
static int tmax_possible(const Ctx *x, const Order *od, double tmax, Work *w)
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
static int exact_low(const Ctx *x, const Order *od, int lo0, int limit, Work *w)
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
static int probe_bound(const Ctx *x, const Order *od, double tmax, Work *w, int *ovf, double *lb)
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
static int gallop_pareto(const Ctx *x, const Order *od, int a, int limit, Work *w, int *ovf)
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
static int search_low(const Ctx *x, const Order *od, int a, int b, Work *ws, int nthreads,
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

/* ------------------------------------------------------------ batches */

typedef struct Slot {       /* result of one t_max */
    double tmax, value;     /* value: Eq. 22 (INF when infeasible or pruned) */
    int pruned;             /* skipped by the relaxed bound */
    int lbt_known;          /* lbt holds dp_relaxed at tmax (computed by skip_bounded) */
    double lbt;
    int nst;
    StageRec *st;           /* [Smax] */
} Slot;

typedef struct Batch {
    const Ctx *x;
    const Order *od;
    Slot *slots;
    int n;
    double best;            /* best Eq. 13 value before this batch */
    atomic_int next;        /* next slot to take */
} Batch;

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
static int skip_bounded(const Ctx *x, const Order *od, int q, int hi, double best, Work *w,
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
static int shrink_top(const Ctx *x, const Order *od, int lo, int top, double best, Work *w)
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

static int run_batch(Batch *b, Work *ws, int nthreads)
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

/* ------------------------------------------------------------ orders */

static double mesh_peak(const ClusterSpec *c, int a)
{
    const DeviceSpec *d = &c->meshes[a].dev;
    if (strcmp(c->dtype, "fp32") == 0)
        return d->flops_fp32;
    if (strcmp(c->dtype, "fp16") == 0 || d->flops_bf16 <= 0)
        return d->flops_fp16;
    return d->flops_bf16;
}

typedef struct OrderList {
    int *v;                 /* [n][P] */
    int n, cap, P;
} OrderList;

static int orders_add(OrderList *ol, const int *perm)
{
    for (int q = 0; q < ol->n; q++)
        if (memcmp(ol->v + (size_t)q * ol->P, perm, (size_t)ol->P * sizeof *perm) == 0)
            return 0;
    if (ol->n == ol->cap) {
        int nc = ol->cap ? 2 * ol->cap : 16;
        int *v = realloc(ol->v, (size_t)nc * ol->P * sizeof *v);
        if (!v)
            return -1;
        ol->v = v;
        ol->cap = nc;
    }
    memcpy(ol->v + (size_t)ol->n * ol->P, perm, (size_t)ol->P * sizeof *perm);
    ol->n++;
    return 0;
}

static int perms(OrderList *ol, int *a, int l)
{
    if (l == ol->P)
        return orders_add(ol, a);
    for (int q = l; q < ol->P; q++) {
        int t = a[l];
        a[l] = a[q];
        a[q] = t;
        if (perms(ol, a, l + 1))
            return -1;
        t = a[l];
        a[l] = a[q];
        a[q] = t;
    }
    return 0;
}

/* by: 0 peak FLOP/s descending, 1 ascending, 2 device memory descending, 3 ascending */
static void sort_by(const ClusterSpec *c, int *perm, int by)
{
    int P = c->nmeshes;
    for (int q = 1; q < P; q++) /* insertion sort: stable, P is small */
        for (int r = q; r > 0; r--) {
            int a = perm[r - 1], b = perm[r];
            double ka = by < 2 ? mesh_peak(c, a) : c->meshes[a].dev.mem_bytes;
            double kb = by < 2 ? mesh_peak(c, b) : c->meshes[b].dev.mem_bytes;
            int swap = (by % 2 == 0) ? (kb > ka) : (kb < ka);
            if (!swap)
                break;
            perm[r - 1] = b;
            perm[r] = a;
        }
}

/* Every permutation for few meshes; otherwise the cluster's order and the
 * meshes sorted by peak FLOP/s (descending, ascending) and by device memory
 * (descending, ascending). */
static int orders_make(const ClusterSpec *c, const DpOptions *opt, OrderList *ol)
{
    int P = c->nmeshes;
    ol->P = P;
    int *a = malloc((size_t)P * sizeof *a);
    if (!a)
        return -1;
    for (int q = 0; q < P; q++)
        a[q] = q;
    int rc = 0;
    if (opt->fixed_order)
        rc = orders_add(ol, a);
    else if (P <= opt->max_perm_meshes)
        rc = perms(ol, a, 0);
    else {
        rc = orders_add(ol, a);
        for (int by = 0; by < 4 && !rc; by++) {
            for (int q = 0; q < P; q++)
                a[q] = q;
            sort_by(c, a, by);
            rc = orders_add(ol, a);
        }
    }
    free(a);
    return rc;
}

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
    }
    free(c);
    free(N);
    free(dl);
    free(bey);
    return rc;
}

/* ------------------------------------------------------------ search */

static void order_set(Order *od, const Ctx *x, const int *perm)
{
    const ClusterSpec *c = x->c;
    od->off[0] = 0;
    for (int p = 0; p < od->P; p++) {
        od->mesh[p] = perm[p];
        od->Dp[p] = c->meshes[perm[p]].nodes * c->meshes[perm[p]].per_node / x->unit[perm[p]];
        od->off[p + 1] = od->off[p] + od->Dp[p];
    }
    od->rem_after[od->P - 1] = 0;
    for (int p = od->P - 2; p >= 0; p--)
        od->rem_after[p] = od->rem_after[p + 1] + od->Dp[p + 1];
}

typedef struct OrderKey {
    double key, lb;         /* (B-1) bottleneck + LB; LB of dp_relaxed unfiltered */
    double bn;              /* the bottleneck (INF: no layout) */
    int oi;
} OrderKey;

typedef struct KeyJob {
    const Ctx *x;
    const ClusterSpec *c;
    const OrderList *ol;
    OrderKey *k;
    Work *w;
    atomic_int *next;
    int fail;
} KeyJob;

/* Keys of the orders a thread takes (each order's key is a function of the
 * order alone: the split between threads does not matter). */
static void *key_main(void *arg)
{
    KeyJob *j = arg;
    const Ctx *x = j->x;
    int P = x->P;
    Order od;
    int *buf = malloc((size_t)(4 * P + 1) * sizeof *buf);
    if (!buf) {
        j->fail = 1;
        return NULL;
    }
    od.P = P;
    od.mesh = buf;
    od.Dp = buf + P;
    od.rem_after = buf + 2 * P;
    od.off = buf + 3 * P;
    for (;;) {
        int oi = atomic_fetch_add(j->next, 1);
        if (oi >= j->ol->n)
            break;
        order_set(&od, x, j->ol->v + (size_t)oi * P);
        double t0 = cpu_s();
        double bn = dp_bottleneck(x, &od, j->w->G);
        double lb = dp_relaxed(x, &od, INF, 0, j->w->G);
        j->k[oi].lb = lb;
        j->k[oi].bn = bn;
        j->k[oi].key = bn < INF && lb < INF ? (double)(x->B - 1) * bn + lb : INF;
        j->w->t_keys += cpu_s() - t0;
        if (x->opt->progress)
            atomic_fetch_add(&x->opt->progress->keys_done, 1);
    }
    free(buf);
    return NULL;
}

static int keys_compute(const Ctx *x, const ClusterSpec *c, const OrderList *ol, OrderKey *k,
                        Work *ws, int nthreads)
{
    atomic_int next;
    atomic_store(&next, 0);
    if (nthreads > 64)
        nthreads = 64;
    if (nthreads > ol->n)
        nthreads = ol->n;
    KeyJob jobs[64];
    pthread_t th[64];
    int started = 1;
    for (int t = 0; t < nthreads; t++)
        jobs[t] = (KeyJob){x, c, ol, k, &ws[t], &next, 0};
    for (int t = 1; t < nthreads; t++, started++)
        if (pthread_create(&th[t], NULL, key_main, &jobs[t]) != 0)
            break;
    key_main(&jobs[0]);
    int fail = jobs[0].fail;
    for (int t = 1; t < started; t++) {
        pthread_join(th[t], NULL);
        fail |= jobs[t].fail;
    }
    return fail ? -1 : 0;
}

static int cmp_orderkey(const void *pa, const void *pb)
{
    const OrderKey *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return a->oi - b->oi;
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
    DpOptions opt = *opt_in;
    if (!c || c->nmeshes <= 0 || !o || !o->stage || !o->comm)
        return ir_errorf(err, "plan: no meshes or no cost oracle");
    if (L <= 0)
        return ir_errorf(err, "plan: the model has %d layers", L);
    if (opt.microbatches <= 0)
        return ir_errorf(err, "plan: %d microbatches (need >= 1)", opt.microbatches);
    if (opt.threads < 1)
        opt.threads = 1;
    if (opt.threads > 64)
        opt.threads = 64;
    if (opt.batch < 1)
        opt.batch = 1;
    if (c->nmeshes > L)
        return ir_errorf(err, "plan: %d meshes but only %d layers: every mesh needs a stage of "
                         "at least one layer (every device is used, §5.2.1)", c->nmeshes, L);
    Ctx x;
    memset(&x, 0, sizeof x);
    x.c = c;
    x.o = o;
    x.opt = &opt;
    x.L = L;
    x.P = c->nmeshes;
    x.B = opt.microbatches;
    atomic_int stop;
    atomic_store(&stop, 0);
    x.stop = &stop;
    OrderList ol = {0};
    Work *ws = NULL;
    Slot *slots = NULL;
    StageRec *recs = NULL, *best_st = NULL;
    double *G = NULL;
    Order od = {0};
    OrderKey *okeys = NULL;
    int rc = -1;
    double t_start = now_s();
    if (opt.time_limit > 0)
        x.deadline = t_start + opt.time_limit; /* the tabulation counts too */
    if (ctx_build(&x, stats, err)) {
        *no_plan_in_time = atomic_load(&stop);
        goto done;
    }
    if (orders_make(c, &opt, &ol)) {
        ir_errorf(err, "plan: out of memory");
        goto done;
    }
    ws = calloc((size_t)opt.threads, sizeof *ws);
    slots = calloc((size_t)opt.batch, sizeof *slots);
    recs = calloc((size_t)opt.batch * x.Smax, sizeof *recs);
    best_st = calloc((size_t)x.Smax, sizeof *best_st);
    G = malloc((size_t)(L + 2) * x.D * sizeof *G);
    od.mesh = malloc((size_t)x.P * sizeof(int));
    od.Dp = malloc((size_t)x.P * sizeof(int));
    od.off = malloc((size_t)(x.P + 1) * sizeof(int));
    od.rem_after = malloc((size_t)(x.P + 1) * sizeof(int));
    if (!ws || !slots || !recs || !best_st || !G || !od.mesh || !od.Dp || !od.off ||
        !od.rem_after) {
        ir_errorf(err, "plan: out of memory");
        goto done;
    }
    size_t wsz = widx(&x, 0, L + 2, 0);
    for (int t = 0; t < opt.threads; t++) {
        ws[t].F = malloc(wsz * sizeof *ws[t].F);
        ws[t].N = malloc(wsz * sizeof *ws[t].N);
        ws[t].ch = malloc(wsz * sizeof *ws[t].ch);
        ws[t].G = malloc((size_t)(L + 2) * x.D * sizeof *ws[t].G);
        ws[t].H = malloc((size_t)(L + 2) * x.D * sizeof *ws[t].H);
        ws[t].slo = malloc((size_t)(L + 2) * x.D * sizeof *ws[t].slo);
        ws[t].shi = malloc((size_t)(L + 2) * x.D * sizeof *ws[t].shi);
        ws[t].Nm = malloc((size_t)(L + 2) * x.D * sizeof *ws[t].Nm);
        ws[t].Sm = malloc((size_t)(L + 2) * x.D * sizeof *ws[t].Sm);
        ws[t].Ks = malloc((size_t)(x.Smax + 2) * sizeof *ws[t].Ks);
        /* dp_pareto's packed pairs hold s <= Smax and N <= B (else the
         * search goes without it, as with another schedule: same plan) */
        int pareto = opt.schedule == SCHED_H1F1B && opt.check_memory && opt.prune_tmax &&
                     x.B <= FRONT_LIM && x.Smax <= FRONT_LIM;
        if (pareto) {
            ws[t].Fr = malloc((size_t)(L + 2) * x.D * sizeof *ws[t].Fr);
            ws[t].Frn = malloc((size_t)(L + 2) * x.D * sizeof *ws[t].Frn);
            ws[t].Fm = malloc((size_t)(L + 2) * x.D * sizeof *ws[t].Fm);
        }
        if (!ws[t].F || !ws[t].N || !ws[t].ch || !ws[t].G || !ws[t].H || !ws[t].slo || !ws[t].shi ||
            !ws[t].Nm || !ws[t].Sm || !ws[t].Ks ||
            (pareto && (!ws[t].Fr || !ws[t].Frn || !ws[t].Fm))) {
            ir_errorf(err, "plan: out of memory for the DP table (%zu states)", wsz);
            goto done;
        }
    }
    for (int q = 0; q < opt.batch; q++)
        slots[q].st = recs + (size_t)q * x.Smax;
    DpProgress *pg = opt.progress;
    if (pg) {
        atomic_store(&pg->keys_done, 0);
        atomic_store(&pg->orders_done, 0);
        atomic_store(&pg->tmax_done, 0);
        atomic_store(&pg->orders_total, ol.n);
        atomic_store(&pg->tmax_total, (long)ol.n * x.ntcand);
    }

    double best = INF, best_tmax = 0;
    int best_n = 0, best_order = -1;
    od.P = x.P;
    /* (b) across orders (added by "plan5"): search the orders by ascending
     * lower bound of Eq. 13, (B-1) bottleneck + LB, so a good plan is known
     * early and most orders are cut whole (an order whose bound is >= the
     * best cannot improve on it: its every t_max is pruned, high or low).
     * The sort is a fixed function of the instance (ties by index), and ties
     * of the final objective between orders still go to the lower index in
     * the reduction below, except where a bound cut the tied order. */
    okeys = malloc((size_t)ol.n * sizeof *okeys);
    if (!okeys) {
        ir_errorf(err, "plan: out of memory");
        goto done;
    }
    for (int oi = 0; oi < ol.n; oi++) {
        okeys[oi].oi = oi;
        okeys[oi].key = okeys[oi].lb = okeys[oi].bn = 0;
    }
    if (opt.prune_tmax && keys_compute(&x, c, &ol, okeys, ws, opt.threads)) {
        ir_errorf(err, "plan: out of memory");
        goto done;
    }
    if (opt.prune_tmax)
        qsort(okeys, (size_t)ol.n, sizeof *okeys, cmp_orderkey);
    for (int oq = 0; oq < ol.n; oq++) {
        if (out_of_time(&x))
            break; /* (issue 16) --time-limit: keep the best plan found so far */
        const int oi = okeys[oq].oi;
        const int *perm = ol.v + (size_t)oi * x.P;
        order_set(&od, &x, perm);
        if (stats) {
            stats->orders++;
            stats->tmax_candidates += x.ntcand;
        }
        int lo = 0, qend = x.ntcand; /* qend: every t_max from it on is cut */
        double lb = 0.0;
        if (opt.prune_tmax) {
            /* (b) high side first: Eq. 13 >= (B-1) t_max + LB for every plan
             * (LB: the relaxed DP without filters), so once a plan is known
             * only the t_max below `cut` can improve on it.  Feasibility is
             * monotone in t_max: one probe at cut - 1 tells whether any of
             * them is feasible, and the binary search for the smallest
             * feasible one needs to look below the cut only.  (Searching the
             * whole range first, as before, gave the same plan: every t_max
             * at or above the cut is pruned, every one below the smallest
             * feasible is skipped.) */
            lb = okeys[oq].lb;
            int cut = x.ntcand;
            if (okeys[oq].key == INF || (best < INF && okeys[oq].key >= best))
                cut = 0; /* no layout at all, or none that can beat the best */
            else if (best < INF) {
                int c0 = 0, c1 = x.ntcand; /* first q with (B-1) t_q + LB >= best */
                while (c0 < c1) {
                    int mid = c0 + (c1 - c0) / 2;
                    if ((double)(x.B - 1) * x.tcand[mid] + lb >= best)
                        c1 = mid;
                    else
                        c0 = mid + 1;
                }
                cut = c0;
            }
            /* low side: smallest t_max the relaxed DP reaches; every
             * smaller one is infeasible for the full DP as well.  Where
             * dp_pareto applies (H-1F1B with memory checks) it answers exact
             * feasibility directly (added by "dp-speed": the relaxed and
             * feasibility probes first, as before, only where its front
             * overflows; the smallest exactly feasible t_max is the same). */
            int use_pareto = ws[0].Fr != NULL, any = 0, galloped = -1;
            if (cut > 0 && use_pareto && best == INF) {
                /* no plan yet: gallop up from the bottleneck rather than probe
                 * the largest t_max first */
                int ovf, b0 = 0, b1 = cut - 1;
                while (b0 < b1) {
                    int mid = b0 + (b1 - b0) / 2;
                    if (x.tcand[mid] >= okeys[oq].bn)
                        b1 = mid;
                    else
                        b0 = mid + 1;
                }
                galloped = gallop_pareto(&x, &od, b0, cut, &ws[0], &ovf);
                if (ovf)
                    use_pareto = 0, galloped = -1;
                else
                    any = galloped < cut;
            } else if (cut > 0 && use_pareto) {
                int ovf;
                double lbt;
                any = probe_bound(&x, &od, x.tcand[cut - 1], &ws[0], &ovf, &lbt);
                if (ovf)
                    use_pareto = 0;
                /* (added by "dp-speed") the cut from the top: every t_max
                 * below the probe has (B-1) t + F >= (B-1) t + LB(top) (LB:
                 * the relaxed DP and dp_pareto's bound at the probe, both
                 * non-increasing in t_max), so the t_max where that reaches
                 * best are cut as well; repeat at the new cut while it moves. */
                while (any && use_pareto) {
                    int c0 = 0, c1 = cut;
                    while (c0 < c1) {
                        int mid = c0 + (c1 - c0) / 2;
                        if ((double)(x.B - 1) * x.tcand[mid] + lbt >= best)
                            c1 = mid;
                        else
                            c0 = mid + 1;
                    }
                    if (c0 == cut)
                        break;
                    cut = c0;
                    if (cut == 0 || x.tcand[cut - 1] < okeys[oq].bn) {
                        any = 0;
                        break;
                    }
                    any = probe_bound(&x, &od, x.tcand[cut - 1], &ws[0], &ovf, &lbt);
                    if (ovf) { /* fall back to the relaxed probe at this cut */
                        use_pareto = 0;
                        break;
                    }
                }
            }
            qend = cut;
            if (cut > 0 && !use_pareto)
                any = tmax_possible(&x, &od, x.tcand[cut - 1], &ws[0]);
            if (!any) {
                if (stats) { /* no layout at all: low; else below the cut low, above high */
                    int low = okeys[oq].key == INF ? x.ntcand : cut;
                    stats->tmax_pruned_low += low;
                    stats->tmax_pruned_high += x.ntcand - low;
                }
                if (pg) {
                    atomic_fetch_add(&pg->tmax_done, x.ntcand);
                    atomic_fetch_add(&pg->orders_done, 1);
                }
                continue;
            }
            /* tmax_possible(t) needs a layout whose stages and boundaries
             * are all <= t and fit with K >= 1: t >= the bottleneck, so the
             * search starts at the first candidate >= it (exact). */
            int a0 = 0, a1 = cut - 1;
            while (a0 < a1) {
                int mid = a0 + (a1 - a0) / 2;
                if (x.tcand[mid] >= okeys[oq].bn)
                    a1 = mid;
                else
                    a0 = mid + 1;
            }
            int ovf = 0, a = a0, limit = a0;
            if (use_pareto && galloped >= 0) {
                lo = galloped;
                limit = cut;
            } else if (use_pareto) {
                lo = search_low(&x, &od, a0, cut - 1, ws, opt.threads, 1, &ovf);
                limit = cut;
            }
            if (!use_pareto || ovf) {
                a = search_low(&x, &od, a0, cut - 1, ws, opt.threads, 0, &ovf);
                /* exact feasibility from there, up to where the high side prunes */
                limit = a;
                while (limit < x.ntcand &&
                       !(best < INF && (double)(x.B - 1) * x.tcand[limit] + lb >= best))
                    limit++;
                lo = limit > a ? exact_low(&x, &od, a, limit, &ws[0]) : a;
            }
            if (stats)
                stats->tmax_pruned_low += lo;
        }
        if (pg)
            atomic_fetch_add(&pg->tmax_done, lo);
        long order_done = lo;
        int span = 1;
        for (int q = lo; q < x.ntcand;) {
            Batch bt;
            bt.x = &x;
            bt.od = &od;
            bt.slots = slots;
            bt.best = best;
            bt.n = 0;
            /* While no plan is known nothing bounds a full DP: take one
             * t_max per thread until one is found (added by "dp-speed"; the
             * result does not depend on the batch size). */
            int nb = best == INF && opt.threads < opt.batch ? opt.threads : opt.batch;
            while (bt.n < nb && q < x.ntcand) {
                double t = x.tcand[q];
                if (q >= qend ||
                    (opt.prune_tmax && best < INF && (double)(x.B - 1) * t + lb >= best)) {
                    if (stats)
                        stats->tmax_pruned_high += x.ntcand - q;
                    q = x.ntcand; /* ascending: every later t_max is pruned too */
                    break;
                }
                if (opt.prune_tmax && best < INF) {
                    int hi = q + 1, h1 = qend; /* hi: the high-side cut (q is below it) */
                    while (hi < h1) {
                        int mid = hi + (h1 - hi) / 2;
                        if ((double)(x.B - 1) * x.tcand[mid] + lb >= best)
                            h1 = mid;
                        else
                            hi = mid + 1;
                    }
                    int known;
                    double lbt = 0;
                    int n = skip_bounded(&x, &od, q, hi, best, &ws[0], &span, &lbt,
                                         &known);
                    if (n > 0) {
                        if (stats)
                            stats->tmax_pruned_bound += n;
                        if (pg)
                            atomic_fetch_add(&pg->tmax_done, n);
                        order_done += n;
                        q += n;
                        continue;
                    }
                    slots[bt.n].lbt_known = known;
                    slots[bt.n].lbt = lbt;
                } else {
                    slots[bt.n].lbt_known = 0;
                }
                slots[bt.n++].tmax = t;
                q++;
            }
            if (bt.n == 0 || out_of_time(&x))
                break;
            run_batch(&bt, ws, opt.threads);
            if (pg)
                atomic_fetch_add(&pg->tmax_done, bt.n);
            order_done += bt.n;
            double best_before = best;
            for (int r = 0; r < bt.n; r++) { /* reduce in t_max order: deterministic */
                if (pg && !slots[r].pruned)
                    atomic_fetch_add(&pg->full_dps, 1);
                if (stats) {
                    stats->tmax_pruned_bound += slots[r].pruned;
                    stats->tmax_evaluated += !slots[r].pruned;
                }
                if (slots[r].value < best || (slots[r].value == best && oi < best_order)) {
                    best = slots[r].value;
                    best_tmax = slots[r].tmax;
                    best_n = slots[r].nst;
                    best_order = oi;
                    for (int z = 0; z < best_n; z++) {
                        best_st[z] = slots[r].st[z];
                        best_st[z].p = perm[slots[r].st[z].p]; /* store the cluster mesh */
                    }
                }
            }
            if (opt.prune_tmax && ws[0].Fr && best < best_before && q < qend) {
                /* a better plan: cut this order's remaining t_max from the top
                 * as before its search (the high side's cut by LB first) */
                int top = q, t1 = qend;
                while (top < t1) {
                    int mid = top + (t1 - top) / 2;
                    if ((double)(x.B - 1) * x.tcand[mid] + lb >= best)
                        t1 = mid;
                    else
                        top = mid + 1;
                }
                qend = shrink_top(&x, &od, q, top, best, &ws[0]);
            }
        }
        if (pg) { /* the rest of this order's candidates were cut by the high side */
            atomic_fetch_add(&pg->tmax_done, x.ntcand - order_done);
            atomic_fetch_add(&pg->orders_done, 1);
        }
    }
    for (int t = 0; t < opt.threads; t++)
        if (stats) {
            stats->transitions += ws[t].transitions;
            stats->seconds_keys += ws[t].t_keys;
            stats->seconds_low += ws[t].t_low;
            stats->seconds_bounds += ws[t].t_bounds;
            stats->seconds_full += ws[t].t_full;
            stats->relaxed_runs += ws[t].n_relaxed;
            stats->pareto_runs += ws[t].n_pareto;
            stats->feasible_runs += ws[t].n_feasible;
        }
    if (stats)
        stats->seconds = now_s() - t_start;
    int stopped = atomic_load(&stop);
    if (best == INF && stopped) {
        *no_plan_in_time = 1;
        ir_errorf(err, "plan: no plan found within the time limit of %g s", opt.time_limit);
        goto done;
    }
    if (best == INF) {
        ir_errorf(err, "plan: no feasible plan for %d layers on %d meshes (%d devices), B = %d: "
                  "every layout breaks the memory limit (Eq. 24)%s or leaves a device unused",
                  L, x.P, x.D, x.B, opt.comm_bound ? ", the comm bound C(i) <= t_max" : "");
        goto done;
    }
    out->stages = calloc((size_t)best_n, sizeof *out->stages);
    out->mesh_order = malloc((size_t)x.P * sizeof *out->mesh_order);
    if (!out->stages || !out->mesh_order) {
        ir_errorf(err, "plan: out of memory");
        goto done;
    }
    out->nstages = best_n;
    out->nmesh_order = x.P;
    memcpy(out->mesh_order, ol.v + (size_t)best_order * x.P, (size_t)x.P * sizeof(int));
    out->microbatches = x.B;
    out->t_max = best_tmax;
    out->objective = best;
    out->schedule = opt.schedule;
    out->eps = opt.eps;
    out->time_limited = stopped;
    out->coarse_meshes = x.ncoarse;
    for (int z = 0; z < best_n; z++) {
        PlanStage *ps = &out->stages[z];
        ps->first_layer = best_st[z].k;
        ps->last_layer = best_st[z].i;
        ps->mesh = best_st[z].p;
        ps->sub = x.subs[(size_t)ps->mesh * x.nsubmax + best_st[z].j];
    }
    if (plan_fill_schedule(out, o, err))
        goto done;
    rc = 0;
done:
    if (rc)
        plan_free(out);
    if (ws)
        for (int t = 0; t < opt.threads; t++) {
            free(ws[t].F);
            free(ws[t].N);
            free(ws[t].ch);
            free(ws[t].G);
            free(ws[t].H);
            free(ws[t].slo);
            free(ws[t].shi);
            free(ws[t].Nm);
            free(ws[t].Sm);
            free(ws[t].Fr);
            free(ws[t].Frn);
            free(ws[t].Fm);
            free(ws[t].Ks);
        }
    free(ws);
    free(slots);
    free(recs);
    free(best_st);
    free(G);
    free(od.mesh);
    free(od.Dp);
    free(od.off);
    free(od.rem_after);
    free(ol.v);
    free(okeys);
    ctx_free(&x);
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
