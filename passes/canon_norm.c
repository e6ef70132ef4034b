/* LayerNorm and RMSNorm spelled out by exporters (opsets before 17, hand-
 * written modules such as LLaMA's RMSNorm):
 *
 *   LayerNorm: d = x - ReduceMean(x); v = ReduceMean(d*d | Pow(d,2));
 *              y = d / Sqrt(v + eps)  [* scale] [+ bias]
 *   RMSNorm:   v = ReduceMean(x*x | Pow(x,2)); h = x * Reciprocal(Sqrt(v + eps))
 *              (or x / Sqrt(v + eps), or x * (1 / Sqrt(..))); y = h * scale,
 *              with no-op Casts to f32 around x and h tolerated.
 *
 * The reductions must cover the trailing axes with keepdims=1, identically
 * for both reductions; scale/bias must be weights (PARAM/CONST). */
#include <string.h>

#include "canon.h"
#include "shape_rules.h"

/* Trailing axes of a keepdims ReduceMean over x (rank r): first axis, or -1. */
static int reduce_trailing_axis(IrNode *rm) {
    if (!rm || ir_attr_int(rm, "keepdims", 1) == 0) return -1;
    IrValue *x = rm->in[0];
    int r = x->shape.rank;
    int64_t ax[IR_MAX_RANK];
    int k;
    if (rm->nin > 1 && rm->in[1]) {
        k = value_read_ints(rm->in[1], ax, IR_MAX_RANK, NULL);
    } else {
        const int64_t *a;
        k = ir_attr_ints(rm, "axes", &a);
        for (int i = 0; i < k && i < IR_MAX_RANK; i++) ax[i] = a[i];
    }
    if (k <= 0 || k > r) return -1;
    int hit[IR_MAX_RANK] = {0};
    for (int i = 0; i < k; i++) {
        int64_t a = ax[i] < 0 ? ax[i] + r : ax[i];
        if (a < 0 || a >= r || hit[a]) return -1;
        hit[a] = 1;
    }
    for (int a = r - k; a < r; a++)
        if (!hit[a]) return -1;
    return r - k;
}

/* v is x*x or Pow(x, 2): returns x (and adds the node), else NULL. */
static IrValue *square_of(IrValue *v, Match *m) {
    IrNode *p = canon_def(v, IR_OP_POW);
    double e;
    if (p && canon_const_scalar(p->in[1], &e) && e == 2.0) {
        match_add(m, p);
        return p->in[0];
    }
    p = canon_def(v, IR_OP_MUL);
    if (p && p->in[0] == p->in[1]) {
        match_add(m, p);
        return p->in[0];
    }
    return NULL;
}

/* v = Add(a, eps) with eps a scalar const (either order): returns a. */
static IrValue *plus_eps(IrValue *v, double *eps, Match *m) {
    IrNode *p = canon_def(v, IR_OP_ADD);
    if (!p) return NULL;
    for (int i = 0; i < 2; i++)
        if (canon_const_scalar(p->in[1 - i], eps)) {
            match_add(m, p);
            return p->in[i];
        }
    return NULL;
}

/* Normalisation core: v is (num / Sqrt(den)) or num * Reciprocal(Sqrt(den))
 * or num * Div(1, Sqrt(den)); sets *num, *den. */
static int div_sqrt(IrValue *v, IrValue **num, IrValue **den, Match *m) {
    IrNode *p = canon_def(v, IR_OP_DIV);
    if (p) {
        IrNode *s = canon_def(p->in[1], IR_OP_SQRT);
        if (!s) return 0;
        match_add(m, p);
        match_add(m, s);
        *num = p->in[0];
        *den = s->in[0];
        return 1;
    }
    p = canon_def(v, IR_OP_MUL);
    if (!p) return 0;
    for (int i = 0; i < 2; i++) {
        IrValue *r = p->in[1 - i];
        IrNode *rc = canon_def(r, IR_OP_RECIPROCAL), *s = NULL;
        IrNode *dv = canon_def(r, IR_OP_DIV);
        double one;
        if (rc) s = canon_def(rc->in[0], IR_OP_SQRT);
        else if (dv && canon_const_scalar(dv->in[0], &one) && one == 1.0)
            s = canon_def(dv->in[1], IR_OP_SQRT);
        if (!s) continue;
        match_add(m, p);
        match_add(m, rc ? rc : dv);
        match_add(m, s);
        *num = p->in[i];
        *den = s->in[0];
        return 1;
    }
    return 0;
}

/* A weight w (PARAM/CONST) of the shape of x's trailing dims from axis. */
static int trailing_weight(const IrValue *w, const IrValue *x, int axis) {
    if (!canon_is_weight(w) || !w->shape_known) return 0;
    int k = x->shape.rank - axis;
    if (w->shape.rank != k) return 0;
    for (int i = 0; i < k; i++)
        if (w->shape.dims[i] != x->shape.dims[axis + i]) return 0;
    return 1;
}

