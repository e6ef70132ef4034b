/* Test PartStages (stage_fixture.h). */
#include "stage_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"
#include "loss.h"
#include "onnx_import.h"
#include "optimizer.h"
#include "pass.h"

/* update graph of st's params (train_state.c build_update, without data) */
static int build_update(PartStage *st, int sgd, IrError *err) {
    IrGraph *u = st->update = ir_graph_new("update");
    for (int i = 0; i < st->nparams; i++) {
        IrValue *tp = ir_graph_find_value(st->train, st->params[i].name);
        ir_value_new(u, tp->name, IR_F32, &tp->shape, IR_VK_PARAM);
        char nm[600];
        snprintf(nm, sizeof nm, "grad/%s", tp->name);
        ir_graph_add_input(u, ir_value_new(u, nm, IR_F32, &tp->shape, IR_VK_INPUT));
    }
    OptimOpts o;
    optim_opts_default(&o);
    o.sgd = sgd;
    if (pass_optimizer_with(u, &o, err) || ir_verify(u, 1, err))
        return ir_error_prefix(err, "update graph: ");
    return 0;
}

/* every parameter with a gradient, layer 1 */
static void collect_params(PartStage *st) {
    IrGraph *g = st->train;
    st->params = calloc((size_t)g->nvalues + 1, sizeof *st->params);
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *p = g->values[i];
        if (p->kind != IR_VK_PARAM || !ad_param_grad(g, p)) continue;
        st->params[st->nparams++] = (PartParam){ir_strdup(p->name), 1, 0};
    }
}

int fixture_one_stage(PartStage *st, const char *onnx, int64_t batch, int64_t seq, int sgd,
                      IrError *err) {
    memset(st, 0, sizeof *st);
    HetcImportOptions io;
    hetc_import_options_default(&io);
    io.batch = batch, io.seq = seq;
    IrGraph *g = hetc_import_onnx(onnx, &io, err);
    if (!g) return -1;
    st->train = g;
    PassContext ctx;
    pass_context_default(&ctx);
    LossOpts lo;
    loss_opts_default(&lo);
    if (pass_run_pipeline(g, pass_default_pipeline(), &ctx, err) ||
        pass_run_pipeline(g, "tie-weights", &ctx, err) || pass_loss_with(g, &lo, err) ||
        pass_run_pipeline(g, "autodiff,shape-infer", &ctx, err))
        return -1;
    st->first_layer = st->last_layer = 1;
    st->dp = 1;
    st->local_rows = batch;
    st->data_input = ir_strdup(g->inputs[0]->name);
    st->reads_targets = 1;
    collect_params(st);
    return build_update(st, sgd, err);
}

static IrValue *param(IrGraph *g, const char *name, int rank, const int64_t *dims, float base) {
    IrShape s = ir_shape_make(rank, dims);
    int64_t n = ir_shape_numel(&s);
    float *d = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) d[i] = base + 0.01f * (float)(i % 7);
    IrValue *v = ir_value_new(g, name, IR_F32, &s, IR_VK_PARAM);
    ir_value_set_data(v, d, (size_t)n * sizeof(float));
    return v;
}

