/* Shape rules of the training ops (ir/ops.def "training" section); the
 * entries of shape_rules.c's table point here. */
#ifndef HETC_SHAPE_RULES_TRAIN_H
#define HETC_SHAPE_RULES_TRAIN_H

#include "ir.h"

int rule_cross_entropy(IrNode *n, IrError *err);
int rule_cross_entropy_grad(IrNode *n, IrError *err);
int rule_vocab_ce_stats(IrNode *n, IrError *err);
int rule_vocab_cross_entropy(IrNode *n, IrError *err);
int rule_vocab_cross_entropy_grad(IrNode *n, IrError *err);
int rule_linear_grad(IrNode *n, IrError *err);
/* every output i has the dtype and shape of input i (norm / attention grads,
 * also UnaryGrad, SoftmaxGrad, EmbeddingGrad whose only output is like in0) */
int rule_grad_like_inputs(IrNode *n, IrError *err);
/* output 0 has input 0's dtype and the shape held by the i64 constant input 1 */
int rule_grad_to_shape(IrNode *n, IrError *err);
int rule_adamw(IrNode *n, IrError *err); /* the fused optimizer step */

#endif
