/* What the files of HAPT's inter-op DP share (private to passes/planner):
 * the tabulated oracle (Ctx), a mesh order (Order), the per-thread DP
 * tables (Work), t_max batches and order keys, and the functions each file
 * offers the others.  Map of the files (docs/PLANNER.md "Source files"):
 *   hapt_tables.c       options, the oracle tabulated, the sparse index, t_max candidates
 *   hapt_walk.h         the transition walker every DP inlines
 *   hapt_dp_full.c      the full DP of Eq. 14-23 and its trace
 *   hapt_dp_bounds.c    relaxed, prefix and bottleneck DPs (lower bounds)
 *   hapt_dp_feasible.c  exact-feasibility DPs (dp_feasible, dp_pareto)
 *   hapt_tmax_search.c  an order's t_max window: the high-side cut, the low side's probes
 *   hapt_batch.c        t_max batches on worker threads, interval and top cuts
 *   hapt_orders.c       mesh orders and their lower-bound keys
 *   hapt_dp.c           the search over orders and t_max, the plan it returns
 */
#ifndef HETC_HAPT_DP_IMPL_H
#define HETC_HAPT_DP_IMPL_H

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

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread: the profile's parts (DpStats) stay
 * meaningful when other work shares the cores. */
static inline double cpu_s(void)
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

static inline Tab *tab_at(const Ctx *x, int a, int j, int k, int i)
{
    size_t L2 = (size_t)x->L + 2;
    return &x->tab[(((size_t)a * x->nsubmax + j) * L2 + k) * L2 + i];
}

static inline double comm_at(const Ctx *x, int i, int a, int b)
{
    return x->comm[((size_t)i * x->P + a) * x->P + b];
}

/* (issue 16) The time limit, checked once per DP row (walk_back,
 * dp_prefix): once it has passed, every DP stops before its next row, so
 * its root state (row k = 1, computed last) stays infinite and no probe or
 * full DP started after the deadline yields a plan; hapt_dp_plan then
 * returns the best plan found by the full DPs that finished. */
static inline int out_of_time(const Ctx *x)
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

/* ------------------------------------------------------------ one order */

typedef struct Order {
    int P;
    int *mesh;              /* [P] π: cluster mesh index at each position */
    int *Dp;                /* [P] devices of π_p */
    int *off;               /* [P+1] first position index of mesh p */
    int *rem_after;         /* [P] devices in the meshes after p */
} Order;

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
static inline size_t widx(const Ctx *x, int s, int k, int pos)
{
    return ((size_t)k * x->D + pos) * (size_t)(x->Smax + 1) + s;
}

/* The comm-bound limit of the DPs at tmax (INFINITY: no bound). */
static inline double cmax_of(const Ctx *x, double tmax)
{
    return x->opt->comm_bound ? tmax : INFINITY;
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

/* ------------------------------------------------------------ orders */

typedef struct OrderList {
    int *v;                 /* [n][P] */
    int n, cap, P;
} OrderList;

typedef struct OrderKey {
    double key, lb;         /* (B-1) bottleneck + LB; LB of dp_relaxed unfiltered */
    double bn;              /* the bottleneck (INF: no layout) */
    int oi;
} OrderKey;

/* One search (dp_plan_once): the tables, the threads' work, the batch
 * slots, and the best plan found so far.  x.opt points at opt and x.stop at
 * stop, so a Search does not move once built. */
typedef struct Search {
    Ctx x;
    DpOptions opt;
    atomic_int stop;
    DpStats *stats;
    DpProgress *pg;
    OrderList ol;
    Work *ws;
    Slot *slots;
    StageRec *recs, *best_st;
    double *G;
    Order od;
    OrderKey *okeys;
    double best, best_tmax;
    int best_n, best_order;
} Search;

/* hapt_tables.c */
int ctx_build(Ctx *x, DpStats *st, IrError *err);
void ctx_free(Ctx *x);

/* hapt_dp_full.c */
double dp_run(const Ctx *x, const Order *od, double tmax, double bound, const double *Gb,
              const double *Hf, Work *w, int *best_s);
int dp_trace(const Ctx *x, const Order *od, const Work *w, int s, StageRec *out);

/* hapt_dp_bounds.c */
double dp_relaxed(const Ctx *x, const Order *od, double tmax, int filters, double *G);
void dp_prefix(const Ctx *x, const Order *od, double tmax, double *H);
double dp_bottleneck(const Ctx *x, const Order *od, double *G);

/* hapt_dp_feasible.c */
int dp_feasible(const Ctx *x, const Order *od, double tmax, int *Nm, int *Sm);
int dp_pareto(const Ctx *x, const Order *od, double tmax, Work *w, int *overflow);
double pareto_lb(const Ctx *x, const Order *od, const double *Fm);

/* hapt_tmax_search.c */
int tmax_possible(const Ctx *x, const Order *od, double tmax, Work *w);
int exact_low(const Ctx *x, const Order *od, int lo0, int limit, Work *w);
int probe_bound(const Ctx *x, const Order *od, double tmax, Work *w, int *ovf, double *lb);
int gallop_pareto(const Ctx *x, const Order *od, int a, int limit, Work *w, int *ovf);
int search_low(const Ctx *x, const Order *od, int a, int b, Work *ws, int nthreads, int pareto,
               int *ovf);
int first_cut(const Ctx *x, int c0, int c1, double lb, double best);
int order_window(Search *S, int oq, int *lo, int *qend, double *lb);

/* hapt_batch.c */
int skip_bounded(const Ctx *x, const Order *od, int q, int hi, double best, Work *w,
                 int *span_io, double *lbt0, int *known);
int shrink_top(const Ctx *x, const Order *od, int lo, int top, double best, Work *w);
int run_batch(Batch *b, Work *ws, int nthreads);

/* hapt_orders.c */
int orders_make(const ClusterSpec *c, const DpOptions *opt, OrderList *ol);
void order_set(Order *od, const Ctx *x, const int *perm);
int keys_compute(const Ctx *x, const ClusterSpec *c, const OrderList *ol, OrderKey *k,
                 Work *ws, int nthreads);
int cmp_orderkey(const void *pa, const void *pb);

#endif
