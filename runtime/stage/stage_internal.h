/* runtime/stage: what the stage main (stage_main.c), the hetrt_* entries
 * generated code calls (stage_exec.c), gradient sync (stage_sync.c) and
 * checkpoints (stage_ckpt.c) share.  Not a public interface: generated code
 * sees only runtime/abi/stage_abi.h.  No IR here: the runtime learns
 * everything from the config text (docs/STAGE_ABI.md). */
#ifndef HETRT_STAGE_INTERNAL_H
#define HETRT_STAGE_INTERNAL_H

#include <stdint.h>

#include "data_loader.h"
#include "lr_schedule.h"
#include "rt.h"
#include "rt_metrics.h"
#include "stage_abi.h"
#include "timeline_svg.h"

/* ------------------------------------------------------------ config */
typedef struct StageParam {
    char *name;
    int layer;   /* checkpoint layer (1-based model layer) */
    int shared;  /* 1: also held by other stages (a `shared` line names them) */
    int64_t numel;
    int64_t off_param, off_acc, off_m, off_v; /* off_v -1 for SGD */
    int shared_index; /* index into StageConfig.shared, -1 if not shared */
    int tpshard;      /* index into StageConfig.tpshards, -1 if replicated over TP */
    /* ZeRO (a `zslice` record): the update runs on this DP rank's flat slice
     * rt_row_split(numel, dp, dp_rank), padded to zlen elements; its
     * parameter slice lives at off_zp and m / v hold zlen elements.
     * Without ZeRO zlen = numel and off_zp = off_param. */
    int64_t zlen, off_zp;
    /* The arena tensor's shape (the param record's `shape` field: TP rank
     * 0's slice for a TP-sharded parameter); rank -1 without one (an older
     * compiler's record: checkpoints then treat it as 1-D [numel]). */
    int rank;
    int64_t shape[RT_CKPT_MAX_DIMS];
} StageParam;

/* A `tpshard` record (docs/STAGE_ABI.md): the param's arena tensor is TP
 * rank r's slice along `axis` of the unsharded tensor (extent `full`): the
 * concatenation of [start[k] + r len[k], start[k] + (r+1) len[k]). */
#define STAGE_TP_MAX_RANGES 8
typedef struct StageTpShard {
    char *name;
    int param;   /* index into StageConfig.params */
    int axis;
    int64_t full;
    int nranges;
    int64_t start[STAGE_TP_MAX_RANGES], len[STAGE_TP_MAX_RANGES];
} StageTpShard;

typedef struct StageXfer {
    int id;        /* plan-wide id (tags) */
    int send;      /* 1 send, 0 recv */
    int grad;      /* 0 act, 1 grad */
    int peer;
    int64_t rows, row_bytes;
} StageXfer;

typedef struct StageShared {
    char *name;
    int nstages;
    int *stages; /* ascending as written */
} StageShared;

typedef struct StageConfig {
    int stage, nstages;
    int *dp;                 /* [nstages] */
    int64_t rows, local_rows, seq, accum, steps, warmup;
    /* `rowtable S N0 .. N(dp-1)` records (heterogeneous DP): rowtab[s] is
     * stage s's rows per DP rank, NULL where the stage has none (rt_row_split) */
    int64_t **rowtab;
    /* `pipes F0 .. F(J-1)` (several pipelines whose stages do not line up,
     * AutoHet's DP groups): pipeline j is stages [F(j), F(j+1)), each a
     * whole copy of the model running rows [j rows, (j + 1) rows) of every
     * data microbatch of J x rows rows.  npipes 1, pipe_first NULL: one. */
    int npipes;
    int *pipe_first;
    int layers;
    int token_i32;           /* token_dtype i32 */
    int sgd;
    double lr;
    RtLrKind lr_kind;
    int64_t off_lr, off_step, off_grad_norm; /* -1 when absent */
    StageParam *params;
    int nparams;
    StageXfer *xfers;
    int nxfers;
    StageShared *shared;
    int nshared;
    int *tp;                 /* [nstages] TP degrees (`tp` record), NULL: 1 everywhere */
    StageTpShard *tpshards;
    int ntpshards;
    int zero;                /* ZeRO level of this stage (`zero` record), 0 without */
    int offload;             /* `offload 1`: parameters and optimizer state live in the
                              * host offload store (stage_offload.c), 0 without */
    int grad_reduce_bf16;    /* `grad_reduce bf16`: gradient all-reduces and
                              * reduce-scatters send bf16, summed in bf16 */
    int64_t tp_reduce_bf16;  /* `tp_reduce bf16 N`: the largest of the TP
                              * all-reduces the program sends as bf16
                              * (hetrt_tp_allreduce_bf16), elements; 0 without */
    uint64_t build_id;       /* hetc compile's build id (`build` record), 0 without */
    /* Metrics (records written by hetc compile; absent in older binaries):
     * `vocab V` the model's vocabulary (token ids must be below it),
     * `flops F` FLOPs one rank of this stage executes per microbatch
     * (forward + backward, op_cost over its train graph), `peak_flops P`
     * the peak FLOP/s of the plan's device this stage's ranks stand for,
     * `ptl S K MB T0 T1` one predicted timeline event (the plan's
     * simulated iteration; last stage only). */
    int64_t vocab;           /* 0: unknown */
    double flops_mb, peak_flops;
    TlSvgEvent *ptl;
    int nptl;
} StageConfig;

