/* Host executor adapters of the training ops: read shapes and attributes
 * from the node, check them against the operands, call hk_train.h.  Output
 * buffers arrive zeroed (hostexec.c), which SliceGrad and EmbeddingGrad rely
 * on: they only write the positions that receive gradient. */
#include "hostexec_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk.h"
#include "hk_bf16.h"
#include "hk_train.h"

#define IN_V(c, i) ((c)->n->in[i])
#define OUT_V(c, i) ((c)->n->out[i])

static int64_t numel(const IrValue *v) { return ir_shape_numel(&v->shape); }
static int kfail(HxCall *c, const char *kerr) { return ir_errorf(c->err, "%s", kerr); }
static float *outp(HxCall *c, int i) {
    return i < c->n->nout && c->n->out[i] ? (float *)c->out[i] : NULL;
}
static int same_shape(HxCall *c, int o, int i) {
    char a[96], b[96];
    if (!ir_shape_equal(&OUT_V(c, o)->shape, &IN_V(c, i)->shape))
        return ir_errorf(c->err, "output '%s' %s must have the shape %s of '%s'",
                         OUT_V(c, o)->name, ir_shape_str(&OUT_V(c, o)->shape, a, sizeof a),
                         ir_shape_str(&IN_V(c, i)->shape, b, sizeof b), IN_V(c, i)->name);
    return 0;
}
static int axis_last(HxCall *c, const IrValue *x) {
    int64_t a = ir_attr_int(c->n, "axis", -1);
    if (a != -1 && a != x->shape.rank - 1)
        return ir_errorf(c->err, "only the last axis is supported (axis=%lld)", (long long)a);
    return 0;
}

/* f32 throughout, or (the bf16 GEMMs of mixed precision: Linear,
 * LinearGrad) bf16 throughout */
int hxt_chk_gemm16(const IrNode *n, int k, char *w, size_t wl) {
    if (n->in[0]->dtype != IR_BF16) return hxt_chk_f32(n, k, w, wl);
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && n->in[i]->dtype != IR_BF16) {
            snprintf(w, wl, "%s: input dtype %s with bf16 operands (all f32 or all bf16)",
                     ir_op_name(n->op), ir_dtype_name(n->in[i]->dtype));
            return 0;
        }
    return 1;
}

int hxt_chk_f32(const IrNode *n, int k, char *w, size_t wl) {
    (void)k;
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && ir_dtype_is_float(n->in[i]->dtype) && n->in[i]->dtype != IR_F32) {
            snprintf(w, wl, "%s: input dtype %s is not supported (f32 only)", ir_op_name(n->op),
                     ir_dtype_name(n->in[i]->dtype));
            return 0;
        }
    return 1;
}

/* ------------------------------------------------------------ loss */
static int ce_dims(HxCall *c, int64_t *N, int64_t *V) {
    const IrValue *lg = IN_V(c, 0), *t = IN_V(c, 1);
    if (lg->shape.rank < 1) return ir_errorf(c->err, "logits must have rank >= 1");
    *V = lg->shape.dims[lg->shape.rank - 1];
    *N = *V ? numel(lg) / *V : 0;
    if (numel(t) != *N)
        return ir_errorf(c->err, "targets '%s' hold %lld ids for %lld rows of logits", t->name,
                         (long long)numel(t), (long long)*N);
    if (t->dtype != IR_I64 && t->dtype != IR_I32)
        return ir_errorf(c->err, "targets '%s' must be i64 or i32", t->name);
    return 0;
}

/* the losses' attrs: ignore rows whose target is ignore_index (torch's
 * default -100) when use_ignore */
static int ce_use_ignore(const HxCall *c) { return (int)ir_attr_int(c->n, "use_ignore", 0); }
static int64_t ce_ignore_index(const HxCall *c) { return ir_attr_int(c->n, "ignore_index", -100); }

int hxt_run_cross_entropy(HxCall *c) {
    char e[HK_ERRLEN];
    int64_t N, V;
    if (ce_dims(c, &N, &V)) return -1;
    if (numel(OUT_V(c, 0)) != 1) return ir_errorf(c->err, "loss must be a scalar");
    if (hk_cross_entropy_fwd_f32(c->in[0], (HkDType)IN_V(c, 1)->dtype, c->in[1], N, V,
                                 ce_use_ignore(c), ce_ignore_index(c), c->out[0], NULL, NULL, e))
        return kfail(c, e);
    return 0;
}

