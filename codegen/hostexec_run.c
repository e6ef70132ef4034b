/* Persistent host executor run (hostexec.h HxRun): a static memory plan
 * over the graph's node order, made once, and a step loop that allocates
 * nothing.
 *
 * Every value maps to a storage: EXTERN (a graph input fed per step, a
 * constant or parameter read in place from its value's data) or ARENA (a
 * node output: an offset in one arena).  An output an op entry marks in
 * place (HxOpEntry.inplace bit j) takes input j's storage when input j is
 * dead after the node (its last reader, not a graph output, read through
 * no other input slot) and that storage is the arena's or was donated by
 * the caller (HxRunOpts.donate): such outputs are written over the input
 * instead of into a zeroed buffer.  Arena storages get first-fit offsets
 * over their live ranges (first producer .. last reader, or the end of the
 * step for graph outputs), as codegen/memplan.c places a stage's scratch,
 * so the arena is the live set's peak rather than the sum of all values.
 * The arena is allocated on the first step and reused afterwards; each
 * output that is neither in place nor marked as fully overwritten by its
 * kernel (HxOpEntry.overwrite) is zeroed before its node runs (the
 * kernels' contract), which touches memory already mapped instead of
 * faulting in fresh pages as a calloc per output did. */
#include "firstfit.h"
#include "hostexec_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HX_ALIGN 64

enum { ST_EXTERN = 0, ST_ARENA = 1 };
enum { PREP_ZERO = 0, PREP_INPLACE = 1, PREP_OVERWRITE = 2 };

typedef struct HxStor {
    int kind;        /* ST_EXTERN / ST_ARENA */
    int root;        /* EXTERN: the value whose data (or fed input) it is */
    int donated;     /* EXTERN: the caller lets outputs overwrite it */
    int first, last; /* ARENA: live range in node positions */
    int64_t size;    /* ARENA: aligned bytes */
    int64_t off;     /* ARENA: offset in the arena */
    void *ptr;       /* this step's address */
} HxStor;

struct HxRun {
    IrGraph *g;
    int nids;
    int *stor_of;          /* by value id: storage index, -1 none */
    /* by value id: what the executor does to an output before its node:
     * PREP_ZERO zero it (the kernels' contract), PREP_INPLACE nothing (the
     * producer writes over its input's buffer), PREP_OVERWRITE nothing (the
     * op's entry marks that its kernel writes every element) */
    signed char *inplace;
    int poison; /* HETC_HX_POISON=1: fill PREP_OVERWRITE outputs with NaN bytes (tests) */
    size_t *nbytes;        /* by value id */
    unsigned char *fed;    /* by value id: a graph input given this step */
    HxStor *stor;
    int nstor;
    const HxOpEntry **ent; /* by node position: NULL for dead nodes */
    const void **in;       /* scratch for one node's inputs / outputs */
    void **out;
    char *arena;
    int64_t arena_bytes;
    unsigned char empty[HX_ALIGN]; /* an empty graph input nobody fed */
    HxRunStats st;
    int64_t step; /* hexec_run_set_step's; -1 until set */
};

static int64_t align_up(int64_t x) { return (x + HX_ALIGN - 1) / HX_ALIGN * HX_ALIGN; }

static int node_error(const IrNode *n, IrError *err) {
    return ir_error_prefix(err, "node '%s' (%s)", n->name, ir_op_name(n->op));
}

static int value_nbytes(const IrValue *v, size_t *nb, IrError *err) {
    char b[96];
    if (!ir_shape_is_static(&v->shape))
        return ir_errorf(err, "value '%s' has no static shape (%s); run shape-infer first", v->name,
                         ir_shape_str(&v->shape, b, sizeof b));
    size_t es = ir_dtype_size(v->dtype);
    if (!es)
        return ir_errorf(err, "value '%s' has dtype %s, which the host executor cannot hold",
                         v->name, ir_dtype_name(v->dtype));
    *nb = (size_t)ir_shape_numel(&v->shape) * es;
    return 0;
}

static int new_stor(HxRun *r, HxStor s) {
    r->stor[r->nstor] = s;
    return r->nstor++;
}

/* The storage of a value no node produces: a graph input, a constant or a
 * parameter; -1 with err set if it has none. */
