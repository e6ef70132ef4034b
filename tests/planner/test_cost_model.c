/* Analytic cost model: scaling laws of the roofline, zero-redundant cache
 * (equal signatures are costed once; counters add up, unique count checked
 * by brute-force sequence comparison), thread safety of the oracle, comm
 * formula, memory feasibility.  Exact formula values are checked against an
 * independent Python re-derivation in test_cost_formula.py. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost_model.h"
#include "hapt_dp.h"

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { printf("FAIL %s:%d: ", __FILE__, __LINE__); \
    printf(__VA_ARGS__); printf("\n"); failures++; } } while (0)

static const char *YAML =
    "dtype: bf16\n"
    "meshes:\n"
    "  - {name: big, device: A100-80GB, nodes: 2, devices_per_node: 4,\n"
    "     intra_node: {bandwidth_gbps: 2400, latency_us: 5}, inter_node: {bandwidth_gbps: 200, latency_us: 10}}\n"
    "  - {name: small, device: L4, nodes: 1, devices_per_node: 2,\n"
    "     intra_node: {bandwidth_gbps: 128, latency_us: 8}}\n"
    "  - {name: big2, device: A100-80GB, nodes: 2, devices_per_node: 4,\n"
    "     intra_node: {bandwidth_gbps: 2400, latency_us: 5}, inter_node: {bandwidth_gbps: 200, latency_us: 10}}\n"
    "links:\n"
    "  - {between: [big, small], bandwidth_gbps: 5, latency_us: 50, transport: cpu-mediated}\n"
    "default_link: {bandwidth_gbps: 10, latency_us: 20}\n";

static PlanLayer layer(double flops, double params, double act, double out, uint64_t sig)
{
    return (PlanLayer){.fwd_flops = flops, .bwd_flops = 2 * flops, .param_bytes = params,
                       .act_bytes = act, .out_bytes = out, .heavy_ops = 2, .sig = sig,
                       .first_node = -1, .last_node = -1};
}

static void test_scaling(const ClusterSpec *c)
{
    /* Compute-bound: 1e15 FLOP against ~1 MB of traffic. */
    PlanLayer ly[2] = {layer(1e15, 1e6, 1e5, 1e4, 1), layer(2e15, 1e6, 1e5, 1e4, 2)};
    CostOptions o;
    cost_options_default(&o);
    o.imbalance_threshold = 0;
    CostModel *cm = cost_model_new(c, ly, 2, &o, NULL);
    StageCost a, b;
    for (int mesh = 0; mesh < 2; mesh++) {
        Submesh s = {1, 2};
        cost_model_stage(cm, 1, 1, mesh, s, &a);
        cost_model_stage(cm, 2, 2, mesh, s, &b);
        CHECK(fabs(b.t_f / a.t_f - 2) < 1e-12, "2x flops -> 2x fwd time (got %g)", b.t_f / a.t_f);
        CHECK(fabs(b.t_b / a.t_b - 2) < 1e-12, "2x flops -> 2x bwd time (got %g)", b.t_b / a.t_b);
        /* Twice the devices as DP: half the per-device FLOPs. */
        StageCost d;
        cost_model_stage(cm, 1, 1, mesh, (Submesh){1, 1}, &d);
        CHECK(fabs(d.t_f / a.t_f - 2) < 1e-12, "half the devices -> 2x time (got %g)", d.t_f / a.t_f);
        CHECK(a.dp == 2 && a.tp == 1 && d.dp == 1, "dp = devices, tp = 1");
        CHECK(d.t_sync == 0 && a.t_sync > 0, "all-reduce only with dp > 1");
    }
    /* A100 vs L4 on the same compute-bound layer: ratio of bf16 peaks. */
    cost_model_stage(cm, 1, 1, 0, (Submesh){1, 1}, &a);
    cost_model_stage(cm, 1, 1, 1, (Submesh){1, 1}, &b);
    double want = catalog_find("A100-80GB")->flops_bf16 / catalog_find("L4")->flops_bf16;
    CHECK(fabs(b.t_f / a.t_f - want) < 1e-9, "device ratio %g vs %g", b.t_f / a.t_f, want);
    cost_model_free(cm);

    /* Memory-bound: doubling tiny FLOPs changes nothing. */
    PlanLayer mb[2] = {layer(1e6, 4e9, 1e9, 1e8, 1), layer(2e6, 4e9, 1e9, 1e8, 2)};
    cm = cost_model_new(c, mb, 2, &o, NULL);
    cost_model_stage(cm, 1, 1, 0, (Submesh){1, 1}, &a);
    cost_model_stage(cm, 2, 2, 0, (Submesh){1, 1}, &b);
    CHECK(a.t_f == b.t_f && a.t_b == b.t_b, "memory-bound time independent of FLOPs");
    CHECK(a.t_f > 1e6 / c->meshes[0].dev.flops_bf16, "memory-bound time above compute time");
    cost_model_free(cm);
}

