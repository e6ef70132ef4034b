/* Direct kernel calls for the training ops (lower_node.h): each entry
 * mirrors its host-executor adapter (codegen/hostexec_train.c), resolved
 * at compile time.  The vocabulary-parallel loss ops keep the hetrt_node
 * fallback: their vocab_start is TP-rank dependent (runtime/stage/stage_tp.c). */
#include <math.h>
#include <string.h>

#include "hk.h"
#include "hk_train.h"
#include "lower_node.h"

#define IN(i) (c->n->in[i])
#define OUT(i) (c->n->out[i])

static const IrValue *out_opt(LnCtx *c, int i) { return ln_has_out(c, i) ? OUT(i) : NULL; }
static int same_shape(LnCtx *c, int o, int i) {
    return ln_has_out(c, o) && !ir_shape_equal(&OUT(o)->shape, &IN(i)->shape);
}

static int ce_dims(LnCtx *c, int64_t *N, int64_t *V) {
    const IrValue *lg = IN(0), *t = IN(1);
    if (lg->shape.rank < 1) return -1;
    *V = lg->shape.dims[lg->shape.rank - 1];
    *N = *V ? ln_numel(lg) / *V : 0;
    if (ln_numel(t) != *N || (t->dtype != IR_I64 && t->dtype != IR_I32)) return -1;
    return 0;
}

static int lw_cross_entropy(LnCtx *c, int unused) {
    int64_t N, V;
    if (ce_dims(c, &N, &V) || ln_numel(OUT(0)) != 1) return ln_fail(c, "shapes");
    LeCall *k = ln_push(c, "hk_cross_entropy_fwd_f32");
    ln_ptr(c, k, IN(0));
    ln_i32(k, IN(1)->dtype);
    ln_ptr(c, k, IN(1));
    ln_i64(k, N);
    ln_i64(k, V);
    ln_i32(k, (int)ir_attr_int(c->n, "use_ignore", 0));
    ln_i64(k, ir_attr_int(c->n, "ignore_index", -100));
    ln_ptr(c, k, OUT(0));
    ln_null(k);
    ln_null(k);
    ln_null(k);
    return 1;
}

static int lw_cross_entropy_grad(LnCtx *c, int unused) {
    int64_t N, V;
    if (ce_dims(c, &N, &V) || same_shape(c, 0, 0) || ln_numel(IN(2)) != 1)
        return ln_fail(c, "shapes");
    LeCall *k = ln_push(c, "hk_entry_ce_bwd_f32");
    ln_ptr(c, k, IN(0));
    ln_i32(k, IN(1)->dtype);
    ln_ptr(c, k, IN(1));
    ln_i64(k, N);
    ln_i64(k, V);
    ln_i32(k, (int)ir_attr_int(c->n, "use_ignore", 0));
    ln_i64(k, ir_attr_int(c->n, "ignore_index", -100));
    ln_ptr(c, k, IN(2));
    ln_ptr(c, k, OUT(0));
    ln_null(k);
    return 1;
}

static int lw_linear_grad(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *w = IN(1), *dy = IN(2);
    if (w->shape.rank != 2 || x->shape.rank < 1) return ln_fail(c, "ranks");
    int64_t K = w->shape.dims[0], N = w->shape.dims[1];
    if (x->shape.dims[x->shape.rank - 1] != K || dy->shape.dims[dy->shape.rank - 1] != N)
        return ln_fail(c, "shapes");
    int64_t M = K ? ln_numel(x) / K : 0;
    if (ln_numel(dy) != M * N || same_shape(c, 0, 0) || same_shape(c, 1, 1) ||
        (ln_has_out(c, 2) && ln_numel(OUT(2)) != N))
        return ln_fail(c, "shapes");
    if (x->dtype != w->dtype || x->dtype != dy->dtype || (x->dtype != IR_F32 && x->dtype != IR_BF16))
        return ln_fail(c, "dtypes (f32 or bf16 throughout)");
    LeCall *k = ln_push(c, x->dtype == IR_BF16 ? "hk_linear_backward_bf16"
                                               : "hk_linear_backward_f32");
    ln_ptr(c, k, x);
    ln_ptr(c, k, w);
    ln_ptr(c, k, dy);
    ln_i64(k, M);
    ln_i64(k, K);
    ln_i64(k, N);
    for (int i = 0; i < 3; i++) ln_ptr(c, k, out_opt(c, i));
    ln_i32(k, 0);
    ln_null(k);
    return 1;
}

