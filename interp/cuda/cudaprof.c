/* Device timing of one layer's training graph (cudaprof.h). */
#include "cudaprof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cudaexec.h"
#include "hostexec.h"

static int cuda_fail(IrError *err, const char *what, cudaError_t e) {
    return ir_errorf(err, "%s: %s", what, cudaGetErrorString(e));
}

int cudaprof_probe(int ordinal, char *name, size_t cap, IrError *err) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        ir_errorf(err, "no CUDA device (%s)",
                  e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
        return 0;
    }
    if (ordinal < 0 || ordinal >= n) {
        ir_errorf(err, "no CUDA device %d (%d present)", ordinal, n);
        return 0;
    }
    struct cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, ordinal)) != cudaSuccess) {
        cuda_fail(err, "cudaGetDeviceProperties", e);
        return 0;
    }
    snprintf(name, cap, "%s", p.name);
    return n;
}

typedef struct Bufs {
    void **d;      /* by value index in g->values */
    int *owned;
    int n;
} Bufs;

static int value_index(const IrGraph *g, const IrValue *v) {
    /* ids are creation indices; after compaction values[] may be shorter */
    if (v->id >= 0 && v->id < g->nvalues && g->values[v->id] == v) return v->id;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i] == v) return i;
    return -1;
}

static int alloc_bufs(IrGraph *g, CudaExec *x, Bufs *b, double *bytes, IrError *err) {
    b->n = g->nvalues;
    b->d = calloc((size_t)b->n + 1, sizeof *b->d);
    b->owned = calloc((size_t)b->n + 1, sizeof *b->owned);
    if (!b->d || !b->owned) return ir_errorf(err, "out of memory");
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *v = g->values[i];
        if (v->kind == IR_VK_CONST) {
            if (!(b->d[i] = (void *)cudaexec_const(x, v, err)))
                return ir_error_prefix(err, "value '%s'", v->name);
            continue;
        }
        size_t nb = ir_value_bytes(v);
        cudaError_t e = cudaMalloc(&b->d[i], nb ? nb : 16);
        if (e != cudaSuccess) {
            b->d[i] = NULL;
            return ir_errorf(err, "cudaMalloc of value '%s' (%zu bytes): %s", v->name, nb,
                             cudaGetErrorString(e));
        }
        b->owned[i] = 1;
        *bytes += (double)nb;
        if (v->producer || !nb) continue;
        void *h = malloc(nb);
        if (!h) return ir_errorf(err, "out of memory");
        hexec_fill_pattern(v, h, nb);
        e = cudaMemcpy(b->d[i], h, nb, cudaMemcpyHostToDevice);
        free(h);
        if (e != cudaSuccess) return cuda_fail(err, "input pattern to the device", e);
    }
    return 0;
}

static void free_bufs(Bufs *b) {
    for (int i = 0; i < b->n && b->d; i++)
        if (b->owned[i] && b->d[i]) cudaFree(b->d[i]);
    free(b->d);
    free(b->owned);
    memset(b, 0, sizeof *b);
}

/* Run the nodes of one phase as hetrt_node does: outputs zeroed, then the
 * device executor. */
static int run_phase(IrGraph *g, CudaExec *x, const Bufs *b, IrPhase ph, IrError *err) {
    for (int k = 0; k < g->nnodes; k++) {
        IrNode *n = g->nodes[k];
        if (n->dead || n->phase != ph) continue;
        const void *in[64] = {0};
        void *out[64] = {0};
        if (n->nin > 64 || n->nout > 64)
            return ir_errorf(err, "node '%s': too many operands", n->name);
        for (int i = 0; i < n->nin + n->nout; i++) {
            IrValue *v = i < n->nin ? n->in[i] : n->out[i - n->nin];
            if (v && value_index(g, v) < 0)
                return ir_errorf(err, "node '%s': value '%s' is not in the graph", n->name,
                                 v->name);
        }
        for (int i = 0; i < n->nin; i++)
            if (n->in[i]) in[i] = b->d[value_index(g, n->in[i])];
        for (int i = 0; i < n->nout; i++) {
            if (!n->out[i]) continue;
            out[i] = b->d[value_index(g, n->out[i])];
            size_t nb = ir_value_bytes(n->out[i]);
            cudaError_t e = nb ? cudaMemsetAsync(out[i], 0, nb, x->k.stream) : cudaSuccess;
            if (e != cudaSuccess) return cuda_fail(err, "zeroing an output", e);
        }
        if (cudaexec_call_node(x, n, in, out, err)) return -1;
    }
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int cudaprof_layer(IrGraph *g, int ordinal, int warmup, int reps, CudaProfResult *out,
                   IrError *err) {
    memset(out, 0, sizeof *out);
    if (reps < 1) reps = 1;
    cudaError_t e = cudaSetDevice(ordinal);
    if (e != cudaSuccess) return cuda_fail(err, "cudaSetDevice", e);
    CudaExec x;
    if (cudaexec_init(&x, err)) return -1;
    Bufs b;
    memset(&b, 0, sizeof b);
    cudaEvent_t ev[3] = {0};
    double *tf = calloc((size_t)reps, sizeof *tf), *tb = calloc((size_t)reps, sizeof *tb);
    int rc = -1;
    if (!tf || !tb) {
        ir_errorf(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < 3; i++)
        if ((e = cudaEventCreate(&ev[i])) != cudaSuccess) {
            ev[i] = NULL;
            cuda_fail(err, "cudaEventCreate", e);
            goto done;
        }
    if (alloc_bufs(g, &x, &b, &out->dev_bytes, err)) goto done;
    for (int r = 0; r < warmup + reps; r++) {
        int64_t fb0 = x.fallbacks;
        if ((e = cudaEventRecord(ev[0], x.k.stream)) != cudaSuccess ||
            run_phase(g, &x, &b, IR_PHASE_FWD, err) ||
            (e = cudaEventRecord(ev[1], x.k.stream)) != cudaSuccess ||
            run_phase(g, &x, &b, IR_PHASE_BWD, err) ||
            (e = cudaEventRecord(ev[2], x.k.stream)) != cudaSuccess ||
            (e = cudaEventSynchronize(ev[2])) != cudaSuccess) {
            if (e != cudaSuccess) cuda_fail(err, "timing a layer", e);
            goto done;
        }
        float ms_f = 0, ms_b = 0;
        if ((e = cudaEventElapsedTime(&ms_f, ev[0], ev[1])) != cudaSuccess ||
            (e = cudaEventElapsedTime(&ms_b, ev[1], ev[2])) != cudaSuccess) {
            cuda_fail(err, "cudaEventElapsedTime", e);
            goto done;
        }
        out->fallbacks = x.fallbacks - fb0;
        if (r >= warmup) {
            tf[r - warmup] = ms_f * 1e-3;
            tb[r - warmup] = ms_b * 1e-3;
        }
    }
    qsort(tf, (size_t)reps, sizeof *tf, cmp_d);
    qsort(tb, (size_t)reps, sizeof *tb, cmp_d);
    out->t_f = tf[reps / 2];
    out->t_b = tb[reps / 2];
    out->t_f_min = tf[0];
    out->t_b_min = tb[0];
    out->reps = reps;
    rc = 0;
done:
    cudaStreamSynchronize(x.k.stream);
    for (int i = 0; i < 3; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    free_bufs(&b);
    free(tf);
    free(tb);
    cudaexec_free(&x);
    return rc;
}
