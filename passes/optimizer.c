/* The optimizer pass (passes/optimizer.h): global-norm clipping, then
 * AdamW as one fused AdamW node per parameter (in place: ir/ops.def) or
 * SGD as elementwise IR whose per-step scalars are computed once from the
 * "lr" and "step" inputs and broadcast into each parameter's update. */
#include "optimizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void optim_opts_default(OptimOpts *o) {
    memset(o, 0, sizeof *o);
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->eps = 1e-8;
    o->weight_decay = 0.1;
    o->momentum = 0.9;
    o->clip = 1.0;
}

typedef struct Opt {
    IrGraph *g;
    const OptimOpts *o;
    double kval[16]; /* scalar constants made so far, shared by every update */
    IrValue *kv[16];
    int nk;
} Opt;

/* emit op(a, b) (b may be NULL for unary ops) shaped like the broadcast of
 * a and b; name NULL: generated.  Phase upd. */
static IrValue *emit(Opt *c, IrOp op, IrValue *a, IrValue *b, const char *name,
                     IrValueKind kind) {
    const IrShape *s = b && b->shape.rank > a->shape.rank ? &b->shape : &a->shape;
    IrDType dt = op == IR_OP_EQUAL ? IR_BOOL : a->dtype;
    IrValue *o = ir_value_new(c->g, name, dt, s, kind);
    IrValue *in[2] = {a, b};
    IrNode *n = ir_node_new(c->g, op, NULL, b ? 2 : 1, in, 1, &o);
    n->phase = IR_PHASE_UPD;
    return o;
}
static IrValue *k(Opt *c, double v) {
    for (int i = 0; i < c->nk; i++)
        if (c->kval[i] == v) return c->kv[i];
    IrValue *x = ir_const_scalar_f32(c->g, "upd/c", (float)v);
    if (c->nk < 16) c->kval[c->nk] = v, c->kv[c->nk++] = x;
    return x;
}

static IrValue *state(Opt *c, const char *kind, const IrValue *p) {
    char name[600];
    snprintf(name, sizeof name, "opt/%s/%s", kind, p->name);
    IrValue *v = ir_value_new(c->g, name, p->dtype, &p->shape, IR_VK_OPTSTATE);
    size_t nb = (size_t)ir_shape_numel(&p->shape) * ir_dtype_size(p->dtype);
    ir_value_set_data(v, ir_xcalloc(nb ? nb : 1, 1), nb);
    return v;
}

static IrValue *scalar_input(IrGraph *g, const char *name, IrDType dt, IrError *err) {
    IrValue *v = ir_graph_find_value(g, name);
    IrShape s0 = {0};
    if (v) {
        if (v->kind != IR_VK_INPUT || v->dtype != dt || ir_shape_numel(&v->shape) != 1) {
            ir_errorf(err, "value '%s' exists and is not a %s scalar input", name,
                      ir_dtype_name(dt));
            return NULL;
        }
        return v;
    }
    v = ir_value_new(g, name, dt, &s0, IR_VK_INPUT);
    ir_graph_add_input(g, v);
    return v;
}

static void out_name(char *buf, size_t n, const char *kind, const IrValue *p) {
    if (kind) snprintf(buf, n, "upd/%s/%s", kind, p->name);
    else snprintf(buf, n, "upd/%s", p->name);
}

/* Per-step scalars shared by every parameter's update. */
typedef struct Scalars {
    IrValue *lr, *step, *first;
    IrValue *clip_scale; /* NULL: no clipping */
} Scalars;

/* torch.optim.AdamW (amsgrad off): p *= 1 - lr wd; m = b1 m + (1-b1) g;
 * v = b2 v + (1-b2) g^2; p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps),
 * as ONE AdamW node (ir/ops.def) whose output i updates input i: executors
 * run it in place over P, m, v (its kernel, hk_adamw_fused_f32, keeps the
 * fp32 operation order of the elementwise chain this pass emitted before,
 * clipping included: g is scaled by clip_scale first). */
