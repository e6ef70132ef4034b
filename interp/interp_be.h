/* The backend half of the node interpreter (interp/): where a hetrt_node
 * call's buffers live and which executor runs the node.  interp_host.c
 * (library hetrt_interp: host memory, codegen/hostexec) and
 * interp/cuda/interp_cuda.c (hetrt_interp_cuda: device memory,
 * interp/cuda/cudaexec) define these; interp_stage.c (shared) resolves the
 * call's buffers and calls them. */
#ifndef HETC_INTERP_BE_H
#define HETC_INTERP_BE_H

#include <stddef.h>

#include "ir.h"

/* The backend's state for the process's life; kernel_ctx as in
 * HetrtInterpEnv (stage_interp.h).  0 or -1 with err. */
int interp_be_open(void *kernel_ctx, void **be, IrError *err);
void interp_be_close(void *be, int verbose);
int interp_be_zero(void *be, void *dst, size_t n);
/* Bit i set: running n writes every element of output i, so the caller
 * need not zero it first (each zeroing is a pass over the output). */
unsigned interp_be_overwrites(void *be, const IrNode *n);
/* Room for the outputs nobody reads (the kernels still write them): n
 * bytes kept by the backend and reused by the next call, not zeroed. */
void *interp_be_spare(void *be, size_t n);
/* Where a CONST input's data is (host, or a cached device copy). */
const void *interp_be_const(void *be, IrValue *v, IrError *err);
/* Run n on resolved buffers (outputs zeroed unless written in place or
 * marked by interp_be_overwrites). */
int interp_be_node(void *be, IrNode *n, const void **in, void **out, IrError *err);

#endif
