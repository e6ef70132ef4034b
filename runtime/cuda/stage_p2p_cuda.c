/* NCCL point-to-point stage links of the CUDA backend.
 *
 * A `link PEER direct` record (docs/STAGE_ABI.md; from the cluster's
 * `transport: device-direct`) makes the boundary tensors between this stage
 * and PEER go GPU to GPU with ncclSend/ncclRecv inside ncclGroupStart/End,
 * when every rank of the two stages has its own GPU (NCCL forbids two
 * ranks of one communicator on one device) and HETRT_TRANSPORT is not
 * `cpu`; otherwise, and for `link PEER cpu` or no record, they take the
 * CPU-mediated path of stage_exec.c (hetrt_*_mediated below).
 *
 * Per direct link, at setup (collective over both stages' ranks, links in
 * ascending (lower stage, higher stage) order on every rank, so that the
 * creations cannot wait on each other in a cycle): an MPI communicator of
 * the lower stage's ranks then the higher's (MPI_Comm_create_group: only
 * those ranks take part), and two NCCL communicators over it bootstrapped
 * with MPI like the gradient groups (cuda_group_decide): one per direction
 * (activations lo -> hi, gradients hi -> lo), so that each carries one FIFO
 * of operations in the same order on both sides (sends keep xfer order and
 * the peer receives in xfer order: docs/STAGE_ABI.md).  A one-byte
 * all-pairs exchange per direction makes NCCL connect now rather than at
 * the first transfer, where a rank blocked connecting its send could wait
 * for a peer blocked connecting its own.
 *
 * Rows are redistributed between the two stages' DP ranks as the MPI path
 * does (rt_row_overlaps): only overlapping row ranges travel.
 *
 * Streams: a send is a device copy of the rows into a staging buffer on
 * the compute stream, then ncclSend from it on the send stream (after an
 * event on the compute stream): the compute stream never waits for a peer,
 * as the MPI path's deferred sends never block the host.  A receive runs
 * on the receive stream once the compute stream reached the call (the
 * destination may be arena memory still in use before it), and the host
 * waits for it with the runtime's deadline, as the MPI path's receive
 * blocks.  Sends and receives on separate streams are what keeps two
 * stages sending to each other at once (1F1B) from deadlocking.
 *
 * The generated code calls hetrt_send / hetrt_recv (runtime/stage/stage_exec.c);
 * they ask the backend first (stage_be_transfer, below), which moves the rows
 * when the xfer has an NCCL link and otherwise leaves them to the shared
 * CPU-mediated path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_cuda_internal.h"
#include "stage_links.h"

static CudaBe *be_of(StageRt *rt) { return (CudaBe *)rt->be; }

/* Rank of (stage, dp rank) in the link's communicators. */
static int link_rank(const StageRt *rt, const CudaLink *l, int stage, int dp_rank) {
    return (stage == l->lo ? 0 : rt->ctx.stage_dp[l->lo]) + dp_rank;
}

/* One byte from every sender rank to every receiver rank of direction d. */
static int warm_up(StageRt *rt, CudaLink *l, int d, char *dbuf, const char *what) {
    CudaBe *b = be_of(rt);
    int me = rt->cfg.stage, src = d == 0 ? l->lo : l->hi, dst = d == 0 ? l->hi : l->lo;
    int nsrc = rt->ctx.stage_dp[src], ndst = rt->ctx.stage_dp[dst];
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; r == ncclSuccess && i < (me == src ? ndst : nsrc); i++) {
        if (me == src)
            r = ncclSend(dbuf, 1, ncclInt8, link_rank(rt, l, dst, i), l->dir[d].comm, b->k.stream);
        else
            r = ncclRecv(dbuf + i, 1, ncclInt8, link_rank(rt, l, src, i), l->dir[d].comm,
                         b->k.stream);
    }
    ncclResult_t r2 = ncclGroupEnd();
    if (r == ncclSuccess) r = r2;
    if (r != ncclSuccess) {
        rt_log_error("%s: connecting: %s", what, ncclGetErrorString(r));
        return 1;
    }
    return cuda_wait_stream(rt, b->k.stream, l->dir[d].comm, what);
}

