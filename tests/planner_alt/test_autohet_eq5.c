/* AutoHet's Eq. 5 profile mode (binary decomposition of layer counts)
 * against the exhaustive analytic costs (alt_stage_cost of every stage):
 *   - on a uniform stack the composed t_f, t_b, static and activation
 *     memory equal the exact ones for every layer count and start, with
 *     floor(log2 L) + 1 profile points per device type and TP degree;
 *   - on the block view of a GPT (embedding, identical blocks, head) they
 *     are equal on stages of blocks only, and differ on stages holding the
 *     embedding or the head (the cost is not position-independent there:
 *     the paper's "repetitive architecture" assumption);
 *   - on fine layers (4 distinct layers per block) some counts differ;
 *   - the planner in binary mode returns the exact mode's plan on uniform
 *     stacks while profiling fewer points than the exhaustive L per type. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alt_autohet.h"
#include "alt_model.h"
#include "alt_plan.h"

static int fails;
#define CHECK(c, ...)                                                     \
    do {                                                                  \
        if (!(c)) {                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
            fails++;                                                      \
        }                                                                 \
    } while (0)

static int rel_eq(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-300;
}

static const char *clusters[] = {"case_study", "three_mesh", "tiny_hetero", "tiny_pair", NULL};

/* L copies of a GPT-2-medium MLP layer (one sample of 1024 tokens). */
static PlanLayer *uniform_stack(int L)
{
    PlanLayer *ly = calloc((size_t)L, sizeof *ly);
    double tok = 1024, h = 1024, act_h = tok * h * 2;
    for (int l = 0; ly && l < L; l++) {
        ly[l].param_bytes = 8 * h * h * 2;
        ly[l].fwd_flops = 2 * tok * 8 * h * h;
        ly[l].bwd_flops = 2 * ly[l].fwd_flops;
        ly[l].act_bytes = 10 * act_h;
        ly[l].out_bytes = act_h;
        ly[l].heavy_ops = 2;
        ly[l].sig = 7;
        ly[l].first_node = ly[l].last_node = -1;
    }
    return ly;
}

/* Compare composed against exact for every stage [k, k+n-1] in [lo, hi];
 * returns the number of stages that differ in any figure. */
static int compare_range(const AltContext *x, int mesh, int tp, const AhBinProfile *pr, int lo,
                         int hi)
{
    int differ = 0;
    double mem = x->c->meshes[mesh].dev.mem_bytes;
    for (int k = lo; k <= hi; k++)
        for (int i = k; i <= hi; i++) {
            StageCost ex, co;
            alt_stage_cost(x, k, i, mesh, 1, tp, 0, 0, 0, 1.0, &ex);
            autohet_compose_binary(pr, i - k + 1, mem, &co);
            differ += !rel_eq(ex.t_f, co.t_f) || !rel_eq(ex.t_b, co.t_b) ||
                      !rel_eq(ex.mem_static, co.mem_static) || !rel_eq(ex.mem_act, co.mem_act) ||
                      ex.feasible != co.feasible;
        }
    return differ;
}

static int log2_floor(int n)
{
    int k = 0;
    while (n >> (k + 1))
        k++;
    return k;
}

