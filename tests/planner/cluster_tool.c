/* Test helper for the cluster / cost-model / output tests (driven by the
 * Python tests beside it, which hold the independent oracles):
 *   cluster_tool dump FILE.yaml               cluster as JSON (SI units)
 *   cluster_tool cost FILE.yaml L SEED ZERO IMB LOWER   synthetic layers + every candidate's cost
 *   cluster_tool output FILE.yaml DIR         outputs of a hand-made 3-stage plan
 *   cluster_tool plan FILE.yaml L B DIR       synthetic GPT layers -> cost model -> HAPT DP
 *                                             -> simulator -> outputs (imbalance pruning off)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost_model.h"
#include "hapt_dp.h"
#include "plan_output.h"
#include "simulate.h"
#include "planner.h"

static void pnum(double v)
{
    if (isfinite(v))
        printf("%.17g", v);
    else
        printf("null");
}

static int dump(const ClusterSpec *c)
{
    printf("{\"name\": \"%s\", \"dtype\": \"%s\", \"meshes\": [", c->name, c->dtype);
    for (int a = 0; a < c->nmeshes; a++) {
        const MeshSpec *m = &c->meshes[a];
        printf("%s{\"name\": \"%s\", \"device\": \"%s\", \"nodes\": %d, \"per_node\": %d, "
               "\"flops_fp32\": ", a ? ", " : "", m->name, m->dev.name, m->nodes, m->per_node);
        pnum(m->dev.flops_fp32);
        printf(", \"flops_fp16\": "); pnum(m->dev.flops_fp16);
        printf(", \"flops_bf16\": "); pnum(m->dev.flops_bf16);
        printf(", \"mem_bytes\": "); pnum(m->dev.mem_bytes);
        printf(", \"hbm_bw\": "); pnum(m->dev.hbm_bw);
        printf(", \"intra_bw\": "); pnum(m->intra_bw);
        printf(", \"intra_lat\": "); pnum(m->intra_lat);
        printf(", \"inter_bw\": "); pnum(m->inter_bw);
        printf(", \"inter_lat\": "); pnum(m->inter_lat);
        printf("}");
    }
    printf("], \"links\": [");
    for (int l = 0; l < c->nlinks; l++) {
        const LinkSpec *k = &c->links[l];
        printf("%s{\"a\": %d, \"b\": %d, \"bw\": ", l ? ", " : "", k->a, k->b);
        pnum(k->bw);
        printf(", \"lat\": "); pnum(k->lat);
        printf(", \"cpu_mediated\": %d}", k->cpu_mediated);
    }
    printf("], \"total_devices\": %d}\n", cluster_total_devices(c));
    return 0;
}

static double rnd(unsigned long *s)
{
    *s = *s * 6364136223846793005UL + 1442695040888963407UL;
    return (double)(*s >> 11) / 9007199254740992.0;
}

/* Synthetic layers: an embedding-like first layer, `L-2` layers cycling
 * through 3 block layer kinds, a head; figures depend only on the kind, as
 * PlanLayer's contract (equal sig => equal cost) requires. */
static void synth(PlanLayer *ly, int L, unsigned long seed)
{
    PlanLayer kinds[5];
    for (int k = 0; k < 5; k++) {
        double scale = 1 + 4 * rnd(&seed);
        kinds[k] = (PlanLayer){
            .fwd_flops = 2e12 * scale * (0.5 + rnd(&seed)),
            .param_bytes = 2e8 * (0.2 + rnd(&seed)),
            .act_bytes = 1e8 * (0.2 + rnd(&seed)),
            .out_bytes = 8e6 * (0.5 + rnd(&seed)),
            .heavy_ops = 1 + k % 3,
            .sig = 1000 + (uint64_t)k,
            .first_node = -1, .last_node = -1};
        kinds[k].bwd_flops = 2 * kinds[k].fwd_flops;
    }
    kinds[0].fwd_flops = 1e9;           /* memory-bound: tiny FLOPs, many bytes */
    kinds[0].bwd_flops = 2e9;
    kinds[0].param_bytes = 4e8;
    for (int l = 0; l < L; l++)
        ly[l] = l == 0 ? kinds[0] : l == L - 1 ? kinds[4] : kinds[1 + (l - 1) % 3];
}

