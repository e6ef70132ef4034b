/* Metis (Um et al., USENIX ATC '24, "Metis: Fast Automatic Distributed
 * Training on Heterogeneous GPUs"; public planner github.com/SamsungLabs/Metis,
 * read for its structure, no code copied) and seed 003's memory-aware
 * variant, on hetc's cost formulas.
 *
 * Inter-stage plans (Metis's InterStagePlanGenerator, our reading):
 *   a device-type order (every permutation of the meshes, up to 5 meshes;
 *   beyond that the cluster order and its reverse), a stage count per mesh
 *   k_a with every group of mesh a the same power-of-two size n_a / k_a (the
 *   "similar device groups" pruning of seed 003 §3.2 keeps one
 *   representative per multiset), group sizes within a factor 1 / variance
 *   of each other (variance 0.25), and a number of microbatches B_p
 *   dividing the global batch.
 * Intra-stage plans: per stage (dp, tp) with dp tp = group size.  Both
 *   searches start at (group size, 1) (seed 003 §3.4: maximum DP, TP = 1).
 *   A strategy is valid when each DP rank's microbatch samples/(B_p dp) is
 *   a whole number in [1, max_bs] (max_bs = 4, Metis's profiled batch
 *   sizes) and tp fits a node.  Each valid strategy is load-balanced
 *   (layers in proportion to each stage's speed, then a layer at a time
 *   off any stage over memory onto the stage with the most free memory)
 *   and costed: one SEARCH STEP.  The walk over one inter-stage plan ends
 *   at the first strategy whose proportional split fits memory without
 *   moving layers (Metis stops its generator there), or when no stage can
 *   halve its DP any more.  The next strategy halves DP and doubles TP of
 *     metis:     the first stage in pipeline order with dp > 1 (its
 *                stage-by-stage DFS, seed 003 §1-2);
 *     metis-mem: the stage with the least free memory (seed 003 §3.4: the
 *                stage most likely to run out of memory first).
 * Cost (Metis's pipeline estimate): sum_s (t_f + t_b) + (B_p - 1) max_s
 *   (t_f + t_b) + 2 sum_s c_s + max_s t_sync.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alt_plan.h"

#define MT_MAX_STAGES 256
#define MT_MAX_BS 4
#define MT_VARIANCE 0.25

typedef struct MtSearch {
    const AltContext *x;
    int memory_aware;
    int order[16], nord;            /* current mesh order */
    int k[16];                      /* stages per mesh */
    int S, B;                       /* stages, microbatches */
    int mesh[MT_MAX_STAGES], g[MT_MAX_STAGES];
    int dp[MT_MAX_STAGES], tp[MT_MAX_STAGES];
    int cnt[MT_MAX_STAGES];
    double free_mem[MT_MAX_STAGES];
    long steps;
    double best;
    int best_S, best_B, best_mesh[MT_MAX_STAGES], best_dp[MT_MAX_STAGES], best_tp[MT_MAX_STAGES],
        best_cnt[MT_MAX_STAGES];
    double closest;
} MtSearch;

static int tpcap(const AltContext *x, int mesh)
{
    int m = x->c->meshes[mesh].per_node;
    return x->tp_max > 0 && x->tp_max < m ? x->tp_max : m;
}

static double stage_cost_of(MtSearch *h, int s, int first, int n, StageCost *sc)
{
    double frac = (double)h->x->samples / h->B / h->dp[s];
    alt_stage_cost(h->x, first, first + n - 1, h->mesh[s], h->dp[s], h->tp[s], 0, 0, 0, frac, sc);
    return sc->t_f + sc->t_b;
}

/* Memory of every stage at the current split; returns the index of the
 * most overloaded stage (or -1 when all fit) and fills free_mem. */
static int memory_state(MtSearch *h)
{
    int first = 1, worst = -1;
    double wv = 0;
    for (int s = 0; s < h->S; s++) {
        StageCost sc;
        stage_cost_of(h, s, first, h->cnt[s], &sc);
        first += h->cnt[s];
        int K = h->S - s < h->B ? h->S - s : h->B;   /* 1F1B in-flight */
        double cap = h->x->c->meshes[h->mesh[s]].dev.mem_bytes;
        h->free_mem[s] = (cap - sc.mem_static - K * sc.mem_act) / cap;
        if (h->free_mem[s] < wv) {
            wv = h->free_mem[s];
            worst = s;
        }
    }
    return worst;
}

/* Proportional split, then memory repair; returns 1 when it fits, with
 * *moved = number of layers moved by the repair. */
