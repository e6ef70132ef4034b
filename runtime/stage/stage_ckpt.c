/* Stage checkpoints in the runtime's layer format (docs/RUNTIME.md):
 * layer file L (1..layers) holds the parameters whose PartParam layer is L
 * and their optimizer states ("opt/m/P", "opt/v/P" or "opt/buf/P"); layer
 * file 0 holds the runtime's own state ("step", i64).  A shared parameter
 * is written by the lowest stage holding it, and only dp rank 0 of a stage
 * writes (its DP replicas are identical) -- its TP rank 0, after gathering
 * TP-sharded tensors, which are stored unsharded; with ZeRO the DP group
 * all-gathers each optimizer state first and loading keeps this rank's
 * slice, so states are stored whole too.  Every layer gets a file, even
 * one without parameters, so the manifest always lists 0..layers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_internal.h"

/* The parameter's shape as its config record gives it (`shape`; an older
 * compiler's record without one: 1-D numel, as before when the graphs
 * lacked it). */
static int param_shape(const StageRt *rt, const StageParam *p, int64_t *shape) {
    if (p->rank >= 0) {
        for (int d = 0; d < p->rank; d++) shape[d] = p->shape[d];
        return p->rank;
    }
    shape[0] = p->numel;
    return 1;
}

/* ------------------------------------------------------------ TP slicing
 * A TP-sharded parameter (a `tpshard` record) is stored unsharded: loading
 * slices this rank's part out of the full tensor, saving gathers the TP
 * ranks' parts back (rank order, the same ranges), so a checkpoint written
 * under one TP degree resumes under any other. */

int stage_tp_geometry(const StageTpShard *t, const int64_t *local_shape, int ndim,
                      int64_t *outer, int64_t *inner, int64_t *local_dim) {
    int64_t want = 0;
    for (int k = 0; k < t->nranges; k++) want += t->len[k];
    if (t->axis >= ndim || local_shape[t->axis] != want) return -1;
    *outer = *inner = 1;
    for (int d = 0; d < t->axis; d++) *outer *= local_shape[d];
    for (int d = t->axis + 1; d < ndim; d++) *inner *= local_shape[d];
    *local_dim = want;
    return 0;
}

/* Walk the rank's ranges: local [lo, lo + len) <-> full [start + rank len,
 * + len) along the axis, for every outer index.  Bytes, not floats: a
 * loaded checkpoint tensor need not be 4-byte aligned. */
static void tp_copy(const StageTpShard *t, int rank, unsigned char *full, unsigned char *local,
                    int64_t outer, int64_t inner, int to_full) {
    int64_t ldim = 0, es = (int64_t)sizeof(float);
    for (int k = 0; k < t->nranges; k++) ldim += t->len[k];
    for (int64_t o = 0; o < outer; o++) {
        int64_t lo = 0;
        for (int k = 0; k < t->nranges; k++) {
            unsigned char *l = local + (o * ldim + lo) * inner * es;
            unsigned char *f = full + (o * t->full + t->start[k] + (int64_t)rank * t->len[k]) * inner * es;
            size_t nb = (size_t)(t->len[k] * inner * es);
            if (to_full) memcpy(f, l, nb);
            else memcpy(l, f, nb);
            lo += t->len[k];
        }
    }
}

void stage_tp_slice(const StageTpShard *t, int rank, const float *full, float *local,
                    int64_t outer, int64_t inner) {
    tp_copy(t, rank, (unsigned char *)full, (unsigned char *)local, outer, inner, 0);
}

void stage_tp_place(const StageTpShard *t, int rank, const float *local, float *full,
                    int64_t outer, int64_t inner) {
    tp_copy(t, rank, (unsigned char *)full, (unsigned char *)local, outer, inner, 1);
}

static const char *state_kind(const StageRt *rt, int k) {
    return k == 0 ? (rt->cfg.sgd ? "buf" : "m") : "v";
}

/* dst <- src: into the arena (the backend's copy), or host memory */
static int put(StageRt *rt, void *dst, const void *src, size_t n, int host) {
    if (!host) return stage_be_put(rt, dst, src, n);
    if (n) memcpy(dst, src, n);
    return 0;
}

/* Copy one tensor out of a loaded layer, checking dtype and size against
 * the parameter (errors name tensor and file).  A TP-sharded parameter's
 * tensor is the unsharded one: this rank's slice goes into the arena (or
 * into host memory at dst when host). */