static void adamw(Opt *c, const Scalars *s, IrValue *p, IrValue *g, double wd) {
    const OptimOpts *o = c->o;
    char nm[620], nv[620], np[620];
    out_name(nm, sizeof nm, "m", p);
    out_name(nv, sizeof nv, "v", p);
    out_name(np, sizeof np, NULL, p);
    IrValue *in[7] = {p, state(c, "m", p), state(c, "v", p), g, s->lr, s->step, s->clip_scale};
    IrValue *out[3] = {ir_value_new(c->g, np, p->dtype, &p->shape, IR_VK_ACT),
                       ir_value_new(c->g, nm, p->dtype, &p->shape, IR_VK_OPTSTATE),
                       ir_value_new(c->g, nv, p->dtype, &p->shape, IR_VK_OPTSTATE)};
    IrNode *n = ir_node_new(c->g, IR_OP_ADAMW, NULL, s->clip_scale ? 7 : 6, in, 3, out);
    n->phase = IR_PHASE_UPD;
    ir_node_set_float(n, "beta1", o->beta1);
    ir_node_set_float(n, "beta2", o->beta2);
    ir_node_set_float(n, "eps", o->eps);
    ir_node_set_float(n, "weight_decay", wd);
}

/* torch.optim.SGD: d = g + wd p; buf = d on the first step, else
 * momentum buf + (1 - dampening) d; d = nesterov ? d + momentum buf : buf;
 * p -= lr d */
static void sgd(Opt *c, const Scalars *s, IrValue *p, IrValue *g, double wd) {
    const OptimOpts *o = c->o;
    char nb[620], np[620];
    out_name(nb, sizeof nb, "buf", p), out_name(np, sizeof np, NULL, p);
    IrValue *d = wd != 0 ? emit(c, IR_OP_ADD, g, emit(c, IR_OP_MUL, p, k(c, wd), NULL, IR_VK_ACT),
                                NULL, IR_VK_ACT)
                         : g;
    IrValue *buf = state(c, "buf", p);
    IrValue *later = emit(c, IR_OP_ADD, emit(c, IR_OP_MUL, buf, k(c, o->momentum), NULL, IR_VK_ACT),
                          emit(c, IR_OP_MUL, d, k(c, 1 - o->dampening), NULL, IR_VK_ACT), NULL,
                          IR_VK_ACT);
    IrValue *b1 = ir_value_new(c->g, nb, p->dtype, &p->shape, IR_VK_OPTSTATE);
    IrValue *in[3] = {s->first, d, later};
    ir_node_new(c->g, IR_OP_WHERE, NULL, 3, in, 1, &b1)->phase = IR_PHASE_UPD;
    IrValue *dir = o->nesterov ? emit(c, IR_OP_ADD, d,
                                      emit(c, IR_OP_MUL, b1, k(c, o->momentum), NULL, IR_VK_ACT),
                                      NULL, IR_VK_ACT)
                               : b1;
    emit(c, IR_OP_SUB, p, emit(c, IR_OP_MUL, dir, s->lr, NULL, IR_VK_ACT), np, IR_VK_ACT);
}

