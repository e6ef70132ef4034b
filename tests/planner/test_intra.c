/* Intra-op plans of the cost model (issue 9).
 *
 *  - brute force: on small instances, the plan stage() returns is the best
 *    of every enumerated (dp, tp, ZeRO, recompute) option under the rule of
 *    docs/PLANNER.md (fastest among those fitting K_sel microbatches, ...),
 *    re-derived here from the options; and the options are exactly the
 *    factorizations the rule allows (tp a power of two dividing m, <= max_tp).
 *  - scaling laws checked by hand: tp = 2 halves sharded parameters and their
 *    FLOPs, ZeRO-1/2 shard the optimizer (+ gradients) by dp, full recompute
 *    keeps only the boundary input and adds a forward to the backward.
 *  - monotonicity: more device memory never gives a slower chosen plan once
 *    one fits, and never turns a feasible candidate infeasible.
 *  - restrictions: max_tp = 1, zero 0, recompute none reproduce the model of
 *    before (bit for bit), and the DP with intra-op choices equals the brute
 *    force on the same oracle.
 *  - TP as executed: on a hand-built Embedding -> MLP (Linear, Gelu,
 *    Linear; ffn 12) -> LM head -> CrossEntropy graph over 4 layers, the
 *    IR reading shards the MLP only (tp_shard's pattern) and the cost model
 *    offers tp > 1 only to ranges holding the whole MLP with tp | 12; the
 *    vocabulary-parallel embedding and head + loss are read too (default)
 *    when untied and 64 | V (V = 128), not for V = 6 or a tied head.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brute.h"
#include "cost_model.h"
#include "hapt_dp.h"
#include "ir.h"

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { printf("FAIL %s:%d: ", __FILE__, __LINE__); \
    printf(__VA_ARGS__); printf("\n"); failures++; } } while (0)

static const char *YAML_FMT =
    "dtype: fp16\n"
    "meshes:\n"
    "  - {name: a, device: A100-80GB, nodes: 2, devices_per_node: 4,\n"
    "     intra_node: {bandwidth_gbps: 2400, latency_us: 5}, inter_node: {bandwidth_gbps: 200, latency_us: 10}}\n"
    "  - {name: b, device: V100-32GB, nodes: 1, devices_per_node: 2,\n"
    "     intra_node: {bandwidth_gbps: 400, latency_us: 8}}\n"
    "links:\n"
    "  - {between: [a, b], bandwidth_gbps: 100, latency_us: 20}\n";

enum { L = 6 };

static void make_layers(PlanLayer *ly, LayerIntra *li, double scale)
{
    for (int l = 0; l < L; l++) {
        double f = (l % 3 + 1) * 2e13 * scale;
        ly[l] = (PlanLayer){.fwd_flops = f, .bwd_flops = 2 * f, .param_bytes = (l % 3 + 1) * 2.5e9 * scale,
                            .act_bytes = (l % 3 == 2 ? 2 : 1) * 3e9 * scale, .out_bytes = 5e7 * scale,
                            .heavy_ops = 2, .sig = (uint64_t)(l % 3 + 1), .first_node = -1, .last_node = -1};
        li[l] = (LayerIntra){.tp_flops_frac = 0.95, .tp_param_frac = 0.99, .tp_act_frac = 0.6,
                             .ar_fwd = 1, .ar_bwd = 1, .ar_fwd_bytes = 5e7 * scale,
                             .ar_bwd_bytes = 5e7 * scale, .attn_bytes = (l % 3 == 1) ? 1e9 * scale : 0,
                             .attn_flops = 1e12 * scale,
                             /* two patterns every tp divides (tp offered everywhere) */
                             .tp_patterns = 2, .tp_divides = ~0u};
    }
}

static int same(const StageCost *x, const StageCost *y)
{
    return x->t_f == y->t_f && x->t_b == y->t_b && x->mem_static == y->mem_static &&
           x->mem_act == y->mem_act && x->dp == y->dp && x->tp == y->tp && x->zero == y->zero &&
           x->recompute == y->recompute && x->t_sync == y->t_sync && x->feasible == y->feasible;
}

