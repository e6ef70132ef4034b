/* Memory plan of one pipeline stage: call order, live ranges and offsets
 * (memplan.h says what goes where and why). */
#include "memplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "firstfit.h"
#include "fuse.h"
#include "hostexec_internal.h" /* HxOpEntry.inplace */
#include "stage_abi.h"

static int64_t align_up(int64_t x) { return (x + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN; }

/* bytes of a value the stage must hold: static shape, fixed-size dtype */
static int value_bytes(const IrValue *v, int stage, const char *graph, int64_t *bytes,
                       IrError *err) {
    size_t es = ir_dtype_size(v->dtype);
    if (es == 0 || v->dtype == IR_STRING)
        return ir_errorf(err, "stage %d, %s graph: value '%s' has dtype %s (no fixed size)",
                         stage, graph, v->name, ir_dtype_name(v->dtype));
    if (!v->shape_known || !ir_shape_is_static(&v->shape)) {
        char sb[128];
        return ir_errorf(err, "stage %d, %s graph: value '%s' has no static shape (%s)", stage,
                         graph, v->name,
                         v->shape_known ? ir_shape_str(&v->shape, sb, sizeof sb) : "unknown");
    }
    *bytes = ir_shape_numel(&v->shape) * (int64_t)es;
    return 0;
}

static int is_scalar(const IrValue *v, IrDType dt) {
    return v->dtype == dt && v->shape_known && ir_shape_numel(&v->shape) == 1;
}

static int find_param(const MemPlan *mp, const char *name) {
    for (int i = 0; i < mp->nparams; i++)
        if (!strcmp(mp->params[i].name, name)) return i;
    return -1;
}

static int is_output(const IrGraph *g, const IrValue *v) {
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == v) return 1;
    return 0;
}

/* readers of each value (node inputs + graph outputs), by value id: one
 * pass, so the plan stays linear on graphs of 10^5 nodes */
static int *use_counts(const IrGraph *g) {
    int *u = ir_xcalloc((size_t)g->nvalues + 1, sizeof *u);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i]->nin; k++)
            if (g->nodes[i]->in[k]) u[g->nodes[i]->in[k]->id]++;
    for (int i = 0; i < g->noutputs; i++) u[g->outputs[i]->id]++;
    for (int i = 0; i < g->ninputs; i++) u[g->inputs[i]->id]++; /* inputs are always placed */
    return u;
}

/* ------------------------------------------------------------ parameters */

static int plan_params(const PartStage *st, MemPlan *mp, IrError *err) {
    IrGraph *t = st->train, *u = st->update;
    mp->params = ir_xcalloc((size_t)st->nparams + 1, sizeof *mp->params);
    mp->nparams = st->nparams;
    for (int i = 0; i < st->nparams; i++) {
        MpParam *p = &mp->params[i];
        const char *pn = st->params[i].name;
        p->name = pn;
        p->m_off = p->v_off = -1;
        if (find_param(mp, pn) != i)
            return ir_errorf(err, "stage %d: parameter '%s' listed twice", st->stage, pn);
        IrValue *pv = ir_graph_find_value(t, pn);
        if (!pv || pv->kind != IR_VK_PARAM)
            return ir_errorf(err, "stage %d: parameter '%s' is not a PARAM of the train graph",
                             st->stage, pn);
        if (pv->dtype != IR_F32)
            return ir_errorf(err, "stage %d: parameter '%s' is %s (only f32 is trained)",
                             st->stage, pn, ir_dtype_name(pv->dtype));
        if (value_bytes(pv, st->stage, "train", &p->bytes, err)) return -1;
        p->numel = p->bytes / 4;
        p->zlen = st->zero ? part_zero_len(p->numel, st->dp) : p->numel;
        /* ZeRO-2 keeps only this rank's gradient shard between microbatches */
        p->acc_len = st->zero >= 2 ? p->zlen : p->numel;
        char nm[1200];
        snprintf(nm, sizeof nm, "grad/%s", pn);
        p->grad = ir_graph_find_value(t, nm);
        if (!p->grad || !is_output(t, p->grad))
            return ir_errorf(err, "stage %d: train graph has no output '%s'", st->stage, nm);
        if (p->grad->dtype != IR_F32 || !p->grad->shape_known ||
            ir_shape_numel(&p->grad->shape) != p->numel)
            return ir_errorf(err, "stage %d: '%s' is not f32 of %lld elements like '%s'",
                             st->stage, nm, (long long)p->numel, pn);
        static const char *const upd_fmt[3][2] = {
            {"upd/%s", NULL}, {"upd/m/%s", "upd/buf/%s"}, {"upd/v/%s", NULL}};
        for (int k = 0; k < 3; k++)
            for (int a = 0; a < 2 && !p->upd[k] && upd_fmt[k][a]; a++) {
                snprintf(nm, sizeof nm, upd_fmt[k][a], pn);
                IrValue *o = ir_graph_find_value(u, nm);
                if (o && is_output(u, o)) p->upd[k] = o;
            }
        if (!p->upd[0])
            return ir_errorf(err, "stage %d: update graph has no output 'upd/%s'", st->stage, pn);
        for (int k = 0; k < 3; k++)
            if (p->upd[k] && (p->upd[k]->dtype != IR_F32 || !p->upd[k]->shape_known ||
                              ir_shape_numel(&p->upd[k]->shape) != p->zlen))
                return ir_errorf(err, "stage %d: update output '%s' is not f32 of %lld elements",
                                 st->stage, p->upd[k]->name, (long long)p->zlen);
    }
    /* arena: all params, then all accumulators, then all state */
    int64_t off = 0;
    for (int i = 0; i < mp->nparams; i++) {
        mp->params[i].param_off = off;
        off += align_up(mp->params[i].bytes);
    }
    mp->param_bytes = off;
    for (int i = 0; i < mp->nparams; i++) {
        mp->params[i].acc_off = off;
        off += align_up(mp->params[i].acc_len * 4);
    }
    mp->grad_bytes = off - mp->param_bytes;
    for (int i = 0; i < mp->nparams; i++) {
        MpParam *p = &mp->params[i];
        char nm[1200];
        snprintf(nm, sizeof nm, "opt/m/%s", p->name);
        int has_m = ir_graph_find_value(u, nm) != NULL;
        snprintf(nm, sizeof nm, "opt/buf/%s", p->name);
        has_m |= ir_graph_find_value(u, nm) != NULL;
        snprintf(nm, sizeof nm, "opt/v/%s", p->name);
        int has_v = ir_graph_find_value(u, nm) != NULL;
        if (has_m || p->upd[1]) {
            p->m_off = off;
            off += align_up(p->zlen * 4);
        }
        if (has_v || p->upd[2]) {
            p->v_off = off;
            off += align_up(p->zlen * 4);
        }
    }
    mp->zero = st->zero;
    for (int i = 0; i < mp->nparams; i++) {
        MpParam *p = &mp->params[i];
        p->zp_off = p->param_off;
        if (!st->zero) continue;
        p->zp_off = off;
        off += align_up(p->zlen * 4);
    }
    mp->opt_bytes = off - mp->param_bytes - mp->grad_bytes;
    mp->lr_off = off;
    mp->step_off = off + MP_ALIGN;
    mp->norm_off = off + 2 * MP_ALIGN;
    mp->scalar_bytes = 3 * MP_ALIGN;
    mp->scratch_off = off + mp->scalar_bytes;
    return 0;
}

