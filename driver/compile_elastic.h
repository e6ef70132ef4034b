/* DIR/elastic.env: what `launch.sh --elastic` needs to re-plan and
 * recompile this build on the cluster that survives a lost mesh
 * (docs/STAGES.md "Elastic recovery"). */
#ifndef HETC_COMPILE_ELASTIC_H
#define HETC_COMPILE_ELASTIC_H

#include "compile_plan.h"
#include "ir.h"

/* Write DIR/elastic.env (a bash fragment): hetc's own path, the model and
 * cluster as absolute paths, the compile options of argv[1..argc) less the
 * model, the cluster, -o/--output and --plan (a recompile plans anew), with
 * --global-batch pinned to the plan's so the survivors train on the same
 * batch, and the mesh names in launch.sh's mesh order (stage_mesh). */
int compile_write_elastic_env(const char *dir, int argc, char **argv, const char *model,
                              const char *cluster, const CompPlan *plan, IrError *err);

#endif
