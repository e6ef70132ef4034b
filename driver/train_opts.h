/* hetc train's own options (beside the import options of compile_opts.h),
 * shared by its two engines: the host executor loop (cmd_train.c) and the
 * compiled one-stage program (train_compiled.c). */
#ifndef HETC_TRAIN_OPTS_H
#define HETC_TRAIN_OPTS_H

#include <stdint.h>

#include "precision.h"

typedef enum TrainEngine {
    TRAIN_ENGINE_EXECUTOR, /* the host executor runs the training graph in this process */
    TRAIN_ENGINE_COMPILED, /* hetc compile's one-stage program for this host, run as a child */
} TrainEngine;

/* The import options hetc train took (compile_opts_parse_one) that a
 * compile of the same model must see too (--trainable, --bind, ...):
 * argv words, not copies. */
#define TRAIN_FWD_MAX 64

typedef struct TrainOpts {
    const char *data, *data_format, *loss, *optimizer, *schedule, *ckpt_dir, *export_path, *dump_grads;
    const char *metrics, *val_data;
    const char *program_dir; /* --program-dir (compiled engine): keep the program there */
    int64_t steps, accum, warmup, ckpt_every, val_every, val_batches;
    double lr, beta1, beta2, eps, wd, momentum, clip;
    int quiet, no_ckpt, exec_stats, resume, overwrite;
    Precision precision;
    int bf16_sr; /* --bf16-rounding stochastic */
    TrainEngine engine;
    int engine_given; /* --engine on the command line */
    const char *fwd[TRAIN_FWD_MAX];
    int nfwd;
} TrainOpts;

#endif
