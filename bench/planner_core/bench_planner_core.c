/* Micro-benchmark of the HAPT DP (passes/planner/hapt_dp.c) on a synthetic
 * GPT-39B-like instance on HAPT's Table 2 cluster.  Prints figures; asserts
 * nothing about time.
 *
 *   model: Alpa's GPT-39B (48 blocks, hidden 8192, seq 1024), microbatch 8
 *          sequences, global batch 1024 -> B = 128; every block cut into
 *          (L - 2) / 48 fine-grained layers (+ embedding and head layers);
 *   cluster: 4 nodes x 8 A100-40GB (312 TFLOP/s FP16) and 4 x 8 V100-32GB
 *          (125 TFLOP/s), 200 Gbps between nodes, 5 Gbps across the meshes;
 *   oracle: a roofline-like table (50 % of peak, a per-device efficiency
 *          that drops across nodes, params + grads + Adam states sharded
 *          over the submesh).  It stands in for the cost model so that this
 *          measures the DP alone; bench/planner measures the whole pipeline.
 *
 * usage: bench_planner_core [L ...]          (default: 146 200), 1 and 2 threads
 *        bench_planner_core ablate [L]     each optimisation of §5.2.2 off in turn
 *                                          (default L = 60: without pruning every
 *                                          t_max candidate runs the full DP)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hapt_dp.h"

typedef struct Syn {
    int L;
    double *fw;             /* [L+1] forward FLOPs per layer, prefix sums */
    double *par;            /* prefix sums of parameter counts */
    double *act;            /* prefix sums of saved activation bytes */
    double out_bytes;       /* boundary tensor per microbatch */
    const ClusterSpec *c;
} Syn;

static int syn_stage(void *ctx, int k, int i, int mesh, Submesh sub, StageCost *o)
{
    const Syn *s = ctx;
    const MeshSpec *m = &s->c->meshes[mesh];
    double g = sub.n * sub.m;
    /* efficiency: 1 inside a node, 0.85 across nodes (gradient sync and
     * activation exchange over 200 Gbps) */
    double eff = 0.5 * (sub.n > 1 ? 0.85 : 1.0) * (g > 1 ? 0.95 : 1.0);
    double f = s->fw[i] - s->fw[k - 1];
    memset(o, 0, sizeof *o);
    o->t_f = f / (g * m->dev.flops_fp16 * eff);
    o->t_b = 2.0 * o->t_f;
    o->mem_static = 16.0 * (s->par[i] - s->par[k - 1]) / g + 1.0e9;
    o->mem_act = (s->act[i] - s->act[k - 1]) / g;
    o->dp = (int)g;
    o->tp = 1;
    o->feasible = o->mem_static + o->mem_act <= m->dev.mem_bytes;
    return 0;
}

static double syn_comm(void *ctx, int i, int a, int b)
{
    const Syn *s = ctx;
    const MeshSpec *m = &s->c->meshes[a];
    if (a == b)
        return s->out_bytes / m->inter_bw + m->inter_lat;
    return s->out_bytes / s->c->links[0].bw + s->c->links[0].lat;
}

static void build(Syn *s, int L, const ClusterSpec *c)
{
    const double h = 8192, seq = 1024, mb = 8, vocab = 51200;
    const int blocks = 48;
    s->L = L;
    s->c = c;
    s->fw = calloc((size_t)L + 1, sizeof *s->fw);
    s->par = calloc((size_t)L + 1, sizeof *s->par);
    s->act = calloc((size_t)L + 1, sizeof *s->act);
    int per = (L - 2) / blocks, extra = (L - 2) % blocks;
    /* layer 1: embedding; last: head; in between the blocks' layers */
    double tok = mb * seq;
    int l = 1;
    s->fw[l] = 2 * tok * h; /* gather + positional: tiny */
    s->par[l] = vocab * h;
    s->act[l] = tok * h * 2;
    l++;
    for (int bk = 0; bk < blocks; bk++) {
        int n = per + (bk < extra);
        double bf = 24 * tok * h * h + 4 * tok * seq * h, bp = 12 * h * h,
               ba = tok * h * 2 * 17; /* bf16 saved tensors of a block */
        for (int q = 0; q < n; q++, l++) {
            s->fw[l] = bf / n;
            s->par[l] = bp / n;
            s->act[l] = ba / n;
        }
    }
    s->fw[l] = 2 * tok * h * vocab;
    s->par[l] = vocab * h;
    s->act[l] = tok * vocab * 2;
    for (int q = 1; q <= L; q++) {
        s->fw[q] += s->fw[q - 1];
        s->par[q] += s->par[q - 1];
        s->act[q] += s->act[q - 1];
    }
    s->out_bytes = tok * h * 2;
}

static int run_one(const ClusterSpec *c, int L, const DpOptions *opt, const char *label)
{
    Syn s;
    build(&s, L, c);
    CostOracle o = {&s, syn_stage, syn_comm};
    Plan p;
    DpStats st;
    IrError err;
    int rc = hapt_dp_plan(c, L, &o, opt, &p, &st, &err);
    if (rc)
        fprintf(stderr, "L = %d: %s\n", L, err.msg);
    else {
        printf("%-22s L=%d threads=%d: dp %.3f s, %ld t_max candidates, %ld full DPs, "
               "%ld pruned low, %ld pruned high, %ld pruned by bound, objective %.6f s\n",
               label, L, opt->threads, st.seconds, st.tmax_candidates, st.tmax_evaluated,
               st.tmax_pruned_low, st.tmax_pruned_high, st.tmax_pruned_bound, p.objective);
        plan_free(&p);
    }
    free(s.fw);
    free(s.par);
    free(s.act);
    return rc;
}