/* ------------------------------------------------------------ placement */

static int xfer_of(const PartStage *st, const char *name, int send) {
    for (int i = 0; i < st->nxfers; i++)
        if (st->xfers[i].send == send && !strcmp(st->xfers[i].value, name)) return i;
    return -1;
}

/* Region of every train-graph value (offsets come later). */
static int place_train_values(const PartStage *st, MemPlan *mp, const int *uses,
                              const char *bwd_reads, const char *keep_out, IrError *err) {
    IrGraph *t = st->train;
    for (int i = 0; i < t->nvalues; i++) {
        IrValue *v = t->values[i];
        MpLoc *l = &mp->train_loc[i];
        l->first = l->last = -1;
        l->region = HETC_BUF_NONE;
        if (v->kind == IR_VK_CONST) {
            l->region = HETC_BUF_CONST;
            continue;
        }
        if (fuse_internal(mp->fuse[0], v)) continue; /* a fused kernel's register */
        int is_in = v->kind == IR_VK_INPUT && !v->producer;
        if (!uses[i] && !v->producer) continue;
        if (v->kind == IR_VK_PARAM) {
            int p = find_param(mp, v->name);
            if (p < 0)
                return ir_errorf(err,
                                 "stage %d: train graph reads parameter '%s', which is not in "
                                 "the stage's parameter list",
                                 st->stage, v->name);
            *l = (MpLoc){HETC_BUF_ARENA, mp->params[p].param_off, mp->params[p].bytes, -1, -1};
            continue;
        }
        if (value_bytes(v, st->stage, "train", &l->bytes, err)) return -1;
        if (v->producer) {
            IrPhase ph = v->producer->phase;
            if (ph != IR_PHASE_FWD && ph != IR_PHASE_BWD)
                return ir_errorf(err, "stage %d: train graph node '%s' (%s) has phase %s",
                                 st->stage, v->producer->name, ir_op_name(v->producer->op),
                                 ir_phase_name(ph));
            /* a forward value lives in the slot only if the backward reads it
             * (or the runtime might: an output that is neither sent nor the
             * loss); other forward values are forward temporaries in scratch,
             * which is what makes recompute shrink the slot */
            l->region = ph == IR_PHASE_FWD && (bwd_reads[i] || keep_out[i]) ? HETC_BUF_SLOT
                                                                             : HETC_BUF_ARENA;
            continue;
        }
        if (!is_in)
            return ir_errorf(err, "stage %d: train graph value '%s' (%s) has no producer",
                             st->stage, v->name, ir_value_kind_name(v->kind));
        int x = xfer_of(st, v->name, 0);
        if (st->data_input && !strcmp(v->name, st->data_input)) {
            if (v->dtype != IR_I64 && v->dtype != IR_I32)
                return ir_errorf(err, "stage %d: token input '%s' is %s (i32 or i64 expected)",
                                 st->stage, v->name, ir_dtype_name(v->dtype));
            mp->data_index = i;
            l->region = HETC_BUF_SLOT;
        } else if (st->reads_targets && !strcmp(v->name, "targets")) {
            if (v->dtype != IR_I64 && v->dtype != IR_I32)
                return ir_errorf(err, "stage %d: input 'targets' is %s (i32 or i64 expected)",
                                 st->stage, ir_dtype_name(v->dtype));
            mp->targets_index = i;
            l->region = HETC_BUF_SLOT;
        } else if (x >= 0) {
            /* activations stay with their microbatch; gradients are consumed by
             * the backward that receives them */
            l->region = st->xfers[x].kind == PX_ACT ? HETC_BUF_SLOT : HETC_BUF_ARENA;
        } else {
            return ir_errorf(err,
                             "stage %d: train graph input '%s' is neither the token input, "
                             "targets, nor a received tensor",
                             st->stage, v->name);
        }
    }
    return 0;
}

