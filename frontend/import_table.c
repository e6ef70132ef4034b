/* The importer table: one entry per (ONNX op, opset range) -> lowering.
 *
 * IR ops take the semantics of the newest ONNX opset (ir/ops.def), so
 * entries for older opsets rewrite the node into that form: attributes
 * ONNX later turned into inputs become constant inputs (`moves`), attributes
 * that no longer mean anything are dropped (`drop`), and the few real
 * semantic changes (Softmax before 13, legacy broadcasting before 7, Cast's
 * string `to` at 1) have their own lowering functions.
 *
 * Ranges are checked against onnx's own schemas by tests/frontend: an op is
 * claimed at opset v exactly when ONNX defines it at v (1..28).
 */
#include "onnx_internal.h"

#include <stdlib.h>
#include <string.h>

#define MAXV HETC_ONNX_MAX_OPSET

/* ---------------------------------------------------------------- generic */
/* Build the IR node for n: ONNX inputs in place, entry moves appended as
 * constant inputs, attributes copied minus moved/dropped ones. */
static int std_node(NodeCtx *n, const ImportEntry *e, IrNode **out_node) {
    int nin = n->nin;
    for (int k = 0; k < 3; k++)
        if (e->moves[k].attr && e->moves[k].slot + 1 > nin) nin = e->moves[k].slot + 1;
    IrValue **in = ir_xcalloc((size_t)nin + 1, sizeof *in);
    for (int i = 0; i < n->nin; i++) in[i] = n->in[i];
    const char *skip[12] = {"consumed_inputs"};
    int ns = 1;
    for (int k = 0; k < 3; k++) {
        const AttrMove *m = &e->moves[k];
        if (e->drop[k]) skip[ns++] = e->drop[k];
        if (!m->attr) continue;
        skip[ns++] = m->attr;
        const Onnx__AttributeProto *a = imp_attr(n, m->attr);
        if (!a) continue;
        if (in[m->slot]) {
            free(in);
            return imp_node_err(n, "'%s' is given both as attribute and as input %d", m->attr,
                                m->slot);
        }
        int t = imp_attr_type(a);
        if (m->kind == MOVE_INTS) {
            if (t != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS &&
                !(t == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED && a->n_ints == 0)) {
                free(in);
                return imp_node_err(n, "attribute '%s' must be a list of ints", m->attr);
            }
            if (a->n_ints > (size_t)IR_MAX_RANK * 1024) {
                free(in);
                return imp_node_err(n, "attribute '%s' is too long", m->attr);
            }
            in[m->slot] = imp_const_i64s(n, m->attr, (int)a->n_ints, a->ints);
        } else {
            if (t != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT) {
                free(in);
                return imp_node_err(n, "attribute '%s' must be a float", m->attr);
            }
            IrDType dt = n->in[0] ? n->in[0]->dtype : IR_F32;
            in[m->slot] = imp_const_scalar(n, m->attr, dt, a->f);
        }
    }
    IrNode *node = imp_emit(n, (IrOp)e->op, NULL, in, nin, n->out, n->nout);
    free(in);
    if (!node) return -1;
    if (imp_copy_attrs(n, node, skip)) return -1;
    if (out_node) *out_node = node;
    return 0;
}

static int lower_std(NodeCtx *n, const ImportEntry *e) { return std_node(n, e, NULL); }

/* Opsets < 7: `broadcast`/`axis` instead of numpy broadcasting.  Without
 * axis, B is matched against A's trailing dims, which numpy broadcasting
 * also does; with axis the two agree only when axis == rank(A) - rank(B). */
static int lower_legacy_bcast(NodeCtx *n, const ImportEntry *e) {
    const Onnx__AttributeProto *ax = imp_attr(n, "axis");
    const Onnx__AttributeProto *bc = imp_attr(n, "broadcast");
    if (ax && bc && bc->i != 0) {
        int ra = imp_value_rank(n->c, n->nin > 0 ? n->in[0] : NULL);
        int rb = imp_value_rank(n->c, n->nin > 1 ? n->in[1] : NULL);
        if (ra < 0 || rb < 0 || ax->i != ra - rb)
            return imp_node_err(n, "legacy broadcast with axis=%lld is only supported when B "
                                "aligns with the trailing dims of A (ranks %d and %d)",
                                (long long)ax->i, ra, rb);
    }
    ImportEntry le = *e;
    le.drop[0] = "broadcast";
    le.drop[1] = "axis";
    return std_node(n, &le, NULL);
}