/* Cast to f32 of an f32 value is a no-op the exporters leave in. */
static IrValue *skip_noop_cast(IrValue *v, Match *m) {
    IrNode *p = canon_def(v, IR_OP_CAST);
    if (p && ir_attr_int(p, "to", 0) == IR_F32 && p->in[0]->dtype == IR_F32) {
        match_add(m, p);
        return p->in[0];
    }
    return v;
}

int canon_layer_norm(Canon *c, IrNode *root, IrError *err) {
    /* root is Add(.., bias) or Mul(.., scale); walk down to the Div/Sqrt. */
    Match m = {0};
    IrValue *bias = NULL, *scale = NULL, *t = root->out[0];
    IrNode *ab = NULL;
    if (root->op == IR_OP_ADD) {
        ab = root;
        /* the bias side is decided below once x is known; try both */
    } else if (root->op != IR_OP_MUL) {
        return 0;
    }
    for (int bside = 0; bside < (ab ? 2 : 1); bside++) {
        m.n = 0;
        IrValue *scaled = t;
        bias = NULL;
        if (ab) {
            bias = ab->in[1 - bside];
            scaled = ab->in[bside];
            if (!canon_is_weight(bias)) continue;
            match_add(&m, ab);
        }
        IrNode *mul = canon_def(scaled, IR_OP_MUL);
        if (!mul) continue;
        for (int sside = 0; sside < 2; sside++) {
            Match m2 = m;
            scale = mul->in[1 - sside];
            if (!canon_is_weight(scale)) continue;
            match_add(&m2, mul);
            IrValue *num, *den;
            if (!div_sqrt(mul->in[sside], &num, &den, &m2)) continue;
            double eps;
            IrValue *var = plus_eps(den, &eps, &m2);
            IrNode *rv = var ? canon_def(var, IR_OP_REDUCE_MEAN) : NULL;
            if (!rv) continue;
            match_add(&m2, rv);
            IrValue *d = square_of(rv->in[0], &m2);
            if (d != num) continue;
            IrNode *sub = canon_def(d, IR_OP_SUB);
            if (!sub) continue;
            match_add(&m2, sub);
            IrValue *x = sub->in[0];
            IrNode *rm = canon_def(sub->in[1], IR_OP_REDUCE_MEAN);
            if (!rm || rm->in[0] != x) continue;
            match_add(&m2, rm);
            int axis = reduce_trailing_axis(rm);
            if (axis < 0 || axis != reduce_trailing_axis(rv)) continue;
            if (!trailing_weight(scale, x, axis)) continue;
            if (bias && !trailing_weight(bias, x, axis)) continue;
            if (x->dtype != IR_F32) continue;
            if (!match_internal(c, &m2, root)) continue;
            IrValue *in[3] = {x, scale, bias};
            /* negative axis, as ONNX LayerNormalization imports: rank-independent */
            CanonAttr at[2] = {{.name = "axis", .i = axis - x->shape.rank},
                               {.name = "epsilon", .is_float = 1, .f = eps}};
            return canon_rewrite(c, &m2, root, IR_OP_LAYER_NORM, bias ? 3 : 2, in, at, 2, err)
                       ? 1 : -1;
        }
    }
    return 0;
}

int canon_rms_norm(Canon *c, IrNode *root, IrError *err) {
    if (root->op != IR_OP_MUL) return 0;
    for (int side = 0; side < 2; side++) {
        Match m = {0};
        match_add(&m, root);
        IrValue *w = root->in[1 - side];
        if (!canon_is_weight(w)) continue;
        IrValue *h = skip_noop_cast(root->in[side], &m);
        IrValue *num, *den;
        if (!div_sqrt(h, &num, &den, &m)) continue;
        double eps;
        IrValue *ms = plus_eps(den, &eps, &m);
        IrNode *rm = ms ? canon_def(ms, IR_OP_REDUCE_MEAN) : NULL;
        if (!rm) continue;
        match_add(&m, rm);
        IrValue *xs = square_of(rm->in[0], &m);
        if (!xs || xs != num) continue;
        IrValue *x = skip_noop_cast(xs, &m);
        /* x - mean(x) here is a LayerNorm without bias: leave it to that */
        IrNode *sub = canon_def(x, IR_OP_SUB);
        if (sub && canon_def(sub->in[1], IR_OP_REDUCE_MEAN)) continue;
        int axis = reduce_trailing_axis(rm);
        if (axis < 0 || !trailing_weight(w, x, axis) || x->dtype != IR_F32) continue;
        if (!match_internal(c, &m, root)) continue;
        IrValue *in[2] = {x, w};
        CanonAttr at[2] = {{.name = "axis", .i = axis - x->shape.rank},
                           {.name = "epsilon", .is_float = 1, .f = eps}};
        return canon_rewrite(c, &m, root, IR_OP_RMS_NORM, 2, in, at, 2, err) ? 1 : -1;
    }
    return 0;
}