static int lw_norm_grad(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *s = IN(1);
    int r = x->shape.rank;
    int64_t a = ir_attr_int(c->n, "axis", -1);
    if (r < 1 || (a != -1 && a != r - 1)) return ln_fail(c, "axis");
    int64_t n = x->shape.dims[r - 1], outer = n ? ln_numel(x) / n : 0;
    if (ln_numel(s) != n || ln_numel(IN(2)) != ln_numel(x) || same_shape(c, 0, 0) ||
        same_shape(c, 1, 1) || (ln_has_out(c, 2) && ln_numel(OUT(2)) != n))
        return ln_fail(c, "shapes");
    double eps = ir_attr_float(c->n, "epsilon", 1e-5);
    int ln = c->n->op == IR_OP_LAYER_NORM_GRAD;
    LeCall *k = ln_push(c, ln ? "hk_layernorm_backward_f32" : "hk_rmsnorm_backward_f32");
    ln_ptr(c, k, x);
    ln_ptr(c, k, s);
    ln_ptr(c, k, IN(2));
    ln_null(k); /* saved statistics: recomputed */
    if (ln) ln_null(k);
    ln_i64(k, outer);
    ln_i64(k, n);
    ln_f64(k, eps);
    ln_ptr(c, k, out_opt(c, 0));
    ln_ptr(c, k, out_opt(c, 1));
    if (ln) ln_ptr(c, k, out_opt(c, 2));
    ln_i32(k, 0);
    ln_null(k);
    return 1;
}

static int lw_attention_grad(LnCtx *c, int unused) {
    const IrValue *q = IN(0), *kk = IN(1), *v = IN(2);
    int r = q->shape.rank;
    if (r < 2 || kk->shape.rank != r || v->shape.rank != r) return ln_fail(c, "ranks");
    int64_t T = q->shape.dims[r - 2], Dq = q->shape.dims[r - 1];
    int64_t S = kk->shape.dims[r - 2], Dv = v->shape.dims[r - 1];
    int64_t batch = (T * Dq) != 0 ? ln_numel(q) / (T * Dq) : 0;
    if (kk->shape.dims[r - 1] != Dq || v->shape.dims[r - 2] != S ||
        ln_numel(kk) != batch * S * Dq || ln_numel(v) != batch * S * Dv ||
        ln_numel(IN(3)) != batch * T * Dv)
        return ln_fail(c, "shapes");
    for (int i = 0; i < 3; i++)
        if (same_shape(c, i, i)) return ln_fail(c, "output shapes");
    double scale = ir_attr_float(c->n, "scale", Dq > 0 ? 1.0 / sqrt((double)Dq) : 1.0);
    LeCall *k = ln_push(c, "hk_attention_backward_f32");
    for (int i = 0; i < 4; i++) ln_ptr(c, k, IN(i));
    ln_i64(k, batch);
    ln_i64(k, T);
    ln_i64(k, S);
    ln_i64(k, Dq);
    ln_i64(k, Dv);
    ln_i32(k, ir_attr_int(c->n, "causal", 1) != 0);
    ln_f32(k, (float)scale);
    for (int i = 0; i < 3; i++) ln_ptr(c, k, out_opt(c, i));
    ln_null(k);
    return 1;
}

static int lw_unary_grad(LnCtx *c, int unused) {
    HkUnaryGrad fn;
    const char *name = ir_attr_string(c->n, "fn", "");
    if (hk_unary_grad_from_name(name, &fn)) return ln_fail(c, "fn '%s'", name);
    int64_t n = ln_numel(IN(0));
    int hy = ln_has_in(c, 2);
    if (ln_numel(IN(1)) != n || (hy && ln_numel(IN(2)) != n) || same_shape(c, 0, 0))
        return ln_fail(c, "shapes");
    LeCall *k = ln_push(c, "hk_unary_backward_f32");
    ln_i32(k, fn);
    ln_ptr(c, k, IN(0));
    ln_ptr(c, k, hy ? IN(2) : NULL);
    ln_ptr(c, k, IN(1));
    ln_i64(k, n);
    ln_ptr(c, k, OUT(0));
    ln_null(k);
    return 1;
}

static int lw_softmax_grad(LnCtx *c, int unused) {
    const IrValue *y = IN(0);
    int r = y->shape.rank;
    int64_t a = ir_attr_int(c->n, "axis", -1);
    if (a < -r || a >= r) return ln_fail(c, "axis");
    if (!ir_shape_equal(&y->shape, &IN(1)->shape) || same_shape(c, 0, 0))
        return ln_fail(c, "shapes");
    LeCall *k = ln_push(c, "hk_softmax_backward_f32");
    ln_ptr(c, k, y);
    ln_ptr(c, k, IN(1));
    ln_shape(k, y);
    ln_i32(k, a < 0 ? a + r : a);
    ln_i32(k, (int)ir_attr_int(c->n, "log", 0));
    ln_ptr(c, k, OUT(0));
    ln_null(k);
    return 1;
}

