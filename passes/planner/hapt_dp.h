/* HAPT inter-op DP search (seed 004 §5.2, Eq. 13-24, Algorithm 1), for any
 * number of meshes.  Owner: "dp".  Reading of the paper: docs/PLANNER.md.
 *
 * Indexing: layers 1..L (the paper's Eq. 22 writes F(s, 0, ...) for the
 * whole model; here the whole model is F(s, 1, ...), with the base case
 * F(0, L+1, ...) = 0 as in the paper).  C(i) is the boundary after layer i.
 *
 * Meshes are consumed in a fixed order π (the paper's "A before B"): the
 * pipeline's first stages take devices of π_1 until every device of π_1 is
 * allocated, then π_2, ... .  The DP state is (s, k, p, d): the layers
 * k..L in s stages, with mesh π_p current and d of its devices still free
 * (the meshes after p entirely free).  Every device of every mesh must be
 * allocated (Eq. 22 ends in d_A = N_A M_A, d_B = N_B M_B, the base case
 * has d = 0): a plan never leaves a device idle, and every mesh holds at
 * least one stage.  Orders: every permutation when nmeshes <= max_perm_meshes,
 * else a heuristic set (see hapt_orders.c).
 */
#ifndef HETC_HAPT_DP_H
#define HETC_HAPT_DP_H

#include <stdatomic.h>

#include "planner.h"
#include "schedule.h"

/* Live progress of a search, for a progress line read by another thread
 * while hapt_dp_plan runs (all counters only grow). */
typedef struct DpProgress {
    atomic_long orders_total;   /* mesh orders to search (set once tabulated) */
    atomic_long orders_done;
    atomic_long tmax_total;     /* t_max candidates over every order */
    atomic_long tmax_done;      /* of those: evaluated, skipped by a bound or pruned */
    atomic_long full_dps;       /* full DPs run so far */
    atomic_long keys_done;      /* (issue 16) orders whose lower bound is computed (the
                                   first phase: orders_total of them) */
} DpProgress;

/* Submesh shapes of §5.2 for a mesh of N nodes x M devices: (1,1), (1,2),
 * (1,4), ... powers of two below M, then (1,M), then (2,M) .. (N,M).
 * Writes at most cap shapes into out (may be NULL) and returns the count. */
int submesh_enumerate(int N, int M, Submesh *out, int cap);

typedef struct DpOptions {
    int microbatches;        /* B (>= 1) */
    double eps;              /* ε of Eq. 2 (default 0.1) */
    ScheduleKind schedule;   /* whose warm-ups size memory (Eq. 23-24) and are emitted
                                (default H-1F1B) */
    int check_memory;        /* 1 (default): Eq. 24 with K from schedule_warmup_step */
    int comm_bound;          /* 1 (default): constraint (ii) C(i) <= t_max; 0 lets a
                                boundary exceed t_max (δ then takes Eq. 11's form) */
    int sparse_index;        /* (a) 1 (default): §5.2.2 sparse candidate index */
    int prune_tmax;          /* (b) 1 (default): bidirectional t_max pruning */
    int threads;             /* (c) worker threads for t_max batches (default 1) */
    int batch;               /* t_max candidates per batch (default 8; the result
                                does not depend on it or on threads) */
    int max_perm_meshes;     /* all orders up to this many meshes (default 5) */
    int fixed_order;         /* 1: only the cluster's own order (tests, A before B) */
    int max_stages;          /* cap on pipeline stages S (0 = none: min(L, devices)).
                                The DP table holds (L+2) x devices x (S+1) states per
                                thread, so large clusters need a cap. */
    int tmax_comm_candidates; /* (added by "plan") 1: the finite boundary costs C(i, a, b)
                                 join the t_max candidates (Algorithm 1 line 3 takes stage
                                 times only; when a slow link forces t_max above every stage
                                 time, C(i) is the t_max that plan needs).  Default 0, the
                                 paper's set, which brute.c enumerates; hetc plan sets 1. */
    DpProgress *progress;    /* NULL (default) or counters the search updates as it goes */
    /* (issue 16) Bounds for large clusters (docs/PLANNER.md "Large clusters"). */
    double time_limit;       /* > 0: stop after this many seconds (the oracle tabulation
                                included) and return the best plan found so far, with
                                Plan.time_limited = 1; when none was found yet, a coarse
                                search (max_groups 8, no limit) supplies it.  0 (default):
                                none.  Checked once per DP row: it overruns by at most one
                                row of one DP per thread, plus the fallback search. */
    int max_groups;          /* > 0: a mesh of more than max_groups nodes is searched in
                                groups of g nodes (the smallest divisor g of N with N/g <=
                                max_groups): shapes (n·g, M) only, devices counted in units
                                of g·M.  A HEURISTIC (sub-node stages and other node counts
                                on that mesh are not searched); Plan.coarse_meshes says where
                                it applied.  0 (default): every shape, exact. */
} DpOptions;

