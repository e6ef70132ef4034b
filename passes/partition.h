/* partition: cut a training model by a plan into per-stage programs
 * (issue 6, DESIGN §5).
 *
 * Input: the FORWARD graph of the model with its loss (forward pipeline,
 * tie-weights, loss: output "loss"), shape-inferred at this stage's LOCAL
 * batch (microbatch rows / the stage's DP degree), and a layer id for every
 * forward node (node->layer_id, 1-based, from the layers pass run on the
 * graph the planner saw; nodes the caller could not map carry -1 and take
 * the layer of their nearest consumer, the loss node that of its input).
 * Stage s owns layers [first_layer[s], last_layer[s]].
 *
 * Output per stage: two graphs and the interface the runtime needs.
 *
 *  - `train`: forward + backward of ONE microbatch on this stage.
 *      graph inputs: the model's data inputs this stage reads (token ids,
 *      "targets" on the last stage), every boundary activation it receives
 *      (named as the producing value is named in the full graph), and on
 *      every stage but the last, the gradient of each boundary activation
 *      it sends (named "bgrad/<value>").
 *      graph outputs: boundary activations it sends (same names), the
 *      gradients of the boundary activations it received ("bgrad/<value>"),
 *      "grad/<P>" for each parameter P it holds, and "loss" on the last
 *      stage.  The last stage's loss is scaled by local_rows / rows, so the
 *      DP group's SUM of losses (and of gradients) is the single-process
 *      mean: every cross-rank reduction is a plain sum.
 *      Values that do not depend on any data input (a Transpose of a tied
 *      weight, position tables) are never sent: their producers are cloned
 *      into each stage that reads them, with the parameters they need, so
 *      a parameter can be held by several stages (see `shared`).
 *      Nodes carry phase fwd / bwd (autodiff seeded by "bgrad/" inputs,
 *      and by loss = 1 on the last stage).
 *  - `update`: the optimizer step of this stage's parameters, built like
 *      hetc train's update graph (passes/optimizer.h) except that
 *      "grad_norm" is a graph INPUT (f32 scalar: the runtime computes the
 *      global norm over all stages).  inputs: "grad/<P>", "lr", "step",
 *      "grad_norm"; PARAM values P and optstate values opt/m/P, opt/v/P
 *      (or opt/buf/P); outputs upd/P, upd/m/P, ... (state carry by name).
 *      With ZeRO (spec->zero[s] > 0 and dp > 1) every parameter, gradient
 *      and state of the update graph is one DP rank's flat slice of
 *      part_zero_len(numel, dp) elements: shape [L] for parameters of rank
 *      < 2 and [1, L] for the others, so the optimizer pass's rule "weight
 *      decay on rank >= 2" still sees the original shape's rank (every
 *      update op is elementwise, so a slice is as valid as the whole).
 */
#ifndef HETC_PARTITION_H
#define HETC_PARTITION_H

#include <stdint.h>

#include "ir.h"
#include "optimizer.h"
#include "tp_shard.h"

typedef enum PartXferKind {
    PX_ACT = 0,  /* forward activation, producer stage -> consumer stage */
    PX_GRAD = 1, /* its gradient, consumer stage -> producer stage */
} PartXferKind;

/* One boundary tensor of one microbatch, seen from one stage. */
typedef struct PartXfer {
    char *value;       /* name in this stage's train graph: an input (recv) or output (send) */
    int send;          /* 1: this stage sends it; 0: receives it */
    int peer;          /* the other stage */
    PartXferKind kind;
    int id;            /* plan-wide index, the same on both sides (tags) */
    int64_t rows;      /* rows of the whole microbatch (leading dim over all DP ranks) */
    int64_t row_bytes; /* bytes of one row */
} PartXfer;

typedef struct PartParam {
    char *name;        /* PARAM value name (identical in every stage that holds it) */
    int layer;         /* checkpoint layer: the first layer whose node reads it */
    int shared;        /* 1: also held by another stage (gradients summed across them) */
    int trained;       /* 1: the loss depends on it: "grad/<P>" is a train output and the
                        * update graph updates it (0: read-only, e.g. used by integer ops) */
} PartParam;

/* Activation recompute of a stage (partition_recompute.c). */
typedef enum PartRecompute {
    PART_RC_NONE = 0,      /* every forward value the backward reads stays in the slot */
    PART_RC_FULL = 1,      /* save layer-boundary values; each layer's internals recomputed */
    PART_RC_SELECTIVE = 2, /* recompute the attention core (Attention/Softmax outputs) */
} PartRecompute;

