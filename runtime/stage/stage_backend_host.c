/* The host backend of the stage runtime (library hetrt_stage): the arena is
 * host memory, collectives are MPI (interpreted nodes: interp/interp_host.c).  The
 * CUDA backend (runtime/cuda/stage_backend_cuda.c) implements the same
 * calls for hetrt_stage_cuda (stage_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "hk_bf16.h"
#include "hk_parallel.h"
#include "hk_train.h"
#include "stage_internal.h"

const char *stage_be_name(void) { return "host"; }
int stage_be_probe(char *err, size_t errlen) { return 0; }
/* The host backend's state: the bf16 gradient wire (empty without
 * `grad_reduce bf16`) and the TP one (empty without `tp_reduce bf16`). */
typedef struct HostBe {
    StageBf16Wire wire, tpwire;
} HostBe;
static StageBf16Wire *wire_of(StageRt *rt) {
    HostBe *b = rt->be;
    return b && b->wire.op != MPI_OP_NULL ? &b->wire : NULL;
}
int stage_be_setup(StageRt *rt) {
    HostBe *b = calloc(1, sizeof *b);
    if (!b) return 1;
    rt->be = b;
    int64_t pmax = 0; /* every gradient reduction is one parameter or less */
    for (int i = 0; i < rt->cfg.nparams; i++)
        if (rt->cfg.params[i].numel > pmax) pmax = rt->cfg.params[i].numel;
    return stage_bf16_wire_setup(rt, &b->wire, rt->cfg.grad_reduce_bf16 ? pmax : 0,
                                 "grad_reduce bf16") ||
           stage_bf16_wire_setup(rt, &b->tpwire, rt->ctx.tp_size > 1 ? rt->cfg.tp_reduce_bf16 : 0,
                                 "tp_reduce bf16");
}
void stage_be_teardown(StageRt *rt) {
    HostBe *b = rt->be;
    if (!b) return;
    stage_bf16_wire_teardown(&b->wire);
    stage_bf16_wire_teardown(&b->tpwire);
    free(b);
    rt->be = NULL;
}
int stage_be_is_host(void) { return 1; }
/* no links of its own: every transfer is MPI (stage_exec.c) */
int stage_be_transfer(StageRt *rt, int32_t xfer, void *dst, const void *src, int send,
                      int32_t *rc) {
    return 0;
}

int stage_be_arena_alloc(StageRt *rt, size_t bytes) {
    return rt_arena_init(&rt->arena, bytes, 0);
}
void stage_be_arena_free(StageRt *rt) { rt_arena_free(&rt->arena); }

int stage_be_put(StageRt *rt, void *dst, const void *src, size_t n) {
    if (n && dst != src) memmove(dst, src, n);
    return 0;
}
int stage_be_get(StageRt *rt, void *dst, const void *src, size_t n) {
    if (n && dst != src) memmove(dst, src, n);
    return 0;
}
int stage_be_zero(StageRt *rt, void *dst, size_t n) {
    if (n) hk_parallel_memset0(dst, n);
    return 0;
}
int stage_be_copy(StageRt *rt, void *dst, const void *src, size_t n) {
    if (!n || dst == src) return 0;
    const char *d = dst, *s = src;
    if (d + n <= s || s + n <= d) hk_parallel_memcpy(dst, src, n); /* disjoint */
    else memmove(dst, src, n);
    return 0;
}
int stage_be_axpy(StageRt *rt, float *y, const float *x, int64_t n, float alpha) {
    hk_axpy_f32(n, alpha, x, y); /* y + alpha x: the product commutes */
    return 0;
}
int stage_be_sumsq(StageRt *rt, const float *x, int64_t n, double *out) {
    *out = hk_sumsq_f32(x, n); /* in double: millions of squares */
    return 0;
}
int stage_be_round_sr(StageRt *rt, const float *x, uint16_t *y, int64_t n, int64_t key,
                      int64_t step) {
    (void)rt;
    hk_bf16_round_sr(x, y, n, key, step);
    return 0;
}
int stage_be_allreduce(StageRt *rt, int shared, float *buf, int64_t n, const char *what) {
    StageBf16Wire *w = wire_of(rt); /* every caller reduces a gradient */
    if (w)
        return stage_bf16_allreduce(rt, w, shared < 0 ? rt->ctx.dp_comm : rt->shared_comm[shared],
                                    buf, n, what);
    if (shared < 0) return rt_dp_allreduce_f32(&rt->ctx, buf, (size_t)n, 1.0f, what);
    return rt_allreduce(&rt->ctx, rt->shared_comm[shared], buf, (size_t)n, MPI_FLOAT, MPI_SUM,
                        what);
}
int stage_be_tp_allreduce(StageRt *rt, float *buf, int64_t n, StageRedOp op, const char *what) {
    return rt_allreduce(&rt->ctx, rt->ctx.tp_comm, buf, (size_t)n, MPI_FLOAT, stage_red_mpi(op),
                        what);
}
int stage_be_tp_allreduce_bf16(StageRt *rt, float *buf, int64_t n, const char *what) {
    HostBe *b = rt->be;
    if (!b || b->tpwire.op == MPI_OP_NULL) {
        rt_log_error("%s: the program sends TP sums as bf16 but its config has no "
                     "'tp_reduce bf16 N' record (a hand-edited config?)", what);
        return 1;
    }
    return stage_bf16_allreduce(rt, &b->tpwire, rt->ctx.tp_comm, buf, n, what);
}
int stage_be_reduce_scatter(StageRt *rt, float *buf, int64_t n, const char *what) {
    StageBf16Wire *w = wire_of(rt);
    if (w) return stage_bf16_reduce_scatter(rt, w, buf, n, what);
    return rt_dp_reduce_scatter_f32(&rt->ctx, buf, (size_t)n, what);
}
int stage_be_allgather(StageRt *rt, const float *slice, float *full, int64_t n,
                       const char *what) {
    return rt_dp_allgather_f32(&rt->ctx, slice, full, (size_t)n, what);
}
void *stage_be_kernel_ctx(StageRt *rt) { return NULL; }
