/* Reverse-mode automatic differentiation over the forward IR.
 *
 * The graph output "loss" (a scalar, made by the loss pass) is seeded with
 * 1; nodes are visited in reverse order and each op's rule (grad_rules.c)
 * emits the backward nodes for it.  Only values that depend on a parameter
 * get gradients ("needs"), so index inputs, masks and constants cost
 * nothing.  Gradients reaching a value from several uses (residual
 * streams, a tied embedding used as the head) are summed with Add.
 * New nodes are phase bwd, new values kind grad; the gradient of parameter
 * P ends in a graph output named "grad/P". */
#include "autodiff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct AdCtx {
    IrGraph *g;
    int nfwd;              /* values with id < nfwd are forward values */
    unsigned char *needs;  /* by value id */
    IrValue **grad;        /* accumulated gradient by forward value id */
};

IrGraph *ad_graph(AdCtx *c) { return c->g; }

int ad_needs(AdCtx *c, const IrValue *v) {
    return v && v->id >= 0 && v->id < c->nfwd && c->needs[v->id];
}

IrValue *ad_value(AdCtx *c, const IrValue *like, IrDType dt, const IrShape *s) {
    char name[512];
    snprintf(name, sizeof name, "d/%s", like ? like->name : "tmp");
    return ir_value_new(c->g, name, dt, s, IR_VK_GRAD);
}

IrNode *ad_emit(AdCtx *c, IrOp op, int nin, IrValue *const *in, int nout,
                IrValue *const *out) {
    char name[64];
    snprintf(name, sizeof name, "bwd/%s_%d", ir_op_name(op), c->g->next_node_id);
    IrNode *n = ir_node_new(c->g, op, name, nin, in, nout, out);
    n->phase = IR_PHASE_BWD;
    return n;
}

IrValue *ad_op1(AdCtx *c, IrOp op, const IrValue *like, const IrShape *s, int nin,
                IrValue *const *in) {
    IrValue *o = ad_value(c, like, in[0]->dtype, s);
    ad_emit(c, op, nin, in, 1, &o);
    return o;
}

IrValue *ad_shape_const(AdCtx *c, const IrShape *s) {
    IrValue *v = ir_const_i64s(c->g, "bwd/shape", s->rank, s->dims);
    return v;
}

IrValue *ad_sum_to(AdCtx *c, IrValue *g, const IrValue *x) {
    if (ir_shape_equal(&g->shape, &x->shape)) return g;
    IrValue *in[2] = {g, ad_shape_const(c, &x->shape)};
    return ad_op1(c, IR_OP_SUM_TO_SHAPE, x, &x->shape, 2, in);
}

IrValue *ad_zeros(AdCtx *c, const IrValue *x) {
    return ir_const_new(c->g, "bwd/zeros", x->dtype, &x->shape, NULL);
}

int ad_contrib(AdCtx *c, IrValue *x, IrValue *g, IrError *err) {
    if (!ad_needs(c, x) || !g) return 0;
    if (g->dtype != x->dtype)
        return ir_errorf(err, "gradient '%s' (%s) of '%s' (%s): dtypes differ", g->name,
                         ir_dtype_name(g->dtype), x->name, ir_dtype_name(x->dtype));
    g = ad_sum_to(c, g, x);
    if (!ir_shape_equal(&g->shape, &x->shape)) {
        char a[96], b[96];
        return ir_errorf(err, "gradient '%s' %s does not match '%s' %s", g->name,
                         ir_shape_str(&g->shape, a, sizeof a), x->name,
                         ir_shape_str(&x->shape, b, sizeof b));
    }
    IrValue *prev = c->grad[x->id];
    if (!prev) {
        c->grad[x->id] = g;
        return 0;
    }
    IrValue *in[2] = {prev, g};
    c->grad[x->id] = ad_op1(c, IR_OP_ADD, x, &x->shape, 2, in);
    return 0;
}