/* ---------------------------------------------------------------- per op */
/* Cast-1 names the target type with a string; later opsets with an int. */
static int lower_cast(NodeCtx *n, const ImportEntry *e) {
    const Onnx__AttributeProto *a = imp_attr(n, "to");
    if (!a) return imp_node_err(n, "missing attribute 'to'");
    int64_t to;
    if (imp_attr_type(a) == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING) {
        char buf[64] = {0};
        if (a->s.len) memcpy(buf, a->s.data, a->s.len < sizeof buf - 1 ? a->s.len : sizeof buf - 1);
        to = onnx_dtype_from_string(buf);
        if (to < 0) return imp_node_err(n, "unknown dtype '%s' in attribute 'to'", buf);
    } else {
        to = a->i;
    }
    if (to < 0 || to > 1000 || onnx_dtype_to_ir((int32_t)to, "attribute 'to'", n->c->err) < 0)
        return imp_node_err(n, "attribute 'to' = %lld is not a dtype hetc supports",
                            (long long)to);
    IrNode *node;
    ImportEntry ce = *e;
    ce.drop[0] = "to";
    if (std_node(n, &ce, &node)) return -1;
    ir_node_set_int(node, "to", to);
    return 0;
}

/* Split before 18 has no num_outputs: without sizes it splits evenly into
 * as many pieces as the node has outputs, which num_outputs now says. */
static int lower_split(NodeCtx *n, const ImportEntry *e) {
    IrNode *node;
    if (std_node(n, e, &node)) return -1;
    if ((node->nin < 2 || !node->in[1]) && !ir_node_attr(node, "num_outputs"))
        ir_node_set_int(node, "num_outputs", n->nout);
    return 0;
}

/* Concat before 4 defaults axis to 1; later opsets require it. */
static int lower_concat_old(NodeCtx *n, const ImportEntry *e) {
    IrNode *node;
    if (std_node(n, e, &node)) return -1;
    if (!ir_node_attr(node, "axis")) ir_node_set_int(node, "axis", 1);
    return 0;
}

/* Softmax / LogSoftmax before 13 flatten the input to 2-D at `axis`
 * (default 1) and normalise rows.  That equals the opset-13 op when axis is
 * the last dim; otherwise it is Flatten -> op(axis=-1) -> Reshape(Shape(x)). */
static int lower_softmax_old(NodeCtx *n, const ImportEntry *e) {
    IrValue *x = n->nin > 0 ? n->in[0] : NULL;
    if (!x || n->nin != 1 || n->nout != 1 || !n->out[0])
        return imp_node_err(n, "expects one input and one output");
    int64_t axis = 1;
    const Onnx__AttributeProto *a = imp_attr(n, "axis");
    if (a) axis = a->i;
    int r = imp_value_rank(n->c, x);
    if (r >= 0 && axis < 0) axis += r;
    if (axis == -1 || (r >= 0 && axis == r - 1)) {
        IrNode *node = imp_emit(n, (IrOp)e->op, NULL, n->in, 1, n->out, 1);
        if (!node) return -1;
        ir_node_set_int(node, "axis", -1);
        return 0;
    }
    if (r >= 0 && (axis < 0 || axis > r))
        return imp_node_err(n, "axis %lld is out of range for rank %d", (long long)axis, r);
    IrValue *flat = imp_tmp(n, "flat"), *sm = imp_tmp(n, "rows"), *shp = imp_tmp(n, "shape");
    IrNode *f = imp_emit(n, IR_OP_FLATTEN, "flatten", &x, 1, &flat, 1);
    if (!f) return -1;
    ir_node_set_int(f, "axis", axis);
    IrNode *s = imp_emit(n, (IrOp)e->op, "rows", &flat, 1, &sm, 1);
    if (!s) return -1;
    ir_node_set_int(s, "axis", -1);
    if (!imp_emit(n, IR_OP_SHAPE, "shape", &x, 1, &shp, 1)) return -1;
    IrValue *rin[2] = {sm, shp};
    return imp_emit(n, IR_OP_RESHAPE, NULL, rin, 2, n->out, 1) ? 0 : -1;
}

/* ConstantOfShape: the one-element `value` tensor becomes value (float) and
 * dtype (int) attributes; default 0.0f. */
