/* Direct kernel calls for --backend=cuda stage programs (issue 15 item 5):
 * the CUDA-side table next to lower_node.c's host table.  A node becomes a
 * call of a runtime/cuda entry (hetrt_cu_*, stage_abi.h) that launches the
 * kernels/cuda kernel on the stage's stream, with shapes and broadcast
 * strides resolved here; a node without an entry, or with an operand this
 * backend cannot take directly, stays a hetrt_node call (interp/cuda).
 *
 * What can go direct on the device:
 *   - fp32 elementwise Add/Sub/Mul/Div/Pow and two-input Max/Min (numpy
 *     broadcast), the unary ops and UnaryGrad: the same kernels the device
 *     executor's adapters (interp/cuda/cudaexec_ops.c) call, so a direct call
 *     and an interpreted node compute the same bits;
 *   - Linear and LinearGrad: cuBLASLt GEMMs (hkc_gemm_f32) plus the bias
 *     broadcast / column sum, as the executor's run_linear / run_linear_grad;
 *   - LayerNorm / RMSNorm and their gradients over the last axis
 *     (hkc_norm_f32, hkc_norm_grad_f32; the statistics recomputed in the
 *     backend's device scratch);
 *   - AdamW: the fused kernel (hkc_adamw_f32) in place, its scalars read
 *     from the arena on the device;
 *   - nodes whose HOST lowering (lower_node.c) is only hetrt_copy /
 *     hetrt_zero calls (Identity, Reshape, Squeeze, ...): those runtime
 *     entries are the backend's own device copies.
 * Never a constant operand: lower_node.c embeds constants as bytes of the
 * binary (host memory), which a kernel on the device cannot read; such nodes
 * stay interpreted (the interpreter copies constants to the device once).
 * The op numbering is kernels/host's (HkBinOp, HkUnOp, HkUnaryGrad), which
 * kernels/cuda/hkc.h mirrors. */
#include <string.h>

#include "hk.h"
#include "hk_train.h"
#include "lower_node.h"

#define IN(i) (c->n->in[i])
#define OUT(i) (c->n->out[i])
/* the .def's CUDA set (runtime/abi/stage_abi.def) */
const LeExtern lower_node_cuda_externs[] = {
#define STAGE_ABI_IF_CORE STAGE_ABI_DROP
#define STAGE_ABI_IF_TP STAGE_ABI_DROP
#define STAGE_ABI_IF_TP_KERNEL STAGE_ABI_DROP
#define STAGE_ABI_IF_CUDA STAGE_ABI_KEEP
#include "stage_abi_externs.inc"
};
#define NCUDA_EXTERNS ((int)(sizeof lower_node_cuda_externs / sizeof lower_node_cuda_externs[0]))
const int lower_node_cuda_nexterns = NCUDA_EXTERNS;

static int all_f32(const IrNode *n) {
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && n->in[i]->dtype != IR_F32) return 0;
    for (int i = 0; i < n->nout; i++)
        if (n->out[i] && n->out[i]->dtype != IR_F32) return 0;
    return 1;
}

/* Strides (elements) of v broadcast, numpy-style, to y's shape; -1 if not. */
static int bcast(const IrValue *v, const IrValue *y, int64_t *st) {
    int r = v->shape.rank, R = y->shape.rank, off = R - r;
    if (off < 0) return -1;
    for (int d = 0; d < R; d++) st[d] = 0;
    int64_t acc = 1;
    for (int d = r - 1; d >= 0; d--) {
        int64_t n = v->shape.dims[d];
        if (n != 1 && n != y->shape.dims[d + off]) return -1;
        st[d + off] = n == 1 ? 0 : acc;
        acc *= n;
    }
    return 0;
}

static int cu_binary(LnCtx *c, int op) {
    if (c->n->nin != 2 || !IN(0) || !IN(1)) return ln_fail(c, "not two inputs");
    const IrValue *y = OUT(0);
    int R = y->shape.rank;
    if (R > 8) return ln_fail(c, "rank %d > 8", R);
    int64_t sa[8], sb[8];
    if (bcast(IN(0), y, sa) || bcast(IN(1), y, sb)) return ln_fail(c, "not a broadcast");
    LeCall *k = ln_push(c, "hetrt_cu_binary");
    ln_i32(k, op);
    ln_i32(k, R);
    ln_i64s(k, R, y->shape.dims);
    ln_ptr(c, k, IN(0));
    ln_i64s(k, R, sa);
    ln_ptr(c, k, IN(1));
    ln_i64s(k, R, sb);
    ln_ptr(c, k, y);
    return 1;
}

