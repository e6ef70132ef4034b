/* Unit tests of the pass manager, the shape-rule table, shape-infer error
 * messages and dce, on graphs built with the IR builder.  Oracles: the op
 * table itself (completeness), a brute-force liveness computation (dce),
 * the shapes the test builds (error messages). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pass.h"
#include "shape_rules.h"

static int fails = 0, checks = 0;
#define CHECK(c, ...)                                                   \
    do {                                                                \
        checks++;                                                       \
        if (!(c)) {                                                     \
            fails++;                                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                 \
            printf(__VA_ARGS__);                                        \
            printf("\n");                                               \
        }                                                               \
    } while (0)

static void test_tables(void) {
    for (int op = 0; op < IR_OP_COUNT; op++)
        CHECK(shape_rule_exists((IrOp)op), "op %s has no shape rule", ir_op_name((IrOp)op));
    const char *want[] = {"shape-infer", "const-fold", "dce", "canonicalize"};
    for (int i = 0; i < 4; i++) {
        const Pass *p = pass_find(want[i]);
        CHECK(p && p->run && p->summary && !strcmp(p->name, want[i]), "pass %s missing", want[i]);
    }
    CHECK(pass_count() >= 4, "pass_count %d", pass_count());
    for (int i = 0; i < pass_count(); i++)
        CHECK(pass_find(pass_at(i)->name) == pass_at(i), "pass_at(%d) not findable", i);
    CHECK(pass_at(pass_count()) == NULL, "pass_at past the end");
    /* every name in the default pipeline is a known pass */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", pass_default_pipeline());
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
        CHECK(pass_find(t) != NULL, "default pipeline names unknown pass '%s'", t);
}

static IrValue *input(IrGraph *g, const char *name, int rank, const int64_t *dims) {
    IrShape s = ir_shape_make(rank, dims);
    IrValue *v = ir_value_new(g, name, IR_F32, &s, IR_VK_INPUT);
    ir_graph_add_input(g, v);
    return v;
}
static IrValue *act(IrGraph *g, const char *name) {
    return ir_value_new(g, name, IR_UNDEF, NULL, IR_VK_ACT);
}

static void test_unknown_pass(void) {
    IrGraph *g = ir_graph_new("t");
    IrError err = {{0}};
    PassContext ctx;
    pass_context_default(&ctx);
    int rc = pass_run_pipeline(g, "dce,no-such-pass", &ctx, &err);
    CHECK(rc != 0, "unknown pass accepted");
    CHECK(strstr(err.msg, "no-such-pass") != NULL, "message lacks the name: %s", err.msg);
    for (int i = 0; i < pass_count(); i++)
        CHECK(strstr(err.msg, pass_at(i)->name) != NULL, "message lacks known pass %s: %s",
              pass_at(i)->name, err.msg);
    ir_graph_free(g);
}

static void test_matmul_error(void) {
    IrGraph *g = ir_graph_new("t");
    IrValue *a = input(g, "a", 3, (int64_t[]){2, 16, 64});
    IrValue *b = input(g, "b", 2, (int64_t[]){32, 64});
    IrValue *y = act(g, "y");
    ir_node_new(g, IR_OP_MATMUL, "/h.0/attn/MatMul", 2, (IrValue *[]){a, b}, 1, &y);
    ir_graph_add_output(g, y);
    IrError err = {{0}};
    PassContext ctx;
    pass_context_default(&ctx);
    int rc = pass_run_pipeline(g, "shape-infer", &ctx, &err);
    CHECK(rc != 0, "mismatched MatMul accepted");
    char sa[64], sb[64];
    ir_shape_str(&a->shape, sa, sizeof sa);
    ir_shape_str(&b->shape, sb, sizeof sb);
    CHECK(strstr(err.msg, "shape-infer") && strstr(err.msg, "/h.0/attn/MatMul") &&
              strstr(err.msg, "MatMul") && strstr(err.msg, sa) && strstr(err.msg, sb),
          "message does not name pass, node, op and shapes: %s", err.msg);
    ir_graph_free(g);
}