int hxt_run_cross_entropy_grad(HxCall *c) {
    char e[HK_ERRLEN];
    int64_t N, V;
    if (ce_dims(c, &N, &V) || same_shape(c, 0, 0)) return -1;
    if (numel(IN_V(c, 2)) != 1) return ir_errorf(c->err, "dloss must be a scalar");
    if (hk_cross_entropy_bwd_f32(c->in[0], (HkDType)IN_V(c, 1)->dtype, c->in[1], NULL, N, V,
                                 ce_use_ignore(c), ce_ignore_index(c), *(const float *)c->in[2],
                                 c->out[0], e))
        return kfail(c, e);
    return 0;
}

/* the vocab-parallel loss ops (ir/ops.def): logits [N, Vl] of the rank's
 * columns [vocab_start, +Vl) of vocab_size, M [N], stats [N, 2] */
static int vocab_dims(HxCall *c, int64_t *N, int64_t *Vl, int64_t *st, int64_t *vs) {
    if (ce_dims(c, N, Vl)) return -1;
    *st = ir_attr_int(c->n, "vocab_start", 0);
    *vs = ir_attr_int(c->n, "vocab_size", *Vl);
    if (numel(IN_V(c, 2)) != *N) return ir_errorf(c->err, "row max must hold one f32 a row");
    if (c->n->nin > 3 && numel(IN_V(c, 3)) != 2 * *N)
        return ir_errorf(c->err, "stats must be [rows, 2]");
    return 0;
}

int hxt_run_vocab_ce_stats(HxCall *c) {
    char e[HK_ERRLEN];
    int64_t N, Vl, st, vs;
    if (vocab_dims(c, &N, &Vl, &st, &vs)) return -1;
    if (hk_vocab_ce_stats_f32(c->in[0], (HkDType)IN_V(c, 1)->dtype, c->in[1], c->in[2], N, Vl,
                              st, vs, ce_use_ignore(c), ce_ignore_index(c), c->out[0], e))
        return kfail(c, e);
    return 0;
}

int hxt_run_vocab_cross_entropy(HxCall *c) {
    char e[HK_ERRLEN];
    int64_t N, Vl, st, vs;
    if (vocab_dims(c, &N, &Vl, &st, &vs)) return -1;
    if (numel(OUT_V(c, 0)) != 1) return ir_errorf(c->err, "loss must be a scalar");
    if (hk_vocab_ce_loss_f32(c->in[3], c->in[2], (HkDType)IN_V(c, 1)->dtype, c->in[1], N, vs,
                             ce_use_ignore(c), ce_ignore_index(c), c->out[0], e))
        return kfail(c, e);
    return 0;
}

int hxt_run_vocab_cross_entropy_grad(HxCall *c) {
    char e[HK_ERRLEN];
    int64_t N, Vl, st, vs;
    if (vocab_dims(c, &N, &Vl, &st, &vs) || same_shape(c, 0, 0)) return -1;
    if (numel(IN_V(c, 4)) != 1) return ir_errorf(c->err, "dloss must be a scalar");
    if (hk_vocab_ce_bwd_f32(c->in[0], (HkDType)IN_V(c, 1)->dtype, c->in[1], c->in[2], c->in[3],
                            N, Vl, st, vs, ce_use_ignore(c), ce_ignore_index(c),
                            *(const float *)c->in[4], c->out[0], e))
        return kfail(c, e);
    return 0;
}

/* ------------------------------------------------------------ linear */
int hxt_run_linear_grad(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *x = IN_V(c, 0), *w = IN_V(c, 1), *dy = IN_V(c, 2);
    if (w->shape.rank != 2 || x->shape.rank < 1) return ir_errorf(c->err, "W must be [K,N]");
    int64_t K = w->shape.dims[0], N = w->shape.dims[1];
    if (x->shape.dims[x->shape.rank - 1] != K || dy->shape.dims[dy->shape.rank - 1] != N)
        return ir_errorf(c->err, "x, W and dy do not agree");
    int64_t M = K ? numel(x) / K : 0;
    if (numel(dy) != M * N) return ir_errorf(c->err, "dy has the wrong number of rows");
    if (same_shape(c, 0, 0) || same_shape(c, 1, 1)) return -1;
    if (outp(c, 2) && numel(OUT_V(c, 2)) != N) return ir_errorf(c->err, "db must hold N values");
    int rc = x->dtype == IR_BF16
                 ? hk_linear_backward_bf16(c->in[0], c->in[1], c->in[2], M, K, N,
                                           (void *)outp(c, 0), outp(c, 1), outp(c, 2), 0, e)
                 : hk_linear_backward_f32(c->in[0], c->in[1], c->in[2], M, K, N, outp(c, 0),
                                          outp(c, 1), outp(c, 2), 0, e);
    if (rc) return kfail(c, e);
    return 0;
}

