/* The hetrt_* entries generated stage functions call (runtime/abi/stage_abi.h).
 * They take only constants from the generated code; everything dynamic
 * (arena, data, current microbatch) comes from the process's one stage
 * runtime state.  hetrt_node is not here: the node interpreter library
 * (interp/) defines it, for the binaries that still call it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_internal.h"

StageRt *hetrt_stage_rt = NULL;

void *stage_host_buf(StageRt *rt, size_t n) {
    if (n > rt->stage_buf_bytes) {
        void *p = realloc(rt->stage_buf, n);
        if (!p) return NULL;
        rt->stage_buf = p;
        rt->stage_buf_bytes = n;
    }
    return rt->stage_buf ? rt->stage_buf : (rt->stage_buf = malloc(1));
}

static StageRt *need_rt(const char *entry) {
    if (!hetrt_stage_rt) {
        rt_log_error("%s called outside hetrt_stage_main", entry);
        return NULL;
    }
    return hetrt_stage_rt;
}

static int xfer_of(StageRt *rt, int32_t xfer, int send, const char *entry) {
    if (xfer < 0 || xfer >= rt->cfg.nxfers) {
        rt_log_error("%s: xfer %d is not in the config's %d xfer lines", entry, xfer,
                     rt->cfg.nxfers);
        return -1;
    }
    if (rt->cfg.xfers[xfer].send != send) {
        rt_log_error("%s: xfer %d (id %d) is a %s in the config", entry, xfer,
                     rt->cfg.xfers[xfer].id, send ? "recv" : "send");
        return -1;
    }
    return 0;
}

/* Unique per (xfer id, microbatch) within a step; MPI's ordering of equal
 * tags between one pair of ranks covers the reuse across steps. */
static int xfer_tag(const StageRt *rt, const StageXfer *x) {
    return (int)(((int64_t)x->id * rt->cfg.accum + rt->micro) % 32768);
}

static int32_t transfer(int32_t xfer, void *dst, const void *src, int send) {
    const char *entry = send ? "hetrt_send" : "hetrt_recv";
    StageRt *rt = need_rt(entry);
    if (!rt || xfer_of(rt, xfer, send, entry)) return 1;
    const StageXfer *x = &rt->cfg.xfers[xfer];
    char what[160];
    snprintf(what, sizeof what, "%s %s %d of microbatch %d (step %lld) %s stage %d",
             x->grad ? "gradient" : "activation", send ? "send" : "recv", x->id, rt->micro,
             (long long)rt->step + 1, send ? "to" : "from", x->peer);
    int me = rt->cfg.stage;
    /* A device arena moves through host memory (the CPU-mediated transport:
     * device -> host -> MPI -> host -> device); this rank's rows are
     * local_rows x row_bytes contiguous bytes. */
    size_t nb = (size_t)(rt->cfg.local_rows * x->row_bytes);
    void *host = NULL;
    if (!stage_be_is_host() && !(host = stage_host_buf(rt, nb ? nb : 1))) {
        rt_log_error("%s: no memory for %zu staging bytes", what, nb);
        return 1;
    }
    /* Tensor parallelism: boundary values are replicated over a stage's TP
     * ranks, so each TP rank sends only its piece of its DP shard's rows and
     * the receiving TP group all-gathers the pieces (rt_redistribute_rows):
     * the value crosses the inter-stage link once, whatever either stage's
     * TP degree, spread over all TP ranks' links (seed 002). */
    /* Sends are deferred (staged copies, completed once per step), so that
     * two stages sending to each other at once never wait on each other. */
    /* Metrics: the time spent here is taken out of the running stage
     * function's compute (stage_main.c run_fn) and counted as
     * communication (a send) or bubble (a receive blocks until the peer
     * has produced the value); --trace records the span. */
    double t0 = stage_now();
    int rc;
    if (send) {
        rc = host && stage_be_get(rt, host, src, nb);
        if (!rc)
            rc = rt_redistribute_rows_isend(&rt->ctx, me, host ? host : src, x->peer, x->rows,
                                            (size_t)x->row_bytes, xfer_tag(rt, x), what,
                                            &rt->sendq) != 0;
    } else {
        rc = rt_redistribute_rows(&rt->ctx, x->peer, NULL, me, host ? host : dst, x->rows,
                                  (size_t)x->row_bytes, xfer_tag(rt, x), what) != 0;
        if (!rc && host) rc = stage_be_put(rt, dst, host, nb) != 0;
    }
    double t1 = stage_now();
    if (send) rt->met.in_fn_send += t1 - t0;
    else rt->met.in_fn_recv += t1 - t0;
    stage_span(rt, send ? (x->grad ? 'R' : 'S') : 'W', rt->micro, t0, t1);
    return rc;
}