static int place_train(const PartStage *st, MemPlan *mp, IrError *err) {
    IrGraph *t = st->train;
    mp->ntrain_loc = t->nvalues;
    mp->train_loc = ir_xcalloc((size_t)t->nvalues + 1, sizeof *mp->train_loc);
    mp->data_index = mp->targets_index = -1;
    /* forward values the backward reads, and graph outputs the stage
     * functions do not consume themselves (not a send, not the loss) */
    char *bwd_reads = ir_xcalloc((size_t)t->nvalues + 1, 1);
    char *keep_out = ir_xcalloc((size_t)t->nvalues + 1, 1);
    for (int i = 0; i < t->nnodes; i++)
        if (t->nodes[i]->phase != IR_PHASE_FWD)
            for (int k = 0; k < t->nodes[i]->nin; k++)
                if (t->nodes[i]->in[k]) bwd_reads[t->nodes[i]->in[k]->id] = 1;
    for (int i = 0; i < t->noutputs; i++) {
        const IrValue *o = t->outputs[i];
        if (strcmp(o->name, "loss") && xfer_of(st, o->name, 1) < 0) keep_out[o->id] = 1;
    }
    int *uses = use_counts(t), rc = place_train_values(st, mp, uses, bwd_reads, keep_out, err);
    free(uses);
    free(bwd_reads);
    free(keep_out);
    if (rc) return -1;
    if (st->data_input && mp->data_index < 0)
        return ir_errorf(err, "stage %d: train graph has no input '%s'", st->stage,
                         st->data_input);
    if (st->reads_targets && mp->targets_index < 0)
        return ir_errorf(err, "stage %d: train graph has no input 'targets'", st->stage);
    for (int i = 0; i < st->nxfers; i++) {
        const PartXfer *x = &st->xfers[i];
        IrValue *v = x->value ? ir_graph_find_value(t, x->value) : NULL;
        if (!v)
            return ir_errorf(err, "stage %d: xfer %d names '%s', not a train graph value",
                             st->stage, i, x->value ? x->value : "(null)");
        int ok = x->send ? is_output(t, v) && mp->train_loc[v->id].region != HETC_BUF_CONST
                         : mp->train_loc[v->id].region != HETC_BUF_NONE && !v->producer;
        if (!ok)
            return ir_errorf(err, "stage %d: xfer %d ('%s'): %s", st->stage, i, x->value,
                             x->send ? "a sent value must be a computed graph output"
                                     : "a received value must be a graph input");
        int64_t want = x->rows * x->row_bytes, rows = v->shape.rank ? v->shape.dims[0] : 1;
        if (x->rows <= 0 || x->row_bytes <= 0 || mp->train_loc[v->id].bytes != rows * x->row_bytes)
            return ir_errorf(err,
                             "stage %d: xfer %d ('%s'): %lld local bytes, not a whole number of "
                             "%lld-byte rows (microbatch %lld bytes)",
                             st->stage, i, x->value, (long long)mp->train_loc[v->id].bytes,
                             (long long)x->row_bytes, (long long)want);
    }
    return 0;
}

static int place_update_values(const PartStage *st, MemPlan *mp, const int *uses,
                               IrError *err);

/* The update-graph value that update output k of p carries into (P, its
 * opt/m/P or opt/buf/P, its opt/v/P), or NULL. */
static IrValue *upd_dest(IrGraph *u, const MpParam *p, int k) {
    static const char *const dst[3][2] = {{"%s", NULL}, {"opt/m/%s", "opt/buf/%s"},
                                          {"opt/v/%s", NULL}};
    char nm[1200];
    for (int a = 0; a < 2 && dst[k][a]; a++) {
        snprintf(nm, sizeof nm, dst[k][a], p->name);
        IrValue *d = ir_graph_find_value(u, nm);
        if (d) return d;
    }
    return NULL;
}

/* Update outputs written in place (MpParam.inplace): upd[k] is output j of
 * a node whose host table entry allows output j in input j's buffer
 * (HxOpEntry.inplace; the fused AdamW), input j is the value upd[k]
 * carries into, and that node is its only reader (no other node, no graph
 * output), so overwriting it while the node runs loses nothing. */
static void mark_inplace(const PartStage *st, MemPlan *mp, const int *uses) {
    IrGraph *u = st->update;
    for (int i = 0; i < mp->nparams; i++) {
        MpParam *p = &mp->params[i];
        for (int k = 0; k < 3; k++) {
            IrValue *o = p->upd[k], *d = o ? upd_dest(u, p, k) : NULL;
            const IrNode *n = o ? o->producer : NULL;
            int j = o ? o->producer_slot : -1;
            const HxOpEntry *e = n ? hx_op_entry(n->op) : NULL;
            int64_t off = k == 0 ? p->zp_off : k == 1 ? p->m_off : p->v_off;
            if (!e || !d || j < 0 || j >= 32 || j >= n->nin || !(e->inplace & (1u << j)) ||
                n->in[j] != d || uses[d->id] != 1 || off < 0 || d->dtype != o->dtype ||
                ir_value_bytes(d) != ir_value_bytes(o))
                continue;
            p->inplace |= 1u << k;
        }
    }
}

/* The arena offset of update output v when it is written in place, else -1. */
static int64_t inplace_off(const MemPlan *mp, const IrValue *v) {
    for (int i = 0; i < mp->nparams; i++) {
        const MpParam *p = &mp->params[i];
        for (int k = 0; k < 3; k++)
            if (p->upd[k] == v && (p->inplace & (1u << k)))
                return k == 0 ? p->zp_off : k == 1 ? p->m_off : p->v_off;
    }
    return -1;
}

static int place_update(const PartStage *st, MemPlan *mp, IrError *err) {
    IrGraph *u = st->update;
    mp->nupd_loc = u->nvalues;
    mp->upd_loc = ir_xcalloc((size_t)u->nvalues + 1, sizeof *mp->upd_loc);
    int *uses = use_counts(u), rc;
    mark_inplace(st, mp, uses);
    rc = place_update_values(st, mp, uses, err);
    free(uses);
    return rc;
}

