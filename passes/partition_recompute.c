/* Activation recompute of one stage's train graph (issue 9 part 3,
 * partition.h: PartRecompute).
 *
 * The backward reads forward values; without recompute every one of them
 * stays in the microbatch's activation slot from F m to B m (memplan), so
 * the stage holds K_i copies.  Here the forward values the backward reads
 * are split into SAVED ones (kept in the slot) and the rest, whose
 * producers are cloned into the backward (phase bwd, values "rc/<name>")
 * right before the first backward node that needs them; the backward then
 * reads the clones.  A forward value no backward node reads is a forward
 * temporary, and memplan puts it in scratch, so the slot shrinks to the
 * saved values.
 *
 *  - full: saved = the stage's inputs and the values that cross a layer
 *    boundary (produced by a node of layer l and read by a forward node of
 *    another layer: the residual stream between transformer blocks, shared
 *    position tables).  Each layer's backward re-runs that layer's forward
 *    from its saved input (Megatron's full recompute; the recomputed
 *    values of one layer live in scratch only around its backward);
 *  - selective: the attention core is recomputed (outputs of Attention and
 *    Softmax nodes, and of pure layout ops fed by them: the s x s scores of
 *    a decomposed attention, the head merge), everything else is saved.
 *
 * Recompute replays deterministic host kernels on the same inputs, so the
 * gradients are bit-identical to the saved-activation backward.  The op
 * set has no random op (Dropout is the identity), so replaying is exact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition.h"

const char *part_recompute_name(PartRecompute r) {
    return r == PART_RC_FULL ? "full" : r == PART_RC_SELECTIVE ? "selective" : "none";
}

int part_recompute_parse(const char *s, PartRecompute *out) {
    if (!s) return -1;
    if (!strcmp(s, "none")) *out = PART_RC_NONE;
    else if (!strcmp(s, "full")) *out = PART_RC_FULL;
    else if (!strcmp(s, "selective")) *out = PART_RC_SELECTIVE;
    else return -1;
    return 0;
}

static int is_layout_op(IrOp op) {
    return ir_op_has(op, IR_OPF_VIEW);
}

static int is_fwd_value(const IrValue *v) {
    return v && v->producer && v->producer->phase == IR_PHASE_FWD;
}

typedef struct Rc {
    IrGraph *g;
    char *saved;      /* by value id: 1 kept in the slot (fwd values only) */
    IrValue **clone;  /* by value id: its recomputed copy */
    IrNode **emitted; /* clones in creation (dependency) order */
    int nem, capem;
} Rc;

/* The recomputed copy of forward value v (its producer cloned once, with
 * every output, and its unsaved inputs recomputed first). */
static IrValue *recompute(Rc *r, IrValue *v) {
    if (!is_fwd_value(v) || r->saved[v->id]) return v;
    if (r->clone[v->id]) return r->clone[v->id];
    IrNode *p = v->producer;
    IrValue **in = ir_xcalloc((size_t)p->nin + 1, sizeof *in);
    IrValue **out = ir_xcalloc((size_t)p->nout + 1, sizeof *out);
    for (int k = 0; k < p->nin; k++) in[k] = p->in[k] ? recompute(r, p->in[k]) : NULL;
    char nm[1200];
    for (int k = 0; k < p->nout; k++) {
        IrValue *o = p->out[k];
        if (!o) continue;
        snprintf(nm, sizeof nm, "rc/%s", o->name);
        out[k] = ir_value_new(r->g, nm, o->dtype, &o->shape, IR_VK_ACT);
        out[k]->shape_known = o->shape_known;
    }
    snprintf(nm, sizeof nm, "rc/%s", p->name);
    IrNode *c = ir_node_new(r->g, p->op, nm, p->nin, in, p->nout, out);
    for (int i = 0; i < p->nattrs; i++) {
        const IrAttr *a = &p->attrs[i];
        switch (a->type) {
        case IR_ATTR_INT: ir_node_set_int(c, a->name, a->i); break;
        case IR_ATTR_FLOAT: ir_node_set_float(c, a->name, a->f); break;
        case IR_ATTR_STRING: ir_node_set_string(c, a->name, a->s); break;
        case IR_ATTR_INTS: ir_node_set_ints(c, a->name, a->n, a->ints); break;
        case IR_ATTR_FLOATS: ir_node_set_floats(c, a->name, a->n, a->floats); break;
        }
    }
    c->module_id = p->module_id;
    c->layer_id = p->layer_id;
    c->stage_id = p->stage_id;
    c->phase = IR_PHASE_BWD;
    for (int k = 0; k < p->nout; k++)
        if (p->out[k]) r->clone[p->out[k]->id] = out[k];
    if (r->nem == r->capem) {
        r->capem = r->capem ? 2 * r->capem : 64;
        r->emitted = ir_xrealloc(r->emitted, sizeof *r->emitted * (size_t)r->capem);
    }
    r->emitted[r->nem++] = c;
    free(in);
    free(out);
    return r->clone[v->id];
}

