/* AutoHet (seed 001 §III) on hetc's cost formulas.
 *
 * For every symmetric TP degree (a power of two dividing every node's GPU
 * count; a TP group never leaves a node, so TP rides NVLink) and every
 * number of DP groups J dividing the batch (microbatch of one sample per
 * group, K = batch / J microbatches per group):
 *   1. device grouping: the MILP of alt_autohet.h (Eq. 2-3 reformulated),
 *      entities = TP groups, g = tp x peak FLOP/s, m = tp x device memory,
 *      MIN_mem = the whole model's static memory + one microbatch of
 *      activations (what one replica needs);
 *   2. stage mapping: inside a group, lower-end entities first (ascending
 *      computing power, then descending memory), one stage per entity;
 *   3. layer balancing, Eq. 4 with 4a read as minimising the slowest
 *      stage's l_i / g_i: bisection over the candidate values l / g_i, a
 *      candidate feasible when stages in order can take at most
 *      floor(t g_i) layers each, within memory (4c, 1F1B in-flight counts)
 *      and leaving a layer for every later stage, and all L are placed;
 *   4. cost, Eq. 1: max_j (sum_i t_i^j + (K - 1) max_c t_c^j) + T_sync,
 *      T_sync = ring all-reduce of the model's parameters / tp over J
 *      groups at the lowest bandwidth among them (the slowest inter-node
 *      link of a used mesh, and the links between used meshes).
 * The plan with the lowest Eq. 1 wins.  Search step = one grouping MILP.
 * Eq. 5 (binary decomposition of layer counts, a profiling shortcut for
 * measured times) is the AH_PROFILE_BINARY mode (alt_autohet.h): stages
 * are then balanced and scored with costs composed from power-of-two
 * profiles; see docs/COMPARISON.md for where that equals the exact costs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alt_autohet.h"
#include "alt_plan.h"

#define AH_MAX_ENT 256   /* TP entities per grouping MILP (larger TP degrees beyond) */

typedef struct AhEnt {
    int mesh;
    double g, m;
} AhEnt;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Eq. 4 for one DP group: stages ent[0..S-1] in order; fills cnt. */
static int balance(const AltContext *x, const AhEnt *ent, int S, int tp, int K,
                   const AhBinProfile *prof, int *cnt)
{
    if (S > x->L)
        return 0;
    int nc = 0;
    double *cand = malloc((size_t)S * x->L * sizeof *cand);
    if (!cand)
        return 0;
    for (int i = 0; i < S; i++)
        for (int l = 1; l <= x->L; l++)
            cand[nc++] = l / ent[i].g;
    qsort(cand, (size_t)nc, sizeof *cand, cmp_double);
    int lo = 0, hi = nc - 1, found = -1;
    int *tmp = malloc((size_t)S * sizeof *tmp);
    while (lo <= hi && tmp) {
        int mid = (lo + hi) / 2;
        double t = cand[mid] * (1 + 1e-12);
        int first = 1, ok = 1;
        for (int i = 0; i < S && ok; i++) {
            int left = x->L - first + 1, rest = S - i - 1;
            int most = (int)floor(t * ent[i].g);
            if (most > left - rest)
                most = left - rest;
            if (i == S - 1 && most < left)
                ok = 0;
            int Ki = S - i < K ? S - i : K;
            /* largest count that fits memory (memory grows with the count) */
            while (ok && most >= 1) {
                StageCost sc;
                if (prof)
                    autohet_compose_binary(&prof[ent[i].mesh], most,
                                           x->c->meshes[ent[i].mesh].dev.mem_bytes, &sc);
                else
                    alt_stage_cost(x, first, first + most - 1, ent[i].mesh, 1, tp, 0, 0, 0, 1.0, &sc);
                if (sc.mem_static + Ki * sc.mem_act <= x->c->meshes[ent[i].mesh].dev.mem_bytes)
                    break;
                most--;
            }
            if (most < 1 || (i == S - 1 && most < left))
                ok = 0;
            tmp[i] = most;
            first += most;
        }
        if (ok) {
            found = mid;
            memcpy(cnt, tmp, (size_t)S * sizeof *cnt);
            hi = mid - 1;
        } else
            lo = mid + 1;
    }
    free(tmp);
    free(cand);
    return found >= 0;
}

