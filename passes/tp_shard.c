/* Tensor-parallel sharding of a forward graph for one TP rank
 * (tp_shard.h says what is matched and why). */
#include "tp_shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixed_precision.h"
#include "pass.h"
#include "tp_shard_int.h"


/* a match in dry mode: append it (the graph is left as it is) */
TpPattern *tps_add_found(Ts *t, int kind, const IrNode *row) {
    if (t->nfound == t->capfound) {
        t->capfound = t->capfound ? 2 * t->capfound : 16;
        t->found = ir_xrealloc(t->found, sizeof *t->found * (size_t)t->capfound);
    }
    TpPattern *p = &t->found[t->nfound++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->row = row;
    return p;
}

void tps_add_inner(TpPattern *p, const IrNode *n) {
    if (n && p->ninner < TP_PATTERN_MAX_INNER) p->inner[p->ninner++] = n;
}

int tps_in_range(const Ts *t, const IrNode *n) {
    return (!t->first && !t->last) || (n->layer_id >= t->first && n->layer_id <= t->last);
}

/* ------------------------------------------------------------ clone */

static IrGraph *clone_graph(const IrGraph *g, IrError *err) {
    IrGraph *c = ir_graph_new(g->name ? g->name : "model");
    c->opset = g->opset;
    IrValue **map = ir_xcalloc((size_t)g->nvalues + 1, sizeof *map);
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *v = g->values[i];
        IrValue *n = map[i] = ir_value_new(c, v->name, v->dtype, &v->shape, v->kind);
        n->shape_known = v->shape_known;
        if (v->kind == IR_VK_PARAM || v->kind == IR_VK_CONST) {
            const void *d = ir_value_has_data(v) ? ir_value_data(v, err) : NULL;
            if (ir_value_has_data(v) && !d) {
                free(map);
                ir_graph_free(c);
                return NULL;
            }
            if (d) {
                void *cp = ir_xmalloc(v->nbytes ? v->nbytes : 1);
                memcpy(cp, d, v->nbytes);
                ir_value_set_data(n, cp, v->nbytes);
            }
        }
    }
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *s = g->nodes[i];
        IrValue **in = ir_xcalloc((size_t)s->nin + 1, sizeof *in);
        IrValue **out = ir_xcalloc((size_t)s->nout + 1, sizeof *out);
        for (int k = 0; k < s->nin; k++) in[k] = s->in[k] ? map[s->in[k]->id] : NULL;
        for (int k = 0; k < s->nout; k++) out[k] = s->out[k] ? map[s->out[k]->id] : NULL;
        IrNode *d = ir_node_new(c, s->op, s->name, s->nin, in, s->nout, out);
        for (int a = 0; a < s->nattrs; a++) {
            const IrAttr *at = &s->attrs[a];
            switch (at->type) {
            case IR_ATTR_INT: ir_node_set_int(d, at->name, at->i); break;
            case IR_ATTR_FLOAT: ir_node_set_float(d, at->name, at->f); break;
            case IR_ATTR_STRING: ir_node_set_string(d, at->name, at->s); break;
            case IR_ATTR_INTS: ir_node_set_ints(d, at->name, at->n, at->ints); break;
            case IR_ATTR_FLOATS: ir_node_set_floats(d, at->name, at->n, at->floats); break;
            }
        }
        d->module_id = s->module_id, d->layer_id = s->layer_id, d->stage_id = s->stage_id;
        d->phase = s->phase;
        free(in);
        free(out);
    }
    for (int i = 0; i < g->ninputs; i++) ir_graph_add_input(c, map[g->inputs[i]->id]);
    for (int i = 0; i < g->noutputs; i++) ir_graph_add_output(c, map[g->outputs[i]->id]);
    free(map);
    return c;
}

/* ------------------------------------------------------------ matching */

int tps_uses(const IrGraph *g, const IrValue *v) { return ir_value_num_uses(g, v); }

int tps_is_act(IrOp op) {
    return ir_op_has(op, IR_OPF_ACTIVATION);
}

int tps_linear_ok(const IrGraph *g, const IrNode *l) {
    const IrValue *w = l->nin > 1 ? l->in[1] : NULL;
    const IrValue *b = l->nin > 2 ? l->in[2] : NULL;
    return l->op == IR_OP_LINEAR && w && w->kind == IR_VK_PARAM && w->shape.rank == 2 &&
           w->dtype == IR_F32 && tps_uses(g, w) == 1 &&
           (!b || (b->kind == IR_VK_PARAM && b->shape.rank == 1 && tps_uses(g, b) == 1));
}

int64_t tps_last_dim(const IrValue *v) { return v->shape.dims[v->shape.rank - 1]; }

/* an i64 constant's elements (NULL if v is not one) */
const int64_t *tps_const_i64(IrValue *v, int64_t *n) {
    if (!v || v->kind != IR_VK_CONST || v->dtype != IR_I64 || v->shape.rank != 1) return NULL;
    IrError e = {{0}};
    *n = v->shape.dims[0];
    return ir_value_data(v, &e);
}

