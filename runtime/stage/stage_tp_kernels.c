/* The vocabulary-parallel kernels as direct calls of compiled stage code
 * (codegen/lower_node.c): one binary serves every TP rank of its stage and
 * is compiled from TP rank 0's graphs, so the rows / columns a rank owns
 * start at the compiled vocab_start (rank 0's) + tp_rank x the local extent
 * -- the shift the node interpreter (interp/interp_stage.c) applies to its
 * parsed graph.  These entries add it and call the host kernel (hk_train.h).  Host backend only:
 * the CUDA backend keeps hetrt_node for every node. */
#include "hk.h"
#include "hk_train.h"
#include "stage_internal.h"

/* rank's first vocabulary row: start0 + tp_rank x local, checked like
 * the interpreter; -1 when it does not fit vocab_size */
static int64_t rank_start(const char *fn, int64_t start0, int64_t local, int64_t vfull) {
    StageRt *rt = hetrt_stage_rt;
    if (!rt) {
        rt_log_error("%s called outside hetrt_stage_main", fn);
        return -1;
    }
    int64_t st = start0 + (int64_t)rt->ctx.tp_rank * local;
    if (local <= 0 || st < 0 || st + local > vfull) {
        rt_log_error("%s: TP rank %d's vocabulary slice [%lld, +%lld) passes vocab_size %lld", fn,
                     rt->ctx.tp_rank, (long long)st, (long long)local, (long long)vfull);
        return -1;
    }
    return st;
}

static int32_t kfail(const char *fn, int rc, const char *e) {
    if (rc) rt_log_error("%s: %s", fn, e);
    return rc != 0;
}

int32_t hetrt_tp_embedding(int32_t idt, const void *ids, int64_t n, const float *table,
                           int64_t start0, int64_t V, int64_t vfull, int64_t D, float *y) {
    char e[HK_ERRLEN] = "";
    int64_t st = rank_start("hetrt_tp_embedding", start0, V, vfull);
    if (st < 0) return 1;
    return kfail("hetrt_tp_embedding",
                 hk_embedding_shard_f32((HkDType)idt, ids, n, table, st, V, vfull, D, y, e), e);
}

int32_t hetrt_tp_embedding_grad(int32_t idt, const void *ids, int64_t n, const float *dy,
                                int64_t start0, int64_t V, int64_t vfull, int64_t D,
                                float *dtable) {
    char e[HK_ERRLEN] = "";
    int64_t st = rank_start("hetrt_tp_embedding_grad", start0, V, vfull);
    if (st < 0) return 1;
    return kfail("hetrt_tp_embedding_grad",
                 hk_embedding_backward_shard_f32((HkDType)idt, ids, n, dy, st, V, vfull, D, dtable,
                                                 0, e), e);
}

int32_t hetrt_tp_vocab_ce_stats(const float *logits, int32_t tdt, const void *targets,
                                const float *rowmax, int64_t N, int64_t Vl, int64_t start0,
                                int64_t vfull, int32_t use_ignore, int64_t ignore_index,
                                float *stats) {
    char e[HK_ERRLEN] = "";
    int64_t st = rank_start("hetrt_tp_vocab_ce_stats", start0, Vl, vfull);
    if (st < 0) return 1;
    return kfail("hetrt_tp_vocab_ce_stats",
                 hk_vocab_ce_stats_f32(logits, (HkDType)tdt, targets, rowmax, N, Vl, st, vfull,
                                       use_ignore, ignore_index, stats, e), e);
}

int32_t hetrt_tp_vocab_ce_bwd(const float *logits, int32_t tdt, const void *targets,
                              const float *rowmax, const float *stats, int64_t N, int64_t Vl,
                              int64_t start0, int64_t vfull, int32_t use_ignore,
                              int64_t ignore_index, const float *dloss, float *dlogits) {
    char e[HK_ERRLEN] = "";
    int64_t st = rank_start("hetrt_tp_vocab_ce_bwd", start0, Vl, vfull);
    if (st < 0) return 1;
    return kfail("hetrt_tp_vocab_ce_bwd",
                 hk_vocab_ce_bwd_f32(logits, (HkDType)tdt, targets, rowmax, stats, N, Vl, st,
                                     vfull, use_ignore, ignore_index, *dloss, dlogits, e), e);
}
