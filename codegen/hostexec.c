/* Host executor runner: buffers per value (indexed by IrValue.id), inputs
 * fed by name, nodes run in g->nodes order through the op table
 * (hostexec_ops.c), activations freed after their last use so a model's
 * peak memory is its live set rather than every intermediate. */
#include "hostexec_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hexec_op_supported(IrOp op) { return hx_op_entry(op) != NULL; }

int hexec_node_supported(const IrNode *n, char *why, size_t whylen) {
    char dummy[8];
    if (!why) {
        why = dummy;
        whylen = sizeof dummy;
    }
    const HxOpEntry *e = hx_op_entry(n->op);
    if (!e) {
        snprintf(why, whylen, "no host kernel for op %s", ir_op_name(n->op));
        return 0;
    }
    IrError bad;
    if (n->nin < 1 || !n->in[0] || hx_check_node(n, e, &bad)) {
        snprintf(why, whylen, "%s: %s", ir_op_name(n->op),
                 n->nin < 1 || !n->in[0] ? "first input missing" : bad.msg);
        return 0;
    }
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && !ir_dtype_size(n->in[i]->dtype)) {
            snprintf(why, whylen, "%s: input dtype %s has no host representation",
                     ir_op_name(n->op), ir_dtype_name(n->in[i]->dtype));
            return 0;
        }
    for (int i = 0; i < n->nout; i++)
        if (n->out[i] && !ir_dtype_size(n->out[i]->dtype)) {
            snprintf(why, whylen, "%s: output dtype %s has no host representation",
                     ir_op_name(n->op), ir_dtype_name(n->out[i]->dtype));
            return 0;
        }
    return e->check ? e->check(n, e->k, why, whylen) : 1;
}

static int node_error(const IrNode *n, IrError *err) {
    return ir_error_prefix(err, "node '%s' (%s)", n->name, ir_op_name(n->op));
}

/* Zeroed buffer for a static-shape value; NULL with err set otherwise. */
static void *alloc_value(const IrValue *v, size_t *nbytes, IrError *err) {
    char b[96];
    if (!ir_shape_is_static(&v->shape)) {
        ir_errorf(err, "value '%s' has no static shape (%s); run shape-infer first", v->name,
                  ir_shape_str(&v->shape, b, sizeof b));
        return NULL;
    }
    size_t es = ir_dtype_size(v->dtype);
    if (!es) {
        ir_errorf(err, "value '%s' has dtype %s, which the host executor cannot hold", v->name,
                  ir_dtype_name(v->dtype));
        return NULL;
    }
    *nbytes = (size_t)ir_shape_numel(&v->shape) * es;
    return ir_xcalloc(*nbytes ? *nbytes : 1, 1);
}

/* Run one node with input pointers already resolved; outputs allocated here. */
static int call_node(IrNode *n, const void **in, void **out, size_t *outbytes, IrError *err) {
    char why[256];
    const HxOpEntry *e = hx_op_entry(n->op);
    if (!e || hx_check_node(n, e, err)) {
        if (!e) ir_errorf(err, "no host kernel for this op");
        return node_error(n, err);
    }
    if (!hexec_node_supported(n, why, sizeof why)) {
        ir_errorf(err, "%s", why);
        return node_error(n, err);
    }
    for (int i = 0; i < n->nout; i++) {
        out[i] = NULL;
        if (!n->out[i]) continue;
        if (!(out[i] = alloc_value(n->out[i], &outbytes[i], err))) {
            for (int j = 0; j < i; j++) free(out[j]), out[j] = NULL;
            return node_error(n, err);
        }
    }
    HxCall c = {.n = n, .in = in, .out = out, .k = e->k, .err = err};
    if (e->run(&c)) {
        for (int i = 0; i < n->nout; i++) free(out[i]), out[i] = NULL;
        return node_error(n, err);
    }
    return 0;
}