static int make_link(StageRt *rt, int peer, char *dbuf, int *used) {
    CudaBe *b = be_of(rt);
    int me = rt->cfg.stage;
    CudaLink l;
    memset(&l, 0, sizeof l);
    l.peer = peer;
    l.lo = me < peer ? me : peer;
    l.hi = me < peer ? peer : me;
    l.comm = MPI_COMM_NULL;
    char what[96];
    snprintf(what, sizeof what, "NCCL link between stages %d and %d", l.lo, l.hi);
    int nlo = rt->ctx.stage_dp[l.lo], nhi = rt->ctx.stage_dp[l.hi];
    int *ranks = malloc(sizeof(int) * (size_t)(nlo + nhi));
    if (!ranks) return 1;
    for (int i = 0; i < nlo; i++) ranks[i] = rt_stage_rank(&rt->ctx, l.lo, i);
    for (int i = 0; i < nhi; i++) ranks[nlo + i] = rt_stage_rank(&rt->ctx, l.hi, i);
    MPI_Group world, grp;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, nlo + nhi, ranks, &grp);
    free(ranks);
    int tag = 0x4c00 + l.lo * rt->ctx.nstages + l.hi;
    int mrc = MPI_Comm_create_group(MPI_COMM_WORLD, grp, tag, &l.comm);
    MPI_Group_free(&grp);
    MPI_Group_free(&world);
    if (mrc != MPI_SUCCESS) {
        rt_log_error("%s: MPI_Comm_create_group failed", what);
        return 1;
    }
    if (cuda_group_decide(rt, &l.dir[0], l.comm, what) ||
        cuda_group_decide(rt, &l.dir[1], l.comm, what))
        goto fail;
    if (!l.dir[0].nccl || !l.dir[1].nccl) {
        /* the same inputs give every member the same answer for both */
        if (getenv("HETRT_VERBOSE") && rt->ctx.dp_rank == 0)
            fprintf(stderr, "[hetrt] stage %d: link to stage %d is direct in the cluster but "
                    "CPU-mediated here (ranks share a GPU, or HETRT_TRANSPORT=cpu)\n", me, peer);
        for (int d = 0; d < 2; d++)
            if (l.dir[d].nccl) ncclCommDestroy(l.dir[d].comm);
        MPI_Comm_free(&l.comm);
        return 0;
    }
    if (warm_up(rt, &l, 0, dbuf, what) || warm_up(rt, &l, 1, dbuf, what)) goto fail;
    b->links[(*used)++] = l;
    if (getenv("HETRT_VERBOSE") && rt->ctx.dp_rank == 0)
        fprintf(stderr, "[hetrt] stage %d: link to stage %d: NCCL point-to-point\n", me, peer);
    return 0;
fail:
    for (int d = 0; d < 2; d++)
        if (l.dir[d].nccl) ncclCommDestroy(l.dir[d].comm);
    if (l.comm != MPI_COMM_NULL) MPI_Comm_free(&l.comm);
    return 1;
}

int stage_cuda_links_setup(StageRt *rt) {
    CudaBe *b = be_of(rt);
    int S = rt->cfg.nstages, me = rt->cfg.stage, rc = 0;
    unsigned char *tr = calloc((size_t)S + 1, 1);
    char err[256];
    if (!tr) return 1;
    if (stage_links_parse(rt->desc->config, me, S, tr, err, sizeof err)) {
        rt_log_error("stage %d: %s", me, err);
        free(tr);
        return 1;
    }
    int want = 0;
    for (int p = 0; p < S; p++) {
        /* with tensor parallelism rows travel as TP pieces and are
         * all-gathered in the receiving TP group (rt_redistribute_rows):
         * the MPI path (both sides know it) */
        if (tr[p] == STAGE_LINK_DIRECT && (rt->ctx.stage_tp[me] > 1 || rt->ctx.stage_tp[p] > 1))
            tr[p] = STAGE_LINK_CPU;
        want += tr[p] == STAGE_LINK_DIRECT;
    }
    if (!want) {
        free(tr);
        return 0;
    }
    char *dbuf = NULL;
    cudaError_t e;
    if (!(b->links = calloc((size_t)want, sizeof *b->links))) rc = 1;
    if (!rc && (e = cudaMalloc((void **)&dbuf, (size_t)rt->ctx.world_size + 1)) != cudaSuccess)
        rc = cuda_err("cudaMalloc (link warm-up)", e);
    /* ascending peer = ascending (lo, hi) among the pairs holding this rank */
    for (int p = 0; p < S && !rc; p++)
        if (tr[p] == STAGE_LINK_DIRECT) rc = make_link(rt, p, dbuf, &b->nlinks);
    if (dbuf) cudaFree(dbuf);
    free(tr);
    if (rc || !b->nlinks) return rc;
    if ((e = cudaStreamCreateWithFlags(&b->send_stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&b->recv_stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&b->compute_mark, cudaEventDisableTiming)) != cudaSuccess)
        return cuda_err("link streams", e);
    return 0;
}

