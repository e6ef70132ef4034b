/* Tensor-parallel patterns (passes/tp_shard.h) against the unsharded
 * graph: forward outputs and every gradient.
 *
 * A transformer block (LayerNorm, attention with fused or separate QKV,
 * residual, LayerNorm, Gelu MLP; random shapes) is sharded for each rank of
 * TP in {2, 4}; autodiff runs on each rank's graph (seeded by the same dy,
 * as every TP rank holds the replicated output).  The ranks are simulated in
 * ONE host-executor run: their train graphs are merged into one graph in
 * which the k-th TpAllReduce of every rank becomes the sum of the ranks'
 * k-th inputs (the ranks' graphs have the same structure).  Oracle: the
 * unsharded block's hexec run.  Checked: y on every rank, dx on every rank,
 * replicated parameters' gradients on every rank, and sharded parameters'
 * gradients reassembled from the ranks' slices (TpParamShard).  A block
 * after the bf16-mixed autocast is sharded as the fp32 block is
 * (check_mixed: structure only; its numbers are stages_bf16_tp's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"
#include "hostexec.h"
#include "layers.h"
#include "lower_stage.h"
#include "memplan.h"
#include "loss.h"
#include "mixed_precision.h"
#include "modules.h"
#include "onnx_import.h"
#include "partition.h"
#include "pass.h"
#include "stage_abi.h"
#include "tp_shard.h"
#include "tp_sim.h"


typedef struct Dims {
    int64_t B, T, H, Dh, F;
    int fused, out_bias;
} Dims;

/* the block's forward graph; inputs x, dy (the seed); output y */
static IrGraph *block(const Dims *d) {
    IrGraph *g = ir_graph_new("block");
    int64_t D = d->H * d->Dh, x3[3] = {d->B, d->T, D};
    IrValue *x = tp_sim_input_x(g, d->B, d->T, D);
    int64_t dD[1] = {D}, dF[1] = {d->F}, d3D[1] = {3 * D};
    IrValue *in[4];
    in[0] = x, in[1] = tp_sim_param(g, "ln1.g", 1, dD, 1.0), in[2] = tp_sim_param(g, "ln1.b", 1, dD, 0.1);
    IrValue *ln1 = tp_sim_op1(g, IR_OP_LAYER_NORM, "ln1", 3, in);
    ir_node_set_int(ln1->producer, "axis", -1);
    ir_node_set_float(ln1->producer, "epsilon", 1e-5);
    IrValue *qkv[3];
    int64_t heads[4] = {d->B, d->T, d->H, d->Dh};
    static const char *const nm[3] = {"q", "k", "v"};
    if (d->fused) {
        int64_t w[2] = {D, 3 * D}, sz[3] = {D, D, D};
        in[0] = ln1, in[1] = tp_sim_param(g, "attn.wqkv", 2, w, 0.3), in[2] = tp_sim_param(g, "attn.bqkv", 1, d3D, 0.1);
        IrValue *f = tp_sim_op1(g, IR_OP_LINEAR, "attn.qkv", 3, in);
        for (int j = 0; j < 3; j++) qkv[j] = tp_sim_act(g, nm[j]);
        in[0] = f, in[1] = tp_sim_shape_const(g, "attn.sizes", 3, sz);
        IrNode *s = ir_node_new(g, IR_OP_SPLIT, "attn.split", 2, in, 3, qkv);
        ir_node_set_int(s, "axis", 2);
    } else {
        int64_t w[2] = {D, D};
        for (int j = 0; j < 3; j++) {
            char pn[32], bn[32];
            snprintf(pn, sizeof pn, "attn.w%s", nm[j]);
            snprintf(bn, sizeof bn, "attn.b%s", nm[j]);
            in[0] = ln1, in[1] = tp_sim_param(g, pn, 2, w, 0.3), in[2] = tp_sim_param(g, bn, 1, dD, 0.1);
            qkv[j] = tp_sim_op1(g, IR_OP_LINEAR, nm[j], 3, in);
        }
    }
    IrValue *ht[3];
    for (int j = 0; j < 3; j++) {
        char a[32];
        snprintf(a, sizeof a, "%s.heads", nm[j]);
        in[0] = qkv[j], in[1] = tp_sim_shape_const(g, a, 4, heads);
        IrValue *h = tp_sim_op1(g, IR_OP_RESHAPE, a, 2, in);
        snprintf(a, sizeof a, "%s.t", nm[j]);
        ht[j] = tp_sim_op1(g, IR_OP_TRANSPOSE, a, 1, &h);
        int64_t perm[4] = {0, 2, 1, 3};
        ir_node_set_ints(ht[j]->producer, "perm", 4, perm);
    }
    IrValue *at = tp_sim_op1(g, IR_OP_ATTENTION, "attn.core", 3, ht);
    ir_node_set_int(at->producer, "causal", 1);
    ir_node_set_float(at->producer, "scale", 1.0 / sqrt((double)d->Dh));
    IrValue *atT = tp_sim_op1(g, IR_OP_TRANSPOSE, "attn.merge_t", 1, &at);
    int64_t perm[4] = {0, 2, 1, 3};
    ir_node_set_ints(atT->producer, "perm", 4, perm);
    in[0] = atT, in[1] = tp_sim_shape_const(g, "attn.merge_shape", 3, x3);
    IrValue *am = tp_sim_op1(g, IR_OP_RESHAPE, "attn.merge", 2, in);
    int64_t wo[2] = {D, D};
    in[0] = am, in[1] = tp_sim_param(g, "attn.wo", 2, wo, 0.3), in[2] = d->out_bias ? tp_sim_param(g, "attn.bo", 1, dD, 0.1) : NULL;
    IrValue *o = tp_sim_op1(g, IR_OP_LINEAR, "attn.out", d->out_bias ? 3 : 2, in);
    in[0] = x, in[1] = o;
    IrValue *r1 = tp_sim_op1(g, IR_OP_ADD, "res1", 2, in);
    in[0] = r1, in[1] = tp_sim_param(g, "ln2.g", 1, dD, 1.0), in[2] = tp_sim_param(g, "ln2.b", 1, dD, 0.1);
    IrValue *ln2 = tp_sim_op1(g, IR_OP_LAYER_NORM, "ln2", 3, in);
    ir_node_set_int(ln2->producer, "axis", -1);
    ir_node_set_float(ln2->producer, "epsilon", 1e-5);
    int64_t w1[2] = {D, d->F}, w2[2] = {d->F, D};
    in[0] = ln2, in[1] = tp_sim_param(g, "mlp.w1", 2, w1, 0.3), in[2] = tp_sim_param(g, "mlp.b1", 1, dF, 0.1);
    IrValue *f = tp_sim_op1(g, IR_OP_LINEAR, "mlp.fc", 3, in);
    IrValue *ge = tp_sim_op1(g, IR_OP_GELU, "mlp.gelu", 1, &f);
    ir_node_set_string(ge->producer, "approximate", "tanh");
    in[0] = ge, in[1] = tp_sim_param(g, "mlp.w2", 2, w2, 0.3), in[2] = tp_sim_param(g, "mlp.b2", 1, dD, 0.1);
    IrValue *m = tp_sim_op1(g, IR_OP_LINEAR, "mlp.proj", 3, in);
    in[0] = r1, in[1] = m;
    IrValue *y = tp_sim_op1(g, IR_OP_ADD, "y", 2, in);
    return tp_sim_output(g, y, "block");
}