/* Count distinct sig sequences over all ranges by direct comparison. */
static long distinct_ranges(const PlanLayer *ly, int L)
{
    long n = 0;
    for (int k = 1; k <= L; k++)
        for (int i = k; i <= L; i++) {
            int seen = 0;
            for (int k2 = 1; k2 < k && !seen; k2++) {   /* an earlier occurrence? */
                int same = 1;
                for (int j = 0; j <= i - k && same; j++)
                    same = ly[k - 1 + j].sig == ly[k2 - 1 + j].sig;
                seen = same;
            }
            n += !seen;
        }
    return n;
}

static void test_cache(const ClusterSpec *c)
{
    enum { L = 12 };
    PlanLayer ly[L];
    for (int l = 0; l < L; l++) {
        int kind = l == 0 ? 9 : l == L - 1 ? 8 : l % 2;   /* emb, (a b)*, head */
        ly[l] = layer(1e12 * (1 + kind), 1e8 * (1 + kind), 1e8, 1e7, 100 + (uint64_t)kind);
    }
    CostOptions o;
    cost_options_default(&o);
    o.imbalance_threshold = 0;
    CostModel *cm = cost_model_new(c, ly, L, &o, NULL);
    StageCost a, b;
    cost_model_stage(cm, 2, 3, 0, (Submesh){1, 4}, &a);
    cost_model_stage(cm, 4, 5, 0, (Submesh){1, 4}, &b);
    CostCounters k = cost_model_counters(cm);
    CHECK(memcmp(&a, &b, sizeof a) == 0, "equal signatures -> equal cost");
    CHECK(k.total == 2 && k.unique == 1 && k.duplicates == 1, "second range is a cache hit (%ld/%ld/%ld)",
          k.total, k.unique, k.duplicates);
    /* Mesh 2 has the same device class as mesh 0: shares entries. */
    cost_model_stage(cm, 2, 3, 2, (Submesh){1, 4}, &b);
    k = cost_model_counters(cm);
    CHECK(k.duplicates == 2 && memcmp(&a, &b, sizeof a) == 0, "same device class shares the cache");
    /* Asking the same candidate again is not a new candidate. */
    cost_model_stage(cm, 2, 3, 0, (Submesh){1, 4}, &b);
    CHECK(cost_model_counters(cm).total == 3, "repeat query not counted");
    cost_model_free(cm);

    cm = cost_model_new(c, ly, L, &o, NULL);
    CHECK(cost_model_profile_all(cm, NULL, NULL) == 0, "profile_all");
    k = cost_model_counters(cm);
    long subs = 0;
    for (int m = 0; m < c->nmeshes; m++)
        subs += submesh_enumerate(c->meshes[m].nodes, c->meshes[m].per_node, NULL, 0);
    /* meshes 0 and 2 are one device class: their candidates are shared */
    long subs_classes = submesh_enumerate(c->meshes[0].nodes, c->meshes[0].per_node, NULL, 0) +
                        submesh_enumerate(c->meshes[1].nodes, c->meshes[1].per_node, NULL, 0);
    CHECK(k.total == (long)L * (L + 1) / 2 * subs, "total %ld", k.total);
    CHECK(k.total == k.duplicates + k.unique, "total = duplicates + unique");
    CHECK(k.unique == k.pruned_imbalance + k.costed, "unique = pruned + costed");
    long want = distinct_ranges(ly, L) * subs_classes;
    CHECK(k.unique == want, "unique %ld, brute force %ld", k.unique, want);
    cost_model_profile_all(cm, NULL, NULL);
    cost_model_stage(cm, 2, 3, 0, (Submesh){1, 4}, &a);
    CostCounters k2 = cost_model_counters(cm);
    CHECK(memcmp(&k, &k2, sizeof k) == 0, "profiling twice or querying afterwards counts nothing new");
    cost_model_free(cm);

    /* Imbalance pruning: a threshold of 4 removes whole-model stages on one
     * device (and, with imbalance_lower, single layers on whole meshes);
     * counters still add up. */
    o.imbalance_threshold = 4;
    cm = cost_model_new(c, ly, L, &o, NULL);
    cost_model_profile_all(cm, NULL, NULL);
    k = cost_model_counters(cm);
    CHECK(k.pruned_imbalance > 0, "imbalance pruning prunes");
    CHECK(k.unique == k.pruned_imbalance + k.costed && k.total == k.duplicates + k.unique, "counters add up");
    cost_model_stage(cm, 1, L, 1, (Submesh){1, 1}, &a);
    CHECK(!a.feasible && isinf(a.t_f), "whole model on one L4 is pruned");
    cost_model_stage(cm, 2, 2, 0, (Submesh){2, 4}, &a);
    CHECK(a.feasible && isfinite(a.t_f), "a light stage on a whole mesh is kept by default");
    long pruned_upper = k.pruned_imbalance;
    cost_model_free(cm);
    o.imbalance_lower = 1;
    cm = cost_model_new(c, ly, L, &o, NULL);
    cost_model_profile_all(cm, NULL, NULL);
    k = cost_model_counters(cm);
    CHECK(k.pruned_imbalance > pruned_upper, "the lower side prunes more");
    cost_model_stage(cm, 2, 2, 0, (Submesh){2, 4}, &a);
    CHECK(!a.feasible && isinf(a.t_f), "with imbalance_lower a light stage on a whole mesh is pruned");
    cost_model_free(cm);
}