/* Parse the "hetc-stage 1" text (docs/STAGE_ABI.md).  Unknown record kinds
 * are ignored (newer compilers may add lines); malformed known records are
 * errors naming the line.  0 or -1 with err. */
int stage_config_parse(const char *text, StageConfig *c, char *err, size_t errlen);
void stage_config_free(StageConfig *c);
/* The pipeline of stage s (0 with one pipeline), and whether s is the last
 * stage of its pipeline (the one computing the loss). */
int stage_pipe_of(const StageConfig *c, int s);
int stage_pipe_last(const StageConfig *c, int s);

/* stage_tp.c: the `tp` / `tpshard` records.  stage_tp_parse_line returns 1
 * when the record is not one of them, 0 when parsed, -1 with err. */
int stage_tp_parse_line(StageConfig *c, char **f, int nf, int ln, char *err, size_t errlen);
int stage_tp_check(StageConfig *c, char *err, size_t errlen); /* after the last record */
void stage_tp_config_free(StageConfig *c);
/* This stage's TP degree (1 without a `tp` record). */
int stage_tp_degree(const StageConfig *c);

/* ------------------------------------------------------------ metrics, trace */
/* A predicted timeline event (`ptl` record): common/timeline_svg.h. */
typedef TlSvgEvent StageTlEv;

/* One measured span (stage_metrics.c).  kind: 'F' forward, 'B' backward,
 * 'S' activation send, 'R' gradient send, 'W' blocked in a receive,
 * 'Q' completing the step's sends, 'A' gradient all-reduce, 'U' update,
 * 'V' a validation forward (its sends and receives: 's', 'r', 'w'). */
typedef struct StageSpan {
    double t0, t1;  /* s since the run's common origin */
    int32_t step;   /* 1-based */
    int16_t mb;
    char kind;
    char pad;
} StageSpan;

typedef struct StageMet {
    int metrics, trace;       /* enabled */
    int root;                 /* world rank of the printer */
    double origin;            /* monotonic clock at the start barrier */
    double in_fn_send, in_fn_recv; /* send / recv time inside the running stage function */
    double compute, comm, bubble;  /* this step's sums */
    StageSpan *spans;
    int64_t nspans, cap;
    int64_t dropped;
    RtMetrics out;            /* the printer's metrics.jsonl */
    /* the printer's per-step gather and sums, allocated at its first step
     * and reused (no allocation in the step loop after step 1) */
    double *all, *step_sum;
    RtStageTimes *st;
} StageMet;

/* ------------------------------------------------------------ CPU offload
 * A stage compiled with `offload 1` (Zorse's CPU offload, issue 18 item 4;
 * docs/STAGES.md "CPU offload") keeps its parameters and optimizer state
 * (AdamW m / v or SGD's momentum; ZeRO: this rank's zlen slices) in the
 * offload store, host memory allocated apart from the arena and the one
 * copy that persists between steps.  The arena's regions for them are the
 * streamed working set: filled from the store before they are read,
 * written back after the update, and poisoned (NaN) in between, so a read
 * the streaming missed shows in the loss. */
typedef struct StageOffload {
    float *store;            /* NULL: the stage is not offloaded */
    int64_t *at;             /* [nparams][3] element offsets of param, m, v in store (-1) */
    int64_t param_bytes, opt_bytes; /* the store's two parts */
    int64_t in_bytes, out_bytes;    /* copied store -> arena / arena -> store this step */
    double copy_s;                  /* time spent copying this step */
} StageOffload;

enum { STAGE_OFF_PARAMS = 1, STAGE_OFF_OPT = 2 };

