/* Seed 003's evaluation setups (Table 1: 4-GPU A100 and V100 nodes, half
 * each; a 10-layer GPT-2 2.5B and a 20-layer 4.5B model): metis-mem must
 * take no more search steps than metis and find a plan of the same or
 * lower cost (both on the same cost model), and both plans must be valid
 * and memory-feasible.  Prints the table docs/COMPARISON.md quotes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alt_model.h"
#include "alt_plan.h"

static int fails;

/* Merge fine layers into n equal groups (Metis profiles whole blocks). */
static PlanLayer *merge(const PlanLayer *f, int L, int n)
{
    PlanLayer *m = calloc((size_t)n, sizeof *m);
    for (int q = 0; q < n; q++)
        for (int l = (int)((long)q * L / n); l < (int)((long)(q + 1) * L / n); l++) {
            m[q].fwd_flops += f[l].fwd_flops;
            m[q].bwd_flops += f[l].bwd_flops;
            m[q].param_bytes += f[l].param_bytes;
            m[q].act_bytes += f[l].act_bytes;
            m[q].heavy_ops += f[l].heavy_ops;
            m[q].out_bytes = f[l].out_bytes;
            m[q].first_node = m[q].last_node = -1;
        }
    return m;
}

static void setup(int layers, int blocks, double h, int nodes_each, int gbs)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "name: metis-%d\ndtype: fp16\nmeshes:\n"
             "  - {name: a100, device: A100-40GB, nodes: %d, devices_per_node: 4,\n"
             "     intra_node: {bandwidth_gbps: 2400, latency_us: 5}, inter_node: {bandwidth_gbps: 100, latency_us: 10}}\n"
             "  - {name: v100, device: V100-16GB, nodes: %d, devices_per_node: 4,\n"
             "     intra_node: {bandwidth_gbps: 1200, latency_us: 5}, inter_node: {bandwidth_gbps: 100, latency_us: 10}}\n"
             "links:\n  - {between: [a100, v100], bandwidth_gbps: 100, latency_us: 20, transport: device-direct}\n",
             4 * nodes_each, nodes_each, nodes_each);
    ClusterSpec c;
    IrError err = {{0}};
    if (cluster_load_yaml_string(yaml, "metis003", &c, &err)) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        fails++;
        return;
    }
    int Lf = 0;
    PlanLayer *fine = alt_model_gpt(blocks, h, 1024, 50257, 1, &Lf);
    PlanLayer *ly = merge(fine, Lf, layers);
    AltContext x;
    alt_context_default(&x, &c, ly, layers, gbs);
    AltPlan a, b;
    IrError e1 = {{0}}, e2 = {{0}};
    int ra = alt_plan_run("metis", &x, &a, &e1), rb = alt_plan_run("metis-mem", &x, &b, &e2);
    if (ra || rb) {
        fprintf(stderr, "FAIL: %s / %s\n", e1.msg, e2.msg);
        fails++;
    } else {
        IrError e3 = {{0}};
        if (alt_plan_check(&x, &a, &e3) || alt_plan_check(&x, &b, &e3)) {
            fprintf(stderr, "FAIL: invalid plan: %s\n", e3.msg);
            fails++;
        }
        printf("%2d layers, %3d A100 + %3d V100, GBS %d: steps metis %ld, metis-mem %ld (%.1f%% fewer); "
               "time %.3f / %.3f ms; cost %.4f / %.4f s; simulated %.4f / %.4f s\n", layers,
               4 * nodes_each, 4 * nodes_each, gbs, a.steps, b.steps,
               100.0 * (a.steps - b.steps) / a.steps, 1e3 * a.seconds, 1e3 * b.seconds, a.objective,
               b.objective, a.sim_time, b.sim_time);
        if (b.steps > a.steps) {
            fprintf(stderr, "FAIL: metis-mem took more steps (%ld > %ld)\n", b.steps, a.steps);
            fails++;
        }
        if (b.objective > a.objective * (1 + 1e-12)) {
            fprintf(stderr, "FAIL: metis-mem plan costs more (%g > %g)\n", b.objective, a.objective);
            fails++;
        }
        alt_plan_free(&a);
        alt_plan_free(&b);
    }
    free(fine);
    free(ly);
    cluster_free(&c);
}

int main(void)
{
    /* GPT-2 2.5B (h 1920, 48 blocks) in 10 layers; 4.5B (h 2560, 48 blocks) in 20 */
    setup(10, 48, 1920, 4, 128);
    setup(20, 48, 2560, 8, 128);
    setup(20, 48, 2560, 16, 256);
    return fails ? 1 : 0;
}