/* Which forward values stay in the slot. */
static void choose_saved(const IrGraph *g, PartRecompute mode, char *saved) {
    for (int i = 0; i < g->nvalues; i++) saved[i] = 1;
    if (mode == PART_RC_FULL) {
        for (int i = 0; i < g->nvalues; i++)
            if (is_fwd_value(g->values[i])) saved[i] = 0;
        for (int i = 0; i < g->nnodes; i++) {
            const IrNode *n = g->nodes[i];
            if (n->phase != IR_PHASE_FWD) continue;
            for (int k = 0; k < n->nin; k++) {
                const IrValue *v = n->in[k];
                if (is_fwd_value(v) && v->producer->layer_id != n->layer_id) saved[v->id] = 1;
            }
        }
        return;
    }
    /* selective: graph order is topological, so a layout op's input is
     * decided before the op */
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->phase != IR_PHASE_FWD) continue;
        int core = ir_op_has(n->op, IR_OPF_RECOMPUTE_CHEAP) ||
                   (is_layout_op(n->op) && n->nin >= 1 && is_fwd_value(n->in[0]) &&
                    !saved[n->in[0]->id]);
        if (!core) continue;
        for (int k = 0; k < n->nout; k++)
            if (n->out[k]) saved[n->out[k]->id] = 0;
    }
}

int part_recompute(IrGraph *g, PartRecompute mode, int *nrecomputed, IrError *err) {
    if (nrecomputed) *nrecomputed = 0;
    if (mode == PART_RC_NONE) return 0;
    if (mode != PART_RC_FULL && mode != PART_RC_SELECTIVE)
        return ir_errorf(err, "recompute mode %d is none of none, full, selective", (int)mode);
    /* clones add values: size the tables for the worst case (every forward
     * value cloned once) */
    int cap = 2 * g->nvalues + 1;
    Rc r = {.g = g};
    r.saved = ir_xcalloc((size_t)cap, 1);
    r.clone = ir_xcalloc((size_t)cap, sizeof *r.clone);
    choose_saved(g, mode, r.saved);
    int n0 = g->nnodes;
    IrNode **old = ir_xcalloc((size_t)n0 + 1, sizeof *old);
    memcpy(old, g->nodes, sizeof *old * (size_t)n0);
    /* new order: original nodes, each backward node preceded by the clones
     * it triggered (so clones run just before their first reader and die
     * soon after, and graph order stays topological) */
    IrNode **order = NULL;
    int no = 0, capo = 0;
    for (int i = 0; i < n0; i++) {
        IrNode *n = old[i];
        int before = r.nem;
        if (n->phase == IR_PHASE_BWD)
            for (int k = 0; k < n->nin; k++)
                if (n->in[k]) n->in[k] = recompute(&r, n->in[k]);
        int need = no + (r.nem - before) + 1;
        if (need > capo) {
            capo = need * 2;
            order = ir_xrealloc(order, sizeof *order * (size_t)capo);
        }
        for (int e = before; e < r.nem; e++) order[no++] = r.emitted[e];
        order[no++] = n;
    }
    if (no != g->nnodes) {
        free(order), free(old), free(r.saved), free(r.clone), free(r.emitted);
        return ir_errorf(err, "recompute: %d nodes ordered of %d", no, g->nnodes);
    }
    memcpy(g->nodes, order, sizeof *order * (size_t)no);
    if (nrecomputed) *nrecomputed = r.nem;
    free(order), free(old), free(r.saved), free(r.clone), free(r.emitted);
    return 0;
}
