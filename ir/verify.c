/* Structural checks of an IR graph (ir_verify, see ir.h).
 *
 * Passes call this after they run, so a broken invariant is reported where
 * it was introduced, naming the node (name and op) and the value involved,
 * rather than surfacing later as a wrong result or a crash. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "irtext.h"

/* "node 'name' (Op)", or "node #i (Op)" for unnamed nodes. */
static const char *node_desc(const IrNode *n, int idx, char *buf, size_t len) {
    if (n->name && n->name[0])
        snprintf(buf, len, "node '%s' (%s)", n->name, ir_op_name(n->op));
    else
        snprintf(buf, len, "node #%d (%s)", idx, ir_op_name(n->op));
    return buf;
}

static const char *vname(const IrValue *v) { return v->name ? v->name : "(null)"; }

static int cmp_names(const void *a, const void *b) {
    const IrValue *x = *(IrValue *const *)a, *y = *(IrValue *const *)b;
    return strcmp(vname(x), vname(y));
}

/* Bytes that a value with a static shape must hold; -1 if not checkable. */
static int64_t expected_bytes(const IrValue *v) {
    size_t es = ir_dtype_size(v->dtype);
    if (!v->shape_known || es == 0 || v->dtype == IR_STRING) return -1;
    if (v->shape.rank < 0 || v->shape.rank > IR_MAX_RANK || !ir_shape_is_static(&v->shape))
        return -1;
    int64_t n = ir_shape_numel(&v->shape);
    if (n < 0 || n > INT64_MAX / (int64_t)es) return -1;
    return n * (int64_t)es;
}

static int check_value(const IrValue *v, IrError *err) {
    if (!v->name || !v->name[0]) return ir_errorf(err, "value #%d has no name", v->id);
    if ((int)v->kind < 0 || v->kind >= IR_VK_COUNT)
        return ir_errorf(err, "value '%s' has invalid kind %d", v->name, (int)v->kind);
    if (v->shape_known && (v->shape.rank < 0 || v->shape.rank > IR_MAX_RANK))
        return ir_errorf(err, "value '%s' has invalid rank %d", v->name, v->shape.rank);
    if (v->shape_known)
        for (int i = 0; i < v->shape.rank; i++)
            if (v->shape.dims[i] < -1)
                return ir_errorf(err, "value '%s' has invalid dim %d = %" PRId64, v->name, i,
                                 v->shape.dims[i]);
    if (v->kind == IR_VK_CONST && !v->data && !v->data_elided && !v->has_ext)
        return ir_errorf(err, "constant '%s' has no data", v->name);
    if (v->kind == IR_VK_CONST || v->kind == IR_VK_PARAM) {
        int64_t want = expected_bytes(v);
        int64_t have = v->has_ext                    ? v->ext.length
                       : (v->data || v->data_elided) ? (int64_t)v->nbytes
                                                     : -1;
        if (want >= 0 && have >= 0 && want != have) {
            char sb[128];
            return ir_errorf(
                err, "%s '%s' (%s%s) holds %" PRId64 " bytes of data, its type needs %" PRId64,
                ir_value_kind_name(v->kind), v->name, ir_dtype_name(v->dtype),
                ir_shape_str(&v->shape, sb, sizeof sb), have, want);
        }
        if (v->has_ext && (v->ext.offset < 0 || v->ext.length < 0 || !v->ext.path))
            return ir_errorf(err, "%s '%s' has an invalid external data reference",
                             ir_value_kind_name(v->kind), v->name);
    }
    return 0;
}

/* Shapes must be known and static: the planner and codegen size buffers
 * from them.  `where` says how the value is used. */
