/* The gradient rule table: one entry per differentiable IrOp, beside the
 * op's name, each emitting the backward IR for one forward node
 * (autodiff.h).  Ops without an entry are not differentiable (comparisons,
 * shape computations, integer ops); autodiff fails naming the node if a
 * parameter's gradient would have to flow through one.
 * tests/train/test_grad_rules.c enumerates this table: a rule without a
 * finite-difference case fails the suite. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"
#include "shape_rules.h"

#define X(i) (n->in[i])
#define Y (n->out[0])
#define DY (gout[0])

static int contrib(AdCtx *c, IrNode *n, int i, IrValue *g, IrError *err) {
    return i < n->nin && X(i) ? ad_contrib(c, X(i), g, err) : 0;
}
static int needs(AdCtx *c, IrNode *n, int i) { return i < n->nin && ad_needs(c, X(i)); }

static void copy_attr(IrNode *dst, const IrNode *src, const char *name) {
    const IrAttr *a = ir_node_attr(src, name);
    if (!a) return;
    switch (a->type) {
    case IR_ATTR_INT: ir_node_set_int(dst, name, a->i); break;
    case IR_ATTR_FLOAT: ir_node_set_float(dst, name, a->f); break;
    case IR_ATTR_STRING: ir_node_set_string(dst, name, a->s); break;
    case IR_ATTR_INTS: ir_node_set_ints(dst, name, a->n, a->ints); break;
    case IR_ATTR_FLOATS: ir_node_set_floats(dst, name, a->n, a->floats); break;
    }
}

/* ------------------------------------------------------------ elementwise */
static int g_add(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    return contrib(c, n, 0, DY, err) || contrib(c, n, 1, DY, err);
}
static int g_sub(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    if (contrib(c, n, 0, DY, err)) return -1;
    if (!needs(c, n, 1)) return 0;
    return contrib(c, n, 1, ad_op1(c, IR_OP_NEG, X(1), &DY->shape, 1, &DY), err);
}
static int g_mul(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    for (int i = 0; i < 2; i++) {
        if (!needs(c, n, i)) continue;
        IrValue *in[2] = {DY, X(1 - i)};
        if (contrib(c, n, i, ad_op1(c, IR_OP_MUL, X(i), &DY->shape, 2, in), err)) return -1;
    }
    return 0;
}
/* y = a / b:  da = dy / b,  db = -(dy * y) / b */
static int g_div(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    if (needs(c, n, 0)) {
        IrValue *in[2] = {DY, X(1)};
        if (contrib(c, n, 0, ad_op1(c, IR_OP_DIV, X(0), &DY->shape, 2, in), err)) return -1;
    }
    if (needs(c, n, 1)) {
        IrValue *m[2] = {DY, Y};
        IrValue *t = ad_op1(c, IR_OP_MUL, X(1), &DY->shape, 2, m);
        IrValue *d[2] = {t, X(1)};
        t = ad_op1(c, IR_OP_DIV, X(1), &DY->shape, 2, d);
        if (contrib(c, n, 1, ad_op1(c, IR_OP_NEG, X(1), &DY->shape, 1, &t), err)) return -1;
    }
    return 0;
}
/* y = a ^ b with a constant scalar exponent b: da = dy * b * a^(b-1) */
static int g_pow(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    double b;
    if (needs(c, n, 1) || ir_shape_numel(&X(1)->shape) != 1 || value_read_double(X(1), 0, &b))
        return ir_errorf(err, "only a constant scalar exponent is differentiable");
    IrGraph *g = ad_graph(c);
    IrValue *bm1 = ir_const_scalar_f32(g, "bwd/pow_exp", (float)(b - 1));
    IrValue *bv = ir_const_scalar_f32(g, "bwd/pow_scale", (float)b);
    IrValue *p[2] = {X(0), bm1};
    IrValue *t = ad_op1(c, IR_OP_POW, X(0), &X(0)->shape, 2, p);
    IrValue *m[2] = {t, bv};
    t = ad_op1(c, IR_OP_MUL, X(0), &X(0)->shape, 2, m);
    IrValue *d[2] = {DY, t};
    return contrib(c, n, 0, ad_op1(c, IR_OP_MUL, X(0), &DY->shape, 2, d), err);
}
static int g_neg(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    return contrib(c, n, 0, ad_op1(c, IR_OP_NEG, X(0), &DY->shape, 1, &DY), err);
}
/* dx = UnaryGrad{fn}(x, dy, y): the host kernel's HkUnaryGrad table */
static int g_unary(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    static const char *const fn[IR_OP_COUNT] = {
        [IR_OP_SQRT] = "sqrt", [IR_OP_EXP] = "exp", [IR_OP_LOG] = "log",
        [IR_OP_TANH] = "tanh", [IR_OP_SIGMOID] = "sigmoid", [IR_OP_ERF] = "erf",
        [IR_OP_RELU] = "relu", [IR_OP_RECIPROCAL] = "reciprocal", [IR_OP_GELU] = "gelu",
        [IR_OP_SILU] = "silu",
    };
    const char *f = fn[n->op];
    if (n->op == IR_OP_GELU && !strcmp(ir_attr_string(n, "approximate", "none"), "tanh"))
        f = "gelu_tanh";
    /* the derivatives written with y (kernels/host/train_elementwise.c
     * unary_rules .reads_y); the others get x only, so y is not kept alive
     * for them from forward to backward (a bf16 Linear reading y keeps its
     * bf16 copy, not y) */
    static const unsigned char reads_y[IR_OP_COUNT] = {
        [IR_OP_EXP] = 1, [IR_OP_SQRT] = 1, [IR_OP_TANH] = 1, [IR_OP_RECIPROCAL] = 1,
    };
    IrValue *in[3] = {X(0), DY, Y};
    IrValue *o = ad_value(c, X(0), X(0)->dtype, &X(0)->shape);
    IrNode *b = ad_emit(c, IR_OP_UNARY_GRAD, reads_y[n->op] ? 3 : 2, in, 1, &o);
    ir_node_set_string(b, "fn", f);
    return contrib(c, n, 0, o, err);
}
/* sin' = cos, cos' = -sin (the dynamo exports' rotary tables: inv_freq is
 * a float initializer, so a parameter until marked frozen) */
