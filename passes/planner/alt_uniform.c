/* The two baselines of issue 8 part 1.
 *
 * uniform: Megatron-LM style.  One (pp, dp, tp) for the whole pipeline,
 *   equal layer counts per stage, microbatch size 1 per DP replica, 1F1B,
 *   chosen as a homogeneous planner would: every stage is assumed to run on
 *   the slowest device type and hold only the smallest device memory.
 *   Stages then take dp x tp devices from the meshes in cluster order
 *   (a stage never spans two meshes; devices left over stay idle).
 * coarse: HAPT's own DP (hapt_dp.c) over layers merged into
 *   AltContext.coarse_layers contiguous groups of equal layer count: the
 *   Alpa-like (8 / 16) or HexiScale-like (one per block) granularity that
 *   HAPT §6.5 argues against.  The stage boundaries are mapped back onto
 *   the fine layers so the plan is costed like every other.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alt_plan.h"
#include "hapt_dp.h"

static void equal_counts(int L, int S, int *cnt)
{
    for (int s = 0; s < S; s++)
        cnt[s] = (int)((long)(s + 1) * L / S - (long)s * L / S);
}

int alt_plan_uniform(const AltContext *x, AltPlan *out, IrError *err)
{
    const ClusterSpec *c = x->c;
    int slow = 0, small = 0, tpcap = 1 << 20;
    for (int a = 0; a < c->nmeshes; a++) {
        if (device_peak_flops(&c->meshes[a].dev, c->dtype) <
            device_peak_flops(&c->meshes[slow].dev, c->dtype))
            slow = a;
        if (c->meshes[a].dev.mem_bytes < c->meshes[small].dev.mem_bytes)
            small = a;
        if (c->meshes[a].per_node < tpcap)
            tpcap = c->meshes[a].per_node;
    }
    if (x->tp_max > 0 && x->tp_max < tpcap)
        tpcap = x->tp_max;
    double memcap = c->meshes[small].dev.mem_bytes;
    int *cnt = calloc((size_t)x->L, sizeof *cnt);
    if (!cnt)
        return ir_errorf(err, "uniform: out of memory");
    double best = INFINITY, closest = INFINITY;
    int bpp = 0, bdp = 0, btp = 0;
    long steps = 0;
    for (int tp = 1; tp <= tpcap; tp *= 2)
        for (int dp = 1; dp * tp <= cluster_total_devices(c); dp++) {
            if (x->samples % dp)
                continue;
            int g = dp * tp, groups = 0;
            for (int a = 0; a < c->nmeshes; a++)   /* beyond one node, whole nodes */
                if (g <= c->meshes[a].per_node || g % c->meshes[a].per_node == 0)
                    groups += c->meshes[a].nodes * c->meshes[a].per_node / g;
            int B = x->samples / dp;
            for (int pp = 1; pp <= groups && pp <= x->L; pp++) {
                equal_counts(x->L, pp, cnt);
                double t = 0, sync = 0, worst = 0;
                int l = 1, ok = 1;
                for (int s = 0; s < pp && ok; s++) {
                    StageCost sc;
                    /* sized for the slowest device; memory of the smallest one */
                    if (alt_stage_cost(x, l, l + cnt[s] - 1, slow, dp, tp, 0, 0, 0, 1.0, &sc)) {
                        ok = 0;
                        break;
                    }
                    int K = pp - s < B ? pp - s : B;
                    double need = (sc.mem_static + K * sc.mem_act) / memcap;
                    if (need > worst)
                        worst = need;
                    if (sc.t_f + sc.t_b > t)
                        t = sc.t_f + sc.t_b;
                    if (sc.t_sync > sync)
                        sync = sc.t_sync;
                    l += cnt[s];
                }
                steps++;
                if (!ok)
                    continue;
                if (worst > 1) {
                    if (worst < closest)
                        closest = worst;
                    continue;
                }
                double T = (B - 1 + pp) * t + sync;   /* 1F1B on equal stages */
                if (T < best) {
                    best = T;
                    bpp = pp;
                    bdp = dp;
                    btp = tp;
                }
            }
        }
    if (!bpp) {
        free(cnt);
        return ir_errorf(err, "uniform: no feasible plan: memory: with every stage sized for the "
                         "smallest device (%s, %.1f GiB) the best equal split needs %.0f%% of it "
                         "(TP <= %d, microbatch 1 per replica)", c->meshes[small].dev.name,
                         memcap / 1073741824.0, 100 * closest, tpcap);
    }
    if (alt_plan_init(out, "uniform", bpp, err)) {
        free(cnt);
        return -1;
    }
    equal_counts(x->L, bpp, cnt);
    alt_assign_layers(out, cnt);
    free(cnt);
    int a = 0, usedA = 0, g = bdp * btp;
    for (int s = 0; s < bpp; s++) {
        while (c->meshes[a].nodes * c->meshes[a].per_node - usedA < g ||
               (g > c->meshes[a].per_node && g % c->meshes[a].per_node)) {
            a++;
            usedA = 0;
        }
        alt_stage_single(&out->stages[s], a, g, bdp, btp, 0);
        usedA += g;
    }
    out->microbatches = x->samples / bdp;
    out->mb_samples = bdp;
    out->schedule = SCHED_1F1B;
    out->objective = best;
    out->steps = steps;
    return alt_plan_eval(x, out, err);
}

