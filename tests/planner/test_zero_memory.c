/* The shared ZeRO memory formula (passes/planner/zero_memory.h):
 *  1. zero_state_bytes_per_param against the ZeRO paper's per-device
 *     model-state memory, written out here by hand in the paper's terms
 *     (Rajbhandari et al., SC20, §3.1 and Figure 1: K = 12, 2-byte weights
 *     and gradients) and against the paper's own Figure 1 figures for
 *     Ψ = 7.5B, N_d = 64 (120, 31.4, 16.6, 1.9 GB);
 *  2. at fp32, against the buffers codegen/memplan.h lays out per
 *     parameter (weights and accumulators numel x 4 bytes, m, v and under
 *     ZeRO the parameter slice zlen x 4, ZeRO-2 accumulators zlen x 4);
 *  3. the HAPT cost model and the alternative planners' stage cost give the
 *     same static memory for every ZeRO stage (they carried
 *     two copies of the formula that differed at fp32 under ZeRO), at fp32
 *     and at each example cluster's own 2-byte dtype.
 * usage: test_zero_memory SOURCE_DIR */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../planner_alt/alt_model.h"
#include "alt_plan.h"
#include "cost_model.h"
#include "hapt_dp.h"
#include "zero_memory.h"

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

static int rel_eq(double a, double b)
{
    return a == b || fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b));
}

static void paper(void)
{
    const double K = 12; /* fp32 master weights, momentum, variance */
    const int nds[] = {1, 2, 3, 4, 7, 8, 64};
    for (int q = 0; q < (int)(sizeof nds / sizeof *nds); q++) {
        double N = nds[q];
        /* bytes per parameter (Ψ = 1) of Figure 1's four rows */
        double want[4] = {2 + 2 + K, 2 + 2 + K / N, 2 + (2 + K) / N, (2 + 2 + K) / N};
        for (int z = 0; z < 4; z++)
            CHECK(rel_eq(zero_state_bytes_per_param(2, z, nds[q]), want[z]),
                  "2-byte dtype, ZeRO-%d, N_d %d: %g, paper %g", z, nds[q],
                  zero_state_bytes_per_param(2, z, nds[q]), want[z]);
    }
    /* Figure 1's own figures: Ψ = 7.5B parameters, N_d = 64, in GB */
    const double fig1[4] = {120, 31.4, 16.6, 1.9};
    for (int z = 0; z < 4; z++) {
        double gb = 7.5e9 * zero_state_bytes_per_param(2, z, 64) / 1e9;
        CHECK(fabs(gb - fig1[z]) < 0.05, "Figure 1, ZeRO-%d: %.3f GB, paper %.1f GB", z, gb,
              fig1[z]);
    }
}

/* fp32 training, per element of a parameter of numel elements over dp
 * ranks (numel a multiple of dp, so zlen = numel / dp): memplan's buffers. */
static void fp32_memplan(void)
{
    for (int dp = 1; dp <= 8; dp++) {
        double numel = 840, zlen = numel / dp;
        double z0 = numel * 4 /* param */ + numel * 4 /* acc */ + 2 * numel * 4 /* m, v */;
        double z1 = numel * 4 + numel * 4 + 2 * zlen * 4 + zlen * 4 /* param slice */;
        double z2 = numel * 4 + zlen * 4 /* acc shard */ + 2 * zlen * 4 + zlen * 4;
        double want[3] = {z0 / numel, z1 / numel, z2 / numel};
        for (int z = 0; z < 3; z++)
            CHECK(rel_eq(zero_state_bytes_per_param(4, z, dp), want[z]),
                  "fp32, ZeRO-%d, dp %d: %g, memplan's buffers %g", z, dp,
                  zero_state_bytes_per_param(4, z, dp), want[z]);
    }
    /* no DP: ZeRO shards over one rank, the slice is the whole parameter */
    CHECK(zero_state_bytes_per_param(4, 1, 1) == 4 + 4 + 12, "fp32 ZeRO-1 dp 1");
    CHECK(zero_state_bytes_per_param(2, 5, 4) == zero_state_bytes_per_param(2, 3, 4),
          "ZeRO above 3 clamps");
}