void stage_cuda_links_teardown(StageRt *rt) {
    CudaBe *b = be_of(rt);
    if (b->send_stream) cuda_wait_stream(rt, b->send_stream, NULL, "NCCL link sends at exit");
    for (int i = 0; i < b->nstaging; i++) {
        if (b->staging[i].buf) cudaFree(b->staging[i].buf);
        if (b->staging[i].done) cudaEventDestroy(b->staging[i].done);
    }
    free(b->staging);
    b->staging = NULL;
    b->nstaging = 0;
    for (int i = 0; i < b->nlinks; i++) {
        for (int d = 0; d < 2; d++) ncclCommDestroy(b->links[i].dir[d].comm);
        MPI_Comm_free(&b->links[i].comm);
    }
    free(b->links);
    b->links = NULL;
    b->nlinks = 0;
    if (b->send_stream) cudaStreamDestroy(b->send_stream);
    if (b->recv_stream) cudaStreamDestroy(b->recv_stream);
    if (b->compute_mark) cudaEventDestroy(b->compute_mark);
    b->send_stream = b->recv_stream = NULL;
    b->compute_mark = NULL;
}

/* The NCCL link for boundary transfer `xfer` (this direction), or NULL:
 * the mediated entry then runs it (and reports any misuse). */
static CudaLink *nccl_link(StageRt *rt, int32_t xfer, int send) {
    CudaBe *b = rt ? be_of(rt) : NULL;
    if (!b || !b->nlinks || xfer < 0 || xfer >= rt->cfg.nxfers) return NULL;
    const StageXfer *x = &rt->cfg.xfers[xfer];
    if (x->send != send) return NULL;
    for (int i = 0; i < b->nlinks; i++)
        if (b->links[i].peer == x->peer) return &b->links[i];
    return NULL;
}

/* A free staging buffer of >= n bytes: one whose send completed, else a new one. */
static CudaStaging *staging_get(StageRt *rt, size_t n) {
    CudaBe *b = be_of(rt);
    for (int i = 0; i < b->nstaging; i++) {
        CudaStaging *s = &b->staging[i];
        if (s->busy && cudaEventQuery(s->done) == cudaSuccess) s->busy = 0;
        if (!s->busy && s->cap >= n) return s;
    }
    CudaStaging *ns = realloc(b->staging, sizeof *ns * (size_t)(b->nstaging + 1));
    if (!ns) return NULL;
    b->staging = ns;
    CudaStaging *s = &b->staging[b->nstaging];
    memset(s, 0, sizeof *s);
    if (cudaMalloc(&s->buf, n ? n : 16) != cudaSuccess) return NULL;
    if (cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming) != cudaSuccess) {
        cudaFree(s->buf);
        return NULL;
    }
    s->cap = n;
    b->nstaging++;
    return s;
}

/* This rank's overlaps of the redistribution src_stage -> dst_stage, as
 * one NCCL group on stream st. */
static int p2p(StageRt *rt, CudaLink *l, const StageXfer *x, int send, void *buf, cudaStream_t st,
               const char *what) {
    int me = rt->cfg.stage, src = send ? me : x->peer, dst = send ? x->peer : me;
    int dps = rt->ctx.stage_dp[src], dpd = rt->ctx.stage_dp[dst];
    RtOverlap *ov = malloc(sizeof *ov * (size_t)(dps + dpd));
    if (!ov) return 1;
    int nov = rt_stage_row_overlaps(&rt->ctx, src, dst, x->rows, 0, ov);
    int64_t my_start, my_count; /* the stages' row tables (heterogeneous DP) */
    rt_stage_row_split(&rt->ctx, me, x->rows, rt->ctx.dp_rank, &my_start, &my_count);
    CudaGroup *g = &l->dir[src == l->lo ? 0 : 1];
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < nov && r == ncclSuccess; i++) {
        const RtOverlap *o = &ov[i];
        char *p = (char *)buf + (size_t)(o->start - my_start) * (size_t)x->row_bytes;
        size_t bytes = (size_t)o->count * (size_t)x->row_bytes;
        if (send && o->src == rt->ctx.dp_rank)
            r = ncclSend(p, bytes, ncclInt8, link_rank(rt, l, dst, o->dst), g->comm, st);
        else if (!send && o->dst == rt->ctx.dp_rank)
            r = ncclRecv(p, bytes, ncclInt8, link_rank(rt, l, src, o->src), g->comm, st);
    }
    ncclResult_t r2 = ncclGroupEnd();
    free(ov);
    if (r == ncclSuccess) r = r2;
    if (r != ncclSuccess) {
        rt_log_error("%s: NCCL: %s", what, ncclGetErrorString(r));
        return 1;
    }
    return 0;
}

