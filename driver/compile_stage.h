/* Per-stage compilation for hetc compile: stage graphs (partition), the
 * initial-parameter checkpoint, memory plan, lowering, emission, linking. */
#ifndef HETC_COMPILE_STAGE_H
#define HETC_COMPILE_STAGE_H

#include <stdint.h>

#include "compile_opts.h"
#include "compile_plan.h"
#include "ir.h"

typedef struct CompileArgs {
    const char *optimizer, *lr_schedule, *loss;
    double lr, beta1, beta2, adam_eps, weight_decay, momentum, clip;
    int64_t steps, warmup;
    int emit_llvm;
    int interpret_nodes; /* --interpret-nodes: every node through hetrt_node (no direct calls) */
    int no_fuse;         /* --no-fuse: one kernel call per node, no generated kernels */
    int fuse;            /* --fuse: generated kernels on CUDA too (NVPTX, hetrt_cu_launch) */
    /* --backend=NAME: a row of backends.c (NULL: host; cuda links
     * hetrt_stage_cuda, docs/CUDA.md) */
    const struct HetcBackend *backend;
    int bf16_mixed;      /* --precision bf16-mixed: the mixed-precision pass (host only) */
    /* --grad-reduce-dtype bf16 (bf16-mixed only): the gradient all-reduce /
     * reduce-scatter sends bf16 and sums pairwise in bf16, as NCCL's bf16
     * all-reduce does; 0: fp32 (Megatron's default) */
    int grad_reduce_bf16;
    /* --tp-reduce-dtype bf16 (bf16-mixed, host only): the TP all-reduces of
     * activations and their gradients the same way; the vocab-parallel
     * loss's statistics stay fp32; 0: fp32 */
    int tp_reduce_bf16;
    /* --bf16-rounding stochastic (bf16-mixed): the weights' bf16 copies
     * rounded stochastically (the stochastic-rounding pass); 0: nearest */
    int bf16_sr;
} CompileArgs;
void compile_args_default(CompileArgs *a);

typedef struct CompileStages {
    const CompPlan *plan;
    const CompileArgs *args;
    const CompileOpts *co;     /* model, seq, binds; batch = microbatch rows */
    const char *out_dir;
    uint64_t build_id;         /* the `build` config record of every stage */
    int nlayers;
    const LayerIndex *layers;  /* node name -> layer, from the planner's graph */
    const char *plan_path;     /* plan.json: its timeline.json beside it gives the last
                                * stage's `ptl` records (NULL: none) */
    int64_t rows;              /* microbatch rows: plan global_batch / microbatches */
    /* results */
    double t_graphs, t_init, t_lower;
} CompileStages;

int compile_stages(CompileStages *cs, IrError *err);
void compile_stages_free(CompileStages *cs);


#include "partition.h"
/* Memory plan, lowering, emission and link of every stage (compile_emit.c). */
/* One stage binary: stage `stage` at `rows` rows per microbatch, emitted
 * as stage_S<suffix> (comp_plan_binary_suffix). */
typedef struct StageVariant {
    int stage;
    int64_t rows;
    char suffix[32];
} StageVariant;
/* ps[u] is the stage graph of var[u], u < nvar; the first nstages are the
 * stages at DP rank 0's rows (stage_S), then each other row count of a
 * stage's DP ranks (uneven DP: stage_S_lo, or a row table's stage_S_rN). */
int compile_emit_stages(CompileStages *cs, PartStage *ps, const StageVariant *var, int nvar,
                        IrError *err);
/* Stage s's metrics config records (vocab, flops, peak_flops, ptl) for the
 * binary whose stage graph is ps: compile_metrics.c.  Malloc'd text, NULL
 * when out of memory. */
char *compile_metrics_lines(const CompileStages *cs, const PartStage *ps, int s);
/* The vocabulary size the token ids `ids` (and the "targets" input) index
 * in g; 0 when no Embedding / Gather / loss reads them. */
int64_t graph_token_vocab(const IrGraph *g, const IrValue *ids);
/* FLOPs of one run of g: op_cost's figure summed over its nodes (forward
 * and backward nodes alike; a node without static shapes counts 0). */
double graph_flops(const IrGraph *g);

#endif