static int cu_unary(LnCtx *c, int op) {
    const IrValue *x = IN(0), *y = OUT(0);
    if (ln_numel(x) != ln_numel(y)) return ln_fail(c, "output size");
    if (!ln_unary_op(c, &op)) return 0;
    LeCall *k = ln_push(c, "hetrt_cu_unary");
    ln_i32(k, op);
    ln_ptr(c, k, x);
    ln_ptr(c, k, y);
    ln_i64(k, ln_numel(x));
    return 1;
}

static int cu_unary_grad(LnCtx *c, int unused) {
    (void)unused;
    HkUnaryGrad fn;
    const char *name = ir_attr_string(c->n, "fn", "");
    if (hk_unary_grad_from_name(name, &fn)) return ln_fail(c, "fn '%s'", name);
    int64_t n = ln_numel(IN(0));
    int hy = ln_has_in(c, 2);
    if (ln_numel(IN(1)) != n || (hy && ln_numel(IN(2)) != n) || ln_numel(OUT(0)) != n)
        return ln_fail(c, "shapes");
    LeCall *k = ln_push(c, "hetrt_cu_unary_grad");
    ln_i32(k, fn);
    ln_ptr(c, k, IN(0));
    ln_ptr(c, k, hy ? IN(2) : NULL);
    ln_ptr(c, k, IN(1));
    ln_ptr(c, k, OUT(0));
    ln_i64(k, n);
    return 1;
}

/* Linear (x[..., K] w[K, N] + b[N]) as the device executor's run_linear */
static int linear_dims(LnCtx *c, int64_t *M, int64_t *K, int64_t *N) {
    const IrValue *x = IN(0), *w = IN(1);
    if (w->shape.rank != 2 || x->shape.rank < 1) return ln_fail(c, "ranks");
    *K = w->shape.dims[0], *N = w->shape.dims[1];
    if (x->shape.dims[x->shape.rank - 1] != *K || *K == 0) return ln_fail(c, "inner dims");
    *M = ln_numel(x) / *K;
    return 1;
}

/* The operands' dtype: IR_F32 throughout, or IR_BF16 (bf16-mixed: x, w, b,
 * y, and LinearGrad's dy and dx bf16; its dw, db f32, as hk_linear_backward_bf16
 * writes them), else IR_UNDEF (the node stays interpreted). */
static IrDType linear_dtype(const LnCtx *c, int grad) {
    IrDType t = IN(0)->dtype;
    if (t != IR_F32 && t != IR_BF16) return IR_UNDEF;
    for (int i = 1; i < c->n->nin; i++)
        if (ln_has_in(c, i) && IN(i)->dtype != t) return IR_UNDEF;
    for (int i = 0; i < c->n->nout; i++)
        if (ln_has_out(c, i) && OUT(i)->dtype != (grad && i > 0 ? IR_F32 : t)) return IR_UNDEF;
    return t;
}

/* bf16-mixed's Casts, f32 <-> bf16 (other casts stay interpreted: the
 * executor's run_cast covers them) */
static int cu_cast(LnCtx *c, int unused) {
    (void)unused;
    const IrValue *x = IN(0), *y = OUT(0);
    int ok = (x->dtype == IR_F32 && y->dtype == IR_BF16) ||
             (x->dtype == IR_BF16 && y->dtype == IR_F32);
    if (!ok) return ln_fail(c, "Cast %s -> %s (f32 <-> bf16 only)", ir_dtype_name(x->dtype),
                            ir_dtype_name(y->dtype));
    if (ln_numel(x) != ln_numel(y)) return ln_fail(c, "output size");
    LeCall *k = ln_push(c, "hetrt_cu_cast");
    ln_i32(k, x->dtype);
    ln_ptr(c, k, x);
    ln_i32(k, y->dtype);
    ln_ptr(c, k, y);
    ln_i64(k, ln_numel(x));
    return 1;
}

static int cu_linear(LnCtx *c, int unused) {
    (void)unused;
    int64_t M, K, N;
    if (!linear_dims(c, &M, &K, &N)) return 0;
    int hb = ln_has_in(c, 2);
    if ((hb && ln_numel(IN(2)) != N) || ln_numel(OUT(0)) != M * N) return ln_fail(c, "shapes");
    if (OUT(0) == IN(0) || OUT(0) == IN(1)) return ln_fail(c, "in place");
    IrDType t = linear_dtype(c, 0);
    if (t == IR_UNDEF) return ln_fail(c, "dtypes (f32 or bf16 throughout)");
    LeCall *k = ln_push(c, t == IR_BF16 ? "hetrt_cu_linear_bf16" : "hetrt_cu_linear");
    ln_ptr(c, k, IN(0));
    ln_ptr(c, k, IN(1));
    ln_ptr(c, k, hb ? IN(2) : NULL);
    ln_i64(k, M);
    ln_i64(k, K);
    ln_i64(k, N);
    ln_ptr(c, k, OUT(0));
    return 1;
}

