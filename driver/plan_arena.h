/* The planner's arena model (issue 17): every layer's activation slot and
 * scratch, read from the memory plan of the stage a binary holding only
 * that layer runs (plan_arena.c says how; cost_model.h LayerArena how a
 * stage is composed from them; docs/PLANNER.md "Precision and the arena"). */
#ifndef HETC_PLAN_ARENA_H
#define HETC_PLAN_ARENA_H

#include "plan_pipeline.h"

/* pc->arena[b][dp] (tp = 2^b up to --max-tp, dp x tp <= maxdev, dp <= the
 * microbatch rows; dp 1 only for a fixed-batch model): the layers' (tp = 1)
 * or TP units' (tp > 1) arenas at DP rank 0's rows of each dp, on one
 * forward + loss graph per distinct row count.  Needs the planner's graph,
 * layers and, for tp > 1, pc->intra.  0, or -1 with err (nothing kept). */
int plan_arena_build(PlanCtx *pc, int maxdev, IrError *err);
void plan_arena_free(PlanCtx *pc);

#endif
