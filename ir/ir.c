/* Core IR: graph, values, nodes, attributes, builder.  See ir.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* also set by the build; guarded to avoid a redefinition warning */
#endif
#include "ir.h"
#include "fnv1a.h"
#include "input_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- misc */
void *ir_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "hetc: out of memory allocating %zu bytes\n", n);
        abort();
    }
    return p;
}
void *ir_xcalloc(size_t n, size_t m) {
    void *p = calloc(n ? n : 1, m ? m : 1);
    if (!p) {
        fprintf(stderr, "hetc: out of memory allocating %zu x %zu bytes\n", n, m);
        abort();
    }
    return p;
}
void *ir_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "hetc: out of memory reallocating %zu bytes\n", n);
        abort();
    }
    return q;
}
char *ir_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = ir_xmalloc(n);
    memcpy(d, s, n);
    return d;
}
uint64_t ir_fnv1a(const void *data, size_t n) { return hetc_fnv1a64(data, n); }

/* ---------------------------------------------------------------- errors */
int ir_errorf(IrError *err, const char *fmt, ...) {
    if (!err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}
int ir_error_prefix(IrError *err, const char *fmt, ...) {
    if (!err) return -1;
    char pre[1024], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", pre, old);
    return -1;
}

int ir_error_prefix_stage(IrError *err, const char *what, int stage) {
    if (!err) return -1;
    char st[32];
    int n = snprintf(st, sizeof st, "stage %d", stage);
    int named = 0;
    for (const char *p = strstr(err->msg, st); p && !named; p = strstr(p + 1, st))
        named = (p == err->msg || p[-1] == ' ') && (p[n] == ':' || p[n] == ' ' || p[n] == '(');
    if (named) return what ? ir_error_prefix(err, "%s", what) : -1;
    return ir_error_prefix(err, "%s%s%s", what ? what : "", what ? " " : "", st);
}

/* ---------------------------------------------------------------- dtypes */
static const struct {
    IrDType t;
    const char *name;
    size_t size;
} dtype_table[] = {
    {IR_F32, "f32", 4},  {IR_U8, "u8", 1},     {IR_I8, "i8", 1},     {IR_U16, "u16", 2},
    {IR_I16, "i16", 2},  {IR_I32, "i32", 4},   {IR_I64, "i64", 8},   {IR_STRING, "string", 0},
    {IR_BOOL, "bool", 1}, {IR_F16, "f16", 2},  {IR_F64, "f64", 8},   {IR_U32, "u32", 4},
    {IR_U64, "u64", 8},  {IR_BF16, "bf16", 2},
};
#define NDTYPES (sizeof dtype_table / sizeof dtype_table[0])

size_t ir_dtype_size(IrDType t) {
    for (size_t i = 0; i < NDTYPES; i++)
        if (dtype_table[i].t == t) return dtype_table[i].size;
    return 0;
}
const char *ir_dtype_name(IrDType t) {
    for (size_t i = 0; i < NDTYPES; i++)
        if (dtype_table[i].t == t) return dtype_table[i].name;
    return "undef";
}
IrDType ir_dtype_from_name(const char *s) {
    for (size_t i = 0; i < NDTYPES; i++)
        if (strcmp(dtype_table[i].name, s) == 0) return dtype_table[i].t;
    return IR_UNDEF;
}
int ir_dtype_is_float(IrDType t) {
    return t == IR_F32 || t == IR_F64 || t == IR_F16 || t == IR_BF16;
}

/* ---------------------------------------------------------------- shapes */
int64_t ir_shape_numel(const IrShape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->dims[i] < 0) return -1;
        n *= s->dims[i];
    }
    return n;
}
size_t ir_value_bytes(const IrValue *v) {
    int64_t n = ir_shape_numel(&v->shape);
    return n > 0 ? (size_t)n * ir_dtype_size(v->dtype) : 0;
}

