/* Several pipelines whose stages line up (AutoHet's DP groups, plan.json
 * `pipe`, docs/PLAN_FORMAT.md): when every pipeline cuts the model at the
 * same layers, with the same tp, ZeRO, recompute and offload per stage and
 * the same microbatches, the J pipelines are one pipeline whose stage k's
 * DP group holds every pipeline's stage k.  Each layer's gradient
 * all-reduce among the ranks that hold it (AutoHet's layer-wise
 * synchronisation) is then that stage's DP all-reduce, and each rank keeps
 * its pipeline's rows of a microbatch (a row table) and its mesh (parts).
 * Pipelines whose stages do not line up run as they are, each parameter
 * summed over its holder set (compile_stage.c, plan_holders.h). */
#ifndef HETC_PLAN_PIPES_H
#define HETC_PLAN_PIPES_H

#include <cjson/cJSON.h>

#include "ir.h"

/* Rewrites root's "stages" into the one-pipeline form when its pipelines
 * line up (says so on stderr, naming path); returns 1 then, 0 when root
 * has one pipeline or pipelines that do not line up (left as they are). */
int plan_pipes_merge(cJSON *root, const char *path);

#endif
