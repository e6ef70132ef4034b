/* Unit tests of the planner's IR side on synthetic graphs built with the IR
 * builder, where the construction is the oracle: op_cost against brute-force
 * multiply-add counts, modules against the blocks the test laid down (with
 * a prefix whose last op has the same signature as a block's last op, two
 * kinds of blocks, and a 96-block model), layers against parameter sizes and
 * the residual-stream cut. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "modules.h"
#include "op_cost.h"

static int fails;
#define CHECK(c, ...)                                                                    \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            fails++;                                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                         \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
        }                                                                                \
    } while (0)

static IrValue *val(IrGraph *g, IrValueKind k, int rank, const int64_t *dims)
{
    IrShape s = ir_shape_make(rank, dims);
    IrValue *v = ir_value_new(g, NULL, IR_F32, &s, k);
    v->shape_known = 1;
    return v;
}

static IrValue *node1(IrGraph *g, IrOp op, int nin, IrValue **in, IrValue *out)
{
    ir_node_new(g, op, "", nin, in, 1, &out);
    return out;
}

/* A block: x -> LayerNorm -> Linear(D,F) -> Gelu -> Linear(F,D) -> Add(x, .).
 * params: 2 D (norm) + D F + F + F D + D. */
static IrValue *block(IrGraph *g, IrValue *x, int64_t B, int64_t T, int64_t D, int64_t F,
                      int64_t *params)
{
    int64_t dD[1] = {D}, dF[1] = {F}, wDF[2] = {D, F}, wFD[2] = {F, D};
    int64_t aD[3] = {B, T, D}, aF[3] = {B, T, F};
    IrValue *in[3];
    in[0] = x, in[1] = val(g, IR_VK_PARAM, 1, dD), in[2] = val(g, IR_VK_PARAM, 1, dD);
    IrValue *h = node1(g, IR_OP_LAYER_NORM, 3, in, val(g, IR_VK_ACT, 3, aD));
    in[0] = h, in[1] = val(g, IR_VK_PARAM, 2, wDF), in[2] = val(g, IR_VK_PARAM, 1, dF);
    h = node1(g, IR_OP_LINEAR, 3, in, val(g, IR_VK_ACT, 3, aF));
    h = node1(g, IR_OP_GELU, 1, &h, val(g, IR_VK_ACT, 3, aF));
    in[0] = h, in[1] = val(g, IR_VK_PARAM, 2, wFD), in[2] = val(g, IR_VK_PARAM, 1, dD);
    h = node1(g, IR_OP_LINEAR, 3, in, val(g, IR_VK_ACT, 3, aD));
    in[0] = x, in[1] = h;
    *params += 2 * D + D * F + F + F * D + D;
    return node1(g, IR_OP_ADD, 2, in, val(g, IR_VK_ACT, 3, aD));
}

/* embedding-ish prefix ending in an Add of two [B,T,D] activations (the same
 * signature as a block's residual Add), nblocks of each hidden size in
 * hs[0..nh), a norm + head suffix. */
static IrGraph *model(int nh, const int64_t *hs, int nblocks, int64_t B, int64_t T, int64_t *params,
                      int *prefix_nodes)
{
    IrGraph *g = ir_graph_new("synthetic");
    int64_t D = hs[0], aD[3] = {B, T, D}, ids[2] = {B, T}, V = 64, tab[2] = {V, D};
    IrValue *x0 = val(g, IR_VK_INPUT, 2, ids);
    x0->dtype = IR_I64;
    ir_graph_add_input(g, x0);
    IrValue *in[3];
    in[0] = val(g, IR_VK_PARAM, 2, tab), in[1] = x0;
    IrValue *e1 = node1(g, IR_OP_EMBEDDING, 2, in, val(g, IR_VK_ACT, 3, aD));
    in[0] = val(g, IR_VK_PARAM, 2, tab), in[1] = x0;
    IrValue *e2 = node1(g, IR_OP_EMBEDDING, 2, in, val(g, IR_VK_ACT, 3, aD));
    in[0] = e1, in[1] = e2;
    IrValue *x = node1(g, IR_OP_ADD, 2, in, val(g, IR_VK_ACT, 3, aD));
    *params = 2 * V * D;
    *prefix_nodes = 3;
    for (int k = 0; k < nh; k++) {
        if (hs[k] != D) {   /* change of width between the kinds of blocks */
            int64_t w[2] = {D, hs[k]}, a2[3] = {B, T, hs[k]};
            in[0] = x, in[1] = val(g, IR_VK_PARAM, 2, w);
            x = node1(g, IR_OP_LINEAR, 2, in, val(g, IR_VK_ACT, 3, a2));
            *params += D * hs[k];
            D = hs[k];
        }
        for (int b = 0; b < nblocks; b++)
            x = block(g, x, B, T, D, 4 * D, params);
    }
    int64_t dD[1] = {D}, wh[2] = {D, V}, lg[3] = {B, T, V}, aD2[3] = {B, T, D};
    in[0] = x, in[1] = val(g, IR_VK_PARAM, 1, dD), in[2] = val(g, IR_VK_PARAM, 1, dD);
    x = node1(g, IR_OP_LAYER_NORM, 3, in, val(g, IR_VK_ACT, 3, aD2));
    in[0] = x, in[1] = val(g, IR_VK_PARAM, 2, wh);
    x = node1(g, IR_OP_LINEAR, 2, in, val(g, IR_VK_ACT, 3, lg));
    ir_graph_add_output(g, x);
    *params += 2 * D + D * V;
    return g;
}

