/* AltPlan evaluation, validity check, conversion and the planner registry
 * (alt_plan.h). */
#include "alt_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hapt_dp.h"
#include "planners.h"
#include "simulate.h"

int alt_planner_known(const char *name)
{
    const PlannerDef *p = planner_find(name);
    return p && p->layers;
}

void alt_plan_free(AltPlan *p)
{
    if (!p)
        return;
    free(p->stages);
    p->stages = NULL;
    p->nstages = 0;
}

int alt_plan_init(AltPlan *p, const char *planner, int S, IrError *err)
{
    memset(p, 0, sizeof *p);
    snprintf(p->planner, sizeof p->planner, "%s", planner);
    if (S < 1)
        return ir_errorf(err, "%s: a plan needs at least one stage", planner);
    p->stages = calloc((size_t)S, sizeof *p->stages);
    if (!p->stages)
        return ir_errorf(err, "%s: out of memory", planner);
    p->nstages = S;
    p->schedule = SCHED_1F1B;
    p->eps = 0.1;
    p->mb_samples = 1;
    return 0;
}

void alt_assign_layers(AltPlan *p, const int *cnt)
{
    int l = 1;
    for (int s = 0; s < p->nstages; s++) {
        p->stages[s].first_layer = l;
        l += cnt[s];
        p->stages[s].last_layer = l - 1;
    }
}

void alt_stage_single(AltStage *s, int mesh, int devices, int dp, int tp, int recompute)
{
    s->nparts = 1;
    s->parts[0].mesh = mesh;
    s->parts[0].devices = devices;
    s->parts[0].share = 1.0;
    s->dp = dp;
    s->tp = tp;
    s->recompute = recompute;
}

static int stage_devices(const AltStage *s)
{
    int n = 0;
    for (int j = 0; j < s->nparts; j++)
        n += s->parts[j].devices;
    return n;
}

/* Structure only: layers, devices, degrees, shares, batch. */
static int check_structure(const AltContext *x, const AltPlan *p, IrError *err)
{
    const ClusterSpec *c = x->c;
    if (p->nstages < 1 || !p->stages)
        return ir_errorf(err, "%s: plan has no stages", p->planner);
    if (p->microbatches < 1 || !(p->mb_samples > 0))
        return ir_errorf(err, "%s: %d microbatches of %g samples", p->planner, p->microbatches,
                         p->mb_samples);
    if (fabs(p->microbatches * p->mb_samples - x->samples) > 1e-9 * x->samples)
        return ir_errorf(err, "%s: %d microbatches x %g samples != global batch %d", p->planner,
                         p->microbatches, p->mb_samples, x->samples);
    int *used = calloc((size_t)c->nmeshes, sizeof *used);
    if (!used)
        return ir_errorf(err, "%s: out of memory", p->planner);
    int next = 1, rc = 0;
    for (int s = 0; s < p->nstages && !rc; s++) {
        const AltStage *st = &p->stages[s];
        if (st->first_layer != next || st->last_layer < st->first_layer || st->last_layer > x->L)
            rc = ir_errorf(err, "%s: stage %d holds layers %d..%d, expected to start at %d (L = %d)",
                           p->planner, s, st->first_layer, st->last_layer, next, x->L);
        next = st->last_layer + 1;
        if (rc)
            break;
        if (st->nparts < 1 || st->nparts > ALT_MAX_PARTS)
            rc = ir_errorf(err, "%s: stage %d has %d device parts", p->planner, s, st->nparts);
        double share = 0;
        for (int j = 0; j < st->nparts && !rc; j++) {
            const AltPart *pt = &st->parts[j];
            if (pt->mesh < 0 || pt->mesh >= c->nmeshes || pt->devices < 1 || !(pt->share > 0))
                rc = ir_errorf(err, "%s: stage %d part %d: mesh %d, %d devices, share %g", p->planner,
                               s, j, pt->mesh, pt->devices, pt->share);
            else {
                /* ministages of one group share devices: count the group once */
                int seen = 0;
                for (int q = 0; q < s && st->group > 0; q++)
                    seen |= p->stages[q].group == st->group;
                if (!seen)
                    used[pt->mesh] += pt->devices;
                share += pt->share;
                if (pt->devices % st->tp)
                    rc = ir_errorf(err, "%s: stage %d: %d devices of mesh %s not a multiple of tp %d",
                                   p->planner, s, pt->devices, c->meshes[pt->mesh].name, st->tp);
            }
        }
        if (rc)
            break;
        if (fabs(share - 1) > 1e-9)
            rc = ir_errorf(err, "%s: stage %d: microbatch shares sum to %g, not 1", p->planner, s, share);
        else if (st->dp < 1 || st->tp < 1 || st->dp * st->tp != stage_devices(st))
            rc = ir_errorf(err, "%s: stage %d: dp %d x tp %d != %d devices", p->planner, s, st->dp,
                           st->tp, stage_devices(st));
        else if (st->tp & (st->tp - 1))
            rc = ir_errorf(err, "%s: stage %d: tp %d is not a power of two", p->planner, s, st->tp);
        else
            for (int j = 0; j < st->nparts && !rc; j++) {
                const MeshSpec *m = &c->meshes[st->parts[j].mesh];
                int cap = x->tp_max > 0 && x->tp_max < m->per_node ? x->tp_max : m->per_node;
                if (st->tp > cap)
                    rc = ir_errorf(err, "%s: stage %d: tp %d exceeds the %d devices of a %s node",
                                   p->planner, s, st->tp, cap, m->name);
            }
    }
    if (!rc && next != x->L + 1)
        rc = ir_errorf(err, "%s: stages end at layer %d, the model has %d", p->planner, next - 1, x->L);
    for (int a = 0; a < c->nmeshes && !rc; a++)
        if (used[a] > c->meshes[a].nodes * c->meshes[a].per_node)
            rc = ir_errorf(err, "%s: mesh %s: %d devices used, it has %d", p->planner,
                           c->meshes[a].name, used[a], c->meshes[a].nodes * c->meshes[a].per_node);
    free(used);
    return rc;
}

