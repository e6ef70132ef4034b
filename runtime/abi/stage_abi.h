/* The contract between a generated stage binary and the runtime (hetrt).
 *
 * llvm_emit.c builds these structs as constant globals inside each stage
 * object, and the generated `main` hands them to the runtime:
 *
 *     int main(int argc, char **argv) {
 *         return hetrt_stage_main(argc, argv, &hetc_stage);
 *     }
 *
 * The layout is plain C (no pointers into the compiler, no IR), so the
 * runtime only includes this header (it lives in runtime/abi/: the compiler's
 * codegen/ includes it from there, never the other way round).  Any change
 * here must be mirrored in the struct types llvm_emit.c declares
 * (le_abi_types) - both sides are checked by tests/codegen, which links
 * generated code against a C runtime compiled from this header.
 */
#ifndef HETC_STAGE_ABI_H
#define HETC_STAGE_ABI_H

#include <stdint.h>

/* A generated stage function: straight-line calls on `arena` (parameters,
 * gradients, optimizer state: fixed offsets) and `slot` (the activation
 * slot of the microbatch being run: fixed offsets inside the slot).
 * Returns 0, or the 1-based index of the first call that returned nonzero
 * (so the runtime can name the failing call from HetcStageFn.calls). */
typedef int32_t (*HetcStageFnPtr)(void *arena, void *slot);

typedef struct HetcStageFn {
    const char *name;        /* "forward", "backward", "update", ... */
    HetcStageFnPtr fn;
    int32_t ncalls;
    const char *const *calls; /* callee name of each call, for error reports */
} HetcStageFn;

/* One action of the stage's pipeline schedule. */
enum { HETC_SCHED_F = 'F', HETC_SCHED_B = 'B' };
typedef struct HetcSchedEntry {
    int32_t kind;       /* HETC_SCHED_F or HETC_SCHED_B */
    int32_t microbatch; /* index within the step; slot = microbatch % nslots */
} HetcSchedEntry;

typedef struct HetcStageDesc {
    int32_t abi_version; /* HETC_STAGE_ABI_VERSION */
    int32_t stage;       /* stage index in the plan */
    int64_t arena_bytes; /* total bytes, slots included */
    int64_t slot_base;   /* offset of activation slot 0 in the arena */
    int64_t slot_bytes;  /* bytes per activation slot */
    int32_t nslots;      /* K_i: the schedule's in-flight bound */
    int32_t nfuncs;
    const HetcStageFn *funcs;
    int32_t nsched;
    const HetcSchedEntry *sched;
    /* ABI 2: what the runtime needs besides the calls (NUL-terminated).
     * ABI 3: the IR texts are "" unless a hetrt_node call runs a node of
     * that graph; the runtime never reads them (the node interpreter,
     * interp/, does: runtime/abi/stage_interp.h). */
    const char *ir_train;  /* the stage's train graph, canonical IR text (all const data inline) */
    const char *ir_update; /* the stage's update graph, canonical IR text */
    const char *config;    /* the stage config, "hetc-stage 1" text (docs/STAGE_ABI.md) */
} HetcStageDesc;

/* 3: IR texts only for interpreted graphs, hetrt_node defined by the
 * interpreter library, `shape` in param records (docs/STAGE_ABI.md). */
#define HETC_STAGE_ABI_VERSION 3

/* ---- the hetrt entries generated stage functions call (runtime/stage/stage_exec.c).
 * Every one returns 0 or nonzero (status: the generated function stops and
 * returns the call's 1-based index; the runtime names the call).
 *
 * Buffer references inside `bufs` of hetrt_node: one int64 per node input
 * then per node output, (region << 56) | offset, with region
 *   HETC_BUF_NONE  (0): omitted optional input / unused output
 *   HETC_BUF_ARENA (1): arena + offset (parameters, gradients, optimizer
 *                       state, scratch)
 *   HETC_BUF_SLOT  (2): slot + offset (this microbatch's activation slot)
 *   HETC_BUF_CONST (3): the IR value's own constant data (offset unused)
 */