static int place_update_values(const PartStage *st, MemPlan *mp, const int *uses, IrError *err) {
    IrGraph *u = st->update;
    for (int i = 0; i < u->nvalues; i++) {
        IrValue *v = u->values[i];
        MpLoc *l = &mp->upd_loc[i];
        l->first = l->last = -1;
        if (v->kind == IR_VK_CONST) {
            l->region = HETC_BUF_CONST;
            continue;
        }
        if (fuse_internal(mp->fuse[1], v)) { /* a fused kernel's register */
            l->region = HETC_BUF_NONE;
            continue;
        }
        if (!v->producer && !uses[i]) continue;
        if (value_bytes(v, st->stage, "update", &l->bytes, err)) return -1;
        l->region = HETC_BUF_ARENA;
        const char *n = v->name;
        int p;
        if (!strcmp(n, "grad_norm")) {
            if (!is_scalar(v, IR_F32))
                return ir_errorf(err, "stage %d: update value 'grad_norm' is not an f32 scalar",
                                 st->stage);
            l->off = mp->norm_off; /* input (global norm) or output: the scalar slot */
        } else if (v->producer) {
            /* scratch, placed with the live ranges; or written in place */
            l->off = inplace_off(mp, v);
        } else if (v->kind == IR_VK_PARAM) {
            if ((p = find_param(mp, n)) < 0)
                return ir_errorf(err, "stage %d: update graph parameter '%s' is not the stage's",
                                 st->stage, n);
            l->off = mp->params[p].zp_off;
            if (l->bytes != mp->params[p].zlen * 4)
                return ir_errorf(err, "stage %d: update graph parameter '%s' is not %lld f32",
                                 st->stage, n, (long long)mp->params[p].zlen);
        } else if (v->kind == IR_VK_OPTSTATE) {
            int sub = !strncmp(n, "opt/m/", 6) ? 1 : !strncmp(n, "opt/buf/", 8) ? 1
                      : !strncmp(n, "opt/v/", 6) ? 2 : 0;
            p = sub ? find_param(mp, strchr(n + 4, '/') + 1) : -1;
            if (p < 0)
                return ir_errorf(err, "stage %d: optimizer state '%s' belongs to no parameter",
                                 st->stage, n);
            l->off = sub == 1 ? mp->params[p].m_off : mp->params[p].v_off;
            if (l->bytes != mp->params[p].zlen * 4 || l->off < 0)
                return ir_errorf(err, "stage %d: optimizer state '%s' does not match '%s'",
                                 st->stage, n, mp->params[p].name);
        } else if (v->kind == IR_VK_INPUT && !strncmp(n, "grad/", 5) &&
                   (p = find_param(mp, n + 5)) >= 0) {
            if (v->dtype != IR_F32 || l->bytes != mp->params[p].zlen * 4)
                return ir_errorf(err, "stage %d: update input '%s' is not f32 like its parameter",
                                 st->stage, n);
            l->off = mp->params[p].acc_off;
        } else if (v->kind == IR_VK_INPUT && !strcmp(n, "lr")) {
            if (!is_scalar(v, IR_F32))
                return ir_errorf(err, "stage %d: update input 'lr' is not an f32 scalar", st->stage);
            l->off = mp->lr_off;
        } else if (v->kind == IR_VK_INPUT && !strcmp(n, "step")) {
            if (!is_scalar(v, IR_I64))
                return ir_errorf(err, "stage %d: update input 'step' is not an i64 scalar",
                                 st->stage);
            l->off = mp->step_off;
        } else {
            return ir_errorf(err,
                             "stage %d: update graph %s '%s' is none of grad/<param>, lr, step, "
                             "grad_norm, a parameter or its optimizer state",
                             st->stage, ir_value_kind_name(v->kind), n);
        }
    }
    return 0;
}

/* ------------------------------------------------------------ call order */

typedef struct ActList {
    MpAction *a;
    int n, cap;
} ActList;

static void push(ActList *l, MpActKind k, int index, int sub) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->a = ir_xrealloc(l->a, sizeof *l->a * (size_t)l->cap);
    }
    l->a[l->n++] = (MpAction){k, index, sub};
}

/* An action that reads one value, emitted right after the node that makes
 * it ready: its producer and, so that a buffer dies at the action, every
 * earlier reader in the same function (`ready`: node index, -1 = before
 * every node). */
typedef struct Pending {
    int ready;
    MpActKind kind;
    int index;
} Pending;