/* Per part cost of a stage (see alt_plan.h: frac = mb x share / part's DP ranks). */
static int part_cost(const AltContext *x, const AltPlan *p, const AltStage *st, int j, StageCost *sc)
{
    const AltPart *pt = &st->parts[j];
    int dpj = pt->devices / st->tp;
    double frac = p->mb_samples * pt->share / dpj;
    int rc = alt_stage_cost(x, st->first_layer, st->last_layer, pt->mesh, dpj, st->tp,
                            st->recompute, p->zero_stage, st->dp, frac, sc);
    if (rc == 0 && p->offload) {
        /* Zorse (seed 000 §4.1, §5): optimizer states and every ministage
         * not in use live on the host; the device holds the training-dtype
         * weights and gradients of the ministage it computes and of the one
         * it prefetches, and (activation offload) the working activations
         * of at most 2 microbatches. */
        double params = 0;
        for (int l = st->first_layer; l <= st->last_layer; l++)
            params += x->layers[l - 1].param_bytes;
        sc->mem_static = 2.0 * 2.0 * (params / st->tp) + x->co.runtime_reserve_bytes;
        sc->feasible = sc->mem_static + sc->mem_act <= x->c->meshes[pt->mesh].dev.mem_bytes;
    }
    return rc;
}

double alt_sim_grouped(const AltPlan *p)
{
    int S = p->nstages, B = p->microbatches;
    int G = 0;
    for (int s = 0; s < S; s++)
        if (p->stages[s].group > G)
            G = p->stages[s].group;
    double *fdone = calloc((size_t)S * B, sizeof *fdone), *bdone = calloc((size_t)S * B, sizeof *bdone);
    double *gfree = calloc((size_t)G + 1, sizeof *gfree);
    double *pcie = calloc((size_t)G + 1, sizeof *pcie), *cstart = calloc((size_t)G + 1, sizeof *cstart);
    double end = 0;
    if (!fdone || !bdone || !gfree || !pcie || !cstart)
        goto out;
    /* Forward: stages in pipeline order; a group runs its ministages in that
     * order, all microbatches each, so walking stages in order and keeping
     * a per-group clock respects both the device order and the data deps. */
    for (int s = 0; s < S; s++) {
        int g = p->stages[s].group;
        /* prefetch: the load starts once the previous ministage started computing */
        double ld = fmax(pcie[g], cstart[g]) + p->stages[s].t_load_f;
        pcie[g] = ld;
        for (int m = 0; m < B; m++) {
            double ready = s ? fdone[(size_t)(s - 1) * B + m] + p->stages[s - 1].c_next : 0;
            double st = fmax(fmax(ready, gfree[g]), ld);
            if (m == 0)
                cstart[g] = st;
            fdone[(size_t)s * B + m] = st + p->stages[s].t_f;
            gfree[g] = fdone[(size_t)s * B + m];
        }
    }
    for (int s = S - 1; s >= 0; s--) {
        int g = p->stages[s].group;
        double ld = fmax(pcie[g], cstart[g]) + p->stages[s].t_load_b;
        pcie[g] = ld;
        for (int m = 0; m < B; m++) {
            double ready = s + 1 < S ? bdone[(size_t)(s + 1) * B + m] + p->stages[s].c_next
                                     : fdone[(size_t)s * B + m];
            double st = fmax(fmax(ready, gfree[g]), ld);
            if (m == 0)
                cstart[g] = st;
            bdone[(size_t)s * B + m] = st + p->stages[s].t_b;
            gfree[g] = bdone[(size_t)s * B + m];
        }
        /* interleaved update: this ministage's sync overlaps what follows */
        double e = gfree[g] + (isfinite(p->stages[s].t_sync) ? p->stages[s].t_sync : 0);
        if (e > end)
            end = e;
    }
    for (int g = 0; g <= G; g++)
        if (gfree[g] > end)
            end = gfree[g];
out:
    free(fdone);
    free(bdone);
    free(gfree);
    free(pcie);
    free(cstart);
    return end;
}