enum { HETC_BUF_NONE = 0, HETC_BUF_ARENA = 1, HETC_BUF_SLOT = 2, HETC_BUF_CONST = 3 };
#define HETC_BUF(region, off) (((int64_t)(region) << 56) | (int64_t)(off))
enum { HETC_GRAPH_TRAIN = 0, HETC_GRAPH_UPDATE = 1 };

/* Run node `node` (index in the graph's node list, as printed) of graph
 * `graph` (HETC_GRAPH_*) on the backend's executor; outputs are zeroed
 * first.  Defined by the node interpreter library (interp/), not hetrt. */
int32_t hetrt_node(int32_t graph, int32_t node, void *arena, void *slot, const int64_t *bufs);
/* Boundary transfer `xfer` (index into the config's xfer lines) of the
 * microbatch being run: rows are redistributed between the two stages' DP
 * ranks (rt_redistribute_rows). */
int32_t hetrt_recv(int32_t xfer, void *dst);
int32_t hetrt_send(int32_t xfer, const void *src);
/* This rank's rows of the running microbatch's token ids (which = 0) or
 * targets (which = 1), as dtype (RT_I32 = 3 or RT_I64 = 4). */
int32_t hetrt_tokens(int32_t which, void *dst, int32_t dtype);
/* acc[i] += g[i] / accum (accum: microbatches per step), f32. */
int32_t hetrt_accum(void *acc, const void *g, int64_t n);
/* ZeRO-2 (a stage whose config says `zero 2`; it calls this instead of
 * hetrt_accum): g holds n f32, this microbatch's whole gradient of the
 * parameter of `param` record number `param` (config order); it is
 * reduce-scattered over the stage's DP group in place (g is backward
 * scratch, dead after this call) and this DP rank's range
 * rt_row_split(n, dp, dp_rank) is added to acc[0 ..) / accum, so acc holds
 * only the rank's gradient shard (zslice len elements). */
int32_t hetrt_accum_scatter(int32_t param, void *acc, void *g, int64_t n);
/* Record this microbatch's (scaled) loss, an f32 scalar. */
int32_t hetrt_loss(const void *loss);
int32_t hetrt_copy(void *dst, const void *src, int64_t bytes);
/* Tensor parallelism (issue 9; only stages with tp > 1 call it): dst = the
 * sum of src over this rank's TP group (the stage's ranks with the same DP
 * index), n f32 elements; dst may equal src.  Lowered from the train
 * graph's TpAllReduce nodes (forward: row-parallel outputs; backward: the
 * input gradients of column-parallel Linears). */
int32_t hetrt_tp_allreduce(void *dst, const void *src, int64_t n);
/* The same with the maximum (TpAllReduce op "max": the vocab-parallel
 * loss's row max, passes/tp_shard_vocab.c). */
int32_t hetrt_tp_allreduce_max(void *dst, const void *src, int64_t n);
int32_t hetrt_zero(void *dst, int64_t bytes);
/* The vocabulary-parallel kernels as direct calls (codegen/lower_node.c,
 * stages with tp > 1; runtime/stage/stage_tp_kernels.c): the host kernels
 * hk_embedding_shard_f32, hk_embedding_backward_shard_f32 (overwriting),
 * hk_vocab_ce_stats_f32, hk_vocab_ce_bwd_f32 (dloss read from memory) with
 * the compiled vocab_start (TP rank 0's) shifted by tp_rank x the local
 * extent (V or Vl), as the node interpreter (interp/) shifts its parsed graph. */
int32_t hetrt_tp_embedding(int32_t idt, const void *ids, int64_t n, const float *table,
                           int64_t start0, int64_t V, int64_t vfull, int64_t D, float *y);
