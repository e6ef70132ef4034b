/* Direct kernel calls for IR nodes: the table of forward / general ops
 * (lower_node.h; training ops: lower_node_train.c).  Each entry mirrors the
 * host executor's adapter of the op (codegen/hostexec_ops.c) with every
 * shape, axis and attribute resolved here, at compile time. */
#include "lower_node.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk.h"
#include "hostexec.h"

#define P LE_PTR
#define I LE_I32
#define L LE_I64
#define F LE_F32
#define D LE_F64
/* Mirrors the declarations of kernels/host/hk.h, hk_train.h, hk_entry.h
 * (enums and int are i32, size_t and int64_t i64). */
const LeExtern lower_node_externs[] = {
    {"hk_binary", I, 13, {I, I, P, I, P, I, P, I, P, P, I, P, P}},
    {"hk_unary", I, 6, {I, I, P, P, L, P}},
    {"hk_where", I, 14, {L, P, I, P, P, I, P, P, I, P, P, I, P, P}},
    {"hk_clip", I, 7, {I, P, P, P, P, L, P}},
    {"hk_cast", I, 6, {I, P, I, P, L, P}},
    {"hk_fill", I, 5, {I, D, P, L, P}},
    {"hk_isnan", I, 5, {I, P, P, L, P}},
    {"hk_softmax", I, 8, {I, P, I, P, I, I, P, P}},
    {"hk_cumsum", I, 9, {I, P, I, P, I, I, I, P, P}},
    {"hk_layernorm_f32", LE_VOID, 7, {P, P, P, L, L, D, P}},
    {"hk_rmsnorm_f32", LE_VOID, 6, {P, P, L, L, D, P}},
    {"hk_matmul", I, 11, {I, P, I, P, P, I, P, P, I, P, P}},
    {"hk_gemm_f32", I, 14, {P, P, P, I, P, L, L, L, I, I, F, F, P, P}},
    {"hk_linear_f32", LE_VOID, 7, {P, P, P, L, L, L, P}},
    {"hk_linear_bf16", LE_VOID, 7, {P, P, P, L, L, L, P}},
    {"hk_linear_backward_bf16", I, 11, {P, P, P, L, L, L, P, P, P, I, P}},
    {"hk_attention_f32", I, 12, {P, P, P, L, L, L, L, L, I, F, P, P}},
    {"hk_transpose", LE_VOID, 6, {L, P, I, P, P, P}},
    {"hk_slice", LE_VOID, 8, {L, P, I, P, P, P, P, P}},
    {"hk_expand", I, 8, {L, P, I, P, P, I, P, P}},
    {"hk_gather", I, 10, {L, P, I, P, I, I, P, L, P, P}},
    {"hk_trilu", LE_VOID, 7, {L, P, I, P, L, I, P}},
    {"hk_tile", LE_VOID, 6, {L, P, I, P, P, P}},
    {"hk_embedding_shard_f32", I, 10, {I, P, L, P, L, L, L, L, P, P}},
    {"hk_entry_reduce", I, 8, {I, I, P, I, P, P, P, P}},
    {"hk_entry_concat_part", LE_VOID, 8, {L, P, I, P, I, L, L, P}},
    {"hk_entry_slice_grad_f32", LE_VOID, 7, {P, I, P, P, P, P, P}},
    {"hk_entry_ce_bwd_f32", I, 10, {P, I, P, L, L, I, L, P, P, P}},
    {"hk_entry_memset", LE_VOID, 3, {P, I, L}},
    {"hk_entry_adamw_f32", I, 16, {P, P, P, P, L, P, P, P, D, D, D, D, P, P, P, P}},
    {"hk_cross_entropy_fwd_f32", I, 11, {P, I, P, L, L, I, L, P, P, P, P}},
    {"hk_linear_backward_f32", I, 11, {P, P, P, L, L, L, P, P, P, I, P}},
    {"hk_layernorm_backward_f32", I, 13, {P, P, P, P, P, L, L, D, P, P, P, I, P}},
    {"hk_rmsnorm_backward_f32", I, 11, {P, P, P, P, L, L, D, P, P, I, P}},
    {"hk_attention_backward_f32", I, 15, {P, P, P, P, L, L, L, L, L, I, F, P, P, P, P}},
    {"hk_unary_backward_f32", I, 7, {I, P, P, P, L, P, P}},
    {"hk_softmax_backward_f32", I, 8, {P, P, I, P, I, I, P, P}},
    {"hk_embedding_backward_shard_f32", I, 11, {I, P, L, P, L, L, L, L, P, I, P}},
    {"hk_reduce_sum_to_shape_f32", I, 7, {P, I, P, I, P, P, P}},
    {"hk_gather_backward_f32", I, 9, {P, I, P, I, I, P, L, P, P}},
    {"hk_vocab_ce_loss_f32", I, 10, {P, P, I, P, L, L, I, L, P, P}},
    {"hk_gather_nd", I, 11, {L, P, I, P, I, P, I, P, I, P, P}},
    {"hk_gather_elements", I, 10, {L, P, I, P, I, I, P, P, P, P}},
    {"hk_scatter_nd", I, 12, {I, P, I, P, I, P, I, P, P, I, P, P}},
    {"hk_gather_nd_backward_f32", I, 10, {P, I, P, I, P, I, P, I, P, P}},
    {"hk_gather_elements_backward_f32", I, 9, {P, I, P, I, I, P, P, P, P}},
/* the vocab-parallel kernels with the TP rank's vocab_start: the .def's
 * TP_KERNEL set (runtime/abi/stage_abi.def) */
#define STAGE_ABI_IF_CORE STAGE_ABI_DROP
#define STAGE_ABI_IF_TP STAGE_ABI_DROP
#define STAGE_ABI_IF_TP_KERNEL STAGE_ABI_KEEP
#define STAGE_ABI_IF_CUDA STAGE_ABI_DROP
#include "stage_abi_externs.inc"
};
const int lower_node_nexterns = (int)(sizeof lower_node_externs / sizeof lower_node_externs[0]);
#undef P
#undef I
#undef L
#undef F
#undef D

/* ------------------------------------------------------------ helpers */

void lower_call_free(LeCall *c) {
    for (int a = 0; a < c->nargs; a++) {
        if (c->args[a].kind == LE_ARG_I64S) free((void *)c->args[a].vals);
        if (c->args[a].kind == LE_ARG_BYTES) free((void *)c->args[a].bytes);
    }
    memset(c, 0, sizeof *c);
}