int alt_plan_coarse(const AltContext *x, AltPlan *out, IrError *err)
{
    int Lc = x->coarse_layers > 0 && x->coarse_layers < x->L ? x->coarse_layers : x->L;
    PlanLayer *cl = calloc((size_t)Lc, sizeof *cl);
    int *first = calloc((size_t)Lc + 1, sizeof *first);
    if (!cl || !first) {
        free(cl);
        free(first);
        return ir_errorf(err, "coarse: out of memory");
    }
    for (int q = 0; q < Lc; q++) {
        int a = (int)((long)q * x->L / Lc) + 1, b = (int)((long)(q + 1) * x->L / Lc);
        first[q] = a;
        PlanLayer *p = &cl[q];
        uint64_t h = 1469598103934665603ull;
        for (int l = a; l <= b; l++) {
            const PlanLayer *f = &x->layers[l - 1];
            p->fwd_flops += f->fwd_flops;
            p->bwd_flops += f->bwd_flops;
            p->lp_fwd_flops += f->lp_fwd_flops;
            p->lp_bwd_flops += f->lp_bwd_flops;
            p->param_bytes += f->param_bytes;
            p->act_bytes += f->act_bytes;
            p->heavy_ops += f->heavy_ops;
            p->out_bytes = f->out_bytes;
            h = (h ^ f->sig) * 1099511628211ull;
        }
        p->sig = h ^ (uint64_t)(b - a);
        p->first_node = p->last_node = -1;
    }
    first[Lc] = x->L + 1;
    CostOptions co = x->co;
    co.db = NULL;
    /* the pipeline microbatch is one PlanLayer microbatch (mb_samples 1):
     * a submesh of more devices than its rows has a DP rank without a row
     * (tp is 1 here), so such a candidate is infeasible */
    co.dp_max_rows = x->rows > 0 ? x->rows : 0;
    int rc = -1;
    CostModel *cm = cost_model_new(x->c, cl, Lc, &co, err);
    Plan hp;
    memset(&hp, 0, sizeof hp);
    if (!cm)
        goto out;
    CostOracle o = cost_model_oracle(cm);
    DpOptions dopt;
    dp_options_default(&dopt);
    dopt.microbatches = x->samples;
    dopt.eps = x->eps;
    dopt.schedule = SCHED_H1F1B;
    dopt.tmax_comm_candidates = 1;
    dopt.threads = x->threads > 0 ? x->threads : 1;
    dopt.batch = dopt.threads;
    DpStats st;
    memset(&st, 0, sizeof st);
    if (hapt_dp_plan(x->c, Lc, &o, &dopt, &hp, &st, err)) {
        CostCounters cc = cost_model_counters(cm);
        if (cc.pruned_rows > 0) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s; %ld of %ld candidates are infeasible because their "
                     "dp (the submesh's devices, tp 1) exceeds the %d rows of a microbatch",
                     err->msg, cc.pruned_rows, cc.costed, x->rows);
            snprintf(err->msg, sizeof err->msg, "%s", why);
        }
        ir_error_prefix(err, "coarse (%d layers): no feasible plan", Lc);
        goto out;
    }
    if (alt_plan_init(out, "coarse", hp.nstages, err))
        goto out;
    for (int s = 0; s < hp.nstages; s++) {
        const PlanStage *ps = &hp.stages[s];
        AltStage *as = &out->stages[s];
        int dev = ps->sub.n * ps->sub.m;
        alt_stage_single(as, ps->mesh, dev, dev, 1, 0);
        as->first_layer = first[ps->first_layer - 1];
        as->last_layer = first[ps->last_layer] - 1;
    }
    out->microbatches = x->samples;
    out->mb_samples = 1;
    out->schedule = SCHED_H1F1B;
    out->eps = x->eps;
    out->objective = hp.objective;
    out->steps = st.tmax_evaluated;
    rc = alt_plan_eval(x, out, err);
out:
    plan_free(&hp);
    cost_model_free(cm);
    free(cl);
    free(first);
    return rc;
}

/* HexiScale-like: HAPT's DP over whole blocks (alt_plan_run hands this
 * planner the block view, so coarse_layers = L merges nothing more). */
int alt_plan_coarse_blocks(const AltContext *x, AltPlan *out, IrError *err)
{
    AltContext bx = *x;
    bx.coarse_layers = x->L;
    int rc = alt_plan_coarse(&bx, out, err);
    if (rc == 0)
        snprintf(out->planner, sizeof out->planner, "coarse-blocks");
    return rc;
}
