/* The host executor's op table: one adapter per IrOp that reads shapes,
 * attributes and small operand tensors (axes, starts, ...) from the node and
 * calls a kernel of kernels/host.  Semantics are those of the newest ONNX
 * opset (ir/ops.def).  Output shapes come from shape-infer; every adapter
 * checks them against its operands before writing, so a wrong shape is an
 * error, never an out-of-bounds write. */
#include "hostexec_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk.h"
#include "hk_bf16.h"
#include "hk_train.h"
#include "hk_ws.h"
#include "hostexec_train.h"

/* ---------------------------------------------------------------- helpers */
#define IN_V(c, i) ((c)->n->in[i])
#define OUT_V(c, i) ((c)->n->out[i])
#define SHP(v) (v)->shape.rank, (v)->shape.dims

static int fail(HxCall *c, const char *fmt, const char *detail) {
    return ir_errorf(c->err, fmt, detail);
}
static int kfail(HxCall *c, const char *kerr) { return ir_errorf(c->err, "%s", kerr); }

static int64_t numel(const IrValue *v) { return ir_shape_numel(&v->shape); }
static size_t esz(const IrValue *v) { return ir_dtype_size(v->dtype); }
static int has_in(const HxCall *c, int i) { return i < c->n->nin && c->n->in[i] && c->in[i]; }

static int same_numel(HxCall *c, int i, int o) {
    if (numel(IN_V(c, i)) != numel(OUT_V(c, o))) {
        char a[64], b[64];
        return ir_errorf(c->err, "output '%s' %s does not hold the %s elements of input '%s'",
                         OUT_V(c, o)->name, ir_shape_str(&OUT_V(c, o)->shape, b, sizeof b),
                         ir_shape_str(&IN_V(c, i)->shape, a, sizeof a), IN_V(c, i)->name);
    }
    return 0;
}

/* Integer operand (axes, shape, starts, ...) as int64s; -1 on error. */
static int read_ints(HxCall *c, int i, int64_t *out, int max) {
    const IrValue *v = IN_V(c, i);
    int64_t n = numel(v);
    if (v->dtype != IR_I64 && v->dtype != IR_I32)
        return ir_errorf(c->err, "operand '%s' must be int64 or int32, not %s", v->name,
                         ir_dtype_name(v->dtype));
    if (n > max) return ir_errorf(c->err, "operand '%s' has too many elements", v->name);
    for (int64_t j = 0; j < n; j++)
        out[j] = v->dtype == IR_I64 ? ((const int64_t *)c->in[i])[j]
                                    : ((const int32_t *)c->in[i])[j];
    return (int)n;
}

static int norm_axis(HxCall *c, int64_t a, int rank, int *out) {
    *out = 0;
    if (a < -rank || a >= (rank ? rank : 1))
        return ir_errorf(c->err, "axis %lld is out of range for rank %d", (long long)a, rank);
    *out = (int)(a < 0 ? a + rank : a);
    return 0;
}

/* Scalar operand as double (Clip bounds, Range). */
static double scalar_d(const IrValue *v, const void *p) {
    double d = 0;
    hk_cast((HkDType)v->dtype, p, HK_F64, &d, 1, NULL);
    return d;
}

/* ---------------------------------------------------------------- checks */
static int why(char *w, size_t wl, const IrNode *n, const char *what, IrDType dt) {
    snprintf(w, wl, "%s: %s is not supported for dtype %s", ir_op_name(n->op), what,
             ir_dtype_name(dt));
    return 0;
}

static int chk_binary(const IrNode *n, int k, char *w, size_t wl) {
    IrDType dt = n->in[0]->dtype;
    if (!hk_binary_supported((HkBinOp)k, (HkDType)dt)) return why(w, wl, n, "input", dt);
    for (int i = 1; i < n->nin; i++)
        if (n->in[i] && n->in[i]->dtype != dt && k != HK_POW)
            return why(w, wl, n, "mixed input dtypes with", n->in[i]->dtype);
    if (k == HK_POW && !hk_binary_supported(HK_ADD, (HkDType)n->in[1]->dtype))
        return why(w, wl, n, "exponent", n->in[1]->dtype);
    return 1;
}
static int chk_unary(const IrNode *n, int k, char *w, size_t wl) {
    IrDType dt = n->in[0]->dtype;
    return hk_unary_supported((HkUnOp)k, (HkDType)dt) ? 1 : why(w, wl, n, "input", dt);
}
static int chk_f32(const IrNode *n, int k, char *w, size_t wl) {
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && ir_dtype_is_float(n->in[i]->dtype) && n->in[i]->dtype != IR_F32)
            return why(w, wl, n, "input", n->in[i]->dtype);
    if (n->in[0]->dtype != IR_F32) return why(w, wl, n, "input", n->in[0]->dtype);
    return 1;
}
static int chk_float(const IrNode *n, int k, char *w, size_t wl) {
    IrDType dt = n->in[0]->dtype;
    return dt == IR_F32 || dt == IR_F64 ? 1 : why(w, wl, n, "input", dt);
}
static int chk_numeric(const IrNode *n, int k, char *w, size_t wl) {
    IrDType dt = n->in[0]->dtype;
    return hk_binary_supported(HK_ADD, (HkDType)dt) ? 1 : why(w, wl, n, "input", dt);
}
static int chk_matmul(const IrNode *n, int k, char *w, size_t wl) {
    IrDType dt = n->in[0]->dtype;
    if (dt != IR_F32 && dt != IR_F64 && dt != IR_I32 && dt != IR_I64 && dt != IR_U32 &&
        dt != IR_U64)
        return why(w, wl, n, "input", dt);
    return n->in[1]->dtype == dt ? 1 : why(w, wl, n, "mixed input dtypes with", n->in[1]->dtype);
}
static int chk_cast(const IrNode *n, int k, char *w, size_t wl) {
    if (!hk_cast_supported((HkDType)n->in[0]->dtype)) return why(w, wl, n, "input", n->in[0]->dtype);
    if (!hk_cast_supported((HkDType)n->out[0]->dtype))
        return why(w, wl, n, "output", n->out[0]->dtype);
    return 1;
}
static int chk_range(const IrNode *n, int k, char *w, size_t wl) {
    IrDType dt = n->in[0]->dtype;
    return dt == IR_F32 || dt == IR_F64 || dt == IR_I16 || dt == IR_I32 || dt == IR_I64
               ? 1 : why(w, wl, n, "input", dt);
}
static int chk_where(const IrNode *n, int k, char *w, size_t wl) {
    if (n->in[0]->dtype != IR_BOOL) return why(w, wl, n, "condition", n->in[0]->dtype);
    if (n->in[1]->dtype != n->in[2]->dtype) return why(w, wl, n, "mixed", n->in[2]->dtype);
    return ir_dtype_size(n->in[1]->dtype) ? 1 : why(w, wl, n, "input", n->in[1]->dtype);
}
/* Training-mode Dropout draws random masks: only the inference form (no
 * training_mode, or a constant false one) is deterministic. */
