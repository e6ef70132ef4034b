/* hetrt host transport over MPI: point-to-point, DP all-reduce, many-to-many
 * row redistribution.  Nothing here blocks without a deadline: every
 * operation is posted non-blocking and rt_wait polls it with MPI_Test until
 * it completes or ctx->timeout_s passes, and then names the waiting rank,
 * the peer and the operation before aborting the job.
 *
 * A solo context (rt.h: one process, no launcher, MPI never initialised)
 * touches no MPI call here: its collectives are no-ops (a sum, broadcast or
 * barrier over one rank) or copies (gathers), and point-to-point, which has
 * no peer in a world of one, is an error naming the operation. */
#define _POSIX_C_SOURCE 200809L
#include "rt.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What one pending request is, for the timeout report. */
typedef struct RtPending {
    MPI_Request req;
    const char *kind; /* "send to", "recv from", "all-reduce in", ... */
    int peer;         /* world rank, or -1 for collectives */
    int tag;
    size_t bytes;
} RtPending;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Poll until all n requests finish or the deadline passes.  The sleep
 * between polls grows to 1 ms: short enough not to add latency worth
 * measuring on the host backend, long enough that ranks oversubscribed on
 * few cores do not starve the peers they wait for. */
static int rt_wait(const RtContext *ctx, RtPending *p, int n, const char *what) {
    double deadline = now_s() + ctx->timeout_s;
    long sleep_ns = 1000;
    int left = n;
    while (left > 0) {
        left = 0;
        for (int i = 0; i < n; i++) {
            if (p[i].req == MPI_REQUEST_NULL) continue;
            int done = 0;
            int rc = MPI_Test(&p[i].req, &done, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) {
                char msg[MPI_MAX_ERROR_STRING];
                int len = 0;
                MPI_Error_string(rc, msg, &len);
                rt_log_error("%s: MPI error during %s rank %d (tag %d): %s", what, p[i].kind,
                             p[i].peer, p[i].tag, msg);
                return 1;
            }
            if (!done) left++;
        }
        if (left == 0) break;
        if (now_s() > deadline) {
            for (int i = 0; i < n; i++) {
                if (p[i].req == MPI_REQUEST_NULL) continue;
                if (p[i].peer >= 0)
                    rt_log_error("timed out after %.1f s (HETRT_TIMEOUT_S) in %s: rank %d "
                                 "(stage %d, dp rank %d) waited on %s rank %d "
                                 "(tag %d, %zu bytes)",
                                 ctx->timeout_s, what, ctx->world_rank, ctx->stage, ctx->dp_rank,
                                 p[i].kind, p[i].peer, p[i].tag, p[i].bytes);
                else
                    rt_log_error("timed out after %.1f s (HETRT_TIMEOUT_S) in %s: rank %d "
                                 "(stage %d, dp rank %d) waited on %s (%zu bytes)",
                                 ctx->timeout_s, what, ctx->world_rank, ctx->stage, ctx->dp_rank,
                                 p[i].kind, p[i].bytes);
            }
            rt_die(__FILE__, __LINE__, "%s timed out on rank %d", what, ctx->world_rank);
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
    return 0;
}

static int check_count(size_t bytes, const char *what) {
    if (bytes > (size_t)INT_MAX) {
        rt_log_error("%s: message of %zu bytes exceeds MPI's int count", what, bytes);
        return 1;
    }
    return 0;
}

/* Point-to-point in a world of one process: a bug of the caller (a plan of
 * several ranks reaches init_solo's error instead). */
static int solo_refuse(const RtContext *ctx, const char *op, const char *what) {
    if (!ctx->solo) return 0;
    rt_log_error("%s: %s in a one-process run (no launcher, world of one rank): there is no "
                 "peer rank", what, op);
    return 1;
}

static int check_peer(const RtContext *ctx, int peer, int tag, const char *what) {
    if (solo_refuse(ctx, "send / receive", what)) return 1;
    if (peer < 0 || peer >= ctx->world_size || peer == ctx->world_rank) {
        rt_log_error("%s: bad peer rank %d (world size %d, self %d)", what, peer,
                     ctx->world_size, ctx->world_rank);
        return 1;
    }
    if (tag < 0 || tag > 32767) {
        rt_log_error("%s: tag %d outside [0, 32767]", what, tag);
        return 1;
    }
    return 0;
}

int rt_send(const RtContext *ctx, const void *buf, size_t bytes, int peer, int tag,
            const char *what) {
    if (check_peer(ctx, peer, tag, what) || check_count(bytes, what)) return 1;
    RtPending p = {MPI_REQUEST_NULL, "send to", peer, tag, bytes};
    if (MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &p.req) != MPI_SUCCESS) {
        rt_log_error("%s: MPI_Isend to rank %d failed", what, peer);
        return 1;
    }
    return rt_wait(ctx, &p, 1, what);
}

int rt_recv(const RtContext *ctx, void *buf, size_t bytes, int peer, int tag, const char *what) {
    if (check_peer(ctx, peer, tag, what) || check_count(bytes, what)) return 1;
    RtPending p = {MPI_REQUEST_NULL, "recv from", peer, tag, bytes};
    if (MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &p.req) != MPI_SUCCESS) {
        rt_log_error("%s: MPI_Irecv from rank %d failed", what, peer);
        return 1;
    }
    return rt_wait(ctx, &p, 1, what);
}

