/* Builder-level graph operations: ir_graph_toposort (checked by brute force
 * on shuffled random DAGs, and on cycles) and ir_graph_compact (checked
 * against the set of values a brute-force scan says must survive). */
#include <stdlib.h>
#include <string.h>

#include "test_ir.h"

enum { NDAG = 60 };

/* A random DAG: node i reads one or two earlier values and makes v<i>. */
static IrGraph *random_dag(unsigned long long *seed) {
    IrGraph *g = ir_graph_new("dag");
    int64_t d = 4;
    IrShape sh = ir_shape_make(1, &d);
    IrValue *vals[NDAG + 1];
    vals[0] = ir_value_new(g, "x", IR_F32, &sh, IR_VK_INPUT);
    ir_graph_add_input(g, vals[0]);
    for (int i = 0; i < NDAG; i++) {
        char vn[16], nn[16];
        snprintf(vn, sizeof vn, "v%d", i);
        snprintf(nn, sizeof nn, "n%d", i);
        IrValue *out = ir_value_new(g, vn, IR_F32, &sh, IR_VK_ACT);
        IrValue *in[2] = {vals[test_rand(seed) % (unsigned)(i + 1)],
                          vals[test_rand(seed) % (unsigned)(i + 1)]};
        if (test_rand(seed) & 1)
            ir_node_new(g, IR_OP_ADD, nn, 2, in, 1, &out);
        else
            ir_node_new(g, IR_OP_NEG, nn, 1, in, 1, &out);
        vals[i + 1] = out;
    }
    ir_graph_add_output(g, vals[NDAG]);
    return g;
}

/* Brute force: every input's producer sits earlier in g->nodes. */
static int is_topological(const IrGraph *g) {
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++) {
            const IrValue *v = g->nodes[i]->in[j];
            if (!v) continue;
            for (int k = i; k < g->nnodes; k++)
                for (int o = 0; o < g->nodes[k]->nout; o++)
                    if (g->nodes[k]->out[o] == v) return 0;
        }
    return 1;
}

static void test_toposort(void) {
    unsigned long long seed = 1234;
    IrError err = {{0}};
    for (int round = 0; round < 20; round++) {
        IrGraph *g = random_dag(&seed);
        IrNode *orig[NDAG];
        memcpy(orig, g->nodes, sizeof orig);
        /* already sorted: left exactly as it is */
        CHECK(ir_graph_toposort(g, &err) == 0);
        CHECK(memcmp(orig, g->nodes, sizeof orig) == 0);
        /* shuffled: sorted again, same nodes */
        for (int i = NDAG - 1; i > 0; i--) {
            int j = (int)(test_rand(&seed) % (unsigned)(i + 1));
            IrNode *t = g->nodes[i];
            g->nodes[i] = g->nodes[j];
            g->nodes[j] = t;
        }
        CHECK_MSG(ir_graph_toposort(g, &err) == 0, "%s", err.msg);
        CHECK(g->nnodes == NDAG);
        CHECK(is_topological(g));
        for (int i = 0; i < NDAG; i++)
            CHECK(ir_node_index(g, orig[i]) >= 0);
        CHECK_MSG(ir_verify(g, 1, &err) == 0, "%s", err.msg);
        ir_graph_free(g);
    }

    /* a cycle, with a node downstream of it placed first: the error must
     * name a node on the cycle, not the downstream one */
    IrGraph *g = ir_graph_new("cyclic");
    int64_t d = 4;
    IrShape sh = ir_shape_make(1, &d);
    IrValue *x = ir_value_new(g, "x", IR_F32, &sh, IR_VK_INPUT);
    ir_graph_add_input(g, x);
    IrValue *a = ir_value_new(g, "a", IR_F32, &sh, IR_VK_ACT);
    IrValue *c = ir_value_new(g, "c", IR_F32, &sh, IR_VK_ACT);
    IrValue *dn = ir_value_new(g, "dn", IR_F32, &sh, IR_VK_ACT);
    ir_node_new(g, IR_OP_NEG, "downstream", 1, &c, 1, &dn);
    IrValue *ain[2] = {x, c};
    ir_node_new(g, IR_OP_ADD, "cycle_add", 2, ain, 1, &a);
    ir_node_new(g, IR_OP_RELU, "cycle_relu", 1, &a, 1, &c);
    IrNode *before[3];
    memcpy(before, g->nodes, sizeof before);
    CHECK(ir_graph_toposort(g, &err) != 0);
    CHECK_MSG(strstr(err.msg, "cycle_add") || strstr(err.msg, "cycle_relu"), "%s", err.msg);
    CHECK_MSG(!strstr(err.msg, "downstream"), "%s", err.msg);
    CHECK(memcmp(before, g->nodes, sizeof before) == 0); /* untouched on failure */
    ir_graph_free(g);

    g = ir_graph_new("selfloop");
    x = ir_value_new(g, "x", IR_F32, &sh, IR_VK_INPUT);
    ir_graph_add_input(g, x);
    IrValue *s = ir_value_new(g, "s", IR_F32, &sh, IR_VK_ACT);
    IrValue *sin[2] = {s, x};
    ir_node_new(g, IR_OP_ADD, "eats_itself", 2, sin, 1, &s);
    CHECK(ir_graph_toposort(g, &err) != 0);
    CHECK_MSG(strstr(err.msg, "eats_itself"), "%s", err.msg);
    ir_graph_free(g);
}

