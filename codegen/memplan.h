/* Memory plan of one pipeline stage (DESIGN §5): fixed offsets for every
 * buffer the stage's generated functions touch, and the order of their
 * calls (the liveness that the offsets rely on is defined over it).
 *
 * Arena layout (all offsets aligned to MP_ALIGN):
 *
 *   [params][grad accumulators][optimizer state][scalars][scratch][slot 0]...[slot K-1]
 *
 *  - params: each PartParam, f32, its PARAM value's shape;
 *  - accumulators: one f32 buffer per param (hetrt_accum target); with
 *    ZeRO-2 (st->zero >= 2) only zlen elements: this DP rank's slice of
 *    the DP-summed gradient, which the backward's hetrt_accum_scatter
 *    reduce-scatters every microbatch's full gradient into (the full
 *    grad/P lives in backward scratch only, from its producer to that
 *    call), so the persistent gradient memory is 1/dp (ZeRO-1 keeps the
 *    whole tensor and reduce-scatters once per step);
 *  - optimizer state: m and v (AdamW) or buf (SGD momentum, stored as m)
 *    per param, as the update graph declares them (opt/m/P, opt/v/P,
 *    opt/buf/P); with ZeRO (st->zero > 0) each of zlen elements (this DP
 *    rank's slice), followed by one zlen parameter slice per param (the
 *    update graph's P; the runtime copies P's slice in and all-gathers it
 *    back), all counted as optimizer state; the update's grad/P is the
 *    first zlen elements of the accumulator (the runtime reduce-scatters
 *    into it);
 *  - scalars: lr (f32), step (i64), grad_norm (f32);
 *  - scratch: reused by every function call.  forward puts there the
 *    forward values no backward node reads (temporaries; with recompute,
 *    everything the backward recomputes), backward its values (phase-bwd
 *    node outputs, received "bgrad/" inputs), update its node outputs
 *    except those written in place (MpParam.inplace: the AdamW node's
 *    upd/P, upd/m/P, upd/v/P live at P's zp_off, m_off, v_off); a
 *    call's scratch content is dead when it returns, so the three
 *    timelines share the region (size = the largest);
 *  - activation slots: the train graph's inputs (token ids, targets,
 *    received activations) and the phase-fwd node outputs of ONE
 *    microbatch that its backward reads, from its forward until its
 *    backward; slot_bytes each, nslots = K_i (the schedule's in-flight
 *    bound).
 *
 * Inside scratch, offsets come from first-fit over the call order: a
 * buffer is live from the call that writes it to the last call that reads
 * it (a node input, hetrt_send, hetrt_accum, hetrt_copy, hetrt_loss), and
 * two buffers whose live ranges share a call never share a byte.
 * Constants stay in the IR (HETC_BUF_CONST): not allocated.
 *
 * Call order: forward / backward run their phase's nodes in graph order,
 * with sends, the loss and accumulations right after the node that makes
 * their value ready (sends keep the xfer order); update runs its nodes
 * depth-first from its outputs (one parameter's chain after another) with
 * each copy / zero after the last reader of what it overwrites (no copy for
 * an output written in place: SGD's chain still ends in MP_COPY actions).
 */
#ifndef HETC_MEMPLAN_H
#define HETC_MEMPLAN_H

#include <stdint.h>

#include "ir.h"
#include "partition.h"

#define MP_ALIGN 64

/* Where a value lives: region is HETC_BUF_* (stage_abi.h). */
typedef struct MpLoc {
    int region;     /* HETC_BUF_NONE: not placed (unused by the stage) */
    int64_t off;    /* within the arena (ARENA) or the slot (SLOT) */
    int64_t bytes;  /* the value's bytes (numel * dtype size) */
    int first, last; /* live range in its function's action list (scratch only; else -1) */
} MpLoc;

/* One call of a stage function, before lowering to hetrt_* calls. */
typedef enum MpActKind {
    MP_TOKENS, /* index: 0 token ids, 1 targets */
    MP_RECV,   /* index: xfer */
    MP_NODE,   /* index: node of the function's graph */
    MP_SEND,   /* index: xfer */
    MP_LOSS,   /* the train graph's "loss" output */
    MP_ACCUM,  /* index: param (grad/P -> accumulator) */
    MP_COPY,   /* index: param, sub: 0 upd/P -> P, 1 upd/{m,buf}/P -> m, 2 upd/v/P -> v
                * (none for an output written in place: MpParam.inplace) */
    MP_ZERO,   /* index: param (its accumulator) */
} MpActKind;