int hexec_call_node_into(IrNode *n, const void **in, void **out, IrError *err) {
    char why[256];
    const HxOpEntry *e = hx_op_entry(n->op);
    if (!e || hx_check_node(n, e, err)) {
        if (!e) ir_errorf(err, "no host kernel for this op");
        return node_error(n, err);
    }
    if (!hexec_node_supported(n, why, sizeof why)) {
        ir_errorf(err, "%s", why);
        return node_error(n, err);
    }
    for (int i = 0; i < n->nout; i++)
        if (n->out[i] && !out[i]) {
            ir_errorf(err, "no buffer for output %d ('%s')", i, n->out[i]->name);
            return node_error(n, err);
        }
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && !in[i] && !e->shape_only) {
            ir_errorf(err, "no buffer for input %d ('%s')", i, n->in[i]->name);
            return node_error(n, err);
        }
    HxCall c = {.n = n, .in = in, .out = out, .k = e->k, .err = err};
    return e->run(&c) ? node_error(n, err) : 0;
}

int hexec_eval_node(IrGraph *g, IrNode *n, IrError *err) {
    (void)g;
    const void **in = ir_xcalloc((size_t)n->nin + 1, sizeof *in);
    void **out = ir_xcalloc((size_t)n->nout + 1, sizeof *out);
    size_t *nb = ir_xcalloc((size_t)n->nout + 1, sizeof *nb);
    int rc = 0;
    const HxOpEntry *e = hx_op_entry(n->op);
    for (int i = 0; i < n->nin && !rc && !(e && e->shape_only); i++) {
        if (!n->in[i]) continue;
        if (!(in[i] = ir_value_data(n->in[i], err))) rc = node_error(n, err);
    }
    if (!rc) rc = call_node(n, in, out, nb, err);
    if (!rc)
        for (int i = 0; i < n->nout; i++)
            if (n->out[i]) ir_value_set_data(n->out[i], out[i], nb[i]);
    free(in);
    free(out);
    free(nb);
    return rc;
}

typedef struct RunState {
    int nids;
    const void **data;   /* by value id */
    unsigned char *owned; /* 1: produced here, freed by us */
    int *last_use;        /* index of the last node reading the value; -1 none */
    unsigned char *keep;  /* graph outputs: never freed early */
} RunState;

static void state_free(RunState *s) {
    if (s->data)
        for (int i = 0; i < s->nids; i++)
            if (s->owned[i]) free((void *)s->data[i]);
    free(s->data);
    free(s->owned);
    free(s->last_use);
    free(s->keep);
}

static int feed_inputs(IrGraph *g, RunState *s, IrTensor *const *inputs, int ninputs,
                       IrError *err) {
    char a[96], b[96];
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
        size_t need = (size_t)ir_shape_numel(&v->shape) * ir_dtype_size(v->dtype);
        if (t->nbytes < need || (need && !t->data))
            return ir_errorf(err, "input '%s': %zu bytes given, %zu needed", v->name, t->nbytes,
                             need);
        s->data[v->id] = t->data;
    }
    for (int i = 0; i < g->ninputs; i++)
        if (!s->data[g->inputs[i]->id] &&
            ir_shape_numel(&g->inputs[i]->shape) != 0)
            return ir_errorf(err, "graph input '%s' was not given", g->inputs[i]->name);
    return 0;
}

static int prepare(IrGraph *g, RunState *s, IrError *err) {
    s->nids = g->nvalues;
    s->data = ir_xcalloc((size_t)s->nids + 1, sizeof *s->data);
    s->owned = ir_xcalloc((size_t)s->nids + 1, 1);
    s->keep = ir_xcalloc((size_t)s->nids + 1, 1);
    s->last_use = ir_xmalloc(((size_t)s->nids + 1) * sizeof *s->last_use);
    /* ids index g->values (ir_graph_compact renumbers them densely) */
    for (int i = 0; i < s->nids; i++) {
        if (g->values[i]->id != i)
            return ir_errorf(err, "value '%s' has id %d at position %d; compact the graph first",
                             g->values[i]->name, g->values[i]->id, i);
        s->last_use[i] = -1;
    }
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        for (int j = 0; j < n->nin; j++)
            if (n->in[j]) s->last_use[n->in[j]->id] = i;
    }
    for (int i = 0; i < g->noutputs; i++) s->keep[g->outputs[i]->id] = 1;
    return 0;
}