static int cu_linear_grad(LnCtx *c, int unused) {
    (void)unused;
    int64_t M, K, N;
    if (c->n->nin < 3 || !IN(2) || !linear_dims(c, &M, &K, &N)) return ln_fail(c, "operands");
    if (ln_numel(IN(2)) != M * N) return ln_fail(c, "dy shape");
    IrDType t = linear_dtype(c, 1);
    if (t == IR_UNDEF) return ln_fail(c, "dtypes (f32, or bf16 with f32 dw and db)");
    LeCall *k = ln_push(c, t == IR_BF16 ? "hetrt_cu_linear_grad_bf16" : "hetrt_cu_linear_grad");
    ln_ptr(c, k, IN(0));
    ln_ptr(c, k, IN(1));
    ln_ptr(c, k, IN(2));
    ln_i64(k, M);
    ln_i64(k, K);
    ln_i64(k, N);
    for (int i = 0; i < 3; i++) ln_ptr(c, k, ln_has_out(c, i) ? OUT(i) : NULL);
    return 1;
}

/* AdamW in place on the arena (lower_node_train.c's lw_adamw, the device
 * executor's run_adamw); the lr / step / clip-scale scalars must be arena
 * values (a constant is host memory: the node stays interpreted) */
static int cu_adamw(LnCtx *c, int unused) {
    (void)unused;
    return ln_adamw_args(c, "hetrt_cu_adamw", 1) != NULL;
}

/* LayerNorm / RMSNorm over the last axis with scale (and bias) of the row
 * length, as the device executor's run_norm / run_norm_grad */
static int norm_rows(LnCtx *c, int64_t *rows, int64_t *len) {
    const IrValue *x = IN(0);
    int r = x->shape.rank;
    int64_t a = ir_attr_int(c->n, "axis", -1);
    if (r < 1 || (a != -1 && a != r - 1)) return ln_fail(c, "axis");
    *len = x->shape.dims[r - 1];
    if (*len <= 0) return ln_fail(c, "empty rows");
    *rows = ln_numel(x) / *len;
    if (ln_numel(IN(1)) != *len) return ln_fail(c, "scale size");
    return 1;
}

static int cu_norm(LnCtx *c, int rms) {
    int64_t rows, len;
    if (!norm_rows(c, &rows, &len)) return 0;
    int hb = !rms && ln_has_in(c, 2);
    if ((hb && ln_numel(IN(2)) != len) || ln_numel(OUT(0)) != rows * len)
        return ln_fail(c, "shapes");
    LeCall *k = ln_push(c, "hetrt_cu_norm");
    ln_i32(k, rms);
    ln_ptr(c, k, IN(0));
    ln_ptr(c, k, IN(1));
    ln_ptr(c, k, hb ? IN(2) : NULL);
    ln_i64(k, rows);
    ln_i64(k, len);
    ln_f64(k, ir_attr_float(c->n, "epsilon", 1e-5));
    ln_ptr(c, k, OUT(0));
    return 1;
}

static int cu_norm_grad(LnCtx *c, int rms) {
    int64_t rows, len;
    if (c->n->nin < 3 || !IN(2) || !norm_rows(c, &rows, &len)) return ln_fail(c, "operands");
    if (ln_numel(IN(2)) != rows * len) return ln_fail(c, "dy size");
    LeCall *k = ln_push(c, "hetrt_cu_norm_grad");
    ln_i32(k, rms);
    ln_ptr(c, k, IN(0));
    ln_ptr(c, k, IN(1));
    ln_ptr(c, k, IN(2));
    ln_i64(k, rows);
    ln_i64(k, len);
    ln_f64(k, ir_attr_float(c->n, "epsilon", 1e-5));
    for (int i = 0; i < 3; i++) /* dx, dscale, dbias (RMSNorm: none) */
        ln_ptr(c, k, (!rms || i < 2) && ln_has_out(c, i) ? OUT(i) : NULL);
    return 1;
}

typedef struct CuEntry {
    LnFn fn;
    int k;
    int multi_out; /* outputs beyond the first are the entry's (optional) */
} CuEntry;