static int by_power(const void *a, const void *b)
{
    const AhEnt *x = a, *y = b;
    if (x->g != y->g)
        return x->g < y->g ? -1 : 1;
    if (x->m != y->m)
        return x->m > y->m ? -1 : 1;
    return x->mesh - y->mesh;
}

/* The first layer of the repeated region: where the profiled windows start
 * (the paper profiles its repetitive layers, not embedding or head). */
static int profile_first(const AltContext *x)
{
    if (x->block_period > 0 && x->block_first >= 1)
        return x->block_first;
    for (int l = 0; l + 1 < x->L; l++)
        if (x->layers[l].sig == x->layers[l + 1].sig)
            return l + 1;
    return 1;
}

int autohet_profile_binary(const AltContext *x, int mesh, int tp, AhBinProfile *pr)
{
    memset(pr, 0, sizeof *pr);
    if (!x || !x->c || x->L < 1 || mesh < 0 || mesh >= x->c->nmeshes || tp < 1)
        return -1;
    pr->first = profile_first(x);
    pr->reserve = x->co.runtime_reserve_bytes;
    for (int i = 0; i < AH_MAX_POW && (1L << i) <= x->L; i++) {
        int n = 1 << i, k = pr->first;
        if (k + n - 1 > x->L)   /* window must fit: slide it back */
            k = x->L - n + 1;
        StageCost sc;
        if (alt_stage_cost(x, k, k + n - 1, mesh, 1, tp, 0, 0, 0, 1.0, &sc))
            return -1;
        pr->t_f[i] = sc.t_f;
        pr->t_b[i] = sc.t_b;
        if (i == 0) {   /* memory profiling: one layer (the paper's pruning) */
            pr->mem_layer = sc.mem_static - pr->reserve;
            pr->act_layer = sc.mem_act;
        }
        pr->npow = i + 1;
    }
    return pr->npow;
}

void autohet_compose_binary(const AhBinProfile *pr, int n, double mem_bytes, StageCost *out)
{
    memset(out, 0, sizeof *out);
    out->dp = 1;
    for (int i = 0; i < pr->npow; i++)
        if (n >> i & 1) {   /* alpha_i of Eq. 5 */
            out->t_f += pr->t_f[i];
            out->t_b += pr->t_b[i];
        }
    if (n >> pr->npow) {   /* beyond the profiled powers: cannot be composed */
        out->t_f = out->t_b = INFINITY;
    }
    out->mem_static = n * pr->mem_layer + pr->reserve;
    out->mem_act = n * pr->act_layer;
    out->feasible = out->mem_static + out->mem_act <= mem_bytes;
}

/* Stage mapping (§III step 2) of the J groups of the MILP's grouping n:
 * inside a group, lower-end entities first, each a stage, the layers split
 * by Eq. 4 (balance).  Returns the stage count, or -1 where a group's
 * stages cannot hold its layers. */
static int ah_map_stages(const AltContext *x, const AhTypes *ty, const int *n, int J, int K,
                         int tp, int mode, const AhBinProfile *prof, AhEnt *ent, int *cnt,
                         AltPlan *p)
{
    int S = 0, ok = 1, first_stage = 0;
    for (int j = 0; j < J && ok; j++) {
        int ne = 0;
        for (int t = 0; t < ty->T; t++)
            for (int q = 0; q < n[t * J + j]; q++) {
                ent[ne].mesh = t;
                ent[ne].g = ty->g[t];
                ent[ne].m = ty->m[t];
                ne++;
            }
        qsort(ent, (size_t)ne, sizeof *ent, by_power);
        if (!balance(x, ent, ne, tp, K, mode == AH_PROFILE_BINARY ? prof : NULL, cnt)) {
            ok = 0;
            break;
        }
        int l = 1;
        for (int i = 0; i < ne; i++) {
            AltStage *st = &p->stages[first_stage + i];
            alt_stage_single(st, ent[i].mesh, tp, 1, tp, 0);
            st->pipe = j + 1;
            st->pipe_microbatches = K;
            st->first_layer = l;
            st->last_layer = l + cnt[i] - 1;
            l += cnt[i];
        }
        first_stage += ne;
        S += ne;
    }
    return ok ? S : -1;
}