int rt_send_f32(const RtContext *ctx, const float *buf, size_t n, int peer, int tag,
                const char *what) {
    return rt_send(ctx, buf, n * sizeof(float), peer, tag, what);
}

int rt_recv_f32(const RtContext *ctx, float *buf, size_t n, int peer, int tag, const char *what) {
    return rt_recv(ctx, buf, n * sizeof(float), peer, tag, what);
}

int rt_dp_allreduce_f32(const RtContext *ctx, float *buf, size_t n, float scale,
                        const char *what) {
    if (check_count(n, what)) return 1;
    if (ctx->dp_size > 1) {
        RtPending p = {MPI_REQUEST_NULL, "all-reduce in the DP group of stage", -1, 0,
                       n * sizeof(float)};
        if (MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, ctx->dp_comm,
                           &p.req) != MPI_SUCCESS) {
            rt_log_error("%s: MPI_Iallreduce failed", what);
            return 1;
        }
        if (rt_wait(ctx, &p, 1, what)) return 1;
    }
    if (scale != 1.0f)
        for (size_t i = 0; i < n; i++) buf[i] *= scale;
    return 0;
}

int rt_allreduce(const RtContext *ctx, MPI_Comm comm, void *buf, size_t count, MPI_Datatype type,
                 MPI_Op op, const char *what) {
    if (ctx->solo || comm == MPI_COMM_NULL || count == 0) return 0; /* one rank's sum */
    if (check_count(count, what)) return 1;
    int size = 1, tsize = 0;
    MPI_Comm_size(comm, &size);
    if (size <= 1) return 0;
    MPI_Type_size(type, &tsize);
    RtPending p = {MPI_REQUEST_NULL, "all-reduce over a group of", -1, 0, count * (size_t)tsize};
    if (MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, type, op, comm, &p.req) != MPI_SUCCESS) {
        rt_log_error("%s: MPI_Iallreduce failed", what);
        return 1;
    }
    return rt_wait(ctx, &p, 1, what);
}

/* Counts and displacements of the DP split of n elements (ints: MPI's). */
static int *dp_counts(const RtContext *ctx, size_t n, int **displs, const char *what) {
    int dp = ctx->dp_size;
    int *c = calloc((size_t)dp * 2 + 2, sizeof *c);
    if (!c) {
        rt_log_error("%s: out of memory", what);
        return NULL;
    }
    for (int r = 0; r < dp; r++) {
        int64_t st, cnt;
        rt_row_split((int64_t)n, dp, r, &st, &cnt);
        c[r] = (int)cnt;
        c[dp + r] = (int)st;
    }
    *displs = c + dp;
    return c;
}

int rt_dp_reduce_scatter(const RtContext *ctx, void *buf, size_t n, MPI_Datatype type,
                         MPI_Op op, const char *what) {
    if (check_count(n, what)) return 1;
    if (ctx->dp_size <= 1 || n == 0) return 0;
    int *displs, *counts = dp_counts(ctx, n, &displs, what);
    if (!counts) return 1;
    int tsize = 0;
    MPI_Type_size(type, &tsize);
    RtPending p = {MPI_REQUEST_NULL, "reduce-scatter in the DP group of stage", -1, 0,
                   n * (size_t)tsize};
    int rc = 0;
    if (MPI_Ireduce_scatter(MPI_IN_PLACE, buf, counts, type, op, ctx->dp_comm, &p.req) !=
        MPI_SUCCESS) {
        rt_log_error("%s: MPI_Ireduce_scatter failed", what);
        rc = 1;
    }
    if (!rc) rc = rt_wait(ctx, &p, 1, what);
    free(counts);
    return rc;
}