static const CuEntry table[IR_OP_COUNT] = {
    [IR_OP_ADD] = {cu_binary, HK_ADD}, [IR_OP_SUB] = {cu_binary, HK_SUB},
    [IR_OP_MUL] = {cu_binary, HK_MUL}, [IR_OP_DIV] = {cu_binary, HK_DIV},
    [IR_OP_POW] = {cu_binary, HK_POW}, [IR_OP_MAX] = {cu_binary, HK_MAX},
    [IR_OP_MIN] = {cu_binary, HK_MIN},
    [IR_OP_NEG] = {cu_unary, HK_NEG}, [IR_OP_ABS] = {cu_unary, HK_ABS},
    [IR_OP_SQRT] = {cu_unary, HK_SQRT}, [IR_OP_RECIPROCAL] = {cu_unary, HK_RECIP},
    [IR_OP_EXP] = {cu_unary, HK_EXP}, [IR_OP_LOG] = {cu_unary, HK_LOG},
    [IR_OP_SIN] = {cu_unary, HK_SIN}, [IR_OP_COS] = {cu_unary, HK_COS},
    [IR_OP_TANH] = {cu_unary, HK_TANH}, [IR_OP_SIGMOID] = {cu_unary, HK_SIGMOID},
    [IR_OP_ERF] = {cu_unary, HK_ERF}, [IR_OP_RELU] = {cu_unary, HK_RELU},
    [IR_OP_FLOOR] = {cu_unary, HK_FLOOR}, [IR_OP_CEIL] = {cu_unary, HK_CEIL},
    [IR_OP_GELU] = {cu_unary, HK_GELU}, [IR_OP_SILU] = {cu_unary, HK_SILU},
    [IR_OP_UNARY_GRAD] = {cu_unary_grad, 0},
    [IR_OP_LINEAR] = {cu_linear, 0}, [IR_OP_LINEAR_GRAD] = {cu_linear_grad, 0, 1},
    [IR_OP_CAST] = {cu_cast, 0},
    [IR_OP_ADAMW] = {cu_adamw, 0, 1},
    [IR_OP_LAYER_NORM] = {cu_norm, 0}, [IR_OP_RMS_NORM] = {cu_norm, 1},
    [IR_OP_LAYER_NORM_GRAD] = {cu_norm_grad, 0, 1}, [IR_OP_RMS_NORM_GRAD] = {cu_norm_grad, 1, 1},
};

int lower_node_cuda_has_op(IrOp op) { return (int)op >= 0 && op < IR_OP_COUNT && table[op].fn; }

/* 1: every call is a runtime copy/zero and no operand is a constant */
static int runtime_copies_only(const LnOut *o, int start) {
    for (int i = start; i < o->n; i++) {
        const LeCall *k = &o->calls[i];
        if (strcmp(k->fn, "hetrt_copy") && strcmp(k->fn, "hetrt_zero")) return 0;
        for (int a = 0; a < k->nargs; a++)
            if (k->args[a].kind == LE_ARG_BYTES) return 0;
    }
    return 1;
}

int lower_node_cuda(LnCtx *c) {
    IrNode *n = c->n;
    c->why[0] = 0;
    c->bad = 0;
    int start = c->out->n;
    const CuEntry *e = (int)n->op >= 0 && n->op < IR_OP_COUNT ? &table[n->op] : NULL;
    if (!e || !e->fn) {
        /* the host lowering, when it is only the backend's own copies */
        if (!lower_node(c)) return 0;
        if (runtime_copies_only(c->out, start)) return 1;
        for (int i = start; i < c->out->n; i++) lower_call_free(&c->out->calls[i]);
        c->out->n = start;
        return ln_fail(c, "no CUDA lowering for %s", ir_op_name(n->op));
    }
    /* AdamW's step is i64, bf16-mixed's Linear / LinearGrad are bf16: they
     * check their own dtypes */
    if (n->op != IR_OP_ADAMW && n->op != IR_OP_LINEAR && n->op != IR_OP_LINEAR_GRAD &&
        n->op != IR_OP_CAST && !all_f32(n))
        return ln_fail(c, "not all fp32");
    if (!e->multi_out) {
        if (!n->out[0]) return ln_fail(c, "no output 0");
        for (int i = 1; i < n->nout; i++)
            if (n->out[i]) return ln_fail(c, "output %d", i);
    }
    int r = e->fn(c, e->k);
    if (r == 1 && c->bad) r = ln_fail(c, "an operand has no buffer");
    /* constants are host bytes in the binary: the device cannot read them */
    for (int i = start; r == 1 && i < c->out->n; i++)
        for (int a = 0; a < c->out->calls[i].nargs; a++)
            if (c->out->calls[i].args[a].kind == LE_ARG_BYTES) {
                r = ln_fail(c, "a constant operand (host memory)");
                break;
            }
    if (r != 1) {
        for (int i = start; i < c->out->n; i++) lower_call_free(&c->out->calls[i]);
        c->out->n = start;
        return 0;
    }
    return 1;
}

/* The CUDA backend's codegen row (lower_node.h; its link list: driver/backends.c):
 * device arenas, so no generated host kernels (docs/CUDA.md). */
const LowerBackend lower_backend_cuda = {"cuda", lower_node_cuda, lower_node_cuda_externs,
                                         NCUDA_EXTERNS, 0};