static int lower_constant_of_shape(NodeCtx *n, const ImportEntry *e) {
    double val = 0.0;
    int64_t dt = IR_F32;
    const Onnx__AttributeProto *a = imp_attr(n, "value");
    if (a) {
        if (!a->t) return imp_node_err(n, "attribute 'value' must be a tensor");
        IrShape s;
        int d = onnx_dtype_to_ir(a->t->has_data_type ? a->t->data_type : 0,
                                 "attribute 'value'", n->c->err);
        if (d < 0 || onnx_tensor_shape(a->t, &s, "attribute 'value'", n->c->err))
            return imp_node_err(n, "%s", n->c->err->msg);
        int64_t numel = onnx_checked_numel(&s, ir_dtype_size(d), "attribute 'value'",
                                           n->c->err);
        if (numel != 1) return imp_node_err(n, "attribute 'value' must hold one element");
        void *data;
        size_t nb;
        if (onnx_tensor_inline_data(a->t, d, 1, &data, &nb, "attribute 'value'", n->c->err))
            return imp_node_err(n, "%s", n->c->err->msg);
        val = onnx_elem_as_double(data, d);
        dt = d;
        free(data);
    }
    IrNode *node = imp_emit(n, (IrOp)e->op, NULL, n->in, n->nin, n->out, n->nout);
    if (!node) return -1;
    ir_node_set_float(node, "value", val);
    ir_node_set_int(node, "dtype", dt);
    return 0;
}

/* LayerNormalization: Y is hetc's fused LayerNorm.  When the optional Mean
 * or InvStdDev outputs are used, they are computed beside it with primitive
 * ops over the normalized axes (ReduceMean, Sub, Mul, Add eps, Sqrt,
 * Reciprocal), in X's dtype; canonicalize and training only ever see Y. */
static int lower_layernorm(NodeCtx *n, const ImportEntry *e) {
    (void)e;
    int want_stats = 0;
    for (int i = 1; i < n->nout; i++)
        if (n->out[i] && namemap_get(&n->c->used, n->np->output[i])) want_stats = 1;
    IrValue *y[1] = {n->out[0]};
    IrNode *node = imp_emit(n, IR_OP_LAYER_NORM, NULL, n->in, n->nin, y, 1);
    if (!node) return -1;
    static const char *const skip[] = {"stash_type", NULL};
    if (imp_copy_attrs(n, node, skip)) return -1;
    if (!want_stats) return 0;
    int rank = imp_value_rank(n->c, n->in[0]);
    if (rank < 1 || rank > IR_MAX_RANK)
        return imp_node_err(n, "Mean/InvStdDev outputs need the rank of input X, which is not "
                            "declared");
    int64_t axis = ir_attr_int(node, "axis", -1);
    if (axis < -rank || axis >= rank)
        return imp_node_err(n, "axis %lld is out of range for rank %d", (long long)axis, rank);
    if (axis < 0) axis += rank;
    int64_t axes[IR_MAX_RANK];
    int na = 0;
    for (int64_t a = axis; a < rank; a++) axes[na++] = a;
    IrValue *ax = imp_const_i64s(n, "stat_axes", na, axes);
    IrValue *x = n->in[0];
    IrValue *mean = n->nout > 1 && n->out[1] ? n->out[1] : imp_tmp(n, "mean");
    IrValue *rm_in[2] = {x, ax};
    IrNode *m = imp_emit(n, IR_OP_REDUCE_MEAN, "mean", rm_in, 2, &mean, 1);
    if (!m) return -1;
    ir_node_set_int(m, "keepdims", 1);
    if (n->nout < 3 || !n->out[2]) return 0;
    IrValue *d = imp_tmp(n, "centered"), *sq = imp_tmp(n, "sq"), *var = imp_tmp(n, "var");
    IrValue *ve = imp_tmp(n, "var_eps"), *sd = imp_tmp(n, "std");
    IrValue *sub_in[2] = {x, mean}, *mul_in[2] = {d, d}, *rv_in[2] = {sq, ax};
    IrValue *eps = imp_const_scalar(n, "eps", x->dtype == IR_UNDEF ? IR_F32 : x->dtype,
                                    ir_attr_float(node, "epsilon", 1e-5));
    IrValue *add_in[2] = {var, eps};
    IrNode *rv;
    if (!imp_emit(n, IR_OP_SUB, "center", sub_in, 2, &d, 1) ||
        !imp_emit(n, IR_OP_MUL, "square", mul_in, 2, &sq, 1) ||
        !(rv = imp_emit(n, IR_OP_REDUCE_MEAN, "var", rv_in, 2, &var, 1)))
        return -1;
    ir_node_set_int(rv, "keepdims", 1);
    if (!imp_emit(n, IR_OP_ADD, "add_eps", add_in, 2, &ve, 1) ||
        !imp_emit(n, IR_OP_SQRT, "sqrt", &ve, 1, &sd, 1) ||
        !imp_emit(n, IR_OP_RECIPROCAL, "inv_std", &sd, 1, &n->out[2], 1))
        return -1;
    return 0;
}