static int load_one(StageRt *rt, const RtCkptLayer *l, const char *path, const char *name,
                    const StageParam *p, float *dst, int host) {
    const RtCkptLoaded *t = rt_ckpt_find(l, name);
    int64_t shape[RT_CKPT_MAX_DIMS];
    int nd = param_shape(rt, p, shape);
    int64_t want = p->numel, outer = 1, inner = 1, ldim = 1;
    const StageTpShard *ts = p->tpshard >= 0 ? &rt->cfg.tpshards[p->tpshard] : NULL;
    if (!t) {
        rt_log_error("checkpoint %s/layer_%05d.bin: no tensor '%s' (stage %d needs it)", path,
                     l->layer, name, rt->cfg.stage);
        return 1;
    }
    if (ts) {
        if (stage_tp_geometry(ts, shape, nd, &outer, &inner, &ldim)) {
            rt_log_error("param '%s': its shape does not match its tpshard record (axis %d)",
                         p->name, ts->axis);
            return 1;
        }
        shape[ts->axis] = ts->full;
        want = outer * ts->full * inner;
    }
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    int same = t->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = t->shape[d] == shape[d];
    if (t->dtype != RT_F32 || n != want || ((nd > 1 || ts) && !same)) {
        rt_log_error("checkpoint %s/layer_%05d.bin: tensor '%s' is %s with %lld elements (rank %d); "
                     "stage %d expects f32 with %lld elements (rank %d%s)",
                     path, l->layer, name, rt_dtype_name(t->dtype), (long long)n, t->ndim,
                     rt->cfg.stage, (long long)want, nd, ts ? ", unsharded" : "");
        return 1;
    }
    if (!ts) return t->nbytes ? put(rt, dst, t->data, t->nbytes, host) : 0;
    size_t nb = (size_t)p->numel * sizeof(float);
    float *loc = malloc(nb ? nb : 1);
    if (!loc) {
        rt_log_error("param '%s': out of memory slicing its checkpoint tensor", p->name);
        return 1;
    }
    stage_tp_slice(ts, rt->ctx.tp_rank, t->data, loc, outer, inner);
    int rc = put(rt, dst, loc, nb, host);
    free(loc);
    return rc;
}

/* The unsharded tensor of a TP-sharded parameter (param or state at
 * arena_src; host memory when host: a ZeRO-gathered state), gathered over
 * the TP group: each rank places its slice in a zeroed full buffer and the
 * group sums them (exact: each element has one nonzero contribution).
 * Collective over ctx.tp_comm.  Sets shape[axis] to the full extent.  NULL
 * after rt_log_error. */
static void *tp_gather(StageRt *rt, const StageParam *p, const void *arena_src, int host,
                       int64_t *shape, int nd, const char *name) {
    const StageTpShard *ts = &rt->cfg.tpshards[p->tpshard];
    int64_t outer, inner, ldim;
    if (stage_tp_geometry(ts, shape, nd, &outer, &inner, &ldim)) {
        rt_log_error("checkpoint: '%s': its shape does not match its tpshard record", name);
        return NULL;
    }
    size_t nfull = (size_t)(outer * ts->full * inner), nb = (size_t)p->numel * sizeof(float);
    float *full = calloc(nfull ? nfull : 1, sizeof(float)), *loc = malloc(nb ? nb : 1);
    char what[RT_CKPT_MAX_NAME + 64];
    snprintf(what, sizeof what, "checkpoint: TP gather of '%s'", name);
    if (!full || !loc || (host ? (memcpy(loc, arena_src, nb), 0)
                               : stage_be_get(rt, loc, arena_src, nb))) {
        rt_log_error("%s: out of memory or device copy failed", what);
        free(full);
        free(loc);
        return NULL;
    }
    stage_tp_place(ts, rt->ctx.tp_rank, loc, full, outer, inner);
    free(loc);
    if (rt_allreduce(&rt->ctx, rt->ctx.tp_comm, full, nfull, MPI_FLOAT, MPI_SUM, what)) {
        free(full);
        return NULL;
    }
    shape[ts->axis] = ts->full;
    return full;
}