static int fitsK(const StageCost *c, int K, double mem)
{
    return c->mem_static + K * c->mem_act <= mem;
}

/* The rule, written independently of cost_model.c: rank by (largest K' <= K
 * that fits, found by linear scan), then time, then t_sync, then simplicity. */
static int kscan(const StageCost *c, int K, double mem)
{
    int k = 0;
    for (int q = 1; q <= K; q++)
        if (fitsK(c, q, mem))
            k = q;
    return k;
}

static int rank_better(const StageCost *x, const StageCost *y, int K, double mem)
{
    int kx = kscan(x, K, mem), ky = kscan(y, K, mem);
    if (kx != ky)
        return kx > ky;
    if (x->t_f + x->t_b != y->t_f + y->t_b)
        return x->t_f + x->t_b < y->t_f + y->t_b;
    if (x->t_sync != y->t_sync)
        return x->t_sync < y->t_sync;
    if (x->zero != y->zero)
        return x->zero < y->zero;
    if (x->recompute != y->recompute)
        return x->recompute < y->recompute;
    return x->tp < y->tp;
}

static void test_brute(const ClusterSpec *c, double scale, int inflight, int max_tp)
{
    PlanLayer ly[L];
    LayerIntra li[L];
    make_layers(ly, li, scale);
    CostOptions o;
    cost_options_default(&o);
    o.imbalance_threshold = 0;
    o.max_tp = max_tp;
    o.zero_stage = -1;
    o.recompute = -1;
    o.inflight = inflight;
    o.intra = li;
    CostModel *cm = cost_model_new(c, ly, L, &o, NULL);
    int checked = 0, tp_used = 0, z_used = 0, rc_used = 0;
    for (int a = 0; a < c->nmeshes; a++) {
        Submesh subs[16];
        int ns = submesh_enumerate(c->meshes[a].nodes, c->meshes[a].per_node, subs, 16);
        for (int s = 0; s < ns; s++)
            for (int k = 1; k <= L; k++)
                for (int i = k; i <= L; i++) {
                    StageCost opts[64], got;
                    int K = 0;
                    int n = cost_model_intra_options(cm, k, i, a, subs[s], opts, 64, &K);
                    CHECK(n > 0 && n <= 64, "options enumerated (%d)", n);
                    CHECK(K == (inflight < L - i + 1 ? inflight : L - i + 1), "K_sel %d", K);
                    /* the factorizations allowed: tp power of two, tp | m, tp <= max_tp */
                    int want_tp = 0;
                    for (int tp = 1; tp <= max_tp && tp <= subs[s].m; tp *= 2)
                        want_tp += subs[s].m % tp == 0;
                    int seen_tp = 0;
                    for (int tp = 1; tp <= 64; tp *= 2) {
                        int any = 0;
                        for (int q = 0; q < n; q++)
                            any |= opts[q].tp == tp;
                        seen_tp += any;
                    }
                    CHECK(seen_tp == want_tp, "tp degrees %d, want %d", seen_tp, want_tp);
                    int best = 0;
                    for (int q = 0; q < n; q++) {
                        CHECK(opts[q].dp * opts[q].tp == subs[s].n * subs[s].m, "dp x tp = devices");
                        if (rank_better(&opts[q], &opts[best], K, c->meshes[a].dev.mem_bytes))
                            best = q;
                    }
                    cost_model_stage(cm, k, i, a, subs[s], &got);
                    CHECK(same(&got, &opts[best]),
                          "stage(%d..%d, mesh %d, (%d,%d)) is the best option: got dp%d tp%d z%d rc%d "
                          "t %g, best dp%d tp%d z%d rc%d t %g", k, i, a, subs[s].n, subs[s].m, got.dp,
                          got.tp, got.zero, got.recompute, got.t_f + got.t_b, opts[best].dp,
                          opts[best].tp, opts[best].zero, opts[best].recompute,
                          opts[best].t_f + opts[best].t_b);
                    CHECK(got.feasible == fitsK(&got, 1, c->meshes[a].dev.mem_bytes), "feasible = fits K=1");
                    tp_used += got.tp > 1;
                    z_used += got.zero > 0;
                    rc_used += got.recompute > 0;
                    checked++;
                }
    }
    printf("brute (scale %g, inflight %d, max_tp %d): %d candidates; chosen tp>1 %d, ZeRO %d, recompute %d\n",
           scale, inflight, max_tp, checked, tp_used, z_used, rc_used);
    cost_model_free(cm);
}