static int lw_embedding_grad(LnCtx *c, int unused) {
    const IrValue *t = IN(0), *ids = IN(1);
    if (t->shape.rank != 2) return ln_fail(c, "table rank");
    /* on a TP stage the runtime's entry shifts vocab_start by the TP rank */
    int tpv = c->tp > 1 && ir_node_attr(c->n, "vocab_start");
    int64_t V = t->shape.dims[0], Dm = t->shape.dims[1];
    if (ln_numel(IN(2)) != ln_numel(ids) * Dm || same_shape(c, 0, 0)) return ln_fail(c, "shapes");
    int64_t st = ir_attr_int(c->n, "vocab_start", 0), vs = ir_attr_int(c->n, "vocab_size", V);
    if (st < 0 || st + V > vs) return ln_fail(c, "vocab range");
    LeCall *k = ln_push(c, tpv ? "hetrt_tp_embedding_grad" : "hk_embedding_backward_shard_f32");
    ln_i32(k, ids->dtype);
    ln_ptr(c, k, ids);
    ln_i64(k, ln_numel(ids));
    ln_ptr(c, k, IN(2));
    ln_i64(k, st);
    ln_i64(k, V);
    ln_i64(k, vs);
    ln_i64(k, Dm);
    ln_ptr(c, k, OUT(0));
    if (!tpv) {
        ln_i32(k, 0); /* overwrite: the kernel zeroes the table first */
        ln_null(k);
    }
    return 1;
}

/* the vocab-parallel loss ops (ir/ops.def): logits [N, Vl] of the rank's
 * columns [vocab_start, +Vl) of vocab_size, M [N], stats [N, 2] */
static int vocab_dims(LnCtx *c, int64_t *N, int64_t *Vl, int64_t *st, int64_t *vs) {
    if (ce_dims(c, N, Vl)) return -1;
    *st = ir_attr_int(c->n, "vocab_start", 0);
    *vs = ir_attr_int(c->n, "vocab_size", *Vl);
    if (ln_numel(IN(2)) != *N || (c->n->nin > 3 && ln_numel(IN(3)) != 2 * *N)) return -1;
    return 0;
}

/* stats and the gradient read vocab_start: the runtime's entries shift it
 * by the TP rank (rank 0 on a stage without TP) */
static int lw_vocab_ce_stats(LnCtx *c, int unused) {
    int64_t N, Vl, st, vs;
    if (vocab_dims(c, &N, &Vl, &st, &vs) || ln_numel(OUT(0)) != 2 * N) return ln_fail(c, "shapes");
    LeCall *k = ln_push(c, "hetrt_tp_vocab_ce_stats");
    ln_ptr(c, k, IN(0));
    ln_i32(k, IN(1)->dtype);
    ln_ptr(c, k, IN(1));
    ln_ptr(c, k, IN(2));
    ln_i64(k, N);
    ln_i64(k, Vl);
    ln_i64(k, st);
    ln_i64(k, vs);
    ln_i32(k, (int)ir_attr_int(c->n, "use_ignore", 0));
    ln_i64(k, ir_attr_int(c->n, "ignore_index", -100));
    ln_ptr(c, k, OUT(0));
    return 1;
}

static int lw_vocab_cross_entropy(LnCtx *c, int unused) {
    int64_t N, Vl, st, vs;
    if (vocab_dims(c, &N, &Vl, &st, &vs) || ln_numel(OUT(0)) != 1) return ln_fail(c, "shapes");
    LeCall *k = ln_push(c, "hk_vocab_ce_loss_f32");
    ln_ptr(c, k, IN(3));
    ln_ptr(c, k, IN(2));
    ln_i32(k, IN(1)->dtype);
    ln_ptr(c, k, IN(1));
    ln_i64(k, N);
    ln_i64(k, vs);
    ln_i32(k, (int)ir_attr_int(c->n, "use_ignore", 0));
    ln_i64(k, ir_attr_int(c->n, "ignore_index", -100));
    ln_ptr(c, k, OUT(0));
    ln_null(k);
    return 1;
}