/* Tile before 6 repeats along one axis: inputs (input, tiles, axis), both
 * scalars.  They become the opset-6 repeats vector (tiles at axis, 1
 * elsewhere), so tiles and axis must be initializers or Constants and the
 * input's rank known. */
static int tile_old_scalar(NodeCtx *n, int i, const char *what, int64_t *out) {
    IrValue *v = i < n->nin ? n->in[i] : NULL;
    if (!v) return imp_node_err(n, "input '%s' is missing", what);
    if (!ir_value_has_data(v) || ir_dtype_size(v->dtype) == 0)
        return imp_node_err(n, "input '%s' ('%s') must be a constant for Tile before opset 6",
                            what, v->name);
    IrError e2;
    const void *d = ir_value_data(v, &e2);
    int64_t ne = ir_shape_numel(&v->shape);
    if (!d || ne != 1 || v->nbytes < ir_dtype_size(v->dtype))
        return imp_node_err(n, "input '%s' ('%s') must hold one element", what, v->name);
    double x = onnx_elem_as_double(d, v->dtype);
    if (x != (double)(int64_t)x)
        return imp_node_err(n, "input '%s' = %g is not an integer", what, x);
    *out = (int64_t)x;
    return 0;
}
static int lower_tile_old(NodeCtx *n, const ImportEntry *e) {
    if (n->nin != 3 || n->nout != 1)
        return imp_node_err(n, "expects inputs (input, tiles, axis) and one output");
    int64_t tiles, axis;
    if (tile_old_scalar(n, 1, "tiles", &tiles) || tile_old_scalar(n, 2, "axis", &axis))
        return -1;
    int r = imp_value_rank(n->c, n->in[0]);
    if (r < 1 || r > IR_MAX_RANK)
        return imp_node_err(n, "the rank of input '%s' must be declared for Tile before opset 6",
                            n->in[0]->name);
    if (axis < -r || axis >= r)
        return imp_node_err(n, "axis %lld is out of range for rank %d", (long long)axis, r);
    if (tiles < 0) return imp_node_err(n, "tiles %lld is negative", (long long)tiles);
    int64_t rep[IR_MAX_RANK];
    for (int i = 0; i < r; i++) rep[i] = 1;
    rep[axis < 0 ? axis + r : axis] = tiles;
    IrValue *in[2] = {n->in[0], imp_const_i64s(n, "repeats", r, rep)};
    return imp_emit(n, (IrOp)e->op, NULL, in, 2, n->out, 1) ? 0 : -1;
}

/* Constant: the output becomes an IR_VK_CONST value; no node. */
static int lower_constant(NodeCtx *n, const ImportEntry *e) {
    (void)e;
    if (n->nout != 1 || !n->out[0]) return imp_node_err(n, "must have exactly one output");
    if (n->nin != 0) return imp_node_err(n, "takes no inputs");
    if (n->np->n_attribute != 1)
        return imp_node_err(n, "must have exactly one value attribute, has %zu",
                            n->np->n_attribute);
    const Onnx__AttributeProto *a = n->np->attribute[0];
    IrValue *v = n->out[0];
    const char *an = a->name ? a->name : "";
    int64_t len;
    if (strcmp(an, "value") == 0 && a->t) {
        char what[600];
        snprintf(what, sizeof what, "node '%s' (Constant) value", n->name);
        if (imp_tensor_to_value(n->c, a->t, v, what)) return -1;
    } else if (strcmp(an, "value_float") == 0) {
        IrShape s = ir_shape_make(0, NULL);
        float *d = ir_xmalloc(sizeof *d);
        *d = a->f;
        v->dtype = IR_F32, v->shape = s, v->shape_known = 1;
        ir_value_set_data(v, d, sizeof *d);
    } else if (strcmp(an, "value_int") == 0) {
        IrShape s = ir_shape_make(0, NULL);
        int64_t *d = ir_xmalloc(sizeof *d);
        *d = a->i;
        v->dtype = IR_I64, v->shape = s, v->shape_known = 1;
        ir_value_set_data(v, d, sizeof *d);
    } else if (strcmp(an, "value_floats") == 0) {
        len = (int64_t)a->n_floats;
        IrShape s = ir_shape_make(1, &len);
        float *d = ir_xmalloc(a->n_floats * sizeof *d + 1);
        if (a->n_floats) memcpy(d, a->floats, a->n_floats * sizeof *d);
        v->dtype = IR_F32, v->shape = s, v->shape_known = 1;
        ir_value_set_data(v, d, a->n_floats * sizeof *d);
    } else if (strcmp(an, "value_ints") == 0) {
        len = (int64_t)a->n_ints;
        IrShape s = ir_shape_make(1, &len);
        int64_t *d = ir_xmalloc(a->n_ints * sizeof *d + 1);
        if (a->n_ints) memcpy(d, a->ints, a->n_ints * sizeof *d);
        v->dtype = IR_I64, v->shape = s, v->shape_known = 1;
        ir_value_set_data(v, d, a->n_ints * sizeof *d);
    } else {
        return imp_node_err(n, "value attribute '%s' is not supported (sparse and string "
                            "constants are not)", an);
    }
    v->kind = IR_VK_CONST;
    return 0;
}

