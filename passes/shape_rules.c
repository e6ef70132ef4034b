/* Shape rules: the dtype and static output shape of every IR op, following
 * the newest ONNX opset semantics described in ir/ops.def.  One table entry
 * per IrOp (designated initializers); tests check the table is complete. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "shape_rules.h"
#include "shape_rules_train.h"

/* ---------------------------------------------------------------- helpers */
/* No tensor hetc handles has more elements (256 T); anything above is a
 * corrupt or hostile shape, rejected before any size arithmetic. */
#define SHAPE_MAX_NUMEL ((int64_t)1 << 48)

int node_errorf(IrError *err, const IrNode *n, const char *fmt, ...) {
    if (!err) return -1;
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err->msg, sizeof err->msg, "node '%s' (%s): %s", n->name, ir_op_name(n->op), msg);
    return -1;
}

#define SH(s) ir_shape_str((s), (char[160]){0}, 160)

int value_read_ints(IrValue *v, int64_t *out, int max, IrError *err) {
    if (!v) return ir_errorf(err, "missing input");
    if (v->kind != IR_VK_CONST || !ir_value_has_data(v))
        return ir_errorf(err, "value '%s' is not a constant (%s); hetc needs it at compile time "
                         "to know static shapes", v->name, ir_value_kind_name(v->kind));
    if (v->dtype != IR_I64 && v->dtype != IR_I32)
        return ir_errorf(err, "value '%s' has dtype %s, expected i64 or i32", v->name,
                         ir_dtype_name(v->dtype));
    int64_t ne = ir_shape_numel(&v->shape);
    if (ne < 0 || ne > max)
        return ir_errorf(err, "value '%s' has %lld elements (at most %d expected)", v->name,
                         (long long)ne, max);
    IrError e2;
    const void *d = ir_value_data(v, &e2);
    if (!d) return ir_errorf(err, "%s", e2.msg);
    if (v->nbytes < (size_t)ne * ir_dtype_size(v->dtype))
        return ir_errorf(err, "value '%s' holds %zu bytes, fewer than its shape needs", v->name,
                         v->nbytes);
    for (int64_t i = 0; i < ne; i++)
        out[i] = v->dtype == IR_I64 ? ((const int64_t *)d)[i] : ((const int32_t *)d)[i];
    return (int)ne;
}

int value_read_double(IrValue *v, int64_t i, double *out) {
    if (!v || !ir_value_has_data(v)) return -1;
    int64_t ne = ir_shape_numel(&v->shape);
    if (ne <= i || i < 0) return -1;
    const void *d = ir_value_data(v, NULL);
    if (!d || v->nbytes < (size_t)ne * ir_dtype_size(v->dtype)) return -1;
    switch (v->dtype) {
    case IR_F32: *out = ((const float *)d)[i]; return 0;
    case IR_F64: *out = ((const double *)d)[i]; return 0;
    case IR_I64: *out = (double)((const int64_t *)d)[i]; return 0;
    case IR_I32: *out = ((const int32_t *)d)[i]; return 0;
    case IR_I8: *out = ((const int8_t *)d)[i]; return 0;
    case IR_U8:
    case IR_BOOL: *out = ((const uint8_t *)d)[i]; return 0;
    default: return -1;
    }
}

/* Input i must exist and have a known static shape. */
static int need_in(IrNode *n, int i, IrError *err) {
    if (i >= n->nin || !n->in[i]) return node_errorf(err, n, "input %d is missing", i);
    IrValue *v = n->in[i];
    if (!v->shape_known || !ir_shape_is_static(&v->shape))
        return node_errorf(err, n, "input %d '%s' has no static shape %s", i, v->name,
                           v->shape_known ? SH(&v->shape) : "(unknown)");
    if (v->dtype == IR_UNDEF) return node_errorf(err, n, "input %d '%s' has no dtype", i, v->name);
    return 0;
}
static int has_in(const IrNode *n, int i) { return i < n->nin && n->in[i] != NULL; }

static int set_out(IrNode *n, int i, IrDType dt, const IrShape *s, IrError *err) {
    if (i >= n->nout) return 0;
    IrValue *o = n->out[i];
    if (!o) return 0; /* omitted optional output */
    if (s->rank > IR_MAX_RANK)
        return node_errorf(err, n, "output rank %d exceeds %d", s->rank, IR_MAX_RANK);
    /* bound every extent and the element count so later size arithmetic
     * (numel * dtype size) cannot overflow on hostile shapes */
    int64_t numel = 1;
    for (int d = 0; d < s->rank; d++) {
        if (s->dims[d] < 0)
            return node_errorf(err, n, "output %d '%s' would have a negative extent %s", i,
                               o->name, SH(s));
        if (s->dims[d] > SHAPE_MAX_NUMEL || (s->dims[d] && numel > SHAPE_MAX_NUMEL / s->dims[d]))
            return node_errorf(err, n, "output %d '%s' would have more than 2^48 elements %s", i,
                               o->name, SH(s));
        numel *= s->dims[d];
    }
    o->dtype = dt;
    o->shape = *s;
    o->shape_known = 1;
    for (int d = 0; d < IR_MAX_RANK; d++) {
        free(o->sym[d]);
        o->sym[d] = NULL;
    }
    return 0;
}

/* Normalise axis a against rank r (ONNX: -r <= a < r). */
static int norm_axis(IrNode *n, int64_t a, int r, const char *what, int64_t *out, IrError *err) {
    if (a < -r || a >= r)
        return node_errorf(err, n, "%s %lld is out of range for rank %d", what, (long long)a, r);
    *out = a < 0 ? a + r : a;
    return 0;
}

/* numpy broadcasting of a and b into out; -1 on mismatch. */
static int broadcast2(const IrShape *a, const IrShape *b, IrShape *out) {
    int r = a->rank > b->rank ? a->rank : b->rank;
    IrShape s = ir_shape_make(r, NULL);
    for (int i = 0; i < r; i++) {
        int ia = i - (r - a->rank), ib = i - (r - b->rank);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da == db || db == 1) s.dims[i] = da;
        else if (da == 1) s.dims[i] = db;
        else return -1;
    }
    *out = s;
    return 0;
}

