/* Causal attention spelled out by exporters:
 *
 *   s  = MatMul(q, kT)            kT = k with its last two dims swapped
 *        [* scale | / scale]      (or q and kT each scaled by sqrt(scale),
 *                                  as torch's SDPA export does)
 *        [+ mask | Where(cond, s, -big) | Where(cond, -big, s)]
 *   y  = MatMul(Softmax(s, axis=-1), v)
 *
 * -> Attention(q, k, v) {causal, scale}.  The mask must be a CONST (after
 * folding) whose content is checked numerically: an additive mask is 0 on
 * and below the diagonal and <= -1e4 (or -inf) above it; a Where condition
 * selects the scores exactly on and below the diagonal.  No mask at all
 * gives causal=0.  k is recovered from a Transpose feeding kT by swapping
 * the last two entries of its perm (so a head-split Transpose with perm
 * [0,2,3,1] becomes one with [0,2,1,3]); otherwise an explicit Transpose
 * of kT is inserted (the dynamo exporter's 3-D Reshape/Transpose/Reshape
 * spelling of kT is undone too).  k and v broadcast over q's batch dims
 * (multi-query: one K/V head) get an explicit Expand.  A scalar factor on q
 * before its head split (OPT) moves into the scale.
 *
 * SDPA exports put a NaN guard between Softmax and the second MatMul,
 * Where(IsNaN(p), 0, p), for rows whose every key is masked; it is matched
 * through and dropped when no such row can exist (see canon_attention). */
#include <math.h>
#include <string.h>

#include "canon.h"
#include "shape_rules.h"

#define MASK_BIG -1e4

/* diagonal offset: key j is visible from query i when j <= i + (S - T) */
static int visible(int64_t i, int64_t j, int64_t t, int64_t s) { return j <= i + (s - t); }

/* A CONST whose last two dims are exactly [T, S] and whose other dims
 * broadcast into the scores' batch dims. */
static int mask_shaped(IrValue *m, const IrShape *scores) {
    if (!m || m->kind != IR_VK_CONST || !ir_value_has_data(m) || !m->shape_known) return 0;
    int r = scores->rank;
    if (m->shape.rank < 2 || m->shape.rank > r) return 0;
    int mr = m->shape.rank;
    if (m->shape.dims[mr - 2] != scores->dims[r - 2] || m->shape.dims[mr - 1] != scores->dims[r - 1])
        return 0;
    for (int i = 0; i < mr - 2; i++) {
        int64_t d = m->shape.dims[i], sd = scores->dims[r - mr + i];
        if (d != 1 && d != sd) return 0;
    }
    return 1;
}

/* Row-wise fast paths for the common dtypes: a 4096x4096 mask per layer of a
 * 70B model is checked at memory speed instead of element by element. */
static int bool_rows_causal(const uint8_t *d, int64_t rows, int64_t t, int64_t s, int kind) {
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *row = d + r * s;
        int64_t i = r % t, nvis = i + (s - t) + 1; /* keys 0..nvis-1 visible */
        if (nvis < 0) nvis = 0;
        if (nvis > s) nvis = s;
        uint8_t want_vis = kind == 1, want_hid = kind != 1;
        for (int64_t j = 0; j < nvis; j++)
            if ((row[j] != 0) != want_vis) return 0;
        for (int64_t j = nvis; j < s; j++)
            if ((row[j] != 0) != want_hid) return 0;
    }
    return 1;
}

static int f32_rows_causal(const float *d, int64_t rows, int64_t t, int64_t s) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = d + r * s;
        int64_t i = r % t, nvis = i + (s - t) + 1;
        if (nvis < 0) nvis = 0;
        if (nvis > s) nvis = s;
        int bad = 0;
        for (int64_t j = 0; j < nvis; j++) bad |= row[j] != 0.0f;
        for (int64_t j = nvis; j < s; j++) bad |= !(row[j] <= (float)MASK_BIG);
        if (bad) return 0;
    }
    return 1;
}

