/* The parallel forms a seed planner's plan.json may record that the stage
 * binaries do not run yet (issue 18; docs/PLAN_FORMAT.md, "Seed planners'
 * forms"): several pipelines with their own stage boundaries ("pipe",
 * AutoHet's DP groups) that are no whole copies of the model or carry
 * zero, tp > 1, offload or a ministage group on a stage (such pipelines
 * without them run since issue 18 item 3: compile_stage.c; pipelines whose
 * stages line up are one pipeline by then: plan_pipes.h).  hetc compile
 * --plan refuses such a plan before anything else is read, with one
 * message naming the pipelines, their holder sets (plan_holders.h) and
 * each stage's zero, tp > 1, offload or group.  CPU offload ("offload",
 * Zorse) compiles (issue 18 item 4), and so do a DP group over several
 * meshes with per-mesh row shares ("parts", Zorse, Metis's heterogeneous
 * DP; ZeRO on it too: launch.sh places each part's ranks on its mesh) and
 * Zorse's ministages sharing devices ("group": launch.sh co-locates a
 * group's ranks; compile_plan.c checks they are placed alike). */
#ifndef HETC_PLAN_FORMS_H
#define HETC_PLAN_FORMS_H

#include <cjson/cJSON.h>

#include "ir.h"

/* 0 when no stage of root (a plan.json checked by plan_json_check) needs such a
 * form; else -1 and err names path, the stages and the forms. */
int plan_forms_check(const cJSON *root, const char *path, IrError *err);

#endif
