/* hetrt_tp_allreduce / hetrt_tp_allreduce_max (issue 9; docs/STAGE_ABI.md):
 * the sum (max) over the stage's TP group that lower_stage emits for every
 * TpAllReduce node (attr op "sum" / "max").
 *
 * One stage binary serves every TP rank of its stage: the graphs of all TP
 * ranks have the same structure (passes/tp_shard.h), only the parameter
 * slices differ, and those the runtime picks by ctx.tp_rank when it loads
 * parameters (stage_ckpt.c).  The `tp` / `tpshard` records are parsed in
 * stage_config.c.  The reduction itself is the backend's
 * (stage_be_tp_allreduce): MPI on the host, NCCL on the CUDA backend
 * (runtime/cuda/stage_coll_cuda.c). */
#include <stdio.h>
#include <string.h>

#include "stage_internal.h"

/* ------------------------------------------------------------ all-reduce */

/* the MPI reduction of each StageRedOp (stage_internal.h; MPI_Op handles
 * are not compile-time constants everywhere, hence a switch, not a table) */
MPI_Op stage_red_mpi(StageRedOp op) {
    switch (op) {
    case STAGE_RED_MAX: return MPI_MAX;
    case STAGE_RED_SUM:
    case STAGE_RED_COUNT: break;
    }
    return MPI_SUM;
}

/* dst = op(src) over the TP group; bf16: the sum over a bf16 wire */
static int32_t tp_allreduce(void *dst, const void *src, int64_t n, StageRedOp op, int bf16,
                            const char *fn) {
    StageRt *rt = hetrt_stage_rt;
    if (!rt) {
        rt_log_error("%s called outside hetrt_stage_main", fn);
        return 1;
    }
    if (n < 0) return 1;
    size_t nb = (size_t)n * sizeof(float);
    char what[160];
    snprintf(what, sizeof what, "TP all-reduce (%s) of %lld floats (stage %d, tp rank %d, step "
             "%lld, microbatch %d)", op == STAGE_RED_MAX ? "max" : "sum", (long long)n,
             rt->cfg.stage, rt->ctx.tp_rank, (long long)rt->step + 1, rt->micro);
    if (dst != src && stage_be_copy(rt, dst, src, nb)) return 1;
    if (rt->ctx.tp_size <= 1) return 0;
    if (bf16) return stage_be_tp_allreduce_bf16(rt, dst, n, what);
    return stage_be_tp_allreduce(rt, dst, n, op, what);
}

int32_t hetrt_tp_allreduce(void *dst, const void *src, int64_t n) {
    return tp_allreduce(dst, src, n, STAGE_RED_SUM, 0, "hetrt_tp_allreduce");
}

/* --tp-reduce-dtype bf16: the activation sums (row-parallel outputs, the
 * vocab-parallel embedding's, column-parallel input gradients) rounded to
 * bf16, summed pairwise in fp32 and rounded again, as NCCL's bf16
 * all-reduce does; the same bits on every TP rank (stage_bf16_wire.c) */
int32_t hetrt_tp_allreduce_bf16(void *dst, const void *src, int64_t n) {
    return tp_allreduce(dst, src, n, STAGE_RED_SUM, 1, "hetrt_tp_allreduce_bf16");
}

/* the vocab-parallel loss's row max (TpAllReduce op "max",
 * passes/tp_shard_vocab.c): exact in any order, so every rank gets the
 * same shift bit for bit */
int32_t hetrt_tp_allreduce_max(void *dst, const void *src, int64_t n) {
    return tp_allreduce(dst, src, n, STAGE_RED_MAX, 0, "hetrt_tp_allreduce_max");
}