int pass_optimizer_with(IrGraph *g, const OptimOpts *o, IrError *err) {
    int nv = g->nvalues, n = 0;
    IrValue **ps = ir_xcalloc((size_t)nv + 1, sizeof *ps);
    IrValue **gs = ir_xcalloc((size_t)nv + 1, sizeof *gs);
    int rc = 0;
    for (int i = 0; i < nv && !rc; i++) {
        IrValue *p = g->values[i];
        char name[600];
        if (p->kind != IR_VK_PARAM) continue;
        snprintf(name, sizeof name, "grad/%s", p->name);
        IrValue *gv = ir_graph_find_value(g, name);
        if (!gv) continue;
        if (!ir_shape_equal(&gv->shape, &p->shape) || gv->dtype != IR_F32 || p->dtype != IR_F32)
            rc = ir_errorf(err, "gradient '%s' does not match f32 parameter '%s'", name, p->name);
        ps[n] = p, gs[n++] = gv;
    }
    if (!rc && !n)
        rc = ir_errorf(err, "no parameter has a gradient 'grad/<param>'; run autodiff first");
    Opt c = {.g = g, .o = o};
    Scalars s = {0};
    IrValue *step = NULL;
    if (!rc && (!(s.lr = scalar_input(g, "lr", IR_F32, err)) ||
                !(step = scalar_input(g, "step", IR_I64, err))))
        rc = -1;
    if (rc) {
        free(ps), free(gs);
        return rc;
    }
    /* global norm over all gradients (clip_grad_norm_, norm_type 2); an
     * input when the gradients are spread over programs (pipeline stages) */
    IrValue *norm = NULL, *sq = NULL;
    if (o->norm_input && !(norm = scalar_input(g, "grad_norm", IR_F32, err))) {
        free(ps), free(gs);
        return -1;
    }
    for (int i = 0; i < n && !norm; i++) {
        IrValue *t = emit(&c, IR_OP_MUL, gs[i], gs[i], NULL, IR_VK_ACT);
        IrShape s0 = {0};
        IrValue *r = ir_value_new(g, NULL, IR_F32, &s0, IR_VK_ACT);
        IrNode *rn = ir_node_new(g, IR_OP_REDUCE_SUM, NULL, 1, &t, 1, &r);
        rn->phase = IR_PHASE_UPD;
        ir_node_set_int(rn, "keepdims", 0);
        sq = sq ? emit(&c, IR_OP_ADD, sq, r, NULL, IR_VK_ACT) : r;
    }
    if (!norm) {
        norm = emit(&c, IR_OP_SQRT, sq, NULL, "grad_norm", IR_VK_ACT);
        ir_graph_add_output(g, norm);
    }
    if (o->clip > 0) {
        IrValue *q = emit(&c, IR_OP_DIV, k(&c, o->clip),
                          emit(&c, IR_OP_ADD, norm, k(&c, 1e-6), NULL, IR_VK_ACT), NULL, IR_VK_ACT);
        IrValue *mn[2] = {k(&c, 1.0), q};
        IrShape s0 = {0};
        IrValue *cs = ir_value_new(g, "clip_scale", IR_F32, &s0, IR_VK_ACT);
        ir_node_new(g, IR_OP_MIN, NULL, 2, mn, 1, &cs)->phase = IR_PHASE_UPD;
        ir_graph_add_output(g, cs);
        /* AdamW scales its gradient itself (its clip_scale input) */
        if (o->sgd)
            for (int i = 0; i < n; i++) gs[i] = emit(&c, IR_OP_MUL, gs[i], cs, NULL, IR_VK_GRAD);
        else
            s.clip_scale = cs;
    }
    s.step = step;
    if (o->sgd) {
        int64_t one = 1;
        IrShape s0 = {0};
        s.first = emit(&c, IR_OP_EQUAL, step, ir_const_new(g, "upd/one", IR_I64, &s0, &one), NULL,
                       IR_VK_ACT);
    }
    for (int i = 0; i < n; i++) {
        /* no decay on norms and biases (rank < 2), as nanoGPT / llm.c set up torch */
        double wd = ps[i]->shape.rank >= 2 ? o->weight_decay : 0.0;
        if (o->sgd) sgd(&c, &s, ps[i], gs[i], wd);
        else adamw(&c, &s, ps[i], gs[i], wd);
    }
    char name[600];
    for (int i = 0; i < n; i++) { /* outputs in parameter order: p', then its states */
        const char *kinds[3] = {NULL, o->sgd ? "buf" : "m", o->sgd ? NULL : "v"};
        for (int j = 0; j < 3; j++) {
            if (j && !kinds[j]) continue;
            out_name(name, sizeof name, kinds[j], ps[i]);
            ir_graph_add_output(g, ir_graph_find_value(g, name));
        }
    }
    free(ps), free(gs);
    return 0;
}

int pass_optimizer(IrGraph *g, PassContext *ctx, IrError *err) {
    (void)ctx;
    OptimOpts o;
    optim_opts_default(&o);
    return pass_optimizer_with(g, &o, err);
}
