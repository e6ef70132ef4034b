/* Device adapters, one table entry per IrOp (the device twin of
 * codegen/hostexec_ops.c + hostexec_train.c).  An adapter returns 0 (done),
 * -1 (error in err) or 1: this node's dtypes or layout have no device kernel,
 * run it on the host executor (cudaexec.c).  Shapes are static and the node
 * verified (the stage's IR text went through the compiler's checks). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cudaexec.h"

#define IN_V(n, i) ((n)->in[i])
#define OUT_V(n, i) ((n)->out[i])
#define HOST 1

typedef struct Cx {
    CudaExec *x;
    IrNode *n;
    const void **in;
    void **out;
    IrError *err;
    char e[HKC_ERRLEN];
} Cx;

typedef int (*CxFn)(Cx *c, int k);
/* ow: bit i set when fn writes every element of output i (present
 * outputs; a HOST answer's fallback copies whole outputs too), so the
 * interpreter skips zeroing it.  EmbeddingGrad accumulates (atomicAdd) and
 * SliceGrad writes only the slice: both need their zeroed outputs. */
typedef struct CxEntry {
    CxFn fn;
    int k;
    unsigned ow;
} CxEntry;

static int64_t numel(const IrValue *v) { return ir_shape_numel(&v->shape); }
static int kf(Cx *c, int rc) { return rc ? ir_errorf(c->err, "%s", c->e) : 0; }
static int all_f32(const IrNode *n) {
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && n->in[i]->dtype != IR_F32) return 0;
    for (int i = 0; i < n->nout; i++)
        if (n->out[i] && n->out[i]->dtype != IR_F32) return 0;
    return 1;
}
static HkcShape shape_of(const IrValue *v) {
    HkcShape s;
    memset(&s, 0, sizeof s);
    s.rank = v->shape.rank;
    for (int d = 0; d < s.rank; d++) s.dims[d] = v->shape.dims[d];
    return s;
}
static HkcStrides contig(const HkcShape *s) {
    HkcStrides st;
    memset(&st, 0, sizeof st);
    int64_t acc = 1;
    for (int d = s->rank - 1; d >= 0; d--) st.s[d] = acc, acc *= s->dims[d];
    return st;
}
/* Strides of v broadcast (numpy, right-aligned) to out; -1 if it does not. */
static int bcast(const IrValue *v, const HkcShape *out, HkcStrides *st) {
    memset(st, 0, sizeof *st);
    int r = v->shape.rank, off = out->rank - r;
    if (off < 0) return -1;
    int64_t acc = 1;
    for (int d = r - 1; d >= 0; d--) {
        int64_t n = v->shape.dims[d];
        if (n != 1 && n != out->dims[d + off]) return -1;
        st->s[d + off] = n == 1 ? 0 : acc;
        acc *= n;
    }
    return 0;
}
static int copy_d2d(Cx *c, void *dst, const void *src, size_t nb) {
    if (!nb || dst == src) return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, nb, cudaMemcpyDeviceToDevice, c->x->k.stream);
    return e == cudaSuccess ? 0 : ir_errorf(c->err, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
}
/* Out-of-range ids: the kernels raise a device flag; read it back. */
static int check_bad(Cx *c, const char *what) {
    int bad = 0;
    cudaError_t e = cudaMemcpyAsync(&bad, c->x->bad, sizeof bad, cudaMemcpyDeviceToHost,
                                    c->x->k.stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->x->k.stream);
    if (e != cudaSuccess) return ir_errorf(c->err, "%s: %s", what, cudaGetErrorString(e));
    if (!bad) return 0;
    cudaMemsetAsync(c->x->bad, 0, sizeof(int), c->x->k.stream);
    return ir_errorf(c->err, "%s outside the table's range", what);
}

/* ------------------------------------------------------------ elementwise */
static int run_binary(Cx *c, int op) {
    IrNode *n = c->n;
    if (n->nin != 2 || !all_f32(n)) return HOST;
    HkcShape o = shape_of(OUT_V(n, 0));
    HkcStrides sa, sb;
    if (bcast(IN_V(n, 0), &o, &sa) || bcast(IN_V(n, 1), &o, &sb)) return HOST;
    return kf(c, hkc_binary_f32(&c->x->k, op, c->in[0], sa, c->in[1], sb, c->out[0], o, c->e));
}

static int run_unary(Cx *c, int op) {
    IrNode *n = c->n;
    if (!all_f32(n)) return HOST;
    if (n->op == IR_OP_GELU) {
        const char *ap = ir_attr_string(n, "approximate", "none");
        if (!strcmp(ap, "tanh")) op = HKC_GELU_TANH;
        else if (strcmp(ap, "none")) return HOST; /* the host reports it */
    }
    return kf(c, hkc_unary_f32(&c->x->k, op, c->in[0], c->out[0], numel(IN_V(n, 0)), c->e));
}