static int chk_dropout(const IrNode *n, int k, char *w, size_t wl) {
    const IrValue *t = n->nin > 2 ? n->in[2] : NULL;
    if (!t) return 1;
    if ((t->kind == IR_VK_CONST || t->kind == IR_VK_PARAM) && t->data && t->nbytes >= 1 &&
        t->dtype == IR_BOOL && !*(const uint8_t *)t->data)
        return 1;
    snprintf(w, wl, "Dropout: training_mode '%s' may be true; random masks are not supported",
             t->name);
    return 0;
}
static int chk_clip(const IrNode *n, int k, char *w, size_t wl) {
    IrDType dt = n->in[0]->dtype;
    if (!hk_binary_supported(HK_ADD, (HkDType)dt)) return why(w, wl, n, "input", dt);
    for (int i = 1; i < n->nin; i++)
        if (n->in[i] && n->in[i]->dtype != dt) return why(w, wl, n, "bound", n->in[i]->dtype);
    return 1;
}

/* ---------------------------------------------------------------- elementwise */
static int run_binary(HxCall *c) {
    const IrValue *a = IN_V(c, 0), *b = IN_V(c, 1), *y = OUT_V(c, 0);
    char e[HK_ERRLEN];
    HkBinOp op = (HkBinOp)c->k;
    IrDType want = op >= HK_EQ ? IR_BOOL : a->dtype;
    if (y->dtype != want)
        return ir_errorf(c->err, "output '%s' is %s, expected %s", y->name, ir_dtype_name(y->dtype),
                         ir_dtype_name(want));
    if (op == HK_MOD && (ir_attr_int(c->n, "fmod", 0) || ir_dtype_is_float(a->dtype)))
        op = HK_FMOD;
    if (hk_binary(op, (HkDType)a->dtype, c->in[0], SHP(a), (HkDType)b->dtype, c->in[1], SHP(b),
                  c->out[0], SHP(y), e))
        return kfail(c, e);
    return 0;
}

/* Max/Min over any number of inputs: broadcast the first, fold the rest in. */
static int run_variadic(HxCall *c) {
    const IrValue *y = OUT_V(c, 0);
    char e[HK_ERRLEN];
    if (hk_expand(esz(y), c->in[0], SHP(IN_V(c, 0)), c->out[0], SHP(y), e)) return kfail(c, e);
    for (int i = 1; i < c->n->nin; i++) {
        const IrValue *b = IN_V(c, i);
        if (!b) continue;
        if (hk_binary((HkBinOp)c->k, (HkDType)y->dtype, c->out[0], SHP(y), (HkDType)b->dtype,
                      c->in[i], SHP(b), c->out[0], SHP(y), e))
            return kfail(c, e);
    }
    return 0;
}

static int run_where(HxCall *c) {
    const IrValue *y = OUT_V(c, 0);
    char e[HK_ERRLEN];
    if (hk_where(esz(y), c->in[0], SHP(IN_V(c, 0)), c->in[1], SHP(IN_V(c, 1)), c->in[2],
                 SHP(IN_V(c, 2)), c->out[0], SHP(y), e))
        return kfail(c, e);
    return 0;
}

static int run_unary(HxCall *c) {
    char e[HK_ERRLEN];
    if (same_numel(c, 0, 0)) return -1;
    HkUnOp op = (HkUnOp)c->k;
    if (c->n->op == IR_OP_GELU) {
        const char *ap = ir_attr_string(c->n, "approximate", "none");
        if (!strcmp(ap, "tanh")) op = HK_GELU_TANH;
        else if (strcmp(ap, "none")) return fail(c, "unknown approximate='%s'", ap);
    }
    if (hk_unary(op, (HkDType)IN_V(c, 0)->dtype, c->in[0], c->out[0], numel(IN_V(c, 0)), e))
        return kfail(c, e);
    return 0;
}

/* Identity, Reshape, Squeeze, Unsqueeze, Flatten: row-major data is unchanged. */
static int run_copy(HxCall *c) {
    if (same_numel(c, 0, 0)) return -1;
    size_t nb = (size_t)numel(IN_V(c, 0)) * esz(IN_V(c, 0));
    if (nb) memcpy(c->out[0], c->in[0], nb);
    return 0;
}

static int run_dropout(HxCall *c) {
    if (c->n->nout > 1 && OUT_V(c, 1) && OUT_V(c, 1)->dtype != IR_BOOL)
        return fail(c, "mask output '%s' must be bool", OUT_V(c, 1)->name);
    if (run_copy(c)) return -1;
    if (c->n->nout > 1 && OUT_V(c, 1) && c->out[1]) /* inference mask: keep everything */
        memset(c->out[1], 1, (size_t)numel(OUT_V(c, 1)) * esz(OUT_V(c, 1)));
    return 0;
}

static int run_cast(HxCall *c) {
    char e[HK_ERRLEN];
    if (same_numel(c, 0, 0)) return -1;
    int64_t key = ir_attr_int(c->n, "sr", 0);
    if (key) { /* a weight's bf16 copy, rounded stochastically (hk_bf16.h) */
        if (IN_V(c, 0)->dtype != IR_F32 || OUT_V(c, 0)->dtype != IR_BF16)
            return kfail(c, "a stochastically rounded Cast (sr) is f32 -> bf16 only");
        if (c->step < 0)
            return kfail(c, "a stochastically rounded Cast (sr) runs only inside a training "
                            "run that knows its step");
        hk_bf16_round_sr(c->in[0], c->out[0], numel(IN_V(c, 0)), key, c->step);
        return 0;
    }
    if (hk_cast((HkDType)IN_V(c, 0)->dtype, c->in[0], (HkDType)OUT_V(c, 0)->dtype, c->out[0],
                numel(IN_V(c, 0)), e))
        return kfail(c, e);
    return 0;
}

