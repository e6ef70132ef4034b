/* Matcher toolkit for canonicalize; see canon.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "shape_rules.h"

void canon_count_uses(Canon *c) {
    IrGraph *g = c->g;
    for (int i = 0; i < g->nvalues; i++) g->values[i]->id = i;
    if (c->nuses < g->nvalues) {
        c->uses = ir_xrealloc(c->uses, (size_t)g->nvalues * sizeof *c->uses);
        c->nuses = g->nvalues;
    }
    memset(c->uses, 0, (size_t)c->nuses * sizeof *c->uses);
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j]) c->uses[n->in[j]->id]++;
    }
    for (int i = 0; i < g->noutputs; i++) c->uses[g->outputs[i]->id]++;
}

int canon_uses(const Canon *c, const IrValue *v) {
    return v->id >= 0 && v->id < c->nuses ? c->uses[v->id] : 0;
}

int canon_well_formed(const IrNode *n) {
    const IrOpInfo *info = ir_op_info(n->op);
    if (!info || n->nout < 1 || !n->out[0] || n->nin < info->min_inputs) return 0;
    for (int i = 0; i < info->min_inputs; i++)
        if (!n->in[i] || !n->in[i]->shape_known) return 0;
    return 1;
}

IrNode *canon_def(const IrValue *v, IrOp op) {
    if (!v || !v->producer || v->producer->dead || v->producer->op != op) return NULL;
    return canon_well_formed(v->producer) ? v->producer : NULL;
}

int canon_const_scalar(IrValue *v, double *x) {
    if (!v || v->kind != IR_VK_CONST || !v->shape_known || ir_shape_numel(&v->shape) != 1)
        return 0;
    return value_read_double(v, 0, x) == 0;
}

int canon_is_weight(const IrValue *v) {
    return v && (v->kind == IR_VK_PARAM || v->kind == IR_VK_CONST) && ir_value_has_data(v);
}

int canon_near(double a, double b, double rtol) {
    return fabs(a - b) <= rtol * fabs(b);
}

void match_add(Match *m, IrNode *n) {
    if (!n || match_has(m, n) || m->n >= MATCH_MAX) return;
    m->nodes[m->n++] = n;
}

int match_has(const Match *m, const IrNode *n) {
    for (int i = 0; i < m->n; i++)
        if (m->nodes[i] == n) return 1;
    return 0;
}

int match_internal(const Canon *c, const Match *m, const IrNode *root) {
    if (m->n >= MATCH_MAX) return 0; /* overflowed: be safe */
    for (int i = 0; i < m->n; i++) {
        const IrNode *n = m->nodes[i];
        if (n == root) continue;
        for (int j = 0; j < n->nout; j++) {
            const IrValue *o = n->out[j];
            if (!o) continue;
            if (o->is_graph_output) return 0;
            int inside = 0;
            for (int k = 0; k < m->n; k++)
                for (int a = 0; a < m->nodes[k]->nin; a++)
                    if (m->nodes[k]->in[a] == o) inside++;
            if (!match_has(m, root))
                for (int a = 0; a < root->nin; a++)
                    if (root->in[a] == o) inside++;
            if (inside != canon_uses(c, o)) return 0;
        }
    }
    return 1;
}

static int mul_leaves(const Canon *c, IrValue *v, int expand, IrValue **leaves, int max, int *n,
                      Match *m) {
    IrNode *p = canon_def(v, IR_OP_MUL);
    if (p && (expand || (canon_uses(c, v) == 1 && !v->is_graph_output))) {
        match_add(m, p);
        for (int i = 0; i < 2; i++)
            if (mul_leaves(c, p->in[i], 0, leaves, max, n, m)) return -1;
        return 0;
    }
    if (*n >= max) return -1;
    leaves[(*n)++] = v;
    return 0;
}

int canon_mul_leaves(const Canon *c, IrValue *v, IrValue **leaves, int max, int *n, Match *m) {
    *n = 0;
    return mul_leaves(c, v, 1, leaves, max, n, m);
}

IrNode *canon_rewrite(Canon *c, Match *m, IrNode *root, IrOp op, int nin, IrValue *const *in,
                      const CanonAttr *attrs, int nattrs, IrError *err) {
    IrGraph *g = c->g;
    IrValue *out = root->out[0];
    IrShape before = out->shape;
    IrDType dt = out->dtype;
    int pos = ir_node_index(g, root);
    IrNode *n = ir_node_insert(g, pos, op, root->name, nin, in, 1, &out);
    n->module_id = root->module_id;
    n->layer_id = root->layer_id;
    n->stage_id = root->stage_id;
    n->phase = root->phase;
    for (int i = 0; i < nattrs; i++) {
        const CanonAttr *a = &attrs[i];
        if (a->s) ir_node_set_string(n, a->name, a->s);
        else if (a->is_float) ir_node_set_float(n, a->name, a->f);
        else ir_node_set_int(n, a->name, a->i);
    }
    match_add(m, root);
    for (int i = 0; i < m->n; i++) ir_node_kill(m->nodes[i]);
    if (shape_infer_node(n, err)) {
        ir_error_prefix(err, "canonicalize produced an ill-shaped %s", ir_op_name(op));
        return NULL;
    }
    if (!ir_shape_equal(&before, &out->shape) || dt != out->dtype) {
        char a[160], b[160];
        node_errorf(err, n, "canonicalize changed the output shape from %s %s to %s %s",
                    ir_dtype_name(dt), ir_shape_str(&before, a, sizeof a),
                    ir_dtype_name(out->dtype), ir_shape_str(&out->shape, b, sizeof b));
        return NULL;
    }
    c->rewrites[op]++;
    canon_count_uses(c);
    return n;
}

IrValue *canon_insert(Canon *c, IrNode *before, IrOp op, const char *name, int nin,
                      IrValue *const *in, IrError *err) {
    IrGraph *g = c->g;
    IrValue *out = ir_value_new(g, name, in[0]->dtype, NULL, IR_VK_ACT);
    IrNode *n = ir_node_insert(g, ir_node_index(g, before), op, name, nin, in, 1, &out);
    n->phase = before->phase;
    if (shape_infer_node(n, err)) return NULL;
    canon_count_uses(c);
    return out;
}