int stage_ckpt_load(StageRt *rt, const char *path, int with_opt) {
    StageConfig *c = &rt->cfg;
    int rc = 0;
    for (int L = 0; L <= c->layers && !rc; L++) {
        int any = 0;
        for (int i = 0; i < c->nparams; i++) any |= c->params[i].layer == L;
        if (!any) continue;
        RtCkptLayer l;
        char err[1024];
        if (rt_ckpt_read_layer(path, L, &l, err, sizeof err)) {
            rt_log_error("loading stage %d's parameters: %s", c->stage, err);
            return 1;
        }
        for (int i = 0; i < c->nparams && !rc; i++) {
            StageParam *p = &c->params[i];
            if (p->layer != L) continue;
            size_t nb = (size_t)p->numel * sizeof(float);
            /* an offloaded stage loads into its host store (stage_offload.c) */
            int ho = rt->off.store != NULL;
            float *pd = ho ? stage_offload_at(rt, p, -1)
                           : STAGE_AT(&rt->arena, (size_t)p->off_param, nb);
            rc = load_one(rt, &l, path, p->name, p, pd, ho);
            for (int k = 0; k < 2 && !rc && with_opt; k++) {
                int64_t off = k ? p->off_v : p->off_m;
                if (off < 0 || (k && c->sgd)) continue;
                char name[RT_CKPT_MAX_NAME + 16];
                snprintf(name, sizeof name, "opt/%s/%s", state_kind(rt, k), p->name);
                if (!c->zero) {
                    rc = load_one(rt, &l, path, name, p,
                                  ho ? stage_offload_at(rt, p, k)
                                     : STAGE_AT(&rt->arena, (size_t)off, nb), ho);
                    continue;
                }
                /* ZeRO: the file holds the whole state; keep this rank's slice,
                 * zero-padded to zlen (built on the host, then one put: the
                 * arena may be device memory) */
                float *full = malloc(nb + (size_t)p->zlen * sizeof(float) + 1);
                int64_t start, count;
                stage_zero_range(rt, p, &start, &count);
                float *dst = ho ? stage_offload_at(rt, p, k)
                                : STAGE_AT(&rt->arena, (size_t)off, (size_t)p->zlen * 4);
                rc = !full || load_one(rt, &l, path, name, p, full, 1);
                if (!rc) {
                    float *z = full + p->numel;
                    memcpy(z, full + start, (size_t)count * sizeof(float));
                    memset(z + count, 0, (size_t)(p->zlen - count) * sizeof(float));
                    rc = put(rt, dst, z, (size_t)p->zlen * sizeof(float), ho);
                }
                free(full);
            }
        }
        rt_ckpt_layer_free(&l);
    }
    for (int i = 0; i < c->nparams && !rc; i++)
        if (c->params[i].layer < 0 || c->params[i].layer > c->layers) {
            rt_log_error("param '%s': layer %d is outside the config's 'layers %d'",
                         c->params[i].name, c->params[i].layer, c->layers);
            rc = 1;
        }
    return rc;
}