typedef struct Job {
    CostModel *cm;
    const ClusterSpec *c;
    int L;
    double sum;
} Job;

static void *worker(void *arg)
{
    Job *j = arg;
    for (int a = 0; a < j->c->nmeshes; a++) {
        Submesh s[16];
        int ns = submesh_enumerate(j->c->meshes[a].nodes, j->c->meshes[a].per_node, s, 16);
        for (int q = 0; q < ns; q++)
            for (int k = 1; k <= j->L; k++)
                for (int i = k; i <= j->L; i++) {
                    StageCost sc;
                    cost_model_stage(j->cm, k, i, a, s[q], &sc);
                    j->sum += sc.t_f + sc.t_b + sc.mem_static;
                }
    }
    return NULL;
}

static void test_threads(const ClusterSpec *c)
{
    enum { L = 20 };
    PlanLayer ly[L];
    for (int l = 0; l < L; l++)
        ly[l] = layer(1e12 * (1 + l % 3), 1e8, 1e8, 1e7, (uint64_t)(l % 3));
    CostOptions o;
    cost_options_default(&o);
    o.imbalance_threshold = 0;
    CostModel *shared = cost_model_new(c, ly, L, &o, NULL), *alone = cost_model_new(c, ly, L, &o, NULL);
    Job j[4] = {{shared, c, L, 0}, {shared, c, L, 0}, {shared, c, L, 0}, {alone, c, L, 0}};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, worker, &j[i]);
    worker(&j[3]);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++)
        CHECK(j[i].sum == j[3].sum, "thread %d saw the same costs", i);
    CostCounters a = cost_model_counters(shared), b = cost_model_counters(alone);
    CHECK(a.total == b.total && a.unique == b.unique, "concurrent counters equal serial ones");
    cost_model_free(shared);
    cost_model_free(alone);
}

