/* Lowering of one partitioned stage (passes/partition.h) to a stage
 * program for llvm_emit (DESIGN §5, docs/STAGE_ABI.md):
 *
 *   memplan (codegen/memplan.h) fixes every buffer's offset and the call
 *   order; each MpAction becomes one hetrt_* call (stage_abi.h):
 *     init      no calls (the runtime loads parameters itself)
 *     forward   hetrt_tokens, hetrt_recv (act), hetrt_node per phase-fwd
 *               node, hetrt_send (act), hetrt_loss (last stage)
 *     backward  hetrt_recv (grad), hetrt_node per phase-bwd node,
 *               hetrt_accum per parameter (ZeRO-2: hetrt_accum_scatter,
 *               into the rank's gradient shard), hetrt_send (grad)
 *     update    hetrt_node per update-graph node, hetrt_copy of upd/... into
 *               the parameter / state, hetrt_zero of the accumulators
 *   and the descriptor's texts: both graphs as canonical IR text (every
 *   constant inline: the runtime has no other copy) and the config text.
 */
#ifndef HETC_LOWER_STAGE_H
#define HETC_LOWER_STAGE_H

#include <stdint.h>

#include "ir.h"
#include "llvm_emit.h"
#include "memplan.h"
#include "partition.h"

typedef struct LowerOpts {
    int nstages;
    const int *dp;           /* [nstages]: DP degree of every stage */
    int64_t rows;            /* microbatch rows over all DP ranks of a stage */
    int64_t seq;             /* sequence length (tokens per row) */
    int accum;               /* microbatches per optimizer step */
    int nslots;              /* K_i: activation slots (the schedule's in-flight bound) */
    const LeSched *sched;    /* this stage's F/B actions of one step (2 * accum entries) */
    int nsched;
    const char *optimizer;   /* "adamw" | "sgd" (must match the update graph's state) */
    double lr;               /* peak learning rate */
    const char *lr_schedule; /* "constant" | "cosine" */
    int64_t warmup, steps;   /* warm-up steps; default --steps of the binary */
    int layers;              /* checkpoint layers of the whole model (L) */
    IrDType token_dtype;     /* IR_I64 / IR_I32; IR_UNDEF: the train graph's token input's
                                (i64 on a stage that reads none) */
    /* every stage of the plan, indexed by stage, or NULL: the config then
     * gets the plan's `shared` records (each parameter shared between
     * stages, with the stages holding it; the same records in every
     * stage's config).  NULL: no `shared` records (the caller adds them). */
    const PartStage *all_stages;
    int nall_stages;
    /* 1: each node whose op codegen/lower_node.c lowers becomes direct
     * kernel calls (hk_* with constant shapes), the rest hetrt_node; 0:
     * every node is hetrt_node (--interpret-nodes) */
    int direct;
    /* with direct: the backend whose lowering makes the calls (lower_node.h:
     * its table of kernels, its own runtime entries, whether generated host
     * kernels may run); NULL: lower_backend_host */
    const struct LowerBackend *backend;
    /* with direct: 1 groups elementwise nodes into generated kernels where
     * the backend runs them by default (host loops; codegen/fuse.h, their
     * register-only values get no buffer), 2 also where it runs them only
     * when asked (CUDA's NVPTX kernels: hetc compile --fuse), 0 keeps one
     * kernel call per node (--no-fuse) */
    int fuse;
    /* 1 (hetc compile --tp-reduce-dtype bf16, host backend): the sum
     * TpAllReduces but the vocab-parallel loss's statistics call
     * hetrt_tp_allreduce_bf16, and the config gets `tp_reduce bf16 N` (N the
     * largest, the runtime's wire buffer) */
    int tp_reduce_bf16;
} LowerOpts;

/* What lower_stage made of the stage's nodes (hetc compile's report). */
typedef struct LowerStats {
    int direct;       /* nodes lowered to direct calls (TpAllReduce included) */
    int interp;       /* nodes left to hetrt_node */
    int fused;        /* of the direct nodes: those inside generated kernels */
    int kernels;      /* generated (fused) kernels */
    char *interp_ops; /* malloc'd "Op xN, ..." of the interpreted nodes ("" if none) */
    char *why;        /* malloc'd: the first interpreted node's reason ("" if none) */
} LowerStats;

/* The memory plan lower_stage makes of st with nslots slots, without
 * lowering: with fuse, after grouping the elementwise nodes as the host's
 * direct lowering does (LowerOpts.fuse; their register-only values get no
 * buffer), else one buffer per value (--no-fuse, a device backend).  The
 * planner's arena model reads it (driver/plan_arena.c).  mp->fuse is NULL
 * on return (the groups are freed); free with memplan_free. */
int lower_stage_memplan(const PartStage *st, int nslots, int fuse, MemPlan *mp, IrError *err);

/* Lower stage st.  On success fills *prog (arena layout from *mp, externs,
 * functions init / forward / backward / update, schedule, ir_train,
 * ir_update (only where a hetrt_node call needs them, else NULL), config =
 * *config), *config (malloc'd "hetc-stage 1" text) and
 * *mp (the memory plan the offsets come from).  Free with
 * lower_stage_free(prog), free(*config), memplan_free(mp).
 * Errors name the stage and the option / value / node at fault; nothing
 * needs freeing then. */
int lower_stage(const PartStage *st, const LowerOpts *o, LeProgram *prog, char **config,
                MemPlan *mp, IrError *err);
/* The same, also filling *stats (may be NULL); free with lower_stats_free. */
int lower_stage_stats(const PartStage *st, const LowerOpts *o, LeProgram *prog, char **config,
                      MemPlan *mp, LowerStats *stats, IrError *err);
void lower_stats_free(LowerStats *s);
void lower_stage_free(LeProgram *prog);
/* 1 if some function of prog calls hetrt_node: its binary must link the
 * node interpreter (interp/, hetrt_interp), and carries the IR text of each
 * graph such a call runs nodes of (ir_train / ir_update; NULL otherwise). */
int lower_stage_interprets(const LeProgram *prog);
/* The generated (fused) kernels of a lowered stage: the member nodes, the
 * external inputs and outputs, and each FkKernel listing (fk_print). */
void lower_stage_print_fused(const LeProgram *prog, const PartStage *st, FILE *f);
/* A device backend's generated kernels (--backend=cuda --fuse) as one PTX
 * module into path; nothing (0) when the program launches none. */
int lower_stage_write_ptx(const LeProgram *prog, const char *path, IrError *err);

/* Escape a name for the config text: '%', space and control bytes as %XX
 * (docs/STAGE_ABI.md).  Returns a malloc'd string. */
char *lower_config_name(const char *name);

/* The hetrt_* entries generated code calls (stage_abi.h), as externs. */
extern const LeExtern lower_hetrt_externs[];
extern const int lower_hetrt_nexterns;
/* the same plus hetrt_tp_allreduce(_max): the externs of a stage with tp > 1 */
extern const LeExtern lower_hetrt_externs_tp[];
extern const int lower_hetrt_nexterns_tp;

#endif