LeCall *ln_push(LnCtx *c, const char *fn) {
    LnOut *o = c->out;
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->calls = ir_xrealloc(o->calls, sizeof *o->calls * (size_t)o->cap);
    }
    LeCall *k = &o->calls[o->n++];
    memset(k, 0, sizeof *k);
    k->fn = fn;
    return k;
}

static LeArg *next_arg(LeCall *k) {
    if (k->nargs >= LE_MAX_ARGS) { /* a table bug; llvm_emit reports the count */
        static LeArg sink;
        return &sink;
    }
    return &k->args[k->nargs++];
}

void ln_ptr(LnCtx *c, LeCall *k, const IrValue *v) {
    LeArg *a = next_arg(k);
    *a = (LeArg){.kind = LE_ARG_NULL};
    if (!v) return;
    int r = c->loc(c->u, v, a);
    if (r < 0) {
        *a = (LeArg){.kind = LE_ARG_NULL};
        c->bad = 1;
        return;
    }
    if (r == 1) { /* a constant: its bytes go into the binary */
        IrError err;
        const void *d = ir_value_data((IrValue *)v, &err);
        size_t nb = ir_value_bytes(v);
        *a = (LeArg){.kind = LE_ARG_NULL};
        if (!nb) return;
        if (!d) {
            c->bad = 1;
            return;
        }
        void *copy = ir_xmalloc(nb);
        memcpy(copy, d, nb);
        *a = (LeArg){.kind = LE_ARG_BYTES, .bytes = copy, .nbytes = (int64_t)nb};
    }
}

void ln_i32(LeCall *k, int64_t v) { *next_arg(k) = (LeArg){.kind = LE_ARG_I32, .i = v}; }
void ln_i64(LeCall *k, int64_t v) { *next_arg(k) = (LeArg){.kind = LE_ARG_I64, .i = v}; }
void ln_f32(LeCall *k, double v) { *next_arg(k) = (LeArg){.kind = LE_ARG_F32, .f = v}; }
void ln_f64(LeCall *k, double v) { *next_arg(k) = (LeArg){.kind = LE_ARG_F64, .f = v}; }
void ln_null(LeCall *k) { *next_arg(k) = (LeArg){.kind = LE_ARG_NULL}; }

void ln_i64s(LeCall *k, int n, const int64_t *vals) {
    int m = n > 0 ? n : 1;
    int64_t *a = ir_xcalloc((size_t)m, sizeof *a);
    if (n > 0) memcpy(a, vals, sizeof *a * (size_t)n);
    *next_arg(k) = (LeArg){.kind = LE_ARG_I64S, .n = m, .vals = a};
}

void ln_shape(LeCall *k, const IrValue *v) {
    ln_i32(k, v->shape.rank);
    ln_i64s(k, v->shape.rank, v->shape.dims);
}

int ln_fail(LnCtx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
    return 0;
}

int64_t ln_numel(const IrValue *v) { return ir_shape_numel(&v->shape); }
static size_t esz(const IrValue *v) { return ir_dtype_size(v->dtype); }
int ln_has_in(const LnCtx *c, int i) { return i < c->n->nin && c->n->in[i]; }
int ln_has_out(const LnCtx *c, int i) { return i < c->n->nout && c->n->out[i]; }

int ln_const_ints(LnCtx *c, int i, int64_t *out, int max) {
    IrValue *v = c->n->in[i];
    if (!v || v->kind != IR_VK_CONST || (v->dtype != IR_I64 && v->dtype != IR_I32)) return -1;
    int64_t n = ln_numel(v);
    if (n > max) return -1;
    IrError err;
    const void *d = n ? ir_value_data(v, &err) : NULL;
    if (n && !d) return -1;
    for (int64_t j = 0; j < n; j++)
        out[j] = v->dtype == IR_I64 ? ((const int64_t *)d)[j] : ((const int32_t *)d)[j];
    return (int)n;
}

int ln_norm_axis(int64_t a, int rank, int *out) {
    *out = 0;
    if (a < -rank || a >= (rank ? rank : 1)) return -1;
    *out = (int)(a < 0 ? a + rank : a);
    return 0;
}

#define IN(i) (c->n->in[i])
#define OUT(i) (c->n->out[i])

/* ------------------------------------------------------------ elementwise */

/* y = a op b, numpy broadcasting (hk_binary) */
static void push_binary(LnCtx *c, int op, const IrValue *a, const IrValue *b, const IrValue *y) {
    LeCall *k = ln_push(c, "hk_binary");
    ln_i32(k, op);
    ln_i32(k, a->dtype);
    ln_ptr(c, k, a);
    ln_shape(k, a);
    ln_i32(k, b->dtype);
    ln_ptr(c, k, b);
    ln_shape(k, b);
    ln_ptr(c, k, y);
    ln_shape(k, y);
    ln_null(k);
}

static int lw_binary(LnCtx *c, int op) {
    const IrValue *a = IN(0), *b = IN(1), *y = OUT(0);
    IrDType want = op >= HK_EQ ? IR_BOOL : a->dtype;
    if (y->dtype != want) return ln_fail(c, "output dtype");
    if (op == HK_MOD && (ir_attr_int(c->n, "fmod", 0) || ir_dtype_is_float(a->dtype)))
        op = HK_FMOD;
    push_binary(c, op, a, b, y);
    return 1;
}

/* Max/Min over any number of inputs: broadcast the first, fold the rest in */
static int lw_variadic(LnCtx *c, int op) {
    const IrValue *y = OUT(0);
    LeCall *k = ln_push(c, "hk_expand");
    ln_i64(k, (int64_t)esz(y));
    ln_ptr(c, k, IN(0));
    ln_shape(k, IN(0));
    ln_ptr(c, k, y);
    ln_shape(k, y);
    ln_null(k);
    for (int i = 1; i < c->n->nin; i++) {
        const IrValue *b = IN(i);
        if (!b) continue;
        push_binary(c, op, y, b, y);
    }
    return 1;
}

static int lw_where(LnCtx *c, int unused) {
    const IrValue *y = OUT(0);
    LeCall *k = ln_push(c, "hk_where");
    ln_i64(k, (int64_t)esz(y));
    for (int i = 0; i < 3; i++) {
        ln_ptr(c, k, IN(i));
        ln_shape(k, IN(i));
    }
    ln_ptr(c, k, y);
    ln_shape(k, y);
    ln_null(k);
    return 1;
}