static const char *const ug_names[] = {"exp", "log", "sqrt", "tanh", "sigmoid", "erf",
                                       "relu", "neg", "reciprocal", "gelu", "gelu_tanh", "silu"};

static int run_unary_grad(Cx *c, int k) {
    IrNode *n = c->n;
    if (!all_f32(n)) return HOST;
    const char *name = ir_attr_string(n, "fn", "");
    int op = -1;
    for (int i = 0; i < (int)(sizeof ug_names / sizeof *ug_names); i++)
        if (!strcmp(name, ug_names[i])) op = i;
    int64_t len = numel(IN_V(n, 0));
    if (op < 0 || numel(IN_V(n, 1)) != len) return HOST;
    int hy = n->nin > 2 && IN_V(n, 2) && c->in[2];
    return kf(c, hkc_unary_grad_f32(&c->x->k, op, c->in[0], hy ? c->in[2] : NULL, c->in[1],
                                    c->out[0], len, c->e));
}

static int run_copy(Cx *c, int k) {
    size_t nb = (size_t)numel(OUT_V(c->n, 0)) * ir_dtype_size(OUT_V(c->n, 0)->dtype);
    if ((size_t)numel(IN_V(c->n, 0)) * ir_dtype_size(IN_V(c->n, 0)->dtype) != nb) return HOST;
    return copy_d2d(c, c->out[0], c->in[0], nb);
}

static int run_cast(Cx *c, int k) {
    const IrValue *x = IN_V(c->n, 0), *y = OUT_V(c->n, 0);
    if (x->dtype == y->dtype) return run_copy(c, 0);
    int ok[] = {IR_F32, IR_U8, IR_I32, IR_I64, IR_BOOL, IR_F64, IR_BF16}, a = 0, b = 0;
    for (int i = 0; i < 7; i++) a |= (int)x->dtype == ok[i], b |= (int)y->dtype == ok[i];
    if (!a || !b) return HOST;
    return kf(c, hkc_cast(&c->x->k, (int)x->dtype, c->in[0], (int)y->dtype, c->out[0],
                          numel(x), c->e));
}

/* ------------------------------------------------------------ movement */
static int esize_ok(size_t es) { return es == 1 || es == 2 || es == 4 || es == 8; }

static int run_transpose(Cx *c, int k) {
    const IrValue *x = IN_V(c->n, 0), *y = OUT_V(c->n, 0);
    size_t es = ir_dtype_size(x->dtype);
    int r = x->shape.rank;
    if (!esize_ok(es) || y->shape.rank != r) return HOST;
    const int64_t *p;
    int np = ir_attr_ints(c->n, "perm", &p);
    if (np && np != r) return HOST;
    HkcShape xs = shape_of(x), ys = shape_of(y);
    HkcStrides xst = contig(&xs), src, dst = contig(&ys);
    memset(&src, 0, sizeof src);
    for (int i = 0; i < r; i++) {
        int64_t a = np ? p[i] : r - 1 - i;
        if (a < 0) a += r;
        if (a < 0 || a >= r || ys.dims[i] != xs.dims[a]) return HOST;
        src.s[i] = xst.s[a];
    }
    return kf(c, hkc_strided_copy(&c->x->k, es, ys, c->in[0], 0, src, c->out[0], 0, dst, c->e));
}

static int run_expand(Cx *c, int k) {
    const IrValue *x = IN_V(c->n, 0), *y = OUT_V(c->n, 0);
    size_t es = ir_dtype_size(x->dtype);
    HkcShape ys = shape_of(y);
    HkcStrides src;
    if (!esize_ok(es) || bcast(x, &ys, &src)) return HOST;
    return kf(c, hkc_strided_copy(&c->x->k, es, ys, c->in[0], 0, src, c->out[0], 0, contig(&ys),
                                  c->e));
}

/* Split (out pieces of x) and Concat (in pieces of y) along `axis`. */
static int pieces(Cx *c, int split) {
    IrNode *n = c->n;
    const IrValue *whole = split ? IN_V(n, 0) : OUT_V(n, 0);
    size_t es = ir_dtype_size(whole->dtype);
    int r = whole->shape.rank;
    int64_t axis = ir_attr_int(n, "axis", 0);
    if (axis < 0) axis += r;
    if (!esize_ok(es) || axis < 0 || axis >= r) return HOST;
    HkcShape ws = shape_of(whole);
    HkcStrides wst = contig(&ws);
    int64_t at = 0;
    int np = split ? n->nout : n->nin;
    for (int i = 0; i < np; i++) {
        const IrValue *pv = split ? OUT_V(n, i) : IN_V(n, i);
        if (!pv) continue;
        if (pv->shape.rank != r || pv->dtype != whole->dtype) return HOST;
        HkcShape ps = shape_of(pv);
        HkcStrides pst = contig(&ps);
        int64_t woff = at * wst.s[axis];
        int rc = split ? hkc_strided_copy(&c->x->k, es, ps, c->in[0], woff, wst, c->out[i], 0,
                                          pst, c->e)
                       : hkc_strided_copy(&c->x->k, es, ps, c->in[i], 0, pst, c->out[0], woff,
                                          wst, c->e);
        if (rc) return kf(c, rc);
        at += ps.dims[axis];
    }
    return at == ws.dims[axis] ? 0 : HOST;
}
static int run_split(Cx *c, int k) { return pieces(c, 1); }
static int run_concat(Cx *c, int k) { return pieces(c, 0); }

