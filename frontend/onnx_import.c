/* ONNX model -> IrGraph: parsing, checks, values (inputs, initializers,
 * outputs) and the node loop.  Per-op knowledge lives in import_table.c.
 *
 * Value-kind rule: an initializer is IR_VK_PARAM when it is a floating-point
 * tensor of rank >= 1 (weights, biases, embedding tables) that is not a
 * buffer by the rules of param_kinds.c; everything else (int64 shape
 * operands, index tensors, scalars, bool masks, RoPE / ALiBi tables, float
 * masks) is IR_VK_CONST.  Initializers the exporter deduplicated are untied
 * into one parameter per reader (param_untie.c), then --trainable/--frozen
 * globs apply.
 */
#include "onnx_internal.h"
#include "onnx_wire_scan.h"
#include "input_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- NameMap */
static size_t name_hash(const char *s) { return (size_t)ir_fnv1a(s, strlen(s)); }

void *namemap_get(const NameMap *m, const char *key) {
    if (!m->cap) return NULL;
    for (size_t i = name_hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i]) return NULL;
        if (strcmp(m->keys[i], key) == 0) return m->vals[i];
    }
}

static void namemap_grow(NameMap *m) {
    NameMap o = *m;
    m->cap = o.cap ? o.cap * 2 : 64;
    m->keys = ir_xcalloc(m->cap, sizeof *m->keys);
    m->vals = ir_xcalloc(m->cap, sizeof *m->vals);
    m->n = 0;
    for (size_t i = 0; i < o.cap; i++)
        if (o.keys[i]) {
            size_t j = name_hash(o.keys[i]) & (m->cap - 1);
            while (m->keys[j]) j = (j + 1) & (m->cap - 1);
            m->keys[j] = o.keys[i];
            m->vals[j] = o.vals[i];
            m->n++;
        }
    free(o.keys);
    free(o.vals);
}

void namemap_put(NameMap *m, const char *key, void *val) {
    if (2 * (m->n + 1) > m->cap) namemap_grow(m);
    size_t i = name_hash(key) & (m->cap - 1);
    while (m->keys[i]) {
        if (strcmp(m->keys[i], key) == 0) {
            m->vals[i] = val;
            return;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = ir_strdup(key);
    m->vals[i] = val;
    m->n++;
}

void namemap_free(NameMap *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- helpers */
static const char *str_or(const char *s, const char *dflt) { return s && *s ? s : dflt; }

int imp_node_err(NodeCtx *n, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ir_errorf(n->c->err, "%s: node '%s' (%s, opset %lld): %s", n->c->file, n->name,
                     str_or(n->np->op_type, "?"), (long long)n->c->opset, msg);
}

const Onnx__AttributeProto *imp_attr(const NodeCtx *n, const char *name) {
    for (size_t i = 0; i < n->np->n_attribute; i++) {
        const Onnx__AttributeProto *a = n->np->attribute[i];
        if (a->name && strcmp(a->name, name) == 0) return a;
    }
    return NULL;
}

int imp_attr_type(const Onnx__AttributeProto *a) {
    if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED)
        return a->type;
    /* IR versions before 2 did not record the type: infer it from the field */
    if (a->has_f) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    if (a->has_i) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    if (a->has_s) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    if (a->t) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    if (a->g) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
    if (a->n_floats) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    if (a->n_ints) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    if (a->n_strings) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
    return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED;
}

static int in_list(const char *s, const char *const *list) {
    for (; list && *list; list++)
        if (strcmp(s, *list) == 0) return 1;
    return 0;
}

/* ONNX float attributes are float32; keep the shortest decimal that reads
 * back to the same float, so dumps say epsilon=1e-05, not 9.99999974e-06.
 * Kernels compute in fp32 where the difference vanishes. */
static double float_attr(float f) {
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return f;
}

int imp_copy_attrs(NodeCtx *n, IrNode *node, const char *const *skip) {
    for (size_t i = 0; i < n->np->n_attribute; i++) {
        const Onnx__AttributeProto *a = n->np->attribute[i];
        if (!a->name || !*a->name) return imp_node_err(n, "attribute %zu has no name", i);
        if (in_list(a->name, skip)) continue;
        if (a->ref_attr_name && *a->ref_attr_name)
            return imp_node_err(n, "attribute '%s' refers to a function attribute", a->name);
        switch (imp_attr_type(a)) {
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
            ir_node_set_float(node, a->name, float_attr(a->f));
            break;
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
            ir_node_set_int(node, a->name, a->i);
            break;
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: {
            if (a->s.len && memchr(a->s.data, 0, a->s.len))
                return imp_node_err(n, "string attribute '%s' contains a NUL byte", a->name);
            char *s = ir_xmalloc(a->s.len + 1);
            if (a->s.len) memcpy(s, a->s.data, a->s.len);
            s[a->s.len] = 0;
            ir_node_set_string(node, a->name, s);
            free(s);
            break;
        }
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
            if (a->n_ints > INT_MAX) return imp_node_err(n, "attribute '%s' too long", a->name);
            ir_node_set_ints(node, a->name, (int)a->n_ints, a->ints);
            break;
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: {
            if (a->n_floats > INT_MAX) return imp_node_err(n, "attribute '%s' too long", a->name);
            double *d = ir_xmalloc((a->n_floats ? a->n_floats : 1) * sizeof *d);
            for (size_t k = 0; k < a->n_floats; k++) d[k] = float_attr(a->floats[k]);
            ir_node_set_floats(node, a->name, (int)a->n_floats, d);
            free(d);
            break;
        }
        default:
            return imp_node_err(n, "attribute '%s' has a type (%d) hetc does not support here",
                                a->name, imp_attr_type(a));
        }
    }
    return 0;
}

IrNode *imp_emit(NodeCtx *n, IrOp op, const char *suffix, IrValue *const *in, int nin,
                 IrValue *const *out, int nout) {
    const IrOpInfo *info = ir_op_info(op);
    /* trailing omitted optional inputs/outputs are dropped, as ONNX allows */
    while (nin > 0 && !in[nin - 1]) nin--;
    while (nout > 0 && !out[nout - 1]) nout--;
    if (nin < info->min_inputs || (info->max_inputs >= 0 && nin > info->max_inputs)) {
        imp_node_err(n, "has %d inputs; %s takes %d..%d", nin, info->name, info->min_inputs,
                     info->max_inputs);
        return NULL;
    }
    if (nout < info->min_outputs || (info->max_outputs >= 0 && nout > info->max_outputs)) {
        imp_node_err(n, "has %d outputs; %s produces %d..%d", nout, info->name,
                     info->min_outputs, info->max_outputs);
        return NULL;
    }
    for (int i = 0; i < nin; i++)
        if (!in[i] && i < info->min_inputs) {
            imp_node_err(n, "required input %d is empty", i);
            return NULL;
        }
    for (int i = 0; i < nout; i++)
        if (!out[i]) {
            imp_node_err(n, "output %d is empty but a later output is used", i);
            return NULL;
        }
    char buf[512];
    const char *name = n->name;
    if (suffix) {
        snprintf(buf, sizeof buf, "%s/%s", n->name, suffix);
        name = buf;
    }
    return ir_node_new(n->c->g, op, name, nin, in, nout, out);
}

IrValue *imp_tmp(NodeCtx *n, const char *suffix) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", n->name, suffix);
    return ir_value_new(n->c->g, buf, IR_UNDEF, NULL, IR_VK_ACT);
}

IrValue *imp_const_i64s(NodeCtx *n, const char *suffix, int cnt, const int64_t *v) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", n->name, suffix);
    return ir_const_i64s(n->c->g, buf, cnt, v);
}

