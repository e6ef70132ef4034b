/* Constant evaluation shared by shape-infer and const-fold (private to
 * passes/): a node is evaluated through the host executor (one way to
 * compute an op on the host) and its outputs become CONST values. */
#ifndef HETC_FOLD_H
#define HETC_FOLD_H

#include "ir.h"

/* Outputs larger than this are left to run time: folding would materialise
 * giant constants (e.g. an Expand of a mask to [B,H,T,T]) in the IR. */
#define FOLD_MAX_BYTES ((size_t)64 << 20)

/* 1 if every present input is a CONST with data.  PARAMs never count:
 * parameters are trained, folding them would freeze them. */
int fold_inputs_const(const IrNode *n);
/* Evaluate n (its output shapes must be inferred) and turn its outputs into
 * owned CONST values; the node is killed.  1 folded, 0 left alone (too big,
 * or the executor has no kernel for these dtypes), -1 error. */
int fold_node(IrGraph *g, IrNode *n, size_t max_bytes, IrError *err);
/* Shape of a value with a static shape: fold directly (no executor). */
int fold_shape_node(IrGraph *g, IrNode *n, IrError *err);

#endif