static void test_op_cost(void)
{
    for (int op = 0; op < IR_OP_COUNT; op++)
        CHECK(op_cost_has_rule((IrOp)op), "op %s has no cost rule", ir_op_name((IrOp)op));
    /* batched MatMul [2,3,4,5] x [2,3,5,6]: count the multiply-adds */
    IrGraph *g = ir_graph_new("mm");
    int64_t a[4] = {2, 3, 4, 5}, b[4] = {2, 3, 5, 6}, c[4] = {2, 3, 4, 6};
    IrValue *in[2] = {val(g, IR_VK_INPUT, 4, a), val(g, IR_VK_INPUT, 4, b)};
    node1(g, IR_OP_MATMUL, 2, in, val(g, IR_VK_ACT, 4, c));
    long macs = 0;
    for (int p = 0; p < 2 * 3; p++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 6; j++)
                for (int k = 0; k < 5; k++)
                    macs++;
    OpCost oc;
    IrError err = {{0}};
    CHECK(op_cost_node(g->nodes[0], &oc, &err) == 0, "%s", err.msg);
    CHECK(oc.fwd_flops == 2.0 * macs, "MatMul fwd %g, want %ld", oc.fwd_flops, 2 * macs);
    CHECK(oc.bwd_flops == 4.0 * macs && oc.heavy, "MatMul bwd %g", oc.bwd_flops);
    double bytes = 4.0 * (2 * 3 * 4 * 5 + 2 * 3 * 5 * 6 + 2 * 3 * 4 * 6);
    CHECK(oc.bytes == bytes, "MatMul bytes %g, want %g", oc.bytes, bytes);
    /* unknown shapes are an error naming the node, not a crash */
    g->nodes[0]->in[0]->shape_known = 0;
    CHECK(op_cost_node(g->nodes[0], &oc, &err) == -1 && strstr(err.msg, "MatMul"), "%s", err.msg);
    ir_graph_free(g);
}

static void test_modules_layers(int nh, const int64_t *hs, int nblocks)
{
    const int64_t B = 2, T = 8;
    int64_t params = 0;
    int prefix = 0;
    IrGraph *g = model(nh, hs, nblocks, B, T, &params, &prefix);
    IrError err = {{0}};
    ModuleReport rep;
    CHECK(modules_detect(g, NULL, &rep, &err) == 0, "%s", err.msg);
    CHECK(rep.nmodules == nh * nblocks, "%d kinds x %d blocks: found %d modules", nh, nblocks,
          rep.nmodules);
    CHECK(rep.nkinds == nh, "found %d kinds, built %d", rep.nkinds, nh);
    /* block b of kind k starts at its LayerNorm: prefix + (k: width Linear) + 5 b */
    for (int m = 0; m < rep.nmodules && m < nh * nblocks; m++) {
        int k = m / nblocks, b = m % nblocks;
        int want = prefix + k * (5 * nblocks + 1) + 5 * b;
        if (k > 0 && hs[k] == hs[k - 1])
            want -= k;
        CHECK(rep.mods[m].first_node == want && rep.mods[m].nnodes == 5,
              "module %d at node %d (%d nodes), want %d (5)", m, rep.mods[m].first_node,
              rep.mods[m].nnodes, want);
    }
    CHECK(g->nodes[prefix - 1]->module_id == -1, "the prefix Add joined a module");
    CHECK(g->nodes[g->nnodes - 1]->module_id == -1 && g->nodes[g->nnodes - 2]->module_id == -1,
          "norm + head joined a module");

    LayerOptions lo;
    layer_options_default(&lo);
    PlanLayer *L = NULL;
    LayerSummary s;
    CHECK(layers_build(g, &lo, &L, &s, &err) == 0, "%s", err.msg);
    double psum = 0;
    for (int l = 0; l < s.L; l++)
        psum += L[l].param_bytes;
    CHECK(psum == 2.0 * (double)params, "param bytes %g, want %g", psum, 2.0 * params);
    CHECK(s.per_module == 4, "per module %d", s.per_module);
    /* layers are contiguous, cover every node once, and the layer ending a
     * block carries the residual stream B x T x D x 4 bytes */
    int next = 0;
    for (int l = 0; l < s.L; l++) {
        CHECK(L[l].first_node == next, "layer %d starts at %d, want %d", l + 1, L[l].first_node, next);
        for (int q = L[l].first_node; q <= L[l].last_node; q++)
            CHECK(g->nodes[q]->layer_id == l + 1, "node %d layer %d", q, g->nodes[q]->layer_id);
        next = L[l].last_node + 1;
        for (int m = 0; m < rep.nmodules; m++)
            if (L[l].last_node == rep.mods[m].last_node && m + 1 < rep.nmodules &&
                rep.mods[m + 1].first_node == L[l].last_node + 1) {
                double D = (double)hs[m / nblocks];
                CHECK(L[l].out_bytes == B * T * D * 4, "block cut %g bytes, want %g", L[l].out_bytes,
                      B * T * D * 4);
            }
    }
    CHECK(next == g->nnodes, "layers end at %d of %d nodes", next, g->nnodes);
    free(L);
    module_report_free(&rep);
    ir_graph_free(g);
}

int main(void)
{
    test_op_cost();
    int64_t one[1] = {16}, two[2] = {16, 32};
    test_modules_layers(1, one, 3);
    test_modules_layers(1, one, 96);
    test_modules_layers(2, two, 3);
    if (fails)
        fprintf(stderr, "%d failures\n", fails);
    else
        printf("test_plan_ir: ok\n");
    return fails != 0;
}