IrValue *imp_const_scalar(NodeCtx *n, const char *suffix, IrDType dt, double v) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", n->name, suffix);
    unsigned char d[8] = {0};
    switch (dt) {
    case IR_F64: { double x = v; memcpy(d, &x, 8); break; }
    /* integer targets saturate: a bound beyond the type's range means "no
     * bound", and the conversion must not overflow */
    case IR_I64: {
        int64_t x = v != v ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
        memcpy(d, &x, 8);
        break;
    }
    case IR_I32: {
        int32_t x = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX
                               : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
        memcpy(d, &x, 4);
        break;
    }
    case IR_F16: { uint16_t x = onnx_f32_to_f16((float)v); memcpy(d, &x, 2); break; }
    case IR_BF16: { uint16_t x = onnx_f32_to_bf16((float)v); memcpy(d, &x, 2); break; }
    default: { float x = (float)v; memcpy(d, &x, 4); dt = IR_F32; break; }
    }
    IrShape s = ir_shape_make(0, NULL);
    return ir_const_new(n->c->g, buf, dt, &s, d);
}

int imp_value_rank(ImportCtx *c, const IrValue *v) {
    if (!v) return -1;
    if (v->shape_known) return v->shape.rank;
    const Onnx__ValueInfoProto *vi = namemap_get(&c->vinfo, v->name);
    if (vi && vi->type && vi->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
        vi->type->tensor_type && vi->type->tensor_type->shape)
        return (int)vi->type->tensor_type->shape->n_dim;
    return -1;
}

