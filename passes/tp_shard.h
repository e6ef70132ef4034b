/* Tensor parallelism: one TP rank's forward graph (issue 9 part 1 / 5).
 *
 * Megatron-style sharding found on the canonical IR, not hard-coded to a
 * model:
 *
 *  - MLP: Linear(x, W1, b1) -> unary activation (Gelu, Relu, SiLU, Tanh,
 *    Sigmoid, Erf) -> Linear(h, W2, b2).  W1 and b1 are split by output
 *    columns (column-parallel), W2 by input rows (row-parallel);
 *  - gated MLP (SwiGLU, GeGLU): Linear(Mul(act(Linear_g(x)),
 *    Linear_u(x))), the Mul's operands in either order: gate and up
 *    column-parallel over the same columns (one TpCopy when they share x),
 *    the outer Linear row-parallel (counted in `mlp`);
 *  - attention: Linear -> Split (fused QKV) or three Linears -> per q/k/v
 *    a head-agnostic subgraph -> Attention -> Transpose/Reshape (merge
 *    heads) -> Linear.  The subgraph holds the head-split Reshape and
 *    layout ops, and may hold rotary embedding (Mul/Add by cos/sin
 *    constants that broadcast over the heads, Slice/Neg/Concat on other
 *    axes) and the GQA repeat of k/v heads (Unsqueeze, Expand, Reshape
 *    merging [Hkv, rep] into H); every op must provably keep "rank r's
 *    value = a contiguous block of the heads axis" (tp_shard.c, head sets)
 *    and every value in it must be read inside it only.  Heads are split
 *    over the ranks: rank r keeps q heads [r H/tp, (r+1) H/tp) and kv
 *    heads [r Hkv/tp, (r+1) Hkv/tp) (the matching columns of each QKV
 *    chunk; tp must divide Hkv), every Reshape / Expand target and Split
 *    size that carries a head count is divided by tp, and the output
 *    Linear is row-parallel over the kept heads' rows;
 *  - vocabulary parallelism (tp_shard_vocab.c, after the above; Megatron-LM
 *    Sec. 3): an Embedding of a [V, D] parameter table by token ids (ids
 *    read from a graph input; a position table read by constant ids stays
 *    replicated) keeps table rows [r V/tp, (r+1) V/tp) (attrs vocab_start /
 *    vocab_size: other ranks' ids give 0 rows) and its output is
 *    all-reduced; the LM head, a Linear whose output reaches CrossEntropy
 *    through single-reader Reshapes, is column-parallel over V, and the
 *    loss vocab-parallel: ReduceMax -> TpAllReduce op "max" -> VocabCeStats
 *    (sum exp, target logit) -> TpAllReduce -> VocabCrossEntropy, whose
 *    gradient is the local softmax - onehot (no communication).  A tied
 *    table (the head reads Transpose(table), passes/tie_weights.c) is
 *    sharded once, by rows, when the layer range holds both the embedding
 *    and the head; when only one end is in range (pipeline stages split
 *    them, the stages sum the shared table's gradient whole) both stay
 *    replicated (`skipped`).  A "logits" graph output of a rank's graph
 *    holds the rank's vocabulary slice.
 *
 * Communication is explicit IR (ir/ops.def): `TpCopy` (identity forward,
 * gradient all-reduced) on the input of each column-parallel Linear, and
 * `TpAllReduce` (sum forward, gradient identity) on the partial output of
 * each row-parallel Linear, whose bias is added once after the sum.  So
 * autodiff of a rank's graph is that rank's Megatron backward.
 *
 * Sharded parameters keep their names and get their rank's slice as data
 * (TpParamShard says which, for checkpoint gathering / slicing); all other
 * parameters are replicated.  Patterns whose dims tp does not divide,
 * whose values have readers outside the pattern, or with an op not known
 * to be head-agnostic, are left replicated (counted in `skipped`). */
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
    int vocab_embed, vocab_head; /* vocabulary-parallel embeddings / LM heads + loss */
} TpShardResult;

/* Shard forward graph g (static shapes, parameters with data) for rank
 * `rank` of `tp`.  g is not modified.  tp == 1 gives a plain copy.  A g
 * after the bf16-mixed autocast (passes/mixed_precision.h) is matched as
 * its fp32 graph: tp_shard strips the Casts off its copy, shards it, and
 * runs mixed-precision on the rank's graph again, so the bf16 weight copies
 * are Casts of the rank's slices and TpCopy / TpAllReduce stay f32. */
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
 * at tp = 1 but missing at tp is one whose dims tp does not divide.  g is
 * the fp32 graph (the planner's; a bf16-mixed g's Linears read Casts and
 * match nothing here, where nothing is copied to strip them from). */
/* VOCAB_EMBED: row = the Embedding (its output all-reduced), no column.
 * VOCAB_HEAD: row = the loss (CrossEntropy: its row max and stats
 * all-reduced), column[0] = the head Linear, inner = the Reshapes between. */
enum { TP_PATTERN_MLP = 1, TP_PATTERN_ATTENTION = 2, TP_PATTERN_VOCAB_EMBED = 3,
       TP_PATTERN_VOCAB_HEAD = 4, TP_PATTERN_GATED_MLP = 5 };
#define TP_PATTERN_MAX_INNER 32
typedef struct TpPattern {
    int kind;                /* TP_PATTERN_* */
    const IrNode *row;       /* the row-parallel Linear (output all-reduced in forward) */
    const IrNode *column[3]; /* column-parallel Linears: MLP-in or fused QKV (1), gate and
                              * up (GATED_MLP: 2), or Q, K, V */
    int ncolumn;
    /* the nodes between them, whose outputs are sharded: the activation
     * (and the gating Mul), or Split, the q/k/v subgraphs (layout, rotary,
     * GQA repeat), Attention, Transpose and the merge Reshape (at most
     * TP_PATTERN_MAX_INNER: only counts would be lost) */
    const IrNode *inner[TP_PATTERN_MAX_INNER];
    int ninner;
} TpPattern;
/* *out (free() it) gets *n patterns in graph order; *skipped (may be NULL)
 * the patterns started but left replicated, as TpShardResult.skipped. */
int tp_shard_find(const IrGraph *g, int tp, int first, int last, TpPattern **out, int *n,
                  int *skipped, IrError *err);

#endif
