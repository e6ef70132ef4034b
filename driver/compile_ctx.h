/* What one `hetc compile` computes once and hands from step to step
 * (cmd_compile.c; docs/ARCHITECTURE.md draws the steps): the options,
 * parsed once; the model, read once; the planner's graph with its layer
 * ids; the chosen plan; the row counts every later step uses. */
#ifndef HETC_COMPILE_CTX_H
#define HETC_COMPILE_CTX_H

#include <stdint.h>

#include "compile_plan.h"
#include "compile_stage.h"
#include "plan_pipeline.h"

typedef struct CompileCtx {
    /* options */
    PlanArgs pa;            /* plan and import options; pa.co.batch: --microbatch */
    CompileArgs ca;         /* training and code generation options */
    const char *model, *cluster;
    const char *plan_file;  /* --plan FILE (NULL: plan here) */
    const char *recompute;  /* --recompute over the plan's (NULL: the plan's) */
    const char *precision_why; /* what decided the precision (set_precision): messages */
    int argc;
    char **argv;            /* the command line, recorded for elastic restarts */
    /* the build directory (build_dir.h) */
    const char *final;
    char out_tmp[4200];
    uint64_t build_id;
    char planpath[4200];
    /* the model, read once; the planner's graph, layers and layer ids */
    ModelSource src;
    PlanCtx pc;
    LayerIndex lix;
    int L;
    /* the chosen plan (plan.json, read back: what --plan FILE gives too) */
    CompPlan plan;
    int64_t global_batch;   /* rows per optimizer step */
    int64_t rows;           /* rows per microbatch, global_batch / microbatches */
    int microbatches;       /* per step */
    CompileOpts co;         /* the stage graphs' import options (batch = rows) */
    double t0, t_plan;
} CompileCtx;

#endif
