/* hetrt: the runtime API that generated stage binaries call (host backend).
 *
 * The runtime knows nothing of the compiler: a stage binary describes its
 * world to it (how many stages, each stage's DP degree) and then asks for
 * arena memory, transport and checkpoints.  See docs/RUNTIME.md.
 *
 * Error convention: functions return 0 on success and non-zero on failure
 * after printing a message that names the rank ("[hetrt rank R] ...") to
 * stderr.  Generated code wraps every call in rtCheck(), which adds
 * file:line and aborts the whole job with MPI_Abort -- a stage binary has
 * no way to recover from a failed step, and a clean abort beats a hang.
 * Timeouts are the exception: a wait that passes its deadline reports who
 * waited on whom for what and aborts the job itself, so that no caller can
 * forget to. */
#ifndef HETRT_RT_H
#define HETRT_RT_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ errors */

/* Print "[hetrt rank R] file:line: <msg>" and MPI_Abort(MPI_COMM_WORLD, 1).
 * Works before MPI_Init too (then it exits with status 1). */
void rt_die(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
/* Print a message prefixed with this rank (no abort). */
void rt_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Wrap a hetrt call (returns 0 on success). */
#define rtCheck(call)                                                                \
    do {                                                                             \
        int rt_check_rc_ = (call);                                                   \
        if (rt_check_rc_ != 0)                                                       \
            rt_die(__FILE__, __LINE__, "%s failed (status %d)", #call, rt_check_rc_); \
    } while (0)
/* Wrap an MPI call (returns MPI_SUCCESS on success). */
#define rtMpiCheck(call)                                                             \
    do {                                                                             \
        int rt_mpi_rc_ = (call);                                                     \
        if (rt_mpi_rc_ != MPI_SUCCESS) {                                             \
            char rt_mpi_msg_[MPI_MAX_ERROR_STRING];                                  \
            int rt_mpi_len_ = 0;                                                     \
            MPI_Error_string(rt_mpi_rc_, rt_mpi_msg_, &rt_mpi_len_);                 \
            rt_die(__FILE__, __LINE__, "%s: MPI error: %s", #call, rt_mpi_msg_);     \
        }                                                                            \
    } while (0)

/* ----------------------------------------------------------------- context */

#define RT_MAX_STAGES 256

/* World layout.  Stages occupy contiguous world ranks in stage order, which
 * is what one MPMD launch `mpirun -np a ./stage_0 : -np b ./stage_1` gives:
 * stage s owns world ranks [stage_first[s], stage_first[s] + stage_dp[s] x
 * stage_tp[s]).  Local index i of a stage has tp_rank = i % tp and dp_rank
 * = i / tp (a TP group is contiguous, so it lands on one node); without
 * tensor parallelism (tp 1) dp rank d of stage s is world rank
 * stage_first[s] + d. */
typedef struct RtContext {
    int world_rank, world_size;
    int nstages;
    int stage_dp[RT_MAX_STAGES];
    int stage_tp[RT_MAX_STAGES];    /* TP degree of every stage (1: none) */
    int stage_first[RT_MAX_STAGES];
    int stage;         /* this rank's stage */
    int dp_rank;       /* this rank's index inside its stage's DP group */
    int dp_size;       /* == stage_dp[stage] */
    int tp_rank;       /* this rank's index inside its TP group (0 without TP) */
    int tp_size;       /* == stage_tp[stage] */
    MPI_Comm dp_comm;  /* the ranks of this stage with this tp_rank (one DP group) */
    MPI_Comm tp_comm;  /* the ranks of this stage with this dp_rank (one TP group) */
    double timeout_s;  /* deadline for every wait; env HETRT_TIMEOUT_S, default 300 */
    int owns_mpi;      /* 1 when rt_init called MPI_Init (rt_finalize then finalizes) */
    /* 1: a one-process run (rt_init: no launcher started this process and
     * the world it describes is one rank).  MPI is never initialised: the
     * collectives below are no-ops or copies, dp_comm and tp_comm are
     * MPI_COMM_NULL, and a send or receive is an error (there is no peer). */
    int solo;
    /* Per-stage row table (heterogeneous DP, docs/STAGES.md): stage_rows[s]
     * is stage s's stage_dp[s] row counts of a microbatch in DP rank order,
     * or NULL for rt_row_split's split.  Not owned (the stage config's);
     * set after rt_init.  Used for a batch of exactly their sum rows. */
    const int64_t *stage_rows[RT_MAX_STAGES];
} RtContext;

/* Initialise MPI (if not yet), read HETRT_TIMEOUT_S, and describe the world:
 * nstages stages with DP degrees stage_dp[0..nstages-1], which must sum to
 * the world size.  Builds the DP-group communicators.  Collective over
 * MPI_COMM_WORLD.  No tensor parallelism (every stage_tp is 1).
 * A process no launcher started (rt_launched() 0) with MPI not yet
 * initialised runs solo when the world is one rank (one stage, DP 1, TP 1):
 * no MPI_Init, whose plug-ins, shared-memory segments and PMIx client cost
 * ~15 MB of resident memory and start-up time a single process does not
 * need (ctx->solo); a larger world fails naming the ranks it needs. */
int rt_init(RtContext *ctx, int *argc, char ***argv, int nstages, const int *stage_dp);
/* rt_init with tensor parallelism: this process runs stage `my_stage` with
 * TP degree `my_tp`.  Each stage's TP degree is learnt from its own ranks
 * (an all-gather of (stage, tp) over the world), so a stage binary needs
 * to know only its own; the ranks must come in stage order and stage s
 * must have stage_dp[s] x tp_s of them.  Builds the DP and TP
 * communicators. */
int rt_init_tp(RtContext *ctx, int *argc, char ***argv, int nstages, const int *stage_dp,
               int my_stage, int my_tp);
/* Free communicators and finalize MPI if rt_init initialised it. */
int rt_finalize(RtContext *ctx);
/* Whether a launcher started this process as a rank of a job: Open MPI's
 * mpirun (OMPI_COMM_WORLD_SIZE), a PMIx or PMI launcher (PMIX_RANK,
 * PMI_RANK: srun --mpi=pmix, MPICH's hydra) or srun with more than one task
 * (SLURM_PROCID with SLURM_NTASKS / SLURM_STEP_NUM_TASKS > 1; a batch
 * script's own shell has SLURM_PROCID too, with one task). */
int rt_launched(void);

/* World rank of dp rank `dp_rank` of stage `stage` (its TP rank 0). */
int rt_stage_rank(const RtContext *ctx, int stage, int dp_rank);

/* ---------------------------------------------------------------- row split */

/* Row split rule for a batch of B rows over dp ranks: the first B % dp ranks
 * hold one extra row.  Rank r holds rows [start, start + count).  When dp
 * divides B this is runtime/data_loader's split (rank r reads rows
 * [r*B/dp, (r+1)*B/dp)).  Concatenating all ranks' rows in rank order gives
 * the single-process batch. */
void rt_row_split(int64_t B, int dp, int r, int64_t *start, int64_t *count);

/* The split of stage `stage`'s B rows over its DP ranks: its row table
 * (ctx->stage_rows) when it has one summing to B, else rt_row_split.
 * Every boundary reshard, the data loader and the TP pieces use it. */
void rt_stage_row_split(const RtContext *ctx, int stage, int64_t B, int r, int64_t *start,
                        int64_t *count);

/* One piece of a many-to-many redistribution: rows [start, start+count) of
 * the global batch move from src dp rank to dst dp rank. */
typedef struct RtOverlap {
    int src, dst;
    int64_t start, count;
} RtOverlap;
/* All non-empty overlaps between a dp_a split and a dp_b split of B rows,
 * ordered by start row.  `out` must have room for dp_a + dp_b - 1 entries
 * (the most there can be).  Returns the number written. */
int rt_row_overlaps(int64_t B, int dp_a, int dp_b, RtOverlap *out);
/* Tensor parallelism (seed 002's boundary resharding): a stage with DP dp
 * and TP tp holds each DP shard's rows on all tp ranks of its TP group;
 * piece v = d * tp + t (the stage-local index of dp rank d, tp rank t) is
 * TP rank t's share of DP shard d: rt_row_split(count_d, tp, t) rows after
 * start_d.  The pieces of all v partition [0, B) in order. */
void rt_row_piece(int64_t B, int dp, int tp, int v, int64_t *start, int64_t *count);
/* Overlaps between the pieces of (dp_a, tp_a) and (dp_b, tp_b); src/dst are
 * piece indices.  `out` needs dp_a*tp_a + dp_b*tp_b - 1 entries. */
int rt_row_overlaps_tp(int64_t B, int dp_a, int tp_a, int dp_b, int tp_b, RtOverlap *out);
/* rt_row_piece and rt_row_overlaps_tp for the stages of ctx, each DP
 * shard as rt_stage_row_split gives it (a stage's row table).  with_tp 0:
 * the DP shards alone (rt_row_overlaps; src/dst are DP ranks). */
void rt_stage_row_piece(const RtContext *ctx, int stage, int64_t B, int v, int64_t *start,
                        int64_t *count);
int rt_stage_row_overlaps(const RtContext *ctx, int stage_a, int stage_b, int64_t B,
                          int with_tp, RtOverlap *out);

/* ---------------------------------------------------------------- arena */

/* One aligned allocation per rank; memplan gives every buffer a fixed
 * offset into it. */
typedef struct RtArena {
    unsigned char *base;
    size_t size;
} RtArena;

/* Allocate `bytes` (rounded up to `align`, a power of two >= sizeof(void*);
 * 0 means 64) zero-filled bytes. */
int rt_arena_init(RtArena *a, size_t bytes, size_t align);
void rt_arena_free(RtArena *a);
/* Checked accessor: dies (rt_die) if [offset, offset+bytes) is not inside
 * the arena. */
void *rt_arena_at_checked(const RtArena *a, size_t offset, size_t bytes, const char *file,
                          int line);
/* RT_ARENA_AT(a, off, bytes): pointer to arena bytes [off, off+bytes).
 * Bounds-checked unless NDEBUG (release builds use the raw offset, as the
 * offsets are compile-time constants that memplan already checked). */
#ifdef NDEBUG
#define RT_ARENA_AT(a, off, bytes) ((void *)((a)->base + (off)))
#else
#define RT_ARENA_AT(a, off, bytes) rt_arena_at_checked((a), (off), (bytes), __FILE__, __LINE__)
#endif

/* ---------------------------------------------------------------- transport */
/* Every wait below polls non-blocking MPI requests against ctx->timeout_s.
 * On timeout it prints which rank waited on which peer for what (the
 * `what` label and the tag) and aborts the job.  Tags must be < 32768
 * (MPI's guaranteed minimum upper bound). */

/* Send / receive `bytes` bytes to / from world rank `peer`. */
int rt_send(const RtContext *ctx, const void *buf, size_t bytes, int peer, int tag,
            const char *what);
int rt_recv(const RtContext *ctx, void *buf, size_t bytes, int peer, int tag, const char *what);
/* float32 convenience wrappers (n elements). */
int rt_send_f32(const RtContext *ctx, const float *buf, size_t n, int peer, int tag,
                const char *what);
int rt_recv_f32(const RtContext *ctx, float *buf, size_t n, int peer, int tag, const char *what);

/* In-place sum of n floats over this rank's DP group, then multiply by
 * `scale` (pass 1.0f for a plain sum, 1.0f/dp_size for a mean). */
int rt_dp_allreduce_f32(const RtContext *ctx, float *buf, size_t n, float scale,
                        const char *what);

/* In-place all-reduce of `count` elements of `type` with `op` over any
 * communicator (MPI_COMM_WORLD, a DP group, a group of the stages sharing
 * a parameter), under the timeout.  A no-op on a one-rank communicator or
 * MPI_COMM_NULL. */
int rt_allreduce(const RtContext *ctx, MPI_Comm comm, void *buf, size_t count, MPI_Datatype type,
                 MPI_Op op, const char *what);

/* ZeRO (docs/STAGES.md): the n floats of a tensor split over the DP group
 * by flat element range like rt_row_split(n, dp_size, r).
 * rt_dp_reduce_scatter_f32: in place, buf[0 .. count_r) becomes this
 * rank's slice of the DP sum of buf[0 .. n) (the rest of buf is left
 * undefined).  rt_dp_allgather_f32: full[start_r .. start_r + count_r) =
 * rank r's slice[0 .. count_r) for every r.  Both under the timeout; on a
 * one-rank group reduce-scatter is a no-op and all-gather a copy. */
int rt_dp_reduce_scatter_f32(const RtContext *ctx, float *buf, size_t n, const char *what);
/* The same split of n elements of any type with any (commutative) op. */
int rt_dp_reduce_scatter(const RtContext *ctx, void *buf, size_t n, MPI_Datatype type,
                         MPI_Op op, const char *what);
int rt_dp_allgather_f32(const RtContext *ctx, const float *slice, float *full, size_t n,
                        const char *what);

/* Broadcast `bytes` bytes from rank `root` of comm, under the timeout.  A
 * no-op on a one-rank communicator or MPI_COMM_NULL. */
int rt_bcast(const RtContext *ctx, MPI_Comm comm, void *buf, size_t bytes, int root,
             const char *what);

/* Barrier over MPI_COMM_WORLD with the timeout. */
int rt_barrier(const RtContext *ctx, const char *what);

/* Gather to world rank `root`, under the timeout: every rank's `count`
 * elements of `type` land at all[r * count] (all: root only).  rt_gatherv:
 * rank r's send_count elements land at all[displs[r]] (counts and displs
 * in elements, root only).  Solo: a copy.  Types: the predefined ones
 * (MPI_BYTE, MPI_INT, MPI_LONG_LONG, MPI_FLOAT, MPI_DOUBLE, ...). */
int rt_gather(const RtContext *ctx, const void *mine, size_t count, MPI_Datatype type, void *all,
              int root, const char *what);
int rt_gatherv(const RtContext *ctx, const void *mine, int send_count, MPI_Datatype type,
               void *all, const int *counts, const int *displs, int root, const char *what);
/* MPI_Comm_split of MPI_COMM_WORLD (color MPI_UNDEFINED: *out is
 * MPI_COMM_NULL), errors returned.  Solo: MPI_COMM_NULL for any colour --
 * a group of one process needs no communicator, and every collective above
 * is a no-op on MPI_COMM_NULL. */
int rt_comm_split(const RtContext *ctx, int color, int key, MPI_Comm *out, const char *what);
/* This rank's index among the ranks on its node and how many there are
 * (MPI_COMM_TYPE_SHARED: the launcher's notion of a node); solo: 0 of 1. */
int rt_node_rank(const RtContext *ctx, int *local, int *nlocal);

/* Many-to-many redistribution of a batch-sharded boundary tensor of B rows
 * (row_bytes bytes each) from stage src_stage to stage dst_stage.  Every
 * rank of a stage holds its DP shard's rows (rt_row_split); the TP ranks of
 * a DP shard hold the same rows (the boundary value is replicated over TP).
 * So that the value crosses the inter-stage link once, not once per TP
 * rank (seed 002, issue 9 part 4), TP rank t of src_stage sends only its
 * piece (rt_row_piece), each piece goes to the ranks of dst_stage whose
 * pieces overlap it, and the TP group of each receiving DP shard then
 * all-gathers the pieces (MPI_Allgatherv in place).  Without TP on either
 * side this is plain DP-to-DP redistribution.  Ranks of src_stage pass
 * their DP shard's rows in `src` (dst may be NULL); ranks of dst_stage get
 * theirs in `dst` (src may be NULL); other ranks return at once.  Only
 * overlapping row ranges travel.  Used forward (activations, stage s ->
 * s+1) and backward (their gradients, s+1 -> s).  Messages use tag `tag`. */
int rt_redistribute_rows(const RtContext *ctx, int src_stage, const void *src, int dst_stage,
                         void *dst, int64_t B, size_t row_bytes, int tag, const char *what);

/* Deferred sends.  A pipeline schedule has stages send to each other at
 * the same time (1F1B: stage s sends microbatch m+1's activation while
 * stage s+1 sends microbatch m's gradient back); with blocking sends of
 * messages past MPI's eager limit both would wait for a receive the other
 * has not posted.  rt_redistribute_rows_isend copies the source rows into
 * staging buffers, posts the sends and returns; rt_send_queue_wait
 * completes them (with the timeout) -- a stage waits once per step. */
typedef struct RtSendQueue {
    int n, cap;
    struct RtPending *pend; /* private */
    void **bufs;            /* staging copies, freed on completion */
} RtSendQueue;
/* The send side of rt_redistribute_rows (this rank must be in src_stage;
 * it sends its TP piece), queued on q.  Completed earlier sends of q are reaped first. */
int rt_redistribute_rows_isend(const RtContext *ctx, int src_stage, const void *src,
                               int dst_stage, int64_t B, size_t row_bytes, int tag,
                               const char *what, RtSendQueue *q);
/* Wait for every queued send (timeout: report and abort), free them. */
int rt_send_queue_wait(const RtContext *ctx, RtSendQueue *q, const char *what);
/* Release the queue's memory (after rt_send_queue_wait). */
void rt_send_queue_free(RtSendQueue *q);

/* -------------------------------------------------------------- checkpoints */

typedef enum RtDtype { RT_F32 = 1, RT_F64 = 2, RT_I32 = 3, RT_I64 = 4, RT_U8 = 5 } RtDtype;
size_t rt_dtype_size(RtDtype t);
const char *rt_dtype_name(RtDtype t);

#define RT_CKPT_MAX_DIMS 8
#define RT_CKPT_MAX_NAME 256

/* A tensor to save: which layer it belongs to, its name inside the layer,
 * dtype, shape and data.  Layers, not stages, are the unit of a checkpoint,
 * so that any stage layout can read any layer. */
typedef struct RtCkptTensor {
    int layer;
    const char *name;
    RtDtype dtype;
    int ndim;
    int64_t shape[RT_CKPT_MAX_DIMS];
    const void *data;
} RtCkptTensor;

/* Write one layer's file <dir>/step_<step>/layer_<layer>.bin atomically
 * (temp file, fsync, rename, fsync of the directory).  Uses every tensor in
 * `t[0..n)` whose .layer == layer. */
int rt_ckpt_write_layer(const char *dir, int64_t step, int layer, const RtCkptTensor *t, int n,
                        char *err, size_t errlen);
/* The same, stamping the header with run_id (rt_ckpt_write_layer: run 0).
 * A MANIFEST already in the step directory is removed first (durably), so
 * a step being rewritten is never vouched for by its old MANIFEST. */
int rt_ckpt_write_layer_run(const char *dir, int64_t step, uint64_t run_id, int layer,
                            const RtCkptTensor *t, int n, char *err, size_t errlen);
/* Write <dir>/step_<step>/MANIFEST (atomically, last) naming layers
 * 0..nlayers-1; fails if any layer file is missing or unreadable, so a
 * manifest never names a half-written checkpoint. */
int rt_ckpt_write_manifest(const char *dir, int64_t step, int nlayers, char *err, size_t errlen);
/* The same for run_id: also fails when a layer file's header holds another
 * step or run. */
int rt_ckpt_write_manifest_run(const char *dir, int64_t step, uint64_t run_id, int nlayers,
                               char *err, size_t errlen);

/* Collective save: dp rank 0 of every stage writes the layers of its
 * tensors, a barrier waits for all of them, then world rank 0 writes the
 * MANIFEST for nlayers layers, and a second barrier publishes it. */
int rt_checkpoint_save(const RtContext *ctx, const char *dir, int64_t step, int nlayers,
                       const RtCkptTensor *t, int n);

/* Newest complete checkpoint in dir: writes its directory to path_out and
 * its step to *step.  Returns 0 when found, 1 when there is none (no
 * step_* directory with a valid MANIFEST whose files all exist with the
 * listed sizes), -1 on error. */
int rt_checkpoint_latest(const char *dir, char *path_out, size_t path_len, int64_t *step,
                         char *err, size_t errlen);
/* The newest complete checkpoint with a step below `below`; its run id
 * (the MANIFEST's) in *run_id when not NULL.  A step directory counts when
 * its MANIFEST parses and checks and every listed layer file has the
 * listed size and a header naming its layer, the step and the MANIFEST's
 * run (a file copied in from another step or run does not).  Every newer
 * step directory that did not count is described in warn ("DIR: why; ...",
 * may be NULL).  Returns as rt_checkpoint_latest. */
int rt_checkpoint_find(const char *dir, int64_t below, char *path_out, size_t path_len,
                       int64_t *step, uint64_t *run_id, char *warn, size_t warnlen, char *err,
                       size_t errlen);

/* A fresh run's id: 64 random bits, never 0 (0 marks version-1 files and
 * hetc compile's init checkpoint). */
uint64_t rt_ckpt_new_run_id(void);
/* Lock checkpoint directory dir (created if missing) for this process:
 * flock on dir/LOCK, which then holds "pid P on HOST".  Held until the
 * process exits (*fd_out stays open).  Fails, naming the holder, when
 * another process holds it for HETRT_LOCK_WAIT_S seconds (default 10: the
 * ranks of a job that just failed may still be dying). */
int rt_ckpt_lock(const char *dir, int *fd_out, char *err, size_t errlen);
/* How many step_* directories dir holds (complete or not) and the newest
 * one's step (-1: none; a missing dir holds none).  0 ok, -1 error. */
int rt_ckpt_count_steps(const char *dir, int *nsteps, int64_t *newest, char *err,
                        size_t errlen);
/* Remove every step_* directory of dir with its files. */
int rt_ckpt_clear(const char *dir, char *err, size_t errlen);

/* One layer file, read and verified. */
typedef struct RtCkptLoaded {
    char name[RT_CKPT_MAX_NAME];
    RtDtype dtype;
    int ndim;
    int64_t shape[RT_CKPT_MAX_DIMS];
    size_t nbytes;
    const void *data; /* points into RtCkptLayer.buf */
} RtCkptLoaded;
typedef struct RtCkptLayer {
    int layer;
    int64_t step;
    uint64_t run_id; /* 0 in a version-1 file */
    int ntensors;
    RtCkptLoaded *tensors;
    unsigned char *buf;
    size_t buf_len;
} RtCkptLayer;

/* Read <ckpt_dir>/layer_<layer>.bin (ckpt_dir as given by
 * rt_checkpoint_latest), verifying the header, sizes and every tensor's
 * checksum.  Errors name the file and tensor. */
int rt_ckpt_read_layer(const char *ckpt_dir, int layer, RtCkptLayer *out, char *err,
                       size_t errlen);
const RtCkptLoaded *rt_ckpt_find(const RtCkptLayer *l, const char *name);
/* Copy tensor `name` into dst after checking dtype and shape match. */
int rt_ckpt_load_tensor(const RtCkptLayer *l, const char *name, RtDtype dtype, int ndim,
                        const int64_t *shape, void *dst, char *err, size_t errlen);
void rt_ckpt_layer_free(RtCkptLayer *l);

/* FNV-1a 64-bit hash, the standard one (common/fnv1a.h): the checksums of
 * format-3 checkpoints. */
uint64_t rt_fnv1a64(const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif
