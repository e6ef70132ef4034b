/* The parallel forms a seed planner's plan.json may record that the stage
 * binaries do not run yet (issue 18; docs/PLAN_FORMAT.md, "Seed planners'
 * forms"): ministages sharing devices ("group", Zorse), and several
 * pipelines with their own stage boundaries ("pipe", AutoHet's DP groups)
 * that are no whole copies of the model or carry zero, tp > 1 or offload
 * on a stage (such pipelines without them run since issue 18 item 3:
 * compile_stage.c; pipelines whose stages line up are one pipeline by
 * then: plan_pipes.h).  hetc compile --plan refuses such a plan before
 * anything else is read, with one message naming every such stage, its
 * layers and the forms it needs (for unaligned pipelines also their holder
 * sets, plan_holders.h, and each stage's zero, tp > 1 or offload).
 * CPU offload ("offload", Zorse) compiles (issue 18 item 4), and so does a
 * DP group over several meshes with per-mesh row shares ("parts", Zorse,
 * Metis's heterogeneous DP; ZeRO on it too): launch.sh places each part's
 * ranks on its mesh. */
#ifndef HETC_PLAN_FORMS_H
#define HETC_PLAN_FORMS_H

#include <cjson/cJSON.h>

#include "ir.h"

/* 0 when no stage of root (a plan.json checked by plan_json_check) needs such a
 * form; else -1 and err names path, the stages and the forms. */
int plan_forms_check(const cJSON *root, const char *path, IrError *err);

#endif
