/* hetc train --engine compiled (train_compiled.c): compile the model into
 * a one-stage program for this host and run it. */
#ifndef HETC_TRAIN_COMPILED_H
#define HETC_TRAIN_COMPILED_H

#include "compile_opts.h"
#include "train_opts.h"

typedef struct TrainCompiled {
    char scratch[4096];    /* fresh directory under $TMPDIR (train_compiled_cleanup removes it) */
    char program[4096];    /* the build: --program-dir, or scratch/program */
    char ckpt_dir[4096];   /* where the program checkpoints (scratch/checkpoint: --no-checkpoint) */
    char final_step[4200]; /* after a run: its newest checkpoint's step directory */
} TrainCompiled;

/* Compile (co: the model and its import options, rows and sequence; t:
 * the training options) and run.  0 when the program trained every step
 * and left its final checkpoint in tc->final_step; 1 after saying what
 * failed (the compile's output, or the program's own messages); 128 + N
 * when the program was killed by signal N. */
int train_compiled_run(TrainCompiled *tc, const CompileOpts *co, const TrainOpts *t);
void train_compiled_cleanup(TrainCompiled *tc);

#endif