/* Scaling laws of the options, by hand from the formulas of docs/PLANNER.md. */
static void test_laws(const ClusterSpec *c)
{
    PlanLayer ly[L];
    LayerIntra li[L];
    make_layers(ly, li, 1);
    for (int l = 0; l < L; l++) { /* fully sharded, no collectives: exact halving */
        li[l].tp_flops_frac = li[l].tp_param_frac = li[l].tp_act_frac = 1;
        li[l].ar_fwd = li[l].ar_bwd = 0;
        li[l].ar_fwd_bytes = li[l].ar_bwd_bytes = 0;
    }
    CostOptions o;
    cost_options_default(&o);
    o.imbalance_threshold = 0;
    o.max_tp = 8;
    o.zero_stage = -1;
    o.recompute = -1;
    o.intra = li;
    CostModel *cm = cost_model_new(c, ly, L, &o, NULL);
    StageCost opts[64];
    int n = cost_model_intra_options(cm, 2, 4, 0, (Submesh){1, 4}, opts, 64, NULL);
    const StageCost *base = NULL, *tp2 = NULL, *z1 = NULL, *z2 = NULL, *full = NULL, *sel = NULL;
    for (int q = 0; q < n; q++) {
        const StageCost *x = &opts[q];
        if (x->tp == 1 && x->zero == 0 && x->recompute == 0) base = x;
        if (x->tp == 2 && x->zero == 0 && x->recompute == 0) tp2 = x;
        if (x->tp == 1 && x->zero == 1 && x->recompute == 0) z1 = x;
        if (x->tp == 1 && x->zero == 2 && x->recompute == 0) z2 = x;
        if (x->tp == 1 && x->zero == 0 && x->recompute == RECOMPUTE_FULL) full = x;
        if (x->tp == 1 && x->zero == 0 && x->recompute == RECOMPUTE_SELECTIVE) sel = x;
    }
    CHECK(base && tp2 && z1 && z2 && full && sel, "options present");
    if (!(base && tp2 && z1 && z2 && full && sel)) {
        cost_model_free(cm);
        return;
    }
    double reserve = o.runtime_reserve_bytes, P = 0, act = 0, attn = 0;
    for (int l = 2; l <= 4; l++) {
        P += ly[l - 1].param_bytes / 2;   /* parameters (bf16) */
        act += ly[l - 1].act_bytes;
        attn += li[l - 1].attn_bytes;
    }
    /* dp 4, tp 1: 2 + 2 + 4 + 8 B per parameter; dp 2 x tp 2: the same per shard */
    CHECK(fabs(base->mem_static - reserve - 16 * P) < 1e-3 * P, "ZeRO 0: 16 B/param");
    CHECK(fabs(tp2->mem_static - reserve - 16 * P / 2) < 1e-3 * P, "tp 2: half the parameters");
    CHECK(fabs(z1->mem_static - reserve - (4 + 12.0 / 4) * P) < 1e-3 * P, "ZeRO-1: (4 + 12/dp) B");
    CHECK(fabs(z2->mem_static - reserve - (2 + 14.0 / 4) * P) < 1e-3 * P, "ZeRO-2: (2 + 14/dp) B");
    CHECK(fabs(base->mem_act - act / 4) < 1e-6 * act, "activations / dp");
    CHECK(fabs(tp2->mem_act - act / 4) < 1e-6 * act, "activations / (dp tp) when all sharded");
    CHECK(fabs(full->mem_act - ly[0].out_bytes / 4) < 1, "full recompute keeps the boundary input");
    CHECK(fabs(full->t_b - (base->t_b + base->t_f)) < 1e-12, "full recompute: backward + forward");
    CHECK(fabs(full->mem_static - base->mem_static - act / 4) < 1e-3 * act,
          "full recompute: one microbatch's activations while recomputing");
    CHECK(fabs(sel->mem_act - (act - attn) / 4) < 1e-6 * act, "selective drops attention internals");
    CHECK(sel->t_b > base->t_b && sel->t_b < full->t_b, "selective: between none and full");
    CHECK(z1->t_sync == base->t_sync, "ZeRO-1: RS + AG = all-reduce volume");
    /* ZeRO-2 reduce-scatters every microbatch's gradients in its backward:
     * half the all-reduce moves into t_b, the all-gather stays in t_sync */
    CHECK(fabs(z2->t_sync - base->t_sync / 2) < 1e-12 * base->t_sync, "ZeRO-2: t_sync = AG");
    CHECK(fabs(z2->t_b - base->t_b - base->t_sync / 2) < 1e-12 * (base->t_b + base->t_sync),
          "ZeRO-2: t_b + one RS");
    CHECK(base->t_f + base->t_b == z1->t_f + z1->t_b, "ZeRO-1 does not change t_f + t_b");
    /* compute-bound layers: tp 2 halves the time of dp 2 x tp 2 vs dp 4 x tp 1: equal */
    CHECK(fabs((tp2->t_f - base->t_f) / base->t_f) < 1e-9, "dp x tp = 4 both: same FLOPs per device");
    cost_model_free(cm);
}

