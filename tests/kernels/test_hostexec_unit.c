/* Host executor unit tests: table completeness, dtype support reasons,
 * input-feeding errors, multi-node graphs (buffer reuse and freeing after
 * last use) against element-by-element libm results, and eval_node. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostexec.h"

static int failures;
#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
            failures++;                                                       \
        }                                                                     \
    } while (0)

static void test_table_complete(void) {
    for (int op = 0; op < IR_OP_COUNT; op++) {
        if (!hexec_op_supported((IrOp)op))
            fprintf(stderr, "no executor entry for %s\n", ir_op_name((IrOp)op));
        CHECK(hexec_op_supported((IrOp)op));
    }
    CHECK(!hexec_op_supported(IR_OP_COUNT));
}

static IrValue *val(IrGraph *g, const char *name, IrDType dt, int rank, const int64_t *dims,
                    IrValueKind k) {
    IrShape s = ir_shape_make(rank, dims);
    IrValue *v = ir_value_new(g, name, dt, &s, k);
    v->shape_known = 1;
    return v;
}

static void test_node_supported(void) {
    IrGraph *g = ir_graph_new("t");
    int64_t d[1] = {4};
    IrValue *a = val(g, "a", IR_F16, 1, d, IR_VK_INPUT), *b = val(g, "b", IR_F16, 1, d, IR_VK_INPUT);
    IrValue *y = val(g, "y", IR_F16, 1, d, IR_VK_ACT);
    IrNode *n = ir_node_new(g, IR_OP_ADD, "add", 2, (IrValue *[]){a, b}, 1, &y);
    char why[256] = "";
    CHECK(!hexec_node_supported(n, why, sizeof why));
    CHECK(strstr(why, "f16") != NULL);
    a->dtype = b->dtype = y->dtype = IR_F32;
    CHECK(hexec_node_supported(n, why, sizeof why));
    ir_graph_free(g);
}

/* x -> t1 = Exp(x); t2 = Neg(t1); y1 = Add(t1, t2 * x) ... checks that a
 * value read by two nodes survives its first reader and that a graph
 * output is never freed early even if read later. */