static double stage_sync(const AltContext *x, const AltStage *st, const StageCost *sc0)
{
    if (st->nparts == 1)
        return sc0->t_sync;
    /* A DP group across meshes: the ring runs at its slowest hop. */
    double bw = INFINITY, lat = 0;
    for (int j = 0; j < st->nparts; j++) {
        const MeshSpec *m = &x->c->meshes[st->parts[j].mesh];
        int one = st->parts[j].devices <= m->per_node;
        double b = one ? m->intra_bw : m->inter_bw, l = one ? m->intra_lat : m->inter_lat;
        if (st->parts[j].devices > 1 && b < bw)
            bw = b;
        if (l > lat)
            lat = l;
        for (int q = j + 1; q < st->nparts; q++) {
            if (st->parts[q].mesh == st->parts[j].mesh)
                continue;
            const LinkSpec *lk = cluster_link(x->c, st->parts[j].mesh, st->parts[q].mesh);
            double lb = lk ? lk->bw : 0;
            if (lk && lk->cpu_mediated)
                lb = 1.0 / (1.0 / lb + 2.0 / x->co.pcie_bw);
            if (lb < bw)
                bw = lb;
            if (lk && lk->lat > lat)
                lat = lk->lat;
        }
    }
    double params = 0;
    for (int l = st->first_layer; l <= st->last_layer; l++)
        params += x->layers[l - 1].param_bytes;
    int n = st->dp;
    if (n <= 1)
        return 0;
    if (!(bw > 0))
        return INFINITY;
    return 2.0 * (n - 1) / n * (params / st->tp) / bw + 2.0 * (n - 1) * lat;
}

