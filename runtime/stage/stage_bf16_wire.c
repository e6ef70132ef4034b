/* Gradient reduction in bf16 (`grad_reduce bf16`, hetc compile
 * --grad-reduce-dtype bf16; issue 17): the host backend's DP all-reduce,
 * ZeRO reduce-scatter and cross-stage shared sum send bf16 and add in bf16
 * (and with `tp_reduce bf16 N`, --tp-reduce-dtype bf16, the TP all-reduces
 * of activations and their gradients),
 * the way NCCL's bf16 all-reduce does (each pairwise sum in fp32, rounded
 * to nearest even).  Half the bytes on the wire, at bf16 precision of the
 * summed gradient; the accumulators, master weights and AdamW stay fp32.
 * The default (fp32) is Megatron's: this is the documented option
 * (docs/TRAINING.md "Mixed precision (bf16)"). */
#include <stdlib.h>

#include "hk_bf16.h"
#include "stage_internal.h"

/* MPI user op over MPI_UINT16_T holding bf16 bits.  Commutative (a + b in
 * fp32 is, and the rounding is a function of the sum), so MPI may pair
 * contributions in any order and every rank still gets the same bits. */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = hk_f32_to_bf16(hk_bf16_to_f32(a[i]) + hk_bf16_to_f32(b[i]));
}

int stage_bf16_wire_setup(StageRt *rt, StageBf16Wire *w, int64_t cap, const char *what) {
    w->op = MPI_OP_NULL;
    w->buf = NULL;
    w->cap = 0;
    if (cap <= 0) return 0;
    w->cap = cap;
    /* allocated once, here: the step loop allocates nothing (train_stage_noalloc) */
    w->buf = malloc((size_t)w->cap * sizeof *w->buf);
    if (!w->buf) {
        rt_log_error("stage %d: %s: no memory for the %lld-element wire buffer", rt->cfg.stage,
                     what, (long long)w->cap);
        return 1;
    }
    /* solo: nothing is reduced (a one-rank sum rounds nothing), and MPI,
     * never initialised, cannot make the op */
    if (!rt->ctx.solo && MPI_Op_create(bf16_sum, 1, &w->op) != MPI_SUCCESS) {
        rt_log_error("stage %d: %s: MPI_Op_create failed", rt->cfg.stage, what);
        return 1;
    }
    return 0;
}

void stage_bf16_wire_teardown(StageBf16Wire *w) {
    if (w->op != MPI_OP_NULL) MPI_Op_free(&w->op);
    free(w->buf);
    w->buf = NULL;
    w->cap = 0;
}

static int fits(const StageBf16Wire *w, int64_t n, const char *what) {
    if (n <= w->cap) return 0;
    rt_log_error("%s: %lld elements, more than the bf16 wire buffer's %lld", what, (long long)n,
                 (long long)w->cap);
    return 1;
}

int stage_bf16_allreduce(StageRt *rt, StageBf16Wire *w, MPI_Comm comm, float *buf, int64_t n,
                         const char *what) {
    int size = 1;
    if (comm == MPI_COMM_NULL || n == 0) return 0;
    MPI_Comm_size(comm, &size);
    if (size <= 1) return 0; /* nothing is reduced, so nothing is rounded */
    if (fits(w, n, what)) return 1;
    hk_bf16_round(buf, w->buf, n);
    if (rt_allreduce(&rt->ctx, comm, w->buf, (size_t)n, MPI_UINT16_T, w->op, what)) return 1;
    hk_bf16_expand(w->buf, buf, n);
    return 0;
}

int stage_bf16_reduce_scatter(StageRt *rt, StageBf16Wire *w, float *buf, int64_t n,
                              const char *what) {
    if (rt->ctx.dp_size <= 1 || n == 0) return 0;
    if (fits(w, n, what)) return 1;
    hk_bf16_round(buf, w->buf, n);
    if (rt_dp_reduce_scatter(&rt->ctx, w->buf, (size_t)n, MPI_UINT16_T, w->op, what)) return 1;
    int64_t start, count; /* in place: this rank's slice is at the front (rt.h) */
    rt_row_split(n, rt->ctx.dp_size, rt->ctx.dp_rank, &start, &count);
    hk_bf16_expand(w->buf, buf, count);
    return 0;
}