/* ------------------------------------------------------------ runtime state */
typedef struct StageRt {
    const HetcStageDesc *desc;
    StageConfig cfg;
    RtContext ctx;
    int ctx_up;
    RtArena arena;
    int interp_up;           /* hetrt_interp_open ran (a binary with hetrt_node calls) */
    RtDataLoader dl;
    int dl_open;
    int64_t *tok_in, *tok_tg; /* this rank's rows of the current microbatch */
    int64_t tok_mb;           /* data batch index loaded in tok_*, -1 none */
    int64_t step;             /* 0-based step being run */
    uint64_t run_id;          /* this run's id, stamped on its checkpoints (rt.h) */
    int micro;                /* microbatch being run */
    double step_loss;         /* sum of recorded losses this step */
    RtSendQueue sendq;        /* hetrt_send's deferred sends, completed each step */
    MPI_Comm *shared_comm;    /* [cfg.nshared]; MPI_COMM_NULL where this stage holds none */
    /* [cfg.nshared]: the first `shared` line with the same holder stages,
     * whose communicator line s uses (stage_sync_setup): a backend keeps
     * one group per holder set under that index */
    int *shared_first;
    /* [cfg.nshared]: the sorted, distinct element offsets (0 and numel
     * included) at which the cross-stage sum of shared parameter s is cut:
     * every ZeRO-2 holder's DP range boundaries, the same on every holder
     * (learnt at setup over shared_comm[s]; stage_sync.c shared_sum) */
    int64_t **shared_cut;
    int *shared_ncut;
    void *be;                 /* the backend's state (stage_backend_*.c) */
    void *stage_buf;          /* host staging for device backends (boundary rows, tokens) */
    size_t stage_buf_bytes;
    StageMet met;             /* metrics and --trace (stage_metrics.c) */
    StageOffload off;         /* `offload 1` stages (stage_offload.c) */
    RtDataLoader vdl;         /* --val-data, when given */
    int in_val;               /* 1: hetrt_tokens reads vdl batch val_batch */
    int64_t val_batch;
} StageRt;

/* ------------------------------------------------------------ bf16 wire
 * `grad_reduce bf16` (stage_bf16_wire.c): gradient reductions sent as bf16
 * through one buffer of the largest parameter, allocated at setup, and an
 * MPI op that sums bf16 pairwise.  `tp_reduce bf16 N`: the TP all-reduces
 * of activations and their gradients the same way, through a buffer of N.
 * Used by the host backend. */
typedef struct StageBf16Wire {
    MPI_Op op;     /* MPI_OP_NULL without grad_reduce bf16 */
    uint16_t *buf;
    int64_t cap;   /* elements */
} StageBf16Wire;
/* A wire of cap elements (none when cap is 0); what names it in errors. */
int stage_bf16_wire_setup(StageRt *rt, StageBf16Wire *w, int64_t cap, const char *what);
void stage_bf16_wire_teardown(StageBf16Wire *w);
/* In place over comm (DP group or a shared group); a no-op on one rank. */
int stage_bf16_allreduce(StageRt *rt, StageBf16Wire *w, MPI_Comm comm, float *buf, int64_t n,
                         const char *what);
/* rt_dp_reduce_scatter_f32's contract (this rank's slice at buf's front). */
int stage_bf16_reduce_scatter(StageRt *rt, StageBf16Wire *w, float *buf, int64_t n,
                              const char *what);

/* The one runtime state of this process (the hetrt_* entries take no
 * context argument: the generated code calls them with constants only). */
extern StageRt *hetrt_stage_rt;

/* Arena pointer, bounds-checked even in release builds: the runtime's own
 * accesses use offsets from the config text, not memplan-checked code. */
#define STAGE_AT(a, off, bytes) rt_arena_at_checked((a), (off), (bytes), __FILE__, __LINE__)

/* Die naming this rank (rt_die) -- the job cannot go on. */
#define STAGE_DIE(...) rt_die(__FILE__, __LINE__, __VA_ARGS__)

/* ------------------------------------------------------------ backend
 * Where the arena lives and how collectives run: stage_backend_host.c (host
 * memory, MPI) in hetrt_stage, runtime/cuda/stage_backend_cuda.c
 * (cudaMalloc'd arena, NCCL) in hetrt_stage_cuda.  Nodes a program still
 * interprets run in the interpreter library (interp/), on the backend's
 * kernel context (stage_be_kernel_ctx).  The
 * shared files never dereference an arena pointer themselves: they go
 * through these calls.  Each returns 0 or nonzero after rt_log_error. */
