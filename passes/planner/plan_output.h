/* Plan output: plan.json, plan.txt, timeline.json (Chrome trace), timeline.svg.
 * Formats: docs/PLAN_FORMAT.md.  Every file is written atomically (a temp
 * file in the same folder, then rename), so a reader never sees half a plan.
 */
#ifndef HETC_PLAN_OUTPUT_H
#define HETC_PLAN_OUTPUT_H

#include <stdio.h>

#include "cost_model.h"
#include "planner.h"
#include "simulate.h"   /* TimelineEvent: the simulator's event record (owner "dp") */

/* One microbatch size the planner tried for the fixed global batch
 * (hetc plan's microbatch search): rows per microbatch and the best
 * Eq. 13 objective at B = global_batch / rows (INFINITY: no plan). */
typedef struct PlanMbCandidate {
    long rows;
    double objective;
} PlanMbCandidate;

typedef struct PlanOutputInfo {
    const char *model;          /* model name or path (NULL: "unknown") */
    long global_batch;          /* samples per iteration (0: unknown) */
    long seq;                   /* tokens per sample (0: unknown) */
    double iteration_time;      /* predicted iteration time, s (0: the timeline's end,
                                   or the objective when there is no timeline) */
    const CostCounters *counters; /* profiler counters (NULL: omitted) */
    const char *planner;        /* hetc plan --planner=NAME (NULL: omitted, HAPT) */
    const PlanMbCandidate *mb_cands; /* the microbatch sizes searched, ascending */
    int mb_ncand;               /* 0: the microbatch rows were pinned (--microbatch) */
    /* (issue 17) the training precision planned ("fp32", "fp16-mixed",
     * "bf16-mixed"; NULL: omitted) and the cluster file's dtype, when the
     * plan's (cluster.dtype) is another (NULL: omitted) */
    const char *precision, *cluster_dtype;
    int grad_reduce_bf16;       /* --grad-reduce-dtype bf16: "grad_reduce_dtype" in plan.json,
                                   said in plan.txt (0: fp32, omitted) */
    int tp_reduce_bf16;         /* --tp-reduce-dtype bf16: "tp_reduce_dtype", the same */
    /* has_reserve: each stage's mem_pred holds reserve_bytes of runtime
     * reserve (cost_model.h); plan.json then also gives the rest,
     * mem_arena_pred_bytes: what the stage binary's arena holds */
    int has_reserve;
    double reserve_bytes;
} PlanOutputInfo;

/* η of Eq. 25 over every device of the cluster (devices no stage uses
 * count with compute time 0): td_i = B (t_f + t_b) of the device's stage,
 * PeakFlops_i the device's peak for the training dtype.  In [0, 1]. */
double plan_eta(const Plan *p, const ClusterSpec *c);
/* The iteration time the outputs report (see PlanOutputInfo.iteration_time). */
double plan_iteration_time(const Plan *p, const PlanOutputInfo *info,
                           const TimelineEvent *ev, int nev);

/* plan.json's stages[].rows: each of st's dp DP ranks' rows of a microbatch
 * of R rows into out[dp].  A DP group over several meshes (st->parts) gives
 * every rank at least one row (R >= dp), then the rest by the parts'
 * shares; any other stage gets the runtime's split (rt_row_split). */
void plan_stage_rows(const PlanStage *st, long R, long *out);

int plan_write_json(FILE *f, const Plan *p, const ClusterSpec *c, const PlanOutputInfo *info,
                    const TimelineEvent *ev, int nev);
int plan_write_txt(FILE *f, const Plan *p, const ClusterSpec *c, const PlanOutputInfo *info,
                   const TimelineEvent *ev, int nev);
int timeline_write_json(FILE *f, const Plan *p, const ClusterSpec *c,
                        const TimelineEvent *ev, int nev);
int timeline_write_svg(FILE *f, const Plan *p, const ClusterSpec *c,
                       const TimelineEvent *ev, int nev);

/* Write plan.json, plan.txt and (when nev > 0) timeline.json and
 * timeline.svg into dir (created if missing). */
int plan_write_outputs(const char *dir, const Plan *p, const ClusterSpec *c,
                       const PlanOutputInfo *info, const TimelineEvent *ev, int nev,
                       IrError *err);

#endif