/* dce oracle: a node is live iff some output reaches a graph output. */
static void test_dce(void) {
    IrGraph *g = ir_graph_new("t");
    int64_t d[1] = {4};
    IrValue *x = input(g, "x", 1, d);
    /* x -> n0 -> n1 -> out ; x -> n2 (dead) -> n3 (dead) ; n1 -> n4 (dead) */
    IrValue *v[5];
    const char *names[5] = {"v0", "v1", "v2", "v3", "v4"};
    for (int i = 0; i < 5; i++) v[i] = act(g, names[i]);
    IrValue *src[5] = {x, v[0], x, v[2], v[1]};
    for (int i = 0; i < 5; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "n%d", i);
        ir_node_new(g, IR_OP_RELU, nm, 1, &src[i], 1, &v[i]);
    }
    ir_graph_add_output(g, v[1]);
    /* brute force: iterate "used by a live node or a graph output" to a fixpoint */
    int live[5] = {0};
    for (int it = 0; it < 5; it++)
        for (int i = 0; i < 5; i++) {
            if (v[i]->is_graph_output) live[i] = 1;
            for (int j = 0; j < 5; j++)
                if (live[j] && src[j] == v[i]) live[i] = 1;
        }
    int expect = 0;
    for (int i = 0; i < 5; i++) expect += live[i];
    IrError err = {{0}};
    PassContext ctx;
    pass_context_default(&ctx);
    int rc = pass_run_pipeline(g, "shape-infer,dce", &ctx, &err);
    CHECK(rc == 0, "pipeline failed: %s", err.msg);
    CHECK(g->nnodes == expect, "dce left %d nodes, oracle says %d", g->nnodes, expect);
    for (int i = 0; i < g->nnodes; i++) {
        int k = g->nodes[i]->name[1] - '0';
        CHECK(live[k], "dce kept dead node %s", g->nodes[i]->name);
    }
    ir_graph_free(g);
}

static void test_dump(void) {
    char dir[] = "/tmp/passes_dumpXXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    char sub[256];
    snprintf(sub, sizeof sub, "%s/ir/deep", dir);
    IrGraph *g = ir_graph_new("t");
    int64_t d[2] = {2, 3};
    IrValue *x = input(g, "x", 2, d);
    IrValue *y = act(g, "y");
    ir_node_new(g, IR_OP_RELU, "r", 1, &x, 1, &y);
    ir_graph_add_output(g, y);
    IrError err = {{0}};
    PassContext ctx;
    pass_context_default(&ctx);
    ctx.dump_dir = sub;
    ctx.dump_after = "dce,import,shape-infer";
    CHECK(pass_maybe_dump(g, "import", &ctx, &err) == 0, "import dump: %s", err.msg);
    CHECK(pass_run_pipeline(g, "shape-infer,const-fold,dce", &ctx, &err) == 0, "pipeline: %s",
          err.msg);
    const char *expect[] = {"00-import.ir", "01-shape-infer.ir", "03-dce.ir"};
    for (int i = 0; i < 3; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", sub, expect[i]);
        struct stat st;
        CHECK(stat(p, &st) == 0 && st.st_size > 0, "dump %s missing or empty", p);
        unlink(p);
    }
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/02-const-fold.ir", sub);
    CHECK(stat(p, &st) != 0, "const-fold was dumped though not asked for");
    CHECK(ctx.dump_index == 4, "dump_index %d after three passes from 1", ctx.dump_index);
    rmdir(sub);
    snprintf(p, sizeof p, "%s/ir", dir);
    rmdir(p);
    rmdir(dir);
    ir_graph_free(g);
}

int main(void) {
    test_tables();
    test_unknown_pass();
    test_matmul_error();
    test_dce();
    test_dump();
    printf("%d passed, %d failed\n", checks - fails, fails);
    return fails ? 1 : 0;
}