static int cmp_pending(const void *a, const void *b) {
    const Pending *x = a, *y = b;
    if (x->ready != y->ready) return x->ready < y->ready ? -1 : 1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The node whose action computes node i's outputs: its fused group's last
 * member, or i itself (-1 stays -1). */
static int eff_node(const FuseGraph *fg, const IrGraph *g, int i) {
    if (i < 0 || !fg || fg->group_of[i] < 0) return i;
    (void)g;
    return fg->groups[fg->group_of[i]].last;
}
static int max_i(int a, int b) { return a > b ? a : b; }

/* forward (phase fwd) or backward (phase bwd) of the train graph */
static int order_train(const PartStage *st, MemPlan *mp, IrPhase phase, ActList *out,
                       IrError *err) {
    IrGraph *t = st->train;
    const FuseGraph *fg = mp->fuse[0];
    /* node index of each value's producer, and of its last reader in this
     * phase (by value id; -1: none) */
    int *prod = ir_xcalloc((size_t)t->nvalues + 1, sizeof *prod);
    int *lastrd = ir_xcalloc((size_t)t->nvalues + 1, sizeof *lastrd);
    for (int i = 0; i < t->nvalues; i++) lastrd[i] = -1;
    for (int i = 0; i < t->nnodes; i++) {
        IrNode *n = t->nodes[i];
        for (int k = 0; k < n->nout; k++)
            if (n->out[k]) prod[n->out[k]->id] = i;
        if (n->phase == phase)
            for (int k = 0; k < n->nin; k++)
                if (n->in[k]) lastrd[n->in[k]->id] = i;
    }
    Pending *pend = ir_xcalloc((size_t)(st->nxfers + st->nparams + 2), sizeof *pend);
    int np = 0, chain = -1;
    PartXferKind xk = phase == IR_PHASE_FWD ? PX_ACT : PX_GRAD;
    if (phase == IR_PHASE_FWD) {
        if (mp->data_index >= 0) push(out, MP_TOKENS, 0, 0);
        if (mp->targets_index >= 0) push(out, MP_TOKENS, 1, 0);
    }
    for (int i = 0; i < st->nxfers; i++)
        if (!st->xfers[i].send && st->xfers[i].kind == xk) push(out, MP_RECV, i, 0);
    for (int i = 0; i < st->nxfers; i++) {
        if (!st->xfers[i].send || st->xfers[i].kind != xk) continue;
        IrValue *v = ir_graph_find_value(t, st->xfers[i].value);
        int r = v->producer && v->producer->phase == phase ? eff_node(fg, t, prod[v->id]) : -1;
        if (v->producer && v->producer->phase > phase) {
            free(prod), free(pend), free(lastrd);
            return ir_errorf(err, "stage %d: %s sends '%s', which node '%s' computes in %s",
                             st->stage, phase == IR_PHASE_FWD ? "forward" : "backward",
                             v->name, v->producer->name, ir_phase_name(v->producer->phase));
        }
        /* sends keep the xfer order (the peer receives in that order) */
        if (r < chain) r = chain;
        chain = r;
        pend[np++] = (Pending){r, MP_SEND, i};
    }
    if (phase == IR_PHASE_FWD && mp->loss)
        pend[np++] = (Pending){eff_node(fg, t, prod[mp->loss->id]), MP_LOSS, 0};
    if (phase == IR_PHASE_BWD)
        for (int p = 0; p < mp->nparams; p++) {
            IrValue *gv = mp->params[p].grad;
            int r = gv->producer && gv->producer->phase == phase ? eff_node(fg, t, prod[gv->id]) : -1;
            /* the buffer dies at the accum */
            r = max_i(r, eff_node(fg, t, lastrd[gv->id]));
            pend[np++] = (Pending){r, MP_ACCUM, p};
        }
    qsort(pend, (size_t)np, sizeof *pend, cmp_pending);
    int j = 0;
    while (j < np && pend[j].ready < 0) push(out, pend[j].kind, pend[j].index, 0), j++;
    for (int i = 0; i < t->nnodes; i++) {
        IrNode *n = t->nodes[i];
        if (n->dead) {
            free(prod), free(pend), free(lastrd);
            return ir_errorf(err, "stage %d: train graph node %d ('%s') is dead (compact first)",
                             st->stage, i, n->name);
        }
        if (n->phase != phase) continue;
        if (!fuse_skipped(fg, i)) push(out, MP_NODE, i, 0); /* a group runs at its last */
        while (j < np && pend[j].ready == i) push(out, pend[j].kind, pend[j].index, 0), j++;
    }
    free(prod);
    free(pend);
    free(lastrd);
    return 0;
}

/* The update's nodes in depth-first post-order from its outputs (upd/P,
 * upd/m/P, ... in output order): each parameter's chain runs to its end
 * before the next starts, so its temporaries die early; nodes no output
 * needs follow in graph order.  Any topological order is valid - the
 * node numbering hetrt_node uses does not change. */
int *memplan_update_order(const IrGraph *u) {
    int n = u->nnodes, k = 0, sp = 0;
    int *ord = ir_xcalloc((size_t)n + 1, sizeof *ord);
    int *done = ir_xcalloc((size_t)n + 1, sizeof *done); /* 0 new, 1 on stack, 2 emitted */
    int *prod = ir_xcalloc((size_t)u->nvalues + 1, sizeof *prod);
    int *stack = ir_xcalloc((size_t)n + 1, sizeof *stack), *next = ir_xcalloc((size_t)n + 1, sizeof *next);
    for (int i = 0; i < u->nvalues; i++) prod[i] = -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < u->nodes[i]->nout; j++)
            if (u->nodes[i]->out[j]) prod[u->nodes[i]->out[j]->id] = i;
    for (int r = 0; r <= u->noutputs; r++) {
        /* roots: each output's producer, then every node in graph order */
        int root = r < u->noutputs ? prod[u->outputs[r]->id] : -1;
        for (int g = r < u->noutputs ? 0 : -1; g < (r < u->noutputs ? 1 : n); g++) {
            int start = r < u->noutputs ? root : g;
            if (start < 0 || done[start]) continue;
            stack[sp] = start, next[sp++] = 0, done[start] = 1;
            while (sp) {
                int x = stack[sp - 1];
                const IrNode *nd = u->nodes[x];
                int pushed = 0;
                while (next[sp - 1] < nd->nin && !pushed) {
                    const IrValue *v = nd->in[next[sp - 1]++];
                    int y = v ? prod[v->id] : -1;
                    if (y >= 0 && !done[y]) {
                        done[y] = 1;
                        stack[sp] = y, next[sp++] = 0;
                        pushed = 1;
                    }
                }
                if (pushed) continue;
                done[x] = 2;
                ord[k++] = x;
                sp--;
            }
        }
    }
    free(done), free(prod), free(stack), free(next);
    return ord;
}