int rt_dp_reduce_scatter_f32(const RtContext *ctx, float *buf, size_t n, const char *what) {
    return rt_dp_reduce_scatter(ctx, buf, n, MPI_FLOAT, MPI_SUM, what);
}

int rt_dp_allgather_f32(const RtContext *ctx, const float *slice, float *full, size_t n,
                        const char *what) {
    if (check_count(n, what)) return 1;
    if (n == 0) return 0;
    if (ctx->dp_size <= 1) {
        memmove(full, slice, n * sizeof(float));
        return 0;
    }
    int *displs, *counts = dp_counts(ctx, n, &displs, what);
    if (!counts) return 1;
    RtPending p = {MPI_REQUEST_NULL, "all-gather in the DP group of stage", -1, 0,
                   n * sizeof(float)};
    int rc = 0, me = ctx->dp_rank;
    if (MPI_Iallgatherv(slice, counts[me], MPI_FLOAT, full, counts, displs, MPI_FLOAT,
                        ctx->dp_comm, &p.req) != MPI_SUCCESS) {
        rt_log_error("%s: MPI_Iallgatherv failed", what);
        rc = 1;
    }
    if (!rc) rc = rt_wait(ctx, &p, 1, what);
    free(counts);
    return rc;
}

int rt_bcast(const RtContext *ctx, MPI_Comm comm, void *buf, size_t bytes, int root,
             const char *what) {
    if (ctx->solo || comm == MPI_COMM_NULL || bytes == 0) return 0;
    if (check_count(bytes, what)) return 1;
    int size = 1;
    MPI_Comm_size(comm, &size);
    if (size <= 1) return 0;
    RtPending p = {MPI_REQUEST_NULL, "broadcast over a group of", -1, 0, bytes};
    if (MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, comm, &p.req) != MPI_SUCCESS) {
        rt_log_error("%s: MPI_Ibcast failed", what);
        return 1;
    }
    return rt_wait(ctx, &p, 1, what);
}

int rt_barrier(const RtContext *ctx, const char *what) {
    if (ctx->solo) return 0;
    RtPending p = {MPI_REQUEST_NULL, "barrier over all ranks", -1, 0, 0};
    if (MPI_Ibarrier(MPI_COMM_WORLD, &p.req) != MPI_SUCCESS) {
        rt_log_error("%s: MPI_Ibarrier failed", what);
        return 1;
    }
    return rt_wait(ctx, &p, 1, what);
}

/* Bytes of a predefined type, for a solo gather's copy (MPI_Type_size is not
 * callable before MPI_Init); 0 for a type not listed. */
static size_t solo_type_size(MPI_Datatype t) {
    if (t == MPI_BYTE || t == MPI_CHAR || t == MPI_UNSIGNED_CHAR || t == MPI_INT8_T ||
        t == MPI_UINT8_T)
        return 1;
    if (t == MPI_UINT16_T || t == MPI_INT16_T) return 2;
    if (t == MPI_INT || t == MPI_UNSIGNED || t == MPI_FLOAT || t == MPI_INT32_T ||
        t == MPI_UINT32_T)
        return 4;
    if (t == MPI_LONG_LONG || t == MPI_UNSIGNED_LONG_LONG || t == MPI_DOUBLE ||
        t == MPI_INT64_T || t == MPI_UINT64_T || t == MPI_LONG || t == MPI_UNSIGNED_LONG)
        return 8;
    return 0;
}

/* A solo gather: this rank's count elements copied to dst. */
static int solo_copy(const void *mine, size_t count, MPI_Datatype type, void *dst,
                     const char *what) {
    size_t tsize = solo_type_size(type);
    if (!tsize) {
        rt_log_error("%s: gather of a datatype a one-process run does not know", what);
        return 1;
    }
    if (count && dst != mine) memmove(dst, mine, count * tsize);
    return 0;
}

int rt_gather(const RtContext *ctx, const void *mine, size_t count, MPI_Datatype type, void *all,
              int root, const char *what) {
    if (check_count(count, what)) return 1;
    if (ctx->solo) return solo_copy(mine, count, type, all, what);
    int tsize = 0;
    MPI_Type_size(type, &tsize);
    RtPending p = {MPI_REQUEST_NULL, "gather to", root, 0, count * (size_t)tsize};
    if (MPI_Igather(mine, (int)count, type, all, (int)count, type, root, MPI_COMM_WORLD,
                    &p.req) != MPI_SUCCESS) {
        rt_log_error("%s: MPI_Igather failed", what);
        return 1;
    }
    return rt_wait(ctx, &p, 1, what);
}