typedef struct MpAction {
    MpActKind kind;
    int index, sub;
} MpAction;

enum { MP_FN_FORWARD = 0, MP_FN_BACKWARD = 1, MP_FN_UPDATE = 2, MP_NFN = 3 };

typedef struct MpParam {
    const char *name;    /* the PartParam's name (borrowed from the stage) */
    int64_t numel, bytes;
    int64_t param_off, acc_off;
    int64_t m_off, v_off; /* -1: no such state */
    int64_t zlen;         /* elements the update runs on: numel, or with ZeRO this DP rank's
                           * padded slice part_zero_len(numel, dp) */
    int64_t zp_off;       /* the update graph's parameter: param_off, or with ZeRO the slice
                           * buffer (zlen f32) the runtime fills from / gathers into P */
    int64_t acc_len;      /* elements of the accumulator at acc_off: numel, or zlen with
                           * ZeRO-2 (the gradient shard) */
    IrValue *grad;        /* the train graph's "grad/P" output */
    IrValue *upd[3];      /* update outputs upd/P, upd/{m,buf}/P, upd/v/P (NULL: none) */
    unsigned inplace;     /* bit k: upd[k] is written in place, at zp_off / m_off / v_off
                           * (its producer's host table entry allows output j in input
                           * j's buffer, input j is P / m / v and the producer is its only
                           * reader: the fused AdamW), so it needs no MP_COPY */
} MpParam;

typedef struct MemPlan {
    MpParam *params;
    int nparams;
    int64_t lr_off, step_off, norm_off;
    int64_t scratch_off, scratch_bytes;
    int64_t fwd_scratch_bytes, bwd_scratch_bytes, upd_scratch_bytes;
    int64_t slot_base, slot_bytes;
    int nslots;
    int64_t arena_bytes;
    /* report: bytes of each region (aligned sizes) */
    int64_t param_bytes, grad_bytes, opt_bytes, scalar_bytes;
    int zero;             /* the stage's ZeRO level in effect (PartStage.zero) */
    /* per value, indexed by IrValue.id of the train / update graph */
    MpLoc *train_loc, *upd_loc;
    int ntrain_loc, nupd_loc;
    /* the call order of forward, backward, update */
    MpAction *acts[MP_NFN];
    int nacts[MP_NFN];
    int data_index, targets_index; /* train-graph input ids of token ids / targets, or -1 */
    IrValue *loss;                 /* the train graph's "loss" output, or NULL */
    /* fused elementwise groups of the train / update graph (fuse.h; borrowed,
     * NULL: none): a group's values used only inside it get no buffer
     * (HETC_BUF_NONE), its members have no action but the last, whose
     * MP_NODE runs the group and reads / writes the group's external values */
    const struct FuseGraph *fuse[2];
    /* views (plan_views): by train-graph value id, the value whose bytes a
     * Reshape / Squeeze / Unsqueeze / Flatten / Identity output shares (its
     * loc is that value's: the lowering's copy is then onto itself, which
     * the runtime skips), or -1 */
    int *view_of;
    int nviews;
} MemPlan;

/* Plan stage `st` with nslots activation slots.  Errors name the stage and
 * the value / node at fault (non-static shape, unknown dtype, a phase-fwd
 * node reading a backward value, a graph input that is neither data, a
 * received tensor, nor a scalar of the update, ...). */
int memplan_build(const PartStage *st, int nslots, MemPlan *mp, IrError *err);
void memplan_free(MemPlan *mp);
/* The same with fused groups (fuse.h) of the train graph (built with the
 * node index as position) and the update graph (built with
 * memplan_update_order's positions); either may be NULL.  They must outlive
 * the plan. */
int memplan_build_fused(const PartStage *st, int nslots, const struct FuseGraph *ft,
                        const struct FuseGraph *fu, MemPlan *mp, IrError *err);
/* The update graph's node indices in the order memplan calls them
 * (malloc'd, u->nnodes entries). */
int *memplan_update_order(const IrGraph *u);

/* The location of v (a value of the train graph if graph == 0, else of the
 * update graph); NULL if v is not of that graph. */
const MpLoc *memplan_loc(const MemPlan *mp, const PartStage *st, int graph, const IrValue *v);

/* "params B grads B optstate B scalars B scratch B (bwd B, update B)
 *  slots K x B total B" on f (one line, bytes; `grads` is the persistent
 *  gradient memory: the accumulators, 1/dp of them under ZeRO-2). */
void memplan_report(const MemPlan *mp, FILE *f);

#endif
