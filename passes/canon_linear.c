/* Linear: x[...,K] @ W[K,N] (+ b[N]) where W is a 2-D parameter.
 *
 *   Add(MatMul(x, W), b) (either Add order)  -> Linear(x, W, b)
 *   MatMul(x, W)                            -> Linear(x, W)
 *   W may be Transpose(P, perm=[1,0]) of a 2-D parameter P (nn.Linear as
 *   some exporters write it); the Transpose stays and feeds Linear.
 *   Gemm(A, B, C) with transA=0, alpha=beta=1 -> Linear(A, B or B^T, C):
 *   transB=1 inserts an explicit Transpose of B, so Linear keeps a single
 *   W[K,N] convention and autodiff sees the transpose as an ordinary op.
 *
 * A MatMul of two activations (attention scores) is not a Linear: W must be
 * a parameter (or its transpose) so Linear marks the trainable matmuls. */
#include "canon.h"

static int is_weight_2d(const IrValue *w) {
    if (!w || !w->shape_known || w->shape.rank != 2) return 0;
    if (w->kind == IR_VK_PARAM) return 1;
    IrNode *t = canon_def(w, IR_OP_TRANSPOSE);
    if (!t || t->in[0]->kind != IR_VK_PARAM || t->in[0]->shape.rank != 2) return 0;
    const int64_t *p;
    int np = ir_attr_ints(t, "perm", &p);
    return np == 0 || (np == 2 && p[0] == 1 && p[1] == 0);
}

static int is_bias(const IrValue *b, int64_t n) {
    return canon_is_weight(b) && b->shape_known && b->shape.rank == 1 && b->shape.dims[0] == n &&
           b->dtype == IR_F32;
}

int canon_linear_bias(Canon *c, IrNode *root, IrError *err) {
    if (root->op != IR_OP_ADD) return 0;
    for (int i = 0; i < 2; i++) {
        IrNode *mm = canon_def(root->in[i], IR_OP_MATMUL);
        if (!mm || !is_weight_2d(mm->in[1]) || mm->in[0]->dtype != IR_F32) continue;
        if (mm->in[0]->shape.rank < 1) continue;
        IrValue *b = root->in[1 - i];
        if (!is_bias(b, mm->in[1]->shape.dims[1])) continue;
        /* the Add must not broadcast x@W up (bias only adds a trailing dim) */
        Match m = {0};
        match_add(&m, mm);
        if (!match_internal(c, &m, root)) continue;
        IrValue *in[3] = {mm->in[0], mm->in[1], b};
        return canon_rewrite(c, &m, root, IR_OP_LINEAR, 3, in, NULL, 0, err) ? 1 : -1;
    }
    return 0;
}

int canon_linear(Canon *c, IrNode *root, IrError *err) {
    if (root->op != IR_OP_MATMUL) return 0;
    if (!is_weight_2d(root->in[1]) || root->in[0]->dtype != IR_F32) return 0;
    if (root->in[0]->shape.rank < 1) return 0;
    Match m = {0};
    IrValue *in[2] = {root->in[0], root->in[1]};
    return canon_rewrite(c, &m, root, IR_OP_LINEAR, 2, in, NULL, 0, err) ? 1 : -1;
}

int canon_linear_gemm(Canon *c, IrNode *root, IrError *err) {
    if (root->op != IR_OP_GEMM) return 0;
    if (ir_attr_int(root, "transA", 0) != 0 || ir_attr_float(root, "alpha", 1.0) != 1.0 ||
        ir_attr_float(root, "beta", 1.0) != 1.0)
        return 0;
    IrValue *a = root->in[0], *w = root->in[1];
    IrValue *b = root->nin > 2 ? root->in[2] : NULL;
    if (a->dtype != IR_F32 || w->shape.rank != 2) return 0;
    int tb = ir_attr_int(root, "transB", 0) != 0;
    int64_t n = w->shape.dims[tb ? 0 : 1];
    if (b && !is_bias(b, n)) return 0; /* C of another shape stays a Gemm */
    if (tb) {
        char name[512];
        snprintf(name, sizeof name, "%s.wT", root->name);
        IrValue *tin[1] = {w};
        w = canon_insert(c, root, IR_OP_TRANSPOSE, name, 1, tin, err);
        if (!w) return -1;
        const int64_t perm[2] = {1, 0};
        ir_node_set_ints(w->producer, "perm", 2, perm);
    }
    Match m = {0};
    IrValue *in[3] = {a, w, b};
    return canon_rewrite(c, &m, root, IR_OP_LINEAR, b ? 3 : 2, in, NULL, 0, err) ? 1 : -1;
}