/* kind 0: additive mask; 1: cond true where visible; 2: cond true where hidden */
static int mask_is_causal_uncached(IrValue *m, const IrShape *scores, int kind);

static int mask_is_causal(Canon *c, IrValue *m, const IrShape *scores, int kind) {
    int64_t t = scores->dims[scores->rank - 2], s = scores->dims[scores->rank - 1];
    for (int i = 0; i < c->ncausal_memo; i++)
        if (c->causal_memo[i].v == m && c->causal_memo[i].kind == kind &&
            c->causal_memo[i].t == t && c->causal_memo[i].s == s && mask_shaped(m, scores))
            return 1;
    int ok = mask_is_causal_uncached(m, scores, kind);
    if (ok && c->ncausal_memo < 8) {
        c->causal_memo[c->ncausal_memo].v = m;
        c->causal_memo[c->ncausal_memo].kind = kind;
        c->causal_memo[c->ncausal_memo].t = t;
        c->causal_memo[c->ncausal_memo].s = s;
        c->ncausal_memo++;
    }
    return ok;
}

static int mask_is_causal_uncached(IrValue *m, const IrShape *scores, int kind) {
    if (!mask_shaped(m, scores)) return 0;
    if (kind == 0 && !ir_dtype_is_float(m->dtype)) return 0;
    if (kind != 0 && m->dtype != IR_BOOL) return 0;
    int64_t t = scores->dims[scores->rank - 2], s = scores->dims[scores->rank - 1];
    int64_t ne = ir_shape_numel(&m->shape);
    const void *data = ir_value_data(m, NULL);
    if (data && m->nbytes == (size_t)ne * ir_dtype_size(m->dtype) && s > 0) {
        if (m->dtype == IR_BOOL) return bool_rows_causal(data, ne / s, t, s, kind);
        if (m->dtype == IR_F32) return f32_rows_causal(data, ne / s, t, s);
    }
    for (int64_t e = 0; e < ne; e++) {
        int64_t j = e % s, i = (e / s) % t;
        double x;
        if (value_read_double(m, e, &x)) return 0;
        int vis = visible(i, j, t, s);
        if (kind == 0 && !(vis ? x == 0.0 : x <= MASK_BIG)) return 0;
        if (kind == 1 && (x != 0) != vis) return 0;
        if (kind == 2 && (x != 0) == vis) return 0;
    }
    return 1;
}

/* Every element of a CONST is <= MASK_BIG (the "fill" of a Where mask). */
static int all_very_negative(IrValue *f) {
    if (!f || f->kind != IR_VK_CONST || !ir_value_has_data(f) || !ir_dtype_is_float(f->dtype))
        return 0;
    int64_t ne = ir_shape_numel(&f->shape);
    if (ne < 1) return 0;
    for (int64_t e = 0; e < ne; e++) {
        double x;
        if (value_read_double(f, e, &x) || !(x <= MASK_BIG)) return 0;
    }
    return 1;
}

/* Peel one mask off s: returns the masked operand or NULL. */
static IrValue *peel_mask(Canon *c, IrValue *s, Match *m) {
    const IrShape *sh = &s->shape;
    IrNode *p = canon_def(s, IR_OP_ADD);
    if (p) {
        for (int i = 0; i < 2; i++)
            if (p->in[i]->shape_known && ir_shape_equal(&p->in[i]->shape, sh) &&
                mask_is_causal(c, p->in[1 - i], sh, 0)) {
                match_add(m, p);
                return p->in[i];
            }
        return NULL;
    }
    p = canon_def(s, IR_OP_WHERE);
    if (p) {
        IrValue *cond = p->in[0];
        if (p->in[1]->shape_known && ir_shape_equal(&p->in[1]->shape, sh) &&
            all_very_negative(p->in[2]) && mask_is_causal(c, cond, sh, 1)) {
            match_add(m, p);
            return p->in[1];
        }
        if (p->in[2]->shape_known && ir_shape_equal(&p->in[2]->shape, sh) &&
            all_very_negative(p->in[1]) && mask_is_causal(c, cond, sh, 2)) {
            match_add(m, p);
            return p->in[2];
        }
    }
    return NULL;
}