/* ------------------------------------------------------------ normalisation */
int hxt_run_norm_grad(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *x = IN_V(c, 0), *s = IN_V(c, 1);
    if (x->shape.rank < 1 || axis_last(c, x)) return -1;
    int64_t n = x->shape.dims[x->shape.rank - 1], outer = n ? numel(x) / n : 0;
    if (numel(s) != n) return ir_errorf(c->err, "scale '%s' must hold %lld values", s->name,
                                        (long long)n);
    if (numel(IN_V(c, 2)) != numel(x) || same_shape(c, 0, 0) || same_shape(c, 1, 1))
        return ir_errorf(c->err, "dy, dx or dscale do not match x and scale");
    if (outp(c, 2) && numel(OUT_V(c, 2)) != n) return ir_errorf(c->err, "dbias size differs");
    double eps = ir_attr_float(c->n, "epsilon", 1e-5);
    int rc = c->n->op == IR_OP_LAYER_NORM_GRAD
                 ? hk_layernorm_backward_f32(c->in[0], c->in[1], c->in[2], NULL, NULL, outer, n,
                                             eps, outp(c, 0), outp(c, 1), outp(c, 2), 0, e)
                 : hk_rmsnorm_backward_f32(c->in[0], c->in[1], c->in[2], NULL, outer, n, eps,
                                           outp(c, 0), outp(c, 1), 0, e);
    return rc ? kfail(c, e) : 0;
}

/* ------------------------------------------------------------ attention */
int hxt_run_attention_grad(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *q = IN_V(c, 0), *k = IN_V(c, 1), *v = IN_V(c, 2);
    int r = q->shape.rank;
    if (r < 2 || k->shape.rank != r || v->shape.rank != r)
        return ir_errorf(c->err, "q, k, v must share a rank >= 2");
    int64_t T = q->shape.dims[r - 2], D = q->shape.dims[r - 1];
    int64_t S = k->shape.dims[r - 2], Dv = v->shape.dims[r - 1];
    int64_t batch = (T * D) != 0 ? numel(q) / (T * D) : 0;
    if (k->shape.dims[r - 1] != D || v->shape.dims[r - 2] != S || numel(k) != batch * S * D ||
        numel(v) != batch * S * Dv || numel(IN_V(c, 3)) != batch * T * Dv)
        return ir_errorf(c->err, "q, k, v and dout do not agree (equal batch dims needed)");
    for (int i = 0; i < 3; i++)
        if (same_shape(c, i, i)) return -1;
    double scale = ir_attr_float(c->n, "scale", D > 0 ? 1.0 / sqrt((double)D) : 1.0);
    if (hk_attention_backward_f32(c->in[0], c->in[1], c->in[2], c->in[3], batch, T, S, D, Dv,
                                  ir_attr_int(c->n, "causal", 1) != 0, (float)scale, outp(c, 0),
                                  outp(c, 1), outp(c, 2), e))
        return kfail(c, e);
    return 0;
}

/* ------------------------------------------------------------ elementwise */
int hxt_run_unary_grad(HxCall *c) {
    char e[HK_ERRLEN];
    HkUnaryGrad fn;
    const char *name = ir_attr_string(c->n, "fn", "");
    if (hk_unary_grad_from_name(name, &fn))
        return ir_errorf(c->err, "unknown unary gradient fn='%s'", name);
    int64_t n = numel(IN_V(c, 0));
    int hy = c->n->nin > 2 && IN_V(c, 2) && c->in[2];
    if (numel(IN_V(c, 1)) != n || (hy && numel(IN_V(c, 2)) != n) || same_shape(c, 0, 0))
        return ir_errorf(c->err, "x, dy (and y) must have the same size");
    if (hk_unary_backward_f32(fn, c->in[0], hy ? c->in[2] : NULL, c->in[1], n, c->out[0], e))
        return kfail(c, e);
    return 0;
}

int hxt_run_softmax_grad(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *y = IN_V(c, 0);
    int r = y->shape.rank;
    int64_t a = ir_attr_int(c->n, "axis", -1);
    if (a < -r || a >= r) return ir_errorf(c->err, "axis %lld out of range", (long long)a);
    if (!ir_shape_equal(&y->shape, &IN_V(c, 1)->shape) || same_shape(c, 0, 0))
        return ir_errorf(c->err, "y, dy and dx must have the same shape");
    if (hk_softmax_backward_f32(c->in[0], c->in[1], r, y->shape.dims, (int)(a < 0 ? a + r : a),
                                (int)ir_attr_int(c->n, "log", 0), c->out[0], e))
        return kfail(c, e);
    return 0;
}