static void order_update(const PartStage *st, MemPlan *mp, ActList *out) {
    IrGraph *u = st->update;
    int n = u->nnodes;
    int *ord = memplan_update_order(u);
    const FuseGraph *fg = mp->fuse[1];
    int *rank = ir_xcalloc((size_t)n + 1, sizeof *rank);
    for (int i = 0; i < n; i++) rank[ord[i]] = i;
    /* position of the action computing node i's outputs (fused: the group's) */
#define EFF(r) ((r) < 0 ? (r) : rank[eff_node(fg, u, ord[(r)])])
    /* last position (in `ord`) reading each value; -1: none */
    int *lastrd = ir_xcalloc((size_t)u->nvalues + 1, sizeof *lastrd);
    for (int i = 0; i < u->nvalues; i++) lastrd[i] = -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < u->nodes[i]->nin; j++)
            if (u->nodes[i]->in[j] && lastrd[u->nodes[i]->in[j]->id] < rank[i])
                lastrd[u->nodes[i]->in[j]->id] = rank[i];
    /* a copy goes after its source is computed and after the last reader of
     * what it overwrites (the parameter or state); a zero after the last
     * reader of the accumulator (grad/P) */
    Pending *pend = ir_xcalloc((size_t)mp->nparams * 4 + 1, sizeof *pend);
    int np = 0;
    for (int p = 0; p < mp->nparams; p++) {
        const MpParam *pp = &mp->params[p];
        char nm[1200];
        for (int k = 0; k < 3; k++) {
            /* an output written in place is already where the copy would go */
            if (!pp->upd[k] || (pp->inplace & (1u << k))) continue;
            int r = pp->upd[k]->producer ? EFF(rank[ir_node_index(u, pp->upd[k]->producer)]) : -1;
            IrValue *d = upd_dest(u, pp, k);
            if (d) r = max_i(r, EFF(lastrd[d->id]));
            pend[np++] = (Pending){r, MP_COPY, p * 4 + k};
        }
        snprintf(nm, sizeof nm, "grad/%s", pp->name);
        IrValue *g = ir_graph_find_value(u, nm);
        pend[np++] = (Pending){g ? EFF(lastrd[g->id]) : -1, MP_ZERO, p * 4};
    }
    qsort(pend, (size_t)np, sizeof *pend, cmp_pending);
    int j = 0;
    while (j < np && pend[j].ready < 0) push(out, pend[j].kind, pend[j].index / 4, pend[j].index % 4), j++;
#undef EFF
    for (int i = 0; i < n; i++) {
        if (!fuse_skipped(fg, ord[i])) push(out, MP_NODE, ord[i], 0);
        while (j < np && pend[j].ready == i)
            push(out, pend[j].kind, pend[j].index / 4, pend[j].index % 4), j++;
    }
    free(ord), free(rank), free(lastrd), free(pend);
}

/* ------------------------------------------------------------ views */

/* A Reshape, Squeeze, Unsqueeze, Flatten or Identity output holds its
 * input's bytes unchanged (row-major), so it can be the same bytes: no copy
 * and no second buffer (gpt_tiny's attention heads and their gradients were
 * 84 copies, 7.5 MB a step).  The two share one buffer whose live range
 * covers both (plan_scratch follows view_of); values are written once, by
 * their producer and only read after that (hetrt_send, hetrt_accum and
 * hetrt_loss read), so sharing is safe whenever both live in the same
 * place for the same function.  Not aliased: parameters, constants and
 * inputs (the root must be a computed value); values of different regions
 * or phases (a forward scratch value the backward's view would outlive);
 * and the parameter gradients grad/P, which keep their copy: ZeRO-2's
 * hetrt_accum_scatter reduce-scatters them in place, and the planner's
 * per-layer arena model (driver/plan_arena.c) measures an embedding layer
 * alone with two received gradients where the binary has one, which the
 * copy's bytes happen to offset (a view put gpt_tiny's embedding stage 12 %
 * under its prediction, past issue 17's 5 %). */
static int view_root(const MemPlan *mp, int id) {
    while (mp && mp->view_of && mp->view_of[id] >= 0) id = mp->view_of[id];
    return id;
}

static int is_view_op(IrOp op) {
    return op == IR_OP_RESHAPE || op == IR_OP_SQUEEZE || op == IR_OP_UNSQUEEZE ||
           op == IR_OP_FLATTEN || op == IR_OP_IDENTITY;
}

static void plan_views(const PartStage *st, MemPlan *mp) {
    IrGraph *t = st->train;
    mp->view_of = ir_xmalloc(((size_t)t->nvalues + 1) * sizeof *mp->view_of);
    char *no = ir_xcalloc((size_t)t->nvalues + 1, 1);
    for (int i = 0; i < t->nvalues; i++) mp->view_of[i] = -1;
    for (int p = 0; p < mp->nparams; p++)
        if (mp->params[p].grad) no[mp->params[p].grad->id] = 1;
    for (int i = 0; i < t->nnodes; i++) {
        IrNode *n = t->nodes[i];
        if (n->dead || !is_view_op(n->op) || n->nin < 1 || n->nout != 1 || !n->in[0] ||
            !n->out[0])
            continue;
        IrValue *y = n->out[0];
        int r = view_root(mp, n->in[0]->id);
        const IrValue *rv = t->values[r];
        const MpLoc *lr = &mp->train_loc[r], *ly = &mp->train_loc[y->id];
        if (no[r] || no[y->id] || y->producer != n || !rv->producer ||
            rv->kind == IR_VK_PARAM || rv->kind == IR_VK_CONST ||
            rv->producer->phase != n->phase || lr->region != ly->region ||
            (lr->region != HETC_BUF_ARENA && lr->region != HETC_BUF_SLOT) ||
            lr->bytes != ly->bytes)
            continue;
        mp->view_of[y->id] = r;
        mp->nviews++;
    }
    free(no);
}

/* after the roots are placed: each view takes its root's place */
static void place_views(MemPlan *mp) {
    for (int i = 0; i < mp->ntrain_loc && mp->view_of; i++)
        if (mp->view_of[i] >= 0) {
            const MpLoc *r = &mp->train_loc[view_root(mp, i)];
            MpLoc *l = &mp->train_loc[i];
            l->off = r->off, l->first = r->first, l->last = r->last;
        }
}

/* ------------------------------------------------------------ live ranges */

