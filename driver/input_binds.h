/* Graph inputs other than the token ids, bound to constants right after
 * import (docs/TRAINING.md, "Extra graph inputs").
 *
 * Exports with optimum's signature take attention_mask and position_ids
 * (and BERT-style ones token_type_ids) beside input_ids.  Training on
 * packed token files feeds no such tensors: every row is a full window, so
 * the mask is all ones and the positions are 0..T-1 in every row, as
 * Megatron and llm.c use them.  Binding them as IR constants (not run-time
 * inputs) lets shape-infer and const-fold fold the mask arithmetic, and
 * canonicalize then sees a plain causal mask; hetc train, plan, profile
 * and compile (every stage binary) get the same graph. */
#ifndef HETC_INPUT_BINDS_H
#define HETC_INPUT_BINDS_H

#include <stdio.h>

#include "ir.h"

#define INPUT_BINDS_MAX 16

typedef enum InputBindKind {
    INPUT_BIND_ONES,   /* every element 1 */
    INPUT_BIND_ZEROS,  /* every element 0 */
    INPUT_BIND_ARANGE, /* the index along the last axis: 0..T-1 in every row */
    INPUT_BIND_FILE,   /* a tensor file (.npy or TensorProto .pb) of the input's shape */
} InputBindKind;

typedef struct InputBind {
    char name[128];   /* the graph input's name (a copy: options keep argv intact) */
    InputBindKind kind;
    const char *path; /* INPUT_BIND_FILE */
} InputBind;

typedef struct InputBinds {
    InputBind b[INPUT_BINDS_MAX];
    int n;
    /* 1: every graph input but the token ids must end up bound (the
     * recognised names by default, others by --bind-input); 0: only the
     * inputs named by --bind-input are bound (hetc import, hetc run). */
    int all_extra;
    FILE *log; /* one line per bound input; NULL: silent */
} InputBinds;

/* "NAME=ones|zeros|arange|FILE" from --bind-input; a FILE path points into
 * `spec`, which must outlive b.
 * -1 with err naming the problem. */
int input_binds_parse(InputBinds *b, const char *spec, IrError *err);

/* The token-ids input: the one named input_ids, else the first input. */
IrValue *input_binds_token_input(const IrGraph *g);

/* Replace the inputs to bind by constants of their (bound) shape and dtype.
 * Fails naming an --bind-input name that is no graph input, an extra input
 * with no recognised name and no --bind-input (when all_extra), a file whose
 * shape or dtype is not the input's, or an input whose dims are unbound. */
int input_binds_apply(IrGraph *g, const InputBinds *b, IrError *err);

/* The recognised names and what they get, for --help. */
void input_binds_help(FILE *f);

#endif