int ln_unary_op(LnCtx *c, int *op) {
    if (c->n->op == IR_OP_GELU) {
        const char *ap = ir_attr_string(c->n, "approximate", "none");
        if (!strcmp(ap, "tanh")) *op = HK_GELU_TANH;
        else if (strcmp(ap, "none")) return ln_fail(c, "approximate='%s'", ap);
    }
    return 1;
}

static int lw_unary(LnCtx *c, int op) {
    const IrValue *x = IN(0), *y = OUT(0);
    if (ln_numel(x) != ln_numel(y)) return ln_fail(c, "output size");
    if (!ln_unary_op(c, &op)) return 0;
    LeCall *k = ln_push(c, "hk_unary");
    ln_i32(k, op);
    ln_i32(k, x->dtype);
    ln_ptr(c, k, x);
    ln_ptr(c, k, y);
    ln_i64(k, ln_numel(x));
    ln_null(k);
    return 1;
}

/* Identity, Reshape, Squeeze, Unsqueeze, Flatten, TpCopy, Dropout
 * (inference): row-major data is unchanged */
/* lower_node.h; views: memplan.c plan_views */
int ln_same_buffer(LnCtx *c, const IrValue *x, const IrValue *y) {
    LeArg a = {0}, b = {0};
    if (c->loc(c->u, x, &a) != 0 || c->loc(c->u, y, &b) != 0) return 0;
    return a.kind == b.kind && a.kind != LE_ARG_NULL && a.off == b.off;
}

static int lw_copy(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *y = OUT(0);
    if (ln_numel(x) != ln_numel(y)) return ln_fail(c, "output size");
    int64_t nb = ln_numel(x) * (int64_t)esz(x);
    if (nb && !ln_same_buffer(c, x, y)) {
        LeCall *k = ln_push(c, "hetrt_copy");
        ln_ptr(c, k, y);
        ln_ptr(c, k, x);
        ln_i64(k, nb);
    }
    if (c->n->op == IR_OP_DROPOUT && ln_has_out(c, 1)) { /* inference mask: all kept */
        if (OUT(1)->dtype != IR_BOOL) return ln_fail(c, "mask dtype");
        LeCall *k = ln_push(c, "hk_entry_memset");
        ln_ptr(c, k, OUT(1));
        ln_i32(k, 1);
        ln_i64(k, ln_numel(OUT(1)));
    }
    return 1;
}

/* a weight's stochastically rounded bf16 copy (attribute sr; host and CUDA
 * lowering): the runtime knows the step its bits are drawn with */
int lower_cast_sr(LnCtx *c) {
    const IrValue *x = IN(0), *y = OUT(0);
    if (x->dtype != IR_F32 || y->dtype != IR_BF16 || ln_numel(x) != ln_numel(y))
        return ln_fail(c, "a stochastically rounded Cast (sr) is f32 -> bf16 of one shape");
    LeCall *k = ln_push(c, "hetrt_round_bf16_sr");
    ln_ptr(c, k, x);
    ln_ptr(c, k, y);
    ln_i64(k, ln_numel(x));
    ln_i64(k, ir_attr_int(c->n, "sr", 0));
    return 1;
}

static int lw_cast(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *y = OUT(0);
    if (ir_attr_int(c->n, "sr", 0)) return lower_cast_sr(c);
    if (ln_numel(x) != ln_numel(y)) return ln_fail(c, "output size");
    LeCall *k = ln_push(c, "hk_cast");
    ln_i32(k, x->dtype);
    ln_ptr(c, k, x);
    ln_i32(k, y->dtype);
    ln_ptr(c, k, y);
    ln_i64(k, ln_numel(x));
    ln_null(k);
    return 1;
}

static int lw_clip(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *y = OUT(0);
    if (ln_numel(x) != ln_numel(y)) return ln_fail(c, "output size");
    for (int i = 1; i <= 2; i++)
        if (ln_has_in(c, i) && ln_numel(IN(i)) != 1) return ln_fail(c, "non-scalar bound");
    LeCall *k = ln_push(c, "hk_clip");
    ln_i32(k, x->dtype);
    ln_ptr(c, k, x);
    ln_ptr(c, k, ln_has_in(c, 1) ? IN(1) : NULL);
    ln_ptr(c, k, ln_has_in(c, 2) ? IN(2) : NULL);
    ln_ptr(c, k, y);
    ln_i64(k, ln_numel(x));
    ln_null(k);
    return 1;
}

static int lw_isnan(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *y = OUT(0);
    if (ln_numel(x) != ln_numel(y) || y->dtype != IR_BOOL) return ln_fail(c, "output");
    LeCall *k = ln_push(c, "hk_isnan");
    ln_i32(k, x->dtype);
    ln_ptr(c, k, x);
    ln_ptr(c, k, y);
    ln_i64(k, ln_numel(x));
    ln_null(k);
    return 1;
}

/* ------------------------------------------------------------ linear algebra */

static int lw_matmul(LnCtx *c, int unused) {
    const IrValue *a = IN(0), *b = IN(1), *y = OUT(0);
    LeCall *k = ln_push(c, "hk_matmul");
    ln_i32(k, a->dtype);
    ln_ptr(c, k, a);
    ln_shape(k, a);
    ln_ptr(c, k, b);
    ln_shape(k, b);
    ln_ptr(c, k, y);
    ln_shape(k, y);
    ln_null(k);
    return 1;
}

static int lw_gemm(LnCtx *c, int unused) {
    const IrValue *a = IN(0), *b = IN(1), *y = OUT(0);
    if (a->shape.rank != 2 || b->shape.rank != 2 || y->shape.rank != 2)
        return ln_fail(c, "Gemm ranks");
    int ta = ir_attr_int(c->n, "transA", 0) != 0, tb = ir_attr_int(c->n, "transB", 0) != 0;
    int64_t M = a->shape.dims[ta ? 1 : 0], K = a->shape.dims[ta ? 0 : 1];
    int64_t Kb = b->shape.dims[tb ? 1 : 0], N = b->shape.dims[tb ? 0 : 1];
    if (K != Kb || y->shape.dims[0] != M || y->shape.dims[1] != N)
        return ln_fail(c, "Gemm shapes");
    const IrValue *cv = ln_has_in(c, 2) ? IN(2) : NULL;
    LeCall *k = ln_push(c, "hk_gemm_f32");
    ln_ptr(c, k, a);
    ln_ptr(c, k, b);
    ln_ptr(c, k, cv);
    if (cv) ln_shape(k, cv);
    else {
        ln_i32(k, 0);
        ln_null(k);
    }
    ln_i64(k, M);
    ln_i64(k, N);
    ln_i64(k, K);
    ln_i32(k, ta);
    ln_i32(k, tb);
    ln_f32(k, (float)ir_attr_float(c->n, "alpha", 1.0));
    ln_f32(k, (float)ir_attr_float(c->n, "beta", 1.0));
    ln_ptr(c, k, y);
    ln_null(k);
    return 1;
}