static int check_shape(const IrValue *v, const char *where, IrError *err) {
    char sb[128];
    if (v->dtype == IR_UNDEF) return ir_errorf(err, "value '%s' (%s) has no dtype", v->name, where);
    if (!v->shape_known)
        return ir_errorf(err, "value '%s' (%s) has an unknown shape", v->name, where);
    if (!ir_shape_is_static(&v->shape)) {
        for (int i = 0; i < v->shape.rank; i++)
            if (v->shape.dims[i] < 0 && v->sym[i])
                return ir_errorf(err, "value '%s' (%s) has shape %s: dim %d ('%s') is not bound",
                                 v->name, where, ir_shape_str(&v->shape, sb, sizeof sb), i,
                                 v->sym[i]);
        return ir_errorf(err, "value '%s' (%s) has a dynamic shape %s", v->name, where,
                         ir_shape_str(&v->shape, sb, sizeof sb));
    }
    return 0;
}

typedef struct V {
    const IrGraph *g;
    int require_shapes;
    IrError *err;
    IrPtrMap in_graph; /* value -> index in g->values */
    IrPtrMap producer; /* value -> index of the node that produces it */
    IrPtrMap defined;  /* values available so far, walking nodes in order */
} V;

static int check_node(V *c, int idx) {
    const IrGraph *g = c->g;
    const IrNode *n = g->nodes[idx];
    char nd[512];
    if (!n) return ir_errorf(c->err, "graph '%s': node slot %d is NULL", g->name, idx);
    const IrOpInfo *info = ir_op_info(n->op);
    if (!info) return ir_errorf(c->err, "node #%d has invalid op %d", idx, (int)n->op);
    node_desc(n, idx, nd, sizeof nd);
    if (!n->name) return ir_errorf(c->err, "%s has a NULL name", nd);
    if (n->dead)
        return ir_errorf(c->err, "%s is marked dead but still in the graph (run ir_graph_compact)",
                         nd);
    if ((int)n->phase < IR_PHASE_FWD || n->phase > IR_PHASE_UPD)
        return ir_errorf(c->err, "%s has invalid phase %d", nd, (int)n->phase);
    if (n->nin < info->min_inputs || (info->max_inputs >= 0 && n->nin > info->max_inputs)) {
        if (info->max_inputs < 0)
            return ir_errorf(c->err, "%s has %d inputs, %s takes at least %d", nd, n->nin,
                             info->name, info->min_inputs);
        return ir_errorf(c->err, "%s has %d inputs, %s takes %d to %d", nd, n->nin, info->name,
                         info->min_inputs, info->max_inputs);
    }
    if (n->nout < info->min_outputs || (info->max_outputs >= 0 && n->nout > info->max_outputs)) {
        if (info->max_outputs < 0)
            return ir_errorf(c->err, "%s has %d outputs, %s makes at least %d", nd, n->nout,
                             info->name, info->min_outputs);
        return ir_errorf(c->err, "%s has %d outputs, %s makes %d to %d", nd, n->nout, info->name,
                         info->min_outputs, info->max_outputs);
    }
    for (int a = 0; a < n->nattrs; a++) {
        const IrAttr *at = &n->attrs[a];
        if (!at->name || !at->name[0])
            return ir_errorf(c->err, "%s: attribute %d has no name", nd, a);
        if ((int)at->type < IR_ATTR_INT || at->type > IR_ATTR_FLOATS)
            return ir_errorf(c->err, "%s: attribute '%s' has invalid type", nd, at->name);
        if (at->type == IR_ATTR_STRING && !at->s)
            return ir_errorf(c->err, "%s: string attribute '%s' is NULL", nd, at->name);
        if ((at->type == IR_ATTR_INTS || at->type == IR_ATTR_FLOATS) &&
            (at->n < 0 ||
             (at->n > 0 && !(at->type == IR_ATTR_INTS ? (void *)at->ints : (void *)at->floats))))
            return ir_errorf(c->err, "%s: list attribute '%s' is malformed", nd, at->name);
        for (int b = 0; b < a; b++)
            if (strcmp(n->attrs[b].name, at->name) == 0)
                return ir_errorf(c->err, "%s has attribute '%s' twice", nd, at->name);
    }
    for (int i = 0; i < n->nin; i++) {
        const IrValue *v = n->in[i];
        if (!v) {
            if (i < info->min_inputs)
                return ir_errorf(c->err, "%s: input %d is omitted but %s requires %d inputs", nd, i,
                                 info->name, info->min_inputs);
            continue;
        }
        if (!irpm_get(&c->in_graph, v, NULL))
            return ir_errorf(c->err, "%s: input %d ('%s') is not a value of graph '%s'", nd, i,
                             vname(v), g->name);
        if (!irpm_get(&c->defined, v, NULL)) {
            int p;
            if (irpm_get(&c->producer, v, &p)) {
                char pd[512];
                return ir_errorf(c->err, "%s uses value '%s' (input %d) before it is defined by %s",
                                 nd, v->name, i, node_desc(g->nodes[p], p, pd, sizeof pd));
            }
            return ir_errorf(c->err,
                             "%s uses value '%s' (input %d), which no node produces and is not "
                             "an input, param or const",
                             nd, v->name, i);
        }
        if (c->require_shapes) {
            char where[600];
            snprintf(where, sizeof where, "input %d of %s", i, nd);
            if (check_shape(v, where, c->err) != 0) return -1;
        }
    }
    for (int j = 0; j < n->nout; j++) {
        const IrValue *v = n->out[j];
        if (!v) {
            if (j < info->min_outputs)
                return ir_errorf(c->err, "%s: output %d is omitted but %s makes at least %d", nd, j,
                                 info->name, info->min_outputs);
            continue;
        }
        if (!irpm_get(&c->in_graph, v, NULL))
            return ir_errorf(c->err, "%s: output %d ('%s') is not a value of graph '%s'", nd, j,
                             vname(v), g->name);
        if (v->kind == IR_VK_INPUT || v->kind == IR_VK_CONST)
            return ir_errorf(c->err, "%s produces '%s', which is a graph %s", nd, v->name,
                             ir_value_kind_name(v->kind));
        if (v->producer != n || v->producer_slot != j)
            return ir_errorf(c->err, "%s: output %d ('%s') has producer %s slot %d, not this node",
                             nd, j, v->name, v->producer ? ir_op_name(v->producer->op) : "NULL",
                             v->producer_slot);
        if (c->require_shapes) {
            char where[600];
            snprintf(where, sizeof where, "output %d of %s", j, nd);
            if (check_shape(v, where, c->err) != 0) return -1;
        }
        irpm_put(&c->defined, v, 1);
    }
    return 0;
}