void dp_options_default(DpOptions *o);

/* (issue 16) The device dimension of the DP table for this cluster under
 * max_groups: devices, or node groups on the meshes searched in groups. */
int hapt_dp_units(const ClusterSpec *c, int max_groups);
/* Whether the DP offers shape sub of mesh under max_groups (every shape of
 * submesh_enumerate on a mesh it does not group). */
int hapt_dp_searches_shape(const ClusterSpec *c, int max_groups, int mesh, Submesh sub);

typedef struct DpStats {
    long orders;             /* mesh orders searched */
    long tmax_candidates;    /* distinct t values, summed over orders */
    long tmax_evaluated;     /* full DPs run */
    long tmax_pruned_low;    /* below the smallest feasible t_max (binary search on the
                                relaxed DP and dp_feasible, then on dp_pareto: see
                                hapt_tmax_search.c) */
    long tmax_pruned_high;   /* (B-1) t_max + LB >= best found (LB: relaxed DP, any t_max) */
    long tmax_pruned_bound;  /* (B-1) t_max + relaxed DP at this t_max >= best found */
    long transitions;        /* candidate transitions visited */
    long oracle_calls;
    double seconds;          /* wall time of the search (excluding oracle tabulation) */
    double seconds_tabulate; /* wall time of querying the oracle */
    /* Where the search went (CPU time of the threads, summed, so the parts can
     * exceed `seconds`): the order keys; the probes (relaxed, feasibility and
     * Pareto DPs of the low side, of the cuts from the top and of the t_max
     * intervals); the per-t_max bounds not done by a probe; the full DPs
     * (with their relaxed and prefix bounds).  Not printed by hetc plan yet. */
    double seconds_keys, seconds_low, seconds_bounds, seconds_full;
    long relaxed_runs, pareto_runs, feasible_runs;
} DpStats;

/* Search the plan minimising Eq. 13 over every order of the cluster's meshes.
 * layers 1..L are costed through o (o->stage for every (k, i, mesh, submesh),
 * o->comm for every boundary and mesh pair).  Fills *out (free with
 * plan_free); stats may be NULL.  Returns 0, or -1 with err set when no plan
 * fits (the message says why: memory, comm bound, too few layers for the
 * meshes) or on bad input. */
int hapt_dp_plan(const ClusterSpec *c, int L, const CostOracle *o, const DpOptions *opt,
                 Plan *out, DpStats *stats, IrError *err);

/* Eq. 24 for one stage: mem_static + K mem_act <= mem_device (one helper so
 * the DP, the brute force and the output agree to the last bit). */
static inline int stage_fits_memory(double mem_static, double mem_act, int K, double mem_device)
{
    return mem_static + (double)K * mem_act <= mem_device;
}

/* Fill the derived fields of a plan's stages from its layout: c_next from
 * the oracle, warm-ups / δ / beyond-paper flags from schedule_warmups with
 * p->t_max, mem_pred = mem_static + N_i mem_act (stage costs re-queried).
 * Used by the DP and by the brute force.  Returns 0 or -1. */
int plan_fill_schedule(Plan *p, const CostOracle *o, IrError *err);

#endif
