/* Host executor: one node at a time through the op table (hostexec_ops.c)
 * -- const-fold's hexec_eval_node and stage binaries' hexec_call_node_into.
 * Whole graphs run through hostexec_run.c (HxRun, hexec_run). */
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
    HxCall c = {.n = n, .in = in, .out = out, .k = e->k, .err = err, .step = -1};
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
    HxCall c = {.n = n, .in = in, .out = out, .k = e->k, .err = err, .step = -1};
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

void hexec_fill_pattern(const IrValue *v, void *h, size_t nb) {
    memset(h, 0, nb);
    if (v->dtype != IR_F32) return;
    float *f = h;
    for (size_t i = 0; i < nb / sizeof(float); i++)
        f[i] = 0.02f * (float)((int)((i * 2654435761u) % 201u) - 100) / 100.0f;
}