int fixture_two_stage(PartStage st[2], int64_t B, int64_t T, int sgd, IrError *err) {
    enum { V = 11, D = 8 };
    memset(st, 0, 2 * sizeof *st);
    PassContext ctx;
    pass_context_default(&ctx);
    int64_t bt[2] = {B, T}, btd[3] = {B, T, D};
    IrShape sbt = ir_shape_make(2, bt), sbtd = ir_shape_make(3, btd);
    int64_t row_bytes = T * D * 4;

    /* stage 0: ids -> Embedding -> LayerNorm -> n (sent) */
    IrGraph *g = st[0].train = ir_graph_new("s0");
    IrValue *ids = ir_value_new(g, "ids", IR_I64, &sbt, IR_VK_INPUT);
    ir_graph_add_input(g, ids);
    IrValue *emb = param(g, "emb", 2, (int64_t[]){V, D}, 0);
    IrValue *ln = param(g, "ln", 1, (int64_t[]){D}, 1);
    IrValue *h = ir_value_new(g, "h", IR_F32, NULL, IR_VK_ACT);
    IrValue *n = ir_value_new(g, "n", IR_F32, NULL, IR_VK_ACT);
    IrValue *in[3] = {emb, ids};
    ir_node_new(g, IR_OP_EMBEDDING, "e", 2, in, 1, &h);
    in[0] = h, in[1] = ln;
    ir_node_set_float(ir_node_new(g, IR_OP_LAYER_NORM, "l", 2, in, 1, &n), "epsilon", 1e-5);
    ir_graph_add_output(g, n);
    IrValue *bg = ir_value_new(g, "bgrad/n", IR_F32, &sbtd, IR_VK_INPUT);
    ir_graph_add_input(g, bg);
    AdSeed seed0 = {n, bg};
    if (pass_run_pipeline(g, "shape-infer", &ctx, err) ||
        autodiff_seeded(g, &seed0, 1, NULL, 0, NULL, err) ||
        pass_run_pipeline(g, "shape-infer", &ctx, err))
        return ir_error_prefix(err, "fixture stage 0: ");
    st[0].stage = 0;
    st[0].first_layer = st[0].last_layer = 1;
    st[0].dp = 1;
    st[0].local_rows = B;
    st[0].data_input = ir_strdup("ids");
    collect_params(&st[0]);
    st[0].xfers = calloc(2, sizeof *st[0].xfers);
    st[0].xfers[0] = (PartXfer){ir_strdup("n"), 1, 1, PX_ACT, 0, B, row_bytes};
    st[0].xfers[1] = (PartXfer){ir_strdup("bgrad/n"), 0, 1, PX_GRAD, 1, B, row_bytes};
    st[0].nxfers = 2;
    if (build_update(&st[0], sgd, err)) return -1;

    /* stage 1: n (received) -> Linear -> loss; bgrad/n sent back */
    g = st[1].train = ir_graph_new("s1");
    IrValue *rn = ir_value_new(g, "n", IR_F32, &sbtd, IR_VK_INPUT);
    ir_graph_add_input(g, rn);
    IrValue *w = param(g, "w", 2, (int64_t[]){D, V}, 0);
    IrValue *b = param(g, "b", 1, (int64_t[]){V}, 0);
    IrValue *lg = ir_value_new(g, "logits", IR_F32, NULL, IR_VK_ACT);
    in[0] = rn, in[1] = w, in[2] = b;
    ir_node_new(g, IR_OP_LINEAR, "fc", 3, in, 1, &lg);
    ir_graph_add_output(g, lg);
    LossOpts lo;
    loss_opts_default(&lo);
    if (pass_run_pipeline(g, "shape-infer", &ctx, err) || pass_loss_with(g, &lo, err) ||
        pass_run_pipeline(g, "shape-infer", &ctx, err))
        return ir_error_prefix(err, "fixture stage 1: ");
    AdSeed seed1 = {ir_graph_find_value(g, "loss"), NULL};
    IrValue *gn = NULL;
    if (autodiff_seeded(g, &seed1, 1, &rn, 1, &gn, err))
        return ir_error_prefix(err, "fixture stage 1: ");
    if (!gn) return ir_errorf(err, "fixture stage 1: no gradient reaches 'n'");
    IrValue *bo = ir_value_new(g, "bgrad/n", IR_F32, &gn->shape, IR_VK_GRAD);
    ir_node_new(g, IR_OP_IDENTITY, "bgrad_n", 1, &gn, 1, &bo)->phase = IR_PHASE_BWD;
    ir_graph_add_output(g, bo);
    if (pass_run_pipeline(g, "shape-infer", &ctx, err))
        return ir_error_prefix(err, "fixture stage 1: ");
    st[1].stage = 1;
    st[1].first_layer = st[1].last_layer = 2;
    st[1].dp = 1;
    st[1].local_rows = B;
    st[1].reads_targets = 1;
    collect_params(&st[1]);
    st[1].xfers = calloc(2, sizeof *st[1].xfers);
    st[1].xfers[0] = (PartXfer){ir_strdup("n"), 0, 0, PX_ACT, 0, B, row_bytes};
    st[1].xfers[1] = (PartXfer){ir_strdup("bgrad/n"), 1, 0, PX_GRAD, 1, B, row_bytes};
    st[1].nxfers = 2;
    return build_update(&st[1], sgd, err);
}

void fixture_free(PartStage *st) {
    if (st->train) ir_graph_free(st->train);
    if (st->update) ir_graph_free(st->update);
    for (int i = 0; i < st->nxfers; i++) free(st->xfers[i].value);
    for (int i = 0; i < st->nparams; i++) free(st->params[i].name);
    free(st->xfers);
    free(st->params);
    free(st->data_input);
    memset(st, 0, sizeof *st);
}