/* Slice / SliceGrad: starts, ends, axes?, steps? must be CONST (their
 * values decide the walk on the host); resolved with the ONNX clamping rules
 * exactly as hostexec's Slice.  Anything unusual goes to the host, which
 * reports it. */
static int const_ints(IrNode *n, int i, int64_t *out, IrError *err) {
    IrValue *v = n->in[i];
    int64_t cnt = numel(v);
    if (v->kind != IR_VK_CONST || (v->dtype != IR_I64 && v->dtype != IR_I32) ||
        cnt > IR_MAX_RANK)
        return -1;
    const void *d = ir_value_data(v, err);
    if (!d) return -1;
    for (int64_t j = 0; j < cnt; j++)
        out[j] = v->dtype == IR_I64 ? ((const int64_t *)d)[j] : ((const int32_t *)d)[j];
    return (int)cnt;
}

static int slice_walk(IrNode *n, int first, const IrValue *x, int64_t *start, int64_t *step,
                      int64_t *yd, IrError *err) {
    int r = x->shape.rank;
    int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], sp[IR_MAX_RANK];
    int has_ax = n->nin > first + 2 && n->in[first + 2];
    int has_sp = n->nin > first + 3 && n->in[first + 3];
    int ns = const_ints(n, first, st, err), ne = const_ints(n, first + 1, en, err);
    if (ns < 0 || ns != ne) return -1;
    if (has_ax && const_ints(n, first + 2, ax, err) != ns) return -1;
    if (has_sp && const_ints(n, first + 3, sp, err) != ns) return -1;
    int seen[IR_MAX_RANK] = {0};
    for (int d = 0; d < r; d++) start[d] = 0, step[d] = 1, yd[d] = x->shape.dims[d];
    for (int i = 0; i < ns; i++) {
        int64_t a = has_ax ? ax[i] : i;
        if (a < 0) a += r;
        if (a < 0 || a >= r || seen[a]++) return -1;
        int64_t k = has_sp ? sp[i] : 1;
        if (k == 0) return -1;
        yd[a] = ir_slice_axis(x->shape.dims[a], st[i], en[i], k, &start[a]);
        step[a] = k;
    }
    return 0;
}

/* y = x[slice]: a strided read.  SliceGrad: dx (zeroed) [slice] = dy: the
 * same walk as a strided write (distinct positions: no conflicts). */
static int run_slice(Cx *c, int grad) {
    IrNode *n = c->n;
    const IrValue *x = grad ? OUT_V(n, 0) : IN_V(n, 0), *y = grad ? IN_V(n, 0) : OUT_V(n, 0);
    size_t es = ir_dtype_size(x->dtype);
    int r = x->shape.rank;
    if (!esize_ok(es) || y->shape.rank != r || y->dtype != x->dtype) return HOST;
    int64_t start[IR_MAX_RANK], step[IR_MAX_RANK], yd[IR_MAX_RANK];
    IrError ignore = {{0}};
    if (slice_walk(n, grad ? 2 : 1, x, start, step, yd, &ignore)) return HOST;
    for (int d = 0; d < r; d++)
        if (yd[d] != y->shape.dims[d]) return HOST;
    HkcShape xs = shape_of(x), ys = shape_of(y);
    HkcStrides xst = contig(&xs), walk, yst = contig(&ys);
    memset(&walk, 0, sizeof walk);
    int64_t base = 0;
    for (int d = 0; d < r; d++) {
        walk.s[d] = yd[d] > 1 ? step[d] * xst.s[d] : 0; /* step may be INT64_MAX */
        base += start[d] * xst.s[d];
    }
    if (grad)
        return kf(c, hkc_strided_copy(&c->x->k, es, ys, c->in[0], 0, yst, c->out[0], base, walk,
                                      c->e));
    return kf(c, hkc_strided_copy(&c->x->k, es, ys, c->in[0], base, walk, c->out[0], 0, yst,
                                  c->e));
}