static IrValue *find_output(IrGraph *g, const char *name) {
    for (int i = 0; i < g->noutputs; i++)
        if (!strcmp(g->outputs[i]->name, name)) return g->outputs[i];
    return NULL;
}

IrValue *ad_param_grad(IrGraph *g, const IrValue *p) {
    char name[512];
    snprintf(name, sizeof name, "grad/%s", p->name);
    /* any kind: shape-infer may fold a gradient that needs no data to a constant */
    return find_output(g, name);
}

/* needs[v]: v is a float parameter, or a float output of a node with an
 * input that needs a gradient through a differentiable slot. */
static void mark_needs(AdCtx *c) {
    IrGraph *g = c->g;
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *v = g->values[i];
        if (v->kind == IR_VK_PARAM && ir_dtype_is_float(v->dtype)) c->needs[v->id] = 1;
    }
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        const GradRule *r = grad_rule(n->op);
        int any = 0;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] && c->needs[n->in[j]->id] && (!r || j >= 32 || (r->diff >> j) & 1))
                any = 1;
        if (!any) continue;
        for (int j = 0; j < n->nout; j++)
            if (n->out[j] && ir_dtype_is_float(n->out[j]->dtype)) c->needs[n->out[j]->id] = 1;
    }
}

/* A bf16-mixed backward re-casts instead of keeping a cast's output from
 * forward to backward (passes/mixed_precision.c puts the Casts there):
 * a Cast of a parameter (the bf16 weight copy: the fp32 master weight is
 * resident anyway, so keeping the copy would cost 2 B/param for the whole
 * forward-to-backward span) and an f32 Cast of a bf16 value (the f32 view
 * of a bf16 Linear's output: keeping the bf16 source halves the bytes).
 * Both casts give the same bits again -- the parameter does not change
 * before the update, and bf16 -> f32 is exact -- so the numbers are those
 * of reading the saved value.  Each re-cast is a bwd Cast placed before
 * its first backward reader, made once per value. */
static int recast_cheap(const IrValue *v) {
    const IrNode *p = v ? v->producer : NULL;
    if (!p || p->op != IR_OP_CAST || p->phase != IR_PHASE_FWD || p->nin < 1 || !p->in[0])
        return 0;
    const IrValue *s = p->in[0];
    return s->kind == IR_VK_PARAM || (s->dtype == IR_BF16 && v->dtype == IR_F32);
}
static void recast_saved_casts(AdCtx *c, int first_bwd) {
    IrGraph *g = c->g;
    IrValue **re = ir_xcalloc((size_t)c->nfwd + 1, sizeof *re);
    for (int i = first_bwd; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->phase != IR_PHASE_BWD) continue;
        for (int j = 0; j < n->nin; j++) {
            IrValue *v = n->in[j];
            if (!v || v->id < 0 || v->id >= c->nfwd || g->values[v->id] != v ||
                !recast_cheap(v))
                continue;
            if (!re[v->id]) {
                const IrNode *p = v->producer;
                char name[600];
                snprintf(name, sizeof name, "re/%s", v->name);
                IrValue *o = ir_value_new(g, name, v->dtype, &v->shape, IR_VK_ACT);
                o->shape_known = v->shape_known;
                snprintf(name, sizeof name, "re/%s", p->name);
                IrNode *k = ir_node_insert(g, i, IR_OP_CAST, name, 1, &p->in[0], 1, &o);
                ir_node_set_int(k, "to", v->dtype);
                /* a stochastically rounded weight copy: the same key, so the
                 * same bits as the forward's (passes/stochastic_round.c) */
                if (ir_attr_int(p, "sr", 0)) ir_node_set_int(k, "sr", ir_attr_int(p, "sr", 0));
                k->module_id = p->module_id;
                k->layer_id = p->layer_id;
                k->stage_id = p->stage_id;
                k->phase = IR_PHASE_BWD;
                re[v->id] = o;
                i++; /* n moved one on */
            }
            n->in[j] = re[v->id];
        }
    }
    free(re);
}