static int eval_one(const AltContext *x, AltPlan *p, IrError *err)
{
    if (check_structure(x, p, err))
        return -1;
    int S = p->nstages, B = p->microbatches;
    double *c = calloc((size_t)S, sizeof *c);
    int *N = calloc((size_t)S, sizeof *N);
    SimStage *ss = calloc((size_t)S, sizeof *ss);
    int rc = 0;
    if (!c || !N || !ss) {
        rc = ir_errorf(err, "%s: out of memory", p->planner);
        goto out;
    }
    double tmax = 0;
    for (int s = 0; s < S && !rc; s++) {
        AltStage *st = &p->stages[s];
        st->t_f = st->t_b = 0;
        StageCost sc0;
        memset(&sc0, 0, sizeof sc0);
        for (int j = 0; j < st->nparts; j++) {
            StageCost sc;
            if (part_cost(x, p, st, j, &sc)) {
                rc = ir_errorf(err, "%s: stage %d part %d cannot be costed", p->planner, s, j);
                break;
            }
            if (j == 0)
                sc0 = sc;
            if (sc.t_f > st->t_f)
                st->t_f = sc.t_f;
            if (sc.t_b > st->t_b)
                st->t_b = sc.t_b;
        }
        st->t_sync = stage_sync(x, st, &sc0);
        st->t_load_f = st->t_load_b = 0;
        if (p->offload) {
            double params = 0;
            for (int l = st->first_layer; l <= st->last_layer; l++)
                params += x->layers[l - 1].param_bytes;
            st->t_load_f = params / st->tp / x->co.pcie_bw;   /* weights in */
            st->t_load_b = 2 * st->t_load_f;                   /* weights in, gradients out */
        }
        if (st->t_f + st->t_b > tmax)
            tmax = st->t_f + st->t_b;
        st->c_next = 0;
        if (s + 1 < S)
            for (int j = 0; j < st->nparts; j++)
                for (int q = 0; q < p->stages[s + 1].nparts; q++) {
                    double cc = alt_comm(x, st->last_layer, st->parts[j].mesh,
                                         p->stages[s + 1].parts[q].mesh, p->mb_samples);
                    if (cc > st->c_next)
                        st->c_next = cc;
                }
        c[s] = st->c_next;
        if (c[s] > tmax)
            tmax = c[s];   /* comm bound (ii), as the HAPT DP applies it */
    }
    if (rc)
        goto out;
    p->t_max = tmax;
    if (!isfinite(tmax)) {
        rc = ir_errorf(err, "%s: a stage boundary has no link", p->planner);
        goto out;
    }
    if (schedule_warmups(p->schedule, S, B, c, tmax, p->eps, N, NULL, NULL)) {
        rc = ir_errorf(err, "%s: cannot size warm-ups", p->planner);
        goto out;
    }
    p->feasible = 1;
    p->peak_ratio = 0;
    p->eq13 = (double)(B - 1) * tmax;
    for (int s = 0; s < S; s++) {
        AltStage *st = &p->stages[s];
        st->warmup = N[s];
        int K = p->offload && N[s] > 2 ? 2 : N[s];
        double worst = -1;
        for (int j = 0; j < st->nparts; j++) {
            StageCost sc;
            part_cost(x, p, st, j, &sc);
            double cap = x->c->meshes[st->parts[j].mesh].dev.mem_bytes;
            double peak = sc.mem_static + K * sc.mem_act;
            if (peak / cap > worst) {
                worst = peak / cap;
                st->tight_part = j;
                st->mem_static = sc.mem_static;
                st->mem_act = sc.mem_act;
                st->mem_peak = peak;
                st->mem_cap = cap;
            }
        }
        if (!stage_fits_memory(st->mem_static, st->mem_act, K, st->mem_cap))
            p->feasible = 0;
        if (worst > p->peak_ratio)
            p->peak_ratio = worst;
        p->eq13 += st->t_f + st->t_b + 2 * st->c_next;
        ss[s].t_f = st->t_f;
        ss[s].t_b = st->t_b;
        ss[s].c_next = ss[s].c_back = st->c_next;
        ss[s].t_sync = isfinite(st->t_sync) ? st->t_sync : 0;
        ss[s].mem_act = st->mem_act;
        ss[s].mem_static = st->mem_static;
    }
    if (p->stages[0].group > 0) {
        p->sim_time = alt_sim_grouped(p);
        goto out;
    }
    Schedule sched;
    if (schedule_build(S, B, N, &sched, err)) {
        rc = -1;
        goto out;
    }
    SimResult r;
    rc = simulate(ss, S, &sched, &r, err);
    schedule_free(&sched);
    if (rc == 0) {
        p->sim_time = r.iter_time;
        sim_result_free(&r);
    }
out:
    free(c);
    free(N);
    free(ss);
    return rc;
}

int alt_plan_rows(const AltContext *x, const AltPlan *p)
{
    if (x->rows <= 0)
        return 0;
    return (int)floor((double)x->rows * p->mb_samples + 1e-9);
}

int alt_plan_check_rows(const AltContext *x, const AltPlan *p, IrError *err)
{
    int rows = alt_plan_rows(x, p);
    for (int s = 0; s < p->nstages && rows > 0; s++)
        if (p->stages[s].dp > rows)
            return ir_errorf(err, "%s: stage %d (layers %d..%d): dp %d exceeds the %d rows of a "
                             "pipeline microbatch (a DP rank without a row)", p->planner, s,
                             p->stages[s].first_layer, p->stages[s].last_layer, p->stages[s].dp,
                             rows);
    return 0;
}

static int check_one(const AltContext *x, const AltPlan *p, IrError *err)
{
    if (check_structure(x, p, err) || alt_plan_check_rows(x, p, err))
        return -1;
    int prevN = p->microbatches;
    for (int s = 0; s < p->nstages; s++) {
        const AltStage *st = &p->stages[s];
        if (st->warmup < 1 || st->warmup > p->microbatches || st->warmup > prevN)
            return ir_errorf(err, "%s: stage %d: warm-up %d (B = %d, previous %d)", p->planner, s,
                             st->warmup, p->microbatches, prevN);
        prevN = st->warmup;
        int K = p->offload && st->warmup > 2 ? 2 : st->warmup;
        for (int j = 0; j < st->nparts; j++) {
            StageCost sc;
            if (part_cost(x, p, st, j, &sc))
                return ir_errorf(err, "%s: stage %d part %d cannot be costed", p->planner, s, j);
            const DeviceSpec *d = &x->c->meshes[st->parts[j].mesh].dev;
            if (!stage_fits_memory(sc.mem_static, sc.mem_act, K, d->mem_bytes))
                return ir_errorf(err, "%s: stage %d (layers %d..%d) on %s: %.2f GiB static + %d x "
                                 "%.2f GiB activations > %.2f GiB", p->planner, s, st->first_layer,
                                 st->last_layer, d->name, sc.mem_static / 1073741824.0, K,
                                 sc.mem_act / 1073741824.0, d->mem_bytes / 1073741824.0);
        }
    }
    return 0;
}