static int name_in(const char *n, char **names, int cnt) {
    for (int i = 0; i < cnt; i++)
        if (strcmp(names[i], n) == 0) return 1;
    return 0;
}

static void test_compact(void) {
    unsigned long long seed = 99;
    IrError err = {{0}};
    for (int round = 0; round < 10; round++) {
        IrGraph *g = random_dag(&seed);
        ir_const_scalar_f32(g, "unused_const", 2.0f);
        int64_t d = 4;
        IrShape sh = ir_shape_make(1, &d);
        ir_value_new(g, "unused_param", IR_F32, &sh, IR_VK_PARAM);
        /* kill, at random, nodes whose outputs nothing live reads (walking
         * backwards so whole dead chains go) */
        for (int i = g->nnodes - 1; i >= 0; i--) {
            IrNode *n = g->nodes[i];
            if (ir_value_num_uses(g, n->out[0]) == 0 && test_rand(&seed) % 3 != 0) ir_node_kill(n);
        }
        /* oracle: names of the values that must survive */
        char **keep = malloc((size_t)g->nvalues * sizeof *keep);
        int nkeep = 0, live_nodes = 0;
        for (int i = 0; i < g->nvalues; i++) {
            IrValue *v = g->values[i];
            int used = v->kind == IR_VK_PARAM || v->is_graph_output;
            for (int k = 0; k < g->ninputs; k++)
                used |= g->inputs[k] == v;
            for (int k = 0; k < g->nnodes && !used; k++) {
                IrNode *n = g->nodes[k];
                if (n->dead) continue;
                for (int j = 0; j < n->nin; j++)
                    used |= n->in[j] == v;
                for (int j = 0; j < n->nout; j++)
                    used |= n->out[j] == v;
            }
            if (used) keep[nkeep++] = ir_strdup(v->name);
        }
        for (int k = 0; k < g->nnodes; k++)
            live_nodes += !g->nodes[k]->dead;
        ir_graph_compact(g);
        CHECK(g->nnodes == live_nodes);
        CHECK(g->nvalues == nkeep);
        for (int i = 0; i < g->nvalues; i++) {
            CHECK(g->values[i]->id == i);
            CHECK_MSG(name_in(g->values[i]->name, keep, nkeep), "%s survived", g->values[i]->name);
        }
        CHECK(ir_graph_find_value(g, "unused_param") != NULL);
        CHECK(ir_graph_find_value(g, "unused_const") == NULL);
        CHECK_MSG(ir_verify(g, 1, &err) == 0, "%s", err.msg);
        for (int i = 0; i < nkeep; i++)
            free(keep[i]);
        free(keep);
        ir_graph_free(g);
    }
}