static int cost(const ClusterSpec *c, int L, unsigned long seed, int zero, double imb, int lower)
{
    PlanLayer *ly = calloc((size_t)L, sizeof *ly);
    synth(ly, L, seed);
    CostOptions o;
    cost_options_default(&o);
    o.zero_stage = zero;
    o.imbalance_threshold = imb;
    o.imbalance_lower = lower;
    IrError err = {{0}};
    CostModel *cm = cost_model_new(c, ly, L, &o, &err);
    if (!cm) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (cost_model_profile_all(cm, NULL, NULL)) {
        fprintf(stderr, "profile failed\n");
        return 1;
    }
    printf("{\"options\": {\"efficiency\": %.17g, \"imbalance_threshold\": %.17g, \"pcie_bw\": %.17g, "
           "\"runtime_reserve_bytes\": %.17g, \"zero_stage\": %d, \"imbalance_lower\": %d},\n \"layers\": [",
           o.efficiency, o.imbalance_threshold, o.pcie_bw, o.runtime_reserve_bytes, o.zero_stage,
           o.imbalance_lower);
    for (int l = 0; l < L; l++)
        printf("%s{\"fwd_flops\": %.17g, \"bwd_flops\": %.17g, \"param_bytes\": %.17g, "
               "\"act_bytes\": %.17g, \"out_bytes\": %.17g, \"sig\": %llu}",
               l ? ", " : "", ly[l].fwd_flops, ly[l].bwd_flops, ly[l].param_bytes, ly[l].act_bytes,
               ly[l].out_bytes, (unsigned long long)ly[l].sig);
    printf("],\n \"stages\": [");
    int first = 1;
    for (int a = 0; a < c->nmeshes; a++) {
        Submesh subs[64];
        int ns = submesh_enumerate(c->meshes[a].nodes, c->meshes[a].per_node, subs, 64);
        for (int s = 0; s < ns && s < 64; s++)
            for (int k = 1; k <= L; k++)
                for (int i = k; i <= L; i++) {
                    StageCost sc;
                    if (cost_model_stage(cm, k, i, a, subs[s], &sc))
                        return 1;
                    printf("%s\n{\"k\": %d, \"i\": %d, \"mesh\": %d, \"n\": %d, \"m\": %d, \"t_f\": ",
                           first ? "" : ",", k, i, a, subs[s].n, subs[s].m);
                    pnum(sc.t_f);
                    printf(", \"t_b\": "); pnum(sc.t_b);
                    printf(", \"t_sync\": "); pnum(sc.t_sync);
                    printf(", \"mem_static\": "); pnum(sc.mem_static);
                    printf(", \"mem_act\": "); pnum(sc.mem_act);
                    printf(", \"dp\": %d, \"tp\": %d, \"feasible\": %d}", sc.dp, sc.tp, sc.feasible);
                    first = 0;
                }
    }
    printf("],\n \"comm\": [");
    first = 1;
    for (int i = 1; i <= L; i++)
        for (int a = 0; a < c->nmeshes; a++)
            for (int b = 0; b < c->nmeshes; b++) {
                printf("%s{\"i\": %d, \"a\": %d, \"b\": %d, \"t\": ", first ? "" : ", ", i, a, b);
                pnum(cost_model_comm(cm, i, a, b));
                printf("}");
                first = 0;
            }
    CostCounters k = cost_model_counters(cm);
    printf("],\n \"counters\": {\"total\": %ld, \"duplicates\": %ld, \"unique\": %ld, "
           "\"pruned_imbalance\": %ld, \"costed\": %ld, \"pruned_memory\": %ld}}\n",
           k.total, k.duplicates, k.unique, k.pruned_imbalance, k.costed, k.pruned_memory);
    cost_model_free(cm);
    free(ly);
    return 0;
}

/* A hand-made plan on a two-mesh cluster: three stages, stage 0 on mesh 1,
 * stages 1-2 on mesh 0, with a timeline of a small 1F1B-like iteration whose
 * events are laid out by simple arithmetic (not the simulator). */