/* ---------------------------------------------------------------- table */
#define E(ty, lo, hi, irop, fn) {ty, lo, hi, IR_OP_##irop, fn, {{0}}, {0}}
/* entries moving one attribute to an input */
#define MV(ty, lo, hi, irop, fn, attr, slot, kind) \
    {ty, lo, hi, IR_OP_##irop, fn, {{attr, slot, kind}}, {0}}
#define BIN(ty, irop) E(ty, 1, 6, irop, lower_legacy_bcast), E(ty, 7, MAXV, irop, lower_std)
#define UN(ty, lo, irop) E(ty, lo, MAXV, irop, lower_std)

static const ImportEntry table[] = {
    /* elementwise binary (numpy broadcasting from opset 7) */
    BIN("Add", ADD), BIN("Sub", SUB), BIN("Mul", MUL), BIN("Div", DIV), BIN("Pow", POW),
    BIN("Equal", EQUAL), BIN("Less", LESS), BIN("Greater", GREATER),
    BIN("And", AND), BIN("Or", OR), BIN("Xor", XOR),
    UN("Max", 1, MAX), UN("Min", 1, MIN), UN("Mod", 10, MOD),
    UN("LessOrEqual", 12, LESS_OR_EQUAL), UN("GreaterOrEqual", 12, GREATER_OR_EQUAL),
    UN("Where", 9, WHERE),
    /* elementwise unary (consumed_inputs of opset < 6 dropped) */
    UN("Neg", 1, NEG), UN("Abs", 1, ABS), UN("Sqrt", 1, SQRT), UN("Reciprocal", 1, RECIPROCAL),
    UN("Exp", 1, EXP), UN("Log", 1, LOG), UN("Sin", 7, SIN), UN("Cos", 7, COS),
    UN("Tanh", 1, TANH), UN("Sigmoid", 1, SIGMOID), UN("Erf", 9, ERF), UN("Relu", 1, RELU),
    UN("Floor", 1, FLOOR), UN("Ceil", 1, CEIL), UN("Not", 1, NOT), UN("IsNaN", 9, IS_NAN),
    E("Cast", 1, MAXV, CAST, lower_cast),
    {"Clip", 1, 10, IR_OP_CLIP, lower_std, {{"min", 1, MOVE_SCALAR}, {"max", 2, MOVE_SCALAR}},
     {0}},
    UN("Clip", 11, CLIP), UN("Identity", 1, IDENTITY),
    {"Dropout", 1, 11, IR_OP_DROPOUT, lower_std, {{"ratio", 1, MOVE_SCALAR}}, {"is_test"}},
    UN("Dropout", 12, DROPOUT),
    /* linear algebra */
    UN("MatMul", 1, MATMUL),
    {"Gemm", 1, 6, IR_OP_GEMM, lower_std, {{0}}, {"broadcast"}},
    UN("Gemm", 7, GEMM),
    /* reductions: axes moved from attribute to input at 13 (Sum) / 18 */
    MV("ReduceMean", 1, 17, REDUCE_MEAN, lower_std, "axes", 1, MOVE_INTS),
    UN("ReduceMean", 18, REDUCE_MEAN),
    MV("ReduceMax", 1, 17, REDUCE_MAX, lower_std, "axes", 1, MOVE_INTS),
    UN("ReduceMax", 18, REDUCE_MAX),
    MV("ReduceSum", 1, 12, REDUCE_SUM, lower_std, "axes", 1, MOVE_INTS),
    UN("ReduceSum", 13, REDUCE_SUM),
    E("Softmax", 1, 12, SOFTMAX, lower_softmax_old), UN("Softmax", 13, SOFTMAX),
    E("LogSoftmax", 1, 12, LOG_SOFTMAX, lower_softmax_old), UN("LogSoftmax", 13, LOG_SOFTMAX),
    /* data movement and shapes */
    MV("Reshape", 1, 4, RESHAPE, lower_std, "shape", 1, MOVE_INTS),
    UN("Reshape", 5, RESHAPE), UN("Transpose", 1, TRANSPOSE),
    MV("Split", 1, 12, SPLIT, lower_split, "split", 1, MOVE_INTS),
    E("Split", 13, MAXV, SPLIT, lower_split),
    E("Concat", 1, 3, CONCAT, lower_concat_old), UN("Concat", 4, CONCAT),
    {"Slice", 1, 9, IR_OP_SLICE, lower_std,
     {{"starts", 1, MOVE_INTS}, {"ends", 2, MOVE_INTS}, {"axes", 3, MOVE_INTS}}, {0}},
    UN("Slice", 10, SLICE),
    MV("Squeeze", 1, 12, SQUEEZE, lower_std, "axes", 1, MOVE_INTS),
    UN("Squeeze", 13, SQUEEZE),
    MV("Unsqueeze", 1, 12, UNSQUEEZE, lower_std, "axes", 1, MOVE_INTS),
    UN("Unsqueeze", 13, UNSQUEEZE),
    UN("Expand", 8, EXPAND), UN("Flatten", 1, FLATTEN), UN("Shape", 1, SHAPE),
    E("ConstantOfShape", 9, MAXV, CONSTANT_OF_SHAPE, lower_constant_of_shape),
    UN("Range", 11, RANGE), UN("Trilu", 14, TRILU), UN("Gather", 1, GATHER),
    UN("CumSum", 11, CUMSUM), UN("GatherND", 11, GATHER_ND),
    E("Tile", 1, 5, TILE, lower_tile_old), UN("Tile", 6, TILE),
    UN("GatherElements", 11, GATHER_ELEMENTS), UN("ScatterND", 11, SCATTER_ND),
    /* normalisations and activations with an IR op of their own */
    E("LayerNormalization", 17, MAXV, LAYER_NORM, lower_layernorm),
    UN("Gelu", 20, GELU),
    {"Constant", 1, MAXV, -1, lower_constant, {{0}}, {0}},
};
#define NTABLE (sizeof table / sizeof table[0])

const ImportEntry *import_table_find(const char *op_type, int64_t opset) {
    for (size_t i = 0; i < NTABLE; i++)
        if (strcmp(table[i].op_type, op_type) == 0 && opset >= table[i].since &&
            opset <= table[i].until)
            return &table[i];
    return NULL;
}

int import_table_span(const char *op_type, int *since, int *until) {
    int found = 0;
    for (size_t i = 0; i < NTABLE; i++) {
        if (strcmp(table[i].op_type, op_type) != 0) continue;
        if (!found || table[i].since < *since) *since = table[i].since;
        if (!found || table[i].until > *until) *until = table[i].until;
        found = 1;
    }
    return found;
}

int hetc_import_supported_ops(int64_t opset, const char **names, int max) {
    int cnt = 0;
    for (size_t i = 0; i < NTABLE; i++) {
        if (opset < table[i].since || opset > table[i].until) continue;
        int dup = 0;
        for (size_t j = 0; j < i && !dup; j++)
            dup = strcmp(table[j].op_type, table[i].op_type) == 0 && opset >= table[j].since &&
                  opset <= table[j].until;
        if (dup) continue;
        if (cnt < max && names) names[cnt] = table[i].op_type;
        cnt++;
    }
    return cnt;
}

int hetc_import_op_supported(const char *domain, const char *op_type, int64_t opset) {
    if (domain && *domain && strcmp(domain, "ai.onnx") != 0) return 0;
    return op_type && import_table_find(op_type, opset) != NULL;
}
