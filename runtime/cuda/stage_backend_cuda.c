/* The CUDA backend of the stage runtime (library hetrt_stage_cuda): the
 * arena is one cudaMalloc, nodes run on the device executor of the node
 * interpreter (interp/cuda, on this backend's stream: stage_be_kernel_ctx),
 * gradients are summed with NCCL where every rank of the group has its own
 * GPU, otherwise through host memory and MPI (the CPU-mediated transport:
 * NCCL does not allow two ranks of one communicator on one GPU).  Boundary
 * transfers of `link PEER direct` records use NCCL point-to-point under the
 * same condition (stage_p2p_cuda.c); the others are CPU-mediated
 * (stage_exec.c stages them through the host).  Tensor-parallel all-reduces
 * and ZeRO's reduce-scatter / all-gather: stage_coll_cuda.c.
 * The shared runtime (stage_main.c, stage_sync.c, stage_ckpt.c,
 * stage_exec.c) calls these through stage_internal.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "fnv1a.h"
#include "stage_cuda_internal.h"

static CudaBe *be_of(StageRt *rt) { return (CudaBe *)rt->be; }
static cudaStream_t stream(StageRt *rt) { return be_of(rt)->k.stream; }

int cuda_err(const char *what, cudaError_t e) {
    rt_log_error("%s: %s", what, cudaGetErrorString(e));
    return 1;
}

const char *stage_be_name(void) { return "cuda"; }
int stage_be_is_host(void) { return 0; }

int stage_be_probe(char *err, size_t errlen) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(err, errlen,
                 "no CUDA device (%s). This stage binary was compiled with --backend=cuda; "
                 "run it on a machine with an NVIDIA GPU and driver, or recompile with "
                 "--backend=host",
                 e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
        return -1;
    }
    return 0;
}

int stage_be_setup(StageRt *rt) {
    if (rt->cfg.grad_reduce_bf16 || rt->cfg.tp_reduce_bf16) { /* hetc compile refuses both */
        rt_log_error("stage %d: '%s bf16' runs on the host backend only", rt->cfg.stage,
                     rt->cfg.grad_reduce_bf16 ? "grad_reduce" : "tp_reduce");
        return 1;
    }
    CudaBe *b = calloc(1, sizeof *b);
    if (!b) return 1;
    rt->be = b;
    /* ranks on this node, in world-rank order: the i-th with a device of its
     * own takes GPU i % ndev; a later ministage of a group takes its group
     * mate's (launch.sh's device_of, stage_binding.c) */
    int mate;
    if (stage_device_slot(rt, &b->slot, &mate)) return 1;
    cudaError_t e = cudaGetDeviceCount(&b->ndev);
    if (e != cudaSuccess || b->ndev < 1) return cuda_err("cudaGetDeviceCount", e);
    b->device = b->slot % b->ndev;
    if ((e = cudaSetDevice(b->device)) != cudaSuccess) return cuda_err("cudaSetDevice", e);
    const char *tr = getenv("HETRT_TRANSPORT");
    b->force_cpu = tr && !strcmp(tr, "cpu");
    char kerr[HKC_ERRLEN];
    if (hkc_ctx_init(&b->k, kerr)) {
        rt_log_error("stage %d: kernel context on GPU %d: %s", rt->cfg.stage, b->device, kerr);
        return 1;
    }
    b->k_up = 1;
    if ((e = cudaMalloc((void **)&b->dsum, sizeof(double))) != cudaSuccess)
        return cuda_err("cudaMalloc", e);
    b->groups = calloc((size_t)rt->cfg.nshared + 1, sizeof *b->groups);
    if (!b->groups) return 1;
    return stage_cuda_links_setup(rt);
}