/* ------------------------------------------------------------ matmul */
static int run_matmul(Cx *c, int k) {
    IrNode *n = c->n;
    const IrValue *a = IN_V(n, 0), *b = IN_V(n, 1), *y = OUT_V(n, 0);
    if (!all_f32(n) || a->shape.rank < 2 || b->shape.rank < 2) return HOST;
    int ra = a->shape.rank, rb = b->shape.rank;
    int64_t M = a->shape.dims[ra - 2], K = a->shape.dims[ra - 1], N = b->shape.dims[rb - 1];
    if (b->shape.dims[rb - 2] != K) return HOST;
    int64_t ba = numel(a) / (M * K > 0 ? M * K : 1), bb = numel(b) / (K * N > 0 ? K * N : 1);
    /* equal batch dims, or one operand a single matrix (stride 0) */
    int64_t batch = ba > bb ? ba : bb;
    if (ba != bb && ba != 1 && bb != 1) return HOST;
    if (ba == bb && ra != rb) return HOST;
    if (ba == bb && ba > 1)
        for (int d = 0; d < ra - 2; d++)
            if (a->shape.dims[d] != b->shape.dims[d]) return HOST;
    if (numel(y) != batch * M * N) return HOST;
    return kf(c, hkc_gemm_f32(&c->x->k, 0, 0, M, N, K, 1.f, c->in[0], ba > 1 ? M * K : 0,
                              c->in[1], bb > 1 ? K * N : 0, 0.f, c->out[0], M * N, batch, c->e));
}

/* bf16-mixed's Linear / LinearGrad (issue 17): bf16 operands and outputs,
 * except LinearGrad's parameter gradients (outputs 1, 2), which are f32 */
static int all_bf16_linear(const IrNode *n, int grad) {
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && n->in[i]->dtype != IR_BF16) return 0;
    for (int i = 0; i < n->nout; i++)
        if (n->out[i] && n->out[i]->dtype != (grad && i > 0 ? IR_F32 : IR_BF16)) return 0;
    return 1;
}

static int run_linear(Cx *c, int k) {
    IrNode *n = c->n;
    const IrValue *x = IN_V(n, 0), *w = IN_V(n, 1);
    int bf = all_bf16_linear(n, 0);
    if ((!all_f32(n) && !bf) || w->shape.rank != 2 || x->shape.rank < 1) return HOST;
    int64_t K = w->shape.dims[0], N = w->shape.dims[1];
    if (x->shape.dims[x->shape.rank - 1] != K || K == 0) return HOST;
    int64_t M = numel(x) / K;
    int hb = n->nin > 2 && IN_V(n, 2) && c->in[2];
    if (hb && numel(IN_V(n, 2)) != N) return HOST;
    if (bf)
        return kf(c, hkc_linear_bf16(&c->x->k, M, N, K, c->in[0], c->in[1], hb ? c->in[2] : NULL,
                                     c->out[0], c->e));
    if (hb)
        return kf(c, hkc_linear_bias_f32(&c->x->k, M, N, K, c->in[0], c->in[1], c->in[2],
                                         c->out[0], c->e));
    return kf(c, hkc_gemm_f32(&c->x->k, 0, 0, M, N, K, 1.f, c->in[0], 0, c->in[1], 0, 0.f,
                              c->out[0], 0, 1, c->e));
}

/* dx = dy W^T, dW = x^T dy, db = column sums of dy */
static int run_linear_grad(Cx *c, int k) {
    IrNode *n = c->n;
    const IrValue *x = IN_V(n, 0), *w = IN_V(n, 1);
    int bf = all_bf16_linear(n, 1);
    if ((!all_f32(n) && !bf) || w->shape.rank != 2 || x->shape.rank < 1) return HOST;
    int64_t K = w->shape.dims[0], N = w->shape.dims[1];
    if (x->shape.dims[x->shape.rank - 1] != K || K == 0) return HOST;
    int64_t M = numel(x) / K;
    if (numel(IN_V(n, 2)) != M * N) return HOST;
    if (bf)
        return kf(c, hkc_linear_backward_bf16(&c->x->k, c->in[0], c->in[1], c->in[2], M, K, N,
                                              OUT_V(n, 0) ? c->out[0] : NULL,
                                              n->nout > 1 && OUT_V(n, 1) ? c->out[1] : NULL,
                                              n->nout > 2 && OUT_V(n, 2) ? c->out[2] : NULL,
                                              c->e));
    if (OUT_V(n, 0) && hkc_gemm_f32(&c->x->k, 0, 1, M, K, N, 1.f, c->in[2], 0, c->in[1], 0, 0.f,
                                    c->out[0], 0, 1, c->e))
        return kf(c, -1);
    if (OUT_V(n, 1) && hkc_gemm_f32(&c->x->k, 1, 0, K, N, M, 1.f, c->in[0], 0, c->in[2], 0, 0.f,
                                    c->out[1], 0, 1, c->e))
        return kf(c, -1);
    if (n->nout > 2 && OUT_V(n, 2) && hkc_col_sum_f32(&c->x->k, c->in[2], M, N, c->out[2], c->e))
        return kf(c, -1);
    return 0;
}