/* The backend's own link first (stage_be_transfer: CUDA's NCCL links), else
 * the CPU-mediated transfer above. */
int32_t hetrt_recv(int32_t xfer, void *dst) {
    int32_t rc;
    if (stage_be_transfer(hetrt_stage_rt, xfer, dst, NULL, 0, &rc)) return rc;
    return transfer(xfer, dst, NULL, 0);
}
int32_t hetrt_send(int32_t xfer, const void *src) {
    int32_t rc;
    if (stage_be_transfer(hetrt_stage_rt, xfer, NULL, src, 1, &rc)) return rc;
    return transfer(xfer, NULL, src, 1);
}

int32_t hetrt_tokens(int32_t which, void *dst, int32_t dtype) {
    StageRt *rt = need_rt("hetrt_tokens");
    if (!rt) return 1;
    if ((which != 0 && which != 1) || (dtype != RT_I32 && dtype != RT_I64)) {
        rt_log_error("hetrt_tokens: bad request (which %d, dtype %d)", which, dtype);
        return 1;
    }
    /* a validation forward (stage_main.c) reads --val-data's batch val_batch */
    const RtDataLoader *dl = rt->in_val ? &rt->vdl : &rt->dl;
    int64_t n = dl->rows * dl->T;
    int64_t mb = rt->in_val ? rt->val_batch : rt->step * rt->cfg.accum + rt->micro;
    if (dl->nbatches > 0) mb %= dl->nbatches;
    if (rt->tok_mb != mb) {
        char err[RT_ERRLEN];
        if (rt_data_batch(dl, mb, rt->tok_in, rt->tok_tg, err)) {
            rt_log_error("hetrt_tokens: batch %lld: %s", (long long)mb, err);
            return 1;
        }
        rt->tok_mb = mb;
    }
    const int64_t *src = which ? rt->tok_tg : rt->tok_in;
    if (dtype == RT_I64) return stage_be_put(rt, dst, src, (size_t)n * sizeof(int64_t));
    int32_t *d = stage_be_is_host() ? dst : stage_host_buf(rt, (size_t)(n ? n : 1) * 4);
    if (!d) return 1;
    for (int64_t i = 0; i < n; i++) d[i] = (int32_t)src[i];
    return d == dst ? 0 : stage_be_put(rt, dst, d, (size_t)n * sizeof(int32_t));
}

int32_t hetrt_accum(void *acc, const void *g, int64_t n) {
    StageRt *rt = need_rt("hetrt_accum");
    if (!rt) return 1;
    return stage_be_axpy(rt, acc, g, n, 1.0f / (float)rt->cfg.accum);
}

int32_t hetrt_round_bf16_sr(const void *x, void *y, int64_t n, int64_t key) {
    StageRt *rt = need_rt("hetrt_round_bf16_sr");
    if (!rt || n < 0) return 1;
    return stage_be_round_sr(rt, x, y, n, key, rt->step);
}

int32_t hetrt_loss(const void *loss) {
    StageRt *rt = need_rt("hetrt_loss");
    if (!rt) return 1;
    float l;
    if (stage_be_get(rt, &l, loss, sizeof l)) return 1;
    rt->step_loss += (double)l;
    return 0;
}

int32_t hetrt_copy(void *dst, const void *src, int64_t bytes) {
    StageRt *rt = need_rt("hetrt_copy");
    if (!rt || bytes < 0) return 1;
    return stage_be_copy(rt, dst, src, (size_t)bytes);
}

int32_t hetrt_zero(void *dst, int64_t bytes) {
    StageRt *rt = need_rt("hetrt_zero");
    if (!rt || bytes < 0) return 1;
    return stage_be_zero(rt, dst, (size_t)bytes);
}
