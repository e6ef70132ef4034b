/* ir_verify tests: a well-formed graph passes; each broken invariant is
 * rejected with a message naming the culprit node and value. */
#include <stdlib.h>
#include <string.h>

#include "test_ir.h"

/* x:input f32[2,4] -> relu(n1) -> a -> add(n2, a, c) -> b -> output */
typedef struct Small {
    IrGraph *g;
    IrValue *x, *a, *b, *c;
    IrNode *n1, *n2;
} Small;

static Small small(void) {
    Small s;
    s.g = ir_graph_new("small");
    int64_t d[2] = {2, 4};
    IrShape sh = ir_shape_make(2, d);
    s.x = ir_value_new(s.g, "x", IR_F32, &sh, IR_VK_INPUT);
    ir_graph_add_input(s.g, s.x);
    s.c = ir_const_scalar_f32(s.g, "c", 1.5f);
    s.a = ir_value_new(s.g, "a", IR_F32, &sh, IR_VK_ACT);
    s.b = ir_value_new(s.g, "b", IR_F32, &sh, IR_VK_ACT);
    s.n1 = ir_node_new(s.g, IR_OP_RELU, "first_relu", 1, &s.x, 1, &s.a);
    IrValue *in2[2] = {s.a, s.c};
    s.n2 = ir_node_new(s.g, IR_OP_ADD, "the_add", 2, in2, 1, &s.b);
    ir_graph_add_output(s.g, s.b);
    return s;
}

/* ir_verify must fail and the message must contain every string given. */
static void expect_reject(const IrGraph *g, int require_shapes, const char *what, const char *a,
                          const char *b) {
    IrError err = {{0}};
    int rc = ir_verify(g, require_shapes, &err);
    CHECK_MSG(rc != 0, "verify should reject: %s", what);
    if (rc == 0) return;
    CHECK_MSG(strstr(err.msg, a) != NULL, "%s: '%s' not named in: %s", what, a, err.msg);
    if (b) CHECK_MSG(strstr(err.msg, b) != NULL, "%s: '%s' not named in: %s", what, b, err.msg);
}

static void rename_value(IrValue *v, const char *name) {
    free(v->name);
    v->name = ir_strdup(name);
}