/* ------------------------------------------------------------ norms, softmax */
static int last_axis(const IrNode *n, const IrValue *x, int64_t dflt) {
    int64_t a = ir_attr_int(n, "axis", dflt);
    return a == -1 || a == x->shape.rank - 1;
}

static int run_norm(Cx *c, int rms) {
    IrNode *n = c->n;
    const IrValue *x = IN_V(n, 0);
    if (!all_f32(n) || x->shape.rank < 1 || !last_axis(n, x, -1)) return HOST;
    int64_t len = x->shape.dims[x->shape.rank - 1], rows = len ? numel(x) / len : 0;
    int hb = !rms && n->nin > 2 && IN_V(n, 2) && c->in[2];
    if (numel(IN_V(n, 1)) != len || (hb && numel(IN_V(n, 2)) != len)) return HOST;
    double eps = ir_attr_float(n, "epsilon", 1e-5);
    return kf(c, hkc_norm_f32(&c->x->k, rms, c->in[0], c->in[1], hb ? c->in[2] : NULL, rows, len,
                              eps, c->out[0], c->e));
}

static int run_norm_grad(Cx *c, int rms) {
    IrNode *n = c->n;
    const IrValue *x = IN_V(n, 0);
    if (!all_f32(n) || x->shape.rank < 1 || !last_axis(n, x, -1)) return HOST;
    int64_t len = x->shape.dims[x->shape.rank - 1], rows = len ? numel(x) / len : 0;
    if (numel(IN_V(n, 1)) != len || numel(IN_V(n, 2)) != numel(x)) return HOST;
    float *stats = cudaexec_scratch(c->x, (size_t)(2 * rows + 1) * sizeof(float), c->err);
    if (!stats) return -1;
    double eps = ir_attr_float(n, "epsilon", 1e-5);
    float *db = !rms && n->nout > 2 && OUT_V(n, 2) ? c->out[2] : NULL;
    return kf(c, hkc_norm_grad_f32(&c->x->k, rms, c->in[0], c->in[1], c->in[2], rows, len, eps,
                                   stats, OUT_V(n, 0) ? c->out[0] : NULL,
                                   OUT_V(n, 1) ? c->out[1] : NULL, db, c->e));
}

static int run_softmax(Cx *c, int log) {
    const IrValue *x = IN_V(c->n, 0);
    if (!all_f32(c->n) || x->shape.rank < 1 || !last_axis(c->n, x, -1)) return HOST;
    int64_t len = x->shape.dims[x->shape.rank - 1], rows = len ? numel(x) / len : 0;
    return kf(c, hkc_softmax_f32(&c->x->k, c->in[0], rows, len, log, c->out[0], c->e));
}

static int run_softmax_grad(Cx *c, int k) {
    const IrValue *y = IN_V(c->n, 0);
    if (!all_f32(c->n) || y->shape.rank < 1 || !last_axis(c->n, y, -1)) return HOST;
    int64_t len = y->shape.dims[y->shape.rank - 1], rows = len ? numel(y) / len : 0;
    return kf(c, hkc_softmax_grad_f32(&c->x->k, c->in[0], c->in[1], rows, len,
                                      (int)ir_attr_int(c->n, "log", 0), c->out[0], c->e));
}

/* ------------------------------------------------------------ attention */
typedef struct AttnDims {
    int64_t batch, T, S, D, Dv;
    int causal;
    float scale;
} AttnDims;

static int attn_dims(Cx *c, AttnDims *a) {
    const IrValue *q = IN_V(c->n, 0), *k = IN_V(c->n, 1), *v = IN_V(c->n, 2);
    int r = q->shape.rank;
    if (!all_f32(c->n) || r < 2 || k->shape.rank != r || v->shape.rank != r) return HOST;
    a->T = q->shape.dims[r - 2], a->D = q->shape.dims[r - 1];
    a->S = k->shape.dims[r - 2], a->Dv = v->shape.dims[r - 1];
    if (a->T * a->D == 0 || a->S == 0) return HOST;
    a->batch = numel(q) / (a->T * a->D);
    if (k->shape.dims[r - 1] != a->D || v->shape.dims[r - 2] != a->S ||
        numel(k) != a->batch * a->S * a->D || numel(v) != a->batch * a->S * a->Dv)
        return HOST;
    a->causal = ir_attr_int(c->n, "causal", 1) != 0;
    a->scale = (float)ir_attr_float(c->n, "scale", 1.0 / sqrt((double)a->D));
    return 0;
}