static int broadcast_inputs(IrNode *n, int first, int count, IrShape *out, IrError *err) {
    IrShape s = ir_shape_make(0, NULL);
    for (int i = first; i < first + count; i++) {
        if (need_in(n, i, err)) return -1;
        IrShape t;
        if (broadcast2(&s, &n->in[i]->shape, &t))
            return node_errorf(err, n, "input shapes %s and %s do not broadcast (input %d '%s')",
                               SH(&s), SH(&n->in[i]->shape), i, n->in[i]->name);
        s = t;
    }
    *out = s;
    return 0;
}

static int same_dtype(IrNode *n, int a, int b, IrError *err) {
    if (n->in[a]->dtype != n->in[b]->dtype)
        return node_errorf(err, n, "input dtypes differ: '%s' is %s, '%s' is %s", n->in[a]->name,
                           ir_dtype_name(n->in[a]->dtype), n->in[b]->name,
                           ir_dtype_name(n->in[b]->dtype));
    return 0;
}

/* ---------------------------------------------------------------- elementwise */
static int rule_binary(IrNode *n, IrError *err) {
    IrShape s;
    if (broadcast_inputs(n, 0, 2, &s, err)) return -1;
    if (n->op != IR_OP_POW && same_dtype(n, 0, 1, err)) return -1;
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}
static int rule_variadic(IrNode *n, IrError *err) {
    IrShape s;
    if (broadcast_inputs(n, 0, n->nin, &s, err)) return -1;
    for (int i = 1; i < n->nin; i++)
        if (same_dtype(n, 0, i, err)) return -1;
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}
static int rule_compare(IrNode *n, IrError *err) {
    IrShape s;
    if (broadcast_inputs(n, 0, 2, &s, err) || same_dtype(n, 0, 1, err)) return -1;
    return set_out(n, 0, IR_BOOL, &s, err);
}
static int rule_where(IrNode *n, IrError *err) {
    IrShape s;
    if (broadcast_inputs(n, 0, 3, &s, err) || same_dtype(n, 1, 2, err)) return -1;
    if (n->in[0]->dtype != IR_BOOL)
        return node_errorf(err, n, "condition '%s' is %s, expected bool", n->in[0]->name,
                           ir_dtype_name(n->in[0]->dtype));
    return set_out(n, 0, n->in[1]->dtype, &s, err);
}
static int rule_unary(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    return set_out(n, 0, n->in[0]->dtype, &n->in[0]->shape, err);
}
static int rule_not(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    return set_out(n, 0, IR_BOOL, &n->in[0]->shape, err);
}
static int rule_cast(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    int64_t to = ir_attr_int(n, "to", IR_UNDEF);
    if (!ir_dtype_size((IrDType)to))
        return node_errorf(err, n, "attribute 'to' (%lld) is not a supported dtype",
                           (long long)to);
    return set_out(n, 0, (IrDType)to, &n->in[0]->shape, err);
}
static int rule_dropout(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    if (set_out(n, 0, n->in[0]->dtype, &n->in[0]->shape, err)) return -1;
    return set_out(n, 1, IR_BOOL, &n->in[0]->shape, err);
}
static int rule_clip(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    for (int i = 1; i < 3; i++)
        if (has_in(n, i) && n->in[i]->shape_known && ir_shape_numel(&n->in[i]->shape) != 1)
            return node_errorf(err, n, "%s '%s' must be a scalar, has shape %s",
                               i == 1 ? "min" : "max", n->in[i]->name, SH(&n->in[i]->shape));
    return set_out(n, 0, n->in[0]->dtype, &n->in[0]->shape, err);
}

