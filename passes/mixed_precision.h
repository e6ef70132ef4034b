/* mixed-precision (passes/mixed_precision.c): bf16 autocast of the GEMMs as
 * an explicit IR rewrite (issue 17; docs/TRAINING.md "Mixed precision").
 *
 * Every Linear whose float operands are f32 gets Cast(to=bf16) nodes on
 * them (one per value and layer, shared by the Linears that read it;
 * torch.autocast casts per call, to the same bits), computes in bf16
 * storage (bf16 in and out, fp32 accumulation inside the kernel) and a
 * Cast(to=f32) after its output, so everything else -- norms, softmax,
 * attention, the loss, the gradients of the parameters, the optimizer and
 * its moments -- stays f32.  Parameters stay f32 master weights: the bf16
 * copy is a Cast node, recomputed every step.  Autodiff then differentiates
 * the Casts (a Cast's gradient is cast back to its input's dtype), so the
 * Linear's backward runs in bf16 and the parameter gradients arrive in f32.
 * Run on the forward graph (after loss, before autodiff). */
#ifndef HETC_MIXED_PRECISION_H
#define HETC_MIXED_PRECISION_H

#include "pass.h"

int pass_mixed_precision(IrGraph *g, PassContext *ctx, IrError *err);

/* 1 if the pass runs node n in bf16 (a live Linear whose operands and
 * output are f32): the planner times these FLOPs at the bf16 peak under
 * --precision bf16-mixed (passes/layers.c PlanLayer.lp_fwd_flops). */
int mixed_precision_converts(const IrNode *n);

/* The inverse, for passes that match the f32 Linears (tp_shard: it shards
 * the fp32 graph and runs the pass again on the result): every Linear in
 * the pass's pattern -- bf16 operands each a Cast of an f32 value, its bf16
 * output read by one Cast to f32 only -- reads the f32 values and writes
 * the f32 output again; the Casts go (ir_graph_compact).  Returns the
 * number of Linears restored (0: g is left as it was). */
int mixed_precision_strip(IrGraph *g);

/* stochastic-rounding (passes/stochastic_round.c; --bf16-rounding
 * stochastic): after mixed-precision, each Cast(to=bf16) of a parameter
 * gets `sr`, the key its kernel draws its rounding bits with. */
int pass_stochastic_round(IrGraph *g, PassContext *ctx, IrError *err);
/* 1 if a live Cast of g has `sr` (tp_shard marks its rank's graph again) */
int mixed_precision_has_sr(const IrGraph *g);

#endif
