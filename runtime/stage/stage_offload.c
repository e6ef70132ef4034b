/* CPU offload of a stage's parameters and optimizer state (Zorse, seed 000
 * §4.1: "parameters and optimizer states ... offloaded to CPU memory and
 * loaded to the GPU per ministage"; issue 18 item 4).  One stage binary is
 * one ministage of the plan, so the stage's whole state streams at once:
 *
 *   step start      store -> arena: parameters      (forward / backward read them)
 *   before update   store -> arena: optimizer state (m, v; the update reads them)
 *   after update    arena -> store: parameters and state, then the arena's
 *                   regions are poisoned until the next step
 *
 * The store is the only copy that outlives a step: checkpoints are written
 * from it and loaded into it (stage_ckpt.c).  On the host backend the copy
 * is a memcpy through a separate malloc'd buffer, with the bytes counted as
 * a device backend's host transfers would be (HETRT_VERBOSE prints them). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_internal.h"

/* The arena offset of p's part k (-1 param, 0 m, 1 v) and its elements;
 * -1 when p has no such state. */
static int64_t arena_off(const StageConfig *c, const StageParam *p, int k, int64_t *n) {
    if (k < 0) {
        *n = p->numel;
        return p->off_param;
    }
    *n = p->zlen;
    if (k == 1 && c->sgd) return -1;
    return k ? p->off_v : p->off_m;
}

float *stage_offload_at(const StageRt *rt, const StageParam *p, int k) {
    if (!rt->off.store) return NULL;
    int64_t e = rt->off.at[3 * (p - rt->cfg.params) + k + 1];
    return e < 0 ? NULL : rt->off.store + e;
}

/* store <-> arena for the parts in what; to_arena picks the direction. */
static int move(StageRt *rt, int what, int to_arena) {
    const StageConfig *c = &rt->cfg;
    double t0 = stage_now();
    for (int i = 0; i < c->nparams; i++) {
        const StageParam *p = &c->params[i];
        for (int k = -1; k < 2; k++) {
            if (!(what & (k < 0 ? STAGE_OFF_PARAMS : STAGE_OFF_OPT))) continue;
            int64_t n, off = arena_off(c, p, k, &n);
            float *h = stage_offload_at(rt, p, k);
            if (off < 0 || !h) continue;
            size_t nb = (size_t)n * sizeof(float);
            void *a = STAGE_AT(&rt->arena, (size_t)off, nb);
            int rc = to_arena ? stage_be_put(rt, a, h, nb) : stage_be_get(rt, h, a, nb);
            if (rc) {
                rt_log_error("stage %d: offload: copying '%s' %s the host store failed", c->stage,
                             p->name, to_arena ? "from" : "to");
                return -1;
            }
            *(to_arena ? &rt->off.in_bytes : &rt->off.out_bytes) += (int64_t)nb;
        }
    }
    rt->off.copy_s += stage_now() - t0;
    return 0;
}

int stage_offload_evict(StageRt *rt, int what) {
    const StageConfig *c = &rt->cfg;
    if (!rt->off.store) return 0;
    for (int i = 0; i < c->nparams; i++)
        for (int k = -1; k < 2; k++) {
            if (!(what & (k < 0 ? STAGE_OFF_PARAMS : STAGE_OFF_OPT))) continue;
            int64_t n, off = arena_off(c, &c->params[i], k, &n);
            if (off < 0) continue;
            /* all-ones bytes are a NaN f32: a read the streaming missed
             * turns the loss into NaN instead of silently using stale data */
            size_t nb = (size_t)n * sizeof(float);
            memset(STAGE_AT(&rt->arena, (size_t)off, nb), 0xff, nb);
        }
    return 0;
}

int stage_offload_in(StageRt *rt, int what) {
    return rt->off.store ? move(rt, what, 1) : 0;
}

int stage_offload_out(StageRt *rt) {
    if (!rt->off.store) return 0;
    if (move(rt, STAGE_OFF_PARAMS | STAGE_OFF_OPT, 0)) return -1;
    return stage_offload_evict(rt, STAGE_OFF_PARAMS | STAGE_OFF_OPT);
}

int stage_offload_setup(StageRt *rt) {
    const StageConfig *c = &rt->cfg;
    StageOffload *o = &rt->off;
    if (!c->offload) return 0;
    /* the poison is a host memset: a device arena needs its own path (the
     * compiler refuses offload with --backend=cuda) */
    if (!stage_be_is_host()) {
        rt_log_error("stage %d: offload 1 runs on the host backend only, this is the %s backend",
                     c->stage, stage_be_name());
        return -1;
    }
    o->at = malloc((size_t)(3 * c->nparams + 1) * sizeof *o->at);
    if (!o->at) goto oom;
    int64_t e = 0;
    for (int i = 0; i < c->nparams; i++)
        for (int k = -1; k < 2; k++) {
            int64_t n, off = arena_off(c, &c->params[i], k, &n);
            o->at[3 * i + k + 1] = off < 0 ? -1 : e;
            if (off >= 0) *(k < 0 ? &o->param_bytes : &o->opt_bytes) += n * 4;
            e += off < 0 ? 0 : n;
        }
    /* apart from the arena: its own allocation, as host memory beside a
     * device arena would be */
    o->store = calloc((size_t)e + 1, sizeof(float));
    if (!o->store) goto oom;
    /* what the arena holds now (zeroed state, whatever `init` wrote) moves
     * to the store; checkpoint loads then write the store */
    if (move(rt, STAGE_OFF_PARAMS | STAGE_OFF_OPT, 0) ||
        stage_offload_evict(rt, STAGE_OFF_PARAMS | STAGE_OFF_OPT))
        return -1;
    o->in_bytes = o->out_bytes = 0;
    o->copy_s = 0;
    if (getenv("HETRT_VERBOSE") && rt->ctx.dp_rank == 0 && rt->ctx.tp_rank == 0) {
        fprintf(stderr, "[hetrt] stage %d offload: host store %lld bytes (parameters %lld, "
                "optimizer state %lld) apart from the %lld-byte arena; per step %lld bytes "
                "in, %lld out\n", c->stage, (long long)(o->param_bytes + o->opt_bytes),
                (long long)o->param_bytes, (long long)o->opt_bytes, (long long)rt->arena.size,
                (long long)(o->param_bytes + o->opt_bytes),
                (long long)(o->param_bytes + o->opt_bytes));
        fflush(stderr);
    }
    return 0;
oom:
    rt_log_error("stage %d: offload: out of host memory for the store", c->stage);
    return -1;
}

void stage_offload_step_done(StageRt *rt, int64_t step) {
    StageOffload *o = &rt->off;
    if (!o->store) return;
    if (getenv("HETRT_VERBOSE") && rt->ctx.dp_rank == 0 && rt->ctx.tp_rank == 0) {
        fprintf(stderr, "[hetrt] stage %d offload step %lld: %lld bytes in, %lld bytes out "
                "(%.3f ms)\n", rt->cfg.stage, (long long)step, (long long)o->in_bytes,
                (long long)o->out_bytes, 1e3 * o->copy_s);
        fflush(stderr);
    }
    o->in_bytes = o->out_bytes = 0;
    o->copy_s = 0;
}

void stage_offload_free(StageRt *rt) {
    free(rt->off.store);
    free(rt->off.at);
    rt->off.store = NULL;
    rt->off.at = NULL;
}