/* P = masked softmax(scale q k^T) into p [batch][T][S] */
static int attn_probs(Cx *c, const AttnDims *a, float *p) {
    if (hkc_gemm_f32(&c->x->k, 0, 1, a->T, a->S, a->D, 1.f, c->in[0], a->T * a->D, c->in[1],
                     a->S * a->D, 0.f, p, a->T * a->S, a->batch, c->e))
        return kf(c, -1);
    return kf(c, hkc_attn_softmax_f32(&c->x->k, p, a->batch, a->T, a->S, a->causal, a->scale,
                                      c->e));
}

static int run_attention(Cx *c, int k) {
    AttnDims a;
    int rc = attn_dims(c, &a);
    if (rc) return rc;
    float *p = cudaexec_scratch(c->x, (size_t)(a.batch * a.T * a.S) * sizeof(float), c->err);
    if (!p || attn_probs(c, &a, p)) return -1;
    return kf(c, hkc_gemm_f32(&c->x->k, 0, 0, a.T, a.Dv, a.S, 1.f, p, a.T * a.S, c->in[2],
                              a.S * a.Dv, 0.f, c->out[0], a.T * a.Dv, a.batch, c->e));
}

/* dv = P^T dout, dP = dout v^T, dS = P (dP - rowsum(dP P)),
 * dq = scale dS k, dk = scale dS^T q (hk_attention_backward_f32). */
static int run_attention_grad(Cx *c, int k) {
    AttnDims a;
    int rc = attn_dims(c, &a);
    if (rc) return rc;
    if (numel(IN_V(c->n, 3)) != a.batch * a.T * a.Dv) return HOST;
    size_t m = (size_t)(a.batch * a.T * a.S);
    float *p = cudaexec_scratch(c->x, 2 * m * sizeof(float), c->err), *dp = p + m;
    if (!p || attn_probs(c, &a, p)) return -1;
    HkcCtx *h = &c->x->k;
    int64_t TS = a.T * a.S;
    if (hkc_gemm_f32(h, 1, 0, a.S, a.Dv, a.T, 1.f, p, TS, c->in[3], a.T * a.Dv, 0.f, c->out[2],
                     a.S * a.Dv, a.batch, c->e) ||
        hkc_gemm_f32(h, 0, 1, a.T, a.S, a.Dv, 1.f, c->in[3], a.T * a.Dv, c->in[2], a.S * a.Dv,
                     0.f, dp, TS, a.batch, c->e) ||
        hkc_softmax_grad_f32(h, p, dp, a.batch * a.T, a.S, 0, dp, c->e) ||
        hkc_gemm_f32(h, 0, 0, a.T, a.D, a.S, a.scale, dp, TS, c->in[1], a.S * a.D, 0.f,
                     c->out[0], a.T * a.D, a.batch, c->e) ||
        hkc_gemm_f32(h, 1, 0, a.S, a.D, a.T, a.scale, dp, TS, c->in[0], a.T * a.D, 0.f,
                     c->out[1], a.S * a.D, a.batch, c->e))
        return kf(c, -1);
    return 0;
}

/* ------------------------------------------------------------ embedding, loss */
static int ids_ok(const IrValue *v) { return v->dtype == IR_I32 || v->dtype == IR_I64; }

/* a vocab-parallel shard (attrs vocab_start / vocab_size, tp_shard_vocab.c)
 * has no device kernel: it runs on the host fallback (hk_embedding_shard_f32) */
static int vocab_shard(const IrNode *n) {
    return ir_node_attr(n, "vocab_start") || ir_node_attr(n, "vocab_size");
}

static int run_embedding(Cx *c, int k) {
    const IrValue *t = IN_V(c->n, 0), *ids = IN_V(c->n, 1);
    if (t->dtype != IR_F32 || t->shape.rank != 2 || !ids_ok(ids) || vocab_shard(c->n)) return HOST;
    if (hkc_embedding_f32(&c->x->k, c->in[0], t->shape.dims[0], t->shape.dims[1],
                          (int)ids->dtype, c->in[1], numel(ids), c->out[0], c->x->bad, c->e))
        return kf(c, -1);
    return check_bad(c, "Embedding: a token id is");
}

static int run_embedding_grad(Cx *c, int k) {
    const IrValue *t = IN_V(c->n, 0), *ids = IN_V(c->n, 1);
    if (t->dtype != IR_F32 || t->shape.rank != 2 || !ids_ok(ids) || vocab_shard(c->n)) return HOST;
    int64_t V = t->shape.dims[0], D = t->shape.dims[1];
    if (numel(IN_V(c->n, 2)) != numel(ids) * D) return HOST;
    if (hkc_embedding_grad_f32(&c->x->k, V, D, (int)ids->dtype, c->in[1], numel(ids), c->in[2],
                               c->out[0], c->x->bad, c->e))
        return kf(c, -1);
    return check_bad(c, "EmbeddingGrad: a token id is");
}

