/* The persistent host executor run (hostexec.h HxRun) against plain C
 * arithmetic written here, independent of the executor and the kernels:
 *  1. a step computes the graph (exp, add, mul, sub) exactly as the C
 *     reference, through hexec_run and through a run kept over 3 steps;
 *  2. without donation neither the fed input nor the parameter changes;
 *     with the parameter donated, the in-place Sub writes its result over
 *     the parameter's own data (the output IS that buffer) and the next
 *     step reads the updated parameter;
 *  3. in place only where allowed: a value read twice by one node (Mul(b, b))
 *     and a graph output are never taken;
 *  4. the arena of a 12-op chain over one shape is at most two buffers
 *     (first-fit reuse), where one buffer per value would be 12;
 *  5. after step 1 no step allocates (HxRunStats.allocs);
 *  6. a donated name that is not in the graph is an error naming it.
 * Usage: test_hxrun */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostexec.h"

static int fails;
#define CHECK(c, ...)                                                                        \
    do {                                                                                     \
        if (!(c)) {                                                                          \
            fails++;                                                                         \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                      \
            printf(__VA_ARGS__);                                                             \
            printf("\n");                                                                    \
        }                                                                                    \
    } while (0)

static const char *GRAPH =
    "graph t opset=17 {\n"
    "  input %x : f32[4]\n"
    "  param %p : f32[4] = dense[0.5, -1, 2, 0.25]\n"
    "  %a = Exp(%x) : f32[4]\n"
    "  %b = Add(%a, %p) : f32[4]\n"
    "  %c = Mul(%b, %b) : f32[4]\n"
    "  %q = Sub(%p, %c) : f32[4]\n"
    "  output %q\n"
    "  output %c\n"
    "}\n";

/* q = p - (exp(x) + p)^2, c = (exp(x) + p)^2 in float, as the kernels
 * round each op to f32 */
static void reference(const float *x, const float *p, float *q, float *c) {
    for (int i = 0; i < 4; i++) {
        float a = (float)exp((double)x[i]);
        float b = a + p[i];
        c[i] = b * b;
        q[i] = p[i] - c[i];
    }
}

static IrGraph *parse(const char *text) {
    IrError err = {{0}};
    IrGraph *g = ir_parse(text, "t.ir", &err);
    if (!g) {
        printf("FAIL parse: %s\n", err.msg);
        exit(1);
    }
    return g;
}