/* Constants and parameters are read in place (external data maps lazily). */
static int resolve(IrValue *v, RunState *s, IrError *err) {
    if (s->data[v->id]) return 0;
    if (v->kind == IR_VK_CONST || v->kind == IR_VK_PARAM || ir_value_has_data(v)) {
        if (!(s->data[v->id] = ir_value_data(v, err))) return -1;
        return 0;
    }
    if (v->kind == IR_VK_INPUT) { /* empty input not given: zero elements */
        size_t nb;
        void *p = alloc_value(v, &nb, err);
        if (!p) return -1;
        s->data[v->id] = p;
        s->owned[v->id] = 1;
        return 0;
    }
    return ir_errorf(err, "value '%s' is used before any node produced it", v->name);
}

static void release(RunState *s, IrValue *v) {
    if (v && s->owned[v->id] && !s->keep[v->id]) {
        free((void *)s->data[v->id]);
        s->data[v->id] = NULL;
        s->owned[v->id] = 0;
    }
}

int hexec_run(IrGraph *g, IrTensor *const *inputs, int ninputs, IrTensor ***outputs,
              int *noutputs, IrError *err) {
    RunState s = {0};
    *outputs = NULL;
    *noutputs = 0;
    int rc = prepare(g, &s, err);
    if (!rc) rc = feed_inputs(g, &s, inputs, ninputs, err);
    const void **in = NULL;
    void **out = NULL;
    size_t *nb = NULL;
    int maxio = 1;
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i]->nin > maxio) maxio = g->nodes[i]->nin;
        if (g->nodes[i]->nout > maxio) maxio = g->nodes[i]->nout;
    }
    in = ir_xcalloc((size_t)maxio, sizeof *in);
    out = ir_xcalloc((size_t)maxio, sizeof *out);
    nb = ir_xcalloc((size_t)maxio, sizeof *nb);
    for (int i = 0; i < g->nnodes && !rc; i++) {
        IrNode *n = g->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->nin && !rc; j++) {
            in[j] = NULL;
            if (!n->in[j]) continue;
            if (resolve(n->in[j], &s, err)) rc = node_error(n, err);
            else in[j] = s.data[n->in[j]->id];
        }
        if (rc || (rc = call_node(n, in, out, nb, err))) break;
        for (int j = 0; j < n->nout; j++) {
            IrValue *o = n->out[j];
            if (!o) continue;
            if (s.owned[o->id]) free((void *)s.data[o->id]); /* produced twice: keep the last */
            s.data[o->id] = out[j];
            s.owned[o->id] = 1;
            if (s.last_use[o->id] < i) release(&s, o); /* never read, not an output */
        }
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] && s.last_use[n->in[j]->id] == i) release(&s, n->in[j]);
    }
    free(in);
    free(out);
    free(nb);
    if (!rc) {
        IrTensor **ts = ir_xcalloc((size_t)g->noutputs + 1, sizeof *ts);
        for (int i = 0; i < g->noutputs && !rc; i++) {
            IrValue *v = g->outputs[i];
            if (resolve(v, &s, err)) {
                rc = ir_error_prefix(err, "graph output '%s'", v->name);
                break;
            }
            ts[i] = ir_tensor_new(v->name, v->dtype, &v->shape);
            size_t need = (size_t)ir_shape_numel(&v->shape) * ir_dtype_size(v->dtype);
            if (need) memcpy(ts[i]->data, s.data[v->id], need);
        }
        if (rc) {
            for (int i = 0; i < g->noutputs; i++)
                if (ts[i]) ir_tensor_free(ts[i]);
            free(ts);
        } else {
            *outputs = ts;
            *noutputs = g->noutputs;
        }
    }
    state_free(&s);
    return rc;
}

void hexec_fill_pattern(const IrValue *v, void *h, size_t nb) {
    memset(h, 0, nb);
    if (v->dtype != IR_F32) return;
    float *f = h;
    for (size_t i = 0; i < nb / sizeof(float); i++)
        f[i] = 0.02f * (float)((int)((i * 2654435761u) % 201u) - 100) / 100.0f;
}