int32_t hetrt_tp_embedding_grad(int32_t idt, const void *ids, int64_t n, const float *dy,
                                int64_t start0, int64_t V, int64_t vfull, int64_t D,
                                float *dtable);
int32_t hetrt_tp_vocab_ce_stats(const float *logits, int32_t tdt, const void *targets,
                                const float *rowmax, int64_t N, int64_t Vl, int64_t start0,
                                int64_t vfull, int32_t use_ignore, int64_t ignore_index,
                                float *stats);
int32_t hetrt_tp_vocab_ce_bwd(const float *logits, int32_t tdt, const void *targets,
                              const float *rowmax, const float *stats, int64_t N, int64_t Vl,
                              int64_t start0, int64_t vfull, int32_t use_ignore,
                              int64_t ignore_index, const float *dloss, float *dlogits);

/* The CUDA backend's direct kernel calls (codegen/lower_node_cuda.c,
 * runtime/cuda/stage_kernels_cuda.c; only in --backend=cuda programs): fp32
 * device pointers into the arena, kernels/cuda's numbering of ops (HKC_ADD,
 * HKC_NEG, HKC_UG_*), launched on the stage's stream.  binary: y over dims
 * (rank <= 8), a and b read with broadcast strides sa, sb (in elements, 0:
 * broadcast); unary_grad: dx = dy f'(x), y NULL or f(x). */
int32_t hetrt_cu_binary(int32_t op, int32_t rank, const int64_t *dims, const float *a,
                        const int64_t *sa, const float *b, const int64_t *sb, float *y);
int32_t hetrt_cu_unary(int32_t op, const float *x, float *y, int64_t n);
int32_t hetrt_cu_unary_grad(int32_t op, const float *x, const float *y, const float *dy,
                            float *dx, int64_t n);
/* Linear: y[M,N] = x[M,K] w[K,N] (+ b[N], b may be NULL), cuBLASLt;
 * LinearGrad: dx = dy w^T, dw = x^T dy, db = column sums of dy (each NULL
 * when the node does not use it). */
int32_t hetrt_cu_linear(const float *x, const float *w, const float *b, int64_t M, int64_t K,
                        int64_t N, float *y);
int32_t hetrt_cu_linear_grad(const float *x, const float *w, const float *dy, int64_t M,
                             int64_t K, int64_t N, float *dx, float *dw, float *db);
/* LayerNorm (rms 0; bias may be NULL) / RMSNorm (rms 1) over the last axis
 * (rows of n), and their backward (dx, dscale, dbias each NULL when unused;
 * the statistics are recomputed in the backend's device scratch). */
int32_t hetrt_cu_norm(int32_t rms, const float *x, const float *scale, const float *bias,
                      int64_t rows, int64_t n, double eps, float *y);
int32_t hetrt_cu_norm_grad(int32_t rms, const float *x, const float *scale, const float *dy,
                           int64_t rows, int64_t n, double eps, float *dx, float *dscale,
                           float *dbias);
/* AdamW (hk_entry_adamw_f32's arguments): lr, step, clip_scale (or NULL)
 * are device scalars in the arena; outputs may be the inputs (in place). */
int32_t hetrt_cu_adamw(const float *p, const float *m, const float *v, const float *g, int64_t n,
                       const float *lr, const int64_t *step, const float *clip_scale,
                       double beta1, double beta2, double eps, double weight_decay,
                       float *p_out, float *m_out, float *v_out);

/* Direct kernel calls (codegen/lower_node.c) pass this buffer, defined by
 * the generated module when some call uses it, as the kernels' `err`: a
 * kernel that returns nonzero has written its reason here (the runtime
 * prints it with the failing call; declare it weak). */
#define HETC_KERNEL_ERRLEN 256
extern char hetc_kernel_err[HETC_KERNEL_ERRLEN];

/* Runtime entry point called by the generated main. */
int hetrt_stage_main(int argc, char **argv, const HetcStageDesc *stage);

#endif