/* v = Mul(a, k) / Mul(k, a) / Div(a, k) with k a scalar const: returns a
 * and multiplies *scale. */
static IrValue *peel_scale(const Canon *c, IrValue *v, double *scale, Match *m, int need_single) {
    if (need_single && canon_uses(c, v) != 1) return NULL;
    double k;
    IrNode *p = canon_def(v, IR_OP_DIV);
    if (p && canon_const_scalar(p->in[1], &k) && k != 0) {
        match_add(m, p);
        *scale /= k;
        return p->in[0];
    }
    p = canon_def(v, IR_OP_MUL);
    if (!p) return NULL;
    for (int i = 0; i < 2; i++)
        if (canon_const_scalar(p->in[1 - i], &k)) {
            match_add(m, p);
            *scale *= k;
            return p->in[i];
        }
    return NULL;
}

/* SDPA's NaN guard after the Softmax: Where(IsNaN(p), 0, p).  Returns p (a
 * Softmax output) with the guard's two nodes added to m, or NULL.  Whether
 * dropping it is sound is decided by the caller once the mask is known. */
static IrValue *peel_nan_guard(const Canon *c, IrValue *x, Match *m) {
    IrNode *w = canon_def(x, IR_OP_WHERE);
    if (!w) return NULL;
    IrNode *nan = canon_def(w->in[0], IR_OP_IS_NAN);
    double z;
    if (!nan || nan->in[0] != w->in[2] || !canon_const_scalar(w->in[1], &z) || z != 0.0)
        return NULL;
    IrValue *p = w->in[2];
    if (!canon_def(p, IR_OP_SOFTMAX) || canon_uses(c, w->in[0]) != 1) return NULL;
    match_add(m, w);
    match_add(m, nan);
    return p;
}

/* The dynamo exporter spells kT of a k[.., S, D] through a 3-D batch:
 * Reshape(Transpose(Reshape(k, [N, S, D]), [0, 2, 1]), [.., D, S]) with N
 * the product of k's batch dims.  The inner Reshape only merges the
 * leading dims and the outer one splits them back, so kT is k with its last
 * two dims swapped.  Returns k (the three nodes added to m) or NULL. */
static IrValue *k_from_flat_kt(const Canon *c, IrValue *kt, Match *m) {
    int r = kt->shape.rank;
    IrNode *r2 = canon_def(kt, IR_OP_RESHAPE);
    if (!r2 || r < 3 || canon_uses(c, kt) != 1 || kt->is_graph_output) return NULL;
    IrValue *t = r2->in[0];
    IrNode *tr = canon_def(t, IR_OP_TRANSPOSE);
    if (!tr || t->shape.rank != 3) return NULL;
    const int64_t *p;
    if (ir_attr_ints(tr, "perm", &p) != 3 || p[0] != 0 || p[1] != 2 || p[2] != 1) return NULL;
    IrNode *r1 = canon_def(tr->in[0], IR_OP_RESHAPE);
    if (!r1) return NULL;
    IrValue *k = r1->in[0], *flat = tr->in[0];
    if (k->shape.rank != r || flat->shape.rank != 3) return NULL;
    int64_t s = k->shape.dims[r - 2], d = k->shape.dims[r - 1], n = 1;
    for (int i = 0; i < r - 2; i++) {
        if (k->shape.dims[i] != kt->shape.dims[i]) return NULL;
        n *= k->shape.dims[i];
    }
    if (flat->shape.dims[0] != n || flat->shape.dims[1] != s || flat->shape.dims[2] != d ||
        kt->shape.dims[r - 2] != d || kt->shape.dims[r - 1] != s)
        return NULL;
    match_add(m, r2);
    match_add(m, tr);
    match_add(m, r1);
    return k;
}