static int run_clip(HxCall *c) {
    char e[HK_ERRLEN];
    if (same_numel(c, 0, 0)) return -1;
    const void *lo = has_in(c, 1) ? c->in[1] : NULL, *hi = has_in(c, 2) ? c->in[2] : NULL;
    for (int i = 1; i <= 2; i++)
        if (has_in(c, i) && numel(IN_V(c, i)) != 1)
            return fail(c, "Clip bound '%s' must be a scalar", IN_V(c, i)->name);
    if (hk_clip((HkDType)IN_V(c, 0)->dtype, c->in[0], lo, hi, c->out[0], numel(IN_V(c, 0)), e))
        return kfail(c, e);
    return 0;
}

/* ---------------------------------------------------------------- linear algebra */
static int run_matmul(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *a = IN_V(c, 0), *b = IN_V(c, 1), *y = OUT_V(c, 0);
    if (hk_matmul((HkDType)a->dtype, c->in[0], SHP(a), c->in[1], SHP(b), c->out[0], SHP(y), e))
        return kfail(c, e);
    return 0;
}

static int run_gemm(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *a = IN_V(c, 0), *b = IN_V(c, 1), *y = OUT_V(c, 0);
    if (a->shape.rank != 2 || b->shape.rank != 2 || y->shape.rank != 2)
        return fail(c, "Gemm needs 2-D A, B and Y%s", "");
    int ta = ir_attr_int(c->n, "transA", 0) != 0, tb = ir_attr_int(c->n, "transB", 0) != 0;
    int64_t M = a->shape.dims[ta ? 1 : 0], K = a->shape.dims[ta ? 0 : 1];
    int64_t Kb = b->shape.dims[tb ? 1 : 0], N = b->shape.dims[tb ? 0 : 1];
    if (K != Kb || y->shape.dims[0] != M || y->shape.dims[1] != N)
        return fail(c, "Gemm operand shapes do not agree%s", "");
    const IrValue *cv = has_in(c, 2) ? IN_V(c, 2) : NULL;
    if (hk_gemm_f32(c->in[0], c->in[1], cv ? c->in[2] : NULL, cv ? cv->shape.rank : 0,
                    cv ? cv->shape.dims : NULL, M, N, K, ta, tb,
                    (float)ir_attr_float(c->n, "alpha", 1.0),
                    (float)ir_attr_float(c->n, "beta", 1.0), c->out[0], e))
        return kfail(c, e);
    return 0;
}

static int run_linear(HxCall *c) {
    const IrValue *x = IN_V(c, 0), *w = IN_V(c, 1), *y = OUT_V(c, 0);
    if (x->shape.rank < 1 || w->shape.rank != 2) return fail(c, "Linear needs x[...,K] and W[K,N]%s", "");
    int64_t K = x->shape.dims[x->shape.rank - 1], N = w->shape.dims[1];
    if (w->shape.dims[0] != K) return fail(c, "Linear: W rows differ from x's last dim%s", "");
    int64_t M = K ? numel(x) / K : 0;
    if (K == 0) M = numel(y) / (N ? N : 1);
    if (numel(y) != M * N) return fail(c, "Linear output shape does not match%s", "");
    if (has_in(c, 2) && numel(IN_V(c, 2)) != N) return fail(c, "Linear bias must have N elements%s", "");
    if (x->dtype == IR_BF16) /* mixed precision (passes/mixed_precision.c) */
        hk_linear_bf16(c->in[0], c->in[1], has_in(c, 2) ? c->in[2] : NULL, M, K, N, c->out[0]);
    else
        hk_linear_f32(c->in[0], c->in[1], has_in(c, 2) ? c->in[2] : NULL, M, K, N, c->out[0]);
    return 0;
}

static int run_attention(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *q = IN_V(c, 0), *k = IN_V(c, 1), *v = IN_V(c, 2), *y = OUT_V(c, 0);
    if (q->shape.rank < 2 || k->shape.rank < 2 || v->shape.rank < 2)
        return fail(c, "Attention needs q, k, v of rank >= 2%s", "");
    int64_t T = q->shape.dims[q->shape.rank - 2], D = q->shape.dims[q->shape.rank - 1];
    int64_t S = k->shape.dims[k->shape.rank - 2], Dv = v->shape.dims[v->shape.rank - 1];
    if (k->shape.dims[k->shape.rank - 1] != D || v->shape.dims[v->shape.rank - 2] != S)
        return fail(c, "Attention: k must be [...,S,D] and v [...,S,Dv]%s", "");
    int64_t batch = T * D != 0 ? numel(q) / (T * D) : 0;
    if (S * D != 0 && numel(k) != batch * S * D) return fail(c, "Attention: q and k batch dims differ%s", "");
    if (S * Dv != 0 && numel(v) != batch * S * Dv) return fail(c, "Attention: q and v batch dims differ%s", "");
    if (numel(y) != batch * T * Dv) return fail(c, "Attention output shape does not match%s", "");
    double scale = ir_attr_float(c->n, "scale", D > 0 ? 1.0 / sqrt((double)D) : 1.0);
    if (hk_attention_f32(c->in[0], c->in[1], c->in[2], batch, T, S, D, Dv,
                         ir_attr_int(c->n, "causal", 1) != 0, (float)scale, c->out[0], e))
        return kfail(c, e);
    return 0;
}