static void test_cluster(const char *name, const ClusterSpec *c)
{
    int L = 37;
    PlanLayer *uni = uniform_stack(L);
    int Lg = 0;
    PlanLayer *gpt = alt_model_gpt(24, 1024, 1024, 50257, 1, &Lg);
    if (!uni || !gpt) {
        CHECK(0, "out of memory");
        free(uni);
        free(gpt);
        return;
    }
    AltContext xu, xg, xb;
    alt_context_default(&xu, c, uni, L, 8);
    alt_context_default(&xg, c, gpt, Lg, 8);
    PlanLayer *merged = NULL;
    int *firsts = NULL;
    CHECK(alt_block_view(&xg, &xb, &merged, &firsts) == 0, "%s: no block view", name);
    for (int a = 0; a < c->nmeshes; a++)
        for (int tp = 1; tp <= c->meshes[a].per_node; tp *= 2) {
            AhBinProfile pr;
            int np = autohet_profile_binary(&xu, a, tp, &pr);
            CHECK(np == log2_floor(L) + 1, "%s mesh %d tp %d: %d points for L=%d", name, a, tp, np, L);
            int d = compare_range(&xu, a, tp, &pr, 1, L);
            CHECK(d == 0, "%s mesh %d tp %d: uniform stack: %d stages differ", name, a, tp, d);
            if (!merged)
                continue;
            /* block view: layer 1 embedding, 2..Lb-1 blocks, Lb head */
            int Lb = xb.L;
            np = autohet_profile_binary(&xb, a, tp, &pr);
            CHECK(pr.first == 2, "%s: profile starts at block layer %d", name, pr.first);
            d = compare_range(&xb, a, tp, &pr, 2, Lb - 1);
            CHECK(d == 0, "%s mesh %d tp %d: blocks: %d stages differ", name, a, tp, d);
            StageCost ex, co;
            alt_stage_cost(&xb, 1, 4, a, 1, tp, 0, 0, 0, 1.0, &ex);
            autohet_compose_binary(&pr, 4, c->meshes[a].dev.mem_bytes, &co);
            CHECK(!rel_eq(ex.t_f, co.t_f), "%s: embedding stage composed exactly?", name);
            alt_stage_cost(&xb, Lb - 3, Lb, a, 1, tp, 0, 0, 0, 1.0, &ex);
            CHECK(!rel_eq(ex.t_f, co.t_f), "%s: head stage composed exactly?", name);
            /* fine layers: the profiled windows start at a block's first
             * layer; a 3-layer stage out of phase differs */
            np = autohet_profile_binary(&xg, a, tp, &pr);
            CHECK(np == log2_floor(Lg) + 1, "%s: fine layers: %d points", name, np);
            d = compare_range(&xg, a, tp, &pr, xg.block_first, xg.block_first + 7);
            CHECK(d > 0, "%s: fine layers composed exactly everywhere?", name);
        }
    /* the planner: same plan in both modes on the uniform stack */
    AltPlan pe, pb;
    IrError e1 = {{0}}, e2 = {{0}};
    long pts = 0, exh = 0;
    int r1 = alt_plan_autohet_mode(&xu, AH_PROFILE_EXACT, &pe, NULL, NULL, &e1);
    int r2 = alt_plan_autohet_mode(&xu, AH_PROFILE_BINARY, &pb, &pts, &exh, &e2);
    CHECK(r1 == r2, "%s: exact %d (%s), binary %d (%s)", name, r1, e1.msg, r2, e2.msg);
    if (!r1 && !r2) {
        CHECK(rel_eq(pe.objective, pb.objective), "%s: objective %g exact, %g binary", name,
              pe.objective, pb.objective);
        CHECK(pe.nstages == pb.nstages, "%s: %d stages exact, %d binary", name, pe.nstages,
              pb.nstages);
        for (int s = 0; s < pe.nstages && pe.nstages == pb.nstages; s++)
            CHECK(pe.stages[s].first_layer == pb.stages[s].first_layer &&
                      pe.stages[s].last_layer == pb.stages[s].last_layer &&
                      pe.stages[s].parts[0].mesh == pb.stages[s].parts[0].mesh,
                  "%s: stage %d differs", name, s);
        CHECK(pts > 0 && pts < exh, "%s: %ld profile points, exhaustive %ld", name, pts, exh);
        printf("%s: autohet binary profile: %ld points (exhaustive %ld), objective %.6g s\n", name,
               pts, exh, pb.objective);
    }
    if (!r1)
        alt_plan_free(&pe);
    if (!r2)
        alt_plan_free(&pb);
    free(merged);
    free(firsts);
    free(uni);
    free(gpt);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_autohet_eq5 SOURCE_DIR\n");
        return 2;
    }
    for (int ci = 0; clusters[ci]; ci++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/examples/clusters/%s.yaml", argv[1], clusters[ci]);
        ClusterSpec c;
        IrError err = {{0}};
        if (cluster_load_yaml(path, &c, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        test_cluster(clusters[ci], &c);
        cluster_free(&c);
    }
    if (fails)
        fprintf(stderr, "%d failures\n", fails);
    return fails ? 1 : 0;
}