/* ---------------------------------------------------------------- linear algebra */
static int rule_matmul(IrNode *n, IrError *err) {
    if (need_in(n, 0, err) || need_in(n, 1, err) || same_dtype(n, 0, 1, err)) return -1;
    const IrShape *a = &n->in[0]->shape, *b = &n->in[1]->shape;
    if (a->rank < 1 || b->rank < 1)
        return node_errorf(err, n, "MatMul of a scalar: inputs %s and %s", SH(a), SH(b));
    int64_t ka = a->dims[a->rank - 1];
    int64_t kb = b->rank == 1 ? b->dims[0] : b->dims[b->rank - 2];
    if (ka != kb)
        return node_errorf(err, n, "inner dims %lld and %lld do not match for inputs %s and %s",
                           (long long)ka, (long long)kb, SH(a), SH(b));
    /* batch dims: everything before the last two (1-D operands have none) */
    IrShape ba = ir_shape_make(a->rank > 2 ? a->rank - 2 : 0, a->dims);
    IrShape bb = ir_shape_make(b->rank > 2 ? b->rank - 2 : 0, b->dims);
    IrShape s;
    if (broadcast2(&ba, &bb, &s))
        return node_errorf(err, n, "batch dims of %s and %s do not broadcast", SH(a), SH(b));
    if (a->rank >= 2) s.dims[s.rank++] = a->dims[a->rank - 2];
    if (b->rank >= 2) s.dims[s.rank++] = b->dims[b->rank - 1];
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_gemm(IrNode *n, IrError *err) {
    if (need_in(n, 0, err) || need_in(n, 1, err) || same_dtype(n, 0, 1, err)) return -1;
    const IrShape *a = &n->in[0]->shape, *b = &n->in[1]->shape;
    if (a->rank != 2 || b->rank != 2)
        return node_errorf(err, n, "inputs must be 2-D, got %s and %s", SH(a), SH(b));
    int ta = ir_attr_int(n, "transA", 0) != 0, tb = ir_attr_int(n, "transB", 0) != 0;
    int64_t m = a->dims[ta ? 1 : 0], k = a->dims[ta ? 0 : 1];
    int64_t k2 = b->dims[tb ? 1 : 0], nn = b->dims[tb ? 0 : 1];
    if (k != k2)
        return node_errorf(err, n, "inner dims %lld and %lld do not match for inputs %s and %s "
                           "(transA=%d transB=%d)", (long long)k, (long long)k2, SH(a), SH(b),
                           ta, tb);
    IrShape s = ir_shape_make(2, (int64_t[]){m, nn});
    if (has_in(n, 2)) {
        if (need_in(n, 2, err)) return -1;
        IrShape t;
        if (broadcast2(&s, &n->in[2]->shape, &t) || !ir_shape_equal(&t, &s))
            return node_errorf(err, n, "C %s does not broadcast to the output %s",
                               SH(&n->in[2]->shape), SH(&s));
    }
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

/* ---------------------------------------------------------------- reductions */
static int rule_reduce(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    const IrShape *x = &n->in[0]->shape;
    int64_t axes[IR_MAX_RANK];
    int na = 0, given = 0;
    if (has_in(n, 1)) {
        na = value_read_ints(n->in[1], axes, IR_MAX_RANK, err);
        if (na < 0) return ir_error_prefix(err, "node '%s' (%s): axes", n->name,
                                           ir_op_name(n->op));
        given = 1;
    } else {
        const int64_t *a;
        int c = ir_attr_ints(n, "axes", &a); /* tolerated: pre-18 attribute form */
        if (c > IR_MAX_RANK) return node_errorf(err, n, "too many axes (%d)", c);
        for (int i = 0; i < c; i++) axes[i] = a[i];
        na = c;
        given = c > 0;
    }
    int keep = ir_attr_int(n, "keepdims", 1) != 0;
    if (na == 0 && ir_attr_int(n, "noop_with_empty_axes", 0))
        return set_out(n, 0, n->in[0]->dtype, x, err);
    (void)given;
    int red[IR_MAX_RANK] = {0};
    if (na == 0)
        for (int i = 0; i < x->rank; i++) red[i] = 1;
    for (int i = 0; i < na; i++) {
        int64_t a = 0;
        if (norm_axis(n, axes[i], x->rank, "axis", &a, err)) return -1;
        if (red[a]) return node_errorf(err, n, "axis %lld repeated", (long long)axes[i]);
        red[a] = 1;
    }
    IrShape s = ir_shape_make(0, NULL);
    for (int i = 0; i < x->rank; i++) {
        if (!red[i]) s.dims[s.rank++] = x->dims[i];
        else if (keep) s.dims[s.rank++] = 1;
    }
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_softmax(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    int64_t a = 0;
    int r = n->in[0]->shape.rank;
    if (r > 0 && norm_axis(n, ir_attr_int(n, "axis", -1), r, "axis", &a, err)) return -1;
    return set_out(n, 0, n->in[0]->dtype, &n->in[0]->shape, err);
}

/* ---------------------------------------------------------------- data movement */
static int rule_reshape(IrNode *n, IrError *err) {
    if (need_in(n, 0, err) || need_in(n, 1, err)) return -1;
    const IrShape *x = &n->in[0]->shape;
    int64_t sh[IR_MAX_RANK];
    int r = value_read_ints(n->in[1], sh, IR_MAX_RANK, err);
    if (r < 0) return ir_error_prefix(err, "node '%s' (Reshape): shape", n->name);
    int allowzero = ir_attr_int(n, "allowzero", 0) != 0;
    IrShape s = ir_shape_make(r, NULL);
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < r; i++) {
        int64_t d = sh[i];
        if (d == 0 && !allowzero) {
            if (i >= x->rank)
                return node_errorf(err, n, "target shape entry %d is 0 (copy the input dim) but "
                                   "input %s has rank %d", i, SH(x), x->rank);
            d = x->dims[i];
        }
        if (d == -1) {
            if (infer >= 0) return node_errorf(err, n, "shape has more than one -1");
            infer = i;
            continue;
        }
        if (d < 0) return node_errorf(err, n, "shape has a negative extent %lld", (long long)d);
        if (d > SHAPE_MAX_NUMEL || (d && known > SHAPE_MAX_NUMEL / d))
            return node_errorf(err, n, "target shape is too large");
        s.dims[i] = d;
        known *= d;
    }
    int64_t total = ir_shape_numel(x);
    if (infer >= 0) {
        if (known == 0 || total % known)
            return node_errorf(err, n, "cannot infer the -1 in the target shape: input %s has "
                               "%lld elements, the other dims multiply to %lld", SH(x),
                               (long long)total, (long long)known);
        s.dims[infer] = total / known;
    } else if (known != total) {
        return node_errorf(err, n, "cannot reshape %s (%lld elements) to %s (%lld elements)",
                           SH(x), (long long)total, SH(&s), (long long)known);
    }
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_transpose(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    const IrShape *x = &n->in[0]->shape;
    const int64_t *perm;
    int np = ir_attr_ints(n, "perm", &perm);
    int64_t p[IR_MAX_RANK];
    if (np == 0) {
        for (int i = 0; i < x->rank; i++) p[i] = x->rank - 1 - i;
    } else {
        if (np != x->rank)
            return node_errorf(err, n, "perm has %d entries for input %s", np, SH(x));
        int seen[IR_MAX_RANK] = {0};
        for (int i = 0; i < np; i++) {
            int64_t a = 0;
            if (norm_axis(n, perm[i], x->rank, "perm entry", &a, err)) return -1;
            if (seen[a]) return node_errorf(err, n, "perm repeats axis %lld", (long long)a);
            seen[a] = 1;
            p[i] = a;
        }
    }
    IrShape s = ir_shape_make(x->rank, NULL);
    for (int i = 0; i < x->rank; i++) s.dims[i] = x->dims[p[i]];
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_split(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    const IrShape *x = &n->in[0]->shape;
    int64_t axis = 0;
    if (norm_axis(n, ir_attr_int(n, "axis", 0), x->rank, "axis", &axis, err)) return -1;
    int64_t dim = x->dims[axis];
    int64_t sizes[1024];
    int ns = n->nout;
    if (ns > 1024) return node_errorf(err, n, "too many outputs (%d)", ns);
    if (has_in(n, 1)) {
        int c = value_read_ints(n->in[1], sizes, 1024, err);
        if (c < 0) return ir_error_prefix(err, "node '%s' (Split): split", n->name);
        if (c != ns)
            return node_errorf(err, n, "split has %d sizes but the node has %d outputs", c, ns);
        int64_t tot = 0;
        for (int i = 0; i < c; i++) {
            if (sizes[i] < 0 || sizes[i] > dim)
                return node_errorf(err, n, "split size %lld out of range for extent %lld",
                                   (long long)sizes[i], (long long)dim);
            tot += sizes[i];
        }
        if (tot != dim)
            return node_errorf(err, n, "split sizes add up to %lld but axis %lld of %s is %lld",
                               (long long)tot, (long long)axis, SH(x), (long long)dim);
    } else {
        int64_t k = ir_attr_int(n, "num_outputs", 0);
        if (k > 0) {
            if (k != ns)
                return node_errorf(err, n, "num_outputs is %lld but the node has %d outputs",
                                   (long long)k, ns);
            /* ONNX 18: chunks of ceil(dim/k), the last one smaller */
            int64_t chunk = (dim + k - 1) / k, left = dim;
            for (int i = 0; i < ns; i++) {
                sizes[i] = left < chunk ? left : chunk;
                left -= sizes[i];
            }
            if (left != 0 || (ns > 0 && sizes[ns - 1] <= 0 && dim > 0))
                return node_errorf(err, n, "cannot split axis of extent %lld into %lld chunks",
                                   (long long)dim, (long long)k);
        } else {
            if (ns <= 0 || dim % ns)
                return node_errorf(err, n, "axis %lld of %s does not split evenly into %d outputs",
                                   (long long)axis, SH(x), ns);
            for (int i = 0; i < ns; i++) sizes[i] = dim / ns;
        }
    }
    for (int i = 0; i < ns; i++) {
        IrShape s = *x;
        s.dims[axis] = sizes[i];
        if (set_out(n, i, n->in[0]->dtype, &s, err)) return -1;
    }
    return 0;
}

static int rule_concat(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    IrShape s = n->in[0]->shape;
    int64_t axis = 0;
    if (!ir_node_attr(n, "axis")) return node_errorf(err, n, "attribute 'axis' is required");
    if (norm_axis(n, ir_attr_int(n, "axis", 0), s.rank, "axis", &axis, err)) return -1;
    for (int i = 1; i < n->nin; i++) {
        if (need_in(n, i, err) || same_dtype(n, 0, i, err)) return -1;
        const IrShape *t = &n->in[i]->shape;
        int ok = t->rank == s.rank;
        for (int d = 0; ok && d < s.rank; d++)
            if (d != axis && t->dims[d] != s.dims[d]) ok = 0;
        if (!ok)
            return node_errorf(err, n, "input %d '%s' %s does not match %s outside axis %lld", i,
                               n->in[i]->name, SH(t), SH(&n->in[0]->shape), (long long)axis);
        if (s.dims[axis] > SHAPE_MAX_NUMEL - t->dims[axis])
            return node_errorf(err, n, "concatenated extent is too large");
        s.dims[axis] += t->dims[axis];
    }
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static int rule_slice(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    const IrShape *x = &n->in[0]->shape;
    int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], sp[IR_MAX_RANK];
    int k = value_read_ints(n->in[1], st, IR_MAX_RANK, err);
    if (k < 0) return ir_error_prefix(err, "node '%s' (Slice): starts", n->name);
    int k2 = value_read_ints(n->in[2], en, IR_MAX_RANK, err);
    if (k2 < 0) return ir_error_prefix(err, "node '%s' (Slice): ends", n->name);
    if (k2 != k) return node_errorf(err, n, "starts has %d entries, ends %d", k, k2);
    if (has_in(n, 3)) {
        if (value_read_ints(n->in[3], ax, IR_MAX_RANK, err) != k)
            return ir_error_prefix(err, "node '%s' (Slice): axes (must match starts)", n->name);
    } else {
        for (int i = 0; i < k; i++) ax[i] = i;
    }
    if (has_in(n, 4)) {
        if (value_read_ints(n->in[4], sp, IR_MAX_RANK, err) != k)
            return ir_error_prefix(err, "node '%s' (Slice): steps (must match starts)", n->name);
    } else {
        for (int i = 0; i < k; i++) sp[i] = 1;
    }
    IrShape s = *x;
    int seen[IR_MAX_RANK] = {0};
    for (int i = 0; i < k; i++) {
        int64_t a = 0;
        if (norm_axis(n, ax[i], x->rank, "axis", &a, err)) return -1;
        if (seen[a]) return node_errorf(err, n, "axis %lld repeated", (long long)a);
        seen[a] = 1;
        int64_t d = x->dims[a], step = sp[i];
        if (step == 0) return node_errorf(err, n, "step 0 on axis %lld", (long long)a);
        int64_t b = st[i], e = en[i];
        /* ONNX Slice: negative indices count from the end, then clamp; for
         * negative steps the range is [-1, d-1] so a slice can reach index 0 */
        if (b < 0) b += d;
        if (e < 0 && e > INT64_MIN / 2) e += d;
        int64_t len;
        if (step < -INT64_MAX) step = -INT64_MAX; /* any |step| >= d takes one element */
        if (step > 0) {
            b = clamp64(b, 0, d);
            e = clamp64(e, 0, d);
            len = e > b ? (e - b - 1) / step + 1 : 0;
        } else {
            b = clamp64(b, 0, d - 1);
            e = clamp64(e, -1, d - 1);
            len = b > e ? (b - e - 1) / (-step) + 1 : 0;
        }
        s.dims[a] = len;
    }
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_squeeze(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    const IrShape *x = &n->in[0]->shape;
    int drop[IR_MAX_RANK] = {0};
    if (has_in(n, 1)) {
        int64_t ax[IR_MAX_RANK];
        int k = value_read_ints(n->in[1], ax, IR_MAX_RANK, err);
        if (k < 0) return ir_error_prefix(err, "node '%s' (Squeeze): axes", n->name);
        for (int i = 0; i < k; i++) {
            int64_t a = 0;
            if (norm_axis(n, ax[i], x->rank, "axis", &a, err)) return -1;
            if (x->dims[a] != 1)
                return node_errorf(err, n, "cannot squeeze axis %lld of %s: extent is not 1",
                                   (long long)ax[i], SH(x));
            drop[a] = 1;
        }
    } else {
        for (int i = 0; i < x->rank; i++) drop[i] = x->dims[i] == 1;
    }
    IrShape s = ir_shape_make(0, NULL);
    for (int i = 0; i < x->rank; i++)
        if (!drop[i]) s.dims[s.rank++] = x->dims[i];
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_unsqueeze(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    const IrShape *x = &n->in[0]->shape;
    int64_t ax[IR_MAX_RANK];
    int k = value_read_ints(n->in[1], ax, IR_MAX_RANK, err);
    if (k < 0) return ir_error_prefix(err, "node '%s' (Unsqueeze): axes", n->name);
    int r = x->rank + k;
    if (r > IR_MAX_RANK) return node_errorf(err, n, "output rank %d exceeds %d", r, IR_MAX_RANK);
    int ins[IR_MAX_RANK] = {0};
    for (int i = 0; i < k; i++) {
        int64_t a = 0;
        if (norm_axis(n, ax[i], r, "axis", &a, err)) return -1;
        if (ins[a]) return node_errorf(err, n, "axis %lld repeated", (long long)ax[i]);
        ins[a] = 1;
    }
    IrShape s = ir_shape_make(r, NULL);
    for (int i = 0, j = 0; i < r; i++) s.dims[i] = ins[i] ? 1 : x->dims[j++];
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_expand(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    int64_t sh[IR_MAX_RANK];
    int r = value_read_ints(n->in[1], sh, IR_MAX_RANK, err);
    if (r < 0) return ir_error_prefix(err, "node '%s' (Expand): shape", n->name);
    IrShape t = ir_shape_make(r, sh), s;
    if (broadcast2(&n->in[0]->shape, &t, &s))
        return node_errorf(err, n, "input %s does not broadcast with shape %s",
                           SH(&n->in[0]->shape), SH(&t));
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_flatten(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    const IrShape *x = &n->in[0]->shape;
    int64_t axis = ir_attr_int(n, "axis", 1);
    if (axis < -x->rank || axis > x->rank)
        return node_errorf(err, n, "axis %lld out of range for %s", (long long)axis, SH(x));
    if (axis < 0) axis += x->rank;
    int64_t a = 1, b = 1;
    for (int i = 0; i < x->rank; i++) *(i < axis ? &a : &b) *= x->dims[i];
    IrShape s = ir_shape_make(2, (int64_t[]){a, b});
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_shape(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    int st, en;
    ir_shape_op_range(n, n->in[0]->shape.rank, &st, &en);
    int64_t len = en > st ? en - st : 0;
    IrShape s = ir_shape_make(1, &len);
    return set_out(n, 0, IR_I64, &s, err);
}

static int rule_constant_of_shape(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    int64_t sh[IR_MAX_RANK];
    int r = value_read_ints(n->in[0], sh, IR_MAX_RANK, err);
    if (r < 0) return ir_error_prefix(err, "node '%s' (ConstantOfShape): shape", n->name);
    IrDType dt = (IrDType)ir_attr_int(n, "dtype", IR_F32);
    if (!ir_dtype_size(dt))
        return node_errorf(err, n, "attribute 'dtype' (%d) is not a supported dtype", (int)dt);
    IrShape s = ir_shape_make(r, sh);
    return set_out(n, 0, dt, &s, err);
}

static int rule_range(IrNode *n, IrError *err) {
    double v[3];
    for (int i = 0; i < 3; i++) {
        if (need_in(n, i, err)) return -1;
        if (n->in[i]->kind != IR_VK_CONST || value_read_double(n->in[i], 0, &v[i]))
            return node_errorf(err, n, "%s '%s' must be a constant scalar to know the output "
                               "size", i == 0 ? "start" : i == 1 ? "limit" : "delta",
                               n->in[i]->name);
    }
    if (v[2] == 0) return node_errorf(err, n, "delta is 0");
    double c = ceil((v[1] - v[0]) / v[2]);
    if (c > (double)SHAPE_MAX_NUMEL)
        return node_errorf(err, n, "Range(%g, %g, %g) would have %g elements", v[0], v[1], v[2],
                           c);
    int64_t len = c > 0 ? (int64_t)c : 0; /* NaN: 0 */
    IrShape s = ir_shape_make(1, &len);
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_trilu(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    if (n->in[0]->shape.rank < 2)
        return node_errorf(err, n, "input %s must have rank >= 2", SH(&n->in[0]->shape));
    return set_out(n, 0, n->in[0]->dtype, &n->in[0]->shape, err);
}

static int rule_gather(IrNode *n, IrError *err) {
    if (need_in(n, 0, err) || need_in(n, 1, err)) return -1;
    const IrShape *x = &n->in[0]->shape, *ix = &n->in[1]->shape;
    int64_t axis = 0;
    if (norm_axis(n, ir_attr_int(n, "axis", 0), x->rank, "axis", &axis, err)) return -1;
    if (n->in[1]->dtype != IR_I64 && n->in[1]->dtype != IR_I32)
        return node_errorf(err, n, "indices '%s' are %s, expected i64 or i32", n->in[1]->name,
                           ir_dtype_name(n->in[1]->dtype));
    int r = x->rank - 1 + ix->rank;
    if (r > IR_MAX_RANK) return node_errorf(err, n, "output rank %d exceeds %d", r, IR_MAX_RANK);
    IrShape s = ir_shape_make(0, NULL);
    for (int i = 0; i < axis; i++) s.dims[s.rank++] = x->dims[i];
    for (int i = 0; i < ix->rank; i++) s.dims[s.rank++] = ix->dims[i];
    for (int i = (int)axis + 1; i < x->rank; i++) s.dims[s.rank++] = x->dims[i];
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_cumsum(IrNode *n, IrError *err) {
    if (need_in(n, 0, err) || need_in(n, 1, err)) return -1;
    if (ir_shape_numel(&n->in[1]->shape) != 1)
        return node_errorf(err, n, "axis '%s' must be a scalar", n->in[1]->name);
    return set_out(n, 0, n->in[0]->dtype, &n->in[0]->shape, err);
}

/* GatherND: data [b..., r dims], indices [b..., m..., k] -> [b..., m..., data dims
 * after b + k]; the first batch_dims dims of data and indices must agree. */
static int rule_gather_nd(IrNode *n, IrError *err) {
    if (need_in(n, 0, err) || need_in(n, 1, err)) return -1;
    const IrShape *x = &n->in[0]->shape, *ix = &n->in[1]->shape;
    if (n->in[1]->dtype != IR_I64 && n->in[1]->dtype != IR_I32)
        return node_errorf(err, n, "indices '%s' are %s, expected i64 or i32", n->in[1]->name,
                           ir_dtype_name(n->in[1]->dtype));
    int64_t b = ir_attr_int(n, "batch_dims", 0);
    if (x->rank < 1 || ix->rank < 1)
        return node_errorf(err, n, "data %s and indices %s must have rank >= 1", SH(x), SH(ix));
    if (b < 0 || b >= x->rank || b >= ix->rank)
        return node_errorf(err, n, "batch_dims %lld must be in [0, min(rank(data), "
                           "rank(indices))) for data %s, indices %s", (long long)b, SH(x),
                           SH(ix));
    int64_t k = ix->dims[ix->rank - 1];
    if (k < 1 || k > x->rank - b)
        return node_errorf(err, n, "indices %s address %lld dims, data %s has %lld after "
                           "batch_dims %lld", SH(ix), (long long)k, SH(x),
                           (long long)(x->rank - b), (long long)b);
    for (int i = 0; i < b; i++)
        if (x->dims[i] != ix->dims[i])
            return node_errorf(err, n, "batch dim %d differs: data %s, indices %s", i, SH(x),
                               SH(ix));
    IrShape s = ir_shape_make(0, NULL);
    for (int i = 0; i < ix->rank - 1; i++) s.dims[s.rank++] = ix->dims[i];
    for (int i = (int)(b + k); i < x->rank; i++) {
        if (s.rank >= IR_MAX_RANK)
            return node_errorf(err, n, "output rank exceeds %d", IR_MAX_RANK);
        s.dims[s.rank++] = x->dims[i];
    }
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_gather_elements(IrNode *n, IrError *err) {
    if (need_in(n, 0, err) || need_in(n, 1, err)) return -1;
    const IrShape *x = &n->in[0]->shape, *ix = &n->in[1]->shape;
    if (n->in[1]->dtype != IR_I64 && n->in[1]->dtype != IR_I32)
        return node_errorf(err, n, "indices '%s' are %s, expected i64 or i32", n->in[1]->name,
                           ir_dtype_name(n->in[1]->dtype));
    if (x->rank < 1 || ix->rank != x->rank)
        return node_errorf(err, n, "indices %s must have the rank of data %s (>= 1)", SH(ix),
                           SH(x));
    int64_t axis = 0;
    if (norm_axis(n, ir_attr_int(n, "axis", 0), x->rank, "axis", &axis, err)) return -1;
    for (int d = 0; d < x->rank; d++)
        if (d != axis && ix->dims[d] > x->dims[d])
            return node_errorf(err, n, "indices %s exceed data %s on axis %d", SH(ix), SH(x), d);
    return set_out(n, 0, n->in[0]->dtype, ix, err);
}

/* ScatterND: updates must be indices.shape[:-1] + data.shape[k:]. */
static int rule_scatter_nd(IrNode *n, IrError *err) {
    for (int i = 0; i < 3; i++)
        if (need_in(n, i, err)) return -1;
    const IrShape *x = &n->in[0]->shape, *ix = &n->in[1]->shape, *u = &n->in[2]->shape;
    if (n->in[1]->dtype != IR_I64 && n->in[1]->dtype != IR_I32)
        return node_errorf(err, n, "indices '%s' are %s, expected i64 or i32", n->in[1]->name,
                           ir_dtype_name(n->in[1]->dtype));
    if (same_dtype(n, 0, 2, err)) return -1;
    const char *red = ir_attr_string(n, "reduction", "none");
    if (strcmp(red, "none") && strcmp(red, "add") && strcmp(red, "mul") && strcmp(red, "max") &&
        strcmp(red, "min"))
        return node_errorf(err, n, "reduction '%s' is not one of none, add, mul, max, min", red);
    int64_t k = ix->rank ? ix->dims[ix->rank - 1] : 0;
    if (x->rank < 1 || ix->rank < 1 || k < 1 || k > x->rank)
        return node_errorf(err, n, "indices %s do not address data %s", SH(ix), SH(x));
    IrShape want = ir_shape_make(0, NULL);
    for (int i = 0; i < ix->rank - 1; i++) want.dims[want.rank++] = ix->dims[i];
    for (int i = (int)k; i < x->rank; i++) {
        if (want.rank >= IR_MAX_RANK) return node_errorf(err, n, "updates rank too large");
        want.dims[want.rank++] = x->dims[i];
    }
    if (!ir_shape_equal(&want, u))
        return node_errorf(err, n, "updates '%s' %s must be %s (indices %s, data %s)",
                           n->in[2]->name, SH(u), SH(&want), SH(ix), SH(x));
    return set_out(n, 0, n->in[0]->dtype, x, err);
}

static int rule_tile(IrNode *n, IrError *err) {
    if (need_in(n, 0, err) || need_in(n, 1, err)) return -1;
    const IrShape *x = &n->in[0]->shape;
    int64_t rep[IR_MAX_RANK];
    int r = value_read_ints(n->in[1], rep, IR_MAX_RANK, err);
    if (r < 0) return ir_error_prefix(err, "node '%s' (Tile): repeats", n->name);
    if (r != x->rank)
        return node_errorf(err, n, "repeats '%s' has %d entries for input %s of rank %d",
                           n->in[1]->name, r, SH(x), x->rank);
    IrShape s = *x;
    for (int i = 0; i < r; i++) {
        if (rep[i] < 0)
            return node_errorf(err, n, "repeats[%d] = %lld is negative", i, (long long)rep[i]);
        if (rep[i] && x->dims[i] > SHAPE_MAX_NUMEL / rep[i])
            return node_errorf(err, n, "repeats[%d] = %lld makes the output too large", i,
                               (long long)rep[i]);
        s.dims[i] = x->dims[i] * rep[i];
    }
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_is_nan(IrNode *n, IrError *err) {
    if (need_in(n, 0, err)) return -1;
    if (!ir_dtype_is_float(n->in[0]->dtype))
        return node_errorf(err, n, "input '%s' is %s, expected a float type", n->in[0]->name,
                           ir_dtype_name(n->in[0]->dtype));
    return set_out(n, 0, IR_BOOL, &n->in[0]->shape, err);
}

/* ---------------------------------------------------------------- canonical ops */
static int rule_linear(IrNode *n, IrError *err) {
    if (need_in(n, 0, err) || need_in(n, 1, err) || same_dtype(n, 0, 1, err)) return -1;
    const IrShape *x = &n->in[0]->shape, *w = &n->in[1]->shape;
    if (x->rank < 1 || w->rank != 2 || x->dims[x->rank - 1] != w->dims[0])
        return node_errorf(err, n, "x %s and W %s do not match (x[...,K] W[K,N])", SH(x), SH(w));
    if (has_in(n, 2)) {
        if (need_in(n, 2, err)) return -1;
        const IrShape *b = &n->in[2]->shape;
        if (b->rank != 1 || b->dims[0] != w->dims[1])
            return node_errorf(err, n, "bias %s does not match W %s", SH(b), SH(w));
    }
    IrShape s = *x;
    s.dims[s.rank - 1] = w->dims[1];
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_norm(IrNode *n, IrError *err) {
    if (need_in(n, 0, err) || need_in(n, 1, err)) return -1;
    const IrShape *x = &n->in[0]->shape;
    int64_t axis = 0;
    if (norm_axis(n, ir_attr_int(n, "axis", -1), x->rank, "axis", &axis, err)) return -1;
    /* scale (and bias) cover the normalised trailing dims */
    IrShape tail = ir_shape_make(x->rank - (int)axis, x->dims + axis);
    for (int i = 1; i < n->nin; i++) {
        if (!has_in(n, i)) continue;
        if (need_in(n, i, err)) return -1;
        IrShape t;
        if (broadcast2(&tail, &n->in[i]->shape, &t) || !ir_shape_equal(&t, &tail))
            return node_errorf(err, n, "%s '%s' %s does not match the normalised dims %s of %s",
                               i == 1 ? "scale" : "bias", n->in[i]->name, SH(&n->in[i]->shape),
                               SH(&tail), SH(x));
    }
    return set_out(n, 0, n->in[0]->dtype, x, err);
}

static int rule_attention(IrNode *n, IrError *err) {
    for (int i = 0; i < 3; i++)
        if (need_in(n, i, err)) return -1;
    const IrShape *q = &n->in[0]->shape, *k = &n->in[1]->shape, *v = &n->in[2]->shape;
    if (q->rank < 2 || k->rank != q->rank || v->rank != q->rank)
        return node_errorf(err, n, "q %s, k %s and v %s must have the same rank >= 2", SH(q),
                           SH(k), SH(v));
    int r = q->rank;
    if (q->dims[r - 1] != k->dims[r - 1] || k->dims[r - 2] != v->dims[r - 2])
        return node_errorf(err, n, "q %s, k %s, v %s do not match (q[..,T,D] k[..,S,D] "
                           "v[..,S,Dv])", SH(q), SH(k), SH(v));
    IrShape bq = ir_shape_make(r - 2, q->dims), bk = ir_shape_make(r - 2, k->dims), bb;
    if (broadcast2(&bq, &bk, &bb) || !ir_shape_equal(&bb, &bq))
        return node_errorf(err, n, "batch dims of q %s and k %s differ", SH(q), SH(k));
    IrShape s = *q;
    s.dims[r - 1] = v->dims[r - 1];
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

static int rule_embedding(IrNode *n, IrError *err) {
    if (need_in(n, 0, err) || need_in(n, 1, err)) return -1;
    const IrShape *t = &n->in[0]->shape, *ix = &n->in[1]->shape;
    if (t->rank != 2) return node_errorf(err, n, "table %s must be 2-D", SH(t));
    if (ix->rank + 1 > IR_MAX_RANK) return node_errorf(err, n, "ids rank too large");
    IrShape s = *ix;
    s.dims[s.rank++] = t->dims[1];
    return set_out(n, 0, n->in[0]->dtype, &s, err);
}

/* ---------------------------------------------------------------- the table */
static const ShapeRuleFn shape_rules[IR_OP_COUNT] = {
    [IR_OP_ADD] = rule_binary, [IR_OP_SUB] = rule_binary, [IR_OP_MUL] = rule_binary,
    [IR_OP_DIV] = rule_binary, [IR_OP_POW] = rule_binary, [IR_OP_MOD] = rule_binary,
    [IR_OP_MAX] = rule_variadic, [IR_OP_MIN] = rule_variadic,
    [IR_OP_EQUAL] = rule_compare, [IR_OP_LESS] = rule_compare,
    [IR_OP_LESS_OR_EQUAL] = rule_compare, [IR_OP_GREATER] = rule_compare,
    [IR_OP_GREATER_OR_EQUAL] = rule_compare, [IR_OP_AND] = rule_compare,
    [IR_OP_OR] = rule_compare, [IR_OP_XOR] = rule_compare, [IR_OP_WHERE] = rule_where,
    [IR_OP_NEG] = rule_unary, [IR_OP_ABS] = rule_unary, [IR_OP_SQRT] = rule_unary,
    [IR_OP_RECIPROCAL] = rule_unary, [IR_OP_EXP] = rule_unary, [IR_OP_LOG] = rule_unary,
    [IR_OP_SIN] = rule_unary, [IR_OP_COS] = rule_unary, [IR_OP_TANH] = rule_unary,
    [IR_OP_SIGMOID] = rule_unary, [IR_OP_ERF] = rule_unary, [IR_OP_RELU] = rule_unary,
    [IR_OP_FLOOR] = rule_unary, [IR_OP_CEIL] = rule_unary, [IR_OP_NOT] = rule_not, [IR_OP_IS_NAN] = rule_is_nan,
    [IR_OP_CAST] = rule_cast, [IR_OP_CLIP] = rule_clip, [IR_OP_IDENTITY] = rule_unary,
    [IR_OP_TP_ALL_REDUCE] = rule_unary, [IR_OP_TP_COPY] = rule_unary,
    [IR_OP_DROPOUT] = rule_dropout,
    [IR_OP_MATMUL] = rule_matmul, [IR_OP_GEMM] = rule_gemm,
    [IR_OP_REDUCE_MEAN] = rule_reduce, [IR_OP_REDUCE_SUM] = rule_reduce,
    [IR_OP_REDUCE_MAX] = rule_reduce, [IR_OP_SOFTMAX] = rule_softmax,
    [IR_OP_LOG_SOFTMAX] = rule_softmax,
    [IR_OP_RESHAPE] = rule_reshape, [IR_OP_TRANSPOSE] = rule_transpose,
    [IR_OP_SPLIT] = rule_split, [IR_OP_CONCAT] = rule_concat, [IR_OP_SLICE] = rule_slice,
    [IR_OP_SQUEEZE] = rule_squeeze, [IR_OP_UNSQUEEZE] = rule_unsqueeze,
    [IR_OP_EXPAND] = rule_expand, [IR_OP_FLATTEN] = rule_flatten, [IR_OP_SHAPE] = rule_shape,
    [IR_OP_CONSTANT_OF_SHAPE] = rule_constant_of_shape, [IR_OP_RANGE] = rule_range,
    [IR_OP_TRILU] = rule_trilu, [IR_OP_GATHER] = rule_gather, [IR_OP_CUMSUM] = rule_cumsum,
    [IR_OP_GATHER_ND] = rule_gather_nd, [IR_OP_TILE] = rule_tile,
    [IR_OP_GATHER_ELEMENTS] = rule_gather_elements, [IR_OP_SCATTER_ND] = rule_scatter_nd,
    [IR_OP_LINEAR] = rule_linear, [IR_OP_LAYER_NORM] = rule_norm, [IR_OP_RMS_NORM] = rule_norm,
    [IR_OP_GELU] = rule_unary, [IR_OP_SILU] = rule_unary, [IR_OP_ATTENTION] = rule_attention,
    [IR_OP_EMBEDDING] = rule_embedding,
    /* training ops: passes/shape_rules_train.c */
    [IR_OP_CROSS_ENTROPY] = rule_cross_entropy,
    [IR_OP_CROSS_ENTROPY_GRAD] = rule_cross_entropy_grad,
    [IR_OP_VOCAB_CE_STATS] = rule_vocab_ce_stats,
    [IR_OP_VOCAB_CROSS_ENTROPY] = rule_vocab_cross_entropy,
    [IR_OP_VOCAB_CROSS_ENTROPY_GRAD] = rule_vocab_cross_entropy_grad,
    [IR_OP_LINEAR_GRAD] = rule_linear_grad, [IR_OP_LAYER_NORM_GRAD] = rule_grad_like_inputs,
    [IR_OP_RMS_NORM_GRAD] = rule_grad_like_inputs, [IR_OP_ATTENTION_GRAD] = rule_grad_like_inputs,
    [IR_OP_UNARY_GRAD] = rule_grad_like_inputs, [IR_OP_SOFTMAX_GRAD] = rule_grad_like_inputs,
    [IR_OP_EMBEDDING_GRAD] = rule_grad_like_inputs, [IR_OP_SUM_TO_SHAPE] = rule_grad_to_shape,
    [IR_OP_SLICE_GRAD] = rule_grad_to_shape, [IR_OP_GATHER_GRAD] = rule_grad_to_shape,
    [IR_OP_GATHER_ND_GRAD] = rule_grad_to_shape,
    [IR_OP_GATHER_ELEMENTS_GRAD] = rule_grad_to_shape,
    [IR_OP_ADAMW] = rule_adamw,
};

int shape_rule_exists(IrOp op) { return (int)op >= 0 && op < IR_OP_COUNT && shape_rules[op]; }

int shape_infer_node(IrNode *n, IrError *err) {
    if (!shape_rule_exists(n->op)) return node_errorf(err, n, "no shape rule for this op");
    const IrOpInfo *info = ir_op_info(n->op);
    if (n->nin < info->min_inputs || (info->max_inputs >= 0 && n->nin > info->max_inputs))
        return node_errorf(err, n, "has %d inputs", n->nin);
    return shape_rules[n->op](n, err);
}