const char *stage_be_name(void);
/* Before MPI: 0 if this process can run (a device is there), else -1 with why. */
int stage_be_probe(char *err, size_t errlen);
int stage_be_setup(StageRt *rt);          /* after rt_init and the config, before stage_sync_setup:
                                           * per-group state is made on first use */
void stage_be_teardown(StageRt *rt);
int stage_be_arena_alloc(StageRt *rt, size_t bytes); /* zero-filled rt->arena */
void stage_be_arena_free(StageRt *rt);
int stage_be_is_host(void);               /* arena pointers are host memory */
/* One stderr line: this rank's stage, host, local rank on that host and device
 * (stage_binding.c); collective over MPI_COMM_WORLD. */
void stage_log_binding(const StageRt *rt);
/* This rank's device slot on its node (the GPU index before % visible GPUs)
 * and the world rank whose device it uses (itself unless it is a later
 * ministage of a group: HETRT_DEVICE_OF, launch.sh's device_of); collective
 * over MPI_COMM_WORLD.  0, or -1 after rt_log_error. */
int stage_device_slot(const StageRt *rt, int *slot, int *mate);
int stage_be_put(StageRt *rt, void *dst, const void *src, size_t n); /* host -> arena */
int stage_be_get(StageRt *rt, void *dst, const void *src, size_t n); /* arena -> host */
int stage_be_zero(StageRt *rt, void *dst, size_t n);
int stage_be_copy(StageRt *rt, void *dst, const void *src, size_t n);
int stage_be_axpy(StageRt *rt, float *y, const float *x, int64_t n, float alpha);
int stage_be_sumsq(StageRt *rt, const float *x, int64_t n, double *out);
/* y (bf16) = x (f32) rounded stochastically with (key, step) (hk_sr.h) */
int stage_be_round_sr(StageRt *rt, const float *x, uint16_t *y, int64_t n, int64_t key,
                      int64_t step);
/* In-place sum of n floats of the arena over the DP group (shared < 0) or
 * the group of shared parameter `shared` (rt->shared_comm[shared]). */
int stage_be_allreduce(StageRt *rt, int shared, float *buf, int64_t n, const char *what);
/* The reductions of the TP group's all-reduce (hetrt_tp_allreduce and its
 * variants, stage_tp.c).  A new one is an enum value here plus its row in
 * each backend's table: stage_red_mpi (stage_tp.c) and the NCCL table of
 * runtime/cuda/stage_coll_cuda.c. */
typedef enum StageRedOp { STAGE_RED_SUM, STAGE_RED_MAX, STAGE_RED_COUNT } StageRedOp;
MPI_Op stage_red_mpi(StageRedOp op);
/* In-place reduction `op` of n floats of the arena over the stage's TP
 * group (rt->ctx.tp_comm); a no-op without TP.  Host: MPI; CUDA: NCCL
 * (or CPU-mediated, like stage_be_allreduce). */
int stage_be_tp_allreduce(StageRt *rt, float *buf, int64_t n, StageRedOp op, const char *what);
/* The sum over the TP group sent and added as bf16 (`tp_reduce bf16`,
 * hetc compile --tp-reduce-dtype bf16): the host backend's bf16 wire over
 * tp_comm; the CUDA backend refuses it. */
int stage_be_tp_allreduce_bf16(StageRt *rt, float *buf, int64_t n, const char *what);
/* ZeRO over the DP group, on arena memory, with the contracts of
 * rt_dp_reduce_scatter_f32 / rt_dp_allgather_f32 (rt.h): reduce-scatter
 * leaves this rank's range rt_row_split(n, dp, dp_rank) of the DP sum in
 * buf[0 .. count); all-gather writes every rank's slice into full (a copy
 * on one rank).  Host: those MPI calls; CUDA: ncclReduceScatter /
 * ncclAllGather (or CPU-mediated). */
int stage_be_reduce_scatter(StageRt *rt, float *buf, int64_t n, const char *what);
int stage_be_allgather(StageRt *rt, const float *slice, float *full, int64_t n,
                       const char *what);
/* A boundary transfer (hetrt_send / hetrt_recv: send picks src or dst) over
 * a link of the backend's own (CUDA: NCCL between the two stages' GPUs,
 * runtime/cuda/stage_p2p_cuda.c), timed as stage_exec.c's transfer() times
 * the CPU-mediated one.  1 with *rc the call's status when the backend
 * moved the rows, 0 when it has no link for this xfer (the shared
 * CPU-mediated path runs then). */
int stage_be_transfer(StageRt *rt, int32_t xfer, void *dst, const void *src, int send,
                      int32_t *rc);