static int extern_stor(HxRun *r, IrValue *v, const unsigned char *donate, IrError *err) {
    if (r->stor_of[v->id] >= 0) return r->stor_of[v->id];
    if (v->kind != IR_VK_INPUT && v->kind != IR_VK_CONST && v->kind != IR_VK_PARAM &&
        !ir_value_has_data(v)) {
        ir_errorf(err, "value '%s' is used before any node produced it", v->name);
        return -1;
    }
    if (value_nbytes(v, &r->nbytes[v->id], err)) return -1;
    return r->stor_of[v->id] =
               new_stor(r, (HxStor){.kind = ST_EXTERN, .root = v->id, .donated = donate[v->id]});
}

/* May output j of node pos (at position pos) take input j's storage? */
static int can_take(const HxRun *r, const IrNode *n, const HxOpEntry *e, int j, int pos,
                    const int *last_use, const unsigned char *keep) {
    if (j >= 32 || !(e->inplace & (1u << j)) || j >= n->nin || !n->in[j] || !n->out[j])
        return 0;
    const IrValue *a = n->in[j], *y = n->out[j];
    if (a->dtype != y->dtype || r->nbytes[a->id] != r->nbytes[y->id]) return 0;
    if (keep[a->id] || last_use[a->id] != pos) return 0;
    for (int k = 0; k < n->nin; k++)
        if (k != j && n->in[k] == a) return 0; /* read through another slot too */
    const HxStor *s = &r->stor[r->stor_of[a->id]];
    return s->kind == ST_ARENA || s->donated;
}

/* First-fit offsets for the arena storages (live ranges that share a node
 * position never share a byte); returns the arena size. */
static int64_t place_arena(HxRun *r) {
    FfBuf *bufs = ir_xcalloc((size_t)r->nstor + 1, sizeof *bufs);
    int *ids = ir_xcalloc((size_t)r->nstor + 1, sizeof *ids), n = 0;
    for (int i = 0; i < r->nstor; i++)
        if (r->stor[i].kind == ST_ARENA) {
            ids[n] = i;
            bufs[n++] = (FfBuf){r->stor[i].first, r->stor[i].last, r->stor[i].size, 0};
        }
    int64_t top = firstfit_place(bufs, n);
    for (int k = 0; k < n; k++) r->stor[ids[k]].off = bufs[k].off;
    free(ids);
    free(bufs);
    return top;
}