/* ---------------------------------------------------------------- reductions */
static int run_reduce(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *x = IN_V(c, 0), *y = OUT_V(c, 0);
    int rank = x->shape.rank, red[IR_MAX_RANK] = {0};
    int64_t axes[IR_MAX_RANK];
    int na;
    if (has_in(c, 1)) {
        if ((na = read_ints(c, 1, axes, IR_MAX_RANK)) < 0) return -1;
    } else {
        const int64_t *a;
        na = ir_attr_ints(c->n, "axes", &a); /* pre-18 attribute form */
        if (na > IR_MAX_RANK) return fail(c, "too many axes%s", "");
        for (int i = 0; i < na; i++) axes[i] = a[i];
    }
    if (na == 0 && ir_attr_int(c->n, "noop_with_empty_axes", 0)) return run_copy(c);
    for (int i = 0; i < rank; i++) red[i] = na == 0;
    for (int i = 0; i < na; i++) {
        int a;
        if (norm_axis(c, axes[i], rank, &a)) return -1;
        red[a] = 1;
    }
    int64_t ny = 1;
    for (int i = 0; i < rank; i++) ny *= red[i] ? 1 : x->shape.dims[i];
    if (ny != numel(y)) return fail(c, "output shape does not match the reduced shape%s", "");
    if (hk_reduce((HkRedOp)c->k, (HkDType)x->dtype, c->in[0], SHP(x), red, c->out[0], e))
        return kfail(c, e);
    return 0;
}

static int run_softmax(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *x = IN_V(c, 0);
    int axis = 0;
    if (same_numel(c, 0, 0)) return -1;
    if (x->shape.rank && norm_axis(c, ir_attr_int(c->n, "axis", -1), x->shape.rank, &axis))
        return -1;
    if (hk_softmax((HkDType)x->dtype, c->in[0], SHP(x), axis, c->k, c->out[0], e))
        return kfail(c, e);
    return 0;
}

static int run_cumsum(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *x = IN_V(c, 0);
    int64_t a;
    int axis = 0;
    if (same_numel(c, 0, 0)) return -1;
    if (read_ints(c, 1, &a, 1) != 1) return fail(c, "CumSum axis must be one integer%s", "");
    if (x->shape.rank && norm_axis(c, a, x->shape.rank, &axis)) return -1;
    if (hk_cumsum((HkDType)x->dtype, c->in[0], SHP(x), axis,
                  ir_attr_int(c->n, "exclusive", 0) != 0, ir_attr_int(c->n, "reverse", 0) != 0,
                  c->out[0], e))
        return kfail(c, e);
    return 0;
}

/* scale/bias broadcast over the normalised dims, materialised as n floats */
static int norm_param(HxCall *c, int i, int rank, const int64_t *nd, float *buf) {
    char e[HK_ERRLEN];
    const IrValue *p = IN_V(c, i);
    int pr = p->shape.rank;
    const int64_t *pd = p->shape.dims;
    while (pr > rank && pd[0] == 1) { /* [1,1,D] scales over a [D] row */
        pr--;
        pd++;
    }
    if (hk_expand(4, c->in[i], pr, pd, buf, rank, nd, e))
        return ir_errorf(c->err, "'%s' does not broadcast over the normalised dims: %s",
                         IN_V(c, i)->name, e);
    return 0;
}

static int run_norm(HxCall *c) {
    const IrValue *x = IN_V(c, 0);
    int axis, rank = x->shape.rank;
    if (same_numel(c, 0, 0)) return -1;
    if (rank == 0) return fail(c, "normalisation of a scalar%s", "");
    if (norm_axis(c, ir_attr_int(c->n, "axis", -1), rank, &axis)) return -1;
    int64_t n = hk_numel(rank - axis, x->shape.dims + axis);
    int64_t outer = hk_numel(axis, x->shape.dims);
    double eps = ir_attr_float(c->n, "epsilon", 1e-5);
    /* scale and bias as rows of n: kernel scratch, allocated once (hk_ws.h) */
    float *scale = hk_ws(HK_WS_ADAPTER, (size_t)(n ? n : 1) * sizeof(float) * 2);
    if (!scale) return ir_errorf(c->err, "out of memory for %lld-element scale and bias rows", (long long)n);
    float *bias = scale + (n ? n : 1);
    int rc = norm_param(c, 1, rank - axis, x->shape.dims + axis, scale);
    int hb = c->n->op == IR_OP_LAYER_NORM && has_in(c, 2);
    if (!rc && hb) rc = norm_param(c, 2, rank - axis, x->shape.dims + axis, bias);
    if (!rc && n > 0) {
        if (c->n->op == IR_OP_LAYER_NORM)
            hk_layernorm_f32(c->in[0], scale, hb ? bias : NULL, outer, n, eps, c->out[0]);
        else hk_rmsnorm_f32(c->in[0], scale, outer, n, eps, c->out[0]);
    }
    return rc;
}

/* ---------------------------------------------------------------- data movement */
static int run_transpose(HxCall *c) {
    const IrValue *x = IN_V(c, 0), *y = OUT_V(c, 0);
    int r = x->shape.rank;
    int64_t perm[IR_MAX_RANK];
    const int64_t *p;
    int np = ir_attr_ints(c->n, "perm", &p);
    if (np == 0)
        for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
    else if (np != r) return fail(c, "perm length differs from the input rank%s", "");
    int seen[IR_MAX_RANK] = {0};
    for (int i = 0; i < r; i++) {
        if (np) {
            int a;
            if (norm_axis(c, p[i], r, &a)) return -1;
            perm[i] = a;
        }
        if (seen[perm[i]]++) return fail(c, "perm repeats an axis%s", "");
        if (y->shape.rank != r || y->shape.dims[i] != x->shape.dims[perm[i]])
            return fail(c, "output shape is not the permuted input shape%s", "");
    }
    hk_transpose(esz(x), c->in[0], SHP(x), perm, c->out[0]);
    return 0;
}

static int run_split(HxCall *c) {
    const IrValue *x = IN_V(c, 0);
    int axis;
    if (norm_axis(c, ir_attr_int(c->n, "axis", 0), x->shape.rank, &axis)) return -1;
    int n = c->n->nout;
    int64_t sizes[64], total = 0;
    if (n > 64) return fail(c, "too many outputs%s", "");
    for (int i = 0; i < n; i++) {
        const IrValue *o = OUT_V(c, i);
        if (!o || o->shape.rank != x->shape.rank) return fail(c, "output rank differs%s", "");
        if (o->dtype != x->dtype) return fail(c, "output '%s' dtype differs from the input", o->name);
        for (int d = 0; d < x->shape.rank; d++)
            if (d != axis && o->shape.dims[d] != x->shape.dims[d])
                return fail(c, "output '%s' differs from the input off the split axis", o->name);
        sizes[i] = o->shape.dims[axis];
        total += sizes[i];
    }
    if (total != x->shape.dims[axis]) return fail(c, "output sizes do not sum to the axis extent%s", "");
    hk_split(esz(x), c->in[0], SHP(x), axis, n, sizes, c->out);
    return 0;
}

