/* Tensor-parallel sharding of a forward graph for one TP rank
 * (tp_shard.h says what is matched and why). */
#include "tp_shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    return op == IR_OP_GELU || op == IR_OP_RELU || op == IR_OP_SILU || op == IR_OP_TANH ||
           op == IR_OP_SIGMOID || op == IR_OP_ERF;
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

/* q, k, v of an Attention back through single-reader layout ops */
typedef struct Chain {
    IrNode *split_reshape; /* the Reshape [.., D] -> [.., H, Dh] */
    IrNode *src;           /* Split or Linear at the chain's root */
    int src_out;           /* which output of src */
    int64_t heads;
} Chain;

static int walk_chain(const IrGraph *c, IrValue *v, Chain *ch) {
    memset(ch, 0, sizeof *ch);
    int r = v->shape.rank;
    if (r < 3) return -1;
    ch->heads = v->shape.dims[r - 3];
    while (v->producer && (v->producer->op == IR_OP_TRANSPOSE || v->producer->op == IR_OP_RESHAPE)) {
        IrNode *p = v->producer;
        if (tps_uses(c, v) != 1) return -1;
        if (p->op == IR_OP_RESHAPE) {
            if (ch->split_reshape || p->out[0]->shape.rank != p->in[0]->shape.rank + 1) return -1;
            ch->split_reshape = p;
        }
        v = p->in[0];
    }
    if (!v->producer || !ch->split_reshape || tps_uses(c, v) != 1) return -1;
    ch->src = v->producer;
    ch->src_out = v->producer_slot;
    return 0;
}

static int try_attention(Ts *t, IrNode *l2) {
    IrGraph *c = t->c;
    IrValue *h = l2->in[0];
    IrNode *merge = h->producer;
    if (!merge || merge->op != IR_OP_RESHAPE || tps_uses(c, h) != 1) return 0;
    IrValue *tv = merge->in[0];
    IrNode *tr = tv->producer;
    if (!tr || tr->op != IR_OP_TRANSPOSE || tps_uses(c, tv) != 1) return 0;
    IrValue *o = tr->in[0];
    IrNode *at = o->producer;
    if (!at || at->op != IR_OP_ATTENTION || tps_uses(c, o) != 1) return 0;
    Chain ch[3];
    for (int j = 0; j < 3; j++)
        if (walk_chain(c, at->in[j], &ch[j])) return t->res->skipped++, 0;
    for (int j = 0; j < 3; j++)
        if (ch[j].heads % t->tp || !tps_retarget_ok(t, ch[j].split_reshape, 2))
            return t->res->skipped++, 0;
    if (!tps_retarget_ok(t, merge, 1) || l2->in[1]->shape.dims[0] % t->tp)
        return t->res->skipped++, 0;
    int fused = ch[0].src->op == IR_OP_SPLIT;
    TpPattern *pat = NULL; /* dry mode: filled once every check has passed */
    if (fused) {
        IrNode *s = ch[0].src;
        IrValue *x = s->in[0];
        IrNode *l1 = x->producer;
        int64_t ns = 0;
        const int64_t *sz = s->nin > 1 ? tps_const_i64(s->in[1], &ns) : NULL;
        int ax = (int)ir_attr_int(s, "axis", 0);
        if (ax < 0) ax += x->shape.rank;
        if (ch[1].src != s || ch[2].src != s || s->nout != 3 || !sz || ns != 3 ||
            (l1 && !tps_in_range(t, l1)) ||
            ax != x->shape.rank - 1 || !l1 || !tps_linear_ok(c, l1) || tps_uses(c, x) != 1)
            return t->res->skipped++, 0;
        int64_t st[3], ln[3], nsz[3], off = 0;
        for (int i = 0; i < 3; i++) {
            if (sz[i] % t->tp) return t->res->skipped++, 0;
            ln[i] = sz[i] / t->tp;
            st[i] = off + t->rank * ln[i];
            nsz[i] = ln[i];
            off += sz[i];
        }
        if (t->dry) {
            pat = tps_add_found(t, TP_PATTERN_ATTENTION, l2);
            pat->column[pat->ncolumn++] = l1;
            tps_add_inner(pat, s);
        } else {
            for (int j = 0; j < 3; j++) tps_retarget(t, ch[j].split_reshape, 2);
            char nm[1200];
            snprintf(nm, sizeof nm, "tp/sizes/%s", s->name);
            s->in[1] = ir_const_i64s(c, nm, 3, nsz);
            tps_column_linear(t, l1, 3, st, ln);
        }
    } else {
        for (int j = 0; j < 3; j++) {
            IrNode *l1 = ch[j].src;
            if (!tps_linear_ok(c, l1) || tps_last_dim(l1->out[0]) % t->tp || !tps_in_range(t, l1))
                return t->res->skipped++, 0;
        }
        if (t->dry) {
            pat = tps_add_found(t, TP_PATTERN_ATTENTION, l2);
            for (int j = 0; j < 3; j++) pat->column[pat->ncolumn++] = ch[j].src;
        }
        if (!t->dry) for (int j = 0; j < 3; j++) tps_retarget(t, ch[j].split_reshape, 2);
        for (int j = 0; j < 3 && !t->dry; j++) {
            int64_t n = tps_last_dim(ch[j].src->out[0]);
            int64_t st = t->rank * (n / t->tp), ln = n / t->tp;
            tps_column_linear(t, ch[j].src, 1, &st, &ln);
        }
    }
    if (t->dry) {
        /* the layout chains of q, k, v (their single-reader ops), then the
         * head-parallel core up to the merge */
        for (int j = 0; j < 3; j++)
            for (IrValue *v = at->in[j]; v->producer && v->producer != ch[j].src;
                 v = v->producer->in[0])
                tps_add_inner(pat, v->producer);
        tps_add_inner(pat, at);
        tps_add_inner(pat, tr);
        tps_add_inner(pat, merge);
        return 1;
    }
    tps_retarget(t, merge, 1);
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
    if (tp > 1) {
        /* row-parallel Linears anchor the patterns; the node list grows
         * while rewriting, so walk the original nodes only */
        int n0 = t.c->nnodes;
        IrNode **orig = ir_xcalloc((size_t)n0 + 1, sizeof *orig);
        memcpy(orig, t.c->nodes, sizeof *orig * (size_t)n0);
        for (int i = 0; i < n0; i++) {
            IrNode *l2 = orig[i];
            if (!tps_linear_ok(t.c, l2) || !tps_in_range(&t, l2)) continue;
            if (!try_mlp(&t, l2)) try_attention(&t, l2);
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
    /* every value downstream of a sharded Linear gets its shard's shape */
    for (int i = 0; i < t.c->nvalues; i++)
        if (t.c->values[i]->producer) t.c->values[i]->shape_known = 0;
    PassContext ctx;
    pass_context_default(&ctx);
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
        if (!try_mlp(&t, l2)) try_attention(&t, l2);
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
