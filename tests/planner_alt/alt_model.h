/* Synthetic GPT-shaped PlanLayer arrays for the alternative planners' tests
 * and bench/compare: embedding, `blocks` transformer blocks of 4 fine layers
 * each (attention in, attention out, MLP in, MLP out), head.  Figures per
 * microbatch of `rows` x `seq` tokens in a 2-byte dtype, from the usual
 * dense-transformer counts (2 FLOP per MAC, backward = 2 x forward). */
#ifndef HETC_ALT_MODEL_H
#define HETC_ALT_MODEL_H

#include <stdlib.h>

#include "planner.h"

static inline PlanLayer *alt_model_gpt(int blocks, double h, double seq, double vocab, double rows,
                                       int *L)
{
    int n = 4 * blocks + 2;
    PlanLayer *ly = calloc((size_t)n, sizeof *ly);
    if (!ly)
        return NULL;
    double tok = rows * seq, bt = 2.0;
    double act_h = tok * h * bt;
    /* embedding */
    ly[0].param_bytes = (vocab + seq) * h * bt;
    ly[0].fwd_flops = 2 * tok * h;
    ly[0].bwd_flops = 2 * tok * h;
    ly[0].act_bytes = act_h;
    ly[0].out_bytes = act_h;
    ly[0].sig = 1;
    for (int b = 0; b < blocks; b++) {
        PlanLayer *q = &ly[1 + 4 * b];
        /* LN + QKV projection */
        q[0].param_bytes = 3 * h * h * bt;
        q[0].fwd_flops = 2 * tok * 3 * h * h;
        q[0].act_bytes = 2 * act_h;
        q[0].out_bytes = 3 * act_h;
        q[0].heavy_ops = 1;
        q[0].sig = 2;
        /* attention core + output projection (+ residual) */
        q[1].param_bytes = h * h * bt;
        q[1].fwd_flops = 2 * tok * h * h + 4 * rows * seq * seq * h;
        q[1].act_bytes = 4 * act_h + rows * seq * seq * 16 * bt;
        q[1].out_bytes = act_h;
        q[1].heavy_ops = 3;
        q[1].sig = 3;
        /* LN + MLP up */
        q[2].param_bytes = 4 * h * h * bt;
        q[2].fwd_flops = 2 * tok * 4 * h * h;
        q[2].act_bytes = 2 * act_h;
        q[2].out_bytes = 4 * act_h;
        q[2].heavy_ops = 1;
        q[2].sig = 4;
        /* GELU + MLP down (+ residual) */
        q[3].param_bytes = 4 * h * h * bt;
        q[3].fwd_flops = 2 * tok * 4 * h * h;
        q[3].act_bytes = 8 * act_h;
        q[3].out_bytes = act_h;
        q[3].heavy_ops = 1;
        q[3].sig = 5;
    }
    PlanLayer *hd = &ly[n - 1];
    hd->param_bytes = vocab * h * bt;
    hd->fwd_flops = 2 * tok * h * vocab;
    hd->act_bytes = act_h + tok * vocab * 4;
    hd->out_bytes = 0;
    hd->heavy_ops = 1;
    hd->sig = 6;
    for (int i = 0; i < n; i++) {
        if (ly[i].bwd_flops == 0)
            ly[i].bwd_flops = 2 * ly[i].fwd_flops;
        ly[i].first_node = ly[i].last_node = -1;
    }
    *L = n;
    return ly;
}

#endif