static void test_chain(void) {
    IrGraph *g = ir_graph_new("chain");
    int64_t d[2] = {3, 5};
    IrValue *x = val(g, "x", IR_F32, 2, d, IR_VK_INPUT);
    ir_graph_add_input(g, x);
    IrValue *t1 = val(g, "t1", IR_F32, 2, d, IR_VK_ACT), *t2 = val(g, "t2", IR_F32, 2, d, IR_VK_ACT);
    IrValue *t3 = val(g, "t3", IR_F32, 2, d, IR_VK_ACT), *y = val(g, "y", IR_F32, 2, d, IR_VK_ACT);
    IrValue *c = ir_const_scalar_f32(g, "c", 0.5f);
    ir_node_new(g, IR_OP_EXP, "e", 1, &x, 1, &t1);
    ir_node_new(g, IR_OP_NEG, "n", 1, &t1, 1, &t2);
    ir_node_new(g, IR_OP_MUL, "m", 2, (IrValue *[]){t2, x}, 1, &t3);
    ir_node_new(g, IR_OP_ADD, "a", 2, (IrValue *[]){t1, t3}, 1, &y);
    IrValue *z = val(g, "z", IR_F32, 2, d, IR_VK_ACT);
    ir_node_new(g, IR_OP_MUL, "s", 2, (IrValue *[]){y, c}, 1, &z);
    ir_graph_add_output(g, y);
    ir_graph_add_output(g, z);
    IrShape s = ir_shape_make(2, d);
    IrTensor *in = ir_tensor_new("x", IR_F32, &s);
    float *xv = in->data;
    for (int i = 0; i < 15; i++) xv[i] = (float)(i - 7) / 4.0f;
    IrTensor **out = NULL;
    int nout = 0;
    IrError err = {{0}};
    int rc = hexec_run(g, &in, 1, &out, &nout, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    CHECK(rc == 0 && nout == 2);
    if (!rc) {
        for (int i = 0; i < 15; i++) {
            float e = expf(xv[i]), ref = e + (-e) * xv[i];
            const float *yv = out[0]->data, *zv = out[1]->data;
            CHECK(fabsf(yv[i] - ref) <= 1e-6f * fabsf(ref) + 1e-6f);
            CHECK(fabsf(zv[i] - ref * 0.5f) <= 1e-6f * fabsf(ref) + 1e-6f);
        }
        CHECK(!strcmp(out[0]->name, "y") && !strcmp(out[1]->name, "z"));
        for (int i = 0; i < nout; i++) ir_tensor_free(out[i]);
        free(out);
    }
    /* feeding errors name the input */
    rc = hexec_run(g, NULL, 0, &out, &nout, &err);
    CHECK(rc != 0 && strstr(err.msg, "'x'") && strstr(err.msg, "not given"));
    in->dtype = IR_F64;
    CHECK(hexec_run(g, &in, 1, &out, &nout, &err) != 0 && strstr(err.msg, "dtype"));
    in->dtype = IR_F32;
    in->shape.dims[1] = 4;
    CHECK(hexec_run(g, &in, 1, &out, &nout, &err) != 0 && strstr(err.msg, "shape") &&
          strstr(err.msg, "'x'"));
    in->shape.dims[1] = 5;
    free(in->name);
    in->name = ir_strdup("nope");
    CHECK(hexec_run(g, &in, 1, &out, &nout, &err) != 0 && strstr(err.msg, "'nope'"));
    /* a non-static shape is reported, not guessed */
    free(in->name);
    in->name = ir_strdup("x");
    t2->shape.dims[0] = -1;
    CHECK(hexec_run(g, &in, 1, &out, &nout, &err) != 0 && strstr(err.msg, "t2"));
    ir_tensor_free(in);
    ir_graph_free(g);
}

static void test_eval_node(void) {
    IrGraph *g = ir_graph_new("fold");
    int64_t sh[3] = {2, 3, 4};
    IrValue *shape = ir_const_i64s(g, "shape", 3, sh);
    IrValue *y = val(g, "y", IR_F32, 3, sh, IR_VK_ACT);
    IrNode *n = ir_node_new(g, IR_OP_CONSTANT_OF_SHAPE, "cos", 1, &shape, 1, &y);
    ir_node_set_float(n, "value", 2.5);
    IrError err = {{0}};
    CHECK(hexec_eval_node(g, n, &err) == 0);
    CHECK(y->data && y->nbytes == 24 * sizeof(float));
    if (y->data)
        for (int i = 0; i < 24; i++) CHECK(((float *)y->data)[i] == 2.5f);
    /* an input without data is an error naming it */
    int64_t d1 = 4;
    IrValue *x = val(g, "xin", IR_F32, 1, &d1, IR_VK_INPUT), *o = val(g, "o", IR_F32, 1, &d1, IR_VK_ACT);
    IrNode *m = ir_node_new(g, IR_OP_RELU, "r", 1, &x, 1, &o);
    CHECK(hexec_eval_node(g, m, &err) != 0 && strstr(err.msg, "xin"));
    /* Shape reads only its input's shape: it folds even without data */
    int64_t d3[3] = {2, 7, 3}, three = 3;
    IrValue *act = val(g, "act", IR_F32, 3, d3, IR_VK_ACT);
    IrValue *shv = val(g, "sh", IR_I64, 1, &three, IR_VK_ACT);
    IrNode *sn = ir_node_new(g, IR_OP_SHAPE, "shape", 1, &act, 1, &shv);
    CHECK(hexec_eval_node(g, sn, &err) == 0);
    CHECK(shv->data != NULL);
    if (shv->data)
        for (int i = 0; i < 3; i++) CHECK(((int64_t *)shv->data)[i] == d3[i]);
    /* malformed nodes are errors, not crashes */
    IrValue *o2 = val(g, "o2", IR_F32, 1, &d1, IR_VK_ACT);
    IrValue *c1 = ir_const_scalar_f32(g, "c1", 1.0f);
    IrNode *bad = ir_node_new(g, IR_OP_ADD, "bad", 1, &c1, 1, &o2);
    char why[256];
    CHECK(!hexec_node_supported(bad, why, sizeof why) && strstr(why, "arity"));
    CHECK(hexec_eval_node(g, bad, &err) != 0 && strstr(err.msg, "bad"));
    ir_graph_free(g);
}

int main(void) {
    test_table_complete();
    test_node_supported();
    test_chain();
    test_eval_node();
    if (failures) fprintf(stderr, "%d checks failed\n", failures);
    else printf("test_hostexec_unit: ok\n");
    return failures ? 1 : 0;
}