int rt_gatherv(const RtContext *ctx, const void *mine, int send_count, MPI_Datatype type,
               void *all, const int *counts, const int *displs, int root, const char *what) {
    if (send_count < 0) {
        rt_log_error("%s: gather of %d elements", what, send_count);
        return 1;
    }
    if (ctx->solo) {
        if (!send_count) return 0;
        size_t off = displs ? (size_t)displs[0] * solo_type_size(type) : 0;
        return solo_copy(mine, (size_t)send_count, type, (unsigned char *)all + off, what);
    }
    int tsize = 0;
    MPI_Type_size(type, &tsize);
    RtPending p = {MPI_REQUEST_NULL, "gather to", root, 0, (size_t)send_count * (size_t)tsize};
    if (MPI_Igatherv(mine, send_count, type, all, counts, displs, type, root, MPI_COMM_WORLD,
                     &p.req) != MPI_SUCCESS) {
        rt_log_error("%s: MPI_Igatherv failed", what);
        return 1;
    }
    return rt_wait(ctx, &p, 1, what);
}

int rt_comm_split(const RtContext *ctx, int color, int key, MPI_Comm *out, const char *what) {
    *out = MPI_COMM_NULL;
    if (ctx->solo) return 0;
    if (MPI_Comm_split(MPI_COMM_WORLD, color, key, out) != MPI_SUCCESS) {
        rt_log_error("%s: MPI_Comm_split failed", what);
        return 1;
    }
    if (*out != MPI_COMM_NULL) MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    return 0;
}

int rt_node_rank(const RtContext *ctx, int *local, int *nlocal) {
    *local = 0, *nlocal = 1;
    if (ctx->solo) return 0;
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, ctx->world_rank, MPI_INFO_NULL,
                            &node) != MPI_SUCCESS) {
        *local = *nlocal = -1;
        rt_log_error("MPI_Comm_split_type (the ranks of this node) failed");
        return 1;
    }
    MPI_Comm_rank(node, local);
    MPI_Comm_size(node, nlocal);
    MPI_Comm_free(&node);
    return 0;
}

/* The pieces of this rank's DP shard over its TP group, as byte counts and
 * displacements inside the shard (for the all-gather of the pieces). */
static int tp_piece_layout(const RtContext *ctx, int64_t B, int dp, size_t row_bytes,
                           int64_t shard_start, int **counts, int **displs, const char *what) {
    int tp = ctx->tp_size;
    *counts = malloc(sizeof **counts * (size_t)tp);
    *displs = malloc(sizeof **displs * (size_t)tp);
    if (!*counts || !*displs) {
        free(*counts), free(*displs);
        rt_log_error("%s: out of memory", what);
        return 1;
    }
    for (int t = 0; t < tp; t++) {
        int64_t st, cnt;
        (void)dp; /* the stage's own split (its row table, if any) */
        rt_stage_row_piece(ctx, ctx->stage, B, ctx->dp_rank * tp + t, &st, &cnt);
        size_t bytes = (size_t)cnt * row_bytes, off = (size_t)(st - shard_start) * row_bytes;
        if (check_count(bytes, what) || check_count(off + bytes, what)) {
            free(*counts), free(*displs);
            return 1;
        }
        (*counts)[t] = (int)bytes;
        (*displs)[t] = (int)off;
    }
    return 0;
}

/* dst holds this rank's piece of its DP shard; make it the whole shard */
static int tp_gather_pieces(const RtContext *ctx, void *dst, int64_t B, int dp, size_t row_bytes,
                            int64_t shard_start, const char *what) {
    if (ctx->tp_size <= 1) return 0;
    int *counts, *displs;
    if (tp_piece_layout(ctx, B, dp, row_bytes, shard_start, &counts, &displs, what)) return 1;
    size_t total = 0;
    for (int t = 0; t < ctx->tp_size; t++) total += (size_t)counts[t];
    RtPending p = {MPI_REQUEST_NULL, "all-gather of boundary pieces in the TP group of stage",
                   -1, 0, total};
    int rc = 0;
    if (total && MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dst, counts, displs, MPI_BYTE,
                                 ctx->tp_comm, &p.req) != MPI_SUCCESS) {
        rt_log_error("%s: MPI_Iallgatherv of boundary pieces failed", what);
        rc = 1;
    }
    if (!rc && total) rc = rt_wait(ctx, &p, 1, what);
    free(counts);
    free(displs);
    return rc;
}