static int run_concat(HxCall *c) {
    const IrValue *y = OUT_V(c, 0);
    int n = c->n->nin, axis;
    if (norm_axis(c, ir_attr_int(c->n, "axis", 0), y->shape.rank, &axis)) return -1;
    const void *xs[256];
    const int64_t *xd[256];
    int m = 0;
    int64_t total = 0;
    if (n > 256) return fail(c, "too many inputs%s", "");
    for (int i = 0; i < n; i++) {
        const IrValue *x = IN_V(c, i);
        if (!x) continue;
        if (x->shape.rank != y->shape.rank) return fail(c, "input '%s' has the wrong rank", x->name);
        for (int d = 0; d < y->shape.rank; d++)
            if (d != axis && x->shape.dims[d] != y->shape.dims[d])
                return fail(c, "input '%s' differs from the output off the concat axis", x->name);
        total += x->shape.dims[axis];
        xs[m] = c->in[i];
        xd[m++] = x->shape.dims;
    }
    if (total != y->shape.dims[axis]) return fail(c, "inputs do not add up to the output%s", "");
    hk_concat(esz(y), m, xs, xd, y->shape.rank, axis, c->out[0]);
    return 0;
}

static int run_slice(HxCall *c) {
    const IrValue *x = IN_V(c, 0), *y = OUT_V(c, 0);
    int r = x->shape.rank;
    int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], sp[IR_MAX_RANK];
    int ns = read_ints(c, 1, st, IR_MAX_RANK), ne = read_ints(c, 2, en, IR_MAX_RANK);
    if (ns < 0 || ne < 0) return -1;
    if (ns != ne) return fail(c, "starts and ends differ in length%s", "");
    int na = ns, nst = ns;
    if (has_in(c, 3) && (na = read_ints(c, 3, ax, IR_MAX_RANK)) < 0) return -1;
    if (has_in(c, 4) && (nst = read_ints(c, 4, sp, IR_MAX_RANK)) < 0) return -1;
    if (na != ns || nst != ns) return fail(c, "axes/steps length differs from starts%s", "");
    int64_t start[IR_MAX_RANK], step[IR_MAX_RANK], yd[IR_MAX_RANK];
    int seen[IR_MAX_RANK] = {0};
    for (int d = 0; d < r; d++) {
        start[d] = 0;
        step[d] = 1;
        yd[d] = x->shape.dims[d];
    }
    for (int i = 0; i < ns; i++) {
        int a;
        if (norm_axis(c, has_in(c, 3) ? ax[i] : i, r, &a)) return -1;
        if (seen[a]++) return fail(c, "axis repeated%s", "");
        int64_t dim = x->shape.dims[a], s = st[i], e = en[i], k = has_in(c, 4) ? sp[i] : 1;
        if (k == 0) return fail(c, "step of 0%s", "");
        yd[a] = ir_slice_axis(dim, s, e, k, &start[a]);
        step[a] = k;
    }
    if (y->shape.rank != r) return fail(c, "output rank differs from the input%s", "");
    for (int d = 0; d < r; d++)
        if (yd[d] != y->shape.dims[d]) return fail(c, "output shape is not the sliced shape%s", "");
    hk_slice(esz(x), c->in[0], SHP(x), start, step, yd, c->out[0]);
    return 0;
}

static int run_expand(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *y = OUT_V(c, 0);
    if (hk_expand(esz(y), c->in[0], SHP(IN_V(c, 0)), c->out[0], SHP(y), e)) return kfail(c, e);
    return 0;
}

static int run_shape(HxCall *c) {
    const IrValue *x = IN_V(c, 0);
    int r = x->shape.rank;
    int s, e;
    ir_shape_op_range(c->n, r, &s, &e);
    int64_t len = e > s ? e - s : 0;
    if (numel(OUT_V(c, 0)) != len || OUT_V(c, 0)->dtype != IR_I64)
        return fail(c, "output must be int64[%s]", "end - start");
    for (int64_t i = 0; i < len; i++) ((int64_t *)c->out[0])[i] = x->shape.dims[s + i];
    return 0;
}

static int run_constant_of_shape(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *y = OUT_V(c, 0);
    if (hk_fill((HkDType)y->dtype, ir_attr_float(c->n, "value", 0.0), c->out[0], numel(y), e))
        return kfail(c, e);
    return 0;
}

static int run_range(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *y = OUT_V(c, 0);
    for (int i = 0; i < 3; i++)
        if (numel(IN_V(c, i)) != 1 || IN_V(c, i)->dtype != y->dtype)
            return fail(c, "Range operand '%s' must be a scalar of the output dtype", IN_V(c, i)->name);
    double s = scalar_d(IN_V(c, 0), c->in[0]), l = scalar_d(IN_V(c, 1), c->in[1]),
           d = scalar_d(IN_V(c, 2), c->in[2]);
    if (d == 0) return fail(c, "Range delta is 0%s", "");
    double cnt = ceil((l - s) / d);
    if ((cnt > 0 ? (int64_t)cnt : 0) != numel(y))
        return fail(c, "output length does not match start/limit/delta%s", "");
    if (hk_range((HkDType)y->dtype, c->in[0], c->in[2], numel(y), c->out[0], e)) return kfail(c, e);
    return 0;
}

static int run_trilu(HxCall *c) {
    const IrValue *x = IN_V(c, 0);
    int64_t k = 0;
    if (same_numel(c, 0, 0)) return -1;
    if (has_in(c, 1) && read_ints(c, 1, &k, 1) != 1) return fail(c, "k must be one integer%s", "");
    hk_trilu(esz(x), c->in[0], SHP(x), k, ir_attr_int(c->n, "upper", 1) != 0, c->out[0]);
    return 0;
}