static int balance(MtSearch *h, int *moved)
{
    const AltContext *x = h->x;
    double rate[MT_MAX_STAGES], tot = 0;
    for (int s = 0; s < h->S; s++) {
        StageCost sc;
        double t = stage_cost_of(h, s, 1, x->L, &sc);
        rate[s] = x->L / t;
        tot += rate[s];
    }
    int sum = 0;
    for (int s = 0; s < h->S; s++) {
        h->cnt[s] = (int)floor(x->L * rate[s] / tot);
        if (h->cnt[s] < 1)
            h->cnt[s] = 1;
        sum += h->cnt[s];
    }
    while (sum != x->L) {
        int pick = -1;
        double bv = INFINITY;
        for (int s = 0; s < h->S; s++) {
            if (sum > x->L && h->cnt[s] <= 1)
                continue;
            double v = sum > x->L ? -(h->cnt[s] - 1) / rate[s] : (h->cnt[s] + 1) / rate[s];
            if (v < bv) {
                bv = v;
                pick = s;
            }
        }
        if (pick < 0)
            return 0;
        h->cnt[pick] += sum > x->L ? -1 : 1;
        sum += sum > x->L ? -1 : 1;
    }
    *moved = 0;
    for (int it = 0; it < x->L; it++) {
        int w = memory_state(h);
        if (w < 0)
            return 1;
        if (h->cnt[w] <= 1)
            return 0;
        int to = -1;
        double room = -INFINITY;
        for (int s = 0; s < h->S; s++)
            if (s != w && h->free_mem[s] > room) {
                room = h->free_mem[s];
                to = s;
            }
        if (to < 0 || room <= 0)
            return 0;
        h->cnt[w]--;
        h->cnt[to]++;
        (*moved)++;
    }
    return memory_state(h) < 0;
}

static double metis_cost(MtSearch *h)
{
    double sum = 0, mx = 0, sync = 0;
    int first = 1;
    for (int s = 0; s < h->S; s++) {
        StageCost sc;
        double t = stage_cost_of(h, s, first, h->cnt[s], &sc);
        first += h->cnt[s];
        sum += t;
        if (t > mx)
            mx = t;
        if (sc.t_sync > sync)
            sync = sc.t_sync;
        if (s + 1 < h->S)
            sum += 2 * alt_comm(h->x, first - 1, h->mesh[s], h->mesh[s + 1],
                                (double)h->x->samples / h->B);
    }
    return sum + (h->B - 1) * mx + sync;
}

static int valid_strategy(const MtSearch *h)
{
    for (int s = 0; s < h->S; s++) {
        long rows = h->x->samples;
        if (rows % ((long)h->B * h->dp[s]))
            return 0;
        long mbs = rows / h->B / h->dp[s];
        if (mbs < 1 || mbs > MT_MAX_BS || h->tp[s] > tpcap(h->x, h->mesh[s]))
            return 0;
    }
    return 1;
}

static int next_strategy(MtSearch *h, int have_state)
{
    int pick = -1;
    if (h->memory_aware && have_state) {
        double least = INFINITY;
        for (int s = 0; s < h->S; s++)
            if (h->dp[s] > 1 && h->tp[s] * 2 <= tpcap(h->x, h->mesh[s]) && h->free_mem[s] < least) {
                least = h->free_mem[s];
                pick = s;
            }
    } else {
        for (int s = 0; s < h->S && pick < 0; s++)
            if (h->dp[s] > 1 && h->tp[s] * 2 <= tpcap(h->x, h->mesh[s]))
                pick = s;
    }
    if (pick < 0)
        return 0;
    h->dp[pick] /= 2;
    h->tp[pick] *= 2;
    return 1;
}

static void intra_search(MtSearch *h)
{
    for (int s = 0; s < h->S; s++) {
        h->dp[s] = h->g[s];
        h->tp[s] = 1;
    }
    int have_state = 0;
    for (;;) {
        if (valid_strategy(h)) {
            int moved = 0;
            h->steps++;
            int ok = balance(h, &moved);
            have_state = 1;
            if (ok) {
                double c = metis_cost(h);
                if (c < h->best) {
                    h->best = c;
                    h->best_S = h->S;
                    h->best_B = h->B;
                    memcpy(h->best_mesh, h->mesh, sizeof h->mesh);
                    memcpy(h->best_dp, h->dp, sizeof h->dp);
                    memcpy(h->best_tp, h->tp, sizeof h->tp);
                    memcpy(h->best_cnt, h->cnt, sizeof h->cnt);
                }
                if (moved == 0)
                    return;
            } else {
                double w = 0;
                for (int s = 0; s < h->S; s++)
                    if (-h->free_mem[s] > w)
                        w = -h->free_mem[s];
                if (1 + w < h->closest)
                    h->closest = 1 + w;
            }
        }
        if (!next_strategy(h, have_state))
            return;
    }
}