void stage_be_teardown(StageRt *rt) {
    CudaBe *b = be_of(rt);
    if (!b) return;
    stage_cuda_links_teardown(rt);
    for (int i = 0; b->groups && i <= rt->cfg.nshared; i++)
        if (b->groups[i].nccl && b->groups[i].comm) ncclCommDestroy(b->groups[i].comm);
    free(b->groups);
    if (b->tp_group.nccl && b->tp_group.comm) ncclCommDestroy(b->tp_group.comm);
    if (b->dsum) cudaFree(b->dsum);
    if (b->kscratch) cudaFree(b->kscratch);
    if (b->kbad) cudaFree(b->kbad);
    for (int i = 0; i < b->nconsts; i++) cudaFree(b->consts[i].dev);
    free(b->consts);
    for (int i = 0; i < b->nptx; i++) cudaLibraryUnload(b->ptx[i].lib);
    free(b->ptx);
    if (b->k_up) hkc_ctx_free(&b->k);
    free(b);
    rt->be = NULL;
}

int stage_be_arena_alloc(StageRt *rt, size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 64);
    if (e != cudaSuccess) {
        cuda_err("cudaMalloc of the arena", e);
        return 1;
    }
    /* on the executor's stream, waited for: it does not order with the
     * legacy default stream */
    if ((e = cudaMemsetAsync(p, 0, bytes, stream(rt))) != cudaSuccess ||
        (e = cudaStreamSynchronize(stream(rt))) != cudaSuccess) {
        cudaFree(p);
        return cuda_err("cudaMemset of the arena", e);
    }
    rt->arena.base = p;
    rt->arena.size = bytes;
    return 0;
}

void stage_be_arena_free(StageRt *rt) {
    if (rt->arena.base) cudaFree(rt->arena.base);
    rt->arena.base = NULL;
    rt->arena.size = 0;
}

int stage_be_put(StageRt *rt, void *dst, const void *src, size_t n) {
    if (!n) return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream(rt));
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream(rt));
    return e == cudaSuccess ? 0 : cuda_err("host to device copy", e);
}

int stage_be_get(StageRt *rt, void *dst, const void *src, size_t n) {
    if (!n) return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream(rt));
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream(rt));
    return e == cudaSuccess ? 0 : cuda_err("device to host copy", e);
}

int stage_be_zero(StageRt *rt, void *dst, size_t n) {
    if (!n) return 0;
    cudaError_t e = cudaMemsetAsync(dst, 0, n, stream(rt));
    return e == cudaSuccess ? 0 : cuda_err("cudaMemsetAsync", e);
}

int stage_be_copy(StageRt *rt, void *dst, const void *src, size_t n) {
    if (!n || dst == src) return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream(rt));
    return e == cudaSuccess ? 0 : cuda_err("device copy", e);
}

int stage_be_axpy(StageRt *rt, float *y, const float *x, int64_t n, float alpha) {
    char e[HKC_ERRLEN];
    if (hkc_axpy_f32(&be_of(rt)->k, n, alpha, x, y, e)) {
        rt_log_error("gradient accumulation: %s", e);
        return 1;
    }
    return 0;
}

int stage_be_sumsq(StageRt *rt, const float *x, int64_t n, double *out) {
    char e[HKC_ERRLEN];
    CudaBe *b = be_of(rt);
    if (hkc_sumsq_f32(&b->k, x, n, b->dsum, e)) {
        rt_log_error("gradient norm: %s", e);
        return 1;
    }
    return stage_be_get(rt, out, b->dsum, sizeof *out);
}

int stage_be_round_sr(StageRt *rt, const float *x, uint16_t *y, int64_t n, int64_t key,
                      int64_t step) {
    char e[HKC_ERRLEN];
    if (hkc_round_bf16_sr(&be_of(rt)->k, x, y, n, key, step, e)) {
        rt_log_error("stochastic rounding of a weight copy: %s", e);
        return 1;
    }
    return 0;
}

/* Wait for the stream with the runtime's deadline (NCCL has none of its own):
 * a peer that died leaves the collective pending, and the job must end. */
