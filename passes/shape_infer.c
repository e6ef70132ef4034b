/* shape-infer: set the dtype and static shape of every value, folding
 * shape computations as it goes.
 *
 * ONNX exports compute shapes at run time (Shape -> Gather -> Unsqueeze ->
 * Concat -> Reshape).  hetc needs static shapes, so a Shape of a value whose
 * shape is known becomes a constant, and any node whose inputs are all
 * constants is evaluated on the host right away; the rules of later nodes
 * (Reshape's target shape, Slice's starts, ...) then read the data. */
#include <stdlib.h>
#include <string.h>

#include "fold.h"
#include "pass.h"
#include "shape_rules.h"

#define SH(s) ir_shape_str((s), (char[160]){0}, 160)

static int check_sources(IrGraph *g, IrError *err) {
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *v = g->values[i];
        if (v->producer) continue;
        if (v->kind == IR_VK_ACT) continue; /* dangling; the verifier reports it if used */
        if (!v->shape_known || !ir_shape_is_static(&v->shape)) {
            for (int d = 0; d < v->shape.rank; d++)
                if (v->shape.dims[d] < 0)
                    return ir_errorf(err, "%s '%s' %s: dim %d%s%s%s is not bound to an extent "
                                     "(use --batch/--seq/--bind)", ir_value_kind_name(v->kind),
                                     v->name, SH(&v->shape), d, v->sym[d] ? " ('" : "",
                                     v->sym[d] ? v->sym[d] : "", v->sym[d] ? "')" : "");
            return ir_errorf(err, "%s '%s' has no known shape", ir_value_kind_name(v->kind),
                             v->name);
        }
    }
    return 0;
}

typedef struct Declared {
    IrValue *v;
    IrShape shape;
} Declared;

int pass_shape_infer(IrGraph *g, PassContext *ctx, IrError *err) {
    (void)ctx;
    if (ir_graph_toposort(g, err)) return -1;
    if (check_sources(g, err)) return -1;
    /* Graph outputs may carry the shape the model declares; keep it to
     * check against what the rules infer. */
    Declared *decl = ir_xcalloc((size_t)(g->noutputs ? g->noutputs : 1), sizeof *decl);
    int ndecl = 0;
    for (int i = 0; i < g->noutputs; i++) {
        IrValue *v = g->outputs[i];
        if (v->producer && v->shape_known) decl[ndecl++] = (Declared){v, v->shape};
    }
    int rc = 0;
    for (int i = 0; i < g->nnodes && rc == 0; i++) {
        IrNode *n = g->nodes[i];
        if (n->dead) continue;
        if (n->op == IR_OP_SHAPE && n->in[0] && n->in[0]->shape_known &&
            ir_shape_is_static(&n->in[0]->shape)) {
            rc = fold_shape_node(g, n, err) < 0 ? -1 : 0;
            continue;
        }
        if (shape_infer_node(n, err)) {
            rc = -1;
            break;
        }
        if (fold_inputs_const(n) && fold_node(g, n, FOLD_MAX_BYTES, err) < 0) rc = -1;
    }
    for (int i = 0; i < ndecl && rc == 0; i++) {
        const IrShape *d = &decl[i].shape, *s = &decl[i].v->shape;
        int ok = d->rank == s->rank;
        for (int k = 0; ok && k < d->rank; k++)
            if (d->dims[k] >= 0 && d->dims[k] != s->dims[k]) ok = 0;
        if (!ok)
            rc = ir_errorf(err, "graph output '%s' is declared as %s but its producer infers %s",
                           decl[i].v->name, SH(d), SH(s));
    }
    free(decl);
    ir_graph_compact(g);
    return rc;
}