/* The values action `a` of function fn reads (r) and writes (w). */
static void act_values(const PartStage *st, const MemPlan *mp, int fn, const MpAction *a,
                       IrValue ***r, int *nr, IrValue ***w, int *nw, IrValue **tmp) {
    IrGraph *g = fn == MP_FN_UPDATE ? st->update : st->train;
    *nr = *nw = 0;
    *r = *w = tmp;
    switch (a->kind) {
    case MP_NODE: {
        IrNode *n = g->nodes[a->index];
        const FuseGroup *gr = fuse_group_at(mp->fuse[fn == MP_FN_UPDATE], a->index);
        if (gr) { /* a fused kernel: its external inputs and its outputs */
            *r = (IrValue **)gr->ins, *nr = gr->nins, *w = (IrValue **)gr->outs, *nw = gr->nouts;
            return;
        }
        *r = n->in, *nr = n->nin, *w = n->out, *nw = n->nout;
        return;
    }
    case MP_TOKENS:
        tmp[0] = st->train->values[a->index ? mp->targets_index : mp->data_index];
        *nw = 1;
        return;
    case MP_RECV: tmp[0] = ir_graph_find_value(g, st->xfers[a->index].value), *nw = 1; return;
    case MP_SEND: tmp[0] = ir_graph_find_value(g, st->xfers[a->index].value), *nr = 1; return;
    case MP_LOSS: tmp[0] = mp->loss, *nr = 1; return;
    case MP_ACCUM: tmp[0] = mp->params[a->index].grad, *nr = 1; return;
    case MP_COPY: tmp[0] = mp->params[a->index].upd[a->sub], *nr = 1; return;
    case MP_ZERO: return;
    }
}

/* Live ranges of fn's scratch values (region ARENA with off -1 on input
 * here) and first-fit offsets relative to the scratch base; returns the
 * scratch bytes used. */
static int plan_scratch(const PartStage *st, MemPlan *mp, int fn, MpLoc *loc, int nloc,
                        int64_t *used, IrError *err) {
    IrValue *tmp[1], **r, **w;
    int nr, nw;
    const char *gname = fn == MP_FN_UPDATE ? "update" : "train";
    /* a view's reads and writes are its root's (plan_views) */
    const MemPlan *vm = fn == MP_FN_UPDATE ? NULL : mp;
    for (int pos = 0; pos < mp->nacts[fn]; pos++) {
        act_values(st, mp, fn, &mp->acts[fn][pos], &r, &nr, &w, &nw, tmp);
        for (int k = 0; k < nw; k++) {
            MpLoc *l = w[k] ? &loc[view_root(vm, w[k]->id)] : NULL;
            if (l && l->off == -1 && l->first < 0) l->first = l->last = pos;
        }
        for (int k = 0; k < nr; k++) {
            MpLoc *l = r[k] ? &loc[view_root(vm, r[k]->id)] : NULL;
            if (!l || l->off != -1) continue;
            if (l->first < 0)
                return ir_errorf(err,
                                 "stage %d: %s graph value '%s' is read by the %s before it "
                                 "is computed there",
                                 st->stage, gname, r[k]->name,
                                 fn == MP_FN_FORWARD ? "forward" : fn == MP_FN_BACKWARD ? "backward" : "update");
            l->last = pos;
        }
    }
    FfBuf *bufs = ir_xcalloc((size_t)nloc + 1, sizeof *bufs);
    int *ids = ir_xcalloc((size_t)nloc + 1, sizeof *ids), n = 0;
    for (int i = 0; i < nloc; i++)
        if (loc[i].off == -1 && loc[i].first >= 0 && view_root(vm, i) == i) {
            ids[n] = i;
            bufs[n++] = (FfBuf){loc[i].first, loc[i].last,
                                align_up(loc[i].bytes ? loc[i].bytes : 1), 0};
        }
    int64_t top = firstfit_place(bufs, n);
    for (int k = 0; k < n; k++) loc[ids[k]].off = bufs[k].off;
    free(ids);
    free(bufs);
    *used = top;
    return 0;
}

/* ------------------------------------------------------------ entry */

int memplan_build(const PartStage *st, int nslots, MemPlan *mp, IrError *err) {
    return memplan_build_fused(st, nslots, NULL, NULL, mp, err);
}