int hxt_run_embedding_grad(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *t = IN_V(c, 0), *ids = IN_V(c, 1);
    if (t->shape.rank != 2) return ir_errorf(c->err, "table must be [V,D]");
    int64_t V = t->shape.dims[0], D = t->shape.dims[1];
    if (numel(IN_V(c, 2)) != numel(ids) * D || same_shape(c, 0, 0))
        return ir_errorf(c->err, "dy must be [..., D] over the ids");
    /* a vocab-parallel shard: rows [vocab_start, +V) of vocab_size */
    int64_t st = ir_attr_int(c->n, "vocab_start", 0), vs = ir_attr_int(c->n, "vocab_size", V);
    if (st < 0 || st + V > vs)
        return ir_errorf(c->err, "vocab_start %lld + %lld rows passes vocab_size %lld",
                         (long long)st, (long long)V, (long long)vs);
    if (hk_embedding_backward_shard_f32((HkDType)ids->dtype, c->in[1], numel(ids), c->in[2], st,
                                        V, vs, D, c->out[0], 0, e))
        return kfail(c, e);
    return 0;
}

/* ------------------------------------------------------------ shapes */
int hxt_run_sum_to_shape(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *g = IN_V(c, 0), *y = OUT_V(c, 0);
    if (hk_reduce_sum_to_shape_f32(c->in[0], g->shape.rank, g->shape.dims, y->shape.rank,
                                   y->shape.dims, c->out[0], e))
        return kfail(c, e);
    return 0;
}

/* Read integer operand i (i64/i32) into out; count or -1. */
static int ints(HxCall *c, int i, int64_t *out) {
    const IrValue *v = IN_V(c, i);
    int64_t n = numel(v);
    if ((v->dtype != IR_I64 && v->dtype != IR_I32) || n > IR_MAX_RANK)
        return ir_errorf(c->err, "operand '%s' must be at most %d i64/i32 values", v->name,
                         IR_MAX_RANK);
    for (int64_t j = 0; j < n; j++)
        out[j] = v->dtype == IR_I64 ? ((const int64_t *)c->in[i])[j]
                                    : ((const int32_t *)c->in[i])[j];
    return (int)n;
}

/* dx = zeros(shape); dx[slice] = dy.  The slice is resolved exactly as
 * hostexec_ops.c's Slice resolves it (ONNX clamping rules). */
int hxt_run_slice_grad(HxCall *c) {
    const IrValue *dy = IN_V(c, 0), *x = OUT_V(c, 0);
    int r = x->shape.rank;
    int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], sp[IR_MAX_RANK];
    int ns = ints(c, 2, st), ne = ints(c, 3, en);
    if (ns < 0 || ne < 0) return -1;
    int has_ax = c->n->nin > 4 && IN_V(c, 4) && c->in[4];
    int has_sp = c->n->nin > 5 && IN_V(c, 5) && c->in[5];
    if (ns != ne || (has_ax && ints(c, 4, ax) != ns) || (has_sp && ints(c, 5, sp) != ns))
        return ir_errorf(c->err, "starts, ends, axes and steps differ in length");
    int64_t start[IR_MAX_RANK], step[IR_MAX_RANK], yd[IR_MAX_RANK];
    for (int d = 0; d < r; d++) start[d] = 0, step[d] = 1, yd[d] = x->shape.dims[d];
    for (int i = 0; i < ns; i++) {
        int64_t a = has_ax ? ax[i] : i;
        if (a < -r || a >= r) return ir_errorf(c->err, "axis out of range");
        if (a < 0) a += r;
        int64_t dim = x->shape.dims[a], s = st[i], e = en[i], k = has_sp ? sp[i] : 1;
        if (k == 0) return ir_errorf(c->err, "step of 0");
        yd[a] = ir_slice_axis(dim, s, e, k, &start[a]);
        step[a] = k;
    }
    if (dy->shape.rank != r) return ir_errorf(c->err, "dy rank differs from the input's");
    for (int d = 0; d < r; d++)
        if (dy->shape.dims[d] != yd[d]) return ir_errorf(c->err, "dy is not the sliced shape");
    int64_t n = numel(dy), idx[IR_MAX_RANK] = {0}, xs[IR_MAX_RANK];
    int64_t acc = 1;
    for (int d = r - 1; d >= 0; d--) xs[d] = acc, acc *= x->shape.dims[d];
    const float *g = c->in[0];
    float *o = c->out[0];
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < r; d++) off += (start[d] + idx[d] * step[d]) * xs[d];
        o[off] += g[i];
        for (int d = r - 1; d >= 0; d--) {
            if (++idx[d] < yd[d]) break;
            idx[d] = 0;
        }
    }
    return 0;
}