/* The slowest bandwidth among the DP groups' devices (T_sync's). */
static double ah_sync_bw(const AltContext *x, const AltPlan *p, int S)
{
    const ClusterSpec *c = x->c;
    double bw = INFINITY;
    int used[AH_MAX_TYPES] = {0};
    for (int s = 0; s < S; s++)
        used[p->stages[s].parts[0].mesh] = 1;
    for (int a = 0; a < c->nmeshes; a++) {
        if (!used[a])
            continue;
        double b = c->meshes[a].nodes > 1 ? c->meshes[a].inter_bw : c->meshes[a].intra_bw;
        if (b > 0 && b < bw)
            bw = b;
        for (int b2 = a + 1; b2 < c->nmeshes; b2++)
            if (used[b2]) {
                const LinkSpec *lk = cluster_link(c, a, b2);
                double lb = lk ? lk->bw : 0;
                if (lk && lk->cpu_mediated)
                    lb = 1.0 / (1.0 / lb + 2.0 / x->co.pcie_bw);
                if (lb < bw)
                    bw = lb;
            }
    }
    return bw;
}

/* Eq. 1 without T_sync: the slowest group's pipeline, sum + (K-1) max. */
static double ah_eq1(const AltContext *x, const AltPlan *p, int S, int K, int mode,
                     const AhBinProfile *prof)
{
    const ClusterSpec *c = x->c;
    double T = 0;
    for (int s0 = 0; s0 < S;) {
        int s1 = s0;
        double sum = 0, mx = 0;
        while (s1 < S && p->stages[s1].pipe == p->stages[s0].pipe) {
            const AltStage *st = &p->stages[s1];
            double t = st->t_f + st->t_b + st->c_next;
            if (mode == AH_PROFILE_BINARY) {   /* Eq. 5's times, not the evaluated ones */
                StageCost sc;
                int m = st->parts[0].mesh;
                autohet_compose_binary(&prof[m], st->last_layer - st->first_layer + 1,
                                       c->meshes[m].dev.mem_bytes, &sc);
                t = sc.t_f + sc.t_b + st->c_next;
            }
            sum += t;
            mx = fmax(mx, t);
            s1++;
        }
        T = fmax(T, sum + (K - 1) * mx);
        s0 = s1;
    }
    return T;
}

int alt_plan_autohet(const AltContext *x, AltPlan *out, IrError *err)
{
    return alt_plan_autohet_mode(x, AH_PROFILE_EXACT, out, NULL, NULL, err);
}