int memplan_build_fused(const PartStage *st, int nslots, const FuseGraph *ft,
                        const FuseGraph *fu, MemPlan *mp, IrError *err) {
    memset(mp, 0, sizeof *mp);
    mp->fuse[0] = ft, mp->fuse[1] = fu;
    if (!st || !st->train || !st->update)
        return ir_errorf(err, "memplan: stage without train or update graph");
    if (nslots < 1)
        return ir_errorf(err, "stage %d: %d activation slots (at least 1)", st->stage, nslots);
    mp->nslots = nslots;
    IrGraph *t = st->train;
    if (plan_params(st, mp, err) || place_train(st, mp, err) || place_update(st, mp, err))
        goto fail;
    mp->loss = ir_graph_find_value(t, "loss");
    if (mp->loss && !is_output(t, mp->loss)) mp->loss = NULL;
    if (mp->loss && (!is_scalar(mp->loss, IR_F32) || !mp->loss->producer ||
                     mp->loss->producer->phase != IR_PHASE_FWD)) {
        ir_errorf(err, "stage %d: 'loss' must be an f32 scalar computed in the forward",
                  st->stage);
        goto fail;
    }
    /* forward: it may read only its own values, inputs and parameters, never
     * backward's (scratch is the running function's) */
    for (int i = 0; i < t->nnodes; i++) {
        IrNode *n = t->nodes[i];
        if (n->phase != IR_PHASE_FWD) continue;
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] && mp->train_loc[n->in[k]->id].region == HETC_BUF_ARENA &&
                n->in[k]->kind != IR_VK_PARAM &&
                !(n->in[k]->producer && n->in[k]->producer->phase == IR_PHASE_FWD)) {
                ir_errorf(err, "stage %d: forward node %d '%s' (%s) reads '%s', a backward value",
                          st->stage, i, n->name, ir_op_name(n->op), n->in[k]->name);
                goto fail;
            }
    }
    /* ZeRO-2: hetrt_accum_scatter reduce-scatters grad/P in place, so it
     * must be a backward scratch value (dead after that call), never a
     * constant, a parameter or a slot value */
    for (int p = 0; st->zero >= 2 && p < mp->nparams; p++) {
        const IrValue *gv = mp->params[p].grad;
        if (mp->train_loc[gv->id].region != HETC_BUF_ARENA || gv->kind == IR_VK_PARAM ||
            !gv->producer || gv->producer->phase != IR_PHASE_BWD) {
            ir_errorf(err,
                      "stage %d: zero 2: '%s' is not computed by the backward (the gradient "
                      "reduce-scatter needs it in backward scratch)",
                      st->stage, gv->name);
            goto fail;
        }
    }
    ActList al[MP_NFN] = {{0}};
    int rc = order_train(st, mp, IR_PHASE_FWD, &al[0], err);
    if (!rc) rc = order_train(st, mp, IR_PHASE_BWD, &al[1], err);
    if (!rc) order_update(st, mp, &al[2]);
    for (int f = 0; f < MP_NFN; f++) mp->acts[f] = al[f].a, mp->nacts[f] = al[f].n;
    if (rc) goto fail;

    plan_views(st, mp);
    /* slot: inputs and forward values, one after another */
    int64_t so = 0;
    for (int i = 0; i < t->nvalues; i++) {
        MpLoc *l = &mp->train_loc[i];
        if (l->region != HETC_BUF_SLOT || mp->view_of[i] >= 0) continue;
        l->off = so;
        so += align_up(l->bytes ? l->bytes : 1);
    }
    mp->slot_bytes = so ? so : MP_ALIGN;
    /* scratch: mark the candidates (off -1), then live ranges + first fit */
    for (int i = 0; i < t->nvalues; i++)
        if (mp->train_loc[i].region == HETC_BUF_ARENA && t->values[i]->kind != IR_VK_PARAM)
            mp->train_loc[i].off = -1;
    if (plan_scratch(st, mp, MP_FN_FORWARD, mp->train_loc, mp->ntrain_loc,
                     &mp->fwd_scratch_bytes, err) ||
        plan_scratch(st, mp, MP_FN_BACKWARD, mp->train_loc, mp->ntrain_loc,
                     &mp->bwd_scratch_bytes, err) ||
        plan_scratch(st, mp, MP_FN_UPDATE, mp->upd_loc, mp->nupd_loc, &mp->upd_scratch_bytes,
                     err))
        goto fail;
    place_views(mp);
    MpLoc *locs[2] = {mp->train_loc, mp->upd_loc};
    int nlocs[2] = {mp->ntrain_loc, mp->nupd_loc};
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < nlocs[g]; i++) {
            MpLoc *l = &locs[g][i];
            if (l->region != HETC_BUF_ARENA) continue;
            if (l->off == -1) { /* a scratch value no call of its function writes */
                ir_errorf(err, "stage %d: %s graph value '%s' is never computed by the %s",
                          st->stage, g ? "update" : "train",
                          (g ? st->update : t)->values[i]->name,
                          g ? "update" : "forward or backward");
                goto fail;
            }
            if (l->first >= 0) l->off += mp->scratch_off;
        }
    /* a scratch value never written (unused output of no node) cannot occur:
     * every node output is written by its node */
    mp->scratch_bytes = mp->bwd_scratch_bytes > mp->upd_scratch_bytes ? mp->bwd_scratch_bytes
                                                                      : mp->upd_scratch_bytes;
    if (mp->fwd_scratch_bytes > mp->scratch_bytes) mp->scratch_bytes = mp->fwd_scratch_bytes;
    mp->slot_base = align_up(mp->scratch_off + mp->scratch_bytes);
    if (mp->slot_bytes > (INT64_MAX - mp->slot_base) / nslots) {
        ir_errorf(err, "stage %d: %d slots of %lld bytes overflow the arena", st->stage, nslots,
                  (long long)mp->slot_bytes);
        goto fail;
    }
    mp->arena_bytes = mp->slot_base + (int64_t)nslots * mp->slot_bytes;
    return 0;
fail:
    memplan_free(mp);
    return -1;
}

void memplan_free(MemPlan *mp) {
    free(mp->params);
    free(mp->train_loc);
    free(mp->upd_loc);
    free(mp->view_of);
    for (int f = 0; f < MP_NFN; f++) free(mp->acts[f]);
    memset(mp, 0, sizeof *mp);
}

const MpLoc *memplan_loc(const MemPlan *mp, const PartStage *st, int graph, const IrValue *v) {
    const IrGraph *g = graph ? st->update : st->train;
    const MpLoc *loc = graph ? mp->upd_loc : mp->train_loc;
    int n = graph ? mp->nupd_loc : mp->ntrain_loc;
    if (!v || v->id < 0 || v->id >= n || v->id >= g->nvalues || g->values[v->id] != v) return NULL;
    return &loc[v->id];
}

void memplan_report(const MemPlan *mp, FILE *f) {
    fprintf(f,
            "params %lld grads %lld optstate %lld scalars %lld scratch %lld (forward %lld, "
            "backward %lld, update %lld) slot %lld x %d total %lld\n",
            (long long)mp->param_bytes, (long long)mp->grad_bytes, (long long)mp->opt_bytes,
            (long long)mp->scalar_bytes, (long long)mp->scratch_bytes,
            (long long)mp->fwd_scratch_bytes,
            (long long)mp->bwd_scratch_bytes, (long long)mp->upd_scratch_bytes,
            (long long)mp->slot_bytes, mp->nslots, (long long)mp->arena_bytes);
}