static int lw_linear(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *w = IN(1), *y = OUT(0);
    if (x->shape.rank < 1 || w->shape.rank != 2) return ln_fail(c, "Linear ranks");
    int64_t K = x->shape.dims[x->shape.rank - 1], N = w->shape.dims[1];
    if (w->shape.dims[0] != K) return ln_fail(c, "Linear shapes");
    int64_t M = K ? ln_numel(x) / K : 0;
    if (K == 0) M = ln_numel(y) / (N ? N : 1);
    if (ln_numel(y) != M * N) return ln_fail(c, "Linear output");
    if (ln_has_in(c, 2) && ln_numel(IN(2)) != N) return ln_fail(c, "Linear bias");
    /* bf16 operands: mixed precision (passes/mixed_precision.c, hk_bf16.h) */
    if (x->dtype != w->dtype || x->dtype != y->dtype ||
        (ln_has_in(c, 2) && IN(2)->dtype != x->dtype) || (x->dtype != IR_F32 && x->dtype != IR_BF16))
        return ln_fail(c, "Linear dtypes (f32 or bf16 throughout)");
    LeCall *k = ln_push(c, x->dtype == IR_BF16 ? "hk_linear_bf16" : "hk_linear_f32");
    ln_ptr(c, k, x);
    ln_ptr(c, k, w);
    ln_ptr(c, k, ln_has_in(c, 2) ? IN(2) : NULL);
    ln_i64(k, M);
    ln_i64(k, K);
    ln_i64(k, N);
    ln_ptr(c, k, y);
    return 1;
}

static int lw_attention(LnCtx *c, int unused) {
    const IrValue *q = IN(0), *kv = IN(1), *v = IN(2), *y = OUT(0);
    if (q->shape.rank < 2 || kv->shape.rank < 2 || v->shape.rank < 2)
        return ln_fail(c, "Attention ranks");
    int64_t T = q->shape.dims[q->shape.rank - 2], Dq = q->shape.dims[q->shape.rank - 1];
    int64_t S = kv->shape.dims[kv->shape.rank - 2], Dv = v->shape.dims[v->shape.rank - 1];
    if (kv->shape.dims[kv->shape.rank - 1] != Dq || v->shape.dims[v->shape.rank - 2] != S)
        return ln_fail(c, "Attention shapes");
    int64_t batch = T * Dq != 0 ? ln_numel(q) / (T * Dq) : 0;
    if ((S * Dq != 0 && ln_numel(kv) != batch * S * Dq) ||
        (S * Dv != 0 && ln_numel(v) != batch * S * Dv) || ln_numel(y) != batch * T * Dv)
        return ln_fail(c, "Attention batch dims");
    double scale = ir_attr_float(c->n, "scale", Dq > 0 ? 1.0 / sqrt((double)Dq) : 1.0);
    LeCall *k = ln_push(c, "hk_attention_f32");
    ln_ptr(c, k, q);
    ln_ptr(c, k, kv);
    ln_ptr(c, k, v);
    ln_i64(k, batch);
    ln_i64(k, T);
    ln_i64(k, S);
    ln_i64(k, Dq);
    ln_i64(k, Dv);
    ln_i32(k, ir_attr_int(c->n, "causal", 1) != 0);
    ln_f32(k, (float)scale);
    ln_ptr(c, k, y);
    ln_null(k);
    return 1;
}

/* ------------------------------------------------------------ reductions */

static int lw_reduce(LnCtx *c, int op) {
    const IrValue *x = IN(0), *y = OUT(0);
    int rank = x->shape.rank;
    int64_t axes[IR_MAX_RANK], red[IR_MAX_RANK];
    int na;
    if (ln_has_in(c, 1)) {
        if ((na = ln_const_ints(c, 1, axes, IR_MAX_RANK)) < 0)
            return ln_fail(c, "axes '%s' not a constant", IN(1)->name);
    } else {
        const int64_t *a;
        na = ir_attr_ints(c->n, "axes", &a);
        if (na > IR_MAX_RANK) return ln_fail(c, "too many axes");
        for (int i = 0; i < na; i++) axes[i] = a[i];
    }
    if (na == 0 && ir_attr_int(c->n, "noop_with_empty_axes", 0)) return lw_copy(c, 0);
    for (int i = 0; i < rank; i++) red[i] = na == 0;
    for (int i = 0; i < na; i++) {
        int a;
        if (ln_norm_axis(axes[i], rank, &a)) return ln_fail(c, "axis out of range");
        red[a] = 1;
    }
    int64_t ny = 1;
    for (int i = 0; i < rank; i++) ny *= red[i] ? 1 : x->shape.dims[i];
    if (ny != ln_numel(y)) return ln_fail(c, "reduced shape");
    LeCall *k = ln_push(c, "hk_entry_reduce");
    ln_i32(k, op);
    ln_i32(k, x->dtype);
    ln_ptr(c, k, x);
    ln_shape(k, x);
    ln_i64s(k, rank, red);
    ln_ptr(c, k, y);
    ln_null(k);
    return 1;
}

static int lw_softmax(LnCtx *c, int log) {
    const IrValue *x = IN(0);
    int axis = 0;
    if (ln_numel(x) != ln_numel(OUT(0))) return ln_fail(c, "output size");
    if (x->shape.rank && ln_norm_axis(ir_attr_int(c->n, "axis", -1), x->shape.rank, &axis))
        return ln_fail(c, "axis");
    LeCall *k = ln_push(c, "hk_softmax");
    ln_i32(k, x->dtype);
    ln_ptr(c, k, x);
    ln_shape(k, x);
    ln_i32(k, axis);
    ln_i32(k, log);
    ln_ptr(c, k, OUT(0));
    ln_null(k);
    return 1;
}

