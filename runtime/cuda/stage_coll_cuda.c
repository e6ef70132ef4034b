/* Tensor-parallel and ZeRO collectives of the CUDA backend (issue 9, part
 * 5): the stage_be_tp_allreduce / stage_be_reduce_scatter /
 * stage_be_allgather hooks of stage_internal.h on device (arena) buffers.
 *
 * Each group -- the stage's TP group (ctx.tp_comm) and its DP group
 * (ctx.dp_comm, the communicator the gradient all-reduce of
 * stage_backend_cuda.c already uses: one NCCL communicator serves both) --
 * is decided collectively at its first use (cuda_group_decide): NCCL when
 * every member has its own GPU and HETRT_TRANSPORT is not `cpu`, the
 * ncclUniqueId bootstrapped over MPI; otherwise CPU-mediated (device ->
 * host, the host runtime's MPI collective, host -> device), which is also
 * what ranks sharing one GPU get (NCCL forbids two ranks of a communicator
 * on one device).  Every member calls these in the same order (the TP
 * all-reduces in the generated code's order, the ZeRO calls in stage_sync.c's
 * parameter order), so the lazy decision is collective.
 *
 * NCCL calls run on the executor's (compute) stream and the host waits for
 * them with the runtime's deadline (cuda_wait_stream), like the gradient
 * all-reduce: a dead peer ends the job instead of hanging it.  That wait is
 * a host synchronisation per TP all-reduce (docs/CUDA.md: not overlapped
 * yet).
 *
 * ZeRO splits a tensor of n floats over the DP group by rt_row_split(n, dp,
 * r) (docs/RUNTIME.md), which is uneven when dp does not divide n.
 * ncclReduceScatter / ncclAllGather need equal counts, so they run when dp
 * divides n; otherwise the same collective is a group of per-root
 * ncclReduce / ncclBroadcast calls over each rank's range (NCCL's
 * documented way of a "v" collective), in one ncclGroupStart/End. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_cuda_internal.h"

static CudaBe *be_of(StageRt *rt) { return (CudaBe *)rt->be; }
static cudaStream_t stream(StageRt *rt) { return be_of(rt)->k.stream; }

/* The NCCL reduction of each StageRedOp (the MPI one is stage_red_mpi):
 * a new reduction is one row here. */
static const ncclRedOp_t nccl_red[STAGE_RED_COUNT] = {
    [STAGE_RED_SUM] = ncclSum,
    [STAGE_RED_MAX] = ncclMax,
};

/* comm's size; decides g's transport at its first use (collective), and
 * with HETRT_VERBOSE says which (tests/cuda/test_cuda_tp_zero.py checks it
 * against the GPU count). */
static int group_ready(StageRt *rt, CudaGroup *g, MPI_Comm comm, const char *group, int *size,
                       const char *what) {
    *size = 1;
    if (comm == MPI_COMM_NULL) return 0;
    MPI_Comm_size(comm, size);
    if (*size <= 1 || g->decided) return 0;
    if (cuda_group_decide(rt, g, comm, what)) return 1;
    if (getenv("HETRT_VERBOSE"))
        fprintf(stderr, "[hetrt] stage %d, dp rank %d, tp rank %d: %s group of %d ranks: %s\n",
                rt->cfg.stage, rt->ctx.dp_rank, rt->ctx.tp_rank, group, *size,
                g->nccl ? "NCCL" : "CPU-mediated (MPI on host copies)");
    return 0;
}

static int nccl_check(ncclResult_t r, const char *call, const char *what) {
    if (r == ncclSuccess) return 0;
    rt_log_error("%s: %s: %s", what, call, ncclGetErrorString(r));
    return 1;
}

/* An uneven split of n over the dp ranks (rt_row_split), which
 * ncclReduceScatter / ncclAllGather (equal counts) cannot take: one call
 * per rank q's range [s, s + c) in one NCCL group.  slice NULL: the
 * reduce-scatter, ncclReduce of buf's range onto q in place; else the
 * all-gather, ncclBroadcast of q's slice into buf's range. */
static int nccl_per_range(StageRt *rt, CudaGroup *g, int64_t n, int dp, const float *slice,
                          float *buf, const char *what) {
    ncclResult_t r = ncclGroupStart();
    for (int q = 0; q < dp && r == ncclSuccess; q++) {
        int64_t s, c;
        rt_row_split(n, dp, q, &s, &c);
        if (c <= 0) continue;
        if (slice) /* sendbuff is read on the root only */
            r = ncclBroadcast(slice, buf + s, (size_t)c, ncclFloat32, q, g->comm, stream(rt));
        else
            r = ncclReduce(buf + s, buf + s, (size_t)c, ncclFloat32, ncclSum, q, g->comm,
                           stream(rt));
    }
    ncclResult_t r2 = ncclGroupEnd();
    const char *call = slice ? "ncclBroadcast (per DP rank's range)"
                             : "ncclReduce (per DP rank's range)";
    return nccl_check(r != ncclSuccess ? r : r2, call, what);
}

