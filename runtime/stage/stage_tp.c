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

/* dst = op(src) over the TP group */
static int32_t tp_allreduce(void *dst, const void *src, int64_t n, StageRedOp op,
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
    return stage_be_tp_allreduce(rt, dst, n, op, what);
}

int32_t hetrt_tp_allreduce(void *dst, const void *src, int64_t n) {
    return tp_allreduce(dst, src, n, STAGE_RED_SUM, "hetrt_tp_allreduce");
}

/* the vocab-parallel loss's row max (TpAllReduce op "max",
 * passes/tp_shard_vocab.c): exact in any order, so every rank gets the
 * same shift bit for bit */
int32_t hetrt_tp_allreduce_max(void *dst, const void *src, int64_t n) {
    return tp_allreduce(dst, src, n, STAGE_RED_MAX, "hetrt_tp_allreduce_max");
}

/* ------------------------------------------------------------ rank's graph */

/* The embedded graphs are TP rank 0's; the only rank-dependent node
 * attribute is vocab_start (the vocab-parallel Embedding / EmbeddingGrad /
 * loss ops, passes/tp_shard_vocab.c): rank r's vocabulary slice is rank
 * 0's shifted by r x the local extent, as the `tpshard` ranges are. */
int stage_tp_rank_graph(IrGraph *g, int tp_rank, char *err, size_t errlen) {
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        const IrAttr *a = ir_node_attr(n, "vocab_start");
        if (!a || !tp_rank) continue;
        const IrValue *x = n->nin > 0 ? n->in[0] : NULL;
        int table = n->op == IR_OP_EMBEDDING || n->op == IR_OP_EMBEDDING_GRAD;
        int64_t local = !x || x->shape.rank < 1 ? 0
                        : table ? x->shape.dims[0] : x->shape.dims[x->shape.rank - 1];
        int64_t start = a->i + (int64_t)tp_rank * local;
        int64_t size = ir_attr_int(n, "vocab_size", -1);
        if (local <= 0 || size < 0 || start + local > size) {
            snprintf(err, errlen, "node '%s' (%s): TP rank %d's vocabulary slice [%lld, +%lld) "
                     "passes vocab_size %lld", n->name, ir_op_name(n->op), tp_rank,
                     (long long)start, (long long)local, (long long)size);
            return -1;
        }
        ir_node_set_int(n, "vocab_start", start);
    }
    return 0;
}
