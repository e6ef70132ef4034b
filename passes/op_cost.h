/* Per-node cost figures for the planner (HAPT §5.1): forward / backward
 * FLOPs and bytes moved from a node's static shapes, whether the op is
 * "heavy" (the ops module detection counts), and whether its backward reads
 * its inputs / output (what a layer must keep for backward).
 *
 * One table indexed by IrOp (op_cost.c) holds every op's rule; the formulas
 * are documented there (the per-layer figures built from them: layers.h).
 */
#ifndef HETC_OP_COST_H
#define HETC_OP_COST_H

#include "ir.h"

typedef struct OpCost {
    double fwd_flops;       /* forward FLOPs of the node as its shapes stand */
    double bwd_flops;       /* backward FLOPs (input + weight gradients) */
    double bytes;           /* bytes read + written by the forward */
    int heavy;              /* MatMul, Gemm, Linear, Attention */
    int saves_inputs;       /* backward reads the node's inputs */
    int saves_output;       /* backward reads the node's output (softmax, attention, ...) */
} OpCost;

/* Cost of one node.  Needs static shapes on the values the rule reads;
 * returns -1 with err naming the node and op otherwise. */
int op_cost_node(const IrNode *n, OpCost *out, IrError *err);
/* Forward FLOPs of an Attention node's two GEMMs, q k^T and p v:
 * 2*numel(q)*S + 2*numel(out)*S, no softmax and no causal halving (the
 * part splitting the heads divides: intra_ir.c); 0 without the shapes.
 * op_cost_node's Attention rule adds the softmax and halves causal. */
double op_cost_attention_gemm_flops(const IrNode *n);
/* 1 for the heavy ops (module detection's z counts these). */
int op_is_heavy(IrOp op);
/* 1 if the table has a rule for op (tests check every op has one). */
int op_cost_has_rule(IrOp op);

#endif