/* --tp-reduce-dtype bf16 is the host backend's (hetc compile refuses it
 * with --backend cuda; stage_be_setup refuses the config record) */
int stage_be_tp_allreduce_bf16(StageRt *rt, float *buf, int64_t n, const char *what) {
    (void)buf;
    (void)n;
    rt_log_error("%s: TP sums in bf16 run on the host backend only", what);
    return 1;
}

int stage_be_tp_allreduce(StageRt *rt, float *buf, int64_t n, StageRedOp op, const char *what) {
    CudaBe *b = be_of(rt);
    int size;
    if ((int)op < 0 || op >= STAGE_RED_COUNT) {
        rt_log_error("%s: no reduction %d", what, (int)op);
        return 1;
    }
    if (n <= 0) return n < 0;
    if (group_ready(rt, &b->tp_group, rt->ctx.tp_comm, "TP", &size, what)) return 1;
    if (size <= 1) return 0;
    if (b->tp_group.nccl) {
        if (nccl_check(ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, nccl_red[op],
                                     b->tp_group.comm, stream(rt)),
                       "ncclAllReduce", what))
            return 1;
        return cuda_wait_stream(rt, stream(rt), b->tp_group.comm, what);
    }
    size_t nb = (size_t)n * sizeof(float);
    float *h = stage_host_buf(rt, nb);
    if (!h || stage_be_get(rt, h, buf, nb) ||
        rt_allreduce(&rt->ctx, rt->ctx.tp_comm, h, (size_t)n, MPI_FLOAT, stage_red_mpi(op), what))
        return 1;
    return stage_be_put(rt, buf, h, nb);
}

int stage_be_reduce_scatter(StageRt *rt, float *buf, int64_t n, const char *what) {
    CudaBe *b = be_of(rt);
    CudaGroup *g = &b->groups[0]; /* the DP group */
    int dp;
    if (n <= 0) return n < 0;
    if (group_ready(rt, g, rt->ctx.dp_comm, "DP", &dp, what)) return 1;
    if (dp <= 1) return 0;
    int me = rt->ctx.dp_rank;
    int64_t start, count;
    rt_row_split(n, dp, me, &start, &count);
    if (!g->nccl) {
        size_t nb = (size_t)n * sizeof(float);
        float *h = stage_host_buf(rt, nb);
        if (!h || stage_be_get(rt, h, buf, nb) ||
            rt_dp_reduce_scatter_f32(&rt->ctx, h, (size_t)n, what))
            return 1;
        return stage_be_put(rt, buf, h, (size_t)count * sizeof(float));
    }
    if (n % dp == 0) { /* in place: rank r's result lands at buf + r * count */
        if (nccl_check(ncclReduceScatter(buf, buf + start, (size_t)count, ncclFloat32, ncclSum,
                                         g->comm, stream(rt)),
                       "ncclReduceScatter", what))
            return 1;
    } else {
        if (nccl_per_range(rt, g, n, dp, NULL, buf, what)) return 1;
    }
    /* the contract's buf[0 .. count): for rank r >= 1, start >= count_0 >=
     * count, so the two ranges do not overlap */
    if (start > 0 && stage_be_copy(rt, buf, buf + start, (size_t)count * sizeof(float)))
        return 1;
    return cuda_wait_stream(rt, stream(rt), g->comm, what);
}

int stage_be_allgather(StageRt *rt, const float *slice, float *full, int64_t n,
                       const char *what) {
    CudaBe *b = be_of(rt);
    CudaGroup *g = &b->groups[0];
    int dp;
    if (n <= 0) return n < 0;
    if (group_ready(rt, g, rt->ctx.dp_comm, "DP", &dp, what)) return 1;
    if (dp <= 1) return stage_be_copy(rt, full, slice, (size_t)n * sizeof(float));
    int64_t start, count;
    rt_row_split(n, dp, rt->ctx.dp_rank, &start, &count);
    if (!g->nccl) { /* host: [0, n) the full tensor, then this rank's slice */
        size_t nb = (size_t)n * sizeof(float);
        float *h = stage_host_buf(rt, nb + (size_t)count * sizeof(float) + 1);
        if (!h || stage_be_get(rt, h + n, slice, (size_t)count * sizeof(float)) ||
            rt_dp_allgather_f32(&rt->ctx, h + n, h, (size_t)n, what))
            return 1;
        return stage_be_put(rt, full, h, nb);
    }
    if (n % dp == 0) {
        if (nccl_check(ncclAllGather(slice, full, (size_t)count, ncclFloat32, g->comm,
                                     stream(rt)),
                       "ncclAllGather", what))
            return 1;
    } else {
        if (nccl_per_range(rt, g, n, dp, slice, full, what)) return 1;
    }
    return cuda_wait_stream(rt, stream(rt), g->comm, what);
}
