/* Host executor: runs an IrGraph with the fp32 (and integer) reference
 * kernels of kernels/host, one table entry per IrOp (codegen/hostexec_ops.c).
 * It is the host backend `hetc run` uses, and const-fold evaluates nodes
 * through it, so there is one way to compute an op on the host.
 *
 * Preconditions: the graph is verified and every value's shape is static
 * (run shape-infer first).
 */
#ifndef HETC_HOSTEXEC_H
#define HETC_HOSTEXEC_H

#include "ir.h"

/* 1 if the executor has a kernel for op (for table-completeness tests). */
/* The deterministic contents `hetc profile` gives a layer's inputs,
 * parameters and states (nb bytes of v's tensor at h), on the host dry run
 * and the device alike (driver/cmd_profile.c, runtime/cuda/cudaprof.c):
 * ids and integer inputs 0 (always in range), floats small and varied (no
 * overflow in exp/softmax, no denormals). */
void hexec_fill_pattern(const IrValue *v, void *h, size_t nb);

int hexec_op_supported(IrOp op);
/* 1 if it can run op on these input dtypes (conformance: "unsupported"). */
int hexec_node_supported(const IrNode *n, char *why, size_t whylen);

/* Evaluate one node whose inputs all have data (CONST or PARAM values).
 * Its outputs receive owned data (ir_value_set_data); kinds are unchanged. */
int hexec_eval_node(IrGraph *g, IrNode *n, IrError *err);

/* Run one node into caller-provided buffers: in[i] the bytes of input i
 * (NULL for an omitted optional input), out[i] a ZEROED buffer of output
 * i's static shape and dtype (NULL where n->out[i] is NULL).  This is how
 * stage binaries run a node on arena memory (runtime/stage: hetrt_node);
 * errors name the node and its op. */
int hexec_call_node_into(IrNode *n, const void **in, void **out, IrError *err);

/* Run the whole graph.  inputs are matched to graph inputs by name (every
 * graph input must be given; dtype and shape must match exactly).  On
 * success *outputs is a malloc'd array of *noutputs tensors in graph-output
 * order, each named after its value. */
int hexec_run(IrGraph *g, IrTensor *const *inputs, int ninputs, IrTensor ***outputs,
              int *noutputs, IrError *err);

#endif