static int gather_axis(HxCall *c, int axis, const char *what) {
    char e[HK_ERRLEN];
    const IrValue *x = IN_V(c, 0), *idx = IN_V(c, 1), *y = OUT_V(c, 0);
    int64_t inner = hk_numel(x->shape.rank - axis - 1, x->shape.dims + axis + 1);
    int64_t outer = hk_numel(axis, x->shape.dims);
    if (numel(y) != outer * numel(idx) * inner)
        return fail(c, "output shape does not match the gathered shape%s", "");
    if (hk_gather(esz(x), c->in[0], SHP(x), axis, (HkDType)idx->dtype, c->in[1], numel(idx),
                  c->out[0], e))
        return ir_errorf(c->err, "%s '%s': %s", what, idx->name, e);
    return 0;
}

static int run_gather(HxCall *c) {
    int axis;
    if (norm_axis(c, ir_attr_int(c->n, "axis", 0), IN_V(c, 0)->shape.rank, &axis)) return -1;
    return gather_axis(c, axis, "indices");
}

static int run_embedding(HxCall *c) {
    const IrValue *t = IN_V(c, 0), *ids = IN_V(c, 1);
    if (t->shape.rank != 2) return fail(c, "Embedding table must be [V,D]%s", "");
    if (!ir_node_attr(c->n, "vocab_start") && !ir_node_attr(c->n, "vocab_size"))
        return gather_axis(c, 0, "token ids");
    /* a vocab-parallel shard (tp_shard_vocab.c): rows [vocab_start, +V) of
     * vocab_size; other ranks' ids give 0 rows */
    char e[HK_ERRLEN];
    int64_t V = t->shape.dims[0], D = t->shape.dims[1];
    int64_t st = ir_attr_int(c->n, "vocab_start", 0), vs = ir_attr_int(c->n, "vocab_size", V);
    if (st < 0 || st + V > vs)
        return ir_errorf(c->err, "vocab_start %lld + %lld rows passes vocab_size %lld",
                         (long long)st, (long long)V, (long long)vs);
    if (numel(OUT_V(c, 0)) != numel(ids) * D)
        return fail(c, "output shape does not match the gathered shape%s", "");
    if (hk_embedding_shard_f32((HkDType)ids->dtype, c->in[1], numel(ids), c->in[0], st, V, vs, D,
                               c->out[0], e))
        return ir_errorf(c->err, "token ids '%s': %s", ids->name, e);
    return 0;
}

static int run_gather_nd(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *x = IN_V(c, 0), *idx = IN_V(c, 1), *y = OUT_V(c, 0);
    int64_t b = ir_attr_int(c->n, "batch_dims", 0);
    if (b < 0 || b >= x->shape.rank || idx->shape.rank < 1)
        return fail(c, "GatherND batch_dims does not fit the operands%s", "");
    int64_t k = idx->shape.dims[idx->shape.rank - 1];
    int64_t want = hk_numel(idx->shape.rank - 1, idx->shape.dims);
    if (k >= 1 && b + k <= x->shape.rank)
        want *= hk_numel(x->shape.rank - (int)(b + k), x->shape.dims + b + k);
    if (numel(y) != want) return fail(c, "output shape does not match the gathered shape%s", "");
    if (hk_gather_nd(esz(x), c->in[0], SHP(x), (HkDType)idx->dtype, c->in[1], SHP(idx), (int)b,
                     c->out[0], e))
        return ir_errorf(c->err, "indices '%s': %s", idx->name, e);
    return 0;
}

static int run_gather_elements(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *x = IN_V(c, 0), *idx = IN_V(c, 1), *y = OUT_V(c, 0);
    int axis;
    if (norm_axis(c, ir_attr_int(c->n, "axis", 0), x->shape.rank, &axis)) return -1;
    if (idx->shape.rank != x->shape.rank || !ir_shape_equal(&idx->shape, &y->shape))
        return fail(c, "GatherElements: indices and output must share the data's rank%s", "");
    if (hk_gather_elements(esz(x), c->in[0], SHP(x), axis, (HkDType)idx->dtype, c->in[1],
                           idx->shape.dims, c->out[0], e))
        return ir_errorf(c->err, "indices '%s': %s", idx->name, e);
    return 0;
}

static int run_scatter_nd(HxCall *c) {
    char e[HK_ERRLEN];
    const IrValue *x = IN_V(c, 0), *idx = IN_V(c, 1), *u = IN_V(c, 2);
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    const char *red = ir_attr_string(c->n, "reduction", "none");
    int r = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(red, names[i])) r = i;
    if (r < 0) return fail(c, "unknown reduction '%s'", red);
    if (!ir_shape_equal(&x->shape, &OUT_V(c, 0)->shape) || u->dtype != x->dtype)
        return fail(c, "ScatterND output and updates must match the data%s", "");
    int64_t k = idx->shape.rank ? idx->shape.dims[idx->shape.rank - 1] : 0;
    int64_t want = hk_numel(idx->shape.rank - 1, idx->shape.dims);
    if (k >= 1 && k <= x->shape.rank)
        want *= hk_numel(x->shape.rank - (int)k, x->shape.dims + k);
    if (numel(u) != want) return fail(c, "updates '%s' do not match the indexed slices", u->name);
    if (hk_scatter_nd((HkDType)x->dtype, c->in[0], SHP(x), (HkDType)idx->dtype, c->in[1],
                      SHP(idx), c->in[2], (HkScatterRed)r, c->out[0], e))
        return ir_errorf(c->err, "indices '%s': %s", idx->name, e);
    return 0;
}

static int run_tile(HxCall *c) {
    const IrValue *x = IN_V(c, 0), *y = OUT_V(c, 0);
    int64_t rep[IR_MAX_RANK];
    int r = read_ints(c, 1, rep, IR_MAX_RANK);
    if (r < 0) return -1;
    if (r != x->shape.rank || y->shape.rank != r)
        return fail(c, "repeats '%s' must have one entry per input axis", IN_V(c, 1)->name);
    for (int i = 0; i < r; i++)
        if (rep[i] < 0 || y->shape.dims[i] != x->shape.dims[i] * rep[i])
            return fail(c, "output shape is not the input shape times repeats%s", "");
    hk_tile(esz(x), c->in[0], SHP(x), rep, c->out[0]);
    return 0;
}