int ir_shape_equal(const IrShape *a, const IrShape *b) {
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}
int ir_shape_is_static(const IrShape *s) {
    for (int i = 0; i < s->rank; i++)
        if (s->dims[i] < 0) return 0;
    return 1;
}
IrShape ir_shape_make(int rank, const int64_t *dims) {
    IrShape s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    for (int i = 0; i < rank && i < IR_MAX_RANK; i++) s.dims[i] = dims ? dims[i] : -1;
    return s;
}
char *ir_shape_str(const IrShape *s, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "[");
    for (int i = 0; i < s->rank; i++) {
        if (s->dims[i] < 0)
            o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "%s?", i ? "," : "");
        else
            o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "%s%lld", i ? "," : "",
                                  (long long)s->dims[i]);
    }
    snprintf(buf + o, o < len ? len - o : 0, "]");
    return buf;
}

/* ---------------------------------------------------------------- op table */
static const IrOpInfo op_table[IR_OP_COUNT] = {
#define F_ARITH IR_OPF_ARITH
#define F_ACTIVATION IR_OPF_ACTIVATION
#define F_TP_SPLITTABLE IR_OPF_TP_SPLITTABLE
#define F_AUX_INPUTS IR_OPF_AUX_INPUTS
#define F_MOVES_IN0 IR_OPF_MOVES_IN0
#define F_GRAD_SINK IR_OPF_GRAD_SINK
#define F_VIEW IR_OPF_VIEW
#define F_RECOMPUTE_CHEAP IR_OPF_RECOMPUTE_CHEAP
#define F_OPT_OUTS IR_OPF_OPT_OUTS
#define OP(e, name, mini, maxi, mino, maxo, flags) \
    [IR_OP_##e] = {name, mini, maxi, mino, maxo, (unsigned)(flags)},
#include "ops.def"
#undef OP
#undef F_ARITH
#undef F_ACTIVATION
#undef F_TP_SPLITTABLE
#undef F_AUX_INPUTS
#undef F_MOVES_IN0
#undef F_GRAD_SINK
#undef F_VIEW
#undef F_RECOMPUTE_CHEAP
#undef F_OPT_OUTS
};
const IrOpInfo *ir_op_info(IrOp op) {
    if ((int)op < 0 || op >= IR_OP_COUNT) return NULL;
    return &op_table[op];
}
int ir_op_has(IrOp op, unsigned flags) {
    const IrOpInfo *i = ir_op_info(op);
    return i && (i->flags & flags) != 0;
}
const char *ir_op_name(IrOp op) {
    const IrOpInfo *i = ir_op_info(op);
    return i ? i->name : "?";
}
int ir_op_from_name(const char *name) {
    for (int i = 0; i < IR_OP_COUNT; i++)
        if (strcmp(op_table[i].name, name) == 0) return i;
    return -1;
}

const char *ir_value_kind_name(IrValueKind k) {
    static const char *n[IR_VK_COUNT] = {"input", "param", "const", "act", "grad", "optstate"};
    return (int)k >= 0 && k < IR_VK_COUNT ? n[k] : "?";
}
const char *ir_phase_name(IrPhase p) {
    switch (p) {
    case IR_PHASE_FWD: return "fwd";
    case IR_PHASE_BWD: return "bwd";
    case IR_PHASE_UPD: return "upd";
    }
    return "?";
}

/* ---------------------------------------------------------------- graph */
IrGraph *ir_graph_new(const char *name) {
    IrGraph *g = ir_xcalloc(1, sizeof *g);
    g->name = ir_strdup(name ? name : "graph");
    return g;
}

static void value_free(IrValue *v) {
    if (!v) return;
    free(v->name);
    for (int i = 0; i < IR_MAX_RANK; i++) free(v->sym[i]);
    if (v->data_owned) free(v->data);
    if (v->map_base) munmap(v->map_base, v->map_len);
    free(v->ext.path);
    free(v);
}
static void attr_clear(IrAttr *a) {
    free(a->name);
    free(a->s);
    free(a->ints);
    free(a->floats);
}
static void node_free(IrNode *n) {
    if (!n) return;
    free(n->name);
    free(n->in);
    free(n->out);
    for (int i = 0; i < n->nattrs; i++) attr_clear(&n->attrs[i]);
    free(n->attrs);
    free(n);
}
void ir_graph_free(IrGraph *g) {
    if (!g) return;
    for (int i = 0; i < g->nnodes; i++) node_free(g->nodes[i]);
    for (int i = 0; i < g->nvalues; i++) value_free(g->values[i]);
    free(g->nodes);
    free(g->values);
    free(g->inputs);
    free(g->outputs);
    free(g->name);
    free(g->model_path);
    free(g->model_dir);
    free(g->name_slots);
    free(g);
}

#define GROW(arr, n, cap)                                                  \
    do {                                                                   \
        if ((n) >= (cap)) {                                                \
            (cap) = (cap) ? 2 * (cap) : 16;                                \
            (arr) = ir_xrealloc((arr), (size_t)(cap) * sizeof *(arr));     \
        }                                                                  \
    } while (0)

static uint64_t name_hash(const char *s) { return ir_fnv1a(s, strlen(s)); }

static void name_index_insert(IrGraph *g, IrValue *v);

static void name_index_rebuild(IrGraph *g, int cap) {
    free(g->name_slots);
    g->name_cap = cap;
    g->name_used = 0;
    g->name_slots = ir_xcalloc((size_t)cap, sizeof *g->name_slots);
    for (int i = 0; i < g->nvalues; i++) name_index_insert(g, g->values[i]);
}

static void name_index_insert(IrGraph *g, IrValue *v) {
    if (2 * (g->name_used + 1) > g->name_cap) {
        /* grow, which reinserts every value including v if it is listed */
        int cap = g->name_cap ? 2 * g->name_cap : 64;
        while (2 * (g->nvalues + 1) > cap) cap *= 2;
                name_index_rebuild(g, cap);
        for (int i = 0; i < g->nvalues; i++)
            if (g->values[i] == v) return;
    }
    size_t mask = (size_t)g->name_cap - 1;
    for (size_t h = name_hash(v->name) & mask;; h = (h + 1) & mask)
        if (!g->name_slots[h]) {
            g->name_slots[h] = v;
            g->name_used++;
            return;
        }
}

IrValue *ir_graph_find_value(const IrGraph *g, const char *name) {
    if (!g->name_cap) {
        for (int i = g->nvalues - 1; i >= 0; i--)
            if (strcmp(g->values[i]->name, name) == 0) return g->values[i];
        return NULL;
    }
    size_t mask = (size_t)g->name_cap - 1;
    for (size_t h = name_hash(name) & mask; g->name_slots[h]; h = (h + 1) & mask)
        if (strcmp(g->name_slots[h]->name, name) == 0) return g->name_slots[h];
    return NULL;
}

IrValue *ir_value_new(IrGraph *g, const char *name, IrDType dt, const IrShape *shape,
                      IrValueKind kind) {
    IrValue *v = ir_xcalloc(1, sizeof *v);
    char buf[64];
    if (!name || !*name) {
        snprintf(buf, sizeof buf, "t%d", g->next_auto_name++);
        name = buf;
    }
    if (ir_graph_find_value(g, name)) {
        size_t n = strlen(name) + 32;
        char *u = ir_xmalloc(n);
        for (int k = 1;; k++) {
            snprintf(u, n, "%s.%d", name, k);
            if (!ir_graph_find_value(g, u)) break;
        }
        v->name = u;
    } else {
        v->name = ir_strdup(name);
    }
    v->dtype = dt;
    if (shape) {
        v->shape = *shape;
        v->shape_known = 1;
    }
    v->kind = kind;
    v->producer_slot = -1;
    v->id = g->nvalues;
    GROW(g->values, g->nvalues, g->values_cap);
    g->values[g->nvalues++] = v;
    name_index_insert(g, v);
    return v;
}

IrValue *ir_const_new(IrGraph *g, const char *name, IrDType dt, const IrShape *shape,
                      const void *data) {
    IrValue *v = ir_value_new(g, name, dt, shape, IR_VK_CONST);
    int64_t n = shape ? ir_shape_numel(shape) : -1; /* unknown shape: no data yet */
    size_t nb = (size_t)(n < 0 ? 0 : n) * ir_dtype_size(dt);
    void *d = ir_xmalloc(nb);
    if (nb && data) memcpy(d, data, nb);
    else if (nb) memset(d, 0, nb);
    ir_value_set_data(v, d, nb);
    return v;
}
IrValue *ir_const_scalar_f32(IrGraph *g, const char *name, float x) {
    IrShape s = ir_shape_make(0, NULL);
    return ir_const_new(g, name, IR_F32, &s, &x);
}
IrValue *ir_const_i64s(IrGraph *g, const char *name, int n, const int64_t *v) {
    int64_t d = n;
    IrShape s = ir_shape_make(1, &d);
    return ir_const_new(g, name, IR_I64, &s, v);
}

void ir_value_set_data(IrValue *v, void *data, size_t nbytes) {
    if (v->data_owned) free(v->data);
    v->data = data;
    v->nbytes = nbytes;
    v->data_owned = 1;
    v->data_elided = 0;
}

int ir_value_has_data(const IrValue *v) { return v->data != NULL || v->has_ext; }

const void *ir_value_data(IrValue *v, IrError *err) {
    if (v->data) return v->data;
    if (v->data_elided) {
        ir_errorf(err, "value '%s': its data was elided in the text IR it was parsed from",
                  v->name);
        return NULL;
    }
    if (!v->has_ext) {
        ir_errorf(err, "value '%s' has no data", v->name);
        return NULL;
    }
    if (v->ext.length == 0) {
        v->data = ir_xmalloc(1);
        v->data_owned = 1;
        v->nbytes = 0;
        return v->data;
    }
    char ebuf[sizeof err->msg];
    int fd = input_open(v->ext.path, ebuf, sizeof ebuf); /* a FIFO would block in open() */
    if (fd < 0) {
        ir_errorf(err, "value '%s': external data: %s", v->name, ebuf);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || v->ext.offset < 0 || v->ext.length < 0 ||
        v->ext.offset > (int64_t)st.st_size ||
        v->ext.length > (int64_t)st.st_size - v->ext.offset) {
        close(fd);
        ir_errorf(err, "value '%s': external data range [%lld, +%lld) is beyond the end of '%s'",
                  v->name, (long long)v->ext.offset, (long long)v->ext.length, v->ext.path);
        return NULL;
    }
    long page = sysconf(_SC_PAGESIZE);
    int64_t base = v->ext.offset - v->ext.offset % page;
    size_t len = (size_t)(v->ext.offset - base + v->ext.length);
    void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, (off_t)base);
    close(fd);
    if (m == MAP_FAILED) {
        ir_errorf(err, "value '%s': mmap of '%s' failed: %s", v->name, v->ext.path,
                  strerror(errno));
        return NULL;
    }
    v->map_base = m;
    v->map_len = len;
    v->data = (char *)m + (v->ext.offset - base);
    v->nbytes = (size_t)v->ext.length;
    v->data_owned = 0;
    return v->data;
}

