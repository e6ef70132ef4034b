/* const-fold: evaluate every node whose inputs are all CONST values with
 * data, through the host executor, up to FOLD_MAX_BYTES of output.  Nodes
 * are visited in topological order, so chains fold in one sweep.
 *
 * PARAMs are never folded: they are trained.  But the importer cannot tell
 * a trainable float initializer from a float buffer (nanoGPT's causal mask
 * `bias = tril(ones)`): a parameter whose every use reaches only
 * comparisons (Equal/Less/...), Shape, a Where condition or a Cast to a
 * non-float type, through data movement (Slice, Reshape, Transpose,
 * Identity, float Cast, ...), and never a graph output, gets
 * an identically zero gradient, so it cannot be trained.  Such buffers are
 * turned into CONSTs first, so the mask computed from them folds and
 * canonicalize can check it. */
#include <stdlib.h>

#include "fold.h"
#include "pass.h"
#include "shape_rules.h"

/* Ops through whose first input a value flows unchanged in meaning. */
static int is_data_movement(IrOp op) { return ir_op_has(op, IR_OPF_MOVES_IN0); }
/* Ops whose output carries no gradient to their inputs. */
static int is_gradient_sink(IrOp op) { return ir_op_has(op, IR_OPF_GRAD_SINK); }

/* 1 if every use of v ends in a gradient sink (depth-limited). */
static int only_feeds_sinks(const IrGraph *g, const IrValue *v, int depth) {
    if (v->is_graph_output || depth > 16) return 0;
    int used = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->nin; j++) {
            if (n->in[j] != v) continue;
            used = 1;
            if (is_gradient_sink(n->op)) continue;
            /* no gradient flows into a Where condition or through a Cast
             * to an integer or bool type either */
            if (n->op == IR_OP_WHERE && j == 0) continue;
            if (n->op == IR_OP_CAST && !ir_dtype_is_float((IrDType)ir_attr_int(n, "to", 0)))
                continue;
            if (j != 0 || !is_data_movement(n->op)) return 0;
            for (int k = 0; k < n->nout; k++)
                if (n->out[k] && !only_feeds_sinks(g, n->out[k], depth + 1)) return 0;
        }
    }
    return used;
}

static void demote_buffers(IrGraph *g) {
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *v = g->values[i];
        if (v->kind == IR_VK_PARAM && ir_value_has_data(v) && only_feeds_sinks(g, v, 0))
            v->kind = IR_VK_CONST;
    }
}

int pass_const_fold(IrGraph *g, PassContext *ctx, IrError *err) {
    (void)ctx;
    if (ir_graph_toposort(g, err)) return -1;
    demote_buffers(g);
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->dead || !fold_inputs_const(n)) continue;
        /* fold needs output shapes; infer them if no shape-infer ran */
        int known = 1;
        for (int j = 0; j < n->nout; j++)
            if (n->out[j] && !n->out[j]->shape_known) known = 0;
        if (!known && shape_infer_node(n, err)) return -1;
        if (fold_node(g, n, FOLD_MAX_BYTES, err) < 0) return -1;
    }
    ir_graph_compact(g);
    return 0;
}
