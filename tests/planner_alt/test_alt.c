/* Alternative planners (issue 8): the shared cost against cost_model.c,
 * every planner on every example cluster (valid + memory-feasible plan, or
 * a "no feasible plan" message), and a model that fits nowhere.
 * usage: test_alt SOURCE_DIR [cost | planner ...] (nothing: everything) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alt_model.h"
#include "alt_plan.h"
#include "hapt_dp.h"

static int fails;
#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
            fails++;                                                            \
        }                                                                       \
    } while (0)

static const char *clusters[] = {"case_study", "h2_100b", "hapt_table2", "single_a100",
                                 "three_mesh", "tiny_hetero", "tiny_pair", NULL};

static int rel_eq(double a, double b)
{
    if (a == b)
        return 1;
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b));
}

/* alt_stage_cost(tp = 1, frac = 1/dp) and alt_comm(mb = 1) against the
 * analytic cost model, which the HAPT DP uses. */
static void test_cost_equal(const ClusterSpec *c, const PlanLayer *ly, int L)
{
    AltContext x;
    alt_context_default(&x, c, ly, L, 8);
    CostOptions co;
    cost_options_default(&co);
    co.imbalance_threshold = 0;
    IrError err = {{0}};
    CostModel *cm = cost_model_new(c, ly, L, &co, &err);
    CHECK(cm, "cost model: %s", err.msg);
    if (!cm)
        return;
    int n = 0;
    for (int a = 0; a < c->nmeshes; a++) {
        Submesh subs[64];
        int ns = submesh_enumerate(c->meshes[a].nodes, c->meshes[a].per_node, subs, 64);
        for (int s = 0; s < ns; s++)
            for (int k = 1; k <= L; k += 3)
                for (int i = k; i <= L; i += 5) {
                    StageCost r, q;
                    int dp = subs[s].n * subs[s].m;
                    CHECK(cost_model_stage(cm, k, i, a, subs[s], &r) == 0, "stage");
                    CHECK(alt_stage_cost(&x, k, i, a, dp, 1, 0, 0, 0, 1.0 / dp, &q) == 0, "alt");
                    CHECK(rel_eq(r.t_f, q.t_f) && rel_eq(r.t_b, q.t_b) &&
                          rel_eq(r.mem_static, q.mem_static) && rel_eq(r.mem_act, q.mem_act) &&
                          rel_eq(r.t_sync, q.t_sync),
                          "%s mesh %d sub %dx%d layers %d..%d: t_f %g/%g t_b %g/%g static %g/%g act "
                          "%g/%g sync %g/%g", c->name, a, subs[s].n, subs[s].m, k, i, r.t_f, q.t_f,
                          r.t_b, q.t_b, r.mem_static, q.mem_static, r.mem_act, q.mem_act, r.t_sync,
                          q.t_sync);
                    n++;
                }
        for (int b = 0; b < c->nmeshes; b++)
            for (int i = 1; i <= L; i++)
                CHECK(rel_eq(cost_model_comm(cm, i, a, b), alt_comm(&x, i, a, b, 1.0)),
                      "comm %d %d->%d", i, a, b);
    }
    cost_model_free(cm);
    (void)n;
}

/* TP halves per-device FLOPs and parameters and adds all-reduces; recompute
 * trades activations for a second forward. */
static void test_cost_tp_recompute(const ClusterSpec *c, const PlanLayer *ly, int L)
{
    AltContext x;
    alt_context_default(&x, c, ly, L, 8);
    int a = 0;
    StageCost t1, t2, r1;
    alt_stage_cost(&x, 2, 9, a, 1, 1, 0, 0, 0, 1.0, &t1);
    alt_stage_cost(&x, 2, 9, a, 1, 2, 0, 0, 0, 1.0, &t2);
    alt_stage_cost(&x, 2, 9, a, 1, 1, 1, 0, 0, 1.0, &r1);
    double reserve = x.co.runtime_reserve_bytes;
    CHECK(rel_eq(t2.mem_static - reserve, (t1.mem_static - reserve) / 2), "tp halves static memory");
    CHECK(rel_eq(t2.mem_act, t1.mem_act / 2), "tp halves activations");
    CHECK(t2.t_f > t1.t_f / 2, "tp adds all-reduce time");
    CHECK(rel_eq(r1.t_b, t1.t_b + t1.t_f), "recompute re-runs the forward");
    /* the repeated block of alt_model_gpt: 12 h^2 parameters in 2 bytes */
    CHECK(rel_eq(x.tp_block_bytes, 12.0 * 1024 * 1024 * 2), "block of %g bytes", x.tp_block_bytes);
    CHECK(r1.mem_act < t1.mem_act, "recompute keeps fewer activations");
}

