/* Device executor runner: context, scratch, CONST cache, and the host
 * fallback (operands copied to the host, hostexec runs the node, outputs
 * copied back) for ops without a device kernel. */
#include "cudaexec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "hostexec.h"

int cudaexec_native_call(CudaExec *x, IrNode *n, const void **in, void **out, IrError *err);

static int cuda_fail(IrError *err, const char *what, cudaError_t e) {
    return ir_errorf(err, "%s: %s", what, cudaGetErrorString(e));
}

/* The executor's own state on x->k (set): the out-of-range flag. */
static int init_flag(CudaExec *x, IrError *err) {
    cudaError_t ce = cudaMalloc((void **)&x->bad, sizeof(int));
    if (ce != cudaSuccess) {
        x->bad = NULL;
        cudaexec_free(x);
        return cuda_fail(err, "cudaMalloc (executor flag)", ce);
    }
    /* the executor's stream does not order with the legacy default stream:
     * every setup write goes on it and is waited for */
    ce = cudaMemsetAsync(x->bad, 0, sizeof(int), x->k.stream);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(x->k.stream);
    if (ce != cudaSuccess) {
        cudaexec_free(x);
        return cuda_fail(err, "executor flag", ce);
    }
    return 0;
}

int cudaexec_init(CudaExec *x, IrError *err) {
    memset(x, 0, sizeof *x);
    char e[HKC_ERRLEN];
    if (hkc_ctx_init(&x->k, e)) return ir_errorf(err, "%s", e);
    return init_flag(x, err);
}

int cudaexec_init_on(CudaExec *x, const HkcCtx *k, IrError *err) {
    memset(x, 0, sizeof *x);
    x->k = *k;
    x->k_borrowed = 1;
    return init_flag(x, err);
}

void cudaexec_free(CudaExec *x) {
    for (int i = 0; i < x->nconst; i++) cudaFree(x->cvals[i]);
    free(x->ckeys);
    free(x->cvals);
    if (x->scratch) cudaFree(x->scratch);
    if (x->spare) cudaFree(x->spare);
    if (x->bad) cudaFree(x->bad);
    if (!x->k_borrowed) hkc_ctx_free(&x->k);
    memset(x, 0, sizeof *x);
}

void *cudaexec_scratch(CudaExec *x, size_t n, IrError *err) {
    if (n <= x->scratch_bytes && x->scratch) return x->scratch;
    /* the stream may still read the old scratch */
    if (x->scratch && (cudaStreamSynchronize(x->k.stream) != cudaSuccess ||
                       cudaFree(x->scratch) != cudaSuccess)) {
        ir_errorf(err, "device scratch: freeing the old buffer failed");
        return NULL;
    }
    x->scratch = NULL;
    x->scratch_bytes = 0;
    cudaError_t e = cudaMalloc(&x->scratch, n ? n : 16);
    if (e != cudaSuccess) {
        x->scratch = NULL;
        cuda_fail(err, "device scratch: cudaMalloc", e);
        return NULL;
    }
    x->scratch_bytes = n;
    return x->scratch;
}

int cudaexec_sync(CudaExec *x, const char *what, IrError *err) {
    cudaError_t e = cudaStreamSynchronize(x->k.stream);
    return e == cudaSuccess ? 0 : cuda_fail(err, what, e);
}

const void *cudaexec_const(CudaExec *x, IrValue *v, IrError *err) {
    for (int i = 0; i < x->nconst; i++)
        if (x->ckeys[i] == v) return x->cvals[i];
    const void *h = ir_value_data(v, err);
    if (!h) return NULL;
    size_t nb = ir_value_bytes(v);
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, nb ? nb : 16);
    if (e == cudaSuccess && nb) e = cudaMemcpyAsync(d, h, nb, cudaMemcpyHostToDevice, x->k.stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(x->k.stream);
    if (e != cudaSuccess) {
        if (d) cudaFree(d);
        cuda_fail(err, "constant to the device", e);
        return NULL;
    }
    if (x->nconst == x->capconst) {
        x->capconst = x->capconst ? 2 * x->capconst : 64;
        x->ckeys = realloc(x->ckeys, (size_t)x->capconst * sizeof *x->ckeys);
        x->cvals = realloc(x->cvals, (size_t)x->capconst * sizeof *x->cvals);
    }
    x->ckeys[x->nconst] = v;
    x->cvals[x->nconst++] = d;
    return d;
}

/* Host executor on host copies of the operands. */
static int fallback(CudaExec *x, IrNode *n, const void **in, void **out, IrError *err) {
    const void *hin[64] = {0};
    void *hout[64] = {0};
    int rc = 0;
    x->fallbacks++;
    if (n->nin > 64 || n->nout > 64) return ir_errorf(err, "too many operands");
    cudaError_t e = cudaStreamSynchronize(x->k.stream);
    if (e != cudaSuccess) return cuda_fail(err, "before a host fallback", e);
    for (int i = 0; i < n->nin && !rc; i++) {
        if (!n->in[i] || !in[i]) continue;
        size_t nb = ir_value_bytes(n->in[i]);
        void *h = malloc(nb ? nb : 1);
        hin[i] = h;
        if (!h) rc = ir_errorf(err, "no host memory for input '%s'", n->in[i]->name);
        else if (nb && (e = cudaMemcpyAsync(h, in[i], nb, cudaMemcpyDeviceToHost,
                                            x->k.stream)) != cudaSuccess)
            rc = cuda_fail(err, "input to the host", e);
    }
    if (!rc && (e = cudaStreamSynchronize(x->k.stream)) != cudaSuccess)
        rc = cuda_fail(err, "inputs to the host", e);
    for (int i = 0; i < n->nout && !rc; i++) {
        if (!n->out[i] || !out[i]) continue;
        size_t nb = ir_value_bytes(n->out[i]);
        if (!(hout[i] = calloc(nb ? nb : 1, 1)))
            rc = ir_errorf(err, "no host memory for output '%s'", n->out[i]->name);
    }
    if (!rc) rc = hexec_call_node_into(n, hin, hout, err);
    for (int i = 0; i < n->nout && !rc; i++) {
        if (!hout[i]) continue;
        size_t nb = ir_value_bytes(n->out[i]);
        if (nb && (e = cudaMemcpyAsync(out[i], hout[i], nb, cudaMemcpyHostToDevice,
                                       x->k.stream)) != cudaSuccess)
            rc = cuda_fail(err, "output to the device", e);
    }
    /* the host buffers are freed below: the copies must have finished */
    if ((e = cudaStreamSynchronize(x->k.stream)) != cudaSuccess && !rc)
        rc = cuda_fail(err, "outputs to the device", e);
    for (int i = 0; i < 64; i++) {
        free((void *)hin[i]);
        free(hout[i]);
    }
    return rc;
}

int cudaexec_call_node(CudaExec *x, IrNode *n, const void **in, void **out, IrError *err) {
    int rc = cudaexec_native_call(x, n, in, out, err);
    if (rc > 0) rc = fallback(x, n, in, out, err); /* no device kernel for this case */
    if (rc) ir_error_prefix(err, "node '%s' (%s, device)", n->name, ir_op_name(n->op));
    return rc ? -1 : 0;
}
