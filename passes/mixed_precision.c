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