static IrNode *node_make(IrGraph *g, IrOp op, const char *name, int nin, IrValue *const *in,
                         int nout, IrValue *const *out) {
    IrNode *n = ir_xcalloc(1, sizeof *n);
    n->op = op;
    n->name = ir_strdup(name ? name : "");
    n->nin = nin;
    n->nout = nout;
    n->in = ir_xcalloc((size_t)(nin ? nin : 1), sizeof *n->in);
    n->out = ir_xcalloc((size_t)(nout ? nout : 1), sizeof *n->out);
    for (int i = 0; i < nin; i++) n->in[i] = in[i];
    for (int i = 0; i < nout; i++) {
        n->out[i] = out[i];
        if (out[i]) {
            out[i]->producer = n;
            out[i]->producer_slot = i;
        }
    }
    n->module_id = n->layer_id = n->stage_id = -1;
    n->phase = IR_PHASE_FWD;
    (void)g;
    return n;
}

static int next_node_id(IrGraph *g) { return g->next_node_id++; }

IrNode *ir_node_new(IrGraph *g, IrOp op, const char *name, int nin, IrValue *const *in,
                    int nout, IrValue *const *out) {
    return ir_node_insert(g, g->nnodes, op, name, nin, in, nout, out);
}

IrNode *ir_node_insert(IrGraph *g, int pos, IrOp op, const char *name, int nin,
                       IrValue *const *in, int nout, IrValue *const *out) {
    IrNode *n = node_make(g, op, name, nin, in, nout, out);
    n->id = next_node_id(g);
    GROW(g->nodes, g->nnodes, g->nodes_cap);
    if (pos < 0 || pos > g->nnodes) pos = g->nnodes;
    memmove(&g->nodes[pos + 1], &g->nodes[pos], (size_t)(g->nnodes - pos) * sizeof *g->nodes);
    g->nodes[pos] = n;
    g->nnodes++;
    return n;
}