/* Every stage-count vector k over the meshes of the current order. */
static void enum_groups(MtSearch *h, int q)
{
    const ClusterSpec *c = h->x->c;
    if (q == h->nord) {
        int S = 0, gmin = 1 << 30, gmax = 0;
        for (int i = 0; i < h->nord; i++) {
            int a = h->order[i];
            int n = c->meshes[a].nodes * c->meshes[a].per_node, g = n / h->k[i];
            for (int j = 0; j < h->k[i]; j++) {
                if (S >= MT_MAX_STAGES)
                    return;
                h->mesh[S] = a;
                h->g[S] = g;
                S++;
            }
            if (g < gmin)
                gmin = g;
            if (g > gmax)
                gmax = g;
        }
        if (S > h->x->L || gmin < MT_VARIANCE * gmax)
            return;
        h->S = S;
        for (int B = h->x->samples; B >= 1; B--) {
            if (h->x->samples % B)
                continue;
            h->B = B;
            intra_search(h);
        }
        return;
    }
    int a = h->order[q], n = c->meshes[a].nodes * c->meshes[a].per_node;
    for (int k = 1; k <= n; k++) {
        if (n % k)
            continue;
        int g = n / k;
        if (g & (g - 1))
            continue;
        h->k[q] = k;
        enum_groups(h, q + 1);
    }
}

static void permute(MtSearch *h, int *arr, int n, int i)
{
    if (i == n) {
        memcpy(h->order, arr, (size_t)n * sizeof *arr);
        h->nord = n;
        enum_groups(h, 0);
        return;
    }
    for (int j = i; j < n; j++) {
        int t = arr[i];
        arr[i] = arr[j];
        arr[j] = t;
        permute(h, arr, n, i + 1);
        t = arr[i];
        arr[i] = arr[j];
        arr[j] = t;
    }
}

int alt_plan_metis(const AltContext *x, int memory_aware, AltPlan *out, IrError *err)
{
    const char *name = memory_aware ? "metis-mem" : "metis";
    const ClusterSpec *c = x->c;
    if (c->nmeshes > 16)
        return ir_errorf(err, "%s: at most 16 meshes", name);
    MtSearch *h = calloc(1, sizeof *h);
    if (!h)
        return ir_errorf(err, "%s: out of memory", name);
    h->x = x;
    h->memory_aware = memory_aware;
    h->best = INFINITY;
    h->closest = INFINITY;
    int arr[16];
    for (int a = 0; a < c->nmeshes; a++)
        arr[a] = a;
    if (c->nmeshes <= 5)
        permute(h, arr, c->nmeshes, 0);
    else {
        memcpy(h->order, arr, sizeof arr);
        h->nord = c->nmeshes;
        enum_groups(h, 0);
        for (int a = 0; a < c->nmeshes; a++)
            h->order[a] = c->nmeshes - 1 - a;
        enum_groups(h, 0);
    }
    int rc;
    if (!isfinite(h->best)) {
        if (isfinite(h->closest))
            rc = ir_errorf(err, "%s: no feasible plan: memory: after load balancing the best "
                           "strategy still needs %.0f%% of a device", name, 100 * h->closest);
        else
            rc = ir_errorf(err, "%s: no feasible plan: no valid strategy (per-rank microbatch "
                           "1..%d, power-of-two groups, TP within a node)", name, MT_MAX_BS);
        free(h);
        return rc;
    }
    if (alt_plan_init(out, name, h->best_S, err)) {
        free(h);
        return -1;
    }
    alt_assign_layers(out, h->best_cnt);
    for (int s = 0; s < h->best_S; s++)
        alt_stage_single(&out->stages[s], h->best_mesh[s], h->best_dp[s] * h->best_tp[s],
                         h->best_dp[s], h->best_tp[s], 0);
    out->microbatches = h->best_B;
    out->mb_samples = (double)x->samples / h->best_B;
    out->schedule = SCHED_1F1B;
    out->objective = h->best;
    out->steps = h->steps;
    free(h);
    return alt_plan_eval(x, out, err);
}

int alt_plan_metis_plain(const AltContext *x, AltPlan *out, IrError *err)
{
    return alt_plan_metis(x, 0, out, err);
}

int alt_plan_metis_mem(const AltContext *x, AltPlan *out, IrError *err)
{
    return alt_plan_metis(x, 1, out, err);
}