static int lw_cumsum(LnCtx *c, int unused) {
    const IrValue *x = IN(0);
    int64_t a;
    int axis = 0;
    if (ln_numel(x) != ln_numel(OUT(0))) return ln_fail(c, "output size");
    if (ln_const_ints(c, 1, &a, 1) != 1) return ln_fail(c, "axis not a constant");
    if (x->shape.rank && ln_norm_axis(a, x->shape.rank, &axis)) return ln_fail(c, "axis");
    LeCall *k = ln_push(c, "hk_cumsum");
    ln_i32(k, x->dtype);
    ln_ptr(c, k, x);
    ln_shape(k, x);
    ln_i32(k, axis);
    ln_i32(k, ir_attr_int(c->n, "exclusive", 0) != 0);
    ln_i32(k, ir_attr_int(c->n, "reverse", 0) != 0);
    ln_ptr(c, k, OUT(0));
    ln_null(k);
    return 1;
}

/* a scale / bias usable as n contiguous floats: the normalised dims exactly
 * (leading 1s aside); other broadcasts stay with the executor */
static int norm_param_ok(const IrValue *p, int rank, const int64_t *nd) {
    int pr = p->shape.rank;
    const int64_t *pd = p->shape.dims;
    while (pr > 0 && pd[0] == 1 && pr > rank) pr--, pd++;
    while (rank > 0 && nd[0] == 1 && rank > pr) rank--, nd++;
    if (pr != rank) return 0;
    for (int i = 0; i < pr; i++)
        if (pd[i] != nd[i]) return 0;
    return 1;
}

static int lw_norm(LnCtx *c, int unused) {
    const IrValue *x = IN(0);
    int axis, rank = x->shape.rank;
    if (ln_numel(x) != ln_numel(OUT(0)) || rank == 0) return ln_fail(c, "shape");
    if (ln_norm_axis(ir_attr_int(c->n, "axis", -1), rank, &axis)) return ln_fail(c, "axis");
    int64_t n = hk_numel(rank - axis, x->shape.dims + axis);
    int64_t outer = hk_numel(axis, x->shape.dims);
    double eps = ir_attr_float(c->n, "epsilon", 1e-5);
    int ln = c->n->op == IR_OP_LAYER_NORM, hb = ln && ln_has_in(c, 2);
    if (n <= 0) return ln_fail(c, "empty rows");
    if (!norm_param_ok(IN(1), rank - axis, x->shape.dims + axis) ||
        (hb && !norm_param_ok(IN(2), rank - axis, x->shape.dims + axis)))
        return ln_fail(c, "broadcast scale / bias");
    LeCall *k = ln_push(c, ln ? "hk_layernorm_f32" : "hk_rmsnorm_f32");
    ln_ptr(c, k, x);
    ln_ptr(c, k, IN(1));
    if (ln) ln_ptr(c, k, hb ? IN(2) : NULL);
    ln_i64(k, outer);
    ln_i64(k, n);
    ln_f64(k, eps);
    ln_ptr(c, k, OUT(0));
    return 1;
}

/* ------------------------------------------------------------ data movement */

static int lw_transpose(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *y = OUT(0);
    int r = x->shape.rank;
    int64_t perm[IR_MAX_RANK];
    const int64_t *p;
    int np = ir_attr_ints(c->n, "perm", &p), seen[IR_MAX_RANK] = {0};
    if (np != 0 && np != r) return ln_fail(c, "perm length");
    for (int i = 0; i < r; i++) {
        int a = r - 1 - i;
        if (np && ln_norm_axis(p[i], r, &a)) return ln_fail(c, "perm axis");
        perm[i] = a;
        if (seen[a]++ || y->shape.rank != r || y->shape.dims[i] != x->shape.dims[a])
            return ln_fail(c, "perm / output shape");
    }
    LeCall *k = ln_push(c, "hk_transpose");
    ln_i64(k, (int64_t)esz(x));
    ln_ptr(c, k, x);
    ln_shape(k, x);
    ln_i64s(k, r, perm);
    ln_ptr(c, k, y);
    return 1;
}

/* y = x[start + i * step] per axis (ydims): one hk_slice */
static void slice_call(LnCtx *c, const IrValue *x, const int64_t *start, const int64_t *step,
                       const IrValue *y) {
    LeCall *k = ln_push(c, "hk_slice");
    ln_i64(k, (int64_t)esz(x));
    ln_ptr(c, k, x);
    ln_shape(k, x);
    ln_i64s(k, x->shape.rank, start);
    ln_i64s(k, x->shape.rank, step);
    ln_i64s(k, y->shape.rank, y->shape.dims);
    ln_ptr(c, k, y);
}

/* Split: one slice per output along the axis */
static int lw_split(LnCtx *c, int unused) {
    const IrValue *x = IN(0);
    int axis, r = x->shape.rank;
    if (ln_norm_axis(ir_attr_int(c->n, "axis", 0), r, &axis)) return ln_fail(c, "axis");
    int64_t total = 0, start[IR_MAX_RANK] = {0}, step[IR_MAX_RANK];
    for (int d = 0; d < r; d++) step[d] = 1;
    for (int i = 0; i < c->n->nout; i++) {
        const IrValue *o = OUT(i);
        if (!o || o->shape.rank != r || o->dtype != x->dtype) return ln_fail(c, "outputs");
        for (int d = 0; d < r; d++)
            if (d != axis && o->shape.dims[d] != x->shape.dims[d]) return ln_fail(c, "outputs");
        total += o->shape.dims[axis];
    }
    if (total != x->shape.dims[axis]) return ln_fail(c, "sizes");
    for (int i = 0; i < c->n->nout; i++) {
        if (ln_numel(OUT(i))) slice_call(c, x, start, step, OUT(i));
        start[axis] += OUT(i)->shape.dims[axis];
    }
    return 1;
}

