/* Gradient synchronisation after a step's microbatches: the DP sum inside
 * each stage (over the ranks of equal TP rank: ctx.dp_comm), the sum of shared parameters' gradients over the stages that
 * hold them, and the global gradient norm over the whole model.  With
 * ZeRO (cfg.zero > 0) the DP sum is a reduce-scatter: each DP rank keeps
 * its flat slice of every gradient, the update runs on the slice, and the
 * updated slices are all-gathered into the parameters (docs/STAGES.md).
 *
 * The last stage scales its loss by local_rows / rows, so plain sums give
 * the single-process mean gradient everywhere. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_internal.h"

int stage_param_owner(const StageRt *rt, const StageParam *p) {
    if (p->shared_index < 0) return rt->cfg.stage;
    const StageShared *s = &rt->cfg.shared[p->shared_index];
    int lo = rt->cfg.stage;
    for (int i = 0; i < s->nstages; i++)
        if (s->stages[i] < lo) lo = s->stages[i];
    return lo;
}

/* One communicator per `shared` line, split in the plan-wide order of the
 * lines (identical on every stage), so every world rank takes part in each
 * MPI_Comm_split and ranks of stages not holding the parameter get
 * MPI_COMM_NULL. */
int stage_sync_setup(StageRt *rt) {
    int n = rt->cfg.nshared;
    rt->shared_comm = calloc((size_t)n + 1, sizeof *rt->shared_comm);
    for (int i = 0; i < n; i++) {
        const StageShared *s = &rt->cfg.shared[i];
        int holds = 0;
        for (int j = 0; j < s->nstages; j++) holds |= s->stages[j] == rt->cfg.stage;
        rt->shared_comm[i] = MPI_COMM_NULL;
        if (MPI_Comm_split(MPI_COMM_WORLD, holds ? 0 : MPI_UNDEFINED, rt->ctx.world_rank,
                           &rt->shared_comm[i]) != MPI_SUCCESS) {
            rt_log_error("MPI_Comm_split for shared parameter '%s' failed", s->name);
            return 1;
        }
        if (rt->shared_comm[i] != MPI_COMM_NULL)
            MPI_Comm_set_errhandler(rt->shared_comm[i], MPI_ERRORS_RETURN);
    }
    return 0;
}

void stage_sync_teardown(StageRt *rt) {
    for (int i = 0; rt->shared_comm && i < rt->cfg.nshared; i++)
        if (rt->shared_comm[i] != MPI_COMM_NULL) MPI_Comm_free(&rt->shared_comm[i]);
    free(rt->shared_comm);
    rt->shared_comm = NULL;
}

static float *arena_f32(StageRt *rt, int64_t off, int64_t n) {
    return STAGE_AT(&rt->arena, (size_t)off, (size_t)n * sizeof(float));
}

void stage_zero_range(const StageRt *rt, const StageParam *p, int64_t *start, int64_t *count) {
    if (!rt->cfg.zero) {
        *start = 0, *count = p->numel;
        return;
    }
    rt_row_split(p->numel, rt->ctx.dp_size, rt->ctx.dp_rank, start, count);
}

/* ZeRO: this rank's slice of the DP-summed gradient ends up in acc[0 ..
 * count), zero-padded to zlen (the update graph reads zlen elements).
 * Unshared parameters are reduce-scattered; a shared one was all-reduced
 * (its cross-stage sum needs the whole tensor, and the stages holding it
 * may split it differently), so its slice is moved down. */
static int zero_slice_grads(StageRt *rt) {
    StageConfig *c = &rt->cfg;
    for (int i = 0; i < c->nparams; i++) {
        StageParam *p = &c->params[i];
        int64_t start, count;
        stage_zero_range(rt, p, &start, &count);
        float *acc = arena_f32(rt, p->off_acc, p->numel);
        if (p->shared_index >= 0 && start > 0 && count > 0 &&
            stage_be_copy(rt, acc, acc + start, (size_t)count * sizeof(float)))
            return 1;
        if (p->zlen > count &&
            stage_be_zero(rt, acc + count, (size_t)(p->zlen - count) * sizeof(float)))
            return 1;
    }
    return 0;
}

int stage_zero_pre_update(StageRt *rt) {
    StageConfig *c = &rt->cfg;
    if (!c->zero) return 0;
    for (int i = 0; i < c->nparams; i++) {
        StageParam *p = &c->params[i];
        int64_t start, count;
        stage_zero_range(rt, p, &start, &count);
        float *zp = arena_f32(rt, p->off_zp, p->zlen);
        if (count > 0 && stage_be_copy(rt, zp, arena_f32(rt, p->off_param, p->numel) + start,
                                       (size_t)count * sizeof(float)))
            return 1;
        if (p->zlen > count && stage_be_zero(rt, zp + count, (size_t)(p->zlen - count) * 4))
            return 1;
    }
    return 0;
}