static void describe(StageRt *rt, const StageXfer *x, int send, char *what, size_t cap) {
    snprintf(what, cap, "%s %s %d of microbatch %d (step %lld) %s stage %d (NCCL)",
             x->grad ? "gradient" : "activation", send ? "send" : "recv", x->id, rt->micro,
             (long long)rt->step + 1, send ? "to" : "from", x->peer);
}

static int32_t nccl_send(StageRt *rt, CudaLink *l, int32_t xfer, const void *src) {
    CudaBe *b = be_of(rt);
    const StageXfer *x = &rt->cfg.xfers[xfer];
    char what[160];
    describe(rt, x, 1, what, sizeof what);
    size_t nb = (size_t)(rt->cfg.local_rows * x->row_bytes);
    CudaStaging *s = staging_get(rt, nb);
    if (!s) {
        rt_log_error("%s: no device memory for %zu staging bytes", what, nb);
        return 1;
    }
    cudaError_t e;
    if ((nb && (e = cudaMemcpyAsync(s->buf, src, nb, cudaMemcpyDeviceToDevice, b->k.stream)) !=
                   cudaSuccess) ||
        (e = cudaEventRecord(b->compute_mark, b->k.stream)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(b->send_stream, b->compute_mark, 0)) != cudaSuccess)
        return cuda_err(what, e);
    if (p2p(rt, l, x, 1, s->buf, b->send_stream, what)) return 1;
    if ((e = cudaEventRecord(s->done, b->send_stream)) != cudaSuccess) return cuda_err(what, e);
    s->busy = 1;
    return 0;
}

static int32_t nccl_recv(StageRt *rt, CudaLink *l, int32_t xfer, void *dst) {
    CudaBe *b = be_of(rt);
    const StageXfer *x = &rt->cfg.xfers[xfer];
    char what[160];
    describe(rt, x, 0, what, sizeof what);
    cudaError_t e;
    if ((e = cudaEventRecord(b->compute_mark, b->k.stream)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(b->recv_stream, b->compute_mark, 0)) != cudaSuccess)
        return cuda_err(what, e);
    if (p2p(rt, l, x, 0, dst, b->recv_stream, what)) return 1;
    /* the host waits (deadline, NCCL errors), as the MPI path's receive does:
     * the compute stream's later work then sees the rows */
    return cuda_wait_stream(rt, b->recv_stream, l->dir[x->peer == l->lo ? 0 : 1].comm, what);
}

/* Metrics and --trace (runtime/stage/stage_metrics.c), as the mediated
 * path's transfer() counts them: the host time of the call -- enqueueing a
 * send, waiting for a receive's rows -- is communication (send) or bubble
 * (receive), not compute. */
static int32_t timed(StageRt *rt, int32_t xfer, int send, int32_t rc, double t0) {
    double t1 = stage_now();
    const StageXfer *x = &rt->cfg.xfers[xfer];
    if (send) rt->met.in_fn_send += t1 - t0;
    else rt->met.in_fn_recv += t1 - t0;
    stage_span(rt, send ? (x->grad ? 'R' : 'S') : 'W', rt->micro, t0, t1);
    return rc;
}

int stage_be_transfer(StageRt *rt, int32_t xfer, void *dst, const void *src, int send,
                      int32_t *rc) {
    CudaLink *l = nccl_link(rt, xfer, send);
    if (!l) return 0; /* the mediated path, timed in stage_exec.c */
    double t0 = stage_now();
    *rc = timed(rt, xfer, send, send ? nccl_send(rt, l, xfer, src) : nccl_recv(rt, l, xfer, dst),
                t0);
    return 1;
}