/* ------------------------------------------------------------ gathers' adjoints */
/* dy shape indices -> dx of that shape: the forward gather's reads, added back */
int hxt_run_gather_grad(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *dy = IN_V(c, 0), *idx = IN_V(c, 2), *x = OUT_V(c, 0);
    int r = x->shape.rank;
    const int64_t *xd = x->shape.dims;
    int64_t want = 0, a = ir_attr_int(c->n, "axis", 0), b = ir_attr_int(c->n, "batch_dims", 0);
    int rc;
    if (c->n->op != IR_OP_GATHER_ND_GRAD && (a < -r || a >= r))
        return ir_errorf(c->err, "axis %lld is out of range for rank %d", (long long)a, r);
    if (a < 0) a += r;
    switch (c->n->op) {
    case IR_OP_GATHER_GRAD:
        want = numel(x) / (xd[a] ? xd[a] : 1) * numel(idx);
        if (xd[a] == 0) want = 0;
        if (numel(dy) != want) return ir_errorf(c->err, "dy does not match the gathered shape");
        rc = hk_gather_backward_f32(c->in[0], r, xd, (int)a, (HkDType)idx->dtype, c->in[2],
                                    numel(idx), c->out[0], e);
        break;
    case IR_OP_GATHER_ND_GRAD: {
        int64_t k = idx->shape.rank ? idx->shape.dims[idx->shape.rank - 1] : 0;
        if (b < 0 || k < 1 || b + k > r) return ir_errorf(c->err, "indices do not address dx");
        want = hk_numel(idx->shape.rank - 1, idx->shape.dims) *
               hk_numel(r - (int)(b + k), xd + b + k);
        if (numel(dy) != want) return ir_errorf(c->err, "dy does not match the gathered shape");
        rc = hk_gather_nd_backward_f32(c->in[0], r, xd, (HkDType)idx->dtype, c->in[2],
                                       idx->shape.rank, idx->shape.dims,
                                       (int)b, c->out[0], e);
        break;
    }
    default:
        if (!ir_shape_equal(&dy->shape, &idx->shape) || idx->shape.rank != r)
            return ir_errorf(c->err, "dy must have the indices' shape");
        rc = hk_gather_elements_backward_f32(c->in[0], r, xd, (int)a, (HkDType)idx->dtype,
                                             c->in[2], idx->shape.dims, c->out[0], e);
    }
    return rc ? ir_errorf(c->err, "indices '%s': %s", idx->name, e) : 0;
}

/* ------------------------------------------------------------ optimizer */
/* P m v G lr step [clip_scale] -> P' m' v' (ir/ops.def); the entry's inplace
 * bits let P' m' v' be P m v's own buffers (hk_adamw_fused_f32 reads each
 * element before it writes it and never reads an output). */
int hxt_run_adamw(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *p = IN_V(c, 0);
    int64_t n = numel(p);
    for (int i = 1; i < 4; i++)
        if (numel(IN_V(c, i)) != n)
            return ir_errorf(c->err, "'%s' has %lld elements, the parameter '%s' %lld",
                             IN_V(c, i)->name, (long long)numel(IN_V(c, i)), p->name,
                             (long long)n);
    for (int i = 0; i < 3; i++)
        if (!outp(c, i) || numel(OUT_V(c, i)) != n)
            return ir_errorf(c->err, "output %d must hold the parameter's %lld elements", i,
                             (long long)n);
    if (IN_V(c, 5)->dtype != IR_I64 || numel(IN_V(c, 5)) != 1 || numel(IN_V(c, 4)) != 1)
        return ir_errorf(c->err, "lr must be an f32 scalar and step an i64 scalar");
    const float *cs = c->n->nin > 6 && IN_V(c, 6) ? c->in[6] : NULL;
    if (cs && numel(IN_V(c, 6)) != 1) return ir_errorf(c->err, "clip_scale must be a scalar");
    if (hk_adamw_fused_f32(c->in[0], c->in[1], c->in[2], c->in[3], n, *(const float *)c->in[4],
                           *(const int64_t *)c->in[5], cs, ir_attr_float(c->n, "beta1", 0.9),
                           ir_attr_float(c->n, "beta2", 0.999), ir_attr_float(c->n, "eps", 1e-8),
                           ir_attr_float(c->n, "weight_decay", 0.0), outp(c, 0), outp(c, 1),
                           outp(c, 2), e))
        return kfail(c, e);
    return 0;
}