int cuda_wait_stream(StageRt *rt, cudaStream_t st, ncclComm_t comm, const char *what) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long sleep_us = 1;
    for (;;) {
        cudaError_t e = cudaStreamQuery(st);
        if (e == cudaSuccess) return 0;
        if (e != cudaErrorNotReady) return cuda_err(what, e);
        ncclResult_t ae = ncclSuccess;
        if (comm && ncclCommGetAsyncError(comm, &ae) == ncclSuccess && ae != ncclSuccess &&
            ae != ncclInProgress) {
            rt_log_error("%s: NCCL: %s", what, ncclGetErrorString(ae));
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        double el = (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
        if (el > rt->ctx.timeout_s) {
            rt_log_error("timed out after %.1f s (HETRT_TIMEOUT_S) in %s (NCCL, stage %d, dp rank "
                         "%d)", el, what, rt->cfg.stage, rt->ctx.dp_rank);
            if (comm) ncclCommAbort(comm);
            return 1;
        }
        usleep((useconds_t)sleep_us);
        if (sleep_us < 1000) sleep_us *= 2;
    }
}

/* NCCL when every member has its own GPU (and HETRT_TRANSPORT is not cpu):
 * decided collectively, so all members agree. */
int cuda_group_decide(StageRt *rt, CudaGroup *g, MPI_Comm comm, const char *what) {
    CudaBe *b = be_of(rt);
    g->decided = 1;
    int size = 1, rank = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    if (size <= 1) return 0;
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    unsigned long long key = hetc_fnv1a64(host, strlen(host)); /* fnv1a(host), device */
    key = key * 131 + (unsigned long long)b->device;
    unsigned long long *keys = calloc((size_t)size, sizeof *keys);
    keys[rank] = key;
    /* an allgather through the runtime's timed all-reduce (others contribute 0) */
    if (rt_allreduce(&rt->ctx, comm, keys, (size_t)size, MPI_UNSIGNED_LONG_LONG, MPI_BOR, what)) {
        free(keys);
        return 1;
    }
    int distinct = 1;
    for (int i = 0; i < size; i++)
        for (int j = i + 1; j < size; j++) distinct &= keys[i] != keys[j];
    free(keys);
    int want = distinct && !b->force_cpu, all = want;
    if (rt_allreduce(&rt->ctx, comm, &all, 1, MPI_INT, MPI_MIN, what)) return 1;
    if (!all) return 0;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) {
        rt_log_error("%s: ncclGetUniqueId failed", what);
        return 1;
    }
    /* broadcast the id: bitwise OR with zeros elsewhere, timed like every collective */
    if (rt_allreduce(&rt->ctx, comm, &id, sizeof id, MPI_BYTE, MPI_BOR, what)) return 1;
    ncclResult_t r = ncclCommInitRank(&g->comm, size, id, rank);
    if (r != ncclSuccess) {
        rt_log_error("%s: ncclCommInitRank: %s", what, ncclGetErrorString(r));
        return 1;
    }
    g->nccl = 1;
    return 0;
}

int stage_be_allreduce(StageRt *rt, int shared, float *buf, int64_t n, const char *what) {
    CudaBe *b = be_of(rt);
    MPI_Comm comm = shared < 0 ? rt->ctx.dp_comm : rt->shared_comm[shared];
    if (comm == MPI_COMM_NULL || n == 0) return 0;
    int size = 1;
    MPI_Comm_size(comm, &size);
    if (size <= 1) return 0;
    /* one NCCL group per holder set: lines with the same holders share the
     * first one's communicator (stage_sync_setup) */
    CudaGroup *g = &b->groups[shared < 0 ? 0 : 1 + rt->shared_first[shared]];
    if (!g->decided && cuda_group_decide(rt, g, comm, what)) return 1;
    if (g->nccl) {
        ncclResult_t r = ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, g->comm,
                                       stream(rt));
        if (r != ncclSuccess) {
            rt_log_error("%s: ncclAllReduce: %s", what, ncclGetErrorString(r));
            return 1;
        }
        return cuda_wait_stream(rt, stream(rt), g->comm, what);
    }
    /* CPU-mediated: device -> host -> MPI -> host -> device */
    size_t nb = (size_t)n * sizeof(float);
    float *h = stage_host_buf(rt, nb);
    if (!h || stage_be_get(rt, h, buf, nb)) return 1;
    if (rt_allreduce(&rt->ctx, comm, h, (size_t)n, MPI_FLOAT, MPI_SUM, what)) return 1;
    return stage_be_put(rt, buf, h, nb);
}

void *stage_be_kernel_ctx(StageRt *rt) { return &be_of(rt)->k; }