static int run_one(const char *name, const ClusterSpec *c, const PlanLayer *ly, int L, int samples,
                   int expect_ok)
{
    AltContext x;
    alt_context_default(&x, c, ly, L, samples);
    AltPlan p;
    IrError err = {{0}};
    int rc = alt_plan_run(name, &x, &p, &err);
    if (rc == 0) {
        IrError e2 = {{0}};
        CHECK(alt_plan_check(&x, &p, &e2) == 0, "%s on %s: invalid plan: %s", name, c->name, e2.msg);
        CHECK(p.feasible && p.peak_ratio <= 1, "%s on %s: infeasible", name, c->name);
        CHECK(p.sim_time > 0 && isfinite(p.sim_time), "%s on %s: sim %g", name, c->name, p.sim_time);
        CHECK(p.sim_time >= p.t_max * 0.999, "%s on %s: sim %g below t_max %g", name, c->name,
              p.sim_time, p.t_max);
        if (p.runnable) {
            Plan hp;
            CHECK(alt_plan_to_plan(&x, &p, &hp, &e2) == 0, "%s: runnable but no plan.json: %s", name,
                  e2.msg);
            plan_free(&hp);
        }
        printf("%-11s %-12s sim %.4f s  steps %ld  %s\n", name, c->name, p.sim_time, p.steps,
               p.runnable ? "runnable" : p.needs);
        alt_plan_free(&p);
    } else {
        printf("%-11s %-12s %s\n", name, c->name, err.msg);
        CHECK(strstr(err.msg, "no feasible plan") != NULL, "%s on %s: unclear failure: %s", name,
              c->name, err.msg);
    }
    CHECK(!expect_ok || rc == 0, "%s on %s: expected a plan, got: %s", name, c->name, err.msg);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_alt SOURCE_DIR [planner ...]\n");
        return 2;
    }
    int L = 0, Lbig = 0;
    /* GPT-2 medium shape (350M): fits every example cluster */
    PlanLayer *ly = alt_model_gpt(24, 1024, 1024, 50257, 1, &L);
    /* GPT-3 175B shape: fits no small cluster */
    PlanLayer *big = alt_model_gpt(96, 12288, 2048, 50257, 1, &Lbig);
    for (int ci = 0; clusters[ci]; ci++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/examples/clusters/%s.yaml", argv[1], clusters[ci]);
        ClusterSpec c;
        IrError err = {{0}};
        if (cluster_load_yaml(path, &c, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        int cost_only = argc > 2 && !strcmp(argv[2], "cost");
        if (argc == 2 || cost_only) {
            test_cost_equal(&c, ly, L);
            test_cost_tp_recompute(&c, ly, L);
        }
        for (int i = 0; alt_planner_names[i] && !cost_only; i++) {
            const char *nm = alt_planner_names[i];
            int want = argc == 2;
            for (int q = 2; q < argc; q++)
                want |= !strcmp(argv[q], nm);
            if (!want)
                continue;
            run_one(nm, &c, ly, L, 32, 1);
            if (!strcmp(clusters[ci], "tiny_pair"))
                CHECK(run_one(nm, &c, big, Lbig, 32, 0) != 0, "%s: 175B fits two GPUs?", nm);
        }
        cluster_free(&c);
    }
    free(ly);
    free(big);
    if (fails)
        fprintf(stderr, "%d failures\n", fails);
    return fails ? 1 : 0;
}
