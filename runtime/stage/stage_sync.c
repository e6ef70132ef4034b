/* Gradient synchronisation after a step's microbatches: the DP sum inside
 * each stage (over the ranks of equal TP rank: ctx.dp_comm), the sum of
 * shared parameters' gradients over the stages that hold them, and the
 * global gradient norm over the whole model.  With
 * ZeRO (cfg.zero > 0) the DP sum is a reduce-scatter: each DP rank keeps
 * its flat slice of every gradient, the update runs on the slice, and the
 * updated slices are all-gathered into the parameters (docs/STAGES.md).
 * ZeRO-2 (cfg.zero == 2) moves the reduce-scatter into the backward: each
 * microbatch's whole gradient is reduce-scattered as soon as the backward
 * has it (hetrt_accum_scatter) and only this rank's shard is accumulated,
 * so the accumulators are 1/dp of the parameters (memplan.h); the step's
 * sync then has no DP sum left to do, only the shared-parameter sum.
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

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* 1 if shared lines a and b name the same stages (they were written in
 * one order: compile_emit.c lists a parameter's holders ascending). */
static int same_holders(const StageShared *a, const StageShared *b) {
    if (a->nstages != b->nstages) return 0;
    for (int j = 0; j < a->nstages; j++)
        if (a->stages[j] != b->stages[j]) return 0;
    return 1;
}

/* One communicator per distinct holder set of the `shared` lines, split in
 * the plan-wide order of the lines (identical on every stage), so every
 * world rank takes part in each MPI_Comm_split and ranks of stages not
 * holding the parameter get MPI_COMM_NULL.  A line whose stages an earlier
 * line names uses that line's communicator: with several pipelines every
 * parameter is shared, and one communicator per parameter would be
 * hundreds where the holder sets (AutoHet's layer-wise groups) are a few. */
int stage_sync_setup(StageRt *rt) {
    int n = rt->cfg.nshared;
    rt->shared_comm = calloc((size_t)n + 1, sizeof *rt->shared_comm);
    rt->shared_first = calloc((size_t)n + 1, sizeof *rt->shared_first);
    if (!rt->shared_comm || !rt->shared_first) {
        rt_log_error("stage %d: out of memory", rt->cfg.stage);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        const StageShared *s = &rt->cfg.shared[i];
        int holds = 0, same = -1;
        for (int j = 0; j < i && same < 0; j++)
            if (same_holders(&rt->cfg.shared[j], s)) same = j;
        rt->shared_first[i] = same >= 0 ? same : i;
        if (same >= 0) {
            rt->shared_comm[i] = rt->shared_comm[same];
            continue;
        }
        for (int j = 0; j < s->nstages; j++) holds |= s->stages[j] == rt->cfg.stage;
        /* a one-process run (solo) gets MPI_COMM_NULL: the holders are
         * this process, whose gradient is already the sum over them */
        char what[512];
        snprintf(what, sizeof what, "the group of the stages holding shared parameter '%s'",
                 s->name);
        if (rt_comm_split(&rt->ctx, holds ? 0 : MPI_UNDEFINED, rt->ctx.world_rank,
                          &rt->shared_comm[i], what))
            return 1;
    }
    /* Where the cross-stage sum of each shared parameter is cut: at every
     * DP range boundary of the holders keeping a ZeRO-2 shard.  A stage's
     * config knows only its own zero level, so the holders exchange theirs;
     * every holder then cuts the sum into the same pieces (shared_sum). */
    int ns = rt->cfg.nstages;
    rt->shared_cut = calloc((size_t)n + 1, sizeof *rt->shared_cut);
    rt->shared_ncut = calloc((size_t)n + 1, sizeof *rt->shared_ncut);
    int *z2 = calloc((size_t)ns + 1, sizeof *z2);
    if (!rt->shared_cut || !rt->shared_ncut || !z2) {
        free(z2);
        rt_log_error("stage %d: out of memory", rt->cfg.stage);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        if (rt->shared_comm[i] == MPI_COMM_NULL) continue;
        const StageShared *sh = &rt->cfg.shared[i];
        const StageParam *p = NULL;
        for (int j = 0; j < rt->cfg.nparams; j++)
            if (rt->cfg.params[j].shared_index == i) p = &rt->cfg.params[j];
        memset(z2, 0, sizeof *z2 * (size_t)ns);
        z2[rt->cfg.stage] = rt->cfg.zero >= 2;
        char what[512];
        snprintf(what, sizeof what, "ZeRO levels of the stages holding '%s'", sh->name);
        if (rt_allreduce(&rt->ctx, rt->shared_comm[i], z2, ns, MPI_INT, MPI_MAX, what)) {
            free(z2);
            return 1;
        }
        if (!p) continue; /* stage_sync_grads reports the missing param line */
        int ncut = 2;
        for (int j = 0; j < sh->nstages; j++)
            if (z2[sh->stages[j]]) ncut += rt->cfg.dp[sh->stages[j]];
        int64_t *cut = rt->shared_cut[i] = calloc((size_t)ncut, sizeof *cut);
        if (!cut) {
            free(z2);
            rt_log_error("stage %d: out of memory", rt->cfg.stage);
            return 1;
        }
        int k = 0;
        cut[k++] = 0, cut[k++] = p->numel;
        for (int j = 0; j < sh->nstages; j++) {
            int h = sh->stages[j];
            for (int r = 0; z2[h] && r < rt->cfg.dp[h]; r++) {
                int64_t st, ct;
                rt_row_split(p->numel, rt->cfg.dp[h], r, &st, &ct);
                cut[k++] = st;
            }
        }
        qsort(cut, (size_t)k, sizeof *cut, cmp_i64);
        int m = 0;
        for (int j = 0; j < k; j++)
            if (!m || cut[j] != cut[m - 1]) cut[m++] = cut[j];
        rt->shared_ncut[i] = m;
    }
    free(z2);
    return 0;
}