static int run_ce(Cx *c, int grad) {
    const IrValue *lg = IN_V(c->n, 0), *t = IN_V(c->n, 1);
    if (lg->dtype != IR_F32 || lg->shape.rank < 1 || !ids_ok(t)) return HOST;
    int64_t V = lg->shape.dims[lg->shape.rank - 1], N = V ? numel(lg) / V : 0;
    if (numel(t) != N || V == 0) return HOST;
    void *s = cudaexec_scratch(c->x, hkc_cross_entropy_scratch(N), c->err);
    if (!s) return -1;
    int ui = (int)ir_attr_int(c->n, "use_ignore", 0);
    int64_t ii = ir_attr_int(c->n, "ignore_index", -100);
    int rc = grad ? hkc_cross_entropy_grad_f32(&c->x->k, c->in[0], (int)t->dtype, c->in[1], N, V,
                                               ui, ii, c->in[2], s, c->out[0], c->x->bad, c->e)
                  : hkc_cross_entropy_f32(&c->x->k, c->in[0], (int)t->dtype, c->in[1], N, V, ui,
                                          ii, s, c->out[0], c->x->bad, c->e);
    if (rc) return kf(c, rc);
    return check_bad(c, "CrossEntropy: a target is");
}

/* ------------------------------------------------------------ reductions */
/* SumToShape: out (right-aligned in g's rank) = g summed over broadcast axes. */
static int run_sum_to_shape(Cx *c, int k) {
    const IrValue *g = IN_V(c->n, 0), *y = OUT_V(c->n, 0);
    if (!all_f32(c->n) && (g->dtype != IR_F32 || y->dtype != IR_F32)) return HOST;
    int r = g->shape.rank, off = r - y->shape.rank;
    if (off < 0) return HOST;
    HkcShape gs = shape_of(g), os, rs;
    HkcStrides gst = contig(&gs), ost, rst;
    memset(&os, 0, sizeof os);
    memset(&rs, 0, sizeof rs);
    memset(&ost, 0, sizeof ost);
    memset(&rst, 0, sizeof rst);
    os.rank = rs.rank = r;
    for (int d = 0; d < r; d++) {
        int64_t od = d < off ? 1 : y->shape.dims[d - off];
        if (od != 1 && od != gs.dims[d]) return HOST;
        int reduced = od == 1 && gs.dims[d] != 1;
        os.dims[d] = od;
        ost.s[d] = reduced ? 0 : gst.s[d];
        rs.dims[d] = reduced ? gs.dims[d] : 1;
        rst.s[d] = reduced ? gst.s[d] : 0;
    }
    return kf(c, hkc_reduce_f32(&c->x->k, 0, c->in[0], os, ost, rs, rst, c->out[0], c->e));
}

/* ------------------------------------------------------------ optimizer */
/* P m v G lr step [clip_scale] -> P' m' v' (outputs may be the inputs'
 * buffers: the stage memory plan writes AdamW in place) */
static int run_adamw(Cx *c, int k) {
    IrNode *n = c->n;
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && (i == 5 ? n->in[i]->dtype != IR_I64 : n->in[i]->dtype != IR_F32))
            return HOST;
    for (int i = 0; i < 3; i++)
        if (OUT_V(n, i)->dtype != IR_F32 || numel(OUT_V(n, i)) != numel(IN_V(n, 0))) return HOST;
    const float *cs = n->nin > 6 && n->in[6] ? c->in[6] : NULL;
    if (n->nin > 6 && n->in[6] && !cs) return HOST;
    return kf(c, hkc_adamw_f32(&c->x->k, c->in[0], c->in[1], c->in[2], c->in[3], c->in[4],
                               c->in[5], cs, numel(IN_V(n, 0)),
                               ir_attr_float(n, "beta1", 0.9), ir_attr_float(n, "beta2", 0.999),
                               ir_attr_float(n, "eps", 1e-8),
                               ir_attr_float(n, "weight_decay", 0.0), c->out[0], c->out[1],
                               c->out[2], c->e));
}