/* Multi-query / grouped attention whose K/V heads are broadcast by the
 * MatMuls themselves (Falcon: one K/V head): the canonical op wants q's
 * batch dims on k and v, so broadcast them explicitly (Expand's gradient
 * sums over the copies, which is what the MatMul broadcast did). */
static IrValue *expand_to_batch(Canon *c, IrNode *root, IrValue *x, const IrShape *q,
                                const char *what, IrError *err) {
    int r = q->rank, same = 1;
    for (int i = 0; i < r - 2; i++) same &= x->shape.dims[i] == q->dims[i];
    if (same) return x;
    int64_t dims[IR_MAX_RANK];
    for (int i = 0; i < r; i++) dims[i] = i < r - 2 ? q->dims[i] : x->shape.dims[i];
    char name[512];
    snprintf(name, sizeof name, "%s.%s_shape", root->name, what);
    IrValue *in[2] = {x, ir_const_i64s(c->g, name, r, dims)};
    snprintf(name, sizeof name, "%s.%s_expand", root->name, what);
    return canon_insert(c, root, IR_OP_EXPAND, name, 2, in, err);
}

/* A scalar factor applied to q before its head split: OPT multiplies
 * q_proj's output by head_dim^-0.5 and calls SDPA with scale 1, so q =
 * Transpose/Reshape(..(Mul(x, k))).  Data movement commutes with a scalar
 * factor, so the factor can move into the Attention's scale.  Finds the Mul
 * (every value from it to q read once, by the next node only); returns it
 * with *x its other operand and *k the factor, or NULL. */
static IrNode *find_q_prescale(const Canon *c, IrValue *q, IrValue **x, double *k) {
    IrValue *v = q;
    for (int depth = 0; depth < 4; depth++) {
        IrNode *p = v->producer;
        if (!p || p->dead || (p->op != IR_OP_RESHAPE && p->op != IR_OP_TRANSPOSE)) return NULL;
        if (canon_uses(c, v) != 1 || v->is_graph_output) return NULL;
        v = p->in[0];
        IrNode *mul = canon_def(v, IR_OP_MUL);
        if (!mul) continue;
        if (canon_uses(c, v) != 1 || v->is_graph_output) return NULL;
        for (int i = 0; i < 2; i++)
            if (canon_const_scalar(mul->in[1 - i], k) && mul->in[i]->dtype == v->dtype &&
                ir_shape_equal(&mul->in[i]->shape, &v->shape)) {
                *x = mul->in[i];
                return mul;
            }
        return NULL;
    }
    return NULL;
}

