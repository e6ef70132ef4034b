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
#include <math.h>
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

/* the argument ln_ptr just added is a constant's bytes (host memory) */
static int last_is_const(const LeCall *k) {
    return k->nargs > 0 && k->args[k->nargs - 1].kind == LE_ARG_BYTES;
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
    int host = 0;
    ln_ptr(c, k, IN(0));
    host |= last_is_const(k) ? 1 : 0;
    ln_i64s(k, R, sa);
    ln_ptr(c, k, IN(1));
    host |= last_is_const(k) ? 2 : 0;
    ln_i64s(k, R, sb);
    ln_ptr(c, k, y);
    ln_i32(k, host);
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
    if (ir_attr_int(c->n, "sr", 0)) return lower_cast_sr(c);
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

/* MatMul: equal batch dims, or one operand a single matrix (the device
 * executor's run_matmul) */
static int cu_matmul(LnCtx *c, int unused) {
    (void)unused;
    const IrValue *a = IN(0), *b = IN(1), *y = OUT(0);
    int ra = a->shape.rank, rb = b->shape.rank;
    if (ra < 2 || rb < 2) return ln_fail(c, "MatMul ranks < 2");
    int64_t M = a->shape.dims[ra - 2], K = a->shape.dims[ra - 1], N = b->shape.dims[rb - 1];
    if (b->shape.dims[rb - 2] != K || M * K == 0 || K * N == 0) return ln_fail(c, "MatMul dims");
    int64_t ba = ln_numel(a) / (M * K), bb = ln_numel(b) / (K * N);
    int64_t batch = ba > bb ? ba : bb;
    if (ba != bb && ba != 1 && bb != 1) return ln_fail(c, "MatMul broadcast");
    if (ba == bb && ba > 1) {
        if (ra != rb) return ln_fail(c, "MatMul batch ranks");
        for (int d = 0; d < ra - 2; d++)
            if (a->shape.dims[d] != b->shape.dims[d]) return ln_fail(c, "MatMul batch dims");
    }
    if (ln_numel(y) != batch * M * N) return ln_fail(c, "MatMul output");
    LeCall *k = ln_push(c, "hetrt_cu_matmul");
    ln_ptr(c, k, a);
    ln_i64(k, ba > 1 ? M * K : 0);
    ln_ptr(c, k, b);
    ln_i64(k, bb > 1 ? K * N : 0);
    ln_i64(k, M);
    ln_i64(k, N);
    ln_i64(k, K);
    ln_i64(k, batch);
    ln_ptr(c, k, y);
    return 1;
}

static int esize_of(LnCtx *c, const IrValue *v, int64_t *es) {
    *es = (int64_t)ir_dtype_size(v->dtype);
    if (*es != 1 && *es != 2 && *es != 4 && *es != 8)
        return ln_fail(c, "%s elements", ir_dtype_name(v->dtype));
    if (v->shape.rank > 8) return ln_fail(c, "rank %d > 8", v->shape.rank);
    return 1;
}

/* one strided copy over dims: src + soff walked by ss, dst + doff by ds */
static void strided(LnCtx *c, int64_t es, int r, const int64_t *dims, const IrValue *src,
                    int64_t soff, const int64_t *ss, const IrValue *dst, int64_t doff,
                    const int64_t *ds) {
    LeCall *k = ln_push(c, "hetrt_cu_strided_copy");
    ln_i64(k, es);
    ln_i32(k, r);
    ln_i64s(k, r, dims);
    ln_ptr(c, k, src);
    ln_i64(k, soff);
    ln_i64s(k, r, ss);
    ln_ptr(c, k, dst);
    ln_i64(k, doff);
    ln_i64s(k, r, ds);
}

static int cu_transpose(LnCtx *c, int unused) {
    (void)unused;
    const IrValue *x = IN(0), *y = OUT(0);
    int64_t es;
    if (!esize_of(c, x, &es)) return 0;
    int r = x->shape.rank;
    if (y->shape.rank != r || y->dtype != x->dtype) return ln_fail(c, "Transpose output");
    const int64_t *p;
    int np = ir_attr_ints(c->n, "perm", &p);
    if (np && np != r) return ln_fail(c, "perm");
    int64_t xst[8], src[8], dst[8];
    hk_contig_strides(r, x->shape.dims, xst);
    hk_contig_strides(r, y->shape.dims, dst);
    for (int i = 0; i < r; i++) {
        int64_t a = np ? p[i] : r - 1 - i;
        if (a < 0) a += r;
        if (a < 0 || a >= r || y->shape.dims[i] != x->shape.dims[a]) return ln_fail(c, "perm");
        src[i] = xst[a];
    }
    strided(c, es, r, y->shape.dims, x, 0, src, y, 0, dst);
    return 1;
}

static int cu_expand(LnCtx *c, int unused) {
    (void)unused;
    const IrValue *x = IN(0), *y = OUT(0);
    int64_t es, src[8], dst[8];
    if (!esize_of(c, y, &es)) return 0;
    if (y->dtype != x->dtype || bcast(x, y, src)) return ln_fail(c, "not a broadcast");
    hk_contig_strides(y->shape.rank, y->shape.dims, dst);
    strided(c, es, y->shape.rank, y->shape.dims, x, 0, src, y, 0, dst);
    return 1;
}

/* Split (split = 1: the pieces are the outputs) and Concat (the inputs)
 * along `axis`: one strided copy per piece */
static int cu_pieces(LnCtx *c, int split) {
    IrNode *n = c->n;
    const IrValue *whole = split ? IN(0) : OUT(0);
    int64_t es, wst[8];
    if (!esize_of(c, whole, &es)) return 0;
    int r = whole->shape.rank;
    int ax;
    if (ln_norm_axis(ir_attr_int(n, "axis", 0), r, &ax)) return ln_fail(c, "axis");
    hk_contig_strides(r, whole->shape.dims, wst);
    int64_t at = 0;
    int np = split ? n->nout : n->nin;
    for (int i = 0; i < np; i++) {
        const IrValue *pv = split ? OUT(i) : IN(i);
        if (!pv) {
            if (!split) return ln_fail(c, "Concat input %d missing", i);
            return ln_fail(c, "Split output %d unused", i); /* its extent is unknown */
        }
        if (pv->shape.rank != r || pv->dtype != whole->dtype) return ln_fail(c, "pieces");
        int64_t pst[8];
        hk_contig_strides(r, pv->shape.dims, pst);
        int64_t woff = at * wst[ax];
        if (split) strided(c, es, r, pv->shape.dims, whole, woff, wst, pv, 0, pst);
        else strided(c, es, r, pv->shape.dims, pv, 0, pst, whole, woff, wst);
        at += pv->shape.dims[ax];
    }
    return at == whole->shape.dims[ax] ? 1 : ln_fail(c, "pieces do not tile axis %d", ax);
}

/* Slice (grad 0: y = x[slice]) and SliceGrad (grad 1: dx zeroed, then
 * dx[slice] = dy): one strided copy over the slice's shape; starts, ends,
 * axes and steps are constants resolved here (ONNX's clamping rules) */
static int cu_slice(LnCtx *c, int grad) {
    const IrValue *x = grad ? OUT(0) : IN(0), *y = grad ? IN(0) : OUT(0);
    int64_t es, start[IR_MAX_RANK], step[IR_MAX_RANK], yd[IR_MAX_RANK];
    if (!esize_of(c, x, &es)) return 0;
    if (ln_resolve_slice(c, grad ? 2 : 1, &x->shape, start, step, yd))
        return ln_fail(c, "starts/ends/axes/steps not constants");
    int r = x->shape.rank;
    if (y->shape.rank != r || y->dtype != x->dtype) return ln_fail(c, "slice rank / dtype");
    for (int d = 0; d < r; d++)
        if (yd[d] != y->shape.dims[d]) return ln_fail(c, "slice shape");
    int64_t xst[8], walk[8], yst[8], base = 0;
    hk_contig_strides(r, x->shape.dims, xst);
    hk_contig_strides(r, y->shape.dims, yst);
    for (int d = 0; d < r; d++) {
        walk[d] = yd[d] > 1 ? step[d] * xst[d] : 0; /* a step may be INT64_MAX */
        base += start[d] * xst[d];
    }
    if (grad) {
        LeCall *z = ln_push(c, "hetrt_zero");
        ln_ptr(c, z, x);
        ln_i64(z, ln_numel(x) * es);
    }
    if (ln_numel(y) == 0) return 1;
    if (grad) strided(c, es, r, y->shape.dims, y, 0, yst, x, base, walk);
    else strided(c, es, r, y->shape.dims, x, base, walk, y, 0, yst);
    return 1;
}

/* SumToShape: the output (right-aligned in g's rank) = g summed over its
 * broadcast axes (the device executor's run_sum_to_shape) */
static int cu_sum_to_shape(LnCtx *c, int unused) {
    (void)unused;
    const IrValue *g = IN(0), *y = OUT(0);
    if (g->dtype != IR_F32 || y->dtype != IR_F32) return ln_fail(c, "not fp32");
    int r = g->shape.rank, off = r - y->shape.rank;
    if (off < 0 || r > 8) return ln_fail(c, "ranks");
    int64_t gst[8], od[8], os[8], rd[8], rs[8];
    hk_contig_strides(r, g->shape.dims, gst);
    for (int d = 0; d < r; d++) {
        int64_t o = d < off ? 1 : y->shape.dims[d - off], gd = g->shape.dims[d];
        if (o != 1 && o != gd) return ln_fail(c, "not a broadcast of the output");
        int reduced = o == 1 && gd != 1;
        od[d] = o;
        os[d] = reduced ? 0 : gst[d];
        rd[d] = reduced ? gd : 1;
        rs[d] = reduced ? gst[d] : 0;
    }
    LeCall *k = ln_push(c, "hetrt_cu_reduce_sum");
    ln_i32(k, r);
    ln_i64s(k, r, od);
    ln_i64s(k, r, os);
    ln_i64s(k, r, rd);
    ln_i64s(k, r, rs);
    ln_ptr(c, k, g);
    ln_ptr(c, k, y);
    return 1;
}

/* rows of the last axis (axis attribute -1 or rank - 1) */
static int last_rows(LnCtx *c, const IrValue *x, int64_t *rows, int64_t *len) {
    int r = x->shape.rank;
    int64_t a = ir_attr_int(c->n, "axis", -1);
    if (r < 1 || (a != -1 && a != r - 1)) return ln_fail(c, "not the last axis");
    *len = x->shape.dims[r - 1];
    *rows = *len ? ln_numel(x) / *len : 0;
    return 1;
}

static int cu_softmax(LnCtx *c, int log) {
    int64_t rows, len;
    if (!last_rows(c, IN(0), &rows, &len)) return 0;
    LeCall *k = ln_push(c, "hetrt_cu_softmax");
    ln_ptr(c, k, IN(0));
    ln_i64(k, rows);
    ln_i64(k, len);
    ln_i32(k, log);
    ln_ptr(c, k, OUT(0));
    return 1;
}

static int cu_softmax_grad(LnCtx *c, int unused) {
    (void)unused;
    int64_t rows, len;
    if (c->n->nin < 2 || !IN(1) || !last_rows(c, IN(0), &rows, &len)) return 0;
    LeCall *k = ln_push(c, "hetrt_cu_softmax_grad");
    ln_ptr(c, k, IN(0));
    ln_ptr(c, k, IN(1));
    ln_i64(k, rows);
    ln_i64(k, len);
    ln_i32(k, ir_attr_int(c->n, "log", 0) != 0);
    ln_ptr(c, k, OUT(0));
    return 1;
}

/* batch, T, S, D, Dv of q [.., T, D], k [.., S, D], v [.., S, Dv] */
static int attn_dims(LnCtx *c, int64_t *d) {
    const IrValue *q = IN(0), *kk = IN(1), *v = IN(2);
    int r = q->shape.rank;
    if (r < 2 || kk->shape.rank != r || v->shape.rank != r) return ln_fail(c, "Attention ranks");
    int64_t T = q->shape.dims[r - 2], D = q->shape.dims[r - 1];
    int64_t S = kk->shape.dims[r - 2], Dv = v->shape.dims[r - 1];
    if (T * D == 0 || S == 0) return ln_fail(c, "empty Attention");
    int64_t batch = ln_numel(q) / (T * D);
    if (kk->shape.dims[r - 1] != D || v->shape.dims[r - 2] != S ||
        ln_numel(kk) != batch * S * D || ln_numel(v) != batch * S * Dv)
        return ln_fail(c, "Attention shapes");
    d[0] = batch, d[1] = T, d[2] = S, d[3] = D, d[4] = Dv;
    return 1;
}

static void attn_attrs(LnCtx *c, LeCall *k, int64_t D) {
    ln_i32(k, ir_attr_int(c->n, "causal", 1) != 0);
    ln_f64(k, (float)ir_attr_float(c->n, "scale", 1.0 / sqrt((double)D)));
}

static int cu_attention(LnCtx *c, int unused) {
    (void)unused;
    int64_t d[5];
    if (!attn_dims(c, d)) return 0;
    if (ln_numel(OUT(0)) != d[0] * d[1] * d[4]) return ln_fail(c, "Attention output");
    LeCall *k = ln_push(c, "hetrt_cu_attention");
    for (int i = 0; i < 3; i++) ln_ptr(c, k, IN(i));
    for (int i = 0; i < 5; i++) ln_i64(k, d[i]);
    attn_attrs(c, k, d[3]);
    ln_ptr(c, k, OUT(0));
    return 1;
}

static int cu_attention_grad(LnCtx *c, int unused) {
    (void)unused;
    int64_t d[5];
    if (c->n->nin < 4 || !IN(3) || !attn_dims(c, d)) return ln_fail(c, "AttentionGrad operands");
    if (ln_numel(IN(3)) != d[0] * d[1] * d[4]) return ln_fail(c, "AttentionGrad dy");
    for (int i = 0; i < 3; i++) /* the kernels write dq, dk and dv */
        if (!ln_has_out(c, i)) return ln_fail(c, "AttentionGrad output %d unused", i);
    LeCall *k = ln_push(c, "hetrt_cu_attention_grad");
    for (int i = 0; i < 4; i++) ln_ptr(c, k, IN(i));
    for (int i = 0; i < 5; i++) ln_i64(k, d[i]);
    attn_attrs(c, k, d[3]);
    for (int i = 0; i < 3; i++) ln_ptr(c, k, OUT(i));
    return 1;
}

static int ids_dtype(const IrValue *v) { return v->dtype == IR_I32 || v->dtype == IR_I64; }

/* Embedding (table, ids) and EmbeddingGrad (table, ids, dy); a
 * vocab-parallel shard (vocab_start / vocab_size) has no device kernel */
static int cu_embedding_common(LnCtx *c, int grad) {
    const IrValue *t = IN(0), *ids = IN(1);
    if (t->dtype != IR_F32 || t->shape.rank != 2 || !ids_dtype(ids))
        return ln_fail(c, "Embedding operands");
    if (ir_node_attr(c->n, "vocab_start") || ir_node_attr(c->n, "vocab_size"))
        return ln_fail(c, "a vocab-parallel shard");
    int64_t V = t->shape.dims[0], D = t->shape.dims[1], n = ln_numel(ids);
    if (grad && (c->n->nin < 3 || !IN(2) || ln_numel(IN(2)) != n * D || IN(2)->dtype != IR_F32))
        return ln_fail(c, "EmbeddingGrad dy");
    if (OUT(0)->dtype != IR_F32 || ln_numel(OUT(0)) != (grad ? V * D : n * D))
        return ln_fail(c, "Embedding output");
    LeCall *k = ln_push(c, grad ? "hetrt_cu_embedding_grad" : "hetrt_cu_embedding");
    if (!grad) {
        ln_ptr(c, k, t);
        if (last_is_const(k)) return ln_fail(c, "a constant table");
    }
    ln_i64(k, V);
    ln_i64(k, D);
    ln_i32(k, (int)ids->dtype); /* IR and kernels share the dtype codes */
    ln_ptr(c, k, ids);
    ln_i32(k, last_is_const(k));
    ln_i64(k, n);
    if (grad) {
        ln_ptr(c, k, IN(2));
        if (last_is_const(k)) return ln_fail(c, "a constant dy");
    }
    ln_ptr(c, k, OUT(0));
    return 1;
}

static int cu_embedding(LnCtx *c, int unused) {
    (void)unused;
    return cu_embedding_common(c, 0);
}

static int cu_embedding_grad(LnCtx *c, int unused) {
    (void)unused;
    return cu_embedding_common(c, 1);
}

/* CrossEntropy (logits, targets) -> mean loss; its grad (logits, targets,
 * dloss) -> dlogits */
static int cu_ce(LnCtx *c, int grad) {
    const IrValue *lg = IN(0), *t = IN(1);
    if (lg->dtype != IR_F32 || lg->shape.rank < 1 || !ids_dtype(t) || OUT(0)->dtype != IR_F32)
        return ln_fail(c, "CrossEntropy operands");
    /* only the dloss may be a constant (host_consts: the others must not be) */
    int64_t V = lg->shape.dims[lg->shape.rank - 1], N = V ? ln_numel(lg) / V : 0;
    if (V == 0 || ln_numel(t) != N) return ln_fail(c, "CrossEntropy shapes");
    if (grad && (c->n->nin < 3 || !IN(2) || IN(2)->dtype != IR_F32 || ln_numel(OUT(0)) != N * V))
        return ln_fail(c, "CrossEntropyGrad operands");
    LeCall *k = ln_push(c, grad ? "hetrt_cu_cross_entropy_grad" : "hetrt_cu_cross_entropy");
    ln_ptr(c, k, lg);
    if (last_is_const(k)) return ln_fail(c, "constant logits");
    ln_i32(k, (int)t->dtype);
    ln_ptr(c, k, t);
    if (last_is_const(k)) return ln_fail(c, "constant targets");
    ln_i64(k, N);
    ln_i64(k, V);
    ln_i32(k, ir_attr_int(c->n, "use_ignore", 0) != 0);
    ln_i64(k, ir_attr_int(c->n, "ignore_index", -100));
    if (grad) {
        if (ln_numel(IN(2)) != 1) return ln_fail(c, "dloss is not a scalar");
        ln_ptr(c, k, IN(2));
        ln_i32(k, last_is_const(k));
    }
    ln_ptr(c, k, OUT(0));
    return 1;
}

typedef struct CuEntry {
    LnFn fn;
    int k;
    int multi_out;   /* outputs beyond the first are the entry's (optional) */
    int own_dtypes;  /* the entry checks its dtypes (else: every tensor f32) */
    int host_consts; /* its call flags the constant operands it takes from host memory */
} CuEntry;

static const CuEntry table[IR_OP_COUNT] = {
    [IR_OP_ADD] = {cu_binary, HK_ADD, 0, 0, 1}, [IR_OP_SUB] = {cu_binary, HK_SUB, 0, 0, 1},
    [IR_OP_MUL] = {cu_binary, HK_MUL, 0, 0, 1}, [IR_OP_DIV] = {cu_binary, HK_DIV, 0, 0, 1},
    [IR_OP_POW] = {cu_binary, HK_POW, 0, 0, 1}, [IR_OP_MAX] = {cu_binary, HK_MAX, 0, 0, 1},
    [IR_OP_MIN] = {cu_binary, HK_MIN, 0, 0, 1},
    [IR_OP_NEG] = {cu_unary, HK_NEG}, [IR_OP_ABS] = {cu_unary, HK_ABS},
    [IR_OP_SQRT] = {cu_unary, HK_SQRT}, [IR_OP_RECIPROCAL] = {cu_unary, HK_RECIP},
    [IR_OP_EXP] = {cu_unary, HK_EXP}, [IR_OP_LOG] = {cu_unary, HK_LOG},
    [IR_OP_SIN] = {cu_unary, HK_SIN}, [IR_OP_COS] = {cu_unary, HK_COS},
    [IR_OP_TANH] = {cu_unary, HK_TANH}, [IR_OP_SIGMOID] = {cu_unary, HK_SIGMOID},
    [IR_OP_ERF] = {cu_unary, HK_ERF}, [IR_OP_RELU] = {cu_unary, HK_RELU},
    [IR_OP_FLOOR] = {cu_unary, HK_FLOOR}, [IR_OP_CEIL] = {cu_unary, HK_CEIL},
    [IR_OP_GELU] = {cu_unary, HK_GELU}, [IR_OP_SILU] = {cu_unary, HK_SILU},
    [IR_OP_UNARY_GRAD] = {cu_unary_grad, 0},
    [IR_OP_LINEAR] = {cu_linear, 0, 0, 1}, [IR_OP_LINEAR_GRAD] = {cu_linear_grad, 0, 1, 1},
    [IR_OP_CAST] = {cu_cast, 0, 0, 1},
    [IR_OP_ADAMW] = {cu_adamw, 0, 1, 1},
    [IR_OP_LAYER_NORM] = {cu_norm, 0}, [IR_OP_RMS_NORM] = {cu_norm, 1},
    [IR_OP_LAYER_NORM_GRAD] = {cu_norm_grad, 0, 1}, [IR_OP_RMS_NORM_GRAD] = {cu_norm_grad, 1, 1},
    [IR_OP_MATMUL] = {cu_matmul, 0},
    [IR_OP_TRANSPOSE] = {cu_transpose, 0, 0, 1}, [IR_OP_EXPAND] = {cu_expand, 0, 0, 1},
    [IR_OP_SPLIT] = {cu_pieces, 1, 1, 1}, [IR_OP_CONCAT] = {cu_pieces, 0, 0, 1},
    [IR_OP_SUM_TO_SHAPE] = {cu_sum_to_shape, 0, 0, 1},
    [IR_OP_SLICE] = {cu_slice, 0, 0, 1}, [IR_OP_SLICE_GRAD] = {cu_slice, 1, 0, 1},
    [IR_OP_SOFTMAX] = {cu_softmax, 0}, [IR_OP_LOG_SOFTMAX] = {cu_softmax, 1},
    [IR_OP_SOFTMAX_GRAD] = {cu_softmax_grad, 0},
    [IR_OP_ATTENTION] = {cu_attention, 0}, [IR_OP_ATTENTION_GRAD] = {cu_attention_grad, 0, 1},
    [IR_OP_EMBEDDING] = {cu_embedding, 0, 0, 1, 1},
    [IR_OP_EMBEDDING_GRAD] = {cu_embedding_grad, 0, 0, 1, 1},
    [IR_OP_CROSS_ENTROPY] = {cu_ce, 0, 0, 1}, [IR_OP_CROSS_ENTROPY_GRAD] = {cu_ce, 1, 0, 1, 1},
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
    /* AdamW's step is i64, bf16-mixed's Linear / LinearGrad are bf16, ids
     * are integers, copies move any element: such entries check their own */
    if (!e->own_dtypes && !all_f32(n)) return ln_fail(c, "not all fp32");
    if (!e->multi_out) {
        if (!n->out[0]) return ln_fail(c, "no output 0");
        for (int i = 1; i < n->nout; i++)
            if (n->out[i]) return ln_fail(c, "output %d", i);
    }
    int r = e->fn(c, e->k);
    if (r == 1 && c->bad) r = ln_fail(c, "an operand has no buffer");
    /* constants are host bytes in the binary: the device cannot read them,
     * unless the entry copies them over (its call flags them) */
    for (int i = start; r == 1 && !e->host_consts && i < c->out->n; i++)
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
 * device arenas, so no generated host kernels; the NVPTX ones with --fuse
 * (docs/CUDA.md). */
const LowerBackend lower_backend_cuda = {"cuda", lower_node_cuda, lower_node_cuda_externs,
                                         NCUDA_EXTERNS, LOWER_FUSE_DEVICE};
