/* What the CUDA stage backend's files share (stage_backend_cuda.c: arena,
 * kernel context, gradient all-reduce; stage_p2p_cuda.c: NCCL point-to-point stage
 * links).  Not an interface beyond runtime/cuda. */
#ifndef HETRT_STAGE_CUDA_INTERNAL_H
#define HETRT_STAGE_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <nccl.h>

#include "hkc.h"
#include "stage_internal.h"

/* A reduction group: the DP group (index 0) or shared parameter s (1 + s),
 * the TP group (CudaBe.tp_group); also one direction of a stage link. */
typedef struct CudaGroup {
    int decided;  /* transport chosen */
    int nccl;     /* 1: NCCL, 0: CPU-mediated (MPI on host copies) */
    ncclComm_t comm;
} CudaGroup;

/* A device staging copy of one NCCL send (the arena region may be reused
 * before the send completes, exactly like the MPI path's deferred sends). */
typedef struct CudaStaging {
    void *buf;
    size_t cap;
    cudaEvent_t done; /* recorded on the send stream after the send */
    int busy;
} CudaStaging;

/* One `link PEER direct` boundary run over NCCL point-to-point. */
typedef struct CudaLink {
    int peer;
    int lo, hi;          /* the two stages, lo < hi */
    MPI_Comm comm;       /* lo's ranks then hi's ranks */
    CudaGroup dir[2];    /* [0]: lo -> hi (activations), [1]: hi -> lo (gradients) */
} CudaLink;

typedef struct CudaBe {
    int device, ndev, slot;      /* slot: stage_device_slot's, device = slot % ndev */
    int force_cpu;      /* HETRT_TRANSPORT=cpu */
    HkcCtx k;           /* stream and cuBLASLt of every kernel and collective (and of the
                         * node interpreter, which borrows it: stage_be_kernel_ctx) */
    int k_up;
    CudaGroup *groups;  /* [1 + nshared]; groups[0] (DP) also carries ZeRO's collectives */
    CudaGroup tp_group; /* the stage's TP group (stage_coll_cuda.c) */
    double *dsum;       /* device double for sums of squares */
    void *kscratch;     /* device scratch of direct kernel calls (stage_kernels_cuda.c): */
    size_t kscratch_bytes; /* grown at the first steps, then reused (no allocation later) */
    int *kbad;          /* device flag of the id / target checks of direct calls */
    /* device copies of the program's constants that direct calls read (the
     * bytes live in the binary, host memory): made at their first use, keyed
     * by the constant's address, freed at teardown */
    struct CudaConst *consts;
    int nconsts, capconsts;
    /* the generated fused kernels' PTX modules, loaded at their first launch
     * (hetrt_cu_launch), keyed by the module text's address */
    struct CudaPtx *ptx;
    int nptx, capptx;
    /* NCCL stage links (stage_p2p_cuda.c); the TP and ZeRO collectives are in
     * stage_coll_cuda.c */
    CudaLink *links;    /* only the links that use NCCL */
    int nlinks;
    cudaStream_t send_stream, recv_stream;
    cudaEvent_t compute_mark; /* "the compute stream got this far" */
    CudaStaging *staging;
    int nstaging;
} CudaBe;

typedef struct CudaConst {
    const void *host;
    void *dev;
    size_t bytes;
} CudaConst;

typedef struct CudaPtx {
    const char *text;
    cudaLibrary_t lib;
    cudaKernel_t kernel;
} CudaPtx;

int cuda_err(const char *what, cudaError_t e); /* rt_log_error, returns 1 */
/* The direct calls' kernel context (NULL outside hetrt_stage_main, said);
 * their status: 0, or 1 after logging entry's error err. */
HkcCtx *cu_kctx(const char *entry);
int32_t cu_done(const char *entry, int rc, const char *err);
/* The direct calls' device scratch, grown to n bytes (NULL after an error
 * naming entry); their constants' device copies (stage_kernels_cuda.c). */
void *cu_kscratch(const char *entry, size_t n);
const void *cu_const(const char *entry, const void *host, size_t bytes);
/* The direct calls' id check: 0, or 1 after naming what was out of range
 * (reads the backend's device flag back: a stream synchronisation). */
int cu_check_ids(const char *entry, const char *what);
/* Wait for stream st with the runtime's deadline; comm (or NULL) is polled
 * for NCCL errors and aborted on timeout. */
int cuda_wait_stream(StageRt *rt, cudaStream_t st, ncclComm_t comm, const char *what);
/* NCCL for g over comm when every member has its own GPU (and
 * HETRT_TRANSPORT is not cpu); collective over comm. */
int cuda_group_decide(StageRt *rt, CudaGroup *g, MPI_Comm comm, const char *what);

/* The `link` records: communicators of the direct links, collectively with
 * the peers (stage_be_setup); and their release (stage_be_teardown). */
int stage_cuda_links_setup(StageRt *rt);
void stage_cuda_links_teardown(StageRt *rt);

#endif