int alt_plan_autohet_mode(const AltContext *x, int mode, AltPlan *out, long *points,
                          long *exhaustive, IrError *err)
{
    const ClusterSpec *c = x->c;
    AhBinProfile prof[AH_MAX_TYPES];
    long npoints = 0, nexh = 0;
    if (points)
        *points = 0;
    if (exhaustive)
        *exhaustive = 0;
    if (c->nmeshes > AH_MAX_TYPES)
        return ir_errorf(err, "autohet: at most %d device types", AH_MAX_TYPES);
    StageCost whole;
    alt_stage_cost(x, 1, x->L, 0, 1, 1, 0, 0, 0, 1.0, &whole);
    double min_mem = whole.mem_static + whole.mem_act;
    double params = 0;
    for (int l = 0; l < x->L; l++)
        params += x->layers[l].param_bytes;
    int min_node = 1 << 30;
    for (int a = 0; a < c->nmeshes; a++)
        if (c->meshes[a].per_node < min_node)
            min_node = c->meshes[a].per_node;
    double best = INFINITY, closest_mem = 0;
    long steps = 0;
    int any_group = 0;
    AltPlan bp;
    memset(&bp, 0, sizeof bp);
    AhEnt *ent = calloc(AH_MAX_ENT, sizeof *ent);
    int *n = NULL, *cnt = calloc((size_t)x->L + 1, sizeof *cnt);
    if (!ent || !cnt) {
        free(ent);
        free(cnt);
        return ir_errorf(err, "autohet: out of memory");
    }
    for (int tp = 1; tp <= min_node; tp *= 2) {
        int valid = x->tp_max <= 0 || tp <= x->tp_max;
        for (int a = 0; a < c->nmeshes; a++)
            valid &= c->meshes[a].per_node % tp == 0;
        if (!valid)
            continue;
        AhTypes ty;
        memset(&ty, 0, sizeof ty);
        ty.T = c->nmeshes;
        ty.max_stages = x->L;
        int total = 0;
        for (int a = 0; a < c->nmeshes; a++) {
            ty.count[a] = c->meshes[a].nodes * c->meshes[a].per_node / tp;
            ty.g[a] = tp * device_peak_flops(&c->meshes[a].dev, c->dtype);
            ty.m[a] = tp * c->meshes[a].dev.mem_bytes;
            total += ty.count[a];
        }
        if (total > AH_MAX_ENT)
            continue;
        if (mode == AH_PROFILE_BINARY)
            for (int a = 0; a < c->nmeshes; a++) {
                int np = autohet_profile_binary(x, a, tp, &prof[a]);
                if (np < 0) {
                    free(ent);
                    free(cnt);
                    free(n);
                    alt_plan_free(&bp);
                    return ir_errorf(err, "autohet: cannot profile mesh %s at tp %d",
                                     c->meshes[a].name, tp);
                }
                npoints += np;
                nexh += x->L;
            }
        /* Small instances are solved to optimality (deterministic plans);
         * on large ones GLPK's branch and bound rarely proves optimality in
         * reasonable time, so its incumbent is kept after a limit (the plan
         * may then depend on the machine's speed: docs/COMPARISON.md). */
        ty.time_limit_ms = total <= 16 ? -1 : total > 64 ? 300 : 1000;
        free(n);
        n = calloc((size_t)c->nmeshes * total, sizeof *n);
        if (!n)
            break;
        for (int J = 1; J <= total; J++) {
            if (x->samples % J)
                continue;
            int K = x->samples / J, opt = 0;
            steps++;
            double z = autohet_group_milp(&ty, J, K, min_mem / tp, n, &opt);
            if (z < 0)
                continue;
            any_group = 1;
            /* stages per group, lower-end first; then Eq. 4 */
            int S, ok;
            AltPlan p;
            int ent_total = 0;
            for (int j = 0; j < J; j++)
                for (int t = 0; t < ty.T; t++)
                    ent_total += n[t * J + j];
            if (alt_plan_init(&p, "autohet", ent_total, err))
                break;
            S = ah_map_stages(x, &ty, n, J, K, tp, mode, prof, ent, cnt, &p);
            ok = S >= 0;
            if (!ok) {
                alt_plan_free(&p);
                continue;
            }
            p.microbatches = K;
            p.mb_samples = 1;
            p.schedule = SCHED_1F1B;
            /* T_sync over the slowest bandwidth among the DP groups */
            double bw = ah_sync_bw(x, &p, S);
            p.t_sync_dp = J > 1 ? (bw > 0 ? 2.0 * (J - 1) / J * params / tp / bw : INFINITY) : 0;
            IrError e2 = {{0}};
            if (alt_plan_eval(x, &p, &e2) || !p.feasible) {
                if (p.peak_ratio > 0 && (closest_mem == 0 || p.peak_ratio < closest_mem))
                    closest_mem = p.peak_ratio;
                alt_plan_free(&p);
                continue;
            }
            /* Eq. 1 */
            double T = ah_eq1(x, &p, S, K, mode, prof);
            T += p.t_sync_dp;
            if (T < best) {
                best = T;
                alt_plan_free(&bp);
                bp = p;
                bp.objective = T;
            } else
                alt_plan_free(&p);
        }
    }
    free(n);
    free(ent);
    free(cnt);
    if (!isfinite(best)) {
        if (!any_group)
            return ir_errorf(err, "autohet: no feasible plan: memory (3b): no grouping gives every DP "
                             "group the %.1f GiB one model replica needs", min_mem / 1073741824.0);
        if (closest_mem > 0)
            return ir_errorf(err, "autohet: no feasible plan: memory (4c): no layer balancing of "
                             "any grouping fits (best peak %.0f%% of a device)", 100 * closest_mem);
        return ir_errorf(err, "autohet: no feasible plan: memory (4c): in every grouping some DP "
                         "group's stages cannot hold its layers (Eq. 4 finds no split within "
                         "memory)");
    }
    *out = bp;
    out->steps = steps;
    if (points)
        *points = npoints;
    if (exhaustive)
        *exhaustive = nexh;
    return 0;
}
