/* Tensor parallelism: one TP rank's forward graph (issue 9 part 1 / 5).
 *
 * Megatron-style sharding found on the canonical IR, not hard-coded to a
 * model:
 *
 *  - MLP: Linear(x, W1, b1) -> unary activation (Gelu, Relu, SiLU, Tanh,
 *    Sigmoid, Erf) -> Linear(h, W2, b2).  W1 and b1 are split by output
 *    columns (column-parallel), W2 by input rows (row-parallel);
 *  - attention: Linear -> Split (fused QKV) or three Linears -> per q/k/v
 *    a chain of layout ops (Reshape to heads, Transpose) -> Attention ->
 *    Transpose -> Reshape (merge heads) -> Linear.  Heads are split over
 *    the ranks: rank r keeps heads [r H/tp, (r+1) H/tp) of q, k and v (the
 *    matching columns of each QKV chunk), the head-split Reshape targets
 *    and Split sizes are divided by tp, and the output Linear is
 *    row-parallel over the kept heads' rows.
 *
 * Communication is explicit IR (ir/ops.def): `TpCopy` (identity forward,
 * gradient all-reduced) on the input of each column-parallel Linear, and
 * `TpAllReduce` (sum forward, gradient identity) on the partial output of
 * each row-parallel Linear, whose bias is added once after the sum.  So
 * autodiff of a rank's graph is that rank's Megatron backward.
 *
 * Sharded parameters keep their names and get their rank's slice as data
 * (TpParamShard says which, for checkpoint gathering / slicing); all other
 * parameters are replicated.  Patterns whose dims tp does not divide, or
 * whose values have readers outside the pattern, are left replicated
 * (counted in `skipped`). */
#ifndef HETC_TP_SHARD_H
#define HETC_TP_SHARD_H

#include <stdint.h>

#include "ir.h"

#define TP_MAX_RANGES 3

/* Rank `rank`'s slice of a parameter of the unsharded graph: along `axis`
 * (0 rows, 1 columns of a [K, N] Linear weight; 0 for a bias), the
 * concatenation of nranges ranges [start, start + len) of the full dim. */
typedef struct TpParamShard {
    char *name;
    int axis;
    int nranges;
    int64_t start[TP_MAX_RANGES], len[TP_MAX_RANGES];
    int64_t full_dim; /* the unsharded extent of `axis` */
} TpParamShard;

typedef struct TpShardResult {
    IrGraph *graph;          /* owned: rank's forward graph, shape-inferred */
    TpParamShard *shards;    /* owned */
    int nshards;
    int mlp, attention;      /* patterns sharded */
    int skipped;             /* patterns found but left replicated */
    int allreduce, copies;   /* TpAllReduce / TpCopy nodes inserted */
} TpShardResult;

/* Shard forward graph g (static shapes, parameters with data) for rank
 * `rank` of `tp`.  g is not modified.  tp == 1 gives a plain copy. */
int tp_shard(const IrGraph *g, int tp, int rank, TpShardResult *out, IrError *err);
/* Only patterns whose Linears all carry a layer id in [first, last] (a
 * pipeline stage's layers: a stage never sends a sharded value). */
int tp_shard_layers(const IrGraph *g, int tp, int rank, int first, int last, TpShardResult *out,
                    IrError *err);
void tp_shard_free(TpShardResult *r);

/* Query (the planner's view, passes/planner/intra_ir.c): the patterns
 * tp_shard_layers(g, tp, ., first, last) would shard, found by the same
 * matchers without rewriting anything (g needs no parameter data).  tp = 1
 * lists every pattern the graph has (1 divides every dim); a pattern found
 * at tp = 1 but missing at tp is one whose dims tp does not divide. */
enum { TP_PATTERN_MLP = 1, TP_PATTERN_ATTENTION = 2 };
#define TP_PATTERN_MAX_INNER 32
typedef struct TpPattern {
    int kind;                /* TP_PATTERN_* */
    const IrNode *row;       /* the row-parallel Linear (output all-reduced in forward) */
    const IrNode *column[3]; /* column-parallel Linears: MLP-in or fused QKV (1), or Q, K, V */
    int ncolumn;
    /* the nodes between them, whose outputs are sharded: the activation, or
     * Split, the q/k/v layout ops, Attention, Transpose and the merge
     * Reshape (at most TP_PATTERN_MAX_INNER: only counts would be lost) */
    const IrNode *inner[TP_PATTERN_MAX_INNER];
    int ninner;
} TpPattern;
/* *out (free() it) gets *n patterns in graph order; *skipped (may be NULL)
 * the patterns started but left replicated, as TpShardResult.skipped. */
int tp_shard_find(const IrGraph *g, int tp, int first, int last, TpPattern **out, int *n,
                  int *skipped, IrError *err);

#endif