void test_verify(void) {
    IrError err = {{0}};
    {
        Small s = small();
        CHECK_MSG(ir_verify(s.g, 1, &err) == 0, "%s", err.msg);
        ir_graph_free(s.g);
    }
    { /* use before def: swap the two nodes */
        Small s = small();
        IrNode *t = s.g->nodes[0];
        s.g->nodes[0] = s.g->nodes[1];
        s.g->nodes[1] = t;
        expect_reject(s.g, 0, "use before def", "the_add", "'a'");
        expect_reject(s.g, 0, "use before def names the producer", "before it is defined",
                      "first_relu");
        ir_graph_free(s.g);
    }
    { /* a value nobody defines */
        Small s = small();
        int64_t d[2] = {2, 4};
        IrShape sh = ir_shape_make(2, d);
        IrValue *ghost = ir_value_new(s.g, "ghost", IR_F32, &sh, IR_VK_ACT);
        s.n2->in[1] = ghost;
        expect_reject(s.g, 0, "undefined value", "ghost", NULL);
        ir_graph_free(s.g);
    }
    { /* duplicate names */
        Small s = small();
        rename_value(s.b, "a");
        expect_reject(s.g, 0, "duplicate names", "duplicate value name 'a'", NULL);
        ir_graph_free(s.g);
    }
    { /* arity: Add with three inputs */
        Small s = small();
        IrValue *in3[3] = {s.a, s.c, s.c};
        IrValue *o = ir_value_new(s.g, "o3", IR_F32, NULL, IR_VK_ACT);
        ir_node_new(s.g, IR_OP_ADD, "three_way_add", 3, in3, 1, &o);
        expect_reject(s.g, 0, "arity", "three_way_add", "Add");
        ir_graph_free(s.g);
    }
    { /* arity: Split with no outputs */
        Small s = small();
        ir_node_new(s.g, IR_OP_SPLIT, "no_out_split", 1, &s.a, 0, NULL);
        expect_reject(s.g, 0, "output arity", "no_out_split", "Split");
        ir_graph_free(s.g);
    }
    { /* NULL input where the op requires one; NULL optional inputs are fine */
        Small s = small();
        IrValue *o = ir_value_new(s.g, "clipped", IR_F32, NULL, IR_VK_ACT);
        IrValue *in[3] = {s.a, NULL, s.c};
        ir_node_new(s.g, IR_OP_CLIP, "clip_ok", 3, in, 1, &o);
        CHECK_MSG(ir_verify(s.g, 0, &err) == 0, "%s", err.msg);
        IrValue *o2 = ir_value_new(s.g, "bad_clip_out", IR_F32, NULL, IR_VK_ACT);
        IrValue *in2[2] = {NULL, s.c};
        ir_node_new(s.g, IR_OP_CLIP, "clip_bad", 2, in2, 1, &o2);
        expect_reject(s.g, 0, "required input omitted", "clip_bad", "input 0");
        ir_graph_free(s.g);
    }
    { /* missing shape only matters with require_shapes */
        Small s = small();
        s.a->shape_known = 0;
        CHECK_MSG(ir_verify(s.g, 0, &err) == 0, "%s", err.msg);
        expect_reject(s.g, 1, "missing shape", "'a'", "first_relu");
        ir_graph_free(s.g);
    }
    { /* unbound symbolic dim */
        Small s = small();
        s.x->shape.dims[0] = -1;
        s.x->sym[0] = ir_strdup("batch");
        CHECK_MSG(ir_verify(s.g, 0, &err) == 0, "%s", err.msg);
        expect_reject(s.g, 1, "symbolic dim", "'x'", "batch");
        ir_graph_free(s.g);
    }
    { /* constant without data / with the wrong size */
        Small s = small();
        int64_t d = 3;
        IrShape sh = ir_shape_make(1, &d);
        IrValue *k = ir_value_new(s.g, "nodata", IR_F32, &sh, IR_VK_CONST);
        (void)k;
        expect_reject(s.g, 0, "const without data", "nodata", NULL);
        ir_graph_free(s.g);

        s = small();
        IrValue *w = ir_const_new(s.g, "short", IR_F32, &sh, NULL);
        w->nbytes = 8;
        expect_reject(s.g, 0, "const size", "short", "12");
        ir_graph_free(s.g);
    }
    { /* graph output never defined */
        Small s = small();
        IrValue *z = ir_value_new(s.g, "zombie_out", IR_F32, NULL, IR_VK_ACT);
        ir_graph_add_output(s.g, z);
        expect_reject(s.g, 0, "undefined output", "zombie_out", NULL);
        ir_graph_free(s.g);
    }
    { /* dead node left in the graph */
        Small s = small();
        s.n1->dead = 1;
        expect_reject(s.g, 0, "dead node", "first_relu", "dead");
        ir_graph_free(s.g);
    }
    { /* value produced twice; producer field inconsistent */
        Small s = small();
        IrValue *in[2] = {s.a, s.a};
        IrNode *n3 = ir_node_new(s.g, IR_OP_MUL, "second_producer", 2, in, 1, &s.b);
        (void)n3;
        expect_reject(s.g, 0, "produced twice", "'b'", "second_producer");
        ir_graph_free(s.g);

        s = small();
        s.a->producer = s.n2;
        expect_reject(s.g, 0, "producer mismatch", "'a'", "first_relu");
        ir_graph_free(s.g);
    }
    { /* graph inputs must be the input-kind values */
        Small s = small();
        s.x->kind = IR_VK_PARAM;
        expect_reject(s.g, 0, "input kind", "'x'", "param");
        ir_graph_free(s.g);
    }
    { /* unnamed nodes are still identified (by index and op) */
        Small s = small();
        free(s.n2->name);
        s.n2->name = ir_strdup("");
        s.n2->nin = 1;
        expect_reject(s.g, 0, "unnamed node arity", "node #1 (Add)", NULL);
        ir_graph_free(s.g);
    }
}