int imp_tensor_to_value(ImportCtx *c, Onnx__TensorProto *t, IrValue *v, const char *what) {
    if (!t->has_data_type) return ir_errorf(c->err, "%s: %s has no data_type", c->file, what);
    int dt = onnx_dtype_to_ir(t->data_type, what, c->err);
    if (dt < 0) return ir_error_prefix(c->err, "%s", c->file);
    IrShape s;
    if (onnx_tensor_shape(t, &s, what, c->err)) return ir_error_prefix(c->err, "%s", c->file);
    int64_t numel = onnx_checked_numel(&s, ir_dtype_size(dt), what, c->err);
    if (numel < 0) return ir_error_prefix(c->err, "%s", c->file);
    v->dtype = dt;
    v->shape = s;
    v->shape_known = 1;
    v->kind = ir_dtype_is_float(dt) && s.rank >= 1 ? IR_VK_PARAM : IR_VK_CONST;
    if (t->has_data_location &&
        t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return imp_external_ref(c, t, dt, numel * (int64_t)ir_dtype_size(dt), v, what);
    void *data;
    size_t nb = (size_t)numel * ir_dtype_size(dt);
    if (!c->keep_model && t->has_raw_data && t->raw_data.len == nb && nb > 0 &&
        t->raw_data.data) {
        /* Take the weights protobuf-c already copied out of the file (its
         * default allocator is malloc) instead of copying them again: this
         * halves peak memory for models with inline weights.  The message
         * is freed right after the import and no longer owns the bytes. */
        data = t->raw_data.data;
        t->raw_data.data = NULL;
        t->raw_data.len = 0;
        t->has_raw_data = 0;
        ir_value_set_data(v, data, nb);
        return 0;
    }
    if (onnx_tensor_inline_data(t, dt, numel, &data, &nb, what, c->err))
        return ir_error_prefix(c->err, "%s", c->file);
    ir_value_set_data(v, data, nb);
    return 0;
}

/* ---------------------------------------------------------------- values */
/* Lower a tensor type's shape to v's shape, binding dim_params.  `role` is
 * "input" or "output"; unbound output dims leave the shape unknown instead
 * of failing (exporters invent names for output dims). */
static int set_declared_shape(ImportCtx *c, IrValue *v, const Onnx__TypeProto__Tensor *tt,
                              const char *role) {
    if (!tt->shape) return 0; /* rank unknown: left to shape inference */
    const Onnx__TensorShapeProto *sp = tt->shape;
    if (sp->n_dim > IR_MAX_RANK)
        return ir_errorf(c->err, "%s: %s '%s' has rank %zu; hetc supports rank <= %d", c->file,
                         role, v->name, sp->n_dim, IR_MAX_RANK);
    int is_input = strcmp(role, "input") == 0;
    IrShape s = ir_shape_make((int)sp->n_dim, NULL);
    char *sym[IR_MAX_RANK] = {0};
    int unbound = 0;
    for (size_t i = 0; i < sp->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = sp->dim[i];
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (d->dim_value < 0) {
                for (size_t k = 0; k < i; k++) free(sym[k]);
                return ir_errorf(c->err, "%s: %s '%s' has a negative dim (%lld at axis %zu)",
                                 c->file, role, v->name, (long long)d->dim_value, i);
            }
            s.dims[i] = d->dim_value;
        } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                   d->dim_param && *d->dim_param) {
            int64_t b = imp_dim_binding(c->opt, d->dim_param);
            if (b >= 0) {
                s.dims[i] = b;
            } else if (c->opt->allow_unbound || !is_input) {
                sym[i] = ir_strdup(d->dim_param);
                unbound = 1;
            } else {
                for (size_t k = 0; k < i; k++) free(sym[k]);
                return ir_errorf(c->err,
                                 "%s: input '%s' has symbolic dim '%s' (axis %zu) that is not "
                                 "bound; pass --batch/--seq or a binding %s=N",
                                 c->file, v->name, d->dim_param, i, d->dim_param);
            }
        } else {
            if (is_input && !c->opt->allow_unbound) {
                for (size_t k = 0; k < i; k++) free(sym[k]);
                return ir_errorf(c->err,
                                 "%s: input '%s' has a dim (axis %zu) with neither a value nor "
                                 "a name, so it cannot be bound",
                                 c->file, v->name, i);
            }
            unbound = 1;
        }
    }
    if (unbound && !is_input && !c->opt->allow_unbound) {
        for (int k = 0; k < IR_MAX_RANK; k++) free(sym[k]);
        return 0; /* output shape left to shape inference */
    }
    v->shape = s;
    v->shape_known = 1;
    for (int k = 0; k < IR_MAX_RANK; k++) {
        free(v->sym[k]);
        v->sym[k] = sym[k];
    }
    return 0;
}

static int tensor_type_of(ImportCtx *c, const Onnx__ValueInfoProto *vi, const char *role,
                          const Onnx__TypeProto__Tensor **out) {
    *out = NULL;
    if (!vi->type)
        return ir_errorf(c->err, "%s: %s '%s' has no type", c->file, role, vi->name);
    if (vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !vi->type->tensor_type)
        return ir_errorf(c->err, "%s: %s '%s' is not a tensor (sequence, map, optional and "
                         "sparse types are not supported)", c->file, role, vi->name);
    *out = vi->type->tensor_type;
    return 0;
}