int stage_zero_post_update(StageRt *rt) {
    StageConfig *c = &rt->cfg;
    char what[512];
    if (!c->zero) return 0;
    for (int i = 0; i < c->nparams; i++) {
        StageParam *p = &c->params[i];
        snprintf(what, sizeof what, "ZeRO parameter all-gather of '%s' (stage %d)", p->name,
                 c->stage);
        if (rt_dp_allgather_f32(&rt->ctx, arena_f32(rt, p->off_zp, p->zlen),
                                arena_f32(rt, p->off_param, p->numel), (size_t)p->numel, what))
            return 1;
    }
    return 0;
}

int stage_sync_grads(StageRt *rt, double *norm) {
    StageConfig *c = &rt->cfg;
    char what[512];
    for (int i = 0; i < c->nparams; i++) {
        StageParam *p = &c->params[i];
        float *acc = arena_f32(rt, p->off_acc, p->numel);
        if (c->zero && p->shared_index < 0) { /* host arena (stage_main checks) */
            snprintf(what, sizeof what, "gradient reduce-scatter of '%s' (stage %d)", p->name,
                     c->stage);
            if (rt_dp_reduce_scatter_f32(&rt->ctx, acc, (size_t)p->numel, what)) return 1;
            continue;
        }
        snprintf(what, sizeof what, "gradient all-reduce of '%s' (stage %d)", p->name, c->stage);
        if (stage_be_allreduce(rt, -1, acc, p->numel, what))
            return 1;
    }
    /* Shared parameters: after the DP sum every rank of a stage holds its
     * stage's gradient; dp rank 0 alone contributes it (the others send
     * zeros), so the sum over the holders is exactly the sum of the
     * stages' gradients, with no 1/dp rescaling to round.  With TP the
     * TP ranks hold identical copies (a shared parameter is never
     * sharded: stage_config.c), so TP rank 0 alone contributes too. */
    for (int s = 0; s < c->nshared; s++) {
        if (rt->shared_comm[s] == MPI_COMM_NULL) continue;
        StageParam *p = NULL;
        for (int i = 0; i < c->nparams; i++)
            if (c->params[i].shared_index == s) p = &c->params[i];
        if (!p) {
            rt_log_error("shared parameter '%s' lists stage %d, which has no such param line",
                         c->shared[s].name, c->stage);
            return 1;
        }
        float *acc = arena_f32(rt, p->off_acc, p->numel);
        if ((rt->ctx.dp_rank != 0 || rt->ctx.tp_rank != 0) &&
            stage_be_zero(rt, acc, (size_t)p->numel * sizeof(float)))
            return 1;
        snprintf(what, sizeof what, "shared-gradient all-reduce of '%s' (stage %d)", p->name,
                 c->stage);
        if (stage_be_allreduce(rt, s, acc, p->numel, what))
            return 1;
    }
    /* Global norm: every parameter once (a shared one on its lowest
     * holding stage), dp rank 0 of each stage only; a TP-sharded one on
     * every TP rank (each holds a disjoint slice), a replicated one on TP
     * rank 0 only.  Replicated parameters' gradients are equal on all TP
     * ranks: they are computed from replicated values only (TpCopy's
     * gradient and TpAllReduce's output are summed over the group before
     * any replicated node reads them, and MPI's sum is the same on every
     * rank), so counting rank 0's is counting each once. */
    /* With ZeRO every DP rank holds a disjoint slice: all of them add
     * theirs, so the norm stays the whole model's. */
    if (c->zero && zero_slice_grads(rt)) return 1;
    double sq = 0;
    if (rt->ctx.dp_rank == 0 || c->zero)
        for (int i = 0; i < c->nparams; i++) {
            StageParam *p = &c->params[i];
            if (stage_param_owner(rt, p) != c->stage) continue;
            if (p->tpshard < 0 && rt->ctx.tp_rank != 0) continue;
            int64_t start, count;
            stage_zero_range(rt, p, &start, &count);
            double ps = 0; /* in double: millions of squares */
            if (stage_be_sumsq(rt, arena_f32(rt, p->off_acc, p->numel), count, &ps)) return 1;
            sq += ps;
        }
    if (rt_allreduce(&rt->ctx, MPI_COMM_WORLD, &sq, 1, MPI_DOUBLE, MPI_SUM,
                     "global gradient norm"))
        return 1;
    *norm = sqrt(sq);
    return 0;
}

int stage_sync_loss(StageRt *rt, double *loss) {
    double l = rt->step_loss;
    if (rt->cfg.stage != rt->cfg.nstages - 1) {
        *loss = 0;
        return 0;
    }
    if (rt_allreduce(&rt->ctx, rt->ctx.dp_comm, &l, 1, MPI_DOUBLE, MPI_SUM, "step loss sum"))
        return 1;
    *loss = l / (double)rt->cfg.accum;
    return 0;
}