/* The shared core: seeds give the starting gradients (NULL grad: 1, for a
 * scalar loss); wrt values are marked as needing gradients like parameters
 * and get theirs back in wrt_grad. */
static int ad_run(IrGraph *g, const AdSeed *seeds, int nseeds, IrValue *const *wrt, int nwrt,
                  IrValue **wrt_grad, IrError *err) {
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->phase != IR_PHASE_FWD)
            return ir_errorf(err, "graph already has backward node '%s'; run autodiff once",
                             g->nodes[i]->name);
    for (int i = 0; i < nseeds; i++)
        if (seeds[i].grad && (seeds[i].grad->dtype != seeds[i].value->dtype ||
                              !ir_shape_equal(&seeds[i].grad->shape, &seeds[i].value->shape)))
            return ir_errorf(err, "seed gradient '%s' does not match the dtype and shape of '%s'",
                             seeds[i].grad->name, seeds[i].value->name);
    ir_graph_compact(g); /* dense value ids index the tables below */
    AdCtx c = {.g = g, .nfwd = g->nvalues};
    c.needs = ir_xcalloc((size_t)c.nfwd + 1, 1);
    c.grad = ir_xcalloc((size_t)c.nfwd + 1, sizeof *c.grad);
    for (int i = 0; i < nwrt; i++)
        if (ir_dtype_is_float(wrt[i]->dtype)) c.needs[wrt[i]->id] = 1;
    mark_needs(&c);
    int rc = 0;
    for (int i = 0; i < nseeds && !rc; i++) {
        IrValue *v = seeds[i].value;
        if (!c.needs[v->id]) {
            rc = ir_errorf(err, "%s '%s' does not depend on any parameter",
                           seeds[i].grad ? "seeded value" : "loss", v->name);
            goto done;
        }
        IrValue *gv = seeds[i].grad;
        if (!gv) {
            gv = ir_const_scalar_f32(g, "grad/loss", 1.0f);
            if (v->shape.rank != 0) {
                IrValue *in[2] = {gv, ad_shape_const(&c, &v->shape)};
                gv = ad_op1(&c, IR_OP_RESHAPE, v, &v->shape, 2, in);
            }
        }
        if (c.grad[v->id]) {
            IrValue *in[2] = {c.grad[v->id], gv};
            gv = ad_op1(&c, IR_OP_ADD, v, &v->shape, 2, in);
        }
        c.grad[v->id] = gv;
    }
    int nfwd_nodes = g->nnodes;
    IrValue *gout[64];
    for (int i = nfwd_nodes - 1; i >= 0 && !rc; i--) {
        IrNode *n = g->nodes[i];
        if (n->dead) continue;
        int any_out = 0, any_in = 0;
        if (n->nout > 64) {
            rc = ir_errorf(err, "node '%s' has too many outputs", n->name);
            break;
        }
        for (int j = 0; j < n->nout; j++) {
            gout[j] = n->out[j] && n->out[j]->id < c.nfwd ? c.grad[n->out[j]->id] : NULL;
            if (gout[j]) any_out = 1;
        }
        const GradRule *r = grad_rule(n->op);
        for (int j = 0; j < n->nin; j++)
            if (ad_needs(&c, n->in[j]) && (!r || j >= 32 || (r->diff >> j) & 1)) any_in = 1;
        if (!any_out || !any_in) continue;
        char why[256];
        if (!grad_node_ok(n, why, sizeof why)) {
            rc = ir_errorf(err, "node '%s' (%s): %s", n->name, ir_op_name(n->op), why);
            break;
        }
        if (r->fn(&c, n, gout, err))
            rc = ir_error_prefix(err, "gradient of node '%s' (%s)", n->name, ir_op_name(n->op));
    }
    /* parameters' gradients as named graph outputs, in value order */
    for (int i = 0; i < c.nfwd && !rc; i++) {
        IrValue *p = g->values[i];
        if (p->kind != IR_VK_PARAM || !c.grad[p->id]) continue;
        char name[512];
        snprintf(name, sizeof name, "grad/%s", p->name);
        if (ir_graph_find_value(g, name)) {
            rc = ir_errorf(err, "value name '%s' is taken; cannot name the gradient of '%s'",
                           name, p->name);
            break;
        }
        IrValue *o = ir_value_new(g, name, p->dtype, &p->shape, IR_VK_GRAD);
        ad_emit(&c, IR_OP_IDENTITY, 1, &c.grad[p->id], 1, &o);
        ir_graph_add_output(g, o);
    }
    if (!rc) recast_saved_casts(&c, nfwd_nodes);
    for (int i = 0; i < nwrt && !rc; i++)
        wrt_grad[i] = wrt[i]->id >= 0 && wrt[i]->id < c.nfwd && g->values[wrt[i]->id] == wrt[i]
                          ? c.grad[wrt[i]->id]
                          : NULL;