static int import_inputs(ImportCtx *c, const Onnx__GraphProto *gp) {
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        if (!vi->name || !*vi->name)
            return ir_errorf(c->err, "%s: graph input %zu has no name", c->file, i);
        IrValue *prev = namemap_get(&c->values, vi->name);
        if (prev && prev->kind != IR_VK_INPUT) continue; /* initializer listed as input (IR<4) */
        if (prev)
            return ir_errorf(c->err, "%s: graph input '%s' is declared twice", c->file, vi->name);
        const Onnx__TypeProto__Tensor *tt;
        if (tensor_type_of(c, vi, "input", &tt)) return -1;
        char what[600];
        snprintf(what, sizeof what, "input '%s'", vi->name);
        int dt = onnx_dtype_to_ir(tt->has_elem_type ? tt->elem_type : 0, what, c->err);
        if (dt < 0) return ir_error_prefix(c->err, "%s", c->file);
        IrValue *v = ir_value_new(c->g, vi->name, dt, NULL, IR_VK_INPUT);
        namemap_put(&c->values, vi->name, v);
        ir_graph_add_input(c->g, v);
        if (set_declared_shape(c, v, tt, "input")) return -1;
    }
    return 0;
}

static int import_initializers(ImportCtx *c, const Onnx__GraphProto *gp) {
    if (gp->n_sparse_initializer)
        return ir_errorf(c->err, "%s: sparse initializers are not supported", c->file);
    for (size_t i = 0; i < gp->n_initializer; i++) {
        Onnx__TensorProto *t = gp->initializer[i];
        if (!t->name || !*t->name)
            return ir_errorf(c->err, "%s: initializer %zu has no name", c->file, i);
        if (namemap_get(&c->values, t->name))
            return ir_errorf(c->err, "%s: initializer '%s' is defined twice", c->file, t->name);
        char what[600];
        snprintf(what, sizeof what, "initializer '%s'", t->name);
        IrValue *v = ir_value_new(c->g, t->name, IR_UNDEF, NULL, IR_VK_CONST);
        namemap_put(&c->values, t->name, v);
        if (imp_tensor_to_value(c, t, v, what)) return -1;
    }
    return 0;
}

/* Output dtypes the importer can name without shape inference, by IR op.
 * Shape inference (passes/) refines and checks them. */
enum { DT_IN0 = 0, DT_BOOL, DT_I64, DT_ATTR_TO, DT_ATTR_DTYPE, DT_IN1 };
static const unsigned char out_dtype_rule[IR_OP_COUNT] = {
    [IR_OP_EQUAL] = DT_BOOL, [IR_OP_LESS] = DT_BOOL, [IR_OP_LESS_OR_EQUAL] = DT_BOOL,
    [IR_OP_GREATER] = DT_BOOL, [IR_OP_GREATER_OR_EQUAL] = DT_BOOL, [IR_OP_AND] = DT_BOOL,
    [IR_OP_OR] = DT_BOOL, [IR_OP_XOR] = DT_BOOL, [IR_OP_NOT] = DT_BOOL, [IR_OP_IS_NAN] = DT_BOOL,
    [IR_OP_SHAPE] = DT_I64, [IR_OP_CAST] = DT_ATTR_TO,
    [IR_OP_CONSTANT_OF_SHAPE] = DT_ATTR_DTYPE, [IR_OP_WHERE] = DT_IN1,
};

static void assign_node_dtypes(ImportCtx *c, IrNode *n) {
    IrDType dt = IR_UNDEF;
    switch (out_dtype_rule[n->op]) {
    case DT_BOOL: dt = IR_BOOL; break;
    case DT_I64: dt = IR_I64; break;
    case DT_ATTR_TO: dt = (IrDType)ir_attr_int(n, "to", IR_UNDEF); break;
    case DT_ATTR_DTYPE: dt = (IrDType)ir_attr_int(n, "dtype", IR_F32); break;
    case DT_IN1: dt = n->nin > 1 && n->in[1] ? n->in[1]->dtype : IR_UNDEF; break;
    default: dt = n->nin > 0 && n->in[0] ? n->in[0]->dtype : IR_UNDEF; break;
    }
    for (int j = 0; j < n->nout; j++) {
        IrValue *o = n->out[j];
        if (!o || o->dtype != IR_UNDEF) continue;
        o->dtype = (n->op == IR_OP_DROPOUT && j == 1) ? IR_BOOL : dt;
        if (o->dtype == IR_UNDEF) {
            const Onnx__ValueInfoProto *vi = namemap_get(&c->vinfo, o->name);
            if (vi && vi->type && vi->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
                vi->type->tensor_type && vi->type->tensor_type->has_elem_type &&
                ir_dtype_size((IrDType)vi->type->tensor_type->elem_type))
                o->dtype = (IrDType)vi->type->tensor_type->elem_type;
        }
    }
}

static void assign_dtypes(ImportCtx *c) {
    for (int i = 0; i < c->g->nnodes; i++) assign_node_dtypes(c, c->g->nodes[i]);
}