int stage_ckpt_save(StageRt *rt, const char *dir, int64_t step) {
    StageConfig *c = &rt->cfg;
    int nl = c->layers + 1, rc = 0;
    RtCkptTensor *t = calloc((size_t)c->nparams * 3 + 2, sizeof *t);
    char (*names)[RT_CKPT_MAX_NAME + 16] = calloc((size_t)c->nparams * 2 + 1, sizeof *names);
    int *written = calloc((size_t)nl, sizeof *written);
    void **hostcopy = calloc((size_t)c->nparams * 3 + 2, sizeof *hostcopy);
    int n = 0;
    /* dp rank 0 of the owning stage writes; with TP its TP group gathers
     * the sharded tensors (all of them take part) and TP rank 0 writes. */
    int writer = rt->ctx.tp_rank == 0;
    /* With ZeRO the DP group first all-gathers each state (every DP rank
     * takes part, dp rank 0 writes): the files hold whole tensors, so a
     * ZeRO checkpoint resumes under zero 0 and the other way round. */
    if (c->zero) writer &= rt->ctx.dp_rank == 0;
    if (rt->ctx.dp_rank == 0 || c->zero)
        for (int i = 0; i < c->nparams; i++) {
            StageParam *p = &c->params[i];
            if (stage_param_owner(rt, p) != c->stage) continue;
            if (p->layer < 1 || p->layer > c->layers) {
                rt_log_error("checkpoint: param '%s' has layer %d, outside 1..%d", p->name,
                             p->layer, c->layers);
                rc = 1;
                break;
            }
            for (int k = -1; k < 2; k++) {
                int64_t off = k < 0 ? p->off_param : k ? p->off_v : p->off_m;
                if (k >= 0 && (off < 0 || (k == 1 && c->sgd))) continue; /* no such state */
                const char *nm = p->name;
                if (k >= 0) {
                    char *b = names[2 * i + k];
                    snprintf(b, RT_CKPT_MAX_NAME + 16, "opt/%s/%s", state_kind(rt, k), p->name);
                    nm = b;
                }
                int64_t shape[RT_CKPT_MAX_DIMS];
                int nd = param_shape(rt, p, shape);
                size_t nb = (size_t)p->numel * sizeof(float);
                /* an offloaded stage's store is the source of truth (host
                 * memory: hsrc); the arena's regions are poisoned now */
                const float *st = stage_offload_at(rt, p, k);
                int hsrc = stage_be_is_host() || st;
                const void *src = st ? (const void *)st
                                     : STAGE_AT(&rt->arena, (size_t)off,
                                                k < 0 ? nb : (size_t)p->zlen * 4);
                void *h = NULL, *zfull = NULL;
                if (k >= 0 && c->zero) { /* gathered into host memory */
                    char what[RT_CKPT_MAX_NAME + 64];
                    snprintf(what, sizeof what, "checkpoint: ZeRO all-gather of '%s'", nm);
                    int64_t zs, zc; /* a device arena's slice goes through the host */
                    stage_zero_range(rt, p, &zs, &zc);
                    void *hs = hsrc ? NULL : malloc((size_t)zc * 4 + 1);
                    int bad = !hsrc &&
                              (!hs || stage_be_get(rt, hs, src, (size_t)zc * 4));
                    if (bad || !(zfull = malloc(nb ? nb : 1)) ||
                        rt_dp_allgather_f32(&rt->ctx, hs ? hs : src, zfull, (size_t)p->numel,
                                            what)) {
                        free(hs);
                        free(zfull);
                        rt_log_error("%s failed", what);
                        rc = 1;
                        break;
                    }
                    free(hs);
                    src = h = zfull; /* the tensor written, freed with the host copies */
                }
                if (p->tpshard >= 0) {
                    h = tp_gather(rt, p, src, zfull != NULL || st, shape, nd, nm);
                    free(zfull);
                    if (!h) {
                        rc = 1;
                        break;
                    }
                } else if (zfull) {
                    /* h = zfull already */
                } else if (writer && !hsrc) { /* a device arena: a host copy */
                    h = malloc(nb ? nb : 1);
                    if (!h || stage_be_get(rt, h, src, nb)) {
                        free(h);
                        rt_log_error("checkpoint: cannot copy '%s' to the host", p->name);
                        rc = 1;
                        break;
                    }
                }
                if (!writer) {
                    free(h);
                    continue;
                }
                RtCkptTensor *x = &t[n++];
                x->layer = p->layer;
                x->dtype = RT_F32;
                x->ndim = nd;
                memcpy(x->shape, shape, sizeof shape);
                x->data = h ? h : src;
                hostcopy[n - 1] = h;
                x->name = nm;
            }
            if (writer) written[p->layer] = 1;
        }
    int64_t step_v = step;
    if (rt->ctx.world_rank == 0) {
        t[n++] = (RtCkptTensor){.layer = 0, .name = "step", .dtype = RT_I64, .ndim = 0,
                                .data = &step_v};
        written[0] = 1;
    }
    char err[1024];
    for (int L = 0; L < nl && !rc; L++)
        if (written[L] && rt_ckpt_write_layer_run(dir, step, rt->run_id, L, t, n, err, sizeof err)) {
            rt_log_error("checkpoint step %lld (stage %d): %s", (long long)step, c->stage, err);
            rc = 1;
        }
    /* The max over the world both tells rank 0 which layers have no
     * parameters (it writes them empty) and waits for every writer. */
    if (rt_allreduce(&rt->ctx, MPI_COMM_WORLD, written, (size_t)nl, MPI_INT, MPI_MAX,
                     "checkpoint: layer files written"))
        rc = 1;
    int frc = rc;
    if (rt_allreduce(&rt->ctx, MPI_COMM_WORLD, &frc, 1, MPI_INT, MPI_MAX,
                     "checkpoint: writer status"))
        frc = 1;
    if (!frc && rt->ctx.world_rank == 0) {
        for (int L = 0; L < nl && !frc; L++)
            if (!written[L] && rt_ckpt_write_layer_run(dir, step, rt->run_id, L, t, 0, err, sizeof err)) {
                rt_log_error("checkpoint step %lld: empty layer %d: %s", (long long)step, L, err);
                frc = 1;
            }
        if (!frc && rt_ckpt_write_manifest_run(dir, step, rt->run_id, nl, err, sizeof err)) {
            rt_log_error("checkpoint step %lld: %s", (long long)step, err);
            frc = 1;
        }
    }
    if (rt_allreduce(&rt->ctx, MPI_COMM_WORLD, &frc, 1, MPI_INT, MPI_MAX,
                     "checkpoint: manifest written"))
        frc = 1;
    for (int i = 0; i < c->nparams * 3 + 2; i++) free(hostcopy[i]);
    free(hostcopy);
    free(t);
    free(names);
    free(written);
    return frc;
}