static int lw_vocab_cross_entropy_grad(LnCtx *c, int unused) {
    int64_t N, Vl, st, vs;
    if (vocab_dims(c, &N, &Vl, &st, &vs) || same_shape(c, 0, 0) || ln_numel(IN(4)) != 1)
        return ln_fail(c, "shapes");
    LeCall *k = ln_push(c, "hetrt_tp_vocab_ce_bwd");
    ln_ptr(c, k, IN(0));
    ln_i32(k, IN(1)->dtype);
    ln_ptr(c, k, IN(1));
    ln_ptr(c, k, IN(2));
    ln_ptr(c, k, IN(3));
    ln_i64(k, N);
    ln_i64(k, Vl);
    ln_i64(k, st);
    ln_i64(k, vs);
    ln_i32(k, (int)ir_attr_int(c->n, "use_ignore", 0));
    ln_i64(k, ir_attr_int(c->n, "ignore_index", -100));
    ln_ptr(c, k, IN(4));
    ln_ptr(c, k, OUT(0));
    return 1;
}

static int lw_sum_to_shape(LnCtx *c, int unused) {
    const IrValue *g = IN(0), *y = OUT(0);
    LeCall *k = ln_push(c, "hk_reduce_sum_to_shape_f32");
    ln_ptr(c, k, g);
    ln_shape(k, g);
    ln_shape(k, y);
    ln_ptr(c, k, y);
    ln_null(k);
    return 1;
}

static int lw_slice_grad(LnCtx *c, int unused) {
    const IrValue *dy = IN(0), *x = OUT(0);
    int64_t start[IR_MAX_RANK], step[IR_MAX_RANK], yd[IR_MAX_RANK];
    if (ln_resolve_slice(c, 2, &x->shape, start, step, yd))
        return ln_fail(c, "starts/ends/axes/steps not constants");
    if (dy->shape.rank != x->shape.rank) return ln_fail(c, "dy rank");
    for (int d = 0; d < x->shape.rank; d++)
        if (dy->shape.dims[d] != yd[d]) return ln_fail(c, "dy shape");
    int r = x->shape.rank;
    LeCall *k = ln_push(c, "hk_entry_slice_grad_f32");
    ln_ptr(c, k, dy);
    ln_i32(k, r);
    ln_i64s(k, r, x->shape.dims);
    ln_i64s(k, r, start);
    ln_i64s(k, r, step);
    ln_i64s(k, r, yd);
    ln_ptr(c, k, x);
    return 1;
}

static int lw_gather_grad(LnCtx *c, int unused) {
    const IrValue *dy = IN(0), *idx = IN(2), *x = OUT(0);
    int r = x->shape.rank, a;
    if (ln_norm_axis(ir_attr_int(c->n, "axis", 0), r, &a) || r == 0) return ln_fail(c, "axis");
    const int64_t *xd = x->shape.dims;
    int64_t want = xd[a] ? ln_numel(x) / xd[a] * ln_numel(idx) : 0;
    if (ln_numel(dy) != want) return ln_fail(c, "dy shape");
    LeCall *k = ln_push(c, "hk_gather_backward_f32");
    ln_ptr(c, k, dy);
    ln_shape(k, x);
    ln_i32(k, a);
    ln_i32(k, idx->dtype);
    ln_ptr(c, k, idx);
    ln_i64(k, ln_numel(idx));
    ln_ptr(c, k, x);
    ln_null(k);
    return 1;
}

static int lw_gather_nd_grad(LnCtx *c, int unused) {
    const IrValue *dy = IN(0), *idx = IN(2), *x = OUT(0);
    int r = x->shape.rank;
    int64_t b = ir_attr_int(c->n, "batch_dims", 0);
    int64_t kk = idx->shape.rank ? idx->shape.dims[idx->shape.rank - 1] : 0;
    if (b < 0 || kk < 1 || b + kk > r) return ln_fail(c, "indices do not address dx");
    int64_t want = hk_numel(idx->shape.rank - 1, idx->shape.dims) *
                   hk_numel(r - (int)(b + kk), x->shape.dims + b + kk);
    if (ln_numel(dy) != want) return ln_fail(c, "dy shape");
    LeCall *k = ln_push(c, "hk_gather_nd_backward_f32");
    ln_ptr(c, k, dy);
    ln_shape(k, x);
    ln_i32(k, idx->dtype);
    ln_ptr(c, k, idx);
    ln_shape(k, idx);
    ln_i32(k, b);
    ln_ptr(c, k, x);
    ln_null(k);
    return 1;
}