static double worst_all;

static void check_counts(const TpShardResult *r, int rank, const char *what, void *arg) {
    (void)arg;
    CHECK(r->attention == 1 && r->mlp == 1 && r->skipped == 0 && r->allreduce == 2 &&
              r->copies == 2,
          "%s: rank %d: %d attention %d mlp %d skipped %d all-reduces %d copies", what, rank,
          r->attention, r->mlp, r->skipped, r->allreduce, r->copies);
}

static void run_case(const Dims *d, int tp) {
    char what[160];
    snprintf(what, sizeof what, "%s QKV%s B=%lld T=%lld H=%lld Dh=%lld F=%lld tp=%d",
             d->fused ? "fused" : "separate", d->out_bias ? "" : " (no out bias)", (long long)d->B,
             (long long)d->T, (long long)d->H, (long long)d->Dh, (long long)d->F, tp);
    IrGraph *ref = block(d);
    double worst = tp_sim_run(ref, tp, what, check_counts, NULL);
    if (worst > worst_all) worst_all = worst;
    ir_graph_free(ref);
}

/* patterns tp does not divide stay replicated */
static void check_skip(void) {
    Dims d = {.B = 2, .T = 4, .H = 3, .Dh = 4, .F = 18, .fused = 1, .out_bias = 1};
    IrGraph *g = block(&d);
    TpShardResult r;
    IrError err = {{0}};
    CHECK(tp_shard(g, 4, 1, &r, &err) == 0, "skip case: %s", err.msg);
    CHECK(r.attention == 0 && r.mlp == 0 && r.skipped == 2 && r.nshards == 0,
          "H=3, F=18 under tp=4: %d attention %d mlp %d skipped %d shards", r.attention, r.mlp,
          r.skipped, r.nshards);
    tp_shard_free(&r);
    CHECK(tp_shard(g, 2, 2, &r, &err) == -1 && strstr(err.msg, "rank 2 of tp 2"), "%s", err.msg);
    ir_graph_free(g);
}