/* Both sides of a redistribution: the stages' piece layouts and this
 * rank's DP shard.  Returns the overlaps (caller frees), NULL on error. */
typedef struct RowPlan {
    RtOverlap *ov;
    int nov;
    int me;                  /* this rank's piece index in its stage */
    int64_t shard_start, shard_count;
} RowPlan;

static int row_plan(const RtContext *ctx, int src_stage, int dst_stage, int64_t B, RowPlan *rp,
                    const char *what) {
    int dp_a = ctx->stage_dp[src_stage], dp_b = ctx->stage_dp[dst_stage];
    int tp_a = ctx->stage_tp[src_stage], tp_b = ctx->stage_tp[dst_stage];
    rp->ov = malloc(sizeof(RtOverlap) * (size_t)(dp_a * tp_a + dp_b * tp_b));
    if (!rp->ov) {
        rt_log_error("%s: out of memory", what);
        return 1;
    }
    rp->nov = rt_stage_row_overlaps(ctx, src_stage, dst_stage, B, 1, rp->ov);
    rp->me = ctx->dp_rank * ctx->tp_size + ctx->tp_rank;
    rt_stage_row_split(ctx, ctx->stage, B, ctx->dp_rank, &rp->shard_start, &rp->shard_count);
    return 0;
}

int rt_redistribute_rows(const RtContext *ctx, int src_stage, const void *src, int dst_stage,
                         void *dst, int64_t B, size_t row_bytes, int tag, const char *what) {
    if (src_stage < 0 || src_stage >= ctx->nstages || dst_stage < 0 ||
        dst_stage >= ctx->nstages || src_stage == dst_stage || B < 0) {
        rt_log_error("%s: bad redistribution stage %d -> stage %d of %d (B=%lld)", what,
                     src_stage, dst_stage, ctx->nstages, (long long)B);
        return 1;
    }
    int am_src = ctx->stage == src_stage, am_dst = ctx->stage == dst_stage;
    if (!am_src && !am_dst) return 0;
    if (solo_refuse(ctx, "a redistribution between stages", what)) return 1;
    RowPlan rp;
    if (row_plan(ctx, src_stage, dst_stage, B, &rp, what)) return 1;
    RtPending *p = malloc(sizeof(RtPending) * (size_t)(rp.nov + 1));
    int np = 0, rc = 0;
    if (!p) {
        free(rp.ov);
        rt_log_error("%s: out of memory", what);
        return 1;
    }
    if ((am_src && rp.shard_count > 0 && !src) || (am_dst && rp.shard_count > 0 && !dst)) {
        rt_log_error("%s: NULL buffer for %lld rows", what, (long long)rp.shard_count);
        rc = 1;
    }
    /* Rows are contiguous in both buffers (a DP shard's rows), so each
     * overlap is one message at (start - shard_start) rows into the shard. */
    for (int i = 0; i < rp.nov && rc == 0; i++) {
        const RtOverlap *o = &rp.ov[i];
        size_t off = (size_t)(o->start - rp.shard_start) * row_bytes;
        size_t bytes = (size_t)o->count * row_bytes;
        if (check_count(bytes, what)) {
            rc = 1;
            break;
        }
        int irc = MPI_SUCCESS;
        if (am_src && o->src == rp.me) {
            int peer = ctx->stage_first[dst_stage] + o->dst;
            p[np] = (RtPending){MPI_REQUEST_NULL, "send to", peer, tag, bytes};
            irc = MPI_Isend((const unsigned char *)src + off, (int)bytes, MPI_BYTE, peer, tag,
                            MPI_COMM_WORLD, &p[np].req);
            np++;
        } else if (am_dst && o->dst == rp.me) {
            int peer = ctx->stage_first[src_stage] + o->src;
            p[np] = (RtPending){MPI_REQUEST_NULL, "recv from", peer, tag, bytes};
            irc = MPI_Irecv((unsigned char *)dst + off, (int)bytes, MPI_BYTE, peer, tag,
                            MPI_COMM_WORLD, &p[np].req);
            np++;
        }
        if (irc != MPI_SUCCESS) {
            rt_log_error("%s: posting %s rank %d failed", what, p[np - 1].kind, p[np - 1].peer);
            rc = 1;
        }
    }
    if (np > 0) {
        /* Requests already posted must complete (or time out) before their
         * buffers can be handed back, even when a later post failed. */
        int wrc = rt_wait(ctx, p, np, what);
        if (wrc) rc = wrc;
    }
    if (!rc && am_dst)
        rc = tp_gather_pieces(ctx, dst, B, ctx->stage_dp[dst_stage], row_bytes, rp.shard_start,
                              what);
    free(rp.ov);
    free(p);
    return rc;
}