int ir_node_index(const IrGraph *g, const IrNode *n) {
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i] == n) return i;
    return -1;
}

/* ---------------------------------------------------------------- attrs */
static IrAttr *attr_slot(IrNode *n, const char *name) {
    for (int i = 0; i < n->nattrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) {
            char *keep = n->attrs[i].name;
            n->attrs[i].name = NULL;
            attr_clear(&n->attrs[i]);
            memset(&n->attrs[i], 0, sizeof n->attrs[i]);
            n->attrs[i].name = keep;
            return &n->attrs[i];
        }
    n->attrs = ir_xrealloc(n->attrs, (size_t)(n->nattrs + 1) * sizeof *n->attrs);
    IrAttr *a = &n->attrs[n->nattrs++];
    memset(a, 0, sizeof *a);
    a->name = ir_strdup(name);
    return a;
}
void ir_node_set_int(IrNode *n, const char *name, int64_t v) {
    IrAttr *a = attr_slot(n, name);
    a->type = IR_ATTR_INT;
    a->i = v;
}
void ir_node_set_float(IrNode *n, const char *name, double v) {
    IrAttr *a = attr_slot(n, name);
    a->type = IR_ATTR_FLOAT;
    a->f = v;
}
void ir_node_set_string(IrNode *n, const char *name, const char *v) {
    IrAttr *a = attr_slot(n, name);
    a->type = IR_ATTR_STRING;
    a->s = ir_strdup(v ? v : "");
}
void ir_node_set_ints(IrNode *n, const char *name, int cnt, const int64_t *v) {
    IrAttr *a = attr_slot(n, name);
    a->type = IR_ATTR_INTS;
    a->n = cnt;
    a->ints = ir_xmalloc((size_t)(cnt ? cnt : 1) * sizeof *a->ints);
    if (cnt) memcpy(a->ints, v, (size_t)cnt * sizeof *a->ints);
}
void ir_node_set_floats(IrNode *n, const char *name, int cnt, const double *v) {
    IrAttr *a = attr_slot(n, name);
    a->type = IR_ATTR_FLOATS;
    a->n = cnt;
    a->floats = ir_xmalloc((size_t)(cnt ? cnt : 1) * sizeof *a->floats);
    if (cnt) memcpy(a->floats, v, (size_t)cnt * sizeof *a->floats);
}
const IrAttr *ir_node_attr(const IrNode *n, const char *name) {
    for (int i = 0; i < n->nattrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}
void ir_shape_op_range(const IrNode *n, int rank, int *start, int *end) {
    int64_t s = ir_attr_int(n, "start", 0), e = ir_attr_int(n, "end", rank);
    if (s < 0) s += rank;
    if (e < 0) e += rank;
    *start = (int)(s < 0 ? 0 : s > rank ? rank : s);
    *end = (int)(e < 0 ? 0 : e > rank ? rank : e);
}

int64_t ir_attr_int(const IrNode *n, const char *name, int64_t dflt) {
    const IrAttr *a = ir_node_attr(n, name);
    if (!a) return dflt;
    if (a->type == IR_ATTR_INT) return a->i;
    if (a->type == IR_ATTR_FLOAT) return (int64_t)a->f;
    return dflt;
}
double ir_attr_float(const IrNode *n, const char *name, double dflt) {
    const IrAttr *a = ir_node_attr(n, name);
    if (!a) return dflt;
    if (a->type == IR_ATTR_FLOAT) return a->f;
    if (a->type == IR_ATTR_INT) return (double)a->i;
    return dflt;
}
const char *ir_attr_string(const IrNode *n, const char *name, const char *dflt) {
    const IrAttr *a = ir_node_attr(n, name);
    return a && a->type == IR_ATTR_STRING ? a->s : dflt;
}
int ir_attr_ints(const IrNode *n, const char *name, const int64_t **v) {
    const IrAttr *a = ir_node_attr(n, name);
    if (!a || a->type != IR_ATTR_INTS) {
        *v = NULL;
        return 0;
    }
    *v = a->ints;
    return a->n;
}

/* ---------------------------------------------------------------- edits */
void ir_graph_add_input(IrGraph *g, IrValue *v) {
    GROW(g->inputs, g->ninputs, g->inputs_cap);
    g->inputs[g->ninputs++] = v;
}
void ir_graph_add_output(IrGraph *g, IrValue *v) {
    GROW(g->outputs, g->noutputs, g->outputs_cap);
    g->outputs[g->noutputs++] = v;
    v->is_graph_output = 1;
}

void ir_replace_uses(IrGraph *g, IrValue *from, IrValue *to) {
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] == from) n->in[j] = to;
    }
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == from) {
            g->outputs[i] = to;
            to->is_graph_output = 1;
            from->is_graph_output = 0;
        }
}

