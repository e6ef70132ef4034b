/* The optimizer pass: for every parameter P with a gradient value named
 * "grad/P" (an autodiff output, or a graph input when the update runs as a
 * graph of its own after gradient accumulation), add phase-upd nodes:
 *   - optimizer state values (kind optstate, zero-initialised data):
 *     "opt/m/P", "opt/v/P" (AdamW) or "opt/buf/P" (SGD momentum);
 *   - graph inputs "lr" (f32 scalar, the schedule's value this step) and
 *     "step" (i64 scalar, 1-based);
 *   - the global gradient norm "grad_norm" (before clipping) and, when
 *     clipping, "clip_scale" = min(1, clip / (norm + 1e-6))
 *     (torch.nn.utils.clip_grad_norm_), both graph outputs;
 *   - torch.optim.AdamW as one AdamW node per parameter
 *     (P, opt/m/P, opt/v/P, grad/P, lr, step[, clip_scale] -> upd/P,
 *     upd/m/P, upd/v/P; attrs beta1 beta2 eps weight_decay, the decay 0 on
 *     rank < 2), an elementwise op whose output i may overwrite input i
 *     (the host executor's inplace bits, stage memory plans place the upd values on
 *     P / m / v); torch.optim.SGD written with elementwise IR ops (Mul, Add,
 *     Sub, Where) on the clipped gradient; outputs "upd/P" and "upd/m/P",
 *     "upd/v/P" (or "upd/buf/P").
 * State carry: the IR stays SSA; whoever runs it writes "upd/P" back into
 * P's storage and "upd/m/P" into "opt/m/P" (etc.) before the next step. */
#ifndef HETC_OPTIMIZER_H
#define HETC_OPTIMIZER_H

#include "ir.h"
#include "pass.h"

typedef struct OptimOpts {
    int sgd;              /* 0: AdamW */
    double beta1, beta2, eps;
    double weight_decay;  /* on parameters of rank >= 2 only (norms, biases: none) */
    double momentum, dampening;
    int nesterov;
    double clip;          /* global-norm clip; <= 0 off */
    int norm_input;       /* 1: "grad_norm" is an f32 scalar graph input (after "lr",
                             "step"), not computed nor output: the norm of gradients
                             spread over several programs (pipeline stages) */
} OptimOpts;

void optim_opts_default(OptimOpts *o); /* AdamW 0.9/0.95/1e-8, wd 0.1, clip 1.0 */
int pass_optimizer_with(IrGraph *g, const OptimOpts *o, IrError *err);
int pass_optimizer(IrGraph *g, PassContext *ctx, IrError *err);

#endif
