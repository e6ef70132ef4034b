/* Activations spelled out by exporters:
 *
 *   Gelu (erf):  x * 0.5 * (1 + Erf(x / 1.41421356 | x * 0.70710678)), the
 *                three factors multiplied in any order and grouping;
 *   Gelu (tanh): 0.5 * x * (1 + Tanh(0.79788456 * (x + 0.044715 * x^3))),
 *                x^3 as Pow(x, 3) or x*x*x, factors in any order;
 *   SiLU:        x * Sigmoid(x).
 *
 * Multiplication trees are flattened (canon_mul_leaves) so every grouping
 * of the factors is one case.  Constants are compared with a relative
 * tolerance of 1e-4: exporters print them with 7-8 significant digits. */
#include <math.h>

#include "canon.h"

#define GELU_RTOL 1e-4

/* v = Add(1, a) either order: returns a. */
static IrValue *one_plus(IrValue *v, Match *m) {
    IrNode *p = canon_def(v, IR_OP_ADD);
    double one;
    if (!p) return NULL;
    for (int i = 0; i < 2; i++)
        if (canon_const_scalar(p->in[1 - i], &one) && one == 1.0) {
            match_add(m, p);
            return p->in[i];
        }
    return NULL;
}

/* Find in leaves[0..n) a scalar const near `want`; returns its index or -1. */
static int find_const(IrValue **leaves, int n, double want) {
    double x;
    for (int i = 0; i < n; i++)
        if (canon_const_scalar(leaves[i], &x) && canon_near(x, want, GELU_RTOL)) return i;
    return -1;
}

/* v = x / sqrt(2) or x * (1/sqrt(2)): returns x. */
static IrValue *over_sqrt2(IrValue *v, Match *m) {
    double k;
    IrNode *p = canon_def(v, IR_OP_DIV);
    if (p && canon_const_scalar(p->in[1], &k) && canon_near(k, sqrt(2.0), GELU_RTOL)) {
        match_add(m, p);
        return p->in[0];
    }
    p = canon_def(v, IR_OP_MUL);
    if (!p) return NULL;
    for (int i = 0; i < 2; i++)
        if (canon_const_scalar(p->in[1 - i], &k) && canon_near(k, sqrt(0.5), GELU_RTOL)) {
            match_add(m, p);
            return p->in[i];
        }
    return NULL;
}

/* Try each leaf as the (1 + f(x)) factor; `inner` recognises f's argument
 * and returns x.  The remaining two leaves must be x and 0.5. */
typedef IrValue *(*InnerFn)(const Canon *c, IrValue *arg, Match *m);

static int gelu_common(Canon *c, IrNode *root, IrOp fn, InnerFn inner, const char *approx,
                       IrError *err) {
    if (root->op != IR_OP_MUL) return 0;
    Match m0 = {0};
    IrValue *leaves[4];
    int n;
    if (canon_mul_leaves(c, root->out[0], leaves, 3, &n, &m0) || n != 3) return 0;
    int half = find_const(leaves, n, 0.5);
    if (half < 0) return 0;
    for (int i = 0; i < 3; i++) {
        if (i == half) continue;
        Match m = m0;
        IrValue *f = one_plus(leaves[i], &m);
        IrNode *fn_node = f ? canon_def(f, fn) : NULL;
        if (!fn_node) continue;
        match_add(&m, fn_node);
        IrValue *x = inner(c, fn_node->in[0], &m);
        IrValue *other = leaves[3 - i - half];
        if (!x || x != other || x->dtype != IR_F32) continue;
        if (!match_internal(c, &m, root)) continue;
        CanonAttr at = {.name = "approximate", .s = approx};
        return canon_rewrite(c, &m, root, IR_OP_GELU, 1, &x, &at, 1, err) ? 1 : -1;
    }
    return 0;
}

static IrValue *erf_arg(const Canon *c, IrValue *arg, Match *m) {
    (void)c;
    return over_sqrt2(arg, m);
}