static int lw_concat(LnCtx *c, int unused) {
    const IrValue *y = OUT(0);
    int axis, r = y->shape.rank;
    if (ln_norm_axis(ir_attr_int(c->n, "axis", 0), r, &axis)) return ln_fail(c, "axis");
    int64_t total = 0;
    for (int i = 0; i < c->n->nin; i++) {
        const IrValue *x = IN(i);
        if (!x) continue;
        if (x->shape.rank != r) return ln_fail(c, "input rank");
        for (int d = 0; d < r; d++)
            if (d != axis && x->shape.dims[d] != y->shape.dims[d]) return ln_fail(c, "inputs");
        total += x->shape.dims[axis];
    }
    if (total != y->shape.dims[axis]) return ln_fail(c, "sizes");
    int64_t at = 0;
    for (int i = 0; i < c->n->nin; i++) {
        const IrValue *x = IN(i);
        if (!x) continue;
        if (ln_numel(x)) {
            LeCall *k = ln_push(c, "hk_entry_concat_part");
            ln_i64(k, (int64_t)esz(y));
            ln_ptr(c, k, x);
            ln_shape(k, x);
            ln_i32(k, axis);
            ln_i64(k, at);
            ln_i64(k, y->shape.dims[axis]);
            ln_ptr(c, k, y);
        }
        at += x->shape.dims[axis];
    }
    return 1;
}

/* ONNX Slice resolution (hostexec_ops.c run_slice) from constant operands
 * starts (in0), ends, axes, steps at input indices i0..i0+3 of the node, for
 * data of shape xs; 0 or -1 */
int ln_resolve_slice(LnCtx *c, int i0, const IrShape *xs, int64_t *start, int64_t *step,
                     int64_t *yd) {
    int r = xs->rank;
    int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], sp[IR_MAX_RANK];
    int ns = ln_const_ints(c, i0, st, IR_MAX_RANK), ne = ln_const_ints(c, i0 + 1, en, IR_MAX_RANK);
    if (ns < 0 || ne < 0 || ns != ne) return -1;
    int hax = ln_has_in(c, i0 + 2), hsp = ln_has_in(c, i0 + 3);
    if (hax && ln_const_ints(c, i0 + 2, ax, IR_MAX_RANK) != ns) return -1;
    if (hsp && ln_const_ints(c, i0 + 3, sp, IR_MAX_RANK) != ns) return -1;
    int seen[IR_MAX_RANK] = {0};
    for (int d = 0; d < r; d++) start[d] = 0, step[d] = 1, yd[d] = xs->dims[d];
    for (int i = 0; i < ns; i++) {
        int a;
        if (ln_norm_axis(hax ? ax[i] : i, r, &a) || seen[a]++) return -1;
        int64_t k = hsp ? sp[i] : 1;
        if (k == 0) return -1;
        yd[a] = ir_slice_axis(xs->dims[a], st[i], en[i], k, &start[a]);
        step[a] = k;
    }
    return 0;
}

static int lw_slice(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *y = OUT(0);
    int64_t start[IR_MAX_RANK], step[IR_MAX_RANK], yd[IR_MAX_RANK];
    if (ln_resolve_slice(c, 1, &x->shape, start, step, yd))
        return ln_fail(c, "starts/ends/axes/steps not constants");
    if (y->shape.rank != x->shape.rank) return ln_fail(c, "output rank");
    for (int d = 0; d < x->shape.rank; d++)
        if (yd[d] != y->shape.dims[d]) return ln_fail(c, "output shape");
    if (ln_numel(y)) slice_call(c, x, start, step, y);
    return 1;
}

static int lw_expand(LnCtx *c, int unused) {
    const IrValue *y = OUT(0);
    LeCall *k = ln_push(c, "hk_expand");
    ln_i64(k, (int64_t)esz(y));
    ln_ptr(c, k, IN(0));
    ln_shape(k, IN(0));
    ln_ptr(c, k, y);
    ln_shape(k, y);
    ln_null(k);
    return 1;
}

/* Shape: known at compile time, copied from constant bytes */
static int lw_shape(LnCtx *c, int unused) {
    const IrValue *x = IN(0);
    int r = x->shape.rank;
    int s, e;
    ir_shape_op_range(c->n, r, &s, &e);
    int64_t len = e > s ? e - s : 0;
    if (ln_numel(OUT(0)) != len || OUT(0)->dtype != IR_I64) return ln_fail(c, "output");
    if (!len) return 1;
    LeCall *k = ln_push(c, "hetrt_copy");
    ln_ptr(c, k, OUT(0));
    void *b = ir_xmalloc((size_t)len * 8);
    memcpy(b, x->shape.dims + s, (size_t)len * 8);
    k->args[k->nargs++] = (LeArg){.kind = LE_ARG_BYTES, .bytes = b, .nbytes = len * 8};
    ln_i64(k, len * 8);
    return 1;
}

static int lw_constant_of_shape(LnCtx *c, int unused) {
    const IrValue *y = OUT(0);
    LeCall *k = ln_push(c, "hk_fill");
    ln_i32(k, y->dtype);
    ln_f64(k, ir_attr_float(c->n, "value", 0.0));
    ln_ptr(c, k, y);
    ln_i64(k, ln_numel(y));
    ln_null(k);
    return 1;
}

static int lw_trilu(LnCtx *c, int unused) {
    const IrValue *x = IN(0);
    int64_t kk = 0;
    if (ln_numel(x) != ln_numel(OUT(0))) return ln_fail(c, "output size");
    if (ln_has_in(c, 1) && ln_const_ints(c, 1, &kk, 1) != 1) return ln_fail(c, "k not constant");
    LeCall *k = ln_push(c, "hk_trilu");
    ln_i64(k, (int64_t)esz(x));
    ln_ptr(c, k, x);
    ln_shape(k, x);
    ln_i64(k, kk);
    ln_i32(k, ir_attr_int(c->n, "upper", 1) != 0);
    ln_ptr(c, k, OUT(0));
    return 1;
}

static int lw_tile(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *y = OUT(0);
    int64_t rep[IR_MAX_RANK];
    int r = ln_const_ints(c, 1, rep, IR_MAX_RANK);
    if (r < 0 || r != x->shape.rank || y->shape.rank != r) return ln_fail(c, "repeats");
    for (int i = 0; i < r; i++)
        if (rep[i] < 0 || y->shape.dims[i] != x->shape.dims[i] * rep[i])
            return ln_fail(c, "output shape");
    LeCall *k = ln_push(c, "hk_tile");
    ln_i64(k, (int64_t)esz(x));
    ln_ptr(c, k, x);
    ln_shape(k, x);
    ln_i64s(k, r, rep);
    ln_ptr(c, k, y);
    return 1;
}