static int import_outputs(ImportCtx *c, const Onnx__GraphProto *gp) {
    for (size_t i = 0; i < gp->n_output; i++) {
        const Onnx__ValueInfoProto *vi = gp->output[i];
        if (!vi->name || !*vi->name)
            return ir_errorf(c->err, "%s: graph output %zu has no name", c->file, i);
        IrValue *v = namemap_get(&c->values, vi->name);
        if (!v)
            return ir_errorf(c->err, "%s: graph output '%s' is not produced by any node, input "
                             "or initializer", c->file, vi->name);
        if (v->is_graph_output)
            return ir_errorf(c->err, "%s: graph output '%s' is listed twice", c->file, vi->name);
        const Onnx__TypeProto__Tensor *tt;
        if (tensor_type_of(c, vi, "output", &tt)) return -1;
        if (tt->has_elem_type && tt->elem_type != 0) {
            char what[600];
            snprintf(what, sizeof what, "output '%s'", vi->name);
            int dt = onnx_dtype_to_ir(tt->elem_type, what, c->err);
            if (dt < 0) return ir_error_prefix(c->err, "%s", c->file);
            if (v->dtype == IR_UNDEF) v->dtype = dt;
        }
        if (!v->shape_known && v->kind == IR_VK_ACT &&
            set_declared_shape(c, v, tt, "output"))
            return -1;
        ir_graph_add_output(c->g, v);
    }
    return 0;
}

/* ---------------------------------------------------------------- nodes */
static int check_opsets(ImportCtx *c, const Onnx__ModelProto *m, NameMap *domains) {
    int found = 0;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        const char *d = o->domain ? o->domain : "";
        int64_t ver = o->has_version ? o->version : 0;
        if (strcmp(d, "") == 0 || strcmp(d, "ai.onnx") == 0) {
            if (found && ver != c->opset)
                return ir_errorf(c->err, "%s: default-domain opset imported twice (%lld and %lld)",
                                 c->file, (long long)c->opset, (long long)ver);
            c->opset = ver;
            found = 1;
        }
        namemap_put(domains, d, (void *)(intptr_t)(ver + 1));
    }
    if (!found)
        return ir_errorf(c->err, "%s: the model imports no default-domain (ai.onnx) opset",
                         c->file);
    if (c->opset < 1 || c->opset > HETC_ONNX_MAX_OPSET)
        return ir_errorf(c->err, "%s: default-domain opset %lld is outside what hetc supports "
                         "(1..%d)", c->file, (long long)c->opset, HETC_ONNX_MAX_OPSET);
    return 0;
}

static int create_node_outputs(ImportCtx *c, const Onnx__GraphProto *gp) {
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        for (size_t j = 0; j < np->n_output; j++) {
            const char *o = np->output[j];
            if (!o || !*o) continue; /* omitted optional output */
            if (namemap_get(&c->values, o))
                return ir_errorf(c->err, "%s: value '%s' is defined more than once (again as "
                                 "output %zu of node '%s' (%s))", c->file, o, j,
                                 str_or(np->name, "<unnamed>"), str_or(np->op_type, "?"));
            IrValue *v = ir_value_new(c->g, o, IR_UNDEF, NULL, IR_VK_ACT);
            namemap_put(&c->values, o, v);
        }
    }
    return 0;
}

/* Why hetc cannot lower a node of this op_type/domain at the model's opset
 * (into why; 0), or 1 when it can. */
static int op_supported(const ImportCtx *c, const char *op_type, const char *domain,
                        const NameMap *domains, char *opset, size_t ol, char *why, size_t wl) {
    *why = 0;
    if (*domain && strcmp(domain, "ai.onnx") != 0) {
        void *dv = namemap_get(domains, domain);
        if (dv) snprintf(opset, ol, "opset %lld", (long long)((intptr_t)dv - 1));
        else snprintf(opset, ol, "opset none: the domain is not imported");
        snprintf(why, wl, "only the default ONNX domain is supported");
        return 0;
    }
    snprintf(opset, ol, "opset %lld", (long long)c->opset);
    if (import_table_find(op_type, c->opset)) return 1;
    int lo, hi;
    if (import_table_span(op_type, &lo, &hi))
        snprintf(why, wl, "%s is defined at opsets %d..%d", op_type, lo, hi);
    return 0;
}

/* Every node hetc cannot lower, in one error: one line per distinct
 * (domain, op) with its first node, the opset and how many nodes use it,
 * so a user sees the whole gap at once, not one op per attempt. */
static int check_all_supported(ImportCtx *c, const Onnx__GraphProto *gp,
                               const NameMap *domains) {
    typedef struct { const char *op, *dom, *node; size_t idx; int count; } Gap;
    Gap *gaps = NULL;
    int ngap = 0, nodes = 0;
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        const char *op = np->op_type ? np->op_type : "", *dom = np->domain ? np->domain : "";
        char opset[64], why[160];
        if (!*op || op_supported(c, op, dom, domains, opset, sizeof opset, why, sizeof why))
            continue;
        nodes++;
        int k = 0;
        while (k < ngap && (strcmp(gaps[k].op, op) || strcmp(gaps[k].dom, dom))) k++;
        if (k == ngap) {
            Gap *grown = realloc(gaps, (size_t)(ngap + 1) * sizeof *gaps);
            if (!grown) {
                free(gaps);
                return ir_errorf(c->err, "%s: out of memory", c->file);
            }
            gaps = grown;
            gaps[ngap++] = (Gap){op, dom, np->name, i, 0};
        }
        gaps[k].count++;
    }
    if (!ngap) return 0;
    char *m = c->err->msg;
    size_t cap = sizeof c->err->msg, len = 0;
