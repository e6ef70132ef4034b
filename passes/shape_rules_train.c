/* Shape rules of the training ops.  Backward ops produce gradients shaped
 * like the forward operands they differentiate, so most rules copy an
 * input's type; SumToShape and SliceGrad read the target shape from a
 * constant operand. */
#include <string.h>

#include "shape_rules.h"
#include "shape_rules_train.h"

#define SH(s) ir_shape_str((s), (char[160]){0}, 160)

static int need(IrNode *n, int i, IrError *err) {
    if (i >= n->nin || !n->in[i]) return node_errorf(err, n, "input %d is missing", i);
    const IrValue *v = n->in[i];
    if (!v->shape_known || !ir_shape_is_static(&v->shape))
        return node_errorf(err, n, "input %d '%s' has no static shape", i, v->name);
    return 0;
}

static void put(IrNode *n, int i, IrDType dt, const IrShape *s) {
    if (i >= n->nout || !n->out[i]) return;
    IrValue *o = n->out[i];
    o->dtype = dt;
    o->shape = *s;
    o->shape_known = 1;
}

int rule_cross_entropy(IrNode *n, IrError *err) {
    if (need(n, 0, err) || need(n, 1, err)) return -1;
    const IrValue *lg = n->in[0], *t = n->in[1];
    if (lg->dtype != IR_F32) return node_errorf(err, n, "logits '%s' must be f32", lg->name);
    if (t->dtype != IR_I64 && t->dtype != IR_I32)
        return node_errorf(err, n, "targets '%s' must be i64 or i32", t->name);
    IrShape want = lg->shape;
    if (want.rank < 1) return node_errorf(err, n, "logits '%s' must have rank >= 1", lg->name);
    want.rank--;
    if (!ir_shape_equal(&want, &t->shape))
        return node_errorf(err, n, "targets %s must have the logits' shape %s without the "
                           "vocabulary axis", SH(&t->shape), SH(&lg->shape));
    IrShape scalar = {0};
    put(n, 0, IR_F32, &scalar);
    return 0;
}

int rule_cross_entropy_grad(IrNode *n, IrError *err) {
    if (need(n, 0, err) || need(n, 1, err) || need(n, 2, err)) return -1;
    if (ir_shape_numel(&n->in[2]->shape) != 1)
        return node_errorf(err, n, "dloss '%s' must be a scalar", n->in[2]->name);
    put(n, 0, n->in[0]->dtype, &n->in[0]->shape);
    return 0;
}

/* the vocab-parallel loss ops (ir/ops.def): logits [...,Vl], targets [...],
 * M [...] (the row max), stats [...,2]; Vl and vocab_start inside vocab_size */
static int vocab_ce_check(IrNode *n, int nin, IrError *err) {
    for (int i = 0; i < nin; i++)
        if (need(n, i, err)) return -1;
    if (rule_cross_entropy(n, err)) return -1; /* logits / targets as CrossEntropy's */
    const IrValue *lg = n->in[0], *m = n->in[2];
    IrShape rows = lg->shape;
    rows.rank--;
    if (m->dtype != IR_F32 || !ir_shape_equal(&rows, &m->shape))
        return node_errorf(err, n, "row max '%s' %s must be f32 of the logits' shape %s without "
                           "the vocabulary axis", m->name, SH(&m->shape), SH(&lg->shape));
    int64_t vl = lg->shape.dims[lg->shape.rank - 1], st = ir_attr_int(n, "vocab_start", 0);
    int64_t vs = ir_attr_int(n, "vocab_size", vl);
    if (st < 0 || st + vl > vs)
        return node_errorf(err, n, "vocab_start %lld + %lld logits passes vocab_size %lld",
                           (long long)st, (long long)vl, (long long)vs);
    if (nin > 3) {
        const IrValue *s = n->in[3];
        IrShape want = rows;
        want.dims[want.rank++] = 2;
        if (s->dtype != IR_F32 || !ir_shape_equal(&want, &s->shape))
            return node_errorf(err, n, "stats '%s' %s must be f32 %s", s->name, SH(&s->shape),
                               SH(&want));
    }
    return 0;
}

int rule_vocab_ce_stats(IrNode *n, IrError *err) {
    if (vocab_ce_check(n, 3, err)) return -1;
    IrShape s = n->in[2]->shape;
    s.dims[s.rank++] = 2;
    put(n, 0, IR_F32, &s);
    return 0;
}