/* Pipelines of a multi-pipeline plan (AutoHet): stage ranges per pipe. */
static int pipe_ranges(const AltPlan *p, int *start, int *len, int cap)
{
    int n = 0;
    for (int s = 0; s < p->nstages; s++) {
        if (s == 0 || p->stages[s].pipe != p->stages[s - 1].pipe) {
            if (n == cap)
                return -1;
            start[n] = s;
            len[n] = 0;
            n++;
        }
        len[n - 1]++;
    }
    return n;
}

/* A view of pipeline q as a plan of its own, its share of the batch in *xq. */
static void pipe_view(const AltContext *x, const AltPlan *p, int start, int len, AltPlan *v,
                      AltContext *xq)
{
    *v = *p;
    v->stages = p->stages + start;
    v->nstages = len;
    v->microbatches = p->stages[start].pipe_microbatches;
    *xq = *x;
    xq->samples = (int)lround(v->microbatches * p->mb_samples);
}

static int multi_devices(const AltContext *x, const AltPlan *p, IrError *err)
{
    int *used = calloc((size_t)x->c->nmeshes, sizeof *used);
    if (!used)
        return ir_errorf(err, "%s: out of memory", p->planner);
    int rc = 0, total = 0;
    for (int s = 0; s < p->nstages; s++)
        for (int j = 0; j < p->stages[s].nparts; j++)
            used[p->stages[s].parts[j].mesh] += p->stages[s].parts[j].devices;
    for (int a = 0; a < x->c->nmeshes && !rc; a++)
        if (used[a] > x->c->meshes[a].nodes * x->c->meshes[a].per_node)
            rc = ir_errorf(err, "%s: mesh %s: %d devices used over all pipelines, it has %d",
                           p->planner, x->c->meshes[a].name, used[a],
                           x->c->meshes[a].nodes * x->c->meshes[a].per_node);
    for (int s = 0; s < p->nstages; s++)
        if (s == 0 || p->stages[s].pipe != p->stages[s - 1].pipe)
            total += p->stages[s].pipe_microbatches;
    if (!rc && fabs(total * p->mb_samples - x->samples) > 1e-9 * x->samples)
        rc = ir_errorf(err, "%s: pipelines take %g samples, the batch is %d", p->planner,
                       total * p->mb_samples, x->samples);
    free(used);
    return rc;
}

int alt_plan_eval(const AltContext *x, AltPlan *p, IrError *err)
{
    if (p->nstages < 1 || p->stages[0].pipe == 0)
        return eval_one(x, p, err);
    int start[256], len[256];
    int n = pipe_ranges(p, start, len, 256);
    if (n < 0)
        return ir_errorf(err, "%s: more than 256 pipelines", p->planner);
    if (multi_devices(x, p, err))
        return -1;
    double sim = 0, tmax = 0, eq = 0, peak = 0;
    int feas = 1;
    for (int q = 0; q < n; q++) {
        AltPlan v;
        AltContext xq;
        pipe_view(x, p, start[q], len[q], &v, &xq);
        if (eval_one(&xq, &v, err))
            return ir_error_prefix(err, "pipeline %d", q);
        sim = fmax(sim, v.sim_time);
        tmax = fmax(tmax, v.t_max);
        eq = fmax(eq, v.eq13);
        peak = fmax(peak, v.peak_ratio);
        feas &= v.feasible;
    }
    p->sim_time = sim + p->t_sync_dp;
    p->t_max = tmax;
    p->eq13 = eq + p->t_sync_dp;
    p->peak_ratio = peak;
    p->feasible = feas;
    return 0;
}

int alt_plan_check(const AltContext *x, const AltPlan *p, IrError *err)
{
    if (p->nstages < 1 || p->stages[0].pipe == 0)
        return check_one(x, p, err);
    int start[256], len[256];
    int n = pipe_ranges(p, start, len, 256);
    if (n < 0)
        return ir_errorf(err, "%s: more than 256 pipelines", p->planner);
    if (multi_devices(x, p, err))
        return -1;
    for (int q = 0; q < n; q++) {
        AltPlan v;
        AltContext xq;
        pipe_view(x, p, start[q], len[q], &v, &xq);
        if (check_one(&xq, &v, err))
            return ir_error_prefix(err, "pipeline %d", q);
    }
    return 0;
}