/* ------------------------------------------------------------ rewriting */

void tps_record_shard(Ts *t, const IrValue *p, int axis, int nr, const int64_t *st,
                         const int64_t *ln) {
    TpShardResult *r = t->res;
    if (r->nshards == t->capsh) {
        t->capsh = t->capsh ? 2 * t->capsh : 16;
        r->shards = ir_xrealloc(r->shards, sizeof *r->shards * (size_t)t->capsh);
    }
    TpParamShard *s = &r->shards[r->nshards++];
    memset(s, 0, sizeof *s);
    s->name = ir_strdup(p->name);
    s->axis = axis;
    s->nranges = nr;
    s->full_dim = p->shape.dims[axis];
    for (int i = 0; i < nr; i++) s->start[i] = st[i], s->len[i] = ln[i];
}

/* keep ranges of `axis` (0 or 1 of a rank-1/2 f32 parameter) */
void tps_slice_param(Ts *t, IrValue *p, int axis, int nr, const int64_t *st,
                        const int64_t *ln) {
    tps_record_shard(t, p, axis, nr, st, ln);
    IrError e = {{0}};
    const float *d = ir_value_data(p, &e);
    int64_t rows = p->shape.dims[0], cols = p->shape.rank == 2 ? p->shape.dims[1] : 1, keep = 0;
    for (int i = 0; i < nr; i++) keep += ln[i];
    int64_t nrows = axis == 0 ? keep : rows, ncols = axis == 1 ? keep : cols;
    float *o = ir_xmalloc((size_t)(nrows * ncols) * sizeof *o + 1), *w = o;
    if (axis == 0) {
        for (int i = 0; i < nr; i++) {
            memcpy(w, d + st[i] * cols, (size_t)(ln[i] * cols) * sizeof *o);
            w += ln[i] * cols;
        }
    } else {
        for (int64_t r = 0; r < rows; r++)
            for (int i = 0; i < nr; i++) {
                memcpy(w, d + r * cols + st[i], (size_t)ln[i] * sizeof *o);
                w += ln[i];
            }
    }
    p->shape.dims[axis] = keep;
    ir_value_set_data(p, o, (size_t)(nrows * ncols) * sizeof *o);
}

/* TpCopy(x), one per value x, placed right before its first reader `at`:
 * new nodes go next to the nodes they serve, so the original nodes keep
 * their relative order (partition numbers boundary transfers in producer
 * order, and a TP stage must number them like its unsharded peers) */
IrValue *tps_copy(Ts *t, IrValue *x, IrNode *at) {
    for (int i = 0; i < t->ncopy; i++)
        if (t->copy_of[i] == x) return t->copy_val[i];
    char nm[1200];
    snprintf(nm, sizeof nm, "tp/copy/%s", x->name);
    IrValue *o = ir_value_new(t->c, nm, x->dtype, &x->shape, IR_VK_ACT);
    o->shape_known = x->shape_known;
    IrNode *n = ir_node_insert(t->c, ir_node_index(t->c, at), IR_OP_TP_COPY, nm, 1, &x, 1, &o);
    ir_node_set_int(n, "tp", t->tp);
    if (x->producer) n->layer_id = x->producer->layer_id, n->module_id = x->producer->module_id;
    t->copy_of = ir_xrealloc(t->copy_of, sizeof *t->copy_of * (size_t)(t->ncopy + 1));
    t->copy_val = ir_xrealloc(t->copy_val, sizeof *t->copy_val * (size_t)(t->ncopy + 1));
    t->copy_of[t->ncopy] = x, t->copy_val[t->ncopy++] = o;
    t->res->copies++;
    return o;
}

void tps_column_linear(Ts *t, IrNode *l, int nr, const int64_t *st, const int64_t *ln) {
    IrValue *x = l->in[0];
    IrValue *cp = tps_copy(t, x, l);
    IrNode *cn = cp->producer;
    cn->layer_id = l->layer_id, cn->module_id = l->module_id;
    l->in[0] = cp;
    tps_slice_param(t, l->in[1], 1, nr, st, ln);
    if (l->nin > 2 && l->in[2]) tps_slice_param(t, l->in[2], 0, nr, st, ln);
}