int canon_attention(Canon *c, IrNode *root, IrError *err) {
    if (root->op != IR_OP_MATMUL) return 0;
    Match m = {0};
    IrValue *p = root->in[0];
    IrValue *u = peel_nan_guard(c, p, &m);
    int guarded = u != NULL;
    if (u) p = u;
    IrNode *sm = canon_def(p, IR_OP_SOFTMAX);
    if (!sm) return 0;
    IrValue *s = sm->in[0], *v = root->in[1];
    int r = s->shape.rank;
    if (r < 2 || v->shape.rank != r || s->dtype != IR_F32) return 0;
    int64_t ax = ir_attr_int(sm, "axis", -1);
    if (ax != -1 && ax != r - 1) return 0;
    match_add(&m, sm);
    int causal = 0;
    for (int k = 0; k < 3; k++) {
        IrValue *w = peel_mask(c, s, &m);
        if (!w) break;
        causal = 1;
        s = w;
    }
    /* The NaN guard only changes rows whose every score is masked (Softmax
     * of all -inf).  Unmasked, or under a mask proven causal with S >= T
     * (row i sees keys 0..i+S-T, at least one), no row is, so for finite
     * scores the guard is the identity and is dropped.  Otherwise (T > S:
     * the first T-S rows see nothing) the guard matters: stay primitive. */
    if (guarded && causal && s->shape.dims[r - 1] < s->shape.dims[r - 2]) return 0;
    double scale = 1.0;
    u = peel_scale(c, s, &scale, &m, 0);
    if (u) s = u;
    IrNode *qk = canon_def(s, IR_OP_MATMUL);
    if (!qk) return 0;
    match_add(&m, qk);
    IrValue *q = qk->in[0], *kt = qk->in[1];
    if ((u = peel_scale(c, q, &scale, &m, 1))) q = u;
    if ((u = peel_scale(c, kt, &scale, &m, 1))) kt = u;
    if (q->shape.rank != r || kt->shape.rank != r) return 0;
    /* the canonical op takes q, k, v with identical batch dims: q's must be
     * the scores' (no broadcasting of q); k and v may broadcast (size-1
     * dims, multi-query) and get an explicit Expand below */
    for (int i = 0; i < r - 2; i++) {
        int64_t qd = q->shape.dims[i], kd = kt->shape.dims[i], vd = v->shape.dims[i];
        if (qd != s->shape.dims[i] || (kd != qd && kd != 1) || (vd != qd && vd != 1)) return 0;
    }
    /* k from kT: undo the swap of the last two dims */
    IrValue *k = NULL;
    IrNode *tr = canon_def(kt, IR_OP_TRANSPOSE);
    int64_t perm[IR_MAX_RANK];
    Match mf = m;
    if (!tr && (k = k_from_flat_kt(c, kt, &mf)) && match_internal(c, &mf, root)) {
        m = mf;
    } else if (tr && canon_uses(c, kt) == 1 && !kt->is_graph_output) {
        k = NULL;
        const int64_t *pp;
        int np = ir_attr_ints(tr, "perm", &pp);
        if (np && np != r) return 0;
        for (int i = 0; i < r; i++) perm[i] = np ? pp[i] : r - 1 - i;
        int64_t t = perm[r - 1];
        perm[r - 1] = perm[r - 2];
        perm[r - 2] = t;
        int ident = 1;
        for (int i = 0; i < r; i++) ident &= perm[i] == i;
        Match mt = m;
        match_add(&mt, tr);
        if (!match_internal(c, &mt, root)) return 0;
        m = mt;
        if (ident) k = tr->in[0];
    } else {
        k = NULL;
        tr = NULL;
        for (int i = 0; i < r; i++) perm[i] = i;
        perm[r - 1] = r - 2;
        perm[r - 2] = r - 1;
        if (!match_internal(c, &m, root)) return 0;
    }
    if (!k) {
        char name[512];
        snprintf(name, sizeof name, "%s.k", root->name);
        IrValue *src = tr ? tr->in[0] : kt;
        k = canon_insert(c, root, IR_OP_TRANSPOSE, name, 1, &src, err);
        if (!k) return -1;
        ir_node_set_ints(k->producer, "perm", r, perm);
        if (shape_infer_node(k->producer, err)) return -1;
    }
    /* last: this rewires the node reading the Mul, so only once the
     * rewrite is certain */
    IrValue *qx;
    double qk_factor;
    IrNode *qmul = find_q_prescale(c, q, &qx, &qk_factor);
    if (qmul) {
        ir_replace_uses(c->g, qmul->out[0], qx);
        ir_node_kill(qmul);
        canon_count_uses(c);
        scale *= qk_factor;
    }
    IrShape qs = q->shape;
    if (!(k = expand_to_batch(c, root, k, &qs, "k", err))) return -1;
    if (!(v = expand_to_batch(c, root, v, &qs, "v", err))) return -1;
    IrValue *in[3] = {q, k, v};
    CanonAttr at[2] = {{.name = "causal", .i = causal}, {.name = "scale", .is_float = 1, .f = scale}};
    return canon_rewrite(c, &m, root, IR_OP_ATTENTION, 3, in, at, 2, err) ? 1 : -1;
}