int alt_plan_to_plan(const AltContext *x, const AltPlan *ap, Plan *out, IrError *err)
{
    memset(out, 0, sizeof *out);
    int S = ap->nstages;
    for (int s = 0; s < S; s++) {
        /* multi-mesh stages, ministage groups and pipelines are recorded in
         * plan.json (PlanStage's issue-18 fields) for hetc compile to refuse
         * by name; a submesh is still whole nodes beyond one node */
        const AltStage *st = &ap->stages[s];
        if (st->nparts < 1 || st->nparts > PLAN_MAX_PARTS)
            return ir_errorf(err, "%s: stage %d has %d parts (1..%d)", ap->planner, s, st->nparts,
                             PLAN_MAX_PARTS);
        const MeshSpec *m = &x->c->meshes[st->parts[0].mesh];
        int dev = st->nparts > 1 ? st->parts[0].devices : st->dp * st->tp;
        if (dev > m->per_node && dev % m->per_node)
            return ir_errorf(err, "%s: stage %d: %d devices do not form whole %s nodes", ap->planner,
                             s, dev, m->name);
    }
    out->stages = calloc((size_t)S, sizeof *out->stages);
    out->mesh_order = calloc((size_t)x->c->nmeshes, sizeof *out->mesh_order);
    if (!out->stages || !out->mesh_order) {
        plan_free(out);
        return ir_errorf(err, "%s: out of memory", ap->planner);
    }
    out->nstages = S;
    int npipes = 0;
    for (int s = 0; s < S; s++)
        npipes = ap->stages[s].pipe > npipes ? ap->stages[s].pipe : npipes;
    for (int s = 0; s < S; s++) {
        const AltStage *st = &ap->stages[s];
        PlanStage *ps = &out->stages[s];
        const MeshSpec *m = &x->c->meshes[st->parts[0].mesh];
        ps->first_layer = st->first_layer;
        ps->last_layer = st->last_layer;
        ps->mesh = st->parts[0].mesh;
        ps->nparts = st->nparts;
        for (int j = 0; j < st->nparts; j++) {
            ps->parts[j].mesh = st->parts[j].mesh;
            ps->parts[j].devices = st->parts[j].devices;
            ps->parts[j].share = st->parts[j].share;
        }
        /* a group of one ministage and a plan of one pipeline are the plain form */
        int shared = 0;
        for (int q = 0; q < S && st->group; q++)
            shared |= q != s && ap->stages[q].group == st->group;
        ps->group = shared ? st->group : 0;
        ps->pipe = npipes > 1 ? st->pipe : 0;
        ps->npipes = npipes > 1 ? npipes : 0;
        ps->pipe_microbatches = npipes > 1 ? st->pipe_microbatches : 0;
        ps->offload = ap->offload;
        /* the submesh of the first part (the whole stage when it has one) */
        int dev = st->nparts > 1 ? st->parts[0].devices : st->dp * st->tp;
        ps->sub.m = dev > m->per_node ? m->per_node : dev;
        ps->sub.n = dev > m->per_node ? dev / m->per_node : 1;
        ps->dp = st->dp;
        ps->tp = st->tp;
        ps->zero = ap->zero_stage;
        ps->recompute = st->recompute ? RECOMPUTE_FULL : RECOMPUTE_NONE;
        ps->t_f = st->t_f;
        ps->t_b = st->t_b;
        ps->c_next = st->c_next;
        ps->warmup = st->warmup;
        ps->mem_pred = st->mem_peak;
        int seen = 0;
        for (int q = 0; q < out->nmesh_order; q++)
            seen |= out->mesh_order[q] == ps->mesh;
        if (!seen)
            out->mesh_order[out->nmesh_order++] = ps->mesh;
    }
    out->microbatches = ap->microbatches;
    out->t_max = ap->t_max;
    out->objective = ap->eq13;
    out->schedule = ap->schedule;
    out->eps = ap->eps;
    return 0;
}