/* More memory never gives a slower chosen plan once one fits K_sel, and
 * never turns a feasible candidate infeasible. */
static void test_monotone(ClusterSpec *c)
{
    PlanLayer ly[L];
    LayerIntra li[L];
    make_layers(ly, li, 2);
    double mem0 = c->meshes[0].dev.mem_bytes;
    int checks = 0;
    for (int inflight = 1; inflight <= 4; inflight *= 2) {
        StageCost prev[L + 1][L + 1];
        int have = 0;
        for (double f = 0.25; f <= 4.01; f *= 1.25) {
            c->meshes[0].dev.mem_bytes = mem0 * f;
            CostOptions o;
            cost_options_default(&o);
            o.imbalance_threshold = 0;
            o.max_tp = 4;
            o.zero_stage = -1;
            o.recompute = -1;
            o.inflight = inflight;
            o.intra = li;
            CostModel *cm = cost_model_new(c, ly, L, &o, NULL);
            for (int k = 1; k <= L; k++)
                for (int i = k; i <= L; i++) {
                    StageCost s;
                    cost_model_stage(cm, k, i, 0, (Submesh){1, 4}, &s);
                    int K = inflight < L - i + 1 ? inflight : L - i + 1;
                    if (have) {
                        const StageCost *p = &prev[k][i];
                        CHECK(!p->feasible || s.feasible, "more memory kept %d..%d feasible", k, i);
                        if (fitsK(p, K, mem0 * f / 1.25)) {
                            CHECK(s.t_f + s.t_b <= p->t_f + p->t_b,
                                  "more memory, %d..%d: %g s after %g s", k, i, s.t_f + s.t_b,
                                  p->t_f + p->t_b);
                            checks++;
                        }
                    }
                    prev[k][i] = s;
                }
            have = 1;
            cost_model_free(cm);
        }
    }
    c->meshes[0].dev.mem_bytes = mem0;
    CHECK(checks > 0, "monotonicity checked");
    printf("monotone: %d checks\n", checks);
}

/* Restricted to no intra-op choice: bit for bit the model of before; and the
 * DP equals the brute force on the oracle with intra-op choices. */
