/* HeteroAuto (seed 002 §4.3, H2), exactly its space:
 *   one chip type per stage (a chip type = a mesh here), one global DP
 *   degree s_dp dividing the global batch (microbatch size 1 per replica,
 *   b = B / s_dp microbatches), per chip type a TP degree (power of two,
 *   <= TP_MAX = devices per node) and a recompute flag, s_pp,i =
 *   N_i / (s_tp,i s_dp) stages of type i (every chip used), equal layer
 *   counts on the stages of one type, types ordered by descending memory;
 *   DFS over the per-type choices; layer sharding by equal compute time per
 *   type, then refined one layer at a time until memory fits;
 *   cost  T = max_i (b T_i^comp + T_i^update + alpha sum_{j != i} T_j^comp),
 *   alpha = 1 (1F1B), T^comp = t_f + t_b (+ recompute) of stage i for one
 *   microbatch, T^update = its gradient all-reduce (the optimizer step
 *   itself is not in hetc's cost model, for any planner).
 * Two-stage refinement: stage 1 picks s_dp over every type as one entity;
 * stage 2 keeps that s_dp and splits the type with the most chips into two
 * halves treated as distinct types, with s_tp,a >= s_tp,b for the half
 * placed first.  Search step = one complete configuration costed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alt_plan.h"

#define HA_MAX_ENT 16

typedef struct Entity {
    int mesh, devices;
    int sibling_of;         /* index of the earlier half of the same type, -1 */
} Entity;

typedef struct HaSearch {
    const AltContext *x;
    Entity ent[HA_MAX_ENT];
    int nent;
    int sdp, b;
    int tp[HA_MAX_ENT], rec[HA_MAX_ENT];
    /* best */
    double best;
    int best_sdp, best_tp[HA_MAX_ENT], best_rec[HA_MAX_ENT], best_layers[HA_MAX_ENT];
    Entity best_ent[HA_MAX_ENT];
    int best_nent;
    long steps;
    double closest_mem;     /* smallest peak/capacity among memory-infeasible configs */
    int *cnt;               /* [L] per-stage layer counts scratch */
} HaSearch;

static int tp_cap(const AltContext *x, int mesh)
{
    int m = x->c->meshes[mesh].per_node;
    return x->tp_max > 0 && x->tp_max < m ? x->tp_max : m;
}

/* Stage layer counts from per-entity totals l[e] (equal within a type). */
static int stage_counts(const HaSearch *h, const int *spp, const int *l, int *cnt)
{
    int S = 0;
    for (int e = 0; e < h->nent; e++)
        for (int s = 0; s < spp[e]; s++)
            cnt[S++] = (int)((long)(s + 1) * l[e] / spp[e] - (long)s * l[e] / spp[e]);
    return S;
}

/* Cost of a configuration with layer totals l; fills *worst_mem (max over
 * stages of peak / capacity, 1F1B warm-ups) and returns T. */
static double ha_cost(HaSearch *h, const int *spp, const int *l, double *worst_mem, int *worst_ent)
{
    const AltContext *x = h->x;
    int S = stage_counts(h, spp, l, h->cnt);
    double sumc = 0, T = 0;
    double *tc = malloc((size_t)S * sizeof *tc), *tu = malloc((size_t)S * sizeof *tu);
    *worst_mem = 0;
    *worst_ent = -1;
    if (!tc || !tu) {
        free(tc);
        free(tu);
        *worst_mem = INFINITY;
        return INFINITY;
    }
    int s = 0, first = 1;
    for (int e = 0; e < h->nent; e++)
        for (int q = 0; q < spp[e]; q++, s++) {
            StageCost sc;
            int last = first + h->cnt[s] - 1;
            alt_stage_cost(x, first, last, h->ent[e].mesh, h->sdp, h->tp[e], h->rec[e], 0, 0, 1.0, &sc);
            first = last + 1;
            tc[s] = sc.t_f + sc.t_b;
            tu[s] = sc.t_sync;
            sumc += tc[s];
            int K = S - s < h->b ? S - s : h->b;
            double r = (sc.mem_static + K * sc.mem_act) / x->c->meshes[h->ent[e].mesh].dev.mem_bytes;
            if (r > *worst_mem) {
                *worst_mem = r;
                *worst_ent = e;
            }
        }
    for (s = 0; s < S; s++) {
        double v = h->b * tc[s] + tu[s] + (sumc - tc[s]);
        if (v > T)
            T = v;
    }
    free(tc);
    free(tu);
    return T;
}