static int gather_call(LnCtx *c, int axis) {
    const IrValue *x = IN(0), *idx = IN(1), *y = OUT(0);
    int64_t inner = hk_numel(x->shape.rank - axis - 1, x->shape.dims + axis + 1);
    int64_t outer = hk_numel(axis, x->shape.dims);
    if (ln_numel(y) != outer * ln_numel(idx) * inner) return ln_fail(c, "gathered shape");
    LeCall *k = ln_push(c, "hk_gather");
    ln_i64(k, (int64_t)esz(x));
    ln_ptr(c, k, x);
    ln_shape(k, x);
    ln_i32(k, axis);
    ln_i32(k, idx->dtype);
    ln_ptr(c, k, idx);
    ln_i64(k, ln_numel(idx));
    ln_ptr(c, k, y);
    ln_null(k);
    return 1;
}

static int lw_gather(LnCtx *c, int unused) {
    int axis;
    if (ln_norm_axis(ir_attr_int(c->n, "axis", 0), IN(0)->shape.rank, &axis))
        return ln_fail(c, "axis");
    return gather_call(c, axis);
}

static int lw_embedding(LnCtx *c, int unused) {
    const IrValue *t = IN(0), *ids = IN(1);
    if (t->shape.rank != 2) return ln_fail(c, "table rank");
    if (!ir_node_attr(c->n, "vocab_start") && !ir_node_attr(c->n, "vocab_size"))
        return gather_call(c, 0);
    /* a vocab-parallel shard: on a TP stage vocab_start (rank 0's here)
     * depends on the TP rank: the runtime's entry shifts it */
    int64_t V = t->shape.dims[0], Dm = t->shape.dims[1];
    int64_t st = ir_attr_int(c->n, "vocab_start", 0), vs = ir_attr_int(c->n, "vocab_size", V);
    if (st < 0 || st + V > vs || ln_numel(OUT(0)) != ln_numel(ids) * Dm)
        return ln_fail(c, "vocab range / output");
    LeCall *k = ln_push(c, c->tp > 1 ? "hetrt_tp_embedding" : "hk_embedding_shard_f32");
    ln_i32(k, ids->dtype);
    ln_ptr(c, k, ids);
    ln_i64(k, ln_numel(ids));
    ln_ptr(c, k, t);
    ln_i64(k, st);
    ln_i64(k, V);
    ln_i64(k, vs);
    ln_i64(k, Dm);
    ln_ptr(c, k, OUT(0));
    if (c->tp <= 1) ln_null(k);
    return 1;
}

static int lw_gather_nd(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *idx = IN(1), *y = OUT(0);
    int64_t b = ir_attr_int(c->n, "batch_dims", 0);
    if (b < 0 || b >= x->shape.rank || idx->shape.rank < 1) return ln_fail(c, "batch_dims");
    int64_t kk = idx->shape.dims[idx->shape.rank - 1];
    int64_t want = hk_numel(idx->shape.rank - 1, idx->shape.dims);
    if (kk >= 1 && b + kk <= x->shape.rank)
        want *= hk_numel(x->shape.rank - (int)(b + kk), x->shape.dims + b + kk);
    if (ln_numel(y) != want) return ln_fail(c, "gathered shape");
    LeCall *k = ln_push(c, "hk_gather_nd");
    ln_i64(k, (int64_t)esz(x));
    ln_ptr(c, k, x);
    ln_shape(k, x);
    ln_i32(k, idx->dtype);
    ln_ptr(c, k, idx);
    ln_shape(k, idx);
    ln_i32(k, b);
    ln_ptr(c, k, y);
    ln_null(k);
    return 1;
}

static int lw_gather_elements(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *idx = IN(1), *y = OUT(0);
    int axis;
    if (ln_norm_axis(ir_attr_int(c->n, "axis", 0), x->shape.rank, &axis)) return ln_fail(c, "axis");
    if (idx->shape.rank != x->shape.rank || !ir_shape_equal(&idx->shape, &y->shape))
        return ln_fail(c, "shapes");
    LeCall *k = ln_push(c, "hk_gather_elements");
    ln_i64(k, (int64_t)esz(x));
    ln_ptr(c, k, x);
    ln_shape(k, x);
    ln_i32(k, axis);
    ln_i32(k, idx->dtype);
    ln_ptr(c, k, idx);
    ln_i64s(k, idx->shape.rank, idx->shape.dims);
    ln_ptr(c, k, y);
    ln_null(k);
    return 1;
}

static int lw_scatter_nd(LnCtx *c, int unused) {
    const IrValue *x = IN(0), *idx = IN(1), *u = IN(2);
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    const char *red = ir_attr_string(c->n, "reduction", "none");
    int r = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(red, names[i])) r = i;
    if (r < 0 || !ir_shape_equal(&x->shape, &OUT(0)->shape) || u->dtype != x->dtype)
        return ln_fail(c, "reduction / shapes");
    int64_t kk = idx->shape.rank ? idx->shape.dims[idx->shape.rank - 1] : 0;
    int64_t want = hk_numel(idx->shape.rank - 1, idx->shape.dims);
    if (kk >= 1 && kk <= x->shape.rank)
        want *= hk_numel(x->shape.rank - (int)kk, x->shape.dims + kk);
    if (ln_numel(u) != want) return ln_fail(c, "updates shape");
    LeCall *k = ln_push(c, "hk_scatter_nd");
    ln_i32(k, x->dtype);
    ln_ptr(c, k, x);
    ln_shape(k, x);
    ln_i32(k, idx->dtype);
    ln_ptr(c, k, idx);
    ln_shape(k, idx);
    ln_ptr(c, k, u);
    ln_i32(k, r);
    ln_ptr(c, k, OUT(0));
    ln_null(k);
    return 1;
}

/* ------------------------------------------------------------ the table */

typedef struct LnEntry {
    LnFn fn;
    int k;
} LnEntry;