static int output(const ClusterSpec *c, const char *dir)
{
    if (c->nmeshes < 2)
        return fprintf(stderr, "need two meshes\n"), 1;
    PlanStage st[3] = {
        {.first_layer = 1, .last_layer = 22, .mesh = 1, .sub = {1, 2}, .dp = 2, .tp = 1,
         .t_f = 1.13e-3, .t_b = 2.26e-3, .c_next = 4e-3, .warmup = 5, .delta = 3,
         .delta_beyond_paper = 1, .mem_pred = 20e9},
        {.first_layer = 23, .last_layer = 76, .mesh = 0, .sub = {1, 2}, .dp = 2, .tp = 1,
         .t_f = 1.10e-3, .t_b = 2.20e-3, .c_next = 1e-5, .warmup = 2, .delta = 1, .mem_pred = 30e9},
        {.first_layer = 77, .last_layer = 128, .mesh = 0, .sub = {1, 2}, .dp = 2, .tp = 1,
         .t_f = 1.10e-3, .t_b = 2.20e-3, .c_next = 0, .warmup = 1, .delta = 0, .mem_pred = 25e9},
    };
    int order[2] = {1, 0};
    Plan p = {.stages = st, .nstages = 3, .mesh_order = order, .nmesh_order = 2,
              .microbatches = 4, .t_max = 3.39e-3, .objective = 0.02, .schedule = SCHED_H1F1B,
              .eps = 0.1};
    /* GPipe-like layout: all forwards then all backwards, with sends. */
    TimelineEvent ev[64];
    int n = 0;
    double t = 0;
    for (int mb = 0; mb < 4; mb++)
        for (int s = 0; s < 3; s++) {
            double start = mb * st[0].t_f + s * 1.2e-3 + (s > 0 ? 4e-3 : 0);
            ev[n++] = (TimelineEvent){.stage = s, .kind = 'F', .mb = mb, .start = start,
                                      .end = start + st[s].t_f};
            if (s < 2)
                ev[n++] = (TimelineEvent){.stage = s, .kind = 'S', .mb = mb, .start = start + st[s].t_f,
                                          .end = start + st[s].t_f + st[s].c_next};
            if (start + st[s].t_f > t)
                t = start + st[s].t_f;
        }
    for (int mb = 0; mb < 4; mb++)
        for (int s = 2; s >= 0; s--) {
            double start = t + mb * st[0].t_b + (2 - s) * 2.3e-3;
            ev[n++] = (TimelineEvent){.stage = s, .kind = 'B', .mb = mb, .start = start,
                                      .end = start + st[s].t_b};
            if (s > 0)
                ev[n++] = (TimelineEvent){.stage = s, .kind = 'R', .mb = mb, .start = start + st[s].t_b,
                                          .end = start + st[s].t_b + st[s - 1].c_next};
        }
    double end = 0;
    for (int i = 0; i < n; i++)
        if (ev[i].end > end)
            end = ev[i].end;
    ev[n++] = (TimelineEvent){.stage = 0, .kind = 'A', .mb = -1, .start = end, .end = end + 1e-3};
    CostCounters k = {.total = 100, .duplicates = 60, .unique = 40, .pruned_imbalance = 10,
                      .costed = 30, .pruned_memory = 5};
    PlanOutputInfo info = {.model = "gpt \"tiny\"\\test", .global_batch = 64, .seq = 1024,
                           .counters = &k};
    IrError err = {{0}};
    if (plan_write_outputs(dir, &p, c, &info, ev, n, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("{\"events\": %d}\n", n);
    return 0;
}

/* The whole chain on synthetic GPT-like layers (hidden 2048, microbatch
 * 4 x 1024 tokens, fp16): the outputs then hold a real DP plan and real
 * simulator events. */
static int plan_chain(const ClusterSpec *c, int L, int B, const char *dir)
{
    if (L < 2 || B < 1)
        return 2;
    PlanLayer *ly = calloc((size_t)L, sizeof *ly);
    double h = 2048, tok = 4 * 1024, pb = 12 * h * h * 2 * 4.0 / L;
    for (int l = 0; l < L; l++)
        ly[l] = (PlanLayer){.fwd_flops = tok * pb, .bwd_flops = 2 * tok * pb, .param_bytes = pb,
                            .act_bytes = tok * h * 2 * 16 * 4.0 / L, .out_bytes = tok * h * 2,
                            .heavy_ops = 2, .sig = 42, .first_node = -1, .last_node = -1};
    CostOptions co;
    cost_options_default(&co);
    co.imbalance_threshold = 0;
    IrError err = {{0}};
    CostModel *cm = cost_model_new(c, ly, L, &co, &err);
    int rc = 1;
    Plan p = {0};
    SimResult r = {0};
    double *sync = NULL;
    if (!cm || cost_model_profile_all(cm, NULL, NULL))
        goto out;
    CostOracle o = cost_model_oracle(cm);
    DpOptions dopt;
    dp_options_default(&dopt);
    dopt.microbatches = B;
    if (hapt_dp_plan(c, L, &o, &dopt, &p, NULL, &err))
        goto out;
    sync = calloc((size_t)p.nstages, sizeof *sync);
    for (int s = 0; s < p.nstages; s++) {
        StageCost sc;
        o.stage(o.ctx, p.stages[s].first_layer, p.stages[s].last_layer, p.stages[s].mesh,
                p.stages[s].sub, &sc);
        sync[s] = sc.t_sync;
    }
    if (simulate_plan(&p, sync, &r, &err))
        goto out;
    CostCounters k = cost_model_counters(cm);
    PlanOutputInfo info = {.model = "synthetic GPT", .global_batch = 4L * B, .seq = 1024, .counters = &k};
    if (plan_write_outputs(dir, &p, c, &info, r.events, r.nevents, &err))
        goto out;
    printf("{\"events\": %d, \"iter_time\": %.17g, \"layers\": %d}\n", r.nevents, r.iter_time, L);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    if (r.events)
        sim_result_free(&r);
    if (p.stages)
        plan_free(&p);
    free(sync);
    cost_model_free(cm);
    free(ly);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return fprintf(stderr, "usage: cluster_tool dump|cost|output FILE ...\n"), 2;
    ClusterSpec c;
    IrError err = {{0}};
    if (cluster_load_yaml(argv[2], &c, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int rc = 2;
    if (strcmp(argv[1], "dump") == 0)
        rc = dump(&c);
    else if (strcmp(argv[1], "cost") == 0 && argc == 8)
        rc = cost(&c, atoi(argv[3]), strtoul(argv[4], NULL, 10), atoi(argv[5]), atof(argv[6]), atoi(argv[7]));
    else if (strcmp(argv[1], "output") == 0 && argc == 4)
        rc = output(&c, argv[3]);
    else if (strcmp(argv[1], "plan") == 0 && argc == 6)
        rc = plan_chain(&c, atoi(argv[3]), atoi(argv[4]), argv[5]);
    cluster_free(&c);
    return rc;
}