int rule_vocab_cross_entropy(IrNode *n, IrError *err) {
    return vocab_ce_check(n, 4, err); /* the scalar loss: put by rule_cross_entropy */
}

int rule_vocab_cross_entropy_grad(IrNode *n, IrError *err) {
    if (vocab_ce_check(n, 5, err)) return -1;
    if (ir_shape_numel(&n->in[4]->shape) != 1)
        return node_errorf(err, n, "dloss '%s' must be a scalar", n->in[4]->name);
    put(n, 0, IR_F32, &n->in[0]->shape);
    return 0;
}

int rule_linear_grad(IrNode *n, IrError *err) {
    for (int i = 0; i < 3; i++)
        if (need(n, i, err)) return -1;
    const IrShape *x = &n->in[0]->shape, *w = &n->in[1]->shape, *dy = &n->in[2]->shape;
    if (w->rank != 2 || x->rank < 1 || x->dims[x->rank - 1] != w->dims[0] ||
        dy->rank != x->rank || dy->dims[dy->rank - 1] != w->dims[1])
        return node_errorf(err, n, "x %s, W %s and dy %s do not agree (x[...,K] W[K,N] "
                           "dy[...,N])", SH(x), SH(w), SH(dy));
    put(n, 0, n->in[0]->dtype, x);
    /* bf16 (mixed precision): dW and dbias are f32 (grad_rules.c g_linear) */
    IrDType pd = n->in[1]->dtype == IR_BF16 ? IR_F32 : n->in[1]->dtype;
    put(n, 1, pd, w);
    IrShape b = ir_shape_make(1, &w->dims[1]);
    put(n, 2, pd, &b);
    return 0;
}

int rule_grad_like_inputs(IrNode *n, IrError *err) {
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && need(n, i, err)) return -1;
    for (int i = 0; i < n->nout; i++) {
        if (!n->out[i]) continue;
        /* LayerNormGrad's dbias is shaped like scale */
        int src = n->op == IR_OP_LAYER_NORM_GRAD && i == 2 ? 1 : i;
        if (src >= n->nin || !n->in[src])
            return node_errorf(err, n, "output %d has no input to take its shape from", i);
        put(n, i, n->in[src]->dtype, &n->in[src]->shape);
    }
    return 0;
}

int rule_grad_to_shape(IrNode *n, IrError *err) {
    if (need(n, 0, err) || need(n, 1, err)) return -1;
    int64_t d[IR_MAX_RANK];
    IrError e2;
    int r = value_read_ints(n->in[1], d, IR_MAX_RANK, &e2);
    if (r < 0) return node_errorf(err, n, "target shape: %s", e2.msg);
    for (int i = 0; i < r; i++)
        if (d[i] < 0) return node_errorf(err, n, "target shape has a negative extent");
    IrShape s = ir_shape_make(r, d);
    put(n, 0, n->in[0]->dtype, &s);
    return 0;
}

/* AdamW: P m v G of one f32 shape; lr, step (i64) and clip_scale scalars;
 * output i is shaped like input i (the op may run in place). */
int rule_adamw(IrNode *n, IrError *err) {
    static const char *const what[7] = {"param", "m", "v", "grad", "lr", "step", "clip_scale"};
    for (int i = 0; i < 6; i++)
        if (need(n, i, err)) return -1;
    if (n->nin > 6 && n->in[6] && need(n, 6, err)) return -1;
    const IrValue *p = n->in[0];
    for (int i = 0; i < n->nin; i++) {
        const IrValue *v = n->in[i];
        if (!v) continue;
        IrDType want = i == 5 ? IR_I64 : IR_F32;
        if (v->dtype != want)
            return node_errorf(err, n, "%s '%s' is %s, expected %s", what[i], v->name,
                               ir_dtype_name(v->dtype), ir_dtype_name(want));
        if (i < 4 && !ir_shape_equal(&v->shape, &p->shape))
            return node_errorf(err, n, "%s '%s' has shape %s, expected the parameter's %s",
                               what[i], v->name, SH(&v->shape), SH(&p->shape));
        if (i >= 4 && ir_shape_numel(&v->shape) != 1)
            return node_errorf(err, n, "%s '%s' has shape %s, expected a scalar", what[i],
                               v->name, SH(&v->shape));
    }
    for (int i = 0; i < 3; i++) put(n, i, IR_F32, &p->shape);
    return 0;
}
