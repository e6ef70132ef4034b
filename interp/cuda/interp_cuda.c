/* The CUDA backend of the node interpreter (library hetrt_interp_cuda): the
 * arena is device memory, nodes run on the device executor (cudaexec) on
 * the CUDA stage runtime's stream and cuBLASLt handle (its HkcCtx, handed
 * over as HetrtInterpEnv.kernel_ctx), so they order with the runtime's
 * copies and collectives. */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "cudaexec.h"
#include "interp_be.h"

int interp_be_open(void *kernel_ctx, void **be, IrError *err) {
    *be = NULL;
    if (!kernel_ctx) return ir_errorf(err, "the CUDA interpreter needs the runtime's kernel context");
    CudaExec *x = calloc(1, sizeof *x);
    if (!x) return ir_errorf(err, "out of memory");
    if (cudaexec_init_on(x, (const HkcCtx *)kernel_ctx, err)) {
        free(x);
        return -1;
    }
    *be = x;
    return 0;
}

void interp_be_close(void *be, int verbose) {
    CudaExec *x = be;
    if (!x) return;
    if (x->fallbacks && verbose)
        fprintf(stderr, "[hetrt] %lld nodes ran on the host executor (no device kernel)\n",
                (long long)x->fallbacks);
    cudaexec_free(x);
    free(x);
}

int interp_be_zero(void *be, void *dst, size_t n) {
    CudaExec *x = be;
    return n && cudaMemsetAsync(dst, 0, n, x->k.stream) != cudaSuccess;
}

unsigned interp_be_overwrites(void *be, const IrNode *n) {
    return cudaexec_op_overwrites(n->op);
}

/* The first version allocated, zeroed, synchronised and freed a device
 * buffer per unused output per call: a stall of the stream each time.  Now
 * one buffer grows to the largest need (a synchronisation only then). */
void *interp_be_spare(void *be, size_t n) {
    CudaExec *x = be;
    if (n <= x->spare_bytes && x->spare) return x->spare;
    if (x->spare) {
        cudaStreamSynchronize(x->k.stream); /* earlier kernels may still write it */
        cudaFree(x->spare);
    }
    x->spare = NULL;
    x->spare_bytes = 0;
    if (cudaMalloc(&x->spare, n ? n : 16) != cudaSuccess) {
        x->spare = NULL;
        return NULL;
    }
    x->spare_bytes = n;
    return x->spare;
}

const void *interp_be_const(void *be, IrValue *v, IrError *err) {
    return cudaexec_const((CudaExec *)be, v, err);
}

int interp_be_node(void *be, IrNode *n, const void **in, void **out, IrError *err) {
    return cudaexec_call_node((CudaExec *)be, n, in, out, err);
}