/* ------------------------------------------------------------ deferred sends */

static void queue_reap(RtSendQueue *q) {
    int w = 0;
    for (int i = 0; i < q->n; i++) {
        int done = 0;
        if (q->pend[i].req != MPI_REQUEST_NULL)
            MPI_Test(&q->pend[i].req, &done, MPI_STATUS_IGNORE);
        if (q->pend[i].req == MPI_REQUEST_NULL) {
            free(q->bufs[i]);
            continue;
        }
        q->pend[w] = q->pend[i];
        q->bufs[w++] = q->bufs[i];
    }
    q->n = w;
}

int rt_redistribute_rows_isend(const RtContext *ctx, int src_stage, const void *src,
                               int dst_stage, int64_t B, size_t row_bytes, int tag,
                               const char *what, RtSendQueue *q) {
    if (src_stage < 0 || src_stage >= ctx->nstages || dst_stage < 0 ||
        dst_stage >= ctx->nstages || src_stage == dst_stage || B < 0 ||
        ctx->stage != src_stage) {
        rt_log_error("%s: bad deferred send stage %d -> stage %d of %d from stage %d", what,
                     src_stage, dst_stage, ctx->nstages, ctx->stage);
        return 1;
    }
    if (tag < 0 || tag > 32767) {
        rt_log_error("%s: tag %d outside [0, 32767]", what, tag);
        return 1;
    }
    if (solo_refuse(ctx, "a deferred send between stages", what)) return 1;
    queue_reap(q);
    RowPlan rp;
    if (row_plan(ctx, src_stage, dst_stage, B, &rp, what)) return 1;
    RtOverlap *ov = rp.ov;
    int nov = rp.nov, rc = 0;
    int64_t my_start = rp.shard_start;
    if (rp.shard_count > 0 && !src) {
        rt_log_error("%s: NULL buffer for %lld rows", what, (long long)rp.shard_count);
        rc = 1;
    }
    for (int i = 0; i < nov && rc == 0; i++) {
        const RtOverlap *o = &ov[i];
        if (o->src != rp.me) continue;
        size_t off = (size_t)(o->start - my_start) * row_bytes;
        size_t bytes = (size_t)o->count * row_bytes;
        if (check_count(bytes, what)) {
            rc = 1;
            break;
        }
        if (q->n == q->cap) {
            int cap = q->cap ? 2 * q->cap : 8;
            RtPending *np = realloc(q->pend, sizeof *np * (size_t)cap);
            void **nb = np ? realloc(q->bufs, sizeof *nb * (size_t)cap) : NULL;
            if (np) q->pend = np;
            if (nb) q->bufs = nb;
            if (!np || !nb) {
                rt_log_error("%s: out of memory", what);
                rc = 1;
                break;
            }
            q->cap = cap;
        }
        void *copy = malloc(bytes ? bytes : 1);
        if (!copy) {
            rt_log_error("%s: out of memory staging %zu bytes", what, bytes);
            rc = 1;
            break;
        }
        memcpy(copy, (const unsigned char *)src + off, bytes);
        int peer = ctx->stage_first[dst_stage] + o->dst;
        q->pend[q->n] = (RtPending){MPI_REQUEST_NULL, "send to", peer, tag, bytes};
        q->bufs[q->n] = copy;
        if (MPI_Isend(copy, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD,
                      &q->pend[q->n].req) != MPI_SUCCESS) {
            rt_log_error("%s: posting send to rank %d failed", what, peer);
            free(copy);
            rc = 1;
            break;
        }
        q->n++;
    }
    free(ov);
    return rc;
}

int rt_send_queue_wait(const RtContext *ctx, RtSendQueue *q, const char *what) {
    int rc = q->n ? rt_wait(ctx, q->pend, q->n, what) : 0;
    for (int i = 0; i < q->n; i++) free(q->bufs[i]);
    q->n = 0;
    return rc;
}

void rt_send_queue_free(RtSendQueue *q) {
    for (int i = 0; i < q->n; i++) free(q->bufs[i]);
    free(q->pend);
    free(q->bufs);
    memset(q, 0, sizeof *q);
}