HxRun *hexec_run_new(IrGraph *g, const HxRunOpts *o, IrError *err) {
    HxRun *r = ir_xcalloc(1, sizeof *r);
    int nv = g->nvalues, nn = g->nnodes, rc = 0;
    r->g = g;
    r->step = -1;
    r->nids = nv;
    r->stor_of = ir_xmalloc(((size_t)nv + 1) * sizeof *r->stor_of);
    r->inplace = ir_xcalloc((size_t)nv + 1, 1);
    const char *poison = getenv("HETC_HX_POISON");
    r->poison = poison && !strcmp(poison, "1");
    r->nbytes = ir_xcalloc((size_t)nv + 1, sizeof *r->nbytes);
    r->fed = ir_xcalloc((size_t)nv + 1, 1);
    r->stor = ir_xcalloc((size_t)nv + 1, sizeof *r->stor);
    r->ent = ir_xcalloc((size_t)nn + 1, sizeof *r->ent);
    int *last_use = ir_xmalloc(((size_t)nv + 1) * sizeof *last_use);
    unsigned char *keep = ir_xcalloc((size_t)nv + 1, 1), *donate = ir_xcalloc((size_t)nv + 1, 1);
    int maxio = 1;
    /* ids index g->values (ir_graph_compact renumbers them densely) */
    for (int i = 0; i < nv && !rc; i++) {
        if (g->values[i]->id != i)
            rc = ir_errorf(err, "value '%s' has id %d at position %d; compact the graph first",
                           g->values[i]->name, g->values[i]->id, i);
        r->stor_of[i] = -1;
        last_use[i] = -1;
    }
    for (int i = 0; i < (o ? o->ndonate : 0) && !rc; i++) {
        IrValue *v = ir_graph_find_value(g, o->donate[i]);
        if (!v || v->producer)
            rc = ir_errorf(err, "donated value '%s' is %s", o->donate[i],
                           v ? "produced by a node" : "not in the graph");
        else donate[v->id] = 1;
    }
    for (int i = 0; i < nn; i++) {
        IrNode *n = g->nodes[i];
        if (n->dead) continue;
        if (n->nin > maxio) maxio = n->nin;
        if (n->nout > maxio) maxio = n->nout;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j]) last_use[n->in[j]->id] = i;
    }
    for (int i = 0; i < g->noutputs; i++) keep[g->outputs[i]->id] = 1;
    for (int i = 0; i < g->ninputs && !rc; i++)
        if (extern_stor(r, g->inputs[i], donate, err) < 0) rc = -1;
    for (int i = 0; i < nn && !rc; i++) {
        IrNode *n = g->nodes[i];
        if (n->dead) continue;
        char why[256];
        const HxOpEntry *e = hx_op_entry(n->op);
        if (!e || hx_check_node(n, e, err)) {
            if (!e) ir_errorf(err, "no host kernel for this op");
            rc = node_error(n, err);
            break;
        }
        if (!hexec_node_supported(n, why, sizeof why)) {
            ir_errorf(err, "%s", why);
            rc = node_error(n, err);
            break;
        }
        r->ent[i] = e;
        for (int j = 0; j < n->nin && !rc; j++)
            if (n->in[j] && extern_stor(r, n->in[j], donate, err) < 0) rc = node_error(n, err);
        for (int j = 0; j < n->nout && !rc; j++) {
            IrValue *y = n->out[j];
            if (!y) continue;
            if (r->stor_of[y->id] >= 0) {
                ir_errorf(err, "value '%s' is produced twice", y->name);
                rc = node_error(n, err);
                break;
            }
            if (value_nbytes(y, &r->nbytes[y->id], err)) {
                rc = node_error(n, err);
                break;
            }
            int last = keep[y->id] ? nn : last_use[y->id] > i ? last_use[y->id] : i;
            int64_t sz = align_up(r->nbytes[y->id] ? (int64_t)r->nbytes[y->id] : 1);
            r->st.value_bytes += sz;
            if (can_take(r, n, e, j, i, last_use, keep)) {
                int s = r->stor_of[y->id] = r->stor_of[n->in[j]->id];
                if (r->stor[s].kind == ST_ARENA && r->stor[s].last < last) r->stor[s].last = last;
                r->inplace[y->id] = PREP_INPLACE;
                r->st.inplace++;
                if (r->stor[s].kind == ST_EXTERN) r->st.donated++;
            } else {
                r->stor_of[y->id] = new_stor(r, (HxStor){.kind = ST_ARENA, .first = i,
                                                         .last = last, .size = sz});
                if (j < 32 && (e->overwrite & (1u << j))) r->inplace[y->id] = PREP_OVERWRITE;
            }
        }
    }
    for (int i = 0; i < g->noutputs && !rc; i++)
        if (extern_stor(r, g->outputs[i], donate, err) < 0)
            rc = ir_error_prefix(err, "graph output '%s'", g->outputs[i]->name);
    if (!rc) r->arena_bytes = r->st.arena_bytes = place_arena(r);
    r->in = ir_xcalloc((size_t)maxio, sizeof *r->in);
    r->out = ir_xcalloc((size_t)maxio, sizeof *r->out);
    free(last_use);
    free(keep);
    free(donate);
    if (rc) {
        hexec_run_free(r);
        return NULL;
    }
    return r;
}

void hexec_run_free(HxRun *r) {
    if (!r) return;
    free(r->stor_of);
    free(r->inplace);
    free(r->nbytes);
    free(r->fed);
    free(r->stor);
    free(r->ent);
    free(r->in);
    free(r->out);
    free(r->arena);
    free(r);
}

static int feed(HxRun *r, IrTensor *const *inputs, int ninputs, IrError *err) {
    char a[96], b[96];
    IrGraph *g = r->g;
    for (int i = 0; i < g->ninputs; i++) {
        r->fed[g->inputs[i]->id] = 0;
        r->stor[r->stor_of[g->inputs[i]->id]].ptr = NULL;
    }
    for (int k = 0; k < ninputs; k++) {
        const IrTensor *t = inputs[k];
        IrValue *v = t && t->name ? ir_graph_find_value(g, t->name) : NULL;
        if (!v || v->kind != IR_VK_INPUT)
            return ir_errorf(err, "given input '%s' is not a graph input",
                             t && t->name ? t->name : "(unnamed)");
        if (t->dtype != v->dtype)
            return ir_errorf(err, "input '%s': dtype %s given, the graph expects %s", v->name,
                             ir_dtype_name(t->dtype), ir_dtype_name(v->dtype));
        if (!ir_shape_equal(&t->shape, &v->shape))
            return ir_errorf(err, "input '%s': shape %s given, the graph expects %s", v->name,
                             ir_shape_str(&t->shape, a, sizeof a),
                             ir_shape_str(&v->shape, b, sizeof b));
        size_t need = r->nbytes[v->id];
        if (t->nbytes < need || (need && !t->data))
            return ir_errorf(err, "input '%s': %zu bytes given, %zu needed", v->name, t->nbytes,
                             need);
        r->fed[v->id] = 1;
        r->stor[r->stor_of[v->id]].ptr = t->data ? t->data : r->empty;
    }
    for (int i = 0; i < g->ninputs; i++) {
        IrValue *v = g->inputs[i];
        if (r->fed[v->id]) continue;
        if (r->nbytes[v->id]) return ir_errorf(err, "graph input '%s' was not given", v->name);
        r->stor[r->stor_of[v->id]].ptr = r->empty; /* zero elements */
    }
    return 0;
}