static int run_is_nan(HxCall *c) {
    char e[HK_ERRLEN];
    if (same_numel(c, 0, 0)) return -1;
    if (OUT_V(c, 0)->dtype != IR_BOOL) return fail(c, "output '%s' must be bool", OUT_V(c, 0)->name);
    if (hk_isnan((HkDType)IN_V(c, 0)->dtype, c->in[0], c->out[0], numel(IN_V(c, 0)), e))
        return kfail(c, e);
    return 0;
}
static int chk_is_nan(const IrNode *n, int k, char *w, size_t wl) {
    IrDType dt = n->in[0]->dtype;
    return dt == IR_F32 || dt == IR_F64 || dt == IR_F16 || dt == IR_BF16
               ? 1 : why(w, wl, n, "input", dt);
}

/* ---------------------------------------------------------------- the table */
#define BIN(K) {run_binary, chk_binary, K, 0, 0, 1, 1} /* in place: out[j] after a[j], b[j] */
#define UN(K) {run_unary, chk_unary, K, 0, 1, 1, 1}
#define OW_ALL HX_ALL /* overwrite: every output */
static const HxOpEntry table[IR_OP_COUNT] = {
    [IR_OP_ADD] = BIN(HK_ADD), [IR_OP_SUB] = BIN(HK_SUB), [IR_OP_MUL] = BIN(HK_MUL),
    [IR_OP_DIV] = BIN(HK_DIV), [IR_OP_POW] = BIN(HK_POW), [IR_OP_MOD] = BIN(HK_MOD),
    [IR_OP_MAX] = {run_variadic, chk_binary, HK_MAX, 0, HX_ALL, 0, 1},
    [IR_OP_MIN] = {run_variadic, chk_binary, HK_MIN, 0, HX_ALL, 0, 1},
    [IR_OP_EQUAL] = BIN(HK_EQ), [IR_OP_LESS] = BIN(HK_LT), [IR_OP_LESS_OR_EQUAL] = BIN(HK_LE),
    [IR_OP_GREATER] = BIN(HK_GT), [IR_OP_GREATER_OR_EQUAL] = BIN(HK_GE),
    [IR_OP_AND] = BIN(HK_AND), [IR_OP_OR] = BIN(HK_OR), [IR_OP_XOR] = BIN(HK_XOR),
    [IR_OP_WHERE] = {run_where, chk_where, 0, 0, 6, 0, 1},
    [IR_OP_NEG] = UN(HK_NEG), [IR_OP_ABS] = UN(HK_ABS), [IR_OP_SQRT] = UN(HK_SQRT),
    [IR_OP_RECIPROCAL] = UN(HK_RECIP), [IR_OP_EXP] = UN(HK_EXP), [IR_OP_LOG] = UN(HK_LOG),
    [IR_OP_SIN] = UN(HK_SIN), [IR_OP_COS] = UN(HK_COS), [IR_OP_TANH] = UN(HK_TANH),
    [IR_OP_SIGMOID] = UN(HK_SIGMOID), [IR_OP_ERF] = UN(HK_ERF), [IR_OP_RELU] = UN(HK_RELU),
    [IR_OP_FLOOR] = UN(HK_FLOOR), [IR_OP_CEIL] = UN(HK_CEIL), [IR_OP_NOT] = UN(HK_NOT),
    [IR_OP_IS_NAN] = {run_is_nan, chk_is_nan, 0},
    [IR_OP_CAST] = {run_cast, chk_cast, 0, 0, 0, 0, 1},
    [IR_OP_CLIP] = {run_clip, chk_clip, 0, 0, HX_ALL, 0, 1},
    [IR_OP_IDENTITY] = {run_copy, NULL, 0, 0, 1, 0, 1},
    /* one process = one TP rank: the group sum is the value itself */
    [IR_OP_TP_ALL_REDUCE] = {run_copy, NULL, 0, 0, 1, 0, 1},
    [IR_OP_TP_COPY] = {run_copy, NULL, 0, 0, 1, 0, 1},
    [IR_OP_DROPOUT] = {run_dropout, chk_dropout, 0, 0, 1, 0, OW_ALL},
    [IR_OP_MATMUL] = {run_matmul, chk_matmul, 0, 0, 3, 0, 1},
    [IR_OP_GEMM] = {run_gemm, chk_f32, 0, 0, HX_ALL, 0, 1},
    [IR_OP_REDUCE_MEAN] = {run_reduce, chk_numeric, HK_RMEAN, 0, 1, 0, 1},
    [IR_OP_REDUCE_SUM] = {run_reduce, chk_numeric, HK_RSUM, 0, 1, 0, 1},
    [IR_OP_REDUCE_MAX] = {run_reduce, chk_numeric, HK_RMAX, 0, 1, 0, 1},
    [IR_OP_SOFTMAX] = {run_softmax, chk_float, 0, 0, 1, 0, 1},
    [IR_OP_LOG_SOFTMAX] = {run_softmax, chk_float, 1, 0, 1, 0, 1},
    [IR_OP_RESHAPE] = {run_copy, NULL, 0, 0, 1, 0, 1},
    [IR_OP_TRANSPOSE] = {run_transpose, NULL, 0, 0, 1, 0, 1},
    [IR_OP_SPLIT] = {run_split, NULL, 0, 0, 1, 0, OW_ALL},
    [IR_OP_CONCAT] = {run_concat, NULL, 0, 0, HX_ALL, 0, 1},
    [IR_OP_SLICE] = {run_slice, NULL, 0, 0, 1, 0, 1},
    [IR_OP_SQUEEZE] = {run_copy, NULL, 0, 0, 1, 0, 1},
    [IR_OP_UNSQUEEZE] = {run_copy, NULL, 0, 0, 1, 0, 1},
    [IR_OP_EXPAND] = {run_expand, NULL, 0, 0, 1, 0, 1},
    [IR_OP_FLATTEN] = {run_copy, NULL, 0, 0, 1, 0, 1},
    [IR_OP_SHAPE] = {run_shape, NULL, 0, 1},
    [IR_OP_CONSTANT_OF_SHAPE] = {run_constant_of_shape, NULL, 0},
    [IR_OP_RANGE] = {run_range, chk_range, 0},
    [IR_OP_TRILU] = {run_trilu, NULL, 0, 0, 1, 0, 1},
    [IR_OP_GATHER] = {run_gather, NULL, 0, 0, 1, 0, 1},
    [IR_OP_CUMSUM] = {run_cumsum, chk_numeric, 0, 0, 1},
    [IR_OP_GATHER_ND] = {run_gather_nd, NULL, 0, 0, 1},
    [IR_OP_TILE] = {run_tile, NULL, 0, 0, 1},
    [IR_OP_GATHER_ELEMENTS] = {run_gather_elements, NULL, 0, 0, 1},
    [IR_OP_SCATTER_ND] = {run_scatter_nd, NULL, 0, 0, 5},
    [IR_OP_LINEAR] = {run_linear, hxt_chk_gemm16, 0, 0, HX_ALL, 0, 1},
    [IR_OP_LAYER_NORM] = {run_norm, chk_f32, 0, 0, HX_ALL, 0, 1},
    [IR_OP_RMS_NORM] = {run_norm, chk_f32, 0, 0, HX_ALL, 0, 1},
    [IR_OP_GELU] = {run_unary, chk_float, HK_GELU, 0, 1, 0, 1},
    [IR_OP_SILU] = {run_unary, chk_float, HK_SILU, 0, 1, 0, 1},
    [IR_OP_ATTENTION] = {run_attention, chk_f32, 0, 0, HX_ALL, 0, 1},
    [IR_OP_EMBEDDING] = {run_embedding, chk_f32, 0, 0, 1, 0, 1},
    /* training ops: codegen/hostexec_train.c */
    [IR_OP_CROSS_ENTROPY] = {hxt_run_cross_entropy, hxt_chk_f32, 0, 0, 1, 0, 1},
    [IR_OP_CROSS_ENTROPY_GRAD] = {hxt_run_cross_entropy_grad, hxt_chk_f32, 0, 0, 5, 0, 1},
    [IR_OP_VOCAB_CE_STATS] = {hxt_run_vocab_ce_stats, hxt_chk_f32, 0, 0, 5},
    [IR_OP_VOCAB_CROSS_ENTROPY] = {hxt_run_vocab_cross_entropy, hxt_chk_f32, 0, 0, 13},
    [IR_OP_VOCAB_CROSS_ENTROPY_GRAD] = {hxt_run_vocab_cross_entropy_grad, hxt_chk_f32, 0, 0, 29},
    [IR_OP_LINEAR_GRAD] = {hxt_run_linear_grad, hxt_chk_gemm16, 0, 0, HX_ALL, 0, OW_ALL},
    [IR_OP_LAYER_NORM_GRAD] = {hxt_run_norm_grad, hxt_chk_f32, 0, 0, HX_ALL, 0, OW_ALL},
    [IR_OP_RMS_NORM_GRAD] = {hxt_run_norm_grad, hxt_chk_f32, 0, 0, HX_ALL, 0, OW_ALL},
    [IR_OP_ATTENTION_GRAD] = {hxt_run_attention_grad, hxt_chk_f32, 0, 0, HX_ALL, 0, OW_ALL},
    [IR_OP_UNARY_GRAD] = {hxt_run_unary_grad, hxt_chk_f32, 0, 0, HX_ALL, 0, 1},
    [IR_OP_SOFTMAX_GRAD] = {hxt_run_softmax_grad, hxt_chk_f32, 0, 0, HX_ALL, 0, 1},
    [IR_OP_EMBEDDING_GRAD] = {hxt_run_embedding_grad, hxt_chk_f32, 0, 0, 5, 0, 1},
    [IR_OP_SUM_TO_SHAPE] = {hxt_run_sum_to_shape, hxt_chk_f32, 0, 0, 1, 0, 1},
    [IR_OP_SLICE_GRAD] = {hxt_run_slice_grad, hxt_chk_f32, 0, 0, 1},
    [IR_OP_GATHER_GRAD] = {hxt_run_gather_grad, hxt_chk_f32, 0, 0, 1},
    [IR_OP_GATHER_ND_GRAD] = {hxt_run_gather_grad, hxt_chk_f32, 0, 0, 1},
    [IR_OP_GATHER_ELEMENTS_GRAD] = {hxt_run_gather_grad, hxt_chk_f32, 0, 0, 1},
    /* P m v G lr (clip_scale) f32 like P'; P' m' v' may take P m v's buffers */
    [IR_OP_ADAMW] = {hxt_run_adamw, hxt_chk_f32, 0, 0, 0x5f, 0x7, OW_ALL},
};

