/* The planner's arena model (issue 17): every layer's activation slot and
 * scratch, read from the memory plan of the stage a binary holding only
 * that layer runs (plan_arena.c says how; cost_model.h LayerArena how a
 * stage is composed from them; docs/PLANNER.md "Precision and the arena"). */
#ifndef HETC_PLAN_ARENA_H
#define HETC_PLAN_ARENA_H

#include "plan_pipeline.h"

/* pc->arena[dp] for dp = 1 .. min(maxdp, microbatch rows) (1 for a
 * fixed-batch model): layer figures at DP rank 0's rows of each dp, the
 * graphs made once per distinct row count.  Needs the planner's graph and
 * layers (pc->g, pc->ls).  0, or -1 with err (nothing kept). */
int plan_arena_build(PlanCtx *pc, int maxdp, IrError *err);
void plan_arena_free(PlanCtx *pc);
/* CostOptions.arena_stage (ctx: the PlanCtx): layers k..i at dp x tp
 * measured whole, TP rank 0's stage at DP rank 0's rows, on the graph
 * plan_arena_build kept; -1 when partition or memplan refuses it. */
int plan_arena_stage(void *ctx, int k, int i, int dp, int tp, double *act, double *scratch);

#endif