static void make_cluster(ClusterSpec *c, MeshSpec *m, LinkSpec *link);

int main(int argc, char **argv)
{
    int Ls[16], nL = 0;
    if (argc > 1 && strcmp(argv[1], "ablate") == 0) {
        MeshSpec m[2];
        LinkSpec link;
        ClusterSpec c;
        make_cluster(&c, m, &link);
        int L = argc > 2 ? atoi(argv[2]) : 60;
        if (L < 50 || L > 400)
            return 2;
        static const char *const names[] = {"all on", "sparse index off", "t_max pruning off",
                                            "both off"};
        for (int v = 0; v < 4; v++) {
            DpOptions opt;
            dp_options_default(&opt);
            opt.microbatches = 128;
            opt.sparse_index = !(v & 1);
            opt.prune_tmax = !(v & 2);
            if (run_one(&c, L, &opt, names[v]))
                return 1;
        }
        return 0;
    }
    for (int a = 1; a < argc && nL < 16; a++)
        Ls[nL++] = atoi(argv[a]);
    if (nL == 0) {
        Ls[nL++] = 146;
        Ls[nL++] = 200;
    }
    MeshSpec m[2];
    LinkSpec link;
    ClusterSpec c;
    make_cluster(&c, m, &link);

    printf("HAPT DP micro-benchmark: GPT-39B-like, Table 2 cluster (4x8 A100 + 4x8 V100, "
           "5 Gbps across), B = 128\n");
    printf("%5s %7s %10s %9s %9s %8s %8s %8s %8s %12s %12s %7s\n", "L", "threads",
           "tabulate_s", "dp_s", "t_cands", "evald", "pruneLo", "pruneHi", "pruneLB",
           "transitions", "objective_s", "stages");
    for (int q = 0; q < nL; q++) {
        int L = Ls[q];
        if (L < 50 || L > 400) {
            fprintf(stderr, "L = %d outside 50..400\n", L);
            return 2;
        }
        Syn s;
        build(&s, L, &c);
        CostOracle o = {&s, syn_stage, syn_comm};
        for (int th = 1; th <= 2; th++) {
            DpOptions opt;
            dp_options_default(&opt);
            opt.microbatches = 128;
            opt.threads = th;
            Plan p;
            DpStats st;
            IrError err;
            if (hapt_dp_plan(&c, L, &o, &opt, &p, &st, &err)) {
                fprintf(stderr, "L = %d: %s\n", L, err.msg);
                return 1;
            }
            printf("%5d %7d %10.3f %9.3f %9ld %8ld %8ld %8ld %8ld %12ld %12.4f %7d\n", L, th,
                   st.seconds_tabulate, st.seconds, st.tmax_candidates, st.tmax_evaluated,
                   st.tmax_pruned_low, st.tmax_pruned_high, st.tmax_pruned_bound,
                   st.transitions, p.objective, p.nstages);
            if (th == 1) {
                printf("      plan (t_max %.4f s):", p.t_max);
                for (int z = 0; z < p.nstages; z++)
                    printf(" [%d-%d %s(%d,%d) N=%d]", p.stages[z].first_layer,
                           p.stages[z].last_layer, m[p.stages[z].mesh].name, p.stages[z].sub.n,
                           p.stages[z].sub.m, p.stages[z].warmup);
                printf("\n");
            }
            plan_free(&p);
        }
        free(s.fw);
        free(s.par);
        free(s.act);
    }
    return 0;
}

/* HAPT Table 2: 4 nodes x 8 A100-40GB and 4 x 8 V100-32GB, 200 Gbps between
 * nodes, 5 Gbps across the two meshes. */
static void make_cluster(ClusterSpec *c, MeshSpec *m, LinkSpec *link)
{
    memset(m, 0, 2 * sizeof *m);
    snprintf(m[0].name, sizeof m[0].name, "A100");
    snprintf(m[0].dev.name, sizeof m[0].dev.name, "A100-40GB");
    m[0].dev.flops_fp16 = m[0].dev.flops_bf16 = 312e12;
    m[0].dev.mem_bytes = 40e9;
    snprintf(m[1].name, sizeof m[1].name, "V100");
    snprintf(m[1].dev.name, sizeof m[1].dev.name, "V100-32GB");
    m[1].dev.flops_fp16 = m[1].dev.flops_bf16 = 125e12;
    m[1].dev.mem_bytes = 32e9;
    for (int a = 0; a < 2; a++) {
        m[a].nodes = 4;
        m[a].per_node = 8;
        m[a].intra_bw = 300e9;
        m[a].inter_bw = 200e9 / 8;
        m[a].inter_lat = 5e-6;
    }
    *link = (LinkSpec){0, 1, 5e9 / 8, 1e-4, 0};
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "hapt-table2");
    strcpy(c->dtype, "fp16");
    c->meshes = m;
    c->nmeshes = 2;
    c->links = link;
    c->nlinks = 1;
}
