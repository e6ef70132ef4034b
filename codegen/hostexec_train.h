/* Host executor adapters of the training ops (ir/ops.def "training"
 * section), implemented in hostexec_train.c over kernels/host/hk_train.h;
 * hostexec_ops.c's table points at them.  Internal to codegen/. */
#ifndef HETC_HOSTEXEC_TRAIN_H
#define HETC_HOSTEXEC_TRAIN_H

#include "hostexec_internal.h"

int hxt_run_cross_entropy(HxCall *c);
int hxt_run_cross_entropy_grad(HxCall *c);
int hxt_run_vocab_ce_stats(HxCall *c);
int hxt_run_vocab_cross_entropy(HxCall *c);
int hxt_run_vocab_cross_entropy_grad(HxCall *c);
int hxt_run_linear_grad(HxCall *c);
int hxt_run_norm_grad(HxCall *c);       /* LayerNormGrad and RMSNormGrad */
int hxt_run_attention_grad(HxCall *c);
int hxt_run_unary_grad(HxCall *c);
int hxt_run_softmax_grad(HxCall *c);
int hxt_run_embedding_grad(HxCall *c);
int hxt_run_sum_to_shape(HxCall *c);
int hxt_run_slice_grad(HxCall *c);
int hxt_run_gather_grad(HxCall *c); /* GatherGrad, GatherNDGrad, GatherElementsGrad */
int hxt_run_adamw(HxCall *c);       /* the fused optimizer step (in place safe) */
/* every float operand f32 (the training kernels are fp32) */
int hxt_chk_gemm16(const IrNode *n, int k, char *w, size_t wl);
int hxt_chk_f32(const IrNode *n, int k, char *why, size_t whylen);

#endif