const HxOpEntry *hx_op_entry(IrOp op) {
    if ((int)op < 0 || op >= IR_OP_COUNT || !table[op].run) return NULL;
    return &table[op];
}

int hx_check_node(const IrNode *n, const HxOpEntry *e, IrError *err) {
    const IrOpInfo *info = ir_op_info(n->op);
    if (n->nin < info->min_inputs || (info->max_inputs >= 0 && n->nin > info->max_inputs) ||
        n->nout < info->min_outputs || (info->max_outputs >= 0 && n->nout > info->max_outputs))
        return ir_errorf(err, "%d inputs / %d outputs is outside the op's arity", n->nin, n->nout);
    for (int i = 0; i < info->min_inputs; i++)
        if (!n->in[i]) return ir_errorf(err, "required input %d is missing", i);
    if (!n->out[0]) return ir_errorf(err, "output 0 is missing");
    IrDType dt = n->out[0]->dtype;
    for (int i = 0; i < n->nin; i++) {
        if (!n->in[i] || i >= 32 || !(e->same & (1u << i))) continue;
        if (n->in[i]->dtype != dt)
            return ir_errorf(err, "input '%s' is %s but output '%s' is %s", n->in[i]->name,
                             ir_dtype_name(n->in[i]->dtype), n->out[0]->name, ir_dtype_name(dt));
    }
    return 0;
}