void hexec_run_set_step(HxRun *r, int64_t step) { r->step = step; }

int hexec_run_step(HxRun *r, IrTensor *const *inputs, int ninputs, IrError *err) {
    IrGraph *g = r->g;
    if (feed(r, inputs, ninputs, err)) return -1;
    if (!r->arena && r->arena_bytes) {
        r->arena = ir_xmalloc((size_t)r->arena_bytes);
        r->st.allocs++;
        r->st.alloc_bytes += r->arena_bytes;
    }
    /* constants and parameters are read in place (external data maps lazily) */
    for (int i = 0; i < r->nstor; i++) {
        HxStor *s = &r->stor[i];
        if (s->kind == ST_ARENA) s->ptr = r->arena + s->off;
        else if (g->values[s->root]->kind != IR_VK_INPUT &&
                 !(s->ptr = (void *)ir_value_data(g->values[s->root], err)))
            return ir_error_prefix(err, "value '%s'", g->values[s->root]->name);
    }
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        const HxOpEntry *e = r->ent[i];
        if (!e) continue;
        for (int j = 0; j < n->nin; j++)
            r->in[j] = n->in[j] ? r->stor[r->stor_of[n->in[j]->id]].ptr : NULL;
        for (int j = 0; j < n->nout; j++) {
            IrValue *y = n->out[j];
            r->out[j] = y ? r->stor[r->stor_of[y->id]].ptr : NULL;
            if (!y || !r->nbytes[y->id]) continue;
            if (r->inplace[y->id] == PREP_ZERO) memset(r->out[j], 0, r->nbytes[y->id]);
            else if (r->inplace[y->id] == PREP_OVERWRITE && r->poison)
                memset(r->out[j], 0xff, r->nbytes[y->id]); /* NaN in every float lane */
        }
        HxCall c = {.n = n, .in = r->in, .out = r->out, .k = e->k, .err = err, .step = r->step};
        if (e->run(&c)) return node_error(n, err);
    }
    r->st.steps++;
    return 0;
}

int hexec_run_noutputs(const HxRun *r) { return r->g->noutputs; }

const void *hexec_run_output(const HxRun *r, int i, size_t *nbytes) {
    if (i < 0 || i >= r->g->noutputs) return NULL;
    int id = r->g->outputs[i]->id;
    if (nbytes) *nbytes = r->nbytes[id];
    return r->stor[r->stor_of[id]].ptr;
}

void hexec_run_stats(const HxRun *r, HxRunStats *s) { *s = r->st; }

int hexec_run(IrGraph *g, IrTensor *const *inputs, int ninputs, IrTensor ***outputs,
              int *noutputs, IrError *err) {
    *outputs = NULL;
    *noutputs = 0;
    HxRun *r = hexec_run_new(g, NULL, err);
    if (!r) return -1;
    if (hexec_run_step(r, inputs, ninputs, err)) {
        hexec_run_free(r);
        return -1;
    }
    IrTensor **ts = ir_xcalloc((size_t)g->noutputs + 1, sizeof *ts);
    for (int i = 0; i < g->noutputs; i++) {
        IrValue *v = g->outputs[i];
        size_t nb;
        const void *d = hexec_run_output(r, i, &nb);
        ts[i] = ir_tensor_new(v->name, v->dtype, &v->shape);
        if (nb) memcpy(ts[i]->data, d, nb);
    }
    hexec_run_free(r);
    *outputs = ts;
    *noutputs = g->noutputs;
    return 0;
}