void alt_plan_print(FILE *f, const AltContext *x, const AltPlan *p)
{
    fprintf(f, "%s: %d stages, %d microbatches x %g samples, %s%s%s; simulated %.4f s, Eq.13 %.4f s, "
            "own cost %.4f s; peak memory %.0f%% of a device; %ld steps, %.3f s; %s\n", p->planner,
            p->nstages, p->microbatches, p->mb_samples, schedule_name(p->schedule),
            p->zero_stage ? ", ZeRO-2" : "", p->offload ? ", CPU offload" : "", p->sim_time, p->eq13,
            p->objective, 100 * p->peak_ratio, p->steps, p->seconds,
            p->runnable ? "stage binaries run it today" : p->needs);
    for (int s = 0; s < p->nstages; s++) {
        const AltStage *st = &p->stages[s];
        fprintf(f, "  stage %d: layers %d..%d on", s, st->first_layer, st->last_layer);
        for (int j = 0; j < st->nparts; j++)
            fprintf(f, "%s %d x %s (%.0f%%)", j ? " +" : "", st->parts[j].devices,
                    x->c->meshes[st->parts[j].mesh].name, 100 * st->parts[j].share);
        fprintf(f, ", dp %d tp %d%s; t_f %.4g t_b %.4g c %.3g sync %.3g s; warm-up %d; memory %.2f / "
                "%.2f GiB\n", st->dp, st->tp, st->recompute ? " recompute" : "", st->t_f, st->t_b,
                st->c_next, st->t_sync, st->warmup, st->mem_peak / 1073741824.0,
                st->mem_cap / 1073741824.0);
    }
}

/* The runnable rule of docs/STAGES.md (after issue 9): one pipeline of
 * single-mesh stages, PP + DP + Megatron TP per stage, ZeRO-1/2 over the
 * stage's DP group, full recompute, one microbatch split over each stage's
 * DP ranks by its row table; CPU offload (issue 18 item 4); a DP group
 * spanning meshes (issue 18: launch.sh places each part on its mesh);
 * ministages sharing devices (launch.sh co-locates a group's ranks); several pipelines, lined up or not (issue 18
 * item 3), but no ZeRO, TP or offload on pipelines that do not line up.
 * hetc compile refuses the rest by name (compile_plan.c). */
/* 1 when fine layers [a, b] hold a whole repeated block (what TP shards:
 * the partition finds attention / MLP patterns only inside blocks). */
static int holds_block(const AltContext *x, int a, int b)
{
    if (x->block_period <= 0)
        return 0;
    for (int k = 0; k < x->block_count; k++) {
        int s = x->block_first + k * x->block_period, e = s + x->block_period - 1;
        if (s >= a && e <= b)
            return 1;
    }
    return 0;
}

/* 1 when the plan's pipelines (stored one after another) cut the model at
 * the same layers with the same tp, recompute and microbatches: hetc
 * compile runs them as one pipeline whose stage k's DP group holds every
 * pipeline's stage k (driver/plan_pipes.c). */
static int pipes_line_up(const AltPlan *p)
{
    int J = 0;
    for (int s = 0; s < p->nstages; s++)
        J = p->stages[s].pipe > J ? p->stages[s].pipe : J;
    if (J < 2 || p->nstages % J)
        return 0;
    int S = p->nstages / J;
    for (int q = 1; q <= J; q++)
        for (int k = 0; k < S; k++) {
            const AltStage *a = &p->stages[k], *b = &p->stages[(q - 1) * S + k];
            if (b->pipe != q || b->first_layer != a->first_layer ||
                b->last_layer != a->last_layer || b->tp != a->tp ||
                b->recompute != a->recompute || b->group > 0 ||
                b->pipe_microbatches != a->pipe_microbatches)
                return 0;
        }
    return 1;
}

static void mark_runnable(const AltContext *x, AltPlan *p)
{
    char buf[256] = "";
    size_t n = 0;
    /* a stage cutting a gradient its own way (driver/plan_forms.c) */
    int cut = p->zero_stage > 0 || p->offload;
    int multi = 0, tp = 0, rec = 0, pipes = 0, tp_noblock = 0, grouped = 0;
    for (int s = 0; s < p->nstages; s++) {
        cut |= p->stages[s].tp > 1;
        for (int q = 0; q < s && p->stages[s].group > 0; q++) /* as plan.json's "group" */
            grouped |= p->stages[q].group == p->stages[s].group;
        pipes |= p->stages[s].pipe > 1;
        tp_noblock |= p->stages[s].tp > 1 &&
                      !holds_block(x, p->stages[s].first_layer, p->stages[s].last_layer);
        multi |= p->stages[s].nparts > 1;
        tp |= p->stages[s].tp > 1;
        rec |= p->stages[s].recompute;
    }
    (void)tp;   /* TP and full recompute compile since issue 9 */
    (void)rec;
    /* TP on a stage without a whole block (the embedding or head alone) runs
     * since issue 18: vocabulary-parallel where tp_shard finds the pattern,
     * else replicated on every TP rank (passes/partition.c) */
    (void)tp_noblock;
    /* pipelines whose stages line up run as one pipeline, the others
     * with every parameter shared among its holders (issue 18 item 3),
     * but not with ZeRO, TP or offload on them */
    if (pipes && !pipes_line_up(p) && cut)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "ZeRO, TP or offload on DP groups "
                              "whose stages do not line up; ");
    /* per-GPU row shares (a stage's row table), ZeRO-1/2 on such a DP group
     * and its ranks on several meshes' devices (launch.sh's rank_mesh) run
     * since issue 18 */
    (void)multi;
    /* CPU offload runs since issue 18 item 4 (runtime/stage/stage_offload.c),
     * and so do several ministages on one group's devices: launch.sh
     * co-locates each ministage's ranks on its group's devices (one
     * pipeline only: a group is no holder set's whole gradient) */
    if (grouped && pipes && !pipes_line_up(p) && !cut && n < sizeof buf)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "ministages sharing devices on DP "
                              "groups whose stages do not line up; ");
    if (n && n < sizeof buf) {
        buf[n - 2] = 0;
        snprintf(p->needs, sizeof p->needs, "needs runtime work: %s", buf);
        p->runnable = 0;
    } else if (!n) {
        p->runnable = 1;
        snprintf(p->needs, sizeof p->needs, "runnable");
    }
}

