/* The search's machinery for hetc plan's steps (plan_pipeline.c): the DP
 * in a worker thread beside a progress line, why nothing fits, and the
 * equal-layers baseline. */
#ifndef HETC_PLAN_SEARCH_H
#define HETC_PLAN_SEARCH_H

#include <stdatomic.h>

#include "cost_model.h"
#include "hapt_dp.h"
#include "layers.h"
#include "planners.h"

/* The DP runs in a worker so the main thread can print a progress line. */
typedef struct DpJob {
    const ClusterSpec *c;
    int L;
    CostOracle o;
    DpOptions opt;
    Plan plan;
    DpStats stats;
    IrError err;
    int rc;
    atomic_int done;
    DpProgress progress;
    PlannerOracleFn search; /* the planner table's entry (hapt_dp_plan) */
} DpJob;

/* Profile only the shapes the DP searches (the node-group heuristic). */
typedef struct ShapeKeep {
    const ClusterSpec *c;
    int max_groups;
} ShapeKeep;

/* cost_model_profile_* callbacks: arg is ShapeKeep / an int "live line" flag. */
int plan_keep_shape(void *arg, int mesh, Submesh sub);
void plan_progress_profile(void *arg, long done, long total);
/* Run j's DP; tty: 0 silent, 1 live line, 2 a log line every 10 s. */
int plan_run_dp(DpJob *j, int tty);
/* Why nothing fits: the largest single-layer need vs the largest device. */
void plan_explain_memory(CostModel *cm, const ClusterSpec *c, const PlanLayer *layers, int L);
/* The equal-layers-per-stage baseline's iteration time (INFINITY: none). */
double plan_baseline_equal(const Plan *hp, CostModel *cm, const ClusterSpec *cl, int L,
                           int *fits, double *objective, IrError *err);

#endif