static void test_values(void) {
    IrGraph *g = parse(GRAPH);
    IrError err = {{0}};
    float x[4] = {0.1f, -0.5f, 1.0f, 0.0f}, x0[4];
    memcpy(x0, x, sizeof x);
    IrShape s4 = {.rank = 1, .dims = {4}};
    IrTensor tx = {.name = "x", .dtype = IR_F32, .shape = s4, .data = x, .nbytes = sizeof x};
    IrTensor *in[1] = {&tx};
    IrValue *pv = ir_graph_find_value(g, "p");
    float *p = (float *)ir_value_data(pv, &err), p0[4], q[4], c[4];
    memcpy(p0, p, sizeof p0);
    reference(x, p0, q, c);
    /* hexec_run: copies, nothing written over */
    IrTensor **outs = NULL;
    int nout = 0;
    CHECK(!hexec_run(g, in, 1, &outs, &nout, &err), "hexec_run: %s", err.msg);
    if (nout == 2) {
        CHECK(!memcmp(outs[0]->data, q, sizeof q), "hexec_run q differs from the reference");
        CHECK(!memcmp(outs[1]->data, c, sizeof c), "hexec_run c differs from the reference");
        for (int i = 0; i < nout; i++) ir_tensor_free(outs[i]);
    }
    free(outs);
    CHECK(!memcmp(p, p0, sizeof p0) && !memcmp(x, x0, sizeof x0), "hexec_run wrote an input");
    /* a kept run without donation: 3 steps, same results, inputs intact */
    HxRun *r = hexec_run_new(g, NULL, &err);
    CHECK(r, "hexec_run_new: %s", err.msg);
    for (int s = 0; r && s < 3; s++) {
        CHECK(!hexec_run_step(r, in, 1, &err), "step %d: %s", s, err.msg);
        CHECK(!memcmp(hexec_run_output(r, 0, NULL), q, sizeof q), "step %d: q differs", s);
        CHECK(!memcmp(hexec_run_output(r, 1, NULL), c, sizeof c), "step %d: c differs", s);
    }
    CHECK(!memcmp(p, p0, sizeof p0) && !memcmp(x, x0, sizeof x0), "a run without donation "
                                                                   "wrote an input");
    HxRunStats st;
    if (r) {
        hexec_run_stats(r, &st);
        /* a = Exp(x): x is the caller's, not taken; b = Add(a, p) takes a;
         * c = Mul(b, b) reads b twice; q = Sub(p, c): p not donated */
        CHECK(st.inplace == 1 && st.donated == 0, "in place %d (want 1), donated %d (want 0)",
              st.inplace, st.donated);
        CHECK(st.allocs == 1 && st.steps == 3, "%lld allocations in %lld steps (want 1 in 3)",
              (long long)st.allocs, (long long)st.steps);
    }
    hexec_run_free(r);
    /* p donated: q is written over p, and each step reads the updated p */
    const char *don[1] = {"p"};
    HxRunOpts o = {.donate = don, .ndonate = 1};
    r = hexec_run_new(g, &o, &err);
    CHECK(r, "hexec_run_new (donate p): %s", err.msg);
    float pr[4];
    memcpy(pr, p0, sizeof pr);
    for (int s = 0; r && s < 3; s++) {
        reference(x, pr, q, c);
        CHECK(!hexec_run_step(r, in, 1, &err), "donated step %d: %s", s, err.msg);
        const float *qo = hexec_run_output(r, 0, NULL);
        CHECK(qo == p, "donated step %d: q is not p's buffer", s);
        CHECK(!memcmp(p, q, sizeof q), "donated step %d: p is not p - c", s);
        CHECK(!memcmp(hexec_run_output(r, 1, NULL), c, sizeof c), "donated step %d: c differs", s);
        memcpy(pr, q, sizeof pr);
    }
    CHECK(!memcmp(x, x0, sizeof x0), "a run with p donated wrote x");
    if (r) {
        hexec_run_stats(r, &st);
        CHECK(st.inplace == 2 && st.donated == 1, "donate: in place %d (want 2), donated %d "
                                                  "(want 1)", st.inplace, st.donated);
        CHECK(st.allocs == 1, "donate: %lld allocations (want 1)", (long long)st.allocs);
    }
    hexec_run_free(r);
    /* a donated name that is not there */
    const char *bad[1] = {"nope"};
    HxRunOpts ob = {.donate = bad, .ndonate = 1};
    err.msg[0] = 0;
    r = hexec_run_new(g, &ob, &err);
    CHECK(!r && strstr(err.msg, "'nope'"), "donating 'nope': %s", r ? "accepted" : err.msg);
    hexec_run_free(r);
    ir_graph_free(g);
}

static void test_arena(void) {
    char text[4096];
    int n = snprintf(text, sizeof text, "graph chain opset=17 {\n  input %%v0 : f32[1024]\n");
    const char *ops[3] = {"Exp", "Neg", "Tanh"};
    for (int i = 1; i <= 12; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "  %%v%d = %s(%%v%d) : f32[1024]\n", i,
                      ops[i % 3], i - 1);
    snprintf(text + n, sizeof text - (size_t)n, "  output %%v12\n}\n");
    IrGraph *g = parse(text);
    IrError err = {{0}};
    HxRun *r = hexec_run_new(g, NULL, &err);
    CHECK(r, "chain: %s", err.msg);
    if (!r) return;
    float x[1024];
    for (int i = 0; i < 1024; i++) x[i] = (float)(i % 17) * 0.05f - 0.4f;
    IrShape s = {.rank = 1, .dims = {1024}};
    IrTensor t = {.name = "v0", .dtype = IR_F32, .shape = s, .data = x, .nbytes = sizeof x};
    IrTensor *in[1] = {&t};
    for (int k = 0; k < 2; k++) CHECK(!hexec_run_step(r, in, 1, &err), "chain: %s", err.msg);
    const float *y = hexec_run_output(r, 0, NULL);
    int bad = 0;
    for (int i = 0; i < 1024; i++) {
        float v = x[i];
        for (int j = 1; j <= 12; j++)
            v = j % 3 == 0 ? (float)exp((double)v) : j % 3 == 1 ? -v : (float)tanh((double)v);
        bad += fabsf(y[i] - v) > 1e-6f * (1 + fabsf(v));
    }
    CHECK(!bad, "chain: %d elements differ from the reference", bad);
    HxRunStats st;
    hexec_run_stats(r, &st);
    CHECK(st.arena_bytes <= 2 * 4096 && st.value_bytes == 12 * 4096,
          "chain: arena %lld B, outputs %lld B (want <= 8192, 49152)", (long long)st.arena_bytes,
          (long long)st.value_bytes);
    CHECK(st.allocs == 1, "chain: %lld allocations in 2 steps", (long long)st.allocs);
    hexec_run_free(r);
    ir_graph_free(g);
}

int main(void) {
    test_values();
    test_arena();
    if (!fails) printf("ok\n");
    return fails ? 1 : 0;
}