int ir_value_num_uses(const IrGraph *g, const IrValue *v) {
    int c = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] == v) c++;
    }
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == v) c++;
    return c;
}

void ir_node_kill(IrNode *n) { n->dead = 1; }

void ir_graph_compact(IrGraph *g) {
    int k = 0;
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->dead) {
            for (int j = 0; j < n->nout; j++)
                if (n->out[j] && n->out[j]->producer == n) n->out[j]->producer = NULL;
            node_free(n);
        } else {
            g->nodes[k++] = n;
        }
    }
    g->nnodes = k;
    /* mark values still referenced */
    unsigned char *used = ir_xcalloc((size_t)(g->nvalues ? g->nvalues : 1), 1);
    /* value ids are creation indices but values may have been compacted
     * before, so map through a position lookup by pointer identity */
    for (int i = 0; i < g->nvalues; i++) g->values[i]->id = i;
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        for (int j = 0; j < n->nin; j++)
            if (n->in[j]) used[n->in[j]->id] = 1;
        for (int j = 0; j < n->nout; j++)
            if (n->out[j]) used[n->out[j]->id] = 1;
    }
    for (int i = 0; i < g->ninputs; i++) used[g->inputs[i]->id] = 1;
    for (int i = 0; i < g->noutputs; i++) used[g->outputs[i]->id] = 1;
    k = 0;
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *v = g->values[i];
        /* parameters are kept even when unused: they are the model's state */
        if (used[i] || v->kind == IR_VK_PARAM) g->values[k++] = v;
        else value_free(v);
    }
    g->nvalues = k;
    for (int i = 0; i < g->nvalues; i++) g->values[i]->id = i;
    free(used);
    int cap = 64;
    while (2 * (g->nvalues + 1) > cap) cap *= 2;
    name_index_rebuild(g, cap);
}