static int verify(V *c) {
    const IrGraph *g = c->g;
    IrError *err = c->err;
    for (int i = 0; i < g->nvalues; i++) {
        if (!g->values[i]) return ir_errorf(err, "graph '%s': value slot %d is NULL", g->name, i);
        if (check_value(g->values[i], err) != 0) return -1;
        irpm_put(&c->in_graph, g->values[i], i);
    }
    if ((int)c->in_graph.n != g->nvalues)
        return ir_errorf(err, "graph '%s' lists a value twice in its value table", g->name);

    /* unique names: sort pointers by name, look at neighbours */
    if (g->nvalues > 1) {
        IrValue **byname = ir_xmalloc((size_t)g->nvalues * sizeof *byname);
        memcpy(byname, g->values, (size_t)g->nvalues * sizeof *byname);
        qsort(byname, (size_t)g->nvalues, sizeof *byname, cmp_names);
        for (int i = 1; i < g->nvalues; i++)
            if (strcmp(byname[i - 1]->name, byname[i]->name) == 0) {
                ir_errorf(err, "duplicate value name '%s' (%s and %s)", byname[i]->name,
                          ir_value_kind_name(byname[i - 1]->kind),
                          ir_value_kind_name(byname[i]->kind));
                free(byname);
                return -1;
            }
        free(byname);
    }

    /* who produces what; each value at most once */
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (!n) return ir_errorf(err, "graph '%s': node slot %d is NULL", g->name, i);
        for (int j = 0; j < n->nout; j++) {
            int prev;
            if (!n->out[j]) continue;
            if (irpm_get(&c->producer, n->out[j], &prev)) {
                char a[512], b[512];
                return ir_errorf(err, "value '%s' is produced twice, by %s and by %s",
                                 vname(n->out[j]), node_desc(g->nodes[prev], prev, a, sizeof a),
                                 node_desc(n, i, b, sizeof b));
            }
            irpm_put(&c->producer, n->out[j], i);
        }
    }

    /* values not produced by a node must be inputs, params or consts */
    for (int i = 0; i < g->nvalues; i++) {
        const IrValue *v = g->values[i];
        int produced = irpm_get(&c->producer, v, NULL);
        if (!produced && v->producer)
            return ir_errorf(err,
                             "value '%s' names producer %s, which is not in the graph (or does "
                             "not list it as an output)",
                             v->name, ir_op_name(v->producer->op));
        if (produced) continue;
        /* optimizer state persists across steps like a parameter: the runner
         * holds its data and writes it back from its update node's outputs
         * (state carry, ir/ops.def) */
        if (v->kind != IR_VK_INPUT && v->kind != IR_VK_PARAM && v->kind != IR_VK_CONST &&
            v->kind != IR_VK_OPTSTATE)
            return ir_errorf(err,
                             "value '%s' (%s) is not produced by any node and is not an input, "
                             "param, const or optimizer state",
                             v->name, ir_value_kind_name(v->kind));
        irpm_put(&c->defined, v, 1);
    }

    /* graph inputs: exactly the values of kind input, each once */
    IrPtrMap seen;
    irpm_init(&seen, (size_t)g->ninputs);
    int rc = 0;
    for (int i = 0; i < g->ninputs && rc == 0; i++) {
        const IrValue *v = g->inputs[i];
        if (!v)
            rc = ir_errorf(err, "graph '%s': input %d is NULL", g->name, i);
        else if (!irpm_get(&c->in_graph, v, NULL))
            rc = ir_errorf(err, "graph input %d ('%s') is not a value of graph '%s'", i, vname(v),
                           g->name);
        else if (v->kind != IR_VK_INPUT)
            rc = ir_errorf(err, "graph input '%s' has kind %s, not input", v->name,
                           ir_value_kind_name(v->kind));
        else if (!irpm_put(&seen, v, 1))
            rc = ir_errorf(err, "value '%s' is listed twice as a graph input", v->name);
        else if (c->require_shapes)
            rc = check_shape(v, "graph input", err);
    }
    for (int i = 0; i < g->nvalues && rc == 0; i++)
        if (g->values[i]->kind == IR_VK_INPUT && !irpm_get(&seen, g->values[i], NULL))
            rc = ir_errorf(err, "value '%s' has kind input but is not in the graph's input list",
                           g->values[i]->name);
    irpm_free(&seen);
    if (rc != 0) return -1;

    for (int i = 0; i < g->nnodes; i++)
        if (check_node(c, i) != 0) return -1;

    for (int i = 0; i < g->noutputs; i++) {
        const IrValue *v = g->outputs[i];
        if (!v) return ir_errorf(err, "graph '%s': output %d is NULL", g->name, i);
        if (!irpm_get(&c->in_graph, v, NULL))
            return ir_errorf(err, "graph output %d ('%s') is not a value of graph '%s'", i,
                             vname(v), g->name);
        if (!irpm_get(&c->defined, v, NULL))
            return ir_errorf(err, "graph output '%s' is not defined", v->name);
        if (!v->is_graph_output)
            return ir_errorf(err, "graph output '%s' does not have is_graph_output set", v->name);
        if (c->require_shapes && check_shape(v, "graph output", err) != 0) return -1;
    }
    return 0;
}

int ir_verify(const IrGraph *g, int require_shapes, IrError *err) {
    if (!g) return ir_errorf(err, "ir_verify: NULL graph");
    V c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.require_shapes = require_shapes;
    c.err = err;
    irpm_init(&c.in_graph, (size_t)g->nvalues);
    irpm_init(&c.producer, (size_t)g->nvalues);
    irpm_init(&c.defined, (size_t)g->nvalues);
    int rc = verify(&c);
    irpm_free(&c.in_graph);
    irpm_free(&c.producer);
    irpm_free(&c.defined);
    if (rc != 0 && err) ir_error_prefix(err, "verify graph '%s'", g->name ? g->name : "");
    return rc;
}