static int lw_gather_elements_grad(LnCtx *c, int unused) {
    const IrValue *dy = IN(0), *idx = IN(2), *x = OUT(0);
    int r = x->shape.rank, a;
    if (ln_norm_axis(ir_attr_int(c->n, "axis", 0), r, &a)) return ln_fail(c, "axis");
    if (!ir_shape_equal(&dy->shape, &idx->shape) || idx->shape.rank != r)
        return ln_fail(c, "dy must have the indices' shape");
    LeCall *k = ln_push(c, "hk_gather_elements_backward_f32");
    ln_ptr(c, k, dy);
    ln_shape(k, x);
    ln_i32(k, a);
    ln_i32(k, idx->dtype);
    ln_ptr(c, k, idx);
    ln_i64s(k, r, idx->shape.dims);
    ln_ptr(c, k, x);
    ln_null(k);
    return 1;
}

/* The fused optimizer step (passes/optimizer.c): in place when the memory
 * plan gives output i input i's buffer (memplan.c); lr and step are read
 * from the arena's scalars at run time. */
LeCall *ln_adamw_args(LnCtx *c, const char *fn, int f32_only) {
    int64_t n = ln_numel(IN(0));
    for (int i = 0; i < 4; i++)
        if ((i && ln_numel(IN(i)) != n) || (f32_only && IN(i)->dtype != IR_F32))
            return ln_fail(c, "input %d", i), NULL;
    for (int i = 0; i < 3; i++)
        if (!ln_has_out(c, i) || ln_numel(OUT(i)) != n || (f32_only && OUT(i)->dtype != IR_F32))
            return ln_fail(c, "output %d", i), NULL;
    if (IN(4)->dtype != IR_F32 || ln_numel(IN(4)) != 1 || IN(5)->dtype != IR_I64 ||
        ln_numel(IN(5)) != 1)
        return ln_fail(c, "lr / step scalars"), NULL;
    const IrValue *cs = ln_has_in(c, 6) ? IN(6) : NULL;
    if (cs && (cs->dtype != IR_F32 || ln_numel(cs) != 1)) return ln_fail(c, "clip_scale"), NULL;
    LeCall *k = ln_push(c, fn);
    for (int i = 0; i < 4; i++) ln_ptr(c, k, IN(i));
    ln_i64(k, n);
    ln_ptr(c, k, IN(4));
    ln_ptr(c, k, IN(5));
    ln_ptr(c, k, cs);
    ln_f64(k, ir_attr_float(c->n, "beta1", 0.9));
    ln_f64(k, ir_attr_float(c->n, "beta2", 0.999));
    ln_f64(k, ir_attr_float(c->n, "eps", 1e-8));
    ln_f64(k, ir_attr_float(c->n, "weight_decay", 0.0));
    for (int i = 0; i < 3; i++) ln_ptr(c, k, OUT(i));
    return k;
}

static int lw_adamw(LnCtx *c, int unused) {
    (void)unused;
    LeCall *k = ln_adamw_args(c, "hk_entry_adamw_f32", 0);
    if (!k) return 0;
    ln_null(k);
    return 1;
}

LnFn lower_node_train_fn(IrOp op, int *k) {
    *k = 0;
    switch (op) {
    case IR_OP_CROSS_ENTROPY: return lw_cross_entropy;
    case IR_OP_CROSS_ENTROPY_GRAD: return lw_cross_entropy_grad;
    case IR_OP_LINEAR_GRAD: return lw_linear_grad;
    case IR_OP_ADAMW: return lw_adamw;
    case IR_OP_LAYER_NORM_GRAD:
    case IR_OP_RMS_NORM_GRAD: return lw_norm_grad;
    case IR_OP_ATTENTION_GRAD: return lw_attention_grad;
    case IR_OP_UNARY_GRAD: return lw_unary_grad;
    case IR_OP_SOFTMAX_GRAD: return lw_softmax_grad;
    case IR_OP_EMBEDDING_GRAD: return lw_embedding_grad;
    case IR_OP_SUM_TO_SHAPE: return lw_sum_to_shape;
    case IR_OP_SLICE_GRAD: return lw_slice_grad;
    case IR_OP_GATHER_GRAD: return lw_gather_grad;
    case IR_OP_GATHER_ND_GRAD: return lw_gather_nd_grad;
    case IR_OP_GATHER_ELEMENTS_GRAD: return lw_gather_elements_grad;
    case IR_OP_VOCAB_CE_STATS: return lw_vocab_ce_stats;
    case IR_OP_VOCAB_CROSS_ENTROPY: return lw_vocab_cross_entropy;
    case IR_OP_VOCAB_CROSS_ENTROPY_GRAD: return lw_vocab_cross_entropy_grad;
    default: return NULL;
    }
}