/* The backend's kernel context for the node interpreter (HetrtInterpEnv
 * kernel_ctx): NULL on the host, the HkcCtx on the CUDA backend. */
void *stage_be_kernel_ctx(StageRt *rt);
/* A host buffer of at least n bytes for staging (rt->stage_buf, grown). */
void *stage_host_buf(StageRt *rt, size_t n);

/* stage_sync.c */
int stage_sync_setup(StageRt *rt);           /* shared-parameter communicators */
void stage_sync_teardown(StageRt *rt);
/* DP sum, shared-parameter sum; returns the global gradient norm. */
int stage_sync_grads(StageRt *rt, double *norm);
/* ZeRO, around the update graph: stage_zero_pre_update fills each
 * parameter's slice buffer from the full parameter, stage_zero_post_update
 * all-gathers the updated slices into the full parameter on every DP
 * rank.  No-ops without ZeRO.  The range of this rank's slice: */
int stage_zero_pre_update(StageRt *rt);
int stage_zero_post_update(StageRt *rt);
void stage_zero_range(const StageRt *rt, const StageParam *p, int64_t *start, int64_t *count);
/* Elements of p's gradient accumulator: numel, or with ZeRO-2 zlen (this DP
 * rank's shard, filled by hetrt_accum_scatter every microbatch). */
int64_t stage_acc_len(const StageConfig *c, const StageParam *p);
/* Step loss summed over the last stage's DP group (valid there). */
int stage_sync_loss(StageRt *rt, double *loss);
/* Lowest stage holding parameter p (this stage unless shared). */
int stage_param_owner(const StageRt *rt, const StageParam *p);

/* stage_tp.c: checkpoint slicing.  A sharded tensor viewed as
 * [outer][dim][inner] with dim the sharded axis: `local` (this rank's
 * slice, dim = sum of len) <-> `full` (dim = t->full). */
int stage_tp_geometry(const StageTpShard *t, const int64_t *local_shape, int ndim,
                      int64_t *outer, int64_t *inner, int64_t *local_dim);
void stage_tp_slice(const StageTpShard *t, int rank, const float *full, float *local,
                    int64_t outer, int64_t inner);
void stage_tp_place(const StageTpShard *t, int rank, const float *local, float *full,
                    int64_t outer, int64_t inner);

/* stage_metrics.c */
double stage_now(void);
/* Record span [t0, t1] of kind k (microbatch mb, -1 none) when tracing. */
void stage_span(StageRt *rt, char k, int mb, double t0, double t1);
/* After MPI is up, on every rank (a collective): learn the printer's rank,
 * set the common clock origin. */
int stage_met_setup(StageRt *rt);
/* At the end of each step, on every rank (a gather when metrics are on):
 * the printer writes the step's metrics line.  val_loss NAN: none. */
int stage_met_step(StageRt *rt, const RtStepMetrics *base, double step_s);
/* frees what stage_met_step keeps between steps */
void stage_met_free(StageRt *rt);
/* At the end of the run, on every rank: the printer writes trace.json and
 * trace.svg beside `trace_dir`'s files (gathering every rank's spans). */
int stage_met_finish(StageRt *rt, const char *trace_json, const char *trace_svg);

/* stage_offload.c: all no-ops (0) on a stage without `offload 1`.
 * setup: after the arena is allocated and `init` ran, before any
 * checkpoint load: allocates the store, moves the arena's parameter and
 * state regions into it and poisons them.  in: store -> arena of the
 * parts in `what` (STAGE_OFF_*); out: arena -> store of both parts, then
 * poisons them; evict: poisons the parts in `what`.  step_done: the
 * HETRT_VERBOSE line of the step's copies (rank 0 of the stage's DP and
 * TP groups), counters reset. */
int stage_offload_setup(StageRt *rt);
int stage_offload_in(StageRt *rt, int what);
int stage_offload_out(StageRt *rt);
int stage_offload_evict(StageRt *rt, int what);
void stage_offload_step_done(StageRt *rt, int64_t step);
void stage_offload_free(StageRt *rt);
/* The store's copy of p's parameter (k -1), m (0) or v (1): numel or zlen
 * f32; NULL when the stage is not offloaded or p has no such state. */
float *stage_offload_at(const StageRt *rt, const StageParam *p, int k);

/* stage_ckpt.c */
int stage_ckpt_load(StageRt *rt, const char *ckpt_path, int with_opt);
int stage_ckpt_save(StageRt *rt, const char *dir, int64_t step);

#endif