done:
    free(c.needs);
    free(c.grad);
    return rc;
}

int pass_autodiff(IrGraph *g, PassContext *ctx, IrError *err) {
    (void)ctx;
    IrValue *loss = find_output(g, "loss");
    if (!loss)
        return ir_errorf(err, "graph '%s' has no output named 'loss'; run the loss pass first",
                         g->name);
    if (ir_shape_numel(&loss->shape) != 1 || loss->dtype != IR_F32)
        return ir_errorf(err, "loss '%s' must be an f32 scalar", loss->name);
    AdSeed seed = {.value = loss, .grad = NULL};
    return ad_run(g, &seed, 1, NULL, 0, NULL, err);
}

int autodiff_seeded(IrGraph *g, const AdSeed *seeds, int nseeds, IrValue *const *wrt, int nwrt,
                    IrValue **wrt_grad, IrError *err) {
    for (int i = 0; i < nseeds; i++)
        if (!seeds[i].grad &&
            (ir_shape_numel(&seeds[i].value->shape) != 1 || seeds[i].value->dtype != IR_F32))
            return ir_errorf(err, "seed '%s' without a gradient must be an f32 scalar (a loss)",
                             seeds[i].value->name);
    return ad_run(g, seeds, nseeds, wrt, nwrt, wrt_grad, err);
}

int autodiff_blockers(IrGraph *g, AdBlocker *out, int max) {
    ir_graph_compact(g); /* dense value ids, as ad_run */
    AdCtx c = {.g = g, .nfwd = g->nvalues};
    c.needs = ir_xcalloc((size_t)c.nfwd + 1, 1);
    mark_needs(&c);
    /* reach[v]: a gradient of a loss on the graph outputs could arrive at v.
     * A blocked node still passes it on, so every blocker is found, not
     * just the last one on each path. */
    unsigned char *reach = ir_xcalloc((size_t)c.nfwd + 1, 1);
    for (int i = 0; i < g->noutputs; i++)
        if (c.needs[g->outputs[i]->id]) reach[g->outputs[i]->id] = 1;
    int cnt = 0;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const IrNode *n = g->nodes[i];
        int any_out = 0, any_in = 0;
        for (int j = 0; j < n->nout; j++)
            if (n->out[j] && reach[n->out[j]->id]) any_out = 1;
        const GradRule *r = grad_rule(n->op);
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] && c.needs[n->in[j]->id] && (!r || j >= 32 || (r->diff >> j) & 1)) {
                reach[n->in[j]->id] = (unsigned char)(reach[n->in[j]->id] | any_out);
                any_in = 1;
            }
        if (!any_out || !any_in) continue;
        char why[256];
        if (grad_node_ok(n, why, sizeof why)) continue;
        if (cnt < max) {
            out[cnt].node = n;
            snprintf(out[cnt].why, sizeof out[cnt].why, "%s", why);
        }
        cnt++;
    }
    free(c.needs);
    free(reach);
    /* graph order reads better than the reverse walk's */
    int k = cnt < max ? cnt : max;
    for (int a = 0, b = k - 1; a < b; a++, b--) {
        AdBlocker t = out[a];
        out[a] = out[b];
        out[b] = t;
    }
    return cnt;
}