#define PUT(...) (len += (size_t)snprintf(m + len, len < cap ? cap - len : 0, __VA_ARGS__))
    /* the first line names the first gap (what a reader, or a script that
     * reads one line, sees first); the others follow one per line */
    if (ngap > 1) PUT("%s: %d ops (%d nodes) are not supported by hetc: ", c->file, ngap, nodes);
    else PUT("%s: ", c->file);
    for (int k = 0; k < ngap && len < cap; k++) {
        char opset[64], why[160], gen[64];
        op_supported(c, gaps[k].op, gaps[k].dom, domains, opset, sizeof opset, why, sizeof why);
        const char *name = gaps[k].node;
        if (!name || !*name) {
            snprintf(gen, sizeof gen, "%.32s_%zu", gaps[k].op, gaps[k].idx);
            name = gen;
        }
        if (k > 0) PUT("\n  ");
        PUT("node '%s' (%s, domain '%s', %s)", name, gaps[k].op, gaps[k].dom, opset);
        if (gaps[k].count > 1)
            PUT(" and %d more node%s", gaps[k].count - 1, gaps[k].count > 2 ? "s" : "");
        if (ngap == 1) PUT(" %s not supported by hetc", gaps[k].count > 1 ? "are" : "is");
        if (*why) PUT(ngap == 1 ? ": %s" : " (%s)", why);
    }
#undef PUT
    if (len >= cap && cap > 5) memcpy(m + cap - 5, "...", 4);
    free(gaps);
    return -1;
}

static int lower_node(ImportCtx *c, const Onnx__NodeProto *np, size_t idx,
                      const NameMap *domains) {
    char gen[64];
    const char *op_type = np->op_type ? np->op_type : "";
    const char *domain = np->domain ? np->domain : "";
    const char *name = np->name;
    if (!name || !*name) {
        snprintf(gen, sizeof gen, "%.32s_%zu", *op_type ? op_type : "node", idx);
        name = gen;
    }
    if (!*op_type)
        return ir_errorf(c->err, "%s: node '%s' (#%zu) has no op_type", c->file, name, idx);
    if (*domain && strcmp(domain, "ai.onnx") != 0) {
        void *dv = namemap_get(domains, domain);
        char ver[48];
        if (dv) snprintf(ver, sizeof ver, "opset %lld", (long long)((intptr_t)dv - 1));
        else snprintf(ver, sizeof ver, "opset none: the domain is not imported");
        return ir_errorf(c->err, "%s: node '%s' (%s, domain '%s', %s) is not supported by "
                         "hetc: only the default ONNX domain is", c->file, name, op_type,
                         domain, ver);
    }
    const ImportEntry *e = import_table_find(op_type, c->opset);
    if (!e) {
        int lo, hi;
        if (import_table_span(op_type, &lo, &hi))
            return ir_errorf(c->err, "%s: node '%s' (%s, domain '%s', opset %lld) is not "
                             "supported by hetc: %s is defined at opsets %d..%d", c->file, name,
                             op_type, domain, (long long)c->opset, op_type, lo, hi);
        return ir_errorf(c->err, "%s: node '%s' (%s, domain '%s', opset %lld) is not supported "
                         "by hetc", c->file, name, op_type, domain, (long long)c->opset);
    }
    NodeCtx n = {.c = c, .np = np, .name = name};
    n.nin = (int)np->n_input;
    n.nout = (int)np->n_output;
    if (np->n_input > 4096 || np->n_output > 4096)
        return imp_node_err(&n, "too many inputs or outputs");
    n.in = ir_xcalloc((size_t)n.nin + 1, sizeof *n.in);
    n.out = ir_xcalloc((size_t)n.nout + 1, sizeof *n.out);
    int rc = 0;
    for (int i = 0; i < n.nin && !rc; i++) {
        const char *s = np->input[i];
        if (!s || !*s) continue;
        n.in[i] = namemap_get(&c->values, s);
        if (!n.in[i])
            rc = imp_node_err(&n, "input %d '%s' is not defined by any node, graph input or "
                              "initializer", i, s);
    }
    for (int i = 0; i < n.nout; i++)
        if (np->output[i] && *np->output[i]) n.out[i] = namemap_get(&c->values, np->output[i]);
    int first = c->g->nnodes;
    if (!rc) rc = e->lower(&n, e);
    /* dtypes as we go (ONNX order is topological), so later lowerings can
     * type the constants they create; assign_dtypes catches the rest */
    for (int i = first; !rc && i < c->g->nnodes; i++) assign_node_dtypes(c, c->g->nodes[i]);
    free(n.in);
    free(n.out);
    return rc;
}