/* Layer sharding for one configuration: equal compute time per type, then
 * move a layer off the type whose stage overflows memory onto the type
 * with the lowest per-layer time that still has room; returns T or INF. */
static double ha_shard(HaSearch *h, const int *spp, int *l)
{
    const AltContext *x = h->x;
    double rate[HA_MAX_ENT], tot = 0;
    int need = 0;
    for (int e = 0; e < h->nent; e++) {
        StageCost sc;
        alt_stage_cost(x, 1, x->L, h->ent[e].mesh, h->sdp, h->tp[e], h->rec[e], 0, 0, 1.0, &sc);
        double per_layer = (sc.t_f + sc.t_b) / x->L;
        rate[e] = spp[e] / per_layer;   /* layers per unit time of the type */
        tot += rate[e];
        need += spp[e];
    }
    if (need > x->L)
        return INFINITY;
    int sum = 0;
    for (int e = 0; e < h->nent; e++) {
        l[e] = (int)floor(x->L * rate[e] / tot);
        if (l[e] < spp[e])
            l[e] = spp[e];
        sum += l[e];
    }
    /* the initial assignment exceeds (or misses) L: readjust one layer at a
     * time, taking from / giving to the type whose time per stage moves least */
    while (sum != x->L) {
        int pick = -1;
        double bestv = INFINITY;
        for (int e = 0; e < h->nent; e++) {
            if (sum > x->L && l[e] <= spp[e])
                continue;
            double v = sum > x->L ? -(double)(l[e] - 1) / rate[e] : (double)(l[e] + 1) / rate[e];
            if (v < bestv) {
                bestv = v;
                pick = e;
            }
        }
        if (pick < 0)
            return INFINITY;
        l[pick] += sum > x->L ? -1 : 1;
        sum += sum > x->L ? -1 : 1;
    }
    for (int it = 0; it <= x->L; it++) {
        double wm;
        int we;
        double T = ha_cost(h, spp, l, &wm, &we);
        if (wm <= 1)
            return T;
        if (it == x->L || we < 0 || l[we] <= spp[we]) {
            if (wm < h->closest_mem)
                h->closest_mem = wm;
            return INFINITY;
        }
        /* move one layer to the type with the most memory headroom per stage */
        int to = -1;
        double room = -INFINITY;
        for (int e = 0; e < h->nent; e++) {
            if (e == we)
                continue;
            double r = x->c->meshes[h->ent[e].mesh].dev.mem_bytes * h->tp[e] * (h->rec[e] ? 4 : 1) *
                       spp[e] / (double)(l[e] + 1);
            if (r > room) {
                room = r;
                to = e;
            }
        }
        if (to < 0) {
            if (wm < h->closest_mem)
                h->closest_mem = wm;
            return INFINITY;
        }
        l[we]--;
        l[to]++;
    }
    return INFINITY;
}

static void ha_dfs(HaSearch *h, int e)
{
    if (e == h->nent) {
        int spp[HA_MAX_ENT], l[HA_MAX_ENT];
        for (int q = 0; q < h->nent; q++)
            spp[q] = h->ent[q].devices / (h->tp[q] * h->sdp);
        h->steps++;
        double T = ha_shard(h, spp, l);
        if (T < h->best) {
            h->best = T;
            h->best_sdp = h->sdp;
            h->best_nent = h->nent;
            memcpy(h->best_ent, h->ent, sizeof h->ent);
            memcpy(h->best_tp, h->tp, sizeof h->tp);
            memcpy(h->best_rec, h->rec, sizeof h->rec);
            memcpy(h->best_layers, l, sizeof l);
        }
        return;
    }
    const Entity *en = &h->ent[e];
    for (int tp = 1; tp <= tp_cap(h->x, en->mesh); tp *= 2) {
        if (en->devices % (tp * h->sdp))
            continue;
        if (en->sibling_of >= 0 && tp > h->tp[en->sibling_of])
            continue;   /* s_tp,a >= s_tp,b for the earlier half a */
        for (int r = 0; r <= 1; r++) {
            h->tp[e] = tp;
            h->rec[e] = r;
            ha_dfs(h, e + 1);
        }
    }
}

static int by_memory_desc(const void *pa, const void *pb, void *arg)
{
    const ClusterSpec *c = arg;
    const Entity *a = pa, *b = pb;
    double ma = c->meshes[a->mesh].dev.mem_bytes, mb = c->meshes[b->mesh].dev.mem_bytes;
    if (ma != mb)
        return ma > mb ? -1 : 1;
    return a->mesh - b->mesh;
}

