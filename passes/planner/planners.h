/* The planner table: one row per planner of hetc plan --planner=NAME
 * (planners.def), read by the option parsing, --help, the unknown-name
 * error and the dispatch. */
#ifndef HETC_PLANNERS_H
#define HETC_PLANNERS_H

#include <stddef.h>
#include <stdio.h>

#include "alt_plan.h"
#include "hapt_dp.h"

/* hapt_dp_plan's signature: a search on the profiled cost model. */
typedef int (*PlannerOracleFn)(const ClusterSpec *c, int L, const CostOracle *o,
                               const DpOptions *opt, Plan *out, DpStats *stats, IrError *err);
/* alt_plan_run's planners: a plan on an AltContext. */
typedef int (*PlannerLayersFn)(const AltContext *x, AltPlan *out, IrError *err);

typedef struct PlannerDef {
    const char *name;
    const char *desc;           /* one line, for --help and docs */
    PlannerOracleFn oracle;     /* exactly one of oracle and layers is set */
    PlannerLayersFn layers;
} PlannerDef;

/* Every row of planners.def, then a row with name NULL.  planner_table[0]
 * is the default (hapt). */
extern const PlannerDef planner_table[];

/* The row named name, or NULL. */
const PlannerDef *planner_find(const char *name);
/* The names, ", "-separated, into buf (for error messages). */
void planner_names(char *buf, size_t n);
/* One line per planner, "<indent>NAME  description", for --help. */
void planner_help(FILE *f, const char *indent);

#endif
