/* Range and enumeration checks of a parsed plan.json (docs/PLAN_FORMAT.md),
 * run by comp_plan_read before it copies anything out: every integer the
 * compiler reads is a whole number inside a stated range (a layer number of
 * 2^32 + 18 used to be cast to int and read as 18), and every string is one
 * of its known values (a "schedule" of "zzz", a stage "mesh" the plan's own
 * cluster does not have).  Errors name the file and the key path. */
#ifndef HETC_PLAN_JSON_CHECK_H
#define HETC_PLAN_JSON_CHECK_H

#include <cjson/cJSON.h>

#include "ir.h"

/* Limits on plan.json integers (inclusive). */
#define PLAN_MAX_LAYER (1 << 20)
#define PLAN_MAX_MICROBATCHES 1000000
#define PLAN_MAX_GLOBAL_BATCH (1LL << 30)
#define PLAN_MAX_SEQ (1 << 24)
#define PLAN_MAX_DP 4096
#define PLAN_MAX_TP 4096

int plan_json_check(const cJSON *root, const char *path, IrError *err);

#endif