/* bf16-mixed (passes/mixed_precision.h): the block after the autocast is
 * sharded as the fp32 block is (tp_shard strips the Casts, shards, casts
 * again), so the rank's graph is the fp32 rank's graph with the autocast:
 * the same counts and shards, every Linear in bf16 reading a Cast of its
 * f32 parameter at the shard's shape, TpCopy and TpAllReduce in f32, and
 * stripping its Casts gives the fp32 rank's node count back */
static void check_mixed(void) {
    Dims d = {.B = 2, .T = 3, .H = 4, .Dh = 2, .F = 16, .fused = 1, .out_bias = 1};
    IrGraph *g32 = block(&d), *g16 = block(&d);
    PassContext ctx;
    pass_context_default(&ctx);
    IrError err = {{0}};
    CHECK(!pass_mixed_precision(g16, &ctx, &err), "mixed-precision: %s", err.msg);
    for (int rank = 0; rank < 2; rank++) {
        TpShardResult a, b;
        CHECK(!tp_shard(g32, 2, rank, &a, &err), "fp32 rank %d: %s", rank, err.msg);
        CHECK(!tp_shard(g16, 2, rank, &b, &err), "bf16 rank %d: %s", rank, err.msg);
        CHECK(a.attention == 1 && a.mlp == 1 && b.attention == a.attention && b.mlp == a.mlp &&
                  b.allreduce == a.allreduce && b.copies == a.copies && b.nshards == a.nshards &&
                  b.skipped == 0,
              "bf16 rank %d: %d attention %d mlp %d all-reduces %d copies %d shards %d skipped "
              "(fp32: %d %d %d %d %d)", rank, b.attention, b.mlp, b.allreduce, b.copies,
              b.nshards, b.skipped, a.attention, a.mlp, a.allreduce, a.copies, a.nshards);
        int lin = 0;
        for (int i = 0; i < b.graph->nnodes; i++) {
            const IrNode *n = b.graph->nodes[i];
            if (n->op == IR_OP_TP_COPY || n->op == IR_OP_TP_ALL_REDUCE)
                CHECK(n->in[0]->dtype == IR_F32 && n->out[0]->dtype == IR_F32,
                      "bf16 rank %d: %s '%s' not f32", rank, ir_op_name(n->op), n->name);
            if (n->op != IR_OP_LINEAR) continue;
            lin++;
            const IrNode *c = n->in[1]->producer;
            const IrValue *w = c && c->op == IR_OP_CAST ? c->in[0] : NULL;
            const IrValue *w32 = w ? ir_graph_find_value(a.graph, w->name) : NULL;
            CHECK(n->out[0]->dtype == IR_BF16 && n->in[1]->dtype == IR_BF16 && w &&
                      w->kind == IR_VK_PARAM && w32 && ir_shape_equal(&w->shape, &w32->shape) &&
                      ir_shape_equal(&n->in[1]->shape, &w32->shape),
                  "bf16 rank %d: Linear '%s' does not read a bf16 Cast of its shard", rank,
                  n->name);
        }
        CHECK(lin == 4, "bf16 rank %d: %d Linears", rank, lin);
        CHECK(mixed_precision_strip(b.graph) == 4 && b.graph->nnodes == a.graph->nnodes,
              "bf16 rank %d stripped: %d nodes, fp32 rank %d", rank, b.graph->nnodes,
              a.graph->nnodes);
        tp_shard_free(&a);
        tp_shard_free(&b);
    }
    printf("bf16-mixed block under tp 2: sharded as fp32 (4 Linears in bf16 on their shards, "
           "TpCopy / TpAllReduce f32)\n");
    ir_graph_free(g32);
    ir_graph_free(g16);
}

/* the example GPT (canonical IR from the ONNX importer): every block's
 * attention and MLP are found and sharded, and the ranks' merged forward
 * gives the unsharded logits */
static void gpt_counts(const TpShardResult *r, int rank, const char *what, void *arg) {
    int blocks = *(const int *)arg;
    CHECK(r->attention == blocks && r->mlp == blocks && r->skipped == 0,
          "%s rank %d: %d attention, %d mlp, %d skipped of %d blocks", what, rank, r->attention,
          r->mlp, r->skipped, blocks);
}