/* ir_error_prefix_stage names a stage once: a callee's "stage 0: ..." is
 * not prefixed "stage 0: " again, "stage 1" is not taken for "stage 10". */
static void test_error_prefix_stage(void) {
    static const struct {
        const char *msg, *what;
        int stage;
        const char *want;
    } cases[] = {
        {"stage 0: xfer 3 ('h'): bad", NULL, 0, "stage 0: xfer 3 ('h'): bad"},
        {"stage 0: dp 3 does not divide", "partition", 0, "partition: stage 0: dp 3 does not divide"},
        {"node 'x' (MatMul): bad", "partition", 2, "partition stage 2: node 'x' (MatMul): bad"},
        {"node 'x': bad", NULL, 1, "stage 1: node 'x': bad"},
        {"stage 10: bad", NULL, 1, "stage 1: stage 10: bad"},
        {"codegen stage 3: bad", NULL, 3, "codegen stage 3: bad"},
        {"stage 2 (recompute full): bad", "codegen", 2, "codegen: stage 2 (recompute full): bad"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        IrError err = {{0}};
        snprintf(err.msg, sizeof err.msg, "%s", cases[i].msg);
        CHECK(ir_error_prefix_stage(&err, cases[i].what, cases[i].stage) == -1);
        CHECK_MSG(!strcmp(err.msg, cases[i].want), "'%s' -> '%s', want '%s'", cases[i].msg,
                  err.msg, cases[i].want);
    }
}

/* The flags column of ops.def agrees with the arities and with the passes
 * that combine flags: tp_shard follows the ops its elementwise test accepts
 * (F_ARITH, F_ACTIVATION) through a head shard, so they must be
 * F_TP_SPLITTABLE; a view moves input 0's data; optional outputs and
 * auxiliary inputs need an op with more than one of them; the accessor
 * answers 0 outside the table. */
static void test_op_flags(void) {
    int nflagged = 0;
    for (int op = 0; op < IR_OP_COUNT; op++) {
        const IrOpInfo *i = ir_op_info((IrOp)op);
        const char *nm = i->name;
        nflagged += i->flags != 0;
        if (ir_op_has((IrOp)op, IR_OPF_ARITH | IR_OPF_ACTIVATION))
            CHECK_MSG(ir_op_has((IrOp)op, IR_OPF_TP_SPLITTABLE),
                      "%s: elementwise, not TP-splittable", nm);
        if (ir_op_has((IrOp)op, IR_OPF_VIEW))
            CHECK_MSG(ir_op_has((IrOp)op, IR_OPF_MOVES_IN0),
                      "%s: a view that does not move input 0", nm);
        if (ir_op_has((IrOp)op, IR_OPF_OPT_OUTS))
            CHECK_MSG(i->max_outputs != 1, "%s: optional outputs with one output", nm);
        if (ir_op_has((IrOp)op, IR_OPF_AUX_INPUTS))
            CHECK_MSG(i->max_inputs != 1, "%s: auxiliary inputs with one input", nm);
        if (ir_op_has((IrOp)op, IR_OPF_ACTIVATION))
            CHECK_MSG(i->min_inputs == 1 && i->max_inputs == 1, "%s: an activation is unary", nm);
        CHECK_MSG(ir_op_has((IrOp)op, i->flags) == (i->flags != 0), "%s: ir_op_has vs flags", nm);
    }
    CHECK(nflagged > 0);
    CHECK(ir_op_has(IR_OP_GELU, IR_OPF_ACTIVATION) && !ir_op_has(IR_OP_MATMUL, IR_OPF_ACTIVATION));
    CHECK(!ir_op_has(IR_OP_COUNT, ~0u) && !ir_op_has((IrOp)-1, ~0u));
}

void test_graph(void) {
    test_op_flags();
    test_error_prefix_stage();
    test_toposort();
    test_compact();
}
