/* mixed-precision: Cast nodes around every f32 Linear (mixed_precision.h). */
#include <stdio.h>
#include <stdlib.h>

#include "mixed_precision.h"

static IrValue *cast_value(IrGraph *g, const char *base, const char *what, IrDType to,
                           const IrShape *shape) {
    char name[512];
    snprintf(name, sizeof name, "%s/%s", base, what);
    return ir_value_new(g, name, to, shape, IR_VK_ACT);
}

static IrNode *cast_node(IrGraph *g, const IrNode *n, const char *what, IrValue *x, IrValue *y,
                         IrDType to) {
    char name[512];
    snprintf(name, sizeof name, "%s/%s", n->name[0] ? n->name : "linear", what);
    IrNode *c = ir_node_new(g, IR_OP_CAST, name, 1, &x, 1, &y);
    ir_node_set_int(c, "to", to);
    c->module_id = n->module_id;
    c->layer_id = n->layer_id;
    c->stage_id = n->stage_id;
    c->phase = n->phase;
    return c;
}

/* One bf16 copy per (f32 value, layer): the q, k, v projections reading
 * one norm output, SwiGLU's gate and up, share it (the same bits as a copy
 * each, a third of the bytes the backward keeps).  Kept per layer so a
 * pipeline cut between two layers still carries the f32 value. */
typedef struct Shared {
    const IrValue *src;
    int layer;
    IrValue *bf16;
} Shared;

int mixed_precision_converts(const IrNode *n) {
    if (n->dead || n->op != IR_OP_LINEAR || !n->out[0] || n->out[0]->dtype != IR_F32) return 0;
    for (int j = 0; j < n->nin; j++)
        if (n->in[j] && n->in[j]->dtype != IR_F32) return 0; /* f64, or already cast */
    return 1;
}

int pass_mixed_precision(IrGraph *g, PassContext *ctx, IrError *err) {
    (void)ctx;
    int nn = g->nnodes, done = 0, nsh = 0;
    Shared *sh = ir_xcalloc((size_t)3 * (size_t)nn + 1, sizeof *sh);
    for (int i = 0; i < nn; i++) {
        IrNode *n = g->nodes[i];
        if (!mixed_precision_converts(n)) continue; /* f64 or already-cast Linears stay */
        const char *base = n->name[0] ? n->name : "linear";
        for (int j = 0; j < n->nin; j++) {
            if (!n->in[j]) continue;
            IrValue *x = n->in[j], *xb = NULL;
            for (int k = 0; k < nsh && !xb; k++)
                if (sh[k].src == x && sh[k].layer == n->layer_id) xb = sh[k].bf16;
            if (!xb) {
                char what[32];
                snprintf(what, sizeof what, "bf16_in%d", j);
                xb = cast_value(g, base, what, IR_BF16, &x->shape);
                cast_node(g, n, what, x, xb, IR_BF16);
                sh[nsh++] = (Shared){x, n->layer_id, xb};
            }
            n->in[j] = xb;
        }
        /* y (f32) keeps its name and readers; the Linear now writes y16 */
        IrValue *y = n->out[0], *yb = cast_value(g, base, "bf16_out", IR_BF16, &y->shape);
        n->out[0] = yb;
        yb->producer = n;
        yb->producer_slot = 0;
        y->producer = NULL;
        cast_node(g, n, "to_f32", yb, y, IR_F32);
        done++;
    }
    free(sh);
    if (!done) return ir_errorf(err, "mixed-precision: no f32 Linear to run in bf16 (the "
                                     "canonical Linear is what is cast; see docs/TRAINING.md)");
    return ir_graph_toposort(g, err);
}

/* the `from` value a live Cast to `to` made v from, or NULL */
static IrValue *cast_src(const IrValue *v, IrDType from, IrDType to) {
    const IrNode *p = v ? v->producer : NULL;
    return p && !p->dead && p->op == IR_OP_CAST && p->nin == 1 && p->in[0] &&
                   p->in[0]->dtype == from && v->dtype == to
               ? p->in[0]
               : NULL;
}

/* each value's live reader: its count in uses[id], the last one in reader[id] */
static void count_readers(const IrGraph *g, int *uses, IrNode **reader) {
    for (int i = 0; i < g->nvalues; i++) g->values[i]->id = i;
    for (int i = 0; i < g->noutputs; i++) uses[g->outputs[i]->id] += 2; /* never stripped */
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j]) uses[n->in[j]->id]++, reader[n->in[j]->id] = n;
    }
}

int mixed_precision_strip(IrGraph *g) {
    int done = 0, nn = g->nnodes;
    int *uses = ir_xcalloc((size_t)g->nvalues + 1, sizeof *uses);
    IrNode **reader = ir_xcalloc((size_t)g->nvalues + 1, sizeof *reader);
    count_readers(g, uses, reader);
    for (int i = 0; i < nn; i++) {
        IrNode *n = g->nodes[i], *c32;
        if (n->dead || n->op != IR_OP_LINEAR || !n->out[0] || n->out[0]->dtype != IR_BF16 ||
            uses[n->out[0]->id] != 1)
            continue;
        c32 = reader[n->out[0]->id];
        if (c32->op != IR_OP_CAST || c32->nout != 1 || !cast_src(c32->out[0], IR_BF16, IR_F32))
            continue;
        int ok = 1;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] && !cast_src(n->in[j], IR_F32, IR_BF16)) ok = 0;
        if (!ok) continue; /* not the pass's pattern: left as it is */
        for (int j = 0; j < n->nin; j++)
            if (n->in[j]) {
                uses[n->in[j]->id]--;
                n->in[j] = n->in[j]->producer->in[0];
            }
        IrValue *y = c32->out[0];
        c32->dead = 1;
        y->producer = n;
        y->producer_slot = 0;
        n->out[0] = y;
        done++;
    }
    /* the input Casts no Linear reads any more (a shared copy goes with
     * the last of its readers) */
    for (int i = 0; i < nn && done; i++) {
        IrNode *n = g->nodes[i];
        if (!n->dead && n->op == IR_OP_CAST && n->nout == 1 && n->out[0] &&
            cast_src(n->out[0], IR_F32, IR_BF16) && uses[n->out[0]->id] == 0)
            n->dead = 1;
    }
    free(uses);
    free(reader);
    if (done) ir_graph_compact(g);
    return done;
}