static void sort_entities(const ClusterSpec *c, Entity *e, int n)
{
    /* insertion sort (stable, tiny n) by descending device memory */
    for (int i = 1; i < n; i++) {
        Entity t = e[i];
        int j = i - 1;
        while (j >= 0 && by_memory_desc(&e[j], &t, (void *)c) > 0) {
            e[j + 1] = e[j];
            j--;
        }
        e[j + 1] = t;
    }
}

int alt_plan_heteroauto(const AltContext *x, AltPlan *out, IrError *err)
{
    const ClusterSpec *c = x->c;
    if (c->nmeshes > HA_MAX_ENT - 1)
        return ir_errorf(err, "heteroauto: at most %d chip types", HA_MAX_ENT - 1);
    HaSearch h;
    memset(&h, 0, sizeof h);
    h.x = x;
    h.best = INFINITY;
    h.closest_mem = INFINITY;
    h.cnt = calloc((size_t)x->L + 1, sizeof *h.cnt);
    if (!h.cnt)
        return ir_errorf(err, "heteroauto: out of memory");
    h.nent = c->nmeshes;
    for (int a = 0; a < c->nmeshes; a++) {
        h.ent[a].mesh = a;
        h.ent[a].devices = c->meshes[a].nodes * c->meshes[a].per_node;
        h.ent[a].sibling_of = -1;
    }
    sort_entities(c, h.ent, h.nent);
    /* stage 1: every s_dp dividing the batch */
    for (int sdp = 1; sdp <= x->samples; sdp++) {
        if (x->samples % sdp)
            continue;
        h.sdp = sdp;
        h.b = x->samples / sdp;
        ha_dfs(&h, 0);
    }
    /* stage 2: the largest type split into two halves, s_dp fixed */
    if (isfinite(h.best)) {
        int big = 0;
        for (int e = 1; e < h.nent; e++)
            if (h.ent[e].devices > h.ent[big].devices)
                big = e;
        int half = h.ent[big].devices / 2;
        if (h.ent[big].devices % 2 == 0 && half % h.best_sdp == 0 && h.nent < HA_MAX_ENT) {
            Entity save[HA_MAX_ENT];
            memcpy(save, h.ent, sizeof save);
            int n0 = h.nent;
            h.ent[big].devices = half;
            memmove(&h.ent[big + 2], &h.ent[big + 1], (size_t)(h.nent - big - 1) * sizeof *h.ent);
            h.ent[big + 1] = h.ent[big];
            h.ent[big + 1].sibling_of = big;
            h.nent++;
            h.sdp = h.best_sdp;
            h.b = x->samples / h.sdp;
            ha_dfs(&h, 0);
            memcpy(h.ent, save, sizeof save);
            h.nent = n0;
        }
    }
    if (!isfinite(h.best)) {
        free(h.cnt);
        if (isfinite(h.closest_mem))
            return ir_errorf(err, "heteroauto: no feasible plan: memory: the best layer sharding of "
                             "any (s_dp, s_tp, recompute) configuration needs %.0f%% of a device",
                             100 * h.closest_mem);
        return ir_errorf(err, "heteroauto: no feasible plan: no configuration has N_i = s_pp,i "
                         "s_tp,i s_dp for every chip type with at most L = %d stages", x->L);
    }
    int S = 0, spp[HA_MAX_ENT];
    for (int e = 0; e < h.best_nent; e++) {
        spp[e] = h.best_ent[e].devices / (h.best_tp[e] * h.best_sdp);
        S += spp[e];
    }
    if (alt_plan_init(out, "heteroauto", S, err)) {
        free(h.cnt);
        return -1;
    }
    memcpy(h.ent, h.best_ent, sizeof h.ent);
    h.nent = h.best_nent;
    stage_counts(&h, spp, h.best_layers, h.cnt);
    alt_assign_layers(out, h.cnt);
    int s = 0;
    for (int e = 0; e < h.best_nent; e++)
        for (int q = 0; q < spp[e]; q++, s++)
            alt_stage_single(&out->stages[s], h.best_ent[e].mesh, h.best_tp[e] * h.best_sdp,
                             h.best_sdp, h.best_tp[e], h.best_rec[e]);
    free(h.cnt);
    out->microbatches = x->samples / h.best_sdp;
    out->mb_samples = h.best_sdp;
    out->schedule = SCHED_1F1B;
    out->objective = h.best;
    out->steps = h.steps;
    return alt_plan_eval(x, out, err);
}