/* y = Linear(h, W[rows], -) -> TpAllReduce -> + b: the bias once, after the sum */
void tps_row_linear(Ts *t, IrNode *l, int64_t st, int64_t ln) {
    tps_slice_param(t, l->in[1], 0, 1, &st, &ln);
    IrValue *y = l->out[0], *b = l->nin > 2 ? l->in[2] : NULL;
    char nm[1200];
    snprintf(nm, sizeof nm, "tp/partial/%s", y->name);
    IrValue *p = ir_value_new(t->c, nm, y->dtype, &y->shape, IR_VK_ACT);
    p->shape_known = y->shape_known;
    l->out[0] = p;
    p->producer = l;
    p->producer_slot = 0;
    if (b) l->in[2] = NULL;
    snprintf(nm, sizeof nm, "tp/sum/%s", y->name);
    IrValue *s = b ? ir_value_new(t->c, nm, y->dtype, &y->shape, IR_VK_ACT) : y;
    s->shape_known = 1;
    int at = ir_node_index(t->c, l) + 1;
    IrNode *ar = ir_node_insert(t->c, at, IR_OP_TP_ALL_REDUCE, nm, 1, &p, 1, &s);
    ir_node_set_int(ar, "tp", t->tp);
    ar->layer_id = l->layer_id, ar->module_id = l->module_id;
    t->res->allreduce++;
    if (b) {
        IrValue *in[2] = {s, b};
        snprintf(nm, sizeof nm, "tp/bias/%s", y->name);
        IrNode *a = ir_node_insert(t->c, at + 1, IR_OP_ADD, nm, 2, in, 1, &y);
        a->layer_id = l->layer_id, a->module_id = l->module_id;
    }
}

/* can a reshape's target have its dim `from_end` (1 = last) divided by tp? */
int tps_retarget_ok(const Ts *t, IrNode *r, int from_end) {
    int64_t n = 0;
    const int64_t *d = tps_const_i64(r->in[1], &n);
    return d && n >= from_end && d[n - from_end] > 0 && d[n - from_end] % t->tp == 0;
}

/* the reshape target with that dim divided by tp, as a new constant */
int tps_retarget(Ts *t, IrNode *r, int from_end) {
    int64_t n = 0;
    const int64_t *d = tps_const_i64(r->in[1], &n);
    if (!tps_retarget_ok(t, r, from_end)) return -1;
    int64_t *nd = ir_xmalloc(sizeof *nd * (size_t)n);
    memcpy(nd, d, sizeof *nd * (size_t)n);
    int64_t *k = &nd[n - from_end];
    if (*k <= 0 || *k % t->tp) {
        free(nd);
        return -1;
    }
    *k /= t->tp;
    char nm[1200];
    snprintf(nm, sizeof nm, "tp/shape/%s", r->name);
    r->in[1] = ir_const_i64s(t->c, nm, (int)n, nd);
    free(nd);
    return 0;
}

static int try_mlp(Ts *t, IrNode *l2) {
    IrGraph *c = t->c;
    IrValue *h = l2->in[0];
    IrNode *u = h->producer;
    if (!u || !tps_is_act(u->op) || tps_uses(c, h) != 1) return 0;
    IrValue *a = u->in[0];
    IrNode *l1 = a->producer;
    if (!l1 || !tps_linear_ok(c, l1) || tps_uses(c, a) != 1 || !tps_in_range(t, l1)) return 0;
    int64_t n = tps_last_dim(a), k2 = l2->in[1]->shape.dims[0];
    if (n != k2 || n % t->tp) return t->res->skipped++, 0;
    if (t->dry) {
        TpPattern *p = tps_add_found(t, TP_PATTERN_MLP, l2);
        p->column[p->ncolumn++] = l1;
        tps_add_inner(p, u);
        return 1;
    }
    int64_t st = t->rank * (n / t->tp), ln = n / t->tp;
    tps_column_linear(t, l1, 1, &st, &ln);
    tps_row_linear(t, l2, st, ln);
    t->res->mlp++;
    return 1;
}

/* a single-reader in-range parameter Linear producing v (NULL if not) */
static IrNode *sole_linear(Ts *t, IrValue *v) {
    IrNode *l = v ? v->producer : NULL;
    return l && tps_linear_ok(t->c, l) && tps_uses(t->c, v) == 1 && tps_in_range(t, l) ? l : NULL;
}

/* gated MLP (SwiGLU, GeGLU): down(act(gate(x)) * up(x)), the Mul's
 * operands in either order.  Element j of the Mul needs column j of gate
 * and of up only, so both are column-parallel over the same columns and
 * down is row-parallel over those rows (Megatron's MLP split, twice on the
 * column side). */
