/* Device executor: runs one IR node on device buffers, one table entry per
 * IrOp (cudaexec_ops.c), the device twin of codegen/hostexec.  Ops with a
 * device kernel (kernels/cuda, cuBLASLt) run on the executor's stream; every
 * other op, and a native op on dtypes or layouts its kernel does not take,
 * runs on the host executor through host copies of its operands (correct,
 * slow: cudaexec_op_native says which ops avoid it, docs/CUDA.md lists them). */
#ifndef HETC_CUDAEXEC_H
#define HETC_CUDAEXEC_H

#include <stddef.h>

#include "hkc.h"
#include "ir.h"

typedef struct CudaExec {
    HkcCtx k;
    void *scratch;        /* device scratch for one node (attention scores, stats) */
    size_t scratch_bytes;
    void *spare;          /* the interpreter's room for unused outputs (interp_be_spare) */
    size_t spare_bytes;
    int *bad;             /* device flag: a kernel saw an out-of-range id */
    IrValue **ckeys;      /* CONST values copied to the device, and their copies */
    void **cvals;
    int nconst, capconst;
    int64_t fallbacks;    /* nodes run on the host executor */
    int k_borrowed;       /* k is the caller's (cudaexec_init_on): not freed here */
} CudaExec;

int cudaexec_init(CudaExec *x, IrError *err);
/* The same on the caller's kernel context (its stream and cuBLASLt handle,
 * e.g. the CUDA stage runtime's), which must outlive x. */
int cudaexec_init_on(CudaExec *x, const HkcCtx *k, IrError *err);
void cudaexec_free(CudaExec *x);
/* 1 if op has a device kernel (for some dtypes/layouts; others fall back). */
int cudaexec_op_native(IrOp op);
/* Bit i set: cudaexec_call_node writes every element of output i of an op
 * (its device path, and the host fallback, which copies whole outputs). */
unsigned cudaexec_op_overwrites(IrOp op);
/* Device copy of a CONST value's data (cached for the executor's life,
 * keyed by the IrValue's address: the graph holding v must outlive x). */
const void *cudaexec_const(CudaExec *x, IrValue *v, IrError *err);
/* Run n: in[i] device pointers (NULL for an omitted optional input), out[i]
 * device buffers of the outputs' static shapes, zeroed unless
 * cudaexec_op_overwrites marks them.  Synchronous with
 * respect to the host only where a result must be checked (ids). */
int cudaexec_call_node(CudaExec *x, IrNode *n, const void **in, void **out, IrError *err);
/* Device scratch of at least n bytes (grown, owned by x). */
void *cudaexec_scratch(CudaExec *x, size_t n, IrError *err);
/* Wait for the executor's stream; errors name `what`. */
int cudaexec_sync(CudaExec *x, const char *what, IrError *err);

#endif