static int run_named(const char *name, const AltContext *x, AltPlan *out, IrError *err);
static void finish_runnable(const AltContext *x, AltPlan *p);

int alt_plan_run(const char *name, const AltContext *x, AltPlan *out, IrError *err)
{
    /* The seed planners place whole transformer blocks (their papers' layers);
     * coarse keeps its own granularity.  Plans come back in fine layers and
     * are evaluated on them. */
    AltContext bx;
    PlanLayer *merged = NULL;
    int *first = NULL;
    if (strcmp(name, "coarse") && alt_planner_known(name) &&
        alt_block_view(x, &bx, &merged, &first) == 0) {
        double t0 = alt_now();
        int rc = run_named(name, &bx, out, err);
        if (rc == 0) {
            for (int s = 0; s < out->nstages; s++) {
                out->stages[s].first_layer = first[out->stages[s].first_layer - 1];
                out->stages[s].last_layer = first[out->stages[s].last_layer] - 1;
            }
            double steps = (double)out->steps, obj = out->objective;
            if (alt_plan_eval(x, out, err)) {
                alt_plan_free(out);
                rc = -1;
            } else {
                out->steps = (long)steps;
                out->objective = obj;
                out->seconds = alt_now() - t0;
                finish_runnable(x, out);   /* on the fine layers */
                if (!out->feasible) {
                    rc = ir_errorf(err, "%s: no feasible plan: its layout exceeds device memory on "
                                   "the fine layers (peak %.0f%%)", name, 100 * out->peak_ratio);
                    alt_plan_free(out);
                }
            }
        }
        free(merged);
        free(first);
        return rc;
    }
    return run_named(name, x, out, err);
}

static void finish_runnable(const AltContext *x, AltPlan *p)
{
    mark_runnable(x, p);
    if (p->runnable) {
        /* plan.json must hold it too: stages beyond one node take whole nodes */
        Plan hp;
        IrError e2 = {{0}};
        if (alt_plan_to_plan(x, p, &hp, &e2)) {
            p->runnable = 0;
            snprintf(p->needs, sizeof p->needs, "needs runtime work: a stage on part of several "
                     "nodes (submeshes beyond one node are whole nodes)");
        } else
            plan_free(&hp);
    }
}

static int run_named(const char *name, const AltContext *x, AltPlan *out, IrError *err)
{
    double t0 = alt_now();
    int rc;
    memset(out, 0, sizeof *out);
    const PlannerDef *pd = planner_find(name);
    if (pd && !pd->layers)
        return ir_errorf(err, "planner '%s' plans on the cost model (hetc plan), not on an "
                         "AltContext", name);
    if (!pd) {
        char names[256];
        planner_names(names, sizeof names);
        return ir_errorf(err, "unknown planner '%s' (%s)", name, names);
    }
    rc = pd->layers(x, out, err);
    if (rc) {
        alt_plan_free(out);
        return rc;
    }
    out->seconds = alt_now() - t0;
    if (out->sim_time == 0 && alt_plan_eval(x, out, err)) {
        alt_plan_free(out);
        return -1;
    }
    if (!out->feasible) {
        rc = ir_errorf(err, "%s: no feasible plan: its best layout exceeds device memory (peak %.0f%% "
                       "of a device)", name, 100 * out->peak_ratio);
        alt_plan_free(out);
        return rc;
    }
    /* every planner keeps dp within the rows it gives a stage; a layout
     * that does not is a planner bug, not a plan */
    if (alt_plan_check_rows(x, out, err)) {
        alt_plan_free(out);
        return -1;
    }
    finish_runnable(x, out);
    return 0;
}