/* The two planners' stage costs agree on static memory for every ZeRO
 * stage (tp = 1, the DP group = the submesh). */
static void planners_agree(const char *src)
{
    const char *clusters[] = {"case_study", "three_mesh", "tiny_hetero", "single_a100", NULL};
    int L;
    PlanLayer *ly = alt_model_gpt(4, 512, 256, 50257, 1, &L);
    CHECK(ly, "model");
    for (int ci = 0; ly && clusters[ci]; ci++)
        for (int fp32 = 0; fp32 < 2; fp32++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/examples/clusters/%s.yaml", src, clusters[ci]);
            ClusterSpec c;
            IrError err = {{0}};
            if (cluster_load_yaml(path, &c, &err)) {
                CHECK(0, "%s", err.msg);
                continue;
            }
            if (fp32)
                snprintf(c.dtype, sizeof c.dtype, "fp32");
            const char *dt = c.dtype;
            AltContext x;
            alt_context_default(&x, &c, ly, L, 8);
            int n = 0;
            for (int z = 0; z < 3; z++) {
                CostOptions co;
                cost_options_default(&co);
                co.imbalance_threshold = 0;
                co.zero_stage = z;
                CostModel *cm = cost_model_new(&c, ly, L, &co, &err);
                CHECK(cm, "cost model: %s", err.msg);
                for (int a = 0; cm && a < c.nmeshes; a++) {
                    Submesh subs[64];
                    int ns = submesh_enumerate(c.meshes[a].nodes, c.meshes[a].per_node, subs, 64);
                    for (int s = 0; s < ns; s++)
                        for (int k = 1; k <= L; k += 4) {
                            int i = k + (L - k) / 2, dp = subs[s].n * subs[s].m;
                            StageCost r, q;
                            CHECK(cost_model_stage(cm, k, i, a, subs[s], &r) == 0, "stage");
                            CHECK(alt_stage_cost(&x, k, i, a, dp, 1, 0, z, 0, 1.0 / dp, &q) == 0,
                                  "alt");
                            CHECK(rel_eq(r.mem_static, q.mem_static),
                                  "%s %s ZeRO-%d mesh %d dp %d layers %d..%d: HAPT %.17g, alt "
                                  "%.17g", clusters[ci], dt, z, a, dp, k, i, r.mem_static,
                                  q.mem_static);
                            /* and the formula itself: parameters x bytes + reserve */
                            double P = 0;
                            for (int l = k; l <= i; l++)
                                P += ly[l - 1].param_bytes;
                            double w = fp32 ? 4 : 2; /* fp16 / bf16 otherwise */
                            P /= w;
                            double byt = z == 0 ? w + w + (w < 4 ? 4 : 0) + 8
                                         : z == 1 ? w + w + 12.0 / dp : w + (w + 12.0) / dp;
                            CHECK(fabs(r.mem_static - co.runtime_reserve_bytes - P * byt) <=
                                      1e-9 * P * byt,
                                  "%s %s ZeRO-%d dp %d: %.17g vs %.17g", clusters[ci], dt,
                                  z, dp, r.mem_static - co.runtime_reserve_bytes, P * byt);
                            n++;
                        }
                }
                cost_model_free(cm);
            }
            CHECK(n > 0, "%s: no stages compared", clusters[ci]);
            cluster_free(&c);
        }
    free(ly);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_zero_memory SOURCE_DIR\n");
        return 2;
    }
    paper();
    fp32_memplan();
    planners_agree(argv[1]);
    if (fails)
        fprintf(stderr, "%d failures\n", fails);
    else
        printf("zero memory: paper, memplan and both planners agree\n");
    return fails ? 1 : 0;
}