static const CxEntry table[IR_OP_COUNT] = {
    [IR_OP_ADD] = {run_binary, HKC_ADD, 1}, [IR_OP_SUB] = {run_binary, HKC_SUB, 1},
    [IR_OP_MUL] = {run_binary, HKC_MUL, 1}, [IR_OP_DIV] = {run_binary, HKC_DIV, 1},
    [IR_OP_POW] = {run_binary, HKC_POW, 1}, [IR_OP_MAX] = {run_binary, HKC_MAX, 1},
    [IR_OP_MIN] = {run_binary, HKC_MIN, 1},
    [IR_OP_NEG] = {run_unary, HKC_NEG, 1}, [IR_OP_ABS] = {run_unary, HKC_ABS, 1},
    [IR_OP_SQRT] = {run_unary, HKC_SQRT, 1}, [IR_OP_RECIPROCAL] = {run_unary, HKC_RECIP, 1},
    [IR_OP_EXP] = {run_unary, HKC_EXP, 1}, [IR_OP_LOG] = {run_unary, HKC_LOG, 1},
    [IR_OP_SIN] = {run_unary, HKC_SIN, 1}, [IR_OP_COS] = {run_unary, HKC_COS, 1},
    [IR_OP_TANH] = {run_unary, HKC_TANH, 1}, [IR_OP_SIGMOID] = {run_unary, HKC_SIGMOID, 1},
    [IR_OP_ERF] = {run_unary, HKC_ERF, 1}, [IR_OP_RELU] = {run_unary, HKC_RELU, 1},
    [IR_OP_FLOOR] = {run_unary, HKC_FLOOR, 1}, [IR_OP_CEIL] = {run_unary, HKC_CEIL, 1},
    [IR_OP_GELU] = {run_unary, HKC_GELU, 1}, [IR_OP_SILU] = {run_unary, HKC_SILU, 1},
    [IR_OP_UNARY_GRAD] = {run_unary_grad, 0, 1},
    [IR_OP_CAST] = {run_cast, 0, 1},
    [IR_OP_IDENTITY] = {run_copy, 0, 1}, [IR_OP_RESHAPE] = {run_copy, 0, 1},
    [IR_OP_SQUEEZE] = {run_copy, 0, 1}, [IR_OP_UNSQUEEZE] = {run_copy, 0, 1},
    [IR_OP_FLATTEN] = {run_copy, 0, 1},
    [IR_OP_TP_COPY] = {run_copy, 0, 1}, /* identity forward (its gradient is a TpAllReduce) */
    [IR_OP_TRANSPOSE] = {run_transpose, 0, 1}, [IR_OP_EXPAND] = {run_expand, 0, 1},
    [IR_OP_SPLIT] = {run_split, 0, ~0u}, [IR_OP_CONCAT] = {run_concat, 0, 1},
    [IR_OP_SLICE] = {run_slice, 0, 1}, [IR_OP_SLICE_GRAD] = {run_slice, 1, 0},
    [IR_OP_MATMUL] = {run_matmul, 0, 1}, [IR_OP_LINEAR] = {run_linear, 0, 1},
    [IR_OP_LINEAR_GRAD] = {run_linear_grad, 0, 7},
    [IR_OP_LAYER_NORM] = {run_norm, 0, 1}, [IR_OP_RMS_NORM] = {run_norm, 1, 1},
    [IR_OP_LAYER_NORM_GRAD] = {run_norm_grad, 0, 7}, [IR_OP_RMS_NORM_GRAD] = {run_norm_grad, 1, 3},
    [IR_OP_SOFTMAX] = {run_softmax, 0, 1}, [IR_OP_LOG_SOFTMAX] = {run_softmax, 1, 1},
    [IR_OP_SOFTMAX_GRAD] = {run_softmax_grad, 0, 1},
    [IR_OP_ATTENTION] = {run_attention, 0, 1}, [IR_OP_ATTENTION_GRAD] = {run_attention_grad, 0, 7},
    [IR_OP_EMBEDDING] = {run_embedding, 0, 1}, [IR_OP_EMBEDDING_GRAD] = {run_embedding_grad, 0, 0},
    [IR_OP_CROSS_ENTROPY] = {run_ce, 0, 1}, [IR_OP_CROSS_ENTROPY_GRAD] = {run_ce, 1, 1},
    [IR_OP_SUM_TO_SHAPE] = {run_sum_to_shape, 0, 1},
    [IR_OP_ADAMW] = {run_adamw, 0, 7},
};

int cudaexec_op_native(IrOp op) { return (unsigned)op < IR_OP_COUNT && table[op].fn; }

unsigned cudaexec_op_overwrites(IrOp op) {
    return cudaexec_op_native(op) ? table[op].ow : 0;
}

/* 0 done, -1 error, 1 run it on the host. */
int cudaexec_native_call(CudaExec *x, IrNode *n, const void **in, void **out, IrError *err) {
    if (!cudaexec_op_native(n->op)) return HOST;
    for (int i = 0; i < n->nout; i++)
        if (n->out[i] && !out[i]) return HOST;
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && !in[i] && i < 2) return HOST; /* required operands are 0 and 1 */
    Cx c = {.x = x, .n = n, .in = in, .out = out, .err = err};
    return table[n->op].fn(&c, table[n->op].k);
}