static void collect_uses(ImportCtx *c, const Onnx__GraphProto *gp) {
    for (size_t i = 0; i < gp->n_node; i++)
        for (size_t j = 0; j < gp->node[i]->n_input; j++)
            if (gp->node[i]->input[j] && *gp->node[i]->input[j])
                namemap_put(&c->used, gp->node[i]->input[j], (void *)1);
    for (size_t i = 0; i < gp->n_output; i++)
        if (gp->output[i]->name) namemap_put(&c->used, gp->output[i]->name, (void *)1);
    for (size_t i = 0; i < gp->n_value_info; i++)
        if (gp->value_info[i]->name)
            namemap_put(&c->vinfo, gp->value_info[i]->name, gp->value_info[i]);
}

/* ONNX requires nodes in topological order and exporters comply, so check
 * that in one pass and only fall back to the general sort (which also finds
 * cycles) when it fails. */
static int nodes_in_order(const IrGraph *g) {
    unsigned char *done = ir_xcalloc((size_t)g->nvalues + 1, 1);
    int ok = 1;
    for (int i = 0; i < g->nnodes && ok; i++) {
        const IrNode *n = g->nodes[i];
        for (int j = 0; j < n->nin && ok; j++)
            if (n->in[j] && n->in[j]->producer && !done[n->in[j]->id]) ok = 0;
        for (int j = 0; j < n->nout; j++)
            if (n->out[j]) done[n->out[j]->id] = 1;
    }
    free(done);
    return ok;
}

/* ---------------------------------------------------------------- model */
static IrGraph *import_model(const Onnx__ModelProto *m, ImportCtx *c) {
    if (!m->has_ir_version) {
        ir_errorf(c->err, "%s: no ir_version: not an ONNX model", c->file);
        return NULL;
    }
    if (m->ir_version < HETC_ONNX_MIN_IR_VERSION || m->ir_version > HETC_ONNX_MAX_IR_VERSION) {
        ir_errorf(c->err, "%s: ONNX IR version %lld is not supported (hetc reads %d..%d)",
                  c->file, (long long)m->ir_version, HETC_ONNX_MIN_IR_VERSION,
                  HETC_ONNX_MAX_IR_VERSION);
        return NULL;
    }
    NameMap domains = {0};
    if (check_opsets(c, m, &domains)) {
        namemap_free(&domains);
        return NULL;
    }
    const Onnx__GraphProto *gp = m->graph;
    if (!gp || (gp->n_node == 0 && gp->n_output == 0)) {
        namemap_free(&domains);
        ir_errorf(c->err, "%s: empty model (no graph, nodes or outputs)", c->file);
        return NULL;
    }
    if (gp->n_output == 0) {
        namemap_free(&domains);
        ir_errorf(c->err, "%s: the graph declares no outputs", c->file);
        return NULL;
    }
    c->g = ir_graph_new(str_or(gp->name, "main"));
    c->g->opset = c->opset;
    collect_uses(c, gp);
    int rc = import_initializers(c, gp);
    if (!rc) rc = import_inputs(c, gp);
    if (!rc) rc = create_node_outputs(c, gp);
    if (!rc) rc = check_all_supported(c, gp, &domains);
    for (size_t i = 0; !rc && i < gp->n_node; i++) rc = lower_node(c, gp->node[i], i, &domains);
    if (!rc && !nodes_in_order(c->g) && ir_graph_toposort(c->g, c->err))
        rc = ir_error_prefix(c->err, "%s", c->file);
    if (!rc) assign_dtypes(c);
    if (!rc) rc = import_outputs(c, gp);
    /* drop values nothing produces or reads (unused LayerNorm statistics,
     * unused Constant outputs) so the verifier sees a closed graph; c->values
     * may dangle afterwards and is not used again */
    if (!rc) ir_graph_compact(c->g);
    /* the parameter set: buffers demoted, exporter dedups untied, then the
     * user's globs (param_kinds.c, param_untie.c) */
    int nuntied = 0, nforced_t = 0, nforced_f = 0;
    if (!rc) imp_demote_buffers(c->g);
    if (!rc && (rc = imp_untie_dedups(c->g, &nuntied, c->err)))
        ir_error_prefix(c->err, "%s", c->file);
    /* a copy whose reader takes no gradient (a dedup of a weight with a
     * mask of the same values) is a buffer */
    if (!rc && nuntied) imp_demote_buffers(c->g);
    if (!rc) rc = imp_param_overrides(c->g, gp, c->opt, c->file, &nforced_t, &nforced_f, c->err);
    if (!rc && c->opt->param_set) {
        imp_param_report(c->g, gp, nuntied, c->opt->param_set);
        c->opt->param_set->nforced_trainable = nforced_t;
        c->opt->param_set->nforced_frozen = nforced_f;
    }
    namemap_free(&domains);
    if (rc) {
        ir_graph_free(c->g);
        c->g = NULL;
    }
    return c->g;
}