static void test_comm(const ClusterSpec *c)
{
    enum { L = 3 };
    PlanLayer ly[L] = {layer(1e12, 1e8, 1e8, 3e7, 1), layer(1e12, 1e8, 1e8, 5e7, 2), layer(1e12, 1e8, 1e8, 7e7, 3)};
    CostModel *cm = cost_model_new(c, ly, L, NULL, NULL);
    /* big <-> small: 5 Gbit/s = 625e6 B/s, 50 us, cpu-mediated: + 2 copies at 12e9 B/s */
    double want = 3e7 / 625e6 + 50e-6 + 2 * 3e7 / 12e9;
    CHECK(fabs(cost_model_comm(cm, 1, 0, 1) - want) < 1e-15, "cpu-mediated link: %g vs %g",
          cost_model_comm(cm, 1, 0, 1), want);
    CHECK(cost_model_comm(cm, 1, 1, 0) == cost_model_comm(cm, 1, 0, 1), "links are symmetric");
    /* small <-> big2: default link 10 Gbit/s, 20 us, device-direct */
    want = 5e7 / 1.25e9 + 20e-6;
    CHECK(fabs(cost_model_comm(cm, 2, 1, 2) - want) < 1e-15, "default link: %g vs %g",
          cost_model_comm(cm, 2, 1, 2), want);
    /* inside big (2 nodes): inter-node 200 Gbit/s; inside small (1 node): intra 128 Gbit/s */
    CHECK(fabs(cost_model_comm(cm, 1, 0, 0) - (3e7 / 25e9 + 10e-6)) < 1e-15, "inside a multi-node mesh");
    CHECK(fabs(cost_model_comm(cm, 1, 1, 1) - (3e7 / 16e9 + 8e-6)) < 1e-15, "inside a one-node mesh");
    CHECK(cost_model_comm(cm, L, 0, 1) == 0, "no boundary after the last layer");
    CHECK(isinf(cost_model_comm(cm, 0, 0, 1)) && isinf(cost_model_comm(cm, 1, 0, 7)), "bad arguments");
    StageCost sc;
    CHECK(cost_model_stage(cm, 2, 1, 0, (Submesh){1, 1}, &sc) == -1, "k > i rejected");
    CHECK(cost_model_stage(cm, 1, 1, 0, (Submesh){1, 3}, &sc) == -1, "non-candidate submesh rejected");
    cost_model_free(cm);
}

/* Memory feasibility, a hand case of the documented formula: 1e9 bf16
 * parameters (2e9 bytes) on one A100-40GB (40 GiB = 42,949,672,960 B):
 * 1e9 x (2 weights + 2 grads + 4 master + 8 Adam) = 16e9 B, plus the 1 GiB
 * reserve = 17,073,741,824 B static.  23e9 B of activations: 40.07e9 B fits;
 * 26e9 B: 43.07e9 B does not. */
static void test_memory_hand(void)
{
    ClusterSpec c;
    IrError err = {{0}};
    if (cluster_load_yaml_string("meshes:\n  - {name: a, device: A100-40GB, nodes: 1, devices_per_node: 1}\n",
                                 "m.yaml", &c, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    PlanLayer ly[2] = {layer(1e12, 2e9, 23e9, 1e6, 1), layer(1e12, 2e9, 26e9, 1e6, 2)};
    CostOptions o;
    cost_options_default(&o);
    o.imbalance_threshold = 0;
    CostModel *cm = cost_model_new(&c, ly, 2, &o, NULL);
    StageCost a, b;
    cost_model_stage(cm, 1, 1, 0, (Submesh){1, 1}, &a);
    cost_model_stage(cm, 2, 2, 0, (Submesh){1, 1}, &b);
    CHECK(a.mem_static == 17073741824.0 && b.mem_static == 17073741824.0, "static %.0f", a.mem_static);
    CHECK(a.mem_act == 23e9 && a.feasible == 1, "23e9 B of activations fit");
    CHECK(b.mem_act == 26e9 && b.feasible == 0, "26e9 B of activations do not fit");
    cost_model_free(cm);
    o.prune_memory = 0;
    cm = cost_model_new(&c, ly, 2, &o, NULL);
    cost_model_stage(cm, 2, 2, 0, (Submesh){1, 1}, &b);
    CHECK(b.feasible == 1, "prune_memory = 0 keeps it");
    cost_model_free(cm);
    cluster_free(&c);
}

int main(void)
{
    ClusterSpec c;
    IrError err = {{0}};
    if (cluster_load_yaml_string(YAML, "test.yaml", &c, &err)) {
        printf("FAIL: %s\n", err.msg);
        return 1;
    }
    test_scaling(&c);
    test_cache(&c);
    test_threads(&c);
    test_comm(&c);
    test_memory_hand();
    CHECK(cost_model_new(&c, NULL, 0, NULL, &err) == NULL && strstr(err.msg, "layer"), "no layers rejected");
    cluster_free(&c);
    printf("%s (%d failures)\n", failures ? "FAILED" : "ok", failures);
    return failures != 0;
}