static int g_sin_cos(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    IrValue *t = ad_op1(c, n->op == IR_OP_SIN ? IR_OP_COS : IR_OP_SIN, X(0), &X(0)->shape, 1,
                        &X(0));
    IrValue *m[2] = {DY, t};
    IrValue *g = ad_op1(c, IR_OP_MUL, X(0), &DY->shape, 2, m);
    if (n->op == IR_OP_COS) g = ad_op1(c, IR_OP_NEG, X(0), &DY->shape, 1, &g);
    return contrib(c, n, 0, g, err);
}
static int g_identity(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    return contrib(c, n, 0, DY, err);
}
/* TpAllReduce sum: identity (Megatron's g).  A max is only ever the
 * vocab-parallel loss's shift, which its rule does not differentiate */
static int g_tp_all_reduce(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    return contrib(c, n, 0, DY, err); /* op "sum": ck_tp_all_reduce */
}
/* TpCopy replicates x over the TP ranks, each rank using it for its shard:
 * dx is the sum of the ranks' partial gradients (Megatron's f) */
static int g_tp_copy(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    IrValue *o = ad_op1(c, IR_OP_TP_ALL_REDUCE, X(0), &DY->shape, 1, (IrValue *const *)&DY);
    ir_node_set_int(o->producer, "tp", ir_attr_int(n, "tp", 1));
    return contrib(c, n, 0, o, err);
}
static int g_cast(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    if (X(0)->dtype == DY->dtype) return contrib(c, n, 0, DY, err);
    IrValue *o = ad_value(c, X(0), X(0)->dtype, &X(0)->shape);
    IrNode *b = ad_emit(c, IR_OP_CAST, 1, &DY, 1, &o);
    ir_node_set_int(b, "to", X(0)->dtype);
    return contrib(c, n, 0, o, err);
}
/* where(cond, a, b): the gradient goes to the branch each element took */
static int g_where(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    IrShape s0 = {0};
    IrValue *zero = ir_const_new(ad_graph(c), "bwd/zero", DY->dtype, &s0, NULL);
    for (int i = 1; i <= 2; i++) {
        if (!needs(c, n, i)) continue;
        IrValue *in[3] = {X(0), i == 1 ? DY : zero, i == 1 ? zero : DY};
        IrValue *o = ad_value(c, X(i), DY->dtype, &DY->shape);
        ad_emit(c, IR_OP_WHERE, 3, in, 1, &o);
        if (contrib(c, n, i, o, err)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ linear algebra */
static IrValue *swap_last2(AdCtx *c, IrValue *v) {
    int r = v->shape.rank;
    int64_t perm[IR_MAX_RANK];
    IrShape s = v->shape;
    for (int i = 0; i < r; i++) perm[i] = i;
    perm[r - 2] = r - 1, perm[r - 1] = r - 2;
    s.dims[r - 2] = v->shape.dims[r - 1], s.dims[r - 1] = v->shape.dims[r - 2];
    IrValue *o = ad_value(c, v, v->dtype, &s);
    IrNode *b = ad_emit(c, IR_OP_TRANSPOSE, 1, &v, 1, &o);
    ir_node_set_ints(b, "perm", r, perm);
    return o;
}
/* numpy matmul (rank >= 2): dA = dy B^T, dB = A^T dy, each summed over the
 * batch dims it was broadcast along */
static int g_matmul(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    int r = DY->shape.rank; /* both operands of rank >= 2: ck_matmul */
    if (needs(c, n, 0)) {
        IrShape s = DY->shape;
        s.dims[r - 1] = X(0)->shape.dims[X(0)->shape.rank - 1];
        IrValue *in[2] = {DY, swap_last2(c, X(1))};
        if (contrib(c, n, 0, ad_op1(c, IR_OP_MATMUL, X(0), &s, 2, in), err)) return -1;
    }
    if (needs(c, n, 1)) {
        IrShape s = DY->shape;
        s.dims[r - 2] = X(1)->shape.dims[X(1)->shape.rank - 2];
        IrValue *in[2] = {swap_last2(c, X(0)), DY};
        if (contrib(c, n, 1, ad_op1(c, IR_OP_MATMUL, X(1), &s, 2, in), err)) return -1;
    }
    return 0;
}
/* The f32 value a bf16 operand was cast from (passes/mixed_precision.c),
 * or NULL. */
static IrValue *f32_source(IrValue *v) {
    IrNode *p = v->producer;
    return v->dtype == IR_BF16 && p && p->op == IR_OP_CAST && p->in[0] &&
                   p->in[0]->dtype == IR_F32
               ? p->in[0]
               : NULL;
}
/* A bf16 Linear's weight and bias gradients come out of LinearGrad in f32
 * (summed in f32, never rounded to bf16: Megatron's fp32 gradient
 * accumulation; torch.autocast rounds its mm output) and go straight to the
 * f32 value the operand was cast from, so the Cast node gets no gradient;
 * a bf16 operand with no such source gets them cast back to bf16. */
static int g_linear(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    int hb = n->nin > 2 && X(2), b16 = X(0)->dtype == IR_BF16;
    IrValue *in[3] = {X(0), X(1), DY}, *out[3] = {NULL, NULL, NULL}, *to[3] = {NULL, NULL, NULL};
    for (int i = 0; i < (hb ? 3 : 2); i++) {
        to[i] = i > 0 && b16 ? f32_source(X(i)) : NULL;
        out[i] = ad_value(c, to[i] ? to[i] : X(i), i > 0 && b16 ? IR_F32 : X(i)->dtype,
                          &X(i)->shape);
    }
    ad_emit(c, IR_OP_LINEAR_GRAD, 3, in, hb ? 3 : 2, out);
    /* dx (bf16) widened to f32 here and summed into the f32 value x16 was
     * cast from, as the Cast's own rule would: a bf16 copy shared by
     * several Linears (passes/mixed_precision.c) then sums its gradients in
     * f32, in the order a copy per Linear did, never in bf16 */
    IrValue *x32 = b16 ? f32_source(X(0)) : NULL;
    if (x32 && ad_needs(c, x32)) {
        IrValue *o = ad_value(c, x32, IR_F32, &x32->shape);
        IrNode *k = ad_emit(c, IR_OP_CAST, 1, &out[0], 1, &o);
        ir_node_set_int(k, "to", IR_F32);
        if (ad_contrib(c, x32, o, err)) return -1;
    } else if (contrib(c, n, 0, out[0], err))
        return -1;
    for (int i = 1; i < (hb ? 3 : 2); i++) {
        if (to[i]) {
            if (ad_contrib(c, to[i], out[i], err)) return -1;
            continue;
        }
        IrValue *g = out[i];
        if (g->dtype != X(i)->dtype) {
            IrValue *o = ad_value(c, X(i), X(i)->dtype, &X(i)->shape);
            IrNode *k = ad_emit(c, IR_OP_CAST, 1, &g, 1, &o);
            ir_node_set_int(k, "to", X(i)->dtype);
            g = o;
        }
        if (contrib(c, n, i, g, err)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ reductions */
static int g_reduce(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    const IrShape *xs = &X(0)->shape;
    int64_t axes[IR_MAX_RANK];
    int na = 0;
    if (n->nin > 1 && X(1)) {
        IrError e2;
        if ((na = value_read_ints(X(1), axes, IR_MAX_RANK, &e2)) < 0)
            return ir_errorf(err, "axes: %s", e2.msg);
    }
    int red[IR_MAX_RANK] = {0};
    if (na == 0 && ir_attr_int(n, "noop_with_empty_axes", 0)) return contrib(c, n, 0, DY, err);
    for (int i = 0; i < xs->rank; i++) red[i] = na == 0;
    for (int i = 0; i < na; i++) red[axes[i] < 0 ? axes[i] + xs->rank : axes[i]] = 1;
    IrShape keep = *xs;
    int64_t cnt = 1;
    for (int i = 0; i < xs->rank; i++)
        if (red[i]) cnt *= xs->dims[i], keep.dims[i] = 1;
    IrValue *r[2] = {DY, ad_shape_const(c, &keep)};
    IrValue *g = ad_op1(c, IR_OP_RESHAPE, X(0), &keep, 2, r);
    IrValue *e[2] = {g, ad_shape_const(c, xs)};
    g = ad_op1(c, IR_OP_EXPAND, X(0), xs, 2, e);
    if (n->op == IR_OP_REDUCE_MEAN) {
        IrValue *m[2] = {g, ir_const_scalar_f32(ad_graph(c), "bwd/inv_count",
                                                (float)(1.0 / (double)(cnt ? cnt : 1)))};
        g = ad_op1(c, IR_OP_MUL, X(0), xs, 2, m);
    }
    return contrib(c, n, 0, g, err);
}
static int g_softmax(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    IrValue *in[2] = {Y, DY};
    IrValue *o = ad_value(c, X(0), X(0)->dtype, &X(0)->shape);
    IrNode *b = ad_emit(c, IR_OP_SOFTMAX_GRAD, 2, in, 1, &o);
    ir_node_set_int(b, "axis", ir_attr_int(n, "axis", -1));
    ir_node_set_int(b, "log", n->op == IR_OP_LOG_SOFTMAX);
    return contrib(c, n, 0, o, err);
}
static int g_norm(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    int ln = n->op == IR_OP_LAYER_NORM, hb = ln && n->nin > 2 && X(2);
    IrValue *in[3] = {X(0), X(1), DY};
    IrValue *out[3] = {ad_value(c, X(0), X(0)->dtype, &X(0)->shape),
                       ad_value(c, X(1), X(1)->dtype, &X(1)->shape),
                       hb ? ad_value(c, X(2), X(2)->dtype, &X(1)->shape) : NULL};
    IrNode *b = ad_emit(c, ln ? IR_OP_LAYER_NORM_GRAD : IR_OP_RMS_NORM_GRAD, 3, in,
                        hb ? 3 : 2, out);
    copy_attr(b, n, "axis");
    copy_attr(b, n, "epsilon");
    if (hb && !ir_shape_equal(&X(2)->shape, &X(1)->shape))
        return ir_errorf(err, "LayerNorm bias and scale shapes differ");
    return contrib(c, n, 0, out[0], err) || contrib(c, n, 1, out[1], err) ||
           (hb && contrib(c, n, 2, out[2], err));
}
static int g_attention(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    IrValue *in[4] = {X(0), X(1), X(2), DY};
    IrValue *out[3];
    for (int i = 0; i < 3; i++) out[i] = ad_value(c, X(i), X(i)->dtype, &X(i)->shape);
    IrNode *b = ad_emit(c, IR_OP_ATTENTION_GRAD, 4, in, 3, out);
    copy_attr(b, n, "causal");
    copy_attr(b, n, "scale");
    for (int i = 0; i < 3; i++)
        if (contrib(c, n, i, out[i], err)) return -1;
    return 0;
}
static int emb_grad(AdCtx *c, IrNode *n, IrValue *table, IrValue *ids, IrValue *dy,
                    IrError *err, int slot) {
    IrValue *in[3] = {table, ids, dy};
    IrValue *o = ad_value(c, table, table->dtype, &table->shape);
    IrNode *b = ad_emit(c, IR_OP_EMBEDDING_GRAD, 3, in, 1, &o);
    copy_attr(b, n, "vocab_start"); /* a vocab-parallel shard's rows (tp_shard_vocab.c) */
    copy_attr(b, n, "vocab_size");
    return contrib(c, n, slot, o, err);
}
static int g_embedding(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    return emb_grad(c, n, X(0), X(1), DY, err, 0);
}
/* The gathers: dx = their adjoint op (zeros of x's shape with dy added back
 * where the forward read; repeated indices accumulate). */
static int gather_adjoint(AdCtx *c, IrNode *n, IrOp op, const char *attr, IrValue *dy,
                          IrError *err) {
    IrValue *in[3] = {dy, ad_shape_const(c, &X(0)->shape), X(1)};
    IrValue *o = ad_op1(c, op, X(0), &X(0)->shape, 3, in);
    copy_attr(o->producer, n, attr);
    return contrib(c, n, 0, o, err);
}
/* rows of a 2-D table (an embedding the canonicalizer did not claim): the
 * EmbeddingGrad kernel; any other axis or rank (Falcon's and BLOOM's fused
 * QKV split by index, say): GatherGrad */
static int g_gather(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    int64_t a = ir_attr_int(n, "axis", 0);
    if (X(0)->shape.rank == 2 && (a == 0 || a == -2) && X(0)->dtype == IR_F32)
        return emb_grad(c, n, X(0), X(1), DY, err, 0);
    return gather_adjoint(c, n, IR_OP_GATHER_GRAD, "axis", DY, err);
}
static int g_gather_nd(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    return gather_adjoint(c, n, IR_OP_GATHER_ND_GRAD, "batch_dims", DY, err);
}
static int g_gather_elements(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    return gather_adjoint(c, n, IR_OP_GATHER_ELEMENTS_GRAD, "axis", DY, err);
}
/* ScatterND: with reduction "none" the overwritten slices of data get no
 * gradient (dy scattered over by zeros) and updates get dy's slices
 * (GatherND); with "add" data gets all of dy.  With repeated indices under
 * "none" (undefined in ONNX) every duplicate gets the slice's gradient. */
static int g_scatter_nd(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    int add = !strcmp(ir_attr_string(n, "reduction", "none"), "add"); /* or none: ck_ */
    if (needs(c, n, 0)) {
        IrValue *g = DY;
        if (!add) {
            IrValue *in[3] = {DY, X(1), ad_zeros(c, X(2))};
            g = ad_op1(c, IR_OP_SCATTER_ND, X(0), &X(0)->shape, 3, in);
        }
        if (contrib(c, n, 0, g, err)) return -1;
    }
    if (!needs(c, n, 2)) return 0;
    IrValue *in[2] = {DY, X(1)};
    return contrib(c, n, 2, ad_op1(c, IR_OP_GATHER_ND, X(2), &X(2)->shape, 2, in), err);
}
/* Tile: dy viewed as [r0, d0, r1, d1, ...] (axes repeated once stay [d]),
 * summed over the repeat axes */
static int g_tile(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    const IrShape *xs = &X(0)->shape;
    int64_t rep[IR_MAX_RANK], axes[IR_MAX_RANK];
    IrError e2;
    int r = value_read_ints(X(1), rep, IR_MAX_RANK, &e2), na = 0;
    if (r < 0) return ir_errorf(err, "repeats: %s", e2.msg);
    if (r != xs->rank) return ir_errorf(err, "repeats has %d entries for rank %d", r, xs->rank);
    IrShape split = ir_shape_make(0, NULL);
    for (int i = 0; i < r; i++) {
        if (split.rank + (rep[i] != 1) + 1 > IR_MAX_RANK)
            return ir_errorf(err, "the gradient of Tile of %s needs a rank above %d", X(0)->name,
                             IR_MAX_RANK);
        if (rep[i] != 1) axes[na++] = split.rank, split.dims[split.rank++] = rep[i];
        split.dims[split.rank++] = xs->dims[i];
    }
    if (na == 0) return contrib(c, n, 0, DY, err);
    IrValue *rs[2] = {DY, ad_shape_const(c, &split)};
    IrValue *g = ad_op1(c, IR_OP_RESHAPE, X(0), &split, 2, rs);
    IrValue *sm[2] = {g, ir_const_i64s(ad_graph(c), "bwd/tile_axes", na, axes)};
    IrValue *o = ad_op1(c, IR_OP_REDUCE_SUM, X(0), xs, 2, sm);
    ir_node_set_int(o->producer, "keepdims", 0);
    return contrib(c, n, 0, o, err);
}
static int g_cross_entropy(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    IrValue *in[3] = {X(0), X(1), DY};
    IrValue *o = ad_value(c, X(0), X(0)->dtype, &X(0)->shape);
    IrNode *b = ad_emit(c, IR_OP_CROSS_ENTROPY_GRAD, 3, in, 1, &o);
    copy_attr(b, n, "use_ignore");
    copy_attr(b, n, "ignore_index");
    return contrib(c, n, 0, o, err);
}
/* the vocab-parallel loss (ir/ops.def): the rank's slice of softmax -
 * onehot from the all-reduced stats; the row max and the stats get no
 * gradient (the loss does not depend on the shift M, and the logits'
 * gradient already accounts for the stats' dependence on them) */
static int g_vocab_cross_entropy(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    IrValue *in[5] = {X(0), X(1), X(2), X(3), DY};
    IrValue *o = ad_value(c, X(0), X(0)->dtype, &X(0)->shape);
    IrNode *b = ad_emit(c, IR_OP_VOCAB_CROSS_ENTROPY_GRAD, 5, in, 1, &o);
    const char *attrs[] = {"vocab_start", "vocab_size", "use_ignore", "ignore_index"};
    for (int i = 0; i < 4; i++) copy_attr(b, n, attrs[i]);
    return contrib(c, n, 0, o, err);
}

/* ------------------------------------------------------------ data movement */
static int g_reshape(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    IrValue *in[2] = {DY, ad_shape_const(c, &X(0)->shape)};
    return contrib(c, n, 0, ad_op1(c, IR_OP_RESHAPE, X(0), &X(0)->shape, 2, in), err);
}
static int g_transpose(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    int r = X(0)->shape.rank;
    int64_t perm[IR_MAX_RANK], inv[IR_MAX_RANK];
    const int64_t *p;
    int np = ir_attr_ints(n, "perm", &p);
    for (int i = 0; i < r; i++) perm[i] = np ? p[i] : r - 1 - i;
    if (np && np != r) return ir_errorf(err, "perm has %d entries for rank %d", np, r);
    for (int i = 0; i < r; i++) {
        if (perm[i] < 0 || perm[i] >= r) return ir_errorf(err, "perm entry out of range");
        inv[perm[i]] = i;
    }
    IrValue *o = ad_value(c, X(0), X(0)->dtype, &X(0)->shape);
    IrNode *b = ad_emit(c, IR_OP_TRANSPOSE, 1, &DY, 1, &o);
    ir_node_set_ints(b, "perm", r, inv);
    return contrib(c, n, 0, o, err);
}
static int g_expand(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    return contrib(c, n, 0, DY, err); /* summed back by ad_contrib */
}
static int g_concat(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    int r = Y->shape.rank;
    int64_t a = ir_attr_int(n, "axis", 0), sizes[256];
    if (a < 0) a += r;
    if (n->nin > 256 || a < 0 || a >= r) return ir_errorf(err, "bad Concat axis or arity");
    IrValue **outs = ir_xcalloc((size_t)n->nin, sizeof *outs);
    for (int i = 0; i < n->nin; i++) {
        sizes[i] = X(i)->shape.dims[a];
        outs[i] = ad_value(c, X(i), X(i)->dtype, &X(i)->shape);
    }
    IrValue *in[2] = {DY, ir_const_i64s(ad_graph(c), "bwd/split", n->nin, sizes)};
    IrNode *b = ad_emit(c, IR_OP_SPLIT, 2, in, n->nin, outs);
    ir_node_set_int(b, "axis", a);
    int rc = 0;
    for (int i = 0; i < n->nin && !rc; i++) rc = contrib(c, n, i, outs[i], err);
    free(outs);
    return rc;
}
static int g_split(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    IrValue **in = ir_xcalloc((size_t)n->nout, sizeof *in);
    for (int j = 0; j < n->nout; j++) in[j] = gout[j] ? gout[j] : ad_zeros(c, n->out[j]);
    IrValue *o = ad_value(c, X(0), X(0)->dtype, &X(0)->shape);
    IrNode *b = ad_emit(c, IR_OP_CONCAT, n->nout, in, 1, &o);
    int64_t a = ir_attr_int(n, "axis", 0);
    ir_node_set_int(b, "axis", a < 0 ? a + X(0)->shape.rank : a);
    free(in);
    return contrib(c, n, 0, o, err);
}
static int g_slice(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err) {
    IrValue *in[6] = {DY, ad_shape_const(c, &X(0)->shape), X(1), X(2),
                      n->nin > 3 ? X(3) : NULL, n->nin > 4 ? X(4) : NULL};
    int nin = n->nin > 4 && X(4) ? 6 : n->nin > 3 && X(3) ? 5 : 4;
    return contrib(c, n, 0, ad_op1(c, IR_OP_SLICE_GRAD, X(0), &X(0)->shape, nin, in), err);
}

/* ------------------------------------------------------------ rule checks */
static int ck_pow(const IrNode *n, char *w, size_t wl) {
    double b;
    if (n->nin > 1 && n->in[1] && ir_shape_numel(&n->in[1]->shape) == 1 &&
        n->in[1]->kind == IR_VK_CONST && !value_read_double(n->in[1], 0, &b))
        return 1;
    snprintf(w, wl, "only a constant scalar exponent is differentiable");
    return 0;
}
static int ck_matmul(const IrNode *n, char *w, size_t wl) {
    if (n->in[0]->shape.rank >= 2 && n->in[1]->shape.rank >= 2) return 1;
    snprintf(w, wl, "MatMul gradient needs operands of rank >= 2");
    return 0;
}
static int ck_scatter_nd(const IrNode *n, char *w, size_t wl) {
    const char *red = ir_attr_string(n, "reduction", "none");
    if (!strcmp(red, "none") || !strcmp(red, "add")) return 1;
    snprintf(w, wl, "ScatterND with reduction '%s' is not differentiable (none and add are)",
             red);
    return 0;
}
static int ck_tp_all_reduce(const IrNode *n, char *w, size_t wl) {
    const char *op = ir_attr_string(n, "op", "sum");
    if (!strcmp(op, "sum")) return 1;
    snprintf(w, wl, "TpAllReduce op '%s' has no gradient (only 'sum' does)", op);
    return 0;
}

/* ------------------------------------------------------------ the table */
#define R(fn, mask) {fn, mask, NULL}
#define RC(fn, mask, check) {fn, mask, check}
static const GradRule rules[IR_OP_COUNT] = {
    [IR_OP_ADD] = R(g_add, 3), [IR_OP_SUB] = R(g_sub, 3), [IR_OP_MUL] = R(g_mul, 3),
    [IR_OP_DIV] = R(g_div, 3), [IR_OP_POW] = RC(g_pow, 1, ck_pow), [IR_OP_WHERE] = R(g_where, 6),
    [IR_OP_NEG] = R(g_neg, 1), [IR_OP_SQRT] = R(g_unary, 1), [IR_OP_EXP] = R(g_unary, 1),
    [IR_OP_LOG] = R(g_unary, 1), [IR_OP_TANH] = R(g_unary, 1),
    [IR_OP_SIN] = R(g_sin_cos, 1), [IR_OP_COS] = R(g_sin_cos, 1),
    [IR_OP_SIGMOID] = R(g_unary, 1), [IR_OP_ERF] = R(g_unary, 1), [IR_OP_RELU] = R(g_unary, 1),
    [IR_OP_RECIPROCAL] = R(g_unary, 1), [IR_OP_CAST] = R(g_cast, 1),
    [IR_OP_IDENTITY] = R(g_identity, 1), [IR_OP_DROPOUT] = R(g_identity, 1),
    /* TpAllReduce's output is replicated and each rank's loss replica seeds
     * it: the gradient passes through (Megatron's g) */
    [IR_OP_TP_ALL_REDUCE] = RC(g_tp_all_reduce, 1, ck_tp_all_reduce),
    [IR_OP_TP_COPY] = R(g_tp_copy, 1),
    [IR_OP_MATMUL] = RC(g_matmul, 3, ck_matmul), [IR_OP_REDUCE_MEAN] = R(g_reduce, 1),
    [IR_OP_REDUCE_SUM] = R(g_reduce, 1), [IR_OP_SOFTMAX] = R(g_softmax, 1),
    [IR_OP_LOG_SOFTMAX] = R(g_softmax, 1), [IR_OP_RESHAPE] = R(g_reshape, 1),
    [IR_OP_TRANSPOSE] = R(g_transpose, 1), [IR_OP_SPLIT] = R(g_split, 1),
    [IR_OP_CONCAT] = R(g_concat, ~0u), [IR_OP_SLICE] = R(g_slice, 1),
    [IR_OP_SQUEEZE] = R(g_reshape, 1), [IR_OP_UNSQUEEZE] = R(g_reshape, 1),
    [IR_OP_EXPAND] = R(g_expand, 1), [IR_OP_FLATTEN] = R(g_reshape, 1),
    [IR_OP_GATHER] = R(g_gather, 1), [IR_OP_GATHER_ND] = R(g_gather_nd, 1),
    [IR_OP_GATHER_ELEMENTS] = R(g_gather_elements, 1), [IR_OP_TILE] = R(g_tile, 1),
    [IR_OP_SCATTER_ND] = RC(g_scatter_nd, 5, ck_scatter_nd), [IR_OP_LINEAR] = R(g_linear, 7),
    [IR_OP_LAYER_NORM] = R(g_norm, 7), [IR_OP_RMS_NORM] = R(g_norm, 3),
    [IR_OP_GELU] = R(g_unary, 1), [IR_OP_SILU] = R(g_unary, 1),
    [IR_OP_ATTENTION] = R(g_attention, 7), [IR_OP_EMBEDDING] = R(g_embedding, 1),
    [IR_OP_CROSS_ENTROPY] = R(g_cross_entropy, 1),
    [IR_OP_VOCAB_CROSS_ENTROPY] = R(g_vocab_cross_entropy, 1),
};

const GradRule *grad_rule(IrOp op) {
    return (int)op >= 0 && op < IR_OP_COUNT && rules[op].fn ? &rules[op] : NULL;
}

int grad_node_ok(const IrNode *n, char *why, size_t wl) {
    const GradRule *r = grad_rule(n->op);
    if (!r) {
        snprintf(why, wl, "no gradient rule for this op");
        return 0;
    }
    return r->check ? r->check(n, why, wl) : 1;
}
