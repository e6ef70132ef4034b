/* hetc plan's options, parsed once: by hetc plan, and by hetc compile,
 * which hands the same struct to the planning steps (plan_pipeline.h)
 * instead of forwarding its command line. */
#ifndef HETC_PLAN_ARGS_H
#define HETC_PLAN_ARGS_H

#include <stdint.h>
#include <stdio.h>

#include "compile_opts.h"
#include "precision.h"

typedef struct PlanArgs {
    CompileOpts co;          /* import options; co.batch = --microbatch rows */
    const char *cluster;
    int64_t global_batch, layers, threads, min_heavy, max_stages;
    double eps, imbalance, efficiency;
    int schedule;
    int baseline_equal;
    int dp_divides;          /* --dp-divides-microbatch: dp must divide the microbatch rows */
    int progress;            /* 1 --progress, -1 --no-progress, 0 default */
    double time_limit;       /* --time-limit (0: none) */
    int64_t max_groups;      /* --max-node-groups (default 32) */
    int64_t max_tp;          /* --max-tp (default 8) */
    int zero, recompute;     /* --zero, --recompute: -1 = auto (default) */
    int no_intra;            /* --no-intra-op */
    const char *profile_db, *write_profile_db;
    const char *planner;        /* --planner (NULL: hapt) */
    int64_t coarse_layers;
    int autohet_binary;         /* --autohet-profile binary (seed 001 Eq. 5) */
    int mb_search;              /* search the microbatch rows for the fixed global batch
                                   (--microbatch auto, or --global-batch without
                                   --microbatch): plan_pipeline.c's mb_search */
    Precision precision;        /* --precision (precision.h; default bf16-mixed) */
    int precision_given;        /* --precision was on the command line: hetc compile's
                                   --backend cuda and --plan defaults do not apply */
    int grad_reduce_bf16;       /* --grad-reduce-dtype bf16 (bf16-mixed only): the DP
                                   gradient reductions cost half the bytes */
    int tp_reduce_bf16;         /* --tp-reduce-dtype bf16 (bf16-mixed only): the TP
                                   all-reduces of activations cost half the bytes */
} PlanArgs;

/* Defaults; ibinds_log: where the import says what it bound (NULL: silent). */
void plan_args_default(PlanArgs *a, FILE *ibinds_log);
/* Try to consume argv[*i] as a plan option (shared import options
 * included): 1 consumed, 0 not a plan option, -1 bad (said on stderr). */
int plan_args_parse_one(PlanArgs *a, int argc, char **argv, int *i);
/* The checks and defaults once every option is in (--microbatch >= 1,
 * --global-batch a multiple of it, ...): 0, or 2 after saying why.  With
 * the microbatch searched (mb_search), co.batch is 1 here: the search
 * sets it to the chosen rows. */
int plan_args_finish(PlanArgs *a);
/* B = G / b: microbatches per optimizer step (after plan_args_finish). */
int plan_args_microbatches(const PlanArgs *a);

#endif