/* path: the model file, or NULL for a buffer (messages then say "<buffer>"). */
/* The ONNX file read and decoded once (hetc_onnx_open), lowered to IR at
 * any dim bindings (hetc_onnx_import): the model protobuf is const to
 * import_model, so one decode serves every batch a compile needs. */
struct HetcOnnxFile {
    Onnx__ModelProto *m;
    char *path, *dir;
};

static Onnx__ModelProto *decode_bytes(const void *buf, size_t len, const char *file,
                                      IrError *err) {
    if (len == 0) {
        ir_errorf(err, "%s: empty file, not an ONNX model", file);
        return NULL;
    }
    if (onnx_wire_check_nesting(buf, len, &onnx__model_proto__descriptor, file, err)) return NULL;
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
    if (!m) ir_errorf(err, "%s: not a valid ONNX protobuf (truncated or corrupt)", file);
    return m;
}

static IrGraph *import_decoded(const Onnx__ModelProto *m, const char *path, const char *dir,
                               int keep, const HetcImportOptions *opt, IrError *err) {
    const char *file = path ? path : "<buffer>";
    HetcImportOptions dflt;
    if (!opt) {
        hetc_import_options_default(&dflt);
        opt = &dflt;
    }
    ImportCtx c = {.file = file, .model_dir = dir, .opt = opt, .keep_model = keep, .err = err};
    IrGraph *g = import_model(m, &c);
    namemap_free(&c.values);
    namemap_free(&c.used);
    namemap_free(&c.vinfo);
    if (g) {
        g->model_path = ir_strdup(path); /* NULL for a buffer, as ir.h allows */
        g->model_dir = ir_strdup(dir);
    }
    return g;
}

static IrGraph *import_bytes(const void *buf, size_t len, const char *path, const char *dir,
                             const HetcImportOptions *opt, IrError *err) {
    Onnx__ModelProto *m = decode_bytes(buf, len, path ? path : "<buffer>", err);
    if (!m) return NULL;
    IrGraph *g = import_decoded(m, path, dir, 0, opt, err);
    onnx__model_proto__free_unpacked(m, NULL);
    return g;
}

void hetc_import_options_default(HetcImportOptions *o) {
    memset(o, 0, sizeof *o);
    o->batch = -1;
    o->seq = -1;
}

IrGraph *hetc_import_onnx_buffer(const void *buf, size_t len, const char *model_dir,
                                 const HetcImportOptions *opt, IrError *err) {
    return import_bytes(buf, len, NULL, model_dir, opt, err);
}

HetcOnnxFile *hetc_onnx_open(const char *path, IrError *err) {
    char ebuf[sizeof err->msg];
    int fd = input_open(path, ebuf, sizeof ebuf); /* a FIFO would block in open() */
    if (fd < 0) {
        ir_errorf(err, "%s", ebuf);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        ir_errorf(err, "%s: not a regular file", path);
        return NULL;
    }
    /* Directory for external data: the real directory of the model file. */
    char *tmp = ir_strdup(path);
    char *dir = realpath(dirname(tmp), NULL);
    free(tmp);
    if (!dir) {
        close(fd);
        ir_errorf(err, "%s: cannot resolve the model directory: %s", path, strerror(errno));
        return NULL;
    }
    Onnx__ModelProto *m = NULL;
    size_t len = (size_t)st.st_size;
    if (len == 0) {
        ir_errorf(err, "%s: empty file, not an ONNX model", path);
    } else {
        /* mmap: protobuf-c copies what it keeps, so the mapping lives only
         * for the parse. */
        void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            ir_errorf(err, "%s: mmap failed: %s", path, strerror(errno));
        } else {
            m = decode_bytes(p, len, path, err);
            munmap(p, len);
        }
    }
    close(fd);
    HetcOnnxFile *f = m ? calloc(1, sizeof *f) : NULL;
    if (!f) {
        if (m) {
            onnx__model_proto__free_unpacked(m, NULL);
            ir_errorf(err, "%s: out of memory", path);
        }
        free(dir);
        return NULL;
    }
    f->m = m;
    f->path = ir_strdup(path);
    f->dir = dir;
    return f;
}

IrGraph *hetc_onnx_import(const HetcOnnxFile *f, const HetcImportOptions *opt, IrError *err) {
    return import_decoded(f->m, f->path, f->dir, 1, opt, err);
}

void hetc_onnx_close(HetcOnnxFile *f) {
    if (!f) return;
    onnx__model_proto__free_unpacked(f->m, NULL);
    free(f->path);
    free(f->dir);
    free(f);
}

IrGraph *hetc_import_onnx(const char *path, const HetcImportOptions *opt, IrError *err) {
    HetcOnnxFile *f = hetc_onnx_open(path, err);
    if (!f) return NULL;
    /* one import: it may take the initializers' bytes (keep 0) */
    IrGraph *g = import_decoded(f->m, f->path, f->dir, 0, opt, err);
    hetc_onnx_close(f);
    return g;
}