static void test_restricted_and_dp(const ClusterSpec *c)
{
    PlanLayer ly[L];
    LayerIntra li[L];
    make_layers(ly, li, 1);
    CostOptions o0, o1;
    cost_options_default(&o0);
    o0.imbalance_threshold = 0;
    o1 = o0;
    o1.intra = li;  /* with the IR reading but max_tp 1, zero 0, none: unchanged */
    CostModel *a = cost_model_new(c, ly, L, &o0, NULL), *b = cost_model_new(c, ly, L, &o1, NULL);
    for (int k = 1; k <= L; k++)
        for (int i = k; i <= L; i++) {
            StageCost x, y;
            cost_model_stage(a, k, i, 0, (Submesh){2, 4}, &x);
            cost_model_stage(b, k, i, 0, (Submesh){2, 4}, &y);
            CHECK(same(&x, &y) && x.tp == 1 && x.zero == 0 && x.recompute == 0,
                  "restricted: same stage cost %d..%d", k, i);
        }
    cost_model_free(a);
    cost_model_free(b);

    /* DP == brute force with intra-op choices in the oracle */
    make_layers(ly, li, 2);  /* memory binds: choices matter */
    o1.max_tp = 4;
    o1.zero_stage = -1;
    o1.recompute = -1;
    o1.inflight = 2;
    CostModel *cm = cost_model_new(c, ly, L, &o1, NULL);
    CostOracle orc = cost_model_oracle(cm);
    DpOptions dopt;
    dp_options_default(&dopt);
    dopt.microbatches = 8;
    Plan pd, pb;
    IrError e1 = {{0}}, e2 = {{0}};
    memset(&pd, 0, sizeof pd);
    memset(&pb, 0, sizeof pb);
    int r1 = hapt_dp_plan(c, L, &orc, &dopt, &pd, NULL, &e1);
    int r2 = brute_plan(c, L, &orc, &dopt, &pb, NULL, &e2);
    CHECK(r1 == r2, "DP and brute agree on feasibility (%s / %s)", e1.msg, e2.msg);
    CHECK(r1 == 0, "a plan exists with intra-op choices (%s)", e1.msg);
    if (!r1 && !r2) {
        CHECK(fabs(pd.objective - pb.objective) <= 1e-9 * pb.objective, "DP %g == brute %g",
              pd.objective, pb.objective);
        int intra = 0;
        for (int s = 0; s < pd.nstages; s++) {
            StageCost sc;
            cost_model_stage(cm, pd.stages[s].first_layer, pd.stages[s].last_layer, pd.stages[s].mesh,
                             pd.stages[s].sub, &sc);
            CHECK(pd.stages[s].tp == sc.tp && pd.stages[s].zero == sc.zero &&
                  pd.stages[s].recompute == sc.recompute, "plan stage %d carries the intra-op plan", s);
            CHECK(pd.stages[s].mem_pred <= c->meshes[pd.stages[s].mesh].dev.mem_bytes,
                  "stage %d fits memory", s);
            intra += sc.tp > 1 || sc.zero || sc.recompute;
        }
        printf("dp == brute: objective %g, %d stages, %d with intra-op choices\n", pd.objective,
               pd.nstages, intra);
    }
    plan_free(&pd);
    plan_free(&pb);
    cost_model_free(cm);
}

static IrValue *val(IrGraph *g, const char *name, IrDType dt, int rank, int64_t d0, int64_t d1,
                    int64_t d2, IrValueKind kind)
{
    int64_t d[3] = {d0, d1, d2};
    IrShape sh = ir_shape_make(rank, d);
    return ir_value_new(g, name, dt, &sh, kind);
}

static IrNode *node(IrGraph *g, IrOp op, const char *name, int layer, int nin, IrValue **in,
                    IrValue *out)
{
    IrNode *n = ir_node_new(g, op, name, nin, in, 1, &out);
    n->layer_id = layer;
    return n;
}

/* the tps cost_model_intra_options offers layers k..i on 1 x 4 devices, as a bit set */
static unsigned offered(CostModel *cm, int k, int i)
{
    StageCost o[64];
    int n = cost_model_intra_options(cm, k, i, 0, (Submesh){1, 4}, o, 64, NULL);
    unsigned bits = 0;
    for (int q = 0; q < n && q < 64; q++)
        bits |= 1u << o[q].tp;
    return bits;
}

