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
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brute.h"
#include "cost_model.h"
#include "hapt_dp.h"

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
                             .attn_flops = 1e12 * scale};
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
    CHECK(z1->t_sync == base->t_sync && z2->t_sync == base->t_sync, "RS + AG = all-reduce volume");
    CHECK(base->t_f + base->t_b == z1->t_f + z1->t_b, "ZeRO does not change t_f + t_b");
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
    cluster_free(&c);
    if (failures)
        printf("%d failures\n", failures);
    else
        printf("test_intra: ok\n");
    return failures != 0;
}