typedef struct PartStage {
    int stage;
    int first_layer, last_layer;
    int dp;            /* DP degree */
    int64_t local_rows;/* rows of a microbatch on one DP rank */
    IrGraph *train;    /* owned */
    IrGraph *update;   /* owned */
    PartXfer *xfers;   /* in the order the runtime must run them within a microbatch:
                        * forward recvs, forward sends, backward recvs, backward sends */
    int nxfers;
    PartParam *params;
    int nparams;
    PartRecompute recompute;
    int nrecomputed;   /* forward nodes cloned into the backward */
    int tp, tp_rank;   /* tensor parallelism: the graphs are TP rank tp_rank's of tp */
    TpParamShard *tp_shards; /* the sharded parameters' slices for tp_rank (rank r's ranges
                              * are rank 0's shifted by r x len); the others are replicated */
    int ntp_shards;
    int zero;          /* ZeRO level (0, 1, 2) in effect: 0 when dp == 1.  > 0: the update
                        * graph is one DP rank's flat slice (part_zero_len elements) of
                        * every parameter (see build_update) */
    char *data_input;  /* the model input of token ids this stage reads, or NULL */
    int reads_targets; /* 1: graph input "targets" */
} PartStage;

typedef struct PartSpec {
    int nstages;
    const int *first_layer, *last_layer; /* [nstages], 1-based inclusive, contiguous */
    const int *dp;                       /* [nstages] */
    int64_t rows;                        /* microbatch rows (all DP ranks) */
    OptimOpts optim;
    const PartRecompute *recompute;      /* [nstages], or NULL: none everywhere */
    const int *tp;                       /* [nstages] TP degree, or NULL: 1 everywhere */
    int tp_rank;                         /* which TP rank's graphs to build (0 .. tp[s]-1) */
    const int *zero;                     /* [nstages] ZeRO level 0..2, or NULL: 0 everywhere */
    /* Heterogeneous DP: when dp[s] does not divide rows, the first rows % dp
     * DP ranks run ceil(rows / dp) rows, the rest floor (rt_row_split); each
     * count is its own binary.  dp_rank picks the DP rank whose rows to
     * build (0: the larger count). */
    int dp_rank;
    /* > 0: the rows this DP rank runs instead (a plan's per-stage row
     * table, any split of rows; the loss is scaled by local_rows / rows) */
    int64_t local_rows;
    /* > 0: the loss is scaled by local_rows / loss_rows instead (several
     * pipelines, each running its share `rows` of a microbatch of
     * loss_rows rows: plain sums over all of them give the mean) */
    int64_t loss_rows;
} PartSpec;

/* Rows of DP rank r of dp in a microbatch of `rows` (rt_row_split's count). */
static inline int64_t part_local_rows(int64_t rows, int dp, int r) {
    return rows / dp + (r < rows % dp ? 1 : 0);
}

/* ZeRO slice length of a parameter of numel elements over dp ranks: the
 * largest rt_row_split share, ceil(numel / dp).  Every DP rank runs the same
 * update graph, so shorter shares are padded with zeros (which AdamW / SGD
 * keep at zero: zero gradient, zero state, zero parameter). */
static inline int64_t part_zero_len(int64_t numel, int dp) {
    return dp > 1 ? (numel + dp - 1) / dp : numel;
}

/* Naming of gradient inputs: a sent activation read by ONE later stage
 * gets one input "bgrad/<value>"; one read by several stages gets one input
 * per reader, "bgrad/<value>@<stage>" (autodiff sums them), so every
 * PartXfer names its own buffer.  Received gradients are outputs
 * "bgrad/<value>".  The runtime matches tensors to xfers by name. */

/* Build stage `s` from `fwd` (the forward+loss graph at batch
 * spec->rows / spec->dp[s], layer ids set).  fwd is not modified.
 * With spec->tp[s] > 1 the stage's view of fwd is first sharded for TP
 * rank spec->tp_rank (passes/tp_shard.h: Megatron attention / MLP, the
 * collectives as TpCopy / TpAllReduce nodes, autodiff gives their
 * backward); boundary values stay replicated over the TP ranks, and the
 * graph structure is the same for every rank (only parameter slices
 * differ), so one stage binary serves all TP ranks.
 * Errors name the stage and the node / value at fault. */
int partition_stage(const IrGraph *fwd, const PartSpec *spec, int s, PartStage *out,
                    IrError *err);
void partition_stage_free(PartStage *st);

/* Recompute in a train graph whose nodes are phase fwd then bwd (autodiff
 * done): the backward reads clones ("rc/<name>", phase bwd, placed right
 * before their first backward reader) of the forward values `mode` does
 * not save; *nrecomputed = clones made.  The forward is unchanged.  */
int part_recompute(IrGraph *g, PartRecompute mode, int *nrecomputed, IrError *err);
const char *part_recompute_name(PartRecompute r);          /* "none" | "full" | "selective" */
int part_recompute_parse(const char *s, PartRecompute *out); /* 0, or -1: unknown name */

#endif