#define BIN(K) {lw_binary, K}
#define UN(K) {lw_unary, K}
static const LnEntry table[IR_OP_COUNT] = {
    [IR_OP_ADD] = BIN(HK_ADD), [IR_OP_SUB] = BIN(HK_SUB), [IR_OP_MUL] = BIN(HK_MUL),
    [IR_OP_DIV] = BIN(HK_DIV), [IR_OP_POW] = BIN(HK_POW), [IR_OP_MOD] = BIN(HK_MOD),
    [IR_OP_MAX] = {lw_variadic, HK_MAX}, [IR_OP_MIN] = {lw_variadic, HK_MIN},
    [IR_OP_EQUAL] = BIN(HK_EQ), [IR_OP_LESS] = BIN(HK_LT), [IR_OP_LESS_OR_EQUAL] = BIN(HK_LE),
    [IR_OP_GREATER] = BIN(HK_GT), [IR_OP_GREATER_OR_EQUAL] = BIN(HK_GE),
    [IR_OP_AND] = BIN(HK_AND), [IR_OP_OR] = BIN(HK_OR), [IR_OP_XOR] = BIN(HK_XOR),
    [IR_OP_WHERE] = {lw_where, 0},
    [IR_OP_NEG] = UN(HK_NEG), [IR_OP_ABS] = UN(HK_ABS), [IR_OP_SQRT] = UN(HK_SQRT),
    [IR_OP_RECIPROCAL] = UN(HK_RECIP), [IR_OP_EXP] = UN(HK_EXP), [IR_OP_LOG] = UN(HK_LOG),
    [IR_OP_SIN] = UN(HK_SIN), [IR_OP_COS] = UN(HK_COS), [IR_OP_TANH] = UN(HK_TANH),
    [IR_OP_SIGMOID] = UN(HK_SIGMOID), [IR_OP_ERF] = UN(HK_ERF), [IR_OP_RELU] = UN(HK_RELU),
    [IR_OP_FLOOR] = UN(HK_FLOOR), [IR_OP_CEIL] = UN(HK_CEIL), [IR_OP_NOT] = UN(HK_NOT),
    [IR_OP_GELU] = UN(HK_GELU), [IR_OP_SILU] = UN(HK_SILU),
    [IR_OP_IS_NAN] = {lw_isnan, 0},
    [IR_OP_CAST] = {lw_cast, 0},
    [IR_OP_CLIP] = {lw_clip, 0},
    [IR_OP_IDENTITY] = {lw_copy, 0},
    [IR_OP_TP_COPY] = {lw_copy, 0},
    [IR_OP_DROPOUT] = {lw_copy, 0},
    [IR_OP_RESHAPE] = {lw_copy, 0},
    [IR_OP_SQUEEZE] = {lw_copy, 0},
    [IR_OP_UNSQUEEZE] = {lw_copy, 0},
    [IR_OP_FLATTEN] = {lw_copy, 0},
    [IR_OP_MATMUL] = {lw_matmul, 0},
    [IR_OP_GEMM] = {lw_gemm, 0},
    [IR_OP_LINEAR] = {lw_linear, 0},
    [IR_OP_ATTENTION] = {lw_attention, 0},
    [IR_OP_REDUCE_MEAN] = {lw_reduce, HK_RMEAN},
    [IR_OP_REDUCE_SUM] = {lw_reduce, HK_RSUM},
    [IR_OP_REDUCE_MAX] = {lw_reduce, HK_RMAX},
    [IR_OP_SOFTMAX] = {lw_softmax, 0},
    [IR_OP_LOG_SOFTMAX] = {lw_softmax, 1},
    [IR_OP_CUMSUM] = {lw_cumsum, 0},
    [IR_OP_LAYER_NORM] = {lw_norm, 0},
    [IR_OP_RMS_NORM] = {lw_norm, 0},
    [IR_OP_TRANSPOSE] = {lw_transpose, 0},
    [IR_OP_SPLIT] = {lw_split, 0},
    [IR_OP_CONCAT] = {lw_concat, 0},
    [IR_OP_SLICE] = {lw_slice, 0},
    [IR_OP_EXPAND] = {lw_expand, 0},
    [IR_OP_SHAPE] = {lw_shape, 0},
    [IR_OP_CONSTANT_OF_SHAPE] = {lw_constant_of_shape, 0},
    [IR_OP_TRILU] = {lw_trilu, 0},
    [IR_OP_TILE] = {lw_tile, 0},
    [IR_OP_GATHER] = {lw_gather, 0},
    [IR_OP_EMBEDDING] = {lw_embedding, 0},
    [IR_OP_GATHER_ND] = {lw_gather_nd, 0},
    [IR_OP_GATHER_ELEMENTS] = {lw_gather_elements, 0},
    [IR_OP_SCATTER_ND] = {lw_scatter_nd, 0},
};

int lower_node_has_op(IrOp op) {
    int k;
    return ((int)op >= 0 && op < IR_OP_COUNT && table[op].fn) || lower_node_train_fn(op, &k);
}

int lower_node(LnCtx *c) {
    IrNode *n = c->n;
    c->why[0] = 0;
    c->bad = 0;
    int k = 0;
    LnFn fn = (int)n->op >= 0 && n->op < IR_OP_COUNT ? table[n->op].fn : NULL;
    if (fn) k = table[n->op].k;
    else fn = lower_node_train_fn(n->op, &k);
    if (!fn) return ln_fail(c, "no lowering for %s", ir_op_name(n->op));
    /* what the executor would refuse (dtypes, arity) stays with it, so the
     * run-time error is the executor's */
    char why[160];
    if (!hexec_node_supported(n, why, sizeof why)) return ln_fail(c, "%s", why);
    for (int i = 0; i < n->nout; i++)
        if (i > 0 && !n->out[i] && !ir_op_has(n->op, IR_OPF_OPT_OUTS))
            return ln_fail(c, "unused output %d", i);
    if (!n->out[0]) return ln_fail(c, "no output 0");
    int start = c->out->n;
    int r = fn(c, k);
    if (r == 1 && c->bad) r = ln_fail(c, "an operand has no buffer");
    if (r != 1) {
        for (int i = start; i < c->out->n; i++) lower_call_free(&c->out->calls[i]);
        c->out->n = start;
        return 0;
    }
    /* every status-returning hk_* entry takes `char *err` last: the module's
     * error buffer, so a failure says why (stage_abi.h hetc_kernel_err) */
    for (int i = start; i < c->out->n; i++) {
        LeCall *k = &c->out->calls[i];
        for (int x = 0; x < lower_node_nexterns; x++)
            if (!strcmp(lower_node_externs[x].name, k->fn) && lower_node_externs[x].ret == LE_I32 &&
                !strncmp(k->fn, "hk_", 3) && k->nargs > 0 &&
                k->args[k->nargs - 1].kind == LE_ARG_NULL)
                k->args[k->nargs - 1] = (LeArg){.kind = LE_ARG_ERRBUF};
    }
    return 1;
}

/* The host backend's codegen row (lower_node.h): the host kernels above, no
 * runtime entries of its own, generated kernels allowed (host arena). */
const LowerBackend lower_backend_host = {"host", lower_node, NULL, 0, LOWER_FUSE_HOST};
