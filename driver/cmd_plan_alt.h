/* hetc plan --planner=NAME: the other seed planners (issue 8,
 * passes/planner/alt_plan.h) on the layers `hetc plan` built. */
#ifndef HETC_CMD_PLAN_ALT_H
#define HETC_CMD_PLAN_ALT_H

#include "alt_plan.h"

typedef struct PlanAltArgs {
    const char *planner;       /* a PLANNER_LAYERS row of planners.def */
    int microbatches;          /* B = global batch / microbatch rows */
    double efficiency;
    int threads;               /* coarse: DP threads */
    int coarse_layers;         /* coarse: layers to merge into (0: 8) */
    const char *out_dir;
    const char *model;
    long global_batch, seq;
    int autohet_profile;       /* autohet: 0 exact, 1 Eq. 5 binary decomposition */
    const char *precision;     /* what plan.txt / plan.json state (precision.h) */
    const char *cluster_dtype; /* the cluster file's dtype */
    int grad_reduce_bf16;      /* --grad-reduce-dtype bf16: DP sync at half the bytes */
    int tp_reduce_bf16;        /* --tp-reduce-dtype bf16: TP sums at half the bytes */
} PlanAltArgs;

/* Plan with a.planner, print the plan, write DIR/plan_NAME.txt, plan.json and
 * plan.txt (docs/PLAN_FORMAT.md; a plan the stage binaries cannot run yet
 * records the forms it needs, which hetc compile --plan refuses by name) and,
 * for a plan they run, timeline.* from simulate.h.  Returns 0, or 1 with a
 * message on stderr. */
int cmd_plan_alt(const PlanAltArgs *a, const ClusterSpec *cl, const PlanLayer *layers, int L);

#endif