/* Index of the node producing v (-1 if none).  prod[] holds producer+1 by
 * value id; a value whose id does not index g->values (not of this graph)
 * has no producer here. */
static int producer_of(const IrGraph *g, const int *prod, const IrValue *v) {
    if (!v || v->id < 0 || v->id >= g->nvalues || g->values[v->id] != v) return -1;
    return prod[v->id] - 1;
}

static void heap_push(int *h, int *n, int x) {
    int i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > x) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = x;
}
static int heap_pop(int *h, int *n) {
    int top = h[0], x = h[--(*n)], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= x) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = x;
    return top;
}

int ir_graph_toposort(IrGraph *g, IrError *err) {
    /* Kahn's algorithm over explicit consumer lists, always taking the
     * ready node that comes first in the current order (a min-heap of
     * indices): an already-sorted graph is left unchanged, and the cost is
     * O((nodes + edges) log nodes) rather than quadratic. */
    int n = g->nnodes;
    if (n == 0) return 0;
    for (int i = 0; i < g->nvalues; i++) g->values[i]->id = i;
    int *prod = ir_xcalloc((size_t)g->nvalues + 1, sizeof *prod);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g->nodes[i]->nout; j++) {
            IrValue *v = g->nodes[i]->out[j];
            if (v && v->id >= 0 && v->id < g->nvalues && g->values[v->id] == v) prod[v->id] = i + 1;
        }
    /* edges producer -> consumer in CSR form */
    int *start = ir_xcalloc((size_t)n + 1, sizeof *start);
    int *indeg = ir_xcalloc((size_t)n, sizeof *indeg);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i]->nin; k++) {
            int p = producer_of(g, prod, g->nodes[i]->in[k]);
            if (p >= 0) start[p + 1]++, indeg[i]++;
        }
    for (int i = 0; i < n; i++) start[i + 1] += start[i];
    int *fill = ir_xmalloc((size_t)n * sizeof *fill);
    memcpy(fill, start, (size_t)n * sizeof *fill);
    int *adj = ir_xmalloc((size_t)(start[n] ? start[n] : 1) * sizeof *adj);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i]->nin; k++) {
            int p = producer_of(g, prod, g->nodes[i]->in[k]);
            if (p >= 0) adj[fill[p]++] = i;
        }
    int *heap = ir_xmalloc((size_t)n * sizeof *heap), nheap = 0;
    for (int i = 0; i < n; i++)
        if (indeg[i] == 0) heap_push(heap, &nheap, i);
    IrNode **order = ir_xmalloc((size_t)n * sizeof *order);
    unsigned char *done = ir_xcalloc((size_t)n, 1);
    int cnt = 0;
    while (nheap > 0) {
        int pick = heap_pop(heap, &nheap);
        done[pick] = 1;
        order[cnt++] = g->nodes[pick];
        for (int e = start[pick]; e < start[pick + 1]; e++)
            if (--indeg[adj[e]] == 0) heap_push(heap, &nheap, adj[e]);
    }
    int rc = 0;
    if (cnt < n) {
        /* The first blocked node may only sit downstream of a cycle.  Walk
         * back through blocked producers: after n steps the walk is inside
         * a cycle, so the node it names is on one. */
        int bad = 0;
        while (bad < n && done[bad]) bad++;
        for (int step = 0; step < n; step++) {
            int next = -1;
            for (int k = 0; k < g->nodes[bad]->nin && next < 0; k++) {
                int p = producer_of(g, prod, g->nodes[bad]->in[k]);
                if (p >= 0 && !done[p]) next = p;
            }
            if (next < 0) break;
            bad = next;
        }
        rc = ir_errorf(err, "graph '%s' has a cycle through node '%s' (%s)", g->name,
                       g->nodes[bad]->name, ir_op_name(g->nodes[bad]->op));
    } else {
        memcpy(g->nodes, order, (size_t)n * sizeof *order);
    }
    free(prod), free(start), free(indeg), free(fill), free(adj), free(heap), free(order), free(done);
    return rc;
}

/* ---------------------------------------------------------------- tensors */
IrTensor *ir_tensor_new(const char *name, IrDType dt, const IrShape *shape) {
    IrTensor *t = ir_xcalloc(1, sizeof *t);
    t->name = ir_strdup(name);
    t->dtype = dt;
    t->shape = *shape;
    int64_t n = ir_shape_numel(shape);
    t->nbytes = (size_t)(n < 0 ? 0 : n) * ir_dtype_size(dt);
    t->data = ir_xcalloc(t->nbytes ? t->nbytes : 1, 1);
    return t;
}
void ir_tensor_free(IrTensor *t) {
    if (!t) return;
    free(t->name);
    free(t->data);
    free(t);
}