void stage_sync_teardown(StageRt *rt) {
    /* a holder set's communicator is freed once, at its first line */
    for (int i = 0; rt->shared_comm && rt->shared_first && i < rt->cfg.nshared; i++)
        if (rt->shared_first[i] == i && rt->shared_comm[i] != MPI_COMM_NULL)
            MPI_Comm_free(&rt->shared_comm[i]);
    free(rt->shared_comm);
    free(rt->shared_first);
    rt->shared_comm = NULL;
    rt->shared_first = NULL;
    for (int i = 0; rt->shared_cut && i < rt->cfg.nshared; i++) free(rt->shared_cut[i]);
    free(rt->shared_cut);
    free(rt->shared_ncut);
    rt->shared_cut = NULL;
    rt->shared_ncut = NULL;
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

int64_t stage_acc_len(const StageConfig *c, const StageParam *p) {
    return c->zero >= 2 ? p->zlen : p->numel;
}

/* ZeRO-2's gradient accumulation (stage_abi.h): the DP sum of this
 * microbatch's gradient, reduce-scattered in place in backward scratch,
 * and this rank's range added to its shard.  Summing per microbatch
 * instead of once per step changes only the order of the f32 additions. */
int32_t hetrt_accum_scatter(int32_t param, void *acc, void *g, int64_t n) {
    StageRt *rt = hetrt_stage_rt;
    if (!rt) {
        rt_log_error("hetrt_accum_scatter called outside hetrt_stage_main");
        return 1;
    }
    StageConfig *c = &rt->cfg;
    if (param < 0 || param >= c->nparams || c->zero < 2) {
        rt_log_error("stage %d: hetrt_accum_scatter(param %d) needs zero 2 and a param record "
                     "(config: zero %d, %d params)",
                     c->stage, param, c->zero, c->nparams);
        return 1;
    }
    StageParam *p = &c->params[param];
    if (n != p->numel || acc != (void *)arena_f32(rt, p->off_acc, p->zlen) || !g) {
        rt_log_error("stage %d: hetrt_accum_scatter of '%s': %lld elements / accumulator %p, "
                     "the config says %lld at arena offset %lld",
                     c->stage, p->name, (long long)n, acc, (long long)p->numel,
                     (long long)p->off_acc);
        return 1;
    }
    int64_t start, count;
    stage_zero_range(rt, p, &start, &count);
    char what[512];
    snprintf(what, sizeof what, "ZeRO-2 gradient reduce-scatter of '%s' (stage %d, microbatch %d)",
             p->name, c->stage, rt->micro);
    if (stage_be_reduce_scatter(rt, g, n, what)) return 1;
    return count > 0 ? stage_be_axpy(rt, acc, g, count, 1.0f / (float)c->accum) : 0;
}

/* ZeRO: this rank's slice of the DP-summed gradient ends up in acc[0 ..
 * count), zero-padded to zlen (the update graph reads zlen elements).
 * ZeRO-1: unshared parameters are reduce-scattered; a shared one was
 * all-reduced (its cross-stage sum needs the whole tensor, and the stages
 * holding it may split it differently), so its slice is moved down.
 * ZeRO-2: the accumulator already is the slice. */
static int zero_slice_grads(StageRt *rt) {
    StageConfig *c = &rt->cfg;
    for (int i = 0; i < c->nparams; i++) {
        StageParam *p = &c->params[i];
        int64_t start, count;
        stage_zero_range(rt, p, &start, &count);
        float *acc = arena_f32(rt, p->off_acc, stage_acc_len(c, p));
        if (c->zero < 2 && p->shared_index >= 0 && start > 0 && count > 0 &&
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
        if (stage_be_allgather(rt, arena_f32(rt, p->off_zp, p->zlen),
                               arena_f32(rt, p->off_param, p->numel), p->numel, what))
            return 1;
    }
    return 0;
}

/* The sum of shared parameter s's gradient over the stages holding it (p:
 * this stage's record), after each stage's DP sum.  dp rank 0 of a stage
 * with whole accumulators contributes its gradient (its other ranks add
 * zeros), so the result is exactly the sum of the stages' gradients with
 * no 1/dp rescaling to round; with TP, TP rank 0 only (a shared parameter
 * is never TP-sharded: stage_config.c, so the TP ranks' copies are equal).
 * A ZeRO-2 holder has no whole gradient: each of its DP ranks contributes
 * its shard in its own range.  So the all-reduce runs piece by piece, cut
 * at every ZeRO-2 holder's range boundaries (the same cuts on every
 * holder: rt->shared_cut, from stage_sync_setup): a piece inside this rank's accumulator is summed
 * in place, one outside a ZeRO-2 rank's shard goes through the rank's
 * parameter slice buffer (free until stage_zero_pre_update, and at least
 * as long as any piece: pieces lie inside one of this rank's ranges) and
 * is dropped.  Without ZeRO-2 holders that is one piece, the whole tensor. */
static int shared_sum(StageRt *rt, int s, StageParam *p) {
    StageConfig *c = &rt->cfg;
    const int64_t *cut = rt->shared_cut[s];
    int k = rt->shared_ncut[s];
    int sharded = c->zero >= 2;
    int64_t start = 0, count = p->numel;
    if (sharded) stage_zero_range(rt, p, &start, &count);
    float *acc = arena_f32(rt, p->off_acc, stage_acc_len(c, p));
    int contrib = rt->ctx.tp_rank == 0 && (sharded || rt->ctx.dp_rank == 0);
    if (!contrib && count > 0 && stage_be_zero(rt, acc, (size_t)count * sizeof(float)))
        return 1;
    char what[512];
    snprintf(what, sizeof what, "shared-gradient all-reduce of '%s' (stage %d)", p->name,
             c->stage);
    int rc = 0;
    for (int i = 0; i + 1 < k && !rc; i++) {
        int64_t a = cut[i], b = cut[i + 1];
        float *buf = acc + (a - start);
        if (a < start || b > start + count) { /* another rank's piece */
            if (!sharded || b - a > p->zlen) {
                rt_log_error("stage %d: shared parameter '%s': piece [%lld, %lld) outside this "
                             "rank's range [%lld, +%lld)", c->stage, p->name, (long long)a,
                             (long long)b, (long long)start, (long long)count);
                rc = 1;
                break;
            }
            buf = arena_f32(rt, p->off_zp, p->zlen);
            if (stage_be_zero(rt, buf, (size_t)(b - a) * sizeof(float))) rc = 1;
        }
        if (!rc) rc = stage_be_allreduce(rt, s, buf, b - a, what);
    }
    return rc;
}

int stage_sync_grads(StageRt *rt, double *norm) {
    StageConfig *c = &rt->cfg;
    char what[512];
    for (int i = 0; i < c->nparams && c->zero < 2; i++) { /* ZeRO-2: summed in the backward */
        StageParam *p = &c->params[i];
        float *acc = arena_f32(rt, p->off_acc, p->numel);
        if (c->zero && p->shared_index < 0) { /* the backend's: MPI or NCCL */
            snprintf(what, sizeof what, "gradient reduce-scatter of '%s' (stage %d)", p->name,
                     c->stage);
            if (stage_be_reduce_scatter(rt, acc, p->numel, what)) return 1;
            continue;
        }
        snprintf(what, sizeof what, "gradient all-reduce of '%s' (stage %d)", p->name, c->stage);
        if (stage_be_allreduce(rt, -1, acc, p->numel, what))
            return 1;
    }
    /* Shared parameters: after the DP sum every rank of a stage holds its
     * stage's gradient (or, ZeRO-2, its shard): shared_sum. */
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
        if (shared_sum(rt, s, p)) return 1;
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
            if (stage_be_sumsq(rt, arena_f32(rt, p->off_acc, stage_acc_len(c, p)), count, &ps))
                return 1;
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
    if (rt->cfg.npipes > 1) {
        /* several pipelines: each last stage's ranks hold their rows' share
         * of the loss (scaled by their rows over the whole microbatch), the
         * others nothing: one sum over the world is the step loss */
        if (!stage_pipe_last(&rt->cfg, rt->cfg.stage) || rt->ctx.tp_rank != 0) l = 0;
        if (rt_allreduce(&rt->ctx, MPI_COMM_WORLD, &l, 1, MPI_DOUBLE, MPI_SUM,
                         "step loss sum over the pipelines"))
            return 1;
        *loss = l / (double)rt->cfg.accum;
        return 0;
    }
    if (rt->cfg.stage != rt->cfg.nstages - 1) {
        *loss = 0;
        return 0;
    }
    if (rt_allreduce(&rt->ctx, rt->ctx.dp_comm, &l, 1, MPI_DOUBLE, MPI_SUM, "step loss sum"))
        return 1;
    *loss = l / (double)rt->cfg.accum;
    return 0;
}
