/* The layer-wise gradient groups of several pipelines whose stages do not
 * line up (AutoHet 001's DP groups, plan.json `pipe`, docs/PLAN_FORMAT.md):
 * every pipeline is a whole copy of the model, so each layer is held by
 * exactly one stage of each pipeline, and its gradient is the sum over
 * those stages' ranks (AutoHet's layer-wise synchronisation).  Consecutive
 * layers with the same holding stages form one holder set: one
 * communicator and one all-reduce group per set is what the runtime needs
 * (a parameter tied across layers, gpt_tiny's wte, joins the union of its
 * layers' sets, as a `shared` record does).  plan_forms.c names the sets
 * when it refuses such a plan (ZeRO, TP or offload on it); the runtime
 * meets them as the `shared` records of every parameter
 * (compile_stage.c pipes_join, one communicator per distinct set:
 * runtime/stage/stage_sync.c). */
#ifndef HETC_PLAN_HOLDERS_H
#define HETC_PLAN_HOLDERS_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define PLAN_HOLD_MAX_PIPES 16

typedef struct PlanHolderSet {
    int first, last;                /* model layers, 1-based, inclusive */
    int nholders;                   /* one per pipeline */
    int stage[PLAN_HOLD_MAX_PIPES]; /* plan.json stage index holding them, pipeline order */
} PlanHolderSet;

/* The holder sets of root's pipelines (stages' "pipe" 1..J, J >= 2), in
 * layer order, into out[0 .. max): their count, or -1 with err naming the
 * pipeline and layer when a pipeline is not a whole copy of the model
 * (a layer held by none or two of its stages, another layer count) or
 * there are more than max sets. */
int plan_holder_sets(const cJSON *root, PlanHolderSet *out, int max, char *err, size_t errlen);

#endif