static int try_gated_mlp(Ts *t, IrNode *l2) {
    IrGraph *c = t->c;
    IrValue *h = l2->in[0];
    IrNode *m = h->producer;
    if (!m || m->op != IR_OP_MUL || m->nin != 2 || tps_uses(c, h) != 1) return 0;
    for (int o = 0; o < 2; o++) {
        IrValue *av = m->in[o], *uv = m->in[1 - o];
        IrNode *act = av->producer, *gate, *up;
        if (!act || !tps_is_act(act->op) || tps_uses(c, av) != 1) continue;
        if (!(gate = sole_linear(t, act->in[0])) || !(up = sole_linear(t, uv)) || gate == up)
            continue;
        /* no broadcasting inside the pattern: both halves are [.., n] */
        if (!ir_shape_equal(&av->shape, &uv->shape) || !ir_shape_equal(&av->shape, &h->shape))
            continue;
        int64_t n = tps_last_dim(h), k2 = l2->in[1]->shape.dims[0];
        if (n != k2 || n % t->tp) return t->res->skipped++, 0;
        if (t->dry) {
            TpPattern *p = tps_add_found(t, TP_PATTERN_GATED_MLP, l2);
            p->column[p->ncolumn++] = gate;
            p->column[p->ncolumn++] = up;
            tps_add_inner(p, act);
            tps_add_inner(p, m);
            return 1;
        }
        int64_t st = t->rank * (n / t->tp), ln = n / t->tp;
        tps_column_linear(t, gate, 1, &st, &ln);
        tps_column_linear(t, up, 1, &st, &ln);
        tps_row_linear(t, l2, st, ln);
        t->res->mlp++;
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------ head sets
 *
 * Attention is split over one of its batch-like axes (the heads).  Each of
 * q, k and v reaches the Attention from its column-parallel root (a Linear,
 * or one output of the fused QKV Split) through a small subgraph: the
 * head-split Reshape and layout ops, and in LLaMA-style models rotary
 * embedding (Mul/Add by cos/sin tables, Slice/Neg/Concat over the head
 * dim) and the GQA repeat of k/v heads (Unsqueeze, Expand, Reshape).
 *
 * Rank r's value of every value in the subgraph must be the unsharded
 * value restricted to the r-th of tp equal contiguous blocks of one axis
 * (its "sharded axis"; at the root, the Linear's output columns).  That is
 * tracked forward op by op, and an op is accepted only where it provably
 * keeps it:
 *  - elementwise ops (Add Sub Mul Div, Neg, activations) whose other
 *    operands are inside the subgraph with the same shape and axis, or are
 *    gradient-free outside values (constants, or computed from constants
 *    and integer inputs only) that broadcast over the sharded axis;
 *  - Transpose (the axis follows perm), Unsqueeze, Slice and Concat on
 *    other axes;
 *  - Expand whose target keeps the sharded extent (it is divided by tp) or
 *    says 1 there;
 *  - Reshape where the sharded axis is the outermost factor of an output
 *    axis that merges it with following axes or splits it (the head-split
 *    [.., H*Dh] -> [.., H, Dh], the GQA merge [.., Hkv, rep, ..] ->
 *    [.., Hkv*rep, ..], the heads merge): a contiguous block of the one is
 *    a contiguous block of the other when tp divides the output extent,
 *    which is divided by tp in the target.
 * For GQA this keeps q head h with kv head h / rep: rank r holds q heads
 * [r H/tp, (r+1) H/tp) and kv heads [r Hkv/tp, (r+1) Hkv/tp), so tp must
 * divide Hkv (else the attention stays replicated).  Every value inside a
 * subgraph must have its readers inside it (the last one: the Attention
 * only); anything else leaves the pattern replicated. */
#define HS_MAX 40
typedef struct HeadSet {
    IrNode *node[HS_MAX]; /* graph order once hs_track ran */
    int axis[HS_MAX];     /* sharded axis of node's output */
    int tidx[HS_MAX];     /* Reshape/Expand: target element divided by tp, -1 none */
    int n;
    IrNode *root;         /* Linear or Split */
    int root_out;
    int end_axis;         /* sharded axis of the last value */
} HeadSet;

static int hs_has(const HeadSet *hs, const IrNode *p) {
    for (int i = 0; i < hs->n; i++)
        if (hs->node[i] == p) return i;
    return -1;
}

static int hs_elementwise(IrOp op) {
    return ir_op_has(op, IR_OPF_ARITH | IR_OPF_ACTIVATION);
}

/* a value with no gradient whose data every rank has whole: a constant, an
 * integer input, or computed from those only */
static int hs_no_grad(const IrValue *v, int depth) {
    if (!v) return 1;
    if (v->kind == IR_VK_CONST) return 1;
    if (v->kind == IR_VK_PARAM) return 0;
    if (!v->producer) return v->kind == IR_VK_INPUT && v->dtype != IR_F32 && v->dtype != IR_F16 &&
                              v->dtype != IR_BF16;
    if (depth > 24) return 0;
    for (int i = 0; i < v->producer->nin; i++)
        if (!hs_no_grad(v->producer->in[i], depth + 1)) return 0;
    return 1;
}

/* the inputs of p that carry the sharded data (the others must be i64
 * constants: shapes, axes, slice bounds) */
static int hs_data_input(const IrNode *p, int i) {
    return i == 0 || !ir_op_has(p->op, IR_OPF_AUX_INPUTS);
}

/* collect the subgraph from v back to its root; -1: not a head set */
static int hs_collect(Ts *t, IrValue *v, HeadSet *hs) {
    IrNode *p = v ? v->producer : NULL;
    if (!p || p->dead) return -1;
    if (p->op == IR_OP_LINEAR || p->op == IR_OP_SPLIT) {
        if (hs->root && (hs->root != p || hs->root_out != v->producer_slot)) return -1;
        hs->root = p, hs->root_out = v->producer_slot;
        return 0;
    }
    if (hs_has(hs, p) >= 0) return 0;
    int ok = ir_op_has(p->op, IR_OPF_TP_SPLITTABLE);
    if (!ok || p->nout != 1 || hs->n == HS_MAX) return -1;
    hs->node[hs->n++] = p;
    int inside = 0;
    for (int i = 0; i < p->nin; i++) {
        IrValue *u = p->in[i];
        if (!hs_data_input(p, i)) {
            int64_t k;
            if (u && !tps_const_i64(u, &k)) return -1;
            continue;
        }
        if (!u) return -1;
        if (p->op != IR_OP_CONCAT && hs_no_grad(u, 0)) continue; /* checked in hs_track */
        if (hs_collect(t, u, hs)) return -1;
        inside++;
    }
    return inside ? 0 : -1;
}

static int hs_cmp(const void *a, const void *b) {
    const int *x = a, *y = b;
    return (*x > *y) - (*x < *y);
}

/* the sharded axis of v (produced in hs or by its root), -1 if not there */
static int hs_axis_of(const HeadSet *hs, const IrValue *v) {
    if (v->producer == hs->root && v->producer_slot == hs->root_out) return v->shape.rank - 1;
    int i = hs_has(hs, v->producer);
    return i >= 0 ? hs->axis[i] : -1;
}

static int64_t prod(const int64_t *d, int n) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= d[i];
    return p;
}

/* Reshape: the output axis holding the sharded input axis s as its
 * outermost factor (merged with following axes or split), -1 if none */
static int hs_reshape_axis(const IrShape *in, int s, const IrShape *out, int tp) {
    int64_t pre = prod(in->dims, s), qin = pre * in->dims[s];
    for (int b = 0; b < out->rank; b++) {
        if (prod(out->dims, b) != pre || out->dims[b] == 1) continue;
        int64_t qout = pre * out->dims[b];
        int fits = 0;
        for (int k = s; k < in->rank && !fits; k++) fits = prod(in->dims, k + 1) == qout; /* merge */
        for (int k = b; k < out->rank && !fits; k++) fits = prod(out->dims, k + 1) == qin; /* split */
        return fits && out->dims[b] % tp == 0 ? b : -1;
    }
    return -1;
}

/* Transpose: the output axis of input axis s (-1 if perm is malformed) */
static int perm_axis(const IrNode *p, int s) {
    const int64_t *perm = NULL;
    int rk = p->out[0]->shape.rank, np = ir_attr_ints(p, "perm", &perm), o = -1;
    if (perm && np != rk) return -1;
    for (int k = 0; k < rk; k++)
        if ((perm ? perm[k] : rk - 1 - k) == s) o = k;
    return o;
}

/* forward over hs in graph order: every node's sharded axis and target
 * retargets; end is the value reaching the Attention (or the row Linear) */
static int hs_track(Ts *t, HeadSet *hs, const IrValue *end) {
    IrGraph *c = t->c;
    int idx[HS_MAX];
    IrNode *sorted[HS_MAX];
    for (int i = 0; i < hs->n; i++) idx[i] = ir_node_index(c, hs->node[i]);
    qsort(idx, (size_t)hs->n, sizeof *idx, hs_cmp);
    for (int i = 0; i < hs->n; i++) sorted[i] = c->nodes[idx[i]];
    memcpy(hs->node, sorted, sizeof *sorted * (size_t)hs->n);
    if (!hs->root || hs->root->out[hs->root_out]->shape.rank < 1 ||
        tps_last_dim(hs->root->out[hs->root_out]) % t->tp)
        return -1;
    for (int i = 0; i < hs->n; i++) {
        IrNode *p = hs->node[i];
        const IrShape *os = &p->out[0]->shape;
        int s = -1, orank = os->rank;
        hs->tidx[i] = -1;
        /* the sharded data inputs agree on the axis; other operands of
         * elementwise ops broadcast over it */
        for (int j = 0; j < p->nin; j++) {
            IrValue *u = p->in[j];
            if (!hs_data_input(p, j) || !u) continue;
            int a = hs_axis_of(hs, u);
            if (a < 0) {
                if (!hs_elementwise(p->op) || !hs_no_grad(u, 0)) return -1;
                continue;
            }
            if (s >= 0 && a != s) return -1;
            if (hs_elementwise(p->op) && !ir_shape_equal(&u->shape, os)) return -1;
            s = a;
        }
        if (s < 0) return -1;
        const IrShape *is = &p->in[0]->shape;
        int out_axis = s;
        if (hs_elementwise(p->op)) {
            for (int j = 0; j < p->nin; j++) {
                IrValue *u = p->in[j];
                if (hs_axis_of(hs, u) >= 0) continue;
                int pos = s - (orank - u->shape.rank);
                if (pos >= 0 && u->shape.dims[pos] != 1) return -1;
            }
        } else if (p->op == IR_OP_TRANSPOSE) {
            out_axis = perm_axis(p, s);
        } else if (p->op == IR_OP_SLICE || p->op == IR_OP_CONCAT) {
            int64_t na = 0, all[IR_MAX_RANK];
            const int64_t *ax = NULL;
            if (p->op == IR_OP_CONCAT) {
                all[0] = ir_attr_int(p, "axis", 0), ax = all, na = 1;
            } else if (p->nin > 3 && p->in[3]) {
                ax = tps_const_i64(p->in[3], &na);
            } else {
                tps_const_i64(p->in[1], &na); /* no axes: the first len(starts) axes */
                for (int k = 0; k < na && k < IR_MAX_RANK; k++) all[k] = k;
                ax = all;
            }
            for (int k = 0; k < na; k++)
                if ((ax[k] < 0 ? ax[k] + orank : ax[k]) == s) return -1;
        } else if (p->op == IR_OP_UNSQUEEZE) {
            int64_t na = 0;
            const int64_t *ax = tps_const_i64(p->in[1], &na);
            out_axis = -1;
            if (!ax) return -1;
            for (int o = 0, k = 0; o < orank; o++) {
                int ins = 0;
                for (int a = 0; a < na; a++) ins |= (ax[a] < 0 ? ax[a] + orank : ax[a]) == o;
                if (ins) continue;
                if (k++ == s) out_axis = o;
            }
        } else if (p->op == IR_OP_EXPAND) {
            int64_t nt = 0;
            const int64_t *tg = tps_const_i64(p->in[1], &nt);
            out_axis = s + (orank - is->rank);
            if (!tg) return -1;
            int ti = out_axis - (orank - (int)nt);
            if (ti >= 0) {
                if (tg[ti] == is->dims[s]) hs->tidx[i] = ti;
                else if (tg[ti] != 1) return -1;
            }
        } else if (p->op == IR_OP_RESHAPE) {
            int64_t nt = 0;
            const int64_t *tg = tps_const_i64(p->in[1], &nt);
            out_axis = hs_reshape_axis(is, s, os, t->tp);
            if (out_axis < 0 || !tg || nt != orank || ir_attr_int(p, "allowzero", 0)) return -1;
            for (int k = 0; k < nt; k++)
                if (tg[k] == 0 && k == s && k != out_axis) return -1; /* copies the sharded dim */
            if (tg[out_axis] > 0) hs->tidx[i] = out_axis;
            else if (tg[out_axis] == 0 && out_axis != s) return -1;
            /* -1 (inferred) or 0 (copied from the sharded input axis): follows */
        }
        if (out_axis < 0 || os->dims[out_axis] % t->tp) return -1;
        hs->axis[i] = out_axis;
    }
    hs->end_axis = hs_axis_of(hs, end);
    if (hs->end_axis < 0) return -1;
    /* closed: the subgraph's values are read inside it only */
    IrValue *rv = hs->root->out[hs->root_out];
    for (int i = -1; i < hs->n; i++) {
        IrValue *v = i < 0 ? rv : hs->node[i]->out[0];
        int inside = 0;
        for (int k = 0; k < hs->n; k++)
            for (int j = 0; j < hs->node[k]->nin; j++) inside += hs->node[k]->in[j] == v;
        if (v == end) inside++; /* its one reader outside: the Attention / row Linear */
        if (inside != tps_uses(c, v)) return -1;
    }
    return 0;
}

/* divide target element tidx of a Reshape/Expand by tp (a new constant) */
static void hs_retarget(Ts *t, IrNode *p, int tidx) {
    int64_t n = 0;
    const int64_t *d = tps_const_i64(p->in[1], &n);
    int64_t *nd = ir_xmalloc(sizeof *nd * (size_t)n);
    memcpy(nd, d, sizeof *nd * (size_t)n);
    nd[tidx] /= t->tp;
    char nm[1200];
    snprintf(nm, sizeof nm, "tp/shape/%s", p->name);
    p->in[1] = ir_const_i64s(t->c, nm, (int)n, nd);
    free(nd);
}

static void hs_apply(Ts *t, const HeadSet *hs) {
    for (int i = 0; i < hs->n; i++)
        if (hs->tidx[i] >= 0) hs_retarget(t, hs->node[i], hs->tidx[i]);
}

static void hs_add_inner(TpPattern *p, const HeadSet *hs) {
    for (int i = 0; i < hs->n; i++) tps_add_inner(p, hs->node[i]);
}

/* Attention -> Transpose/Reshape chain (os, collected backward) -> row
 * Linear l2: the Attention's sharded axis s must end as l2's input
 * features, whose rows tp divides */
static int out_track(Ts *t, HeadSet *os, int s, IrNode *l2) {
    int a = s;
    for (int lo = 0, hi = os->n - 1; lo < hi; lo++, hi--) { /* graph order */
        IrNode *x = os->node[lo];
        os->node[lo] = os->node[hi], os->node[hi] = x;
    }
    for (int i = 0; i < os->n; i++) {
        IrNode *p = os->node[i];
        os->tidx[i] = -1;
        if (p->op == IR_OP_TRANSPOSE) {
            a = perm_axis(p, a);
        } else {
            int64_t nt = 0;
            const int64_t *tg = tps_const_i64(p->in[1], &nt);
            int b = hs_reshape_axis(&p->in[0]->shape, a, &p->out[0]->shape, t->tp);
            if (b < 0 || !tg || nt != p->out[0]->shape.rank || ir_attr_int(p, "allowzero", 0))
                return -1;
            for (int k = 0; k < nt; k++)
                if (tg[k] == 0 && (k == a || k == b)) return -1;
            if (tg[b] > 0) os->tidx[i] = b; /* -1: inferred, follows */
            a = b;
        }
        if (a < 0) return -1;
        os->axis[i] = a;
    }
    return a == l2->in[0]->shape.rank - 1 && l2->in[1]->shape.dims[0] % t->tp == 0 ? 0 : -1;
}

static int try_attention(Ts *t, IrNode *l2) {
    IrGraph *c = t->c;
    /* the output side: Attention -> layout ops -> row Linear, every value
     * single-reader (tracked like q, k, v from the Attention's output) */
    HeadSet os;
    memset(&os, 0, sizeof os);
    IrValue *v = l2->in[0];
    while (v->producer && tps_uses(c, v) == 1 &&
           (v->producer->op == IR_OP_TRANSPOSE || v->producer->op == IR_OP_RESHAPE) &&
           os.n < HS_MAX) {
        os.node[os.n++] = v->producer;
        v = v->producer->in[0];
    }
    IrNode *at = v->producer;
    if (!at || at->op != IR_OP_ATTENTION || tps_uses(c, v) != 1 || os.n == 0) return 0;
    HeadSet hs[3];
    memset(hs, 0, sizeof hs);
    for (int j = 0; j < 3; j++)
        if (hs_collect(t, at->in[j], &hs[j]) || hs_track(t, &hs[j], at->in[j]))
            return t->res->skipped++, 0;
    /* the Attention is independent over its leading axes: q, k, v split
     * along the same one, with the same extent (heads after the GQA repeat) */
    int r = at->in[0]->shape.rank, s = hs[0].end_axis;
    for (int j = 0; j < 3; j++)
        if (hs[j].end_axis != s || s >= r - 2 ||
            at->in[j]->shape.dims[s] != at->in[0]->shape.dims[s])
            return t->res->skipped++, 0;
    /* the output side from the Attention's axis s to the row Linear's rows */
    if (out_track(t, &os, s, l2)) return t->res->skipped++, 0;
    int fused = hs[0].root->op == IR_OP_SPLIT;
    IrNode *s0 = hs[0].root, *l1 = NULL;
    int64_t st[3], ln[3], nsz[3];
    if (fused) {
        IrValue *x = s0->in[0];
        l1 = x->producer;
        int64_t ns = 0;
        const int64_t *sz = s0->nin > 1 ? tps_const_i64(s0->in[1], &ns) : NULL;
        int ax = (int)ir_attr_int(s0, "axis", 0);
        if (ax < 0) ax += x->shape.rank;
        if (hs[1].root != s0 || hs[2].root != s0 || s0->nout != 3 || !sz || ns != 3 ||
            hs[0].root_out != 0 || hs[1].root_out != 1 || hs[2].root_out != 2 ||
            ax != x->shape.rank - 1 || !l1 || !tps_linear_ok(c, l1) || !tps_in_range(t, l1) ||
            tps_uses(c, x) != 1)
            return t->res->skipped++, 0;
        int64_t off = 0;
        for (int i = 0; i < 3; i++) {
            if (sz[i] % t->tp) return t->res->skipped++, 0;
            ln[i] = nsz[i] = sz[i] / t->tp;
            st[i] = off + t->rank * ln[i];
            off += sz[i];
        }
    } else {
        for (int j = 0; j < 3; j++) {
            IrNode *lj = hs[j].root;
            if (lj->op != IR_OP_LINEAR || !tps_linear_ok(c, lj) || !tps_in_range(t, lj))
                return t->res->skipped++, 0;
            for (int k = 0; k < j; k++)
                if (hs[k].root == lj) return t->res->skipped++, 0;
        }
    }
    if (t->dry) {
        TpPattern *pat = tps_add_found(t, TP_PATTERN_ATTENTION, l2);
        if (fused) {
            pat->column[pat->ncolumn++] = l1;
            tps_add_inner(pat, s0);
        } else {
            for (int j = 0; j < 3; j++) pat->column[pat->ncolumn++] = hs[j].root;
        }
        /* q, k, v's subgraphs, then the head-parallel core up to the merge */
        for (int j = 0; j < 3; j++) hs_add_inner(pat, &hs[j]);
        tps_add_inner(pat, at);
        hs_add_inner(pat, &os);
        return 1;
    }
    for (int j = 0; j < 3; j++) hs_apply(t, &hs[j]);
    if (fused) {
        char nm[1200];
        snprintf(nm, sizeof nm, "tp/sizes/%s", s0->name);
        s0->in[1] = ir_const_i64s(c, nm, 3, nsz);
        tps_column_linear(t, l1, 3, st, ln);
    } else {
        for (int j = 0; j < 3; j++) {
            int64_t n = tps_last_dim(hs[j].root->out[0]);
            int64_t st1 = t->rank * (n / t->tp), ln1 = n / t->tp;
            tps_column_linear(t, hs[j].root, 1, &st1, &ln1);
        }
    }
    hs_apply(t, &os);
    int64_t d = l2->in[1]->shape.dims[0];
    tps_row_linear(t, l2, t->rank * (d / t->tp), d / t->tp);
    t->res->attention++;
    return 1;
}

int tp_shard(const IrGraph *g, int tp, int rank, TpShardResult *out, IrError *err) {
    return tp_shard_layers(g, tp, rank, 0, 0, out, err);
}

int tp_shard_layers(const IrGraph *g, int tp, int rank, int first, int last, TpShardResult *out,
                    IrError *err) {
    memset(out, 0, sizeof *out);
    if (tp < 1 || rank < 0 || rank >= tp)
        return ir_errorf(err, "tp_shard: rank %d of tp %d", rank, tp);
    Ts t = {.tp = tp, .rank = rank, .res = out, .first = first, .last = last};
    if (!(t.c = clone_graph(g, err))) return ir_error_prefix(err, "tp_shard");
    out->graph = t.c;
    int mixed = 0, sr = 0;
    if (tp > 1) {
        /* bf16-mixed (passes/mixed_precision.h): the matchers below see the
         * f32 Linears of the graph before the autocast, and the autocast
         * runs again on the rank's graph.  So a weight's bf16 copy is a Cast
         * of the rank's slice, and TpCopy / TpAllReduce stay f32: the
         * column-parallel input gradient and the row-parallel partial sums
         * are reduced in fp32 (Megatron's default), the row-parallel bias
         * added in f32 after the sum. */
        sr = mixed_precision_has_sr(t.c);
        mixed = mixed_precision_strip(t.c);
        /* row-parallel Linears anchor the patterns; the node list grows
         * while rewriting, so walk the original nodes only */
        int n0 = t.c->nnodes;
        IrNode **orig = ir_xcalloc((size_t)n0 + 1, sizeof *orig);
        memcpy(orig, t.c->nodes, sizeof *orig * (size_t)n0);
        for (int i = 0; i < n0; i++) {
            IrNode *l2 = orig[i];
            if (!tps_linear_ok(t.c, l2) || !tps_in_range(&t, l2)) continue;
            if (!try_mlp(&t, l2) && !try_gated_mlp(&t, l2)) try_attention(&t, l2);
        }
        free(orig);
        if (tps_vocab(&t, err) < 0) {
            free(t.copy_of);
            free(t.copy_val);
            tp_shard_free(out);
            return ir_error_prefix(err, "tp_shard rank %d of %d", rank, tp);
        }
    }
    free(t.copy_of);
    free(t.copy_val);
    PassContext ctx;
    pass_context_default(&ctx);
    if (mixed && (pass_mixed_precision(t.c, &ctx, err) ||
                  (sr && pass_stochastic_round(t.c, &ctx, err)))) {
        ir_error_prefix(err, "tp_shard rank %d of %d", rank, tp);
        tp_shard_free(out);
        return -1;
    }
    /* every value downstream of a sharded Linear gets its shard's shape */
    for (int i = 0; i < t.c->nvalues; i++)
        if (t.c->values[i]->producer) t.c->values[i]->shape_known = 0;
    if (pass_run_pipeline(t.c, "shape-infer", &ctx, err) || ir_verify(t.c, 1, err)) {
        ir_error_prefix(err, "tp_shard rank %d of %d", rank, tp);
        tp_shard_free(out);
        return -1;
    }
    return 0;
}

int tp_shard_find(const IrGraph *g, int tp, int first, int last, TpPattern **out, int *nout,
                  int *skipped, IrError *err) {
    *out = NULL;
    *nout = 0;
    if (skipped) *skipped = 0;
    if (!g || tp < 1) return ir_errorf(err, "tp_shard_find: tp %d", tp);
    TpShardResult res;
    memset(&res, 0, sizeof res);
    /* the matchers only read the graph in dry mode (no clone: parameters
     * need no data here, and the planner calls this on full-size models) */
    Ts t = {.c = (IrGraph *)g, .tp = tp, .res = &res, .first = first, .last = last, .dry = 1};
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *l2 = g->nodes[i];
        if (l2->dead || !tps_linear_ok(t.c, l2) || !tps_in_range(&t, l2)) continue;
        if (!try_mlp(&t, l2) && !try_gated_mlp(&t, l2)) try_attention(&t, l2);
    }
    if (tps_vocab(&t, err) < 0) {
        free(t.found);
        return -1;
    }
    *out = t.found;
    *nout = t.nfound;
    if (skipped) *skipped = res.skipped;
    return 0;
}

void tp_shard_free(TpShardResult *r) {
    if (!r) return;
    if (r->graph) ir_graph_free(r->graph);
    for (int i = 0; i < r->nshards; i++) free(r->shards[i].name);
    free(r->shards);
    memset(r, 0, sizeof *r);
}