/* vocab V; tied: the head reads Transpose(wte) (tie-weights' form).  The
 * vocabulary-parallel embedding and head + loss are costed (by default:
 * tp_shard_vocab.c shards them in the stage binaries) when untied and
 * 64 | V (every tp the reading checks divides it); otherwise replicated
 * and the MLP alone decides the offered tps. */
static void test_executed_tp(const ClusterSpec *c, int64_t V, int tied)
{
    enum { B = 2, S = 4, D = 8, F = 12, NL = 4 };
    IrGraph *g = ir_graph_new("mlp");
    IrValue *ids = val(g, "ids", IR_I64, 2, B, S, 0, IR_VK_INPUT);
    IrValue *lab = val(g, "labels", IR_I64, 2, B, S, 0, IR_VK_INPUT);
    IrValue *emb = val(g, "wte", IR_F32, 2, V, D, 0, IR_VK_PARAM);
    IrValue *w1 = val(g, "fc.w", IR_F32, 2, D, F, 0, IR_VK_PARAM);
    IrValue *b1 = val(g, "fc.b", IR_F32, 1, F, 0, 0, IR_VK_PARAM);
    IrValue *w2 = val(g, "proj.w", IR_F32, 2, F, D, 0, IR_VK_PARAM);
    IrValue *b2 = val(g, "proj.b", IR_F32, 1, D, 0, 0, IR_VK_PARAM);
    IrValue *wh = tied ? val(g, "head.w", IR_F32, 2, D, V, 0, IR_VK_ACT)
                       : val(g, "head.w", IR_F32, 2, D, V, 0, IR_VK_PARAM);
    IrValue *x = val(g, "x", IR_F32, 3, B, S, D, IR_VK_ACT);
    IrValue *a = val(g, "a", IR_F32, 3, B, S, F, IR_VK_ACT);
    IrValue *h = val(g, "h", IR_F32, 3, B, S, F, IR_VK_ACT);
    IrValue *y = val(g, "y", IR_F32, 3, B, S, D, IR_VK_ACT);
    IrValue *lg = val(g, "logits", IR_F32, 3, B, S, V, IR_VK_ACT);
    IrValue *loss = val(g, "loss", IR_F32, 0, 0, 0, 0, IR_VK_ACT);
    ir_graph_add_input(g, ids);
    ir_graph_add_input(g, lab);
    if (tied) {
        IrNode *t = node(g, IR_OP_TRANSPOSE, "tie/transpose", 0, 1, (IrValue *[]){emb}, wh);
        ir_node_set_ints(t, "perm", 2, (const int64_t[]){1, 0});
    }
    node(g, IR_OP_EMBEDDING, "emb", 1, 2, (IrValue *[]){emb, ids}, x);
    node(g, IR_OP_LINEAR, "fc", 2, 3, (IrValue *[]){x, w1, b1}, a);
    node(g, IR_OP_GELU, "gelu", 2, 1, (IrValue *[]){a}, h);
    node(g, IR_OP_LINEAR, "proj", 3, 3, (IrValue *[]){h, w2, b2}, y);
    node(g, IR_OP_LINEAR, "head", 4, 2, (IrValue *[]){y, wh}, lg);
    node(g, IR_OP_CROSS_ENTROPY, "ce", 4, 2, (IrValue *[]){lg, lab}, loss);
    ir_graph_add_output(g, loss);

    const double tok = B * S, lin1 = 2 * tok * D * F, lin2 = 2 * tok * F * D, linh = 2 * tok * D * V;
    PlanLayer ly[NL];
    const double fwd[NL] = {tok * D, lin1 + 8 * tok * F, lin2, linh + 4 * tok * V};
    const double par[NL] = {V * D, D * F + F, F * D + D, tied ? 0 : D * V};
    for (int l = 0; l < NL; l++)
        ly[l] = (PlanLayer){.fwd_flops = fwd[l], .bwd_flops = 2 * fwd[l], .param_bytes = 2 * par[l],
                            .act_bytes = 4 * tok * D, .out_bytes = 4 * tok * D, .heavy_ops = 1,
                            .sig = (uint64_t)(l + 1), .first_node = -1, .last_node = -1};
    LayerIntra li[NL], lv[NL];
    IrError err = {{0}};
    char what[64];
    snprintf(what, sizeof what, "V %lld%s", (long long)V, tied ? " tied" : "");
    /* lv: the default reading; li: without vocabulary parallelism */
    CHECK(layer_intra_from_ir(g, ly, NL, lv, &err) == 0, "layer_intra_from_ir: %s", err.msg);
    CHECK(layer_intra_from_ir_opts(g, ly, NL, 0, li, &err) == 0, "no vocab_parallel: %s", err.msg);
    const int vocab = !tied && V % 64 == 0;
    /* Megatron MLP over layers 2-3: column fc (its input's gradient all-reduced), row proj
     * (its output all-reduced forward; its bias replicated) */
    CHECK(li[1].tp_patterns == 0 && li[2].tp_patterns == 1, "one pattern, counted at proj");
    CHECK(li[1].ar_bwd == 1 && li[1].ar_bwd_bytes == 4 * tok * D && li[1].ar_fwd == 0, "fc: bwd AR");
    CHECK(li[2].ar_fwd == 1 && li[2].ar_fwd_bytes == 4 * tok * D && li[2].ar_bwd == 0, "proj: fwd AR");
    CHECK(li[1].tp_param_frac == 1 && fabs(li[2].tp_param_frac - (double)(F * D) / (F * D + D)) < 1e-12,
          "sharded params: fc all, proj its weight (%g, %g)", li[1].tp_param_frac, li[2].tp_param_frac);
    CHECK(fabs(li[1].tp_flops_frac - lin1 / fwd[1]) < 1e-12 && li[2].tp_flops_frac == 1,
          "sharded FLOPs (%g %g)", li[1].tp_flops_frac, li[2].tp_flops_frac);
    CHECK(li[1].tp_act_frac == 1 && li[2].tp_act_frac == 0, "a, h sharded; y replicated");
    CHECK(li[1].tp_span_after == 1 && li[2].tp_span_before == 1 && li[1].tp_span_before == 0 &&
          li[2].tp_span_after == 0, "the MLP spans layers 2-3");
    CHECK((li[2].tp_divides & 0xf) == 0x7, "tp 1, 2, 4 divide ffn 12, 8 does not (%#x)",
          li[2].tp_divides);
    for (int l = 0; l < NL; l += 3) /* embedding, head + loss: replicated */
        CHECK(li[l].tp_patterns == 0 && li[l].ar_fwd == 0 && li[l].ar_bwd == 0 &&
                  li[l].tp_flops_frac == 0 && li[l].tp_param_frac == 0 && li[l].tp_act_frac == 0,
              "%s, no vocab_parallel: layer %d replicated", what, l + 1);
    for (int l = 0; l < NL; l++) /* the MLP layers read the same either way */
        CHECK(!memcmp(&li[l], &lv[l], sizeof li[l]) || l == 0 || l == 3,
              "%s: layer %d differs with vocab_parallel", what, l + 1);
    if (vocab) {
        /* the embedding (table split, fwd AR of its output), the head (weight split,
         * bwd AR of y) and the loss's row max (4 bytes a row) and stats (8) */
        CHECK(lv[0].tp_patterns == 1 && lv[0].ar_fwd == 1 && lv[0].ar_fwd_bytes == 4 * tok * D &&
                  lv[0].ar_bwd == 0 && lv[0].tp_param_frac == 1 && lv[0].tp_divides == 0x7f &&
                  lv[0].tp_span_before == 0 && lv[0].tp_span_after == 0,
              "%s: vocab-parallel embedding", what);
        double act = 4 * tok * V / (4 * tok * V + 4); /* logits sharded, not the loss */
        CHECK(lv[3].tp_patterns == 1 && lv[3].ar_fwd == 2 && lv[3].ar_fwd_bytes == 12 * tok &&
                  lv[3].ar_bwd == 1 && lv[3].ar_bwd_bytes == 4 * tok * D &&
                  lv[3].tp_param_frac == 1 && fabs(lv[3].tp_flops_frac - linh / fwd[3]) < 1e-12 &&
                  fabs(lv[3].tp_act_frac - act) < 1e-12 && lv[3].tp_divides == 0x7f &&
                  lv[3].tp_span_before == 0 && lv[3].tp_span_after == 0,
              "%s: vocab-parallel head and loss (ar_fwd %d, %g bytes, act %g)", what,
              lv[3].ar_fwd, lv[3].ar_fwd_bytes, lv[3].tp_act_frac);
    } else {
        for (int l = 0; l < NL; l += 3)
            CHECK(!memcmp(&li[l], &lv[l], sizeof li[l]), "%s: layer %d replicated", what, l + 1);
    }

    CostOptions o;
    cost_options_default(&o);
    o.max_tp = 8;
    o.intra = li;
    IrError e2 = {{0}};
    const unsigned tp124 = 1u << 1 | 1u << 2 | 1u << 4, tp1 = 1u << 1;
    CostModel *cm = cost_model_new(c, ly, NL, &o, &e2);
    CHECK(cm != NULL, "cost model: %s", e2.msg);
    if (cm) {
        CHECK(offered(cm, 2, 3) == tp124 && offered(cm, 1, 4) == tp124 && offered(cm, 1, 3) == tp124,
              "the whole MLP: tp 1, 2, 4 (%#x)", offered(cm, 2, 3));
        CHECK(offered(cm, 1, 1) == tp1 && offered(cm, 4, 4) == tp1, "no pattern: tp 1 only");
        CHECK(offered(cm, 2, 2) == tp1 && offered(cm, 3, 4) == tp1 && offered(cm, 1, 2) == tp1,
              "a cut MLP: tp 1 only");
        cost_model_free(cm);
    }
    o.intra = lv;
    cm = cost_model_new(c, ly, NL, &o, &e2);
    if (cm) {
        /* vocab-parallel: the embedding / head layers alone shard something too */
        unsigned alone = vocab ? tp124 : tp1;
        CHECK(offered(cm, 1, 1) == alone && offered(cm, 4, 4) == alone,
              "%s: embedding / head alone (%#x %#x)", what, offered(cm, 1, 1), offered(cm, 4, 4));
        CHECK(offered(cm, 2, 3) == tp124 && offered(cm, 1, 4) == tp124, "%s: the MLP: tp 4 too", what);
        CHECK(offered(cm, 2, 2) == tp1 && offered(cm, 1, 2) == tp1, "%s: a cut MLP", what);
        cost_model_free(cm);
    }
    o.intra = NULL;
    cm = cost_model_new(c, ly, NL, &o, &e2);
    if (cm) {
        CHECK(offered(cm, 1, 4) == 1u << 1, "without the IR reading: tp 1 only");
        cost_model_free(cm);
    }
    ir_graph_free(g);
    printf("executed TP (%s): MLP layers 2-3 offered tp 1/2/4, cut ranges tp 1; vocab-parallel "
           "embedding and head %s\n", what, vocab ? "costed (tp 1/2/4 alone)" : "replicated");
}

int main(void)
{
    ClusterSpec c;
    IrError err = {{0}};
    if (cluster_load_yaml_string(YAML_FMT, "intra.yaml", &c, &err)) {
        printf("FAIL: %s\n", err.msg);
        return 1;
    }
    for (int inflight = 1; inflight <= 8; inflight *= 2)
        for (double scale = 0.5; scale <= 8; scale *= 4)
            test_brute(&c, scale, inflight, inflight == 8 ? 2 : 8);
    test_laws(&c);
    test_monotone(&c);
    test_restricted_and_dp(&c);
    test_executed_tp(&c, 6, 0);   /* 64 does not divide the vocabulary: replicated */
    test_executed_tp(&c, 128, 0); /* costed */
    test_executed_tp(&c, 128, 1); /* tied: replicated unless one stage holds both */
    cluster_free(&c);
    if (failures)
        printf("%d failures\n", failures);
    else
        printf("test_intra: ok\n");
    return failures != 0;
}