/* x^3 as Pow(x, 3) or a Mul tree with leaves x, x, x: returns x. */
static IrValue *cube_of(const Canon *c, IrValue *v, Match *m) {
    IrNode *p = canon_def(v, IR_OP_POW);
    double e;
    if (p && canon_const_scalar(p->in[1], &e) && e == 3.0) {
        match_add(m, p);
        return p->in[0];
    }
    if (!canon_def(v, IR_OP_MUL) || canon_uses(c, v) != 1) return NULL;
    IrValue *l[4];
    int n;
    Match mm = *m;
    if (canon_mul_leaves(c, v, l, 3, &n, &mm) || n != 3 || l[0] != l[1] || l[1] != l[2])
        return NULL;
    *m = mm;
    return l[0];
}

/* sqrt(2/pi) * (x + 0.044715 * x^3), products in any grouping: returns x. */
static IrValue *tanh_arg(const Canon *c, IrValue *arg, Match *m) {
    IrValue *l[4];
    int n;
    Match mm = *m;
    if (canon_mul_leaves(c, arg, l, 2, &n, &mm) || n != 2) return NULL;
    int k = find_const(l, n, sqrt(2.0 / M_PI));
    if (k < 0) return NULL;
    IrNode *add = canon_def(l[1 - k], IR_OP_ADD);
    if (!add) return NULL;
    match_add(&mm, add);
    for (int i = 0; i < 2; i++) {
        IrValue *x = add->in[i];
        Match m3 = mm;
        IrValue *l2[4];
        int n2;
        if (!canon_def(add->in[1 - i], IR_OP_MUL)) continue;
        if (canon_mul_leaves(c, add->in[1 - i], l2, 4, &n2, &m3)) continue;
        int kc = find_const(l2, n2, 0.044715);
        if (kc < 0) continue;
        /* the rest is x^3: one leaf that is a cube, or three leaves x */
        IrValue *rest[3];
        int nr = 0;
        for (int j = 0; j < n2; j++)
            if (j != kc) rest[nr++] = l2[j];
        int ok = 0;
        if (nr == 1) ok = cube_of(c, rest[0], &m3) == x;
        else if (nr == 3) ok = rest[0] == x && rest[1] == x && rest[2] == x;
        else if (nr == 2) {
            /* x * x^2 with x^2 = Mul(x, x) or Pow(x, 2) */
            for (int a = 0; a < 2 && !ok; a++) {
                IrNode *sq = canon_def(rest[1 - a], IR_OP_MUL);
                IrNode *pw = canon_def(rest[1 - a], IR_OP_POW);
                double e;
                if (rest[a] != x) continue;
                if (sq && sq->in[0] == x && sq->in[1] == x) {
                    match_add(&m3, sq);
                    ok = 1;
                } else if (pw && pw->in[0] == x && canon_const_scalar(pw->in[1], &e) && e == 2.0) {
                    match_add(&m3, pw);
                    ok = 1;
                }
            }
        }
        if (!ok) continue;
        *m = m3;
        return x;
    }
    return NULL;
}

int canon_gelu_erf(Canon *c, IrNode *root, IrError *err) {
    return gelu_common(c, root, IR_OP_ERF, erf_arg, "none", err);
}

int canon_gelu_tanh(Canon *c, IrNode *root, IrError *err) {
    return gelu_common(c, root, IR_OP_TANH, tanh_arg, "tanh", err);
}

int canon_silu(Canon *c, IrNode *root, IrError *err) {
    if (root->op != IR_OP_MUL) return 0;
    for (int i = 0; i < 2; i++) {
        IrNode *s = canon_def(root->in[1 - i], IR_OP_SIGMOID);
        IrValue *x = root->in[i];
        if (!s || s->in[0] != x || x->dtype != IR_F32) continue;
        Match m = {0};
        match_add(&m, s);
        if (!match_internal(c, &m, root)) continue;
        return canon_rewrite(c, &m, root, IR_OP_SILU, 1, &x, NULL, 0, err) ? 1 : -1;
    }
    return 0;
}