static void check_gpt(const char *path, int tp) {
    IrGraph *g = tp_sim_import(path, 8, 0, NULL);
    if (!g) return;
    int blocks = 0;
    for (int i = 0; i < g->nnodes; i++) blocks += g->nodes[i]->op == IR_OP_ATTENTION;
    char what[64];
    snprintf(what, sizeof what, "gpt tp %d", tp);
    TpShardResult r0;
    double worst = tp_sim_run_logits(g, tp, 200, what, gpt_counts, &blocks, &r0);
    if (worst >= 0)
        printf("gpt_tiny tp=%d: %d blocks, attention and MLP sharded in each (%d TpAllReduce, %d "
               "TpCopy per rank), logits of every rank == unsharded to %.2e\n", tp, blocks,
               r0.allreduce, r0.copies, worst);
    if (worst > worst_all) worst_all = worst;
    ir_graph_free(g);
}

/* a pipeline of two stages whose second has tp = 2 (partition.h: spec tp):
 * transfers pair with the unsharded first stage, and the TP ranks' train
 * graphs, merged, give the unsharded stage's loss, boundary gradient and
 * parameter gradients */
static void check_tp_stage(const char *path) {
    int L = 0;
    IrGraph *g = tp_sim_import(path, 8, TP_SIM_LAYERS | TP_SIM_LOSS, &L), *m = NULL;
    if (!g) return;
    IrError err = {{0}};
    PassContext ctx;
    pass_context_default(&ctx);
    enum { TP = 2 };
    int first[2] = {1, L / 2 + 1}, last[2] = {L / 2, L}, dp[2] = {1, 1};
    int tp1[2] = {1, 1}, tp2[2] = {1, TP};
    PartSpec sp = {.nstages = 2, .first_layer = first, .last_layer = last, .dp = dp, .rows = 2,
                   .tp = tp1};
    optim_opts_default(&sp.optim);
    PartStage s0, ref, st[TP];
    memset(st, 0, sizeof st);
    int ok = !partition_stage(g, &sp, 0, &s0, &err) && !partition_stage(g, &sp, 1, &ref, &err);
    CHECK(ok, "partition (tp 1): %s", err.msg);
    sp.tp = tp2;
    for (int r = 0; r < TP && ok; r++) {
        sp.tp_rank = r;
        ok = !partition_stage(g, &sp, 1, &st[r], &err);
        CHECK(ok, "partition stage 1 tp %d rank %d: %s", TP, r, err.msg);
    }
    IrTensor **ro = NULL, **mo2 = NULL;
    int nro = 0, nmo = 0;
    if (ok) {
        /* the TP stage's transfers: those of the unsharded stage, paired
         * with stage 0's (same ids and row sizes) */
        CHECK(st[0].nxfers == ref.nxfers, "xfers %d vs %d", st[0].nxfers, ref.nxfers);
        for (int k = 0; k < st[0].nxfers && k < ref.nxfers; k++) {
            const PartXfer *a = &st[0].xfers[k], *b = &ref.xfers[k];
            int paired = 0;
            for (int j = 0; j < s0.nxfers; j++)
                paired |= s0.xfers[j].id == a->id && s0.xfers[j].send != a->send &&
                          s0.xfers[j].row_bytes == a->row_bytes;
            CHECK(!strcmp(a->value, b->value) && a->id == b->id && a->send == b->send &&
                      a->row_bytes == b->row_bytes && paired,
                  "xfer %d: '%s' id %d vs '%s' id %d (paired with stage 0: %d)", k, a->value,
                  a->id, b->value, b->id, paired);
        }
        CHECK(st[0].ntp_shards > 0 && st[0].tp == TP, "stage 1 rank 0: %d shards",
              st[0].ntp_shards);
        IrGraph *rg[TP] = {st[0].train, st[1].train};
        ok = (m = tp_sim_merge_ranks(rg, TP, &err)) != NULL &&
             !pass_run_pipeline(m, "shape-infer", &ctx, &err);
        CHECK(ok, "merge: %s", err.msg);
    }
    if (ok) {
        IrTensor *in[16];
        int nin = ref.train->ninputs;
        for (int i = 0; i < nin; i++) {
            IrValue *v = ref.train->inputs[i];
            in[i] = ir_tensor_new(v->name, v->dtype, &v->shape);
            int64_t n = ir_shape_numel(&v->shape);
            for (int64_t k = 0; k < n; k++) {
                if (v->dtype == IR_F32) ((float *)in[i]->data)[k] = (float)(tp_sim_urand() * 2 - 1);
                else if (v->dtype == IR_I64) ((int64_t *)in[i]->data)[k] = tp_sim_irand(0, 60);
                else if (v->dtype == IR_I32) ((int32_t *)in[i]->data)[k] = (int32_t)tp_sim_irand(0, 60);
            }
        }
        ok = !hexec_run(ref.train, in, nin, &ro, &nro, &err) &&
             !hexec_run(m, in, nin, &mo2, &nmo, &err);
        CHECK(ok, "run: %s", err.msg);
        for (int i = 0; i < nin; i++) ir_tensor_free(in[i]);
    }
    if (ok) {
        TpParamShard *sh[TP] = {st[0].tp_shards, st[1].tp_shards};
        int nsh[TP] = {st[0].ntp_shards, st[1].ntp_shards}, checked = 0;
        double w = tp_sim_compare("gpt_tiny stage 1 of 2, tp 2", ro, nro, mo2, nmo, TP, sh, nsh, &checked);
        if (w > worst_all) worst_all = w;
        printf("gpt_tiny 2 stages, stage 1 (layers %d-%d) with tp 2: %d xfers paired with stage 0, "
               "%d sharded parameters; loss, boundary and parameter gradients of both TP ranks "
               "(%d tensors) == unsharded stage to %.2e\n", first[1], last[1], st[0].nxfers,
               st[0].ntp_shards, checked, w);
    }
    if (ok) { /* lowering: TpAllReduce -> hetrt_tp_allreduce, tp / tpshard config records */
        PartStage all[2] = {s0, st[0]};
        LeProgram p;
        char *cfg = NULL;
        MemPlan mp;
        if (tp_sim_lower(&st[0], all, 2, dp, L, &p, &cfg, &mp, &err)) {
            CHECK(0, "lower TP stage: %s", err.msg);
        } else {
            int nar = 0, calls = 0, nodes = 0;
            for (int i = 0; i < st[0].train->nnodes; i++)
                nar += st[0].train->nodes[i]->op == IR_OP_TP_ALL_REDUCE;
            for (int f = 0; f < p.nfuncs; f++)
                for (int c = 0; c < p.funcs[f].ncalls; c++) {
                    const LeCall *k = &p.funcs[f].calls[c];
                    calls += !strcmp(k->fn, "hetrt_tp_allreduce");
                    if (!strcmp(k->fn, "hetrt_node") && k->args[0].i == HETC_GRAPH_TRAIN &&
                        st[0].train->nodes[k->args[1].i]->op == IR_OP_TP_ALL_REDUCE)
                        nodes++;
                }
            int shards = 0;
            for (const char *q = cfg; (q = strstr(q, "\ntpshard ")); q++) shards++;
            CHECK(nar > 0 && calls == nar && nodes == 0, "%d TpAllReduce nodes, %d "
                  "hetrt_tp_allreduce calls, %d as hetrt_node", nar, calls, nodes);
            CHECK(strstr(cfg, "\ntp 1 2\n") && shards == st[0].ntp_shards,
                  "config: tp record / %d tpshard records of %d", shards, st[0].ntp_shards);
            printf("lowered: %d TpAllReduce nodes -> hetrt_tp_allreduce calls, config 'tp 1 2' + "
                   "%d tpshard records\n", nar, shards);
            lower_stage_free(&p);
            free(cfg);
            memplan_free(&mp);
        }
    }
    for (int i = 0; i < nro; i++) ir_tensor_free(ro[i]);
    for (int i = 0; i < nmo; i++) ir_tensor_free(mo2[i]);
    free(ro), free(mo2);
    if (m) ir_graph_free(m);
    partition_stage_free(&s0);
    partition_stage_free(&ref);
    for (int r = 0; r < TP; r++) partition_stage_free(&st[r]);
    ir_graph_free(g);
}

/* the example GPT: whole at tp 2 and 4, then as a stage */
static void check_model(const char *p) {
    check_gpt(p, 2);
    check_gpt(p, 4);
    check_tp_stage(p);
}

int main(int argc, char **argv) {
    for (int tpi = 0; tpi < 2; tpi++) {
        int tp = tpi ? 4 : 2;
        for (int c = 0; c < 3; c++) {
            Dims d = {.B = tp_sim_irand(1, 3), .T = tp_sim_irand(2, 7), .H = tp * tp_sim_irand(1, 2), .Dh = tp_sim_irand(2, 5),
                      .F = tp * tp_sim_irand(2, 6), .fused = c != 1, .out_bias = c != 2};
            run_case(&d, tp);
        }
    }
    check_skip();
    check_mixed();
    tp_sim_model(argc, argv, "examples/gpt_tiny.onnx", check_model);
    return tp_sim_finish(worst_all);
}
