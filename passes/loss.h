/* The loss pass: next-token cross entropy on the logits output against a
 * new graph input "targets" (i64, the logits' shape without the vocabulary
 * axis), mean over the counted tokens; the loss becomes graph output
 * "loss".  The pipeline entry "loss" uses the defaults (no ignore index);
 * `hetc train --loss xent:ignore=N` calls pass_loss_with. */
#ifndef HETC_LOSS_H
#define HETC_LOSS_H

#include "ir.h"
#include "pass.h"

typedef struct LossOpts {
    const char *logits;     /* output to put the loss on; NULL: "logits", else the
                               only float output of rank >= 2 */
    int use_ignore;         /* targets equal to ignore_index are not counted */
    int64_t ignore_index;
} LossOpts;

void loss_opts_default(LossOpts *o);
/* Parse "xent" or "xent:ignore=N"; -1 with err set on anything else. */
int loss_opts_parse(LossOpts *o, const char *spec, IrError *err);
int pass_loss_with(IrGraph *g, const LossOpts *o, IrError *err);
int pass_loss(IrGraph *g, PassContext *ctx, IrError *err);

/* tie-weights: a parameter whose data equals another parameter's data
 * transposed (bit-exact) is an exporter's untied copy of a tied weight
 * (GPT-2's wte and lm_head): replace it by Transpose(original) so the
 * gradient of both uses reaches one parameter, as in torch. */
int pass_tie_weights(IrGraph *g, PassContext *ctx, IrError *err);
/* The tie itself: b's readers read Transpose(a) instead (b [n,m], a [m,n],
 * both parameters); the Transpose node says tied_from b.  plan_arena.c
 * replays tie-weights' choices by name with it. */
void tie_weights_tie(IrGraph *g, IrValue *a, IrValue *b);

#endif
