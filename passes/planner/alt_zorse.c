/* Zorse (seed 000 §4), as designed: PP across GPU groups, ZeRO-2 DP inside
 * a group with heterogeneous GPUs (per-GPU microbatch shares in proportion
 * to GPU speed), no TP; each group's layers cut into equal ministages placed
 * round-robin along the pipe, GPipe order with CPU offload (optimizer
 * states, idle ministages, activations) and interleaved optimizer updates.
 *
 * Phase 1 (§4.3.2): the cluster as a graph, one vertex per NODE (a host:
 *   Zorse partitions "cluster nodes"; its GPUs never split), edge weight =
 *   GPUs(u) x GPUs(v) x bandwidth(u, v) (the GPU-level graph of the paper
 *   summed per node pair; a cpu-mediated link counts its PCIe copies);
 *   SPLIT: repeatedly take the component whose min 2-cut (Stoer-Wagner) is
 *   lightest and cut it, giving partitions for every k.
 * Phase 2 (§4.3.3): groups ordered by descending intra-group bandwidth;
 *   layers split in proportion to each group's summed GPU speed; then the
 *   O(B L) enumeration of the microbatch count (every divisor of the batch)
 *   and ministages per group (1 .. fewest layers of a group); each is one
 *   SEARCH STEP, costed by
 *     latency (Eq. 1) L = (L_fwd + L_bwd) N_ministages + L_startup, with
 *       L_fwd = max over ministages of max(B t_f, B c, load)   (compute, PP
 *       L_bwd = max over ministages of max(B t_b, B c, sync, 2 load)  comm and
 *               host transfers overlap; load = the ministage's weights over
 *               PCIe, 2 load = weights in and gradients out;
 *               t_b includes the recompute of activation checkpointing;
 *               sync = the ministage's ZeRO-2 reduce-scatter + all-gather)
 *       L_startup = first round's t_f + c per group + loading the first
 *               ministage's weights from the host over PCIe;
 *     memory (Eq. 2) per GPU = M_params + M_grads (training dtype, the
 *       ministage computed and the one prefetched) + M_optim (on the host)
 *       + M_activations (2 microbatches' checkpoints, the rest offloaded)
 *       + the runtime reserve.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alt_plan.h"

typedef struct ZNode {
    int mesh, node, gpus;
} ZNode;

static double node_bw(const AltContext *x, const ZNode *u, const ZNode *v)
{
    const ClusterSpec *c = x->c;
    if (u->mesh == v->mesh)
        return c->meshes[u->mesh].inter_bw;
    const LinkSpec *l = cluster_link(c, u->mesh, v->mesh);
    if (!l || !(l->bw > 0))
        return 0;
    return l->cpu_mediated ? 1.0 / (1.0 / l->bw + 2.0 / x->co.pcie_bw) : l->bw;
}

/* Stoer-Wagner min cut of the vertices vs[0..n-1]; side[i] = 1 for one side. */
static double min_cut(const double *W, int V, const int *vs, int n, int *side)
{
    double *w = malloc((size_t)n * n * sizeof *w), *key = malloc((size_t)n * sizeof *key);
    int *alive = malloc((size_t)n * sizeof *alive), *added = malloc((size_t)n * sizeof *added);
    int *grp = malloc((size_t)n * n * sizeof *grp), *gn = malloc((size_t)n * sizeof *gn);
    double best = INFINITY;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++)
            w[i * n + j] = W[vs[i] * V + vs[j]];
        alive[i] = 1;
        grp[i * n] = i;
        gn[i] = 1;
        side[i] = 0;
    }
    for (int phase = n; phase > 1; phase--) {
        for (int i = 0; i < n; i++) {
            added[i] = 0;
            key[i] = 0;
        }
        int prev = -1, last = -1;
        for (int it = 0; it < phase; it++) {
            int sel = -1;
            for (int i = 0; i < n; i++)
                if (alive[i] && !added[i] && (sel < 0 || key[i] > key[sel]))
                    sel = i;
            added[sel] = 1;
            prev = last;
            last = sel;
            for (int i = 0; i < n; i++)
                if (alive[i] && !added[i])
                    key[i] += w[sel * n + i];
        }
        if (key[last] < best) {
            best = key[last];
            for (int i = 0; i < n; i++)
                side[i] = 0;
            for (int q = 0; q < gn[last]; q++)
                side[grp[last * n + q]] = 1;
        }
        /* merge last into prev */
        for (int q = 0; q < gn[last]; q++)
            grp[prev * n + gn[prev]++] = grp[last * n + q];
        alive[last] = 0;
        for (int i = 0; i < n; i++) {
            w[prev * n + i] += w[last * n + i];
            w[i * n + prev] = w[prev * n + i];
        }
        w[prev * n + prev] = 0;
    }
    free(w);
    free(key);
    free(alive);
    free(added);
    free(grp);
    free(gn);
    return best;
}

typedef struct ZGroup {
    AltPart parts[ALT_MAX_PARTS];
    int nparts, gpus, nodes;
    double speed, intra_bw;
    int layers;
} ZGroup;

typedef struct ZBest {
    double lat;
    int k, B, nm;
    ZGroup g[64];
    long steps;
    double closest;
    int rows_short;         /* a microbatch count skipped: fewer rows than a group's GPUs */
} ZBest;

/* Per-ministage figures for group g, ministage layers [a, b]. */
static void ms_cost(const AltContext *x, const ZGroup *g, int a, int b, double mb, double *tf,
                    double *tb, double *peak_ratio, double *sync)
{
    *tf = *tb = *peak_ratio = 0;
    double params = 0;
    for (int l = a; l <= b; l++)
        params += x->layers[l - 1].param_bytes;
    for (int j = 0; j < g->nparts; j++) {
        StageCost sc;
        double frac = mb * g->parts[j].share / g->parts[j].devices;
        alt_stage_cost(x, a, b, g->parts[j].mesh, g->parts[j].devices, 1, 1, 2, g->gpus, frac, &sc);
        if (sc.t_f > *tf)
            *tf = sc.t_f;
        if (sc.t_b > *tb)
            *tb = sc.t_b;
        double mem = 4.0 * params + x->co.runtime_reserve_bytes + 2 * sc.mem_act;
        double r = mem / x->c->meshes[g->parts[j].mesh].dev.mem_bytes;
        if (r > *peak_ratio)
            *peak_ratio = r;
    }
    /* ZeRO-2: reduce-scatter + all-gather = one ring all-reduce's volume */
    *sync = g->gpus > 1 ? (g->intra_bw > 0 ? 2.0 * (g->gpus - 1) / g->gpus * params / g->intra_bw
                                           : INFINITY)
                        : 0;
}

static void phase2(const AltContext *x, ZGroup *gs, int k, ZBest *best)
{
    /* order by descending intra-group bandwidth */
    for (int i = 1; i < k; i++) {
        ZGroup t = gs[i];
        int j = i - 1;
        while (j >= 0 && gs[j].intra_bw < t.intra_bw) {
            gs[j + 1] = gs[j];
            j--;
        }
        gs[j + 1] = t;
    }
    double tot = 0;
    for (int g = 0; g < k; g++)
        tot += gs[g].speed;
    int sum = 0, minl = x->L;
    for (int g = 0; g < k; g++) {
        gs[g].layers = (int)floor(x->L * gs[g].speed / tot);
        if (gs[g].layers < 1)
            gs[g].layers = 1;
        sum += gs[g].layers;
    }
    while (sum != x->L) {   /* fix rounding on the group whose share moves least */
        int pick = -1;
        double bv = INFINITY;
        for (int g = 0; g < k; g++) {
            if (sum > x->L && gs[g].layers <= 1)
                continue;
            double v = sum > x->L ? -(gs[g].layers - 1) / gs[g].speed : (gs[g].layers + 1) / gs[g].speed;
            if (v < bv) {
                bv = v;
                pick = g;
            }
        }
        if (pick < 0)
            return;
        gs[pick].layers += sum > x->L ? -1 : 1;
        sum += sum > x->L ? -1 : 1;
    }
    for (int g = 0; g < k; g++) {
        if (gs[g].layers < minl)
            minl = gs[g].layers;
        /* host memory: the group's offloaded states (fp32 master + Adam, and
         * the training-dtype weights and gradients of idle ministages,
         * 16 B per fp16 parameter), spread over its nodes */
        double params = 0;
        for (int l = 0; l < x->L; l++)
            params += x->layers[l].param_bytes;
        params *= (double)gs[g].layers / x->L;
        double host = params / dtype_size_bytes(x->c->dtype) * 16.0 / gs[g].nodes;
        if (host > x->host_mem_per_node) {
            double r = host / x->host_mem_per_node;
            if (r < best->closest)
                best->closest = r;
            return;
        }
    }
    int gmax = 0;
    for (int g = 0; g < k; g++)
        if (gs[g].gpus > gmax)
            gmax = gs[g].gpus;
    for (int B = 1; B <= x->samples; B++) {
        if (x->samples % B)
            continue;
        double mb = (double)x->samples / B;
        /* every GPU of a group is a DP rank of its ministages and needs at
         * least one row of the pipeline microbatch (x->rows x mb rows) */
        if (x->rows > 0 && floor(x->rows * mb + 1e-9) < gmax) {
            best->rows_short = 1;
            continue;
        }
        for (int nm = 1; nm <= minl; nm++) {
            best->steps++;
            double lf = 0, lb = 0, startup = 0, worst = 0;
            int first = 1;
            for (int r = 0; r < nm; r++)
                for (int g = 0; g < k; g++) {
                    int n = (int)((long)(r + 1) * gs[g].layers / nm - (long)r * gs[g].layers / nm);
                    int last = first + n - 1;
                    double tf, tb, pr, sync;
                    ms_cost(x, &gs[g], first, last, mb, &tf, &tb, &pr, &sync);
                    double c = 0;
                    if (last < x->L) {
                        const ZGroup *nx = &gs[(g + 1) % k];
                        for (int j = 0; j < gs[g].nparts; j++)
                            for (int q = 0; q < nx->nparts; q++) {
                                double cc = alt_comm(x, last, gs[g].parts[j].mesh, nx->parts[q].mesh, mb);
                                if (cc > c)
                                    c = cc;
                            }
                    }
                    /* the ministage's weights come from the host (and its
                     * gradients go back) over PCIe, overlapped with compute */
                    double msp = 0;
                    for (int l = first; l <= last; l++)
                        msp += x->layers[l - 1].param_bytes;
                    double ld = msp / x->co.pcie_bw;
                    double f = fmax(fmax(B * tf, B * c), ld);
                    double b = fmax(fmax(fmax(B * tb, B * c), sync), 2 * ld);
                    if (f > lf)
                        lf = f;
                    if (b > lb)
                        lb = b;
                    if (r == 0) {
                        startup += tf + c;
                        if (g == 0) {
                            double params = 0;
                            for (int l = first; l <= last; l++)
                                params += x->layers[l - 1].param_bytes;
                            startup += params / x->co.pcie_bw;
                        }
                    }
                    if (pr > worst)
                        worst = pr;
                    first = last + 1;
                }
            if (worst > 1) {
                if (worst < best->closest)
                    best->closest = worst;
                continue;
            }
            double lat = (lf + lb) * nm + startup;
            if (lat < best->lat) {
                best->lat = lat;
                best->k = k;
                best->B = B;
                best->nm = nm;
                memcpy(best->g, gs, (size_t)k * sizeof *gs);
            }
        }
    }
}

/* SPLIT (§4.3.2): the k-th partition from the (k-1)-th, comp[] the
 * component of each node; returns 1 when no component has two nodes. */
static int zorse_split(const double *W, int V, int k, int *comp, int *vs, int *side)
{
    /* SPLIT: cut the component whose min 2-cut is lightest */
    double bc = INFINITY;
    int bcomp = -1;
    for (int q = 0; q < k - 1; q++) {
        int n = 0;
        for (int i = 0; i < V; i++)
            if (comp[i] == q)
                vs[n++] = i;
        if (n < 2)
            continue;
        double cut = min_cut(W, V, vs, n, side);
        if (cut < bc) {
            bc = cut;
            bcomp = q;
        }
    }
    if (bcomp < 0)
        return 1;
    int n = 0;
    for (int i = 0; i < V; i++)
        if (comp[i] == bcomp)
            vs[n++] = i;
    min_cut(W, V, vs, n, side);
    for (int i = 0; i < n; i++)
        if (side[i])
            comp[vs[i]] = k - 1;
    return 0;
}

/* The k groups of partition comp: parts per mesh, GPUs, nodes, slowest
 * internal link, speed and per-GPU microbatch shares.  Returns 0 when a
 * group spans more meshes than ALT_MAX_PARTS. */
static int zorse_groups(const AltContext *x, const ZNode *nd, int V, const int *comp,
                        const double *rate, ZGroup *gs, int k)
{
    const ClusterSpec *c = x->c;
    int ok = 1;
    for (int g = 0; g < k; g++) {
        ZGroup *G = &gs[g];
        memset(G, 0, sizeof *G);
        G->intra_bw = INFINITY;
        for (int i = 0; i < V; i++) {
            if (comp[i] != g)
                continue;
            int j;
            for (j = 0; j < G->nparts && G->parts[j].mesh != nd[i].mesh; j++)
                ;
            if (j == G->nparts) {
                if (G->nparts == ALT_MAX_PARTS) {
                    ok = 0;
                    break;
                }
                G->parts[G->nparts++].mesh = nd[i].mesh;
            }
            G->parts[j].devices += nd[i].gpus;
            G->gpus += nd[i].gpus;
            G->nodes++;
            const MeshSpec *m = &c->meshes[nd[i].mesh];
            if (m->per_node > 1 && m->intra_bw < G->intra_bw)
                G->intra_bw = m->intra_bw;
            for (int q = 0; q < V; q++)
                if (q != i && comp[q] == g) {
                    double b = node_bw(x, &nd[i], &nd[q]);
                    if (b < G->intra_bw)
                        G->intra_bw = b;
                }
        }
        for (int j = 0; j < G->nparts; j++)
            G->speed += G->parts[j].devices * rate[G->parts[j].mesh];
        for (int j = 0; j < G->nparts; j++)   /* per-GPU microbatch shares */
            G->parts[j].share = G->parts[j].devices * rate[G->parts[j].mesh] / G->speed;
    }
    return ok;
}

int alt_plan_zorse(const AltContext *x, AltPlan *out, IrError *err)
{
    const ClusterSpec *c = x->c;
    int V = 0;
    for (int a = 0; a < c->nmeshes; a++)
        V += c->meshes[a].nodes;
    ZNode *nd = calloc((size_t)V, sizeof *nd);
    double *W = calloc((size_t)V * V, sizeof *W);
    int *comp = calloc((size_t)V, sizeof *comp), *vs = calloc((size_t)V, sizeof *vs);
    int *side = calloc((size_t)V, sizeof *side);
    ZBest *best = calloc(1, sizeof *best);
    ZGroup *gs = calloc(64, sizeof *gs);
    int rc = 0;
    if (!nd || !W || !comp || !vs || !side || !best || !gs) {
        rc = ir_errorf(err, "zorse: out of memory");
        goto out;
    }
    int v = 0;
    for (int a = 0; a < c->nmeshes; a++)
        for (int n = 0; n < c->meshes[a].nodes; n++, v++) {
            nd[v].mesh = a;
            nd[v].node = n;
            nd[v].gpus = c->meshes[a].per_node;
        }
    for (int i = 0; i < V; i++)
        for (int j = 0; j < V; j++)
            W[i * V + j] = i == j ? 0 : nd[i].gpus * nd[j].gpus * node_bw(x, &nd[i], &nd[j]);
    double *rate = calloc((size_t)c->nmeshes, sizeof *rate);
    if (!rate) {
        rc = ir_errorf(err, "zorse: out of memory");
        goto out;
    }
    for (int a = 0; a < c->nmeshes; a++) {
        StageCost sc;
        alt_stage_cost(x, 1, x->L, a, 1, 1, 1, 0, 0, 1.0, &sc);
        rate[a] = 1.0 / (sc.t_f + sc.t_b);
    }
    best->lat = INFINITY;
    best->closest = INFINITY;
    best->rows_short = 0;
    int kmax = V < x->L ? V : x->L;
    if (kmax > 64)
        kmax = 64;
    for (int k = 1; k <= kmax; k++) {
        if (k > 1 && zorse_split(W, V, k, comp, vs, side))
            break;
        int ok = zorse_groups(x, nd, V, comp, rate, gs, k);
        if (ok)
            phase2(x, gs, k, best);
    }
    free(rate);
    if (!isfinite(best->lat)) {
        if (isfinite(best->closest))
            rc = ir_errorf(err, "zorse: no feasible plan: memory (Eq. 2 with offload): the best "
                           "configuration still needs %.0f%% of a device (or of a node's %.0f GiB "
                           "host memory for offloaded states)", 100 * best->closest,
                           x->host_mem_per_node / 1073741824.0);
        else if (best->rows_short)
            rc = ir_errorf(err, "zorse: no feasible plan: rows: every group partition gives "
                           "a GPU group more GPUs (DP ranks) than the rows of its pipeline "
                           "microbatch (at most the global batch, %d)", x->rows * x->samples);
        else
            rc = ir_errorf(err, "zorse: no feasible plan: no group partition and microbatch count "
                           "could be costed");
        goto out;
    }
    int S = best->k * best->nm;
    int *cnt = calloc((size_t)S, sizeof *cnt);
    if (!cnt || alt_plan_init(out, "zorse", S, err)) {
        free(cnt);
        rc = cnt ? -1 : ir_errorf(err, "zorse: out of memory");
        goto out;
    }
    int s = 0;
    for (int r = 0; r < best->nm; r++)
        for (int g = 0; g < best->k; g++, s++) {
            const ZGroup *G = &best->g[g];
            AltStage *st = &out->stages[s];
            st->nparts = G->nparts;
            memcpy(st->parts, G->parts, sizeof G->parts);
            st->dp = G->gpus;
            st->tp = 1;
            st->recompute = 1;
            st->group = g + 1;
            cnt[s] = (int)((long)(r + 1) * G->layers / best->nm - (long)r * G->layers / best->nm);
        }
    alt_assign_layers(out, cnt);
    free(cnt);
    out->microbatches = best->B;
    out->mb_samples = (double)x->samples / best->B;
    out->schedule = SCHED_GPIPE;
    out->zero_stage = 2;
    out->offload = 1;
    out->objective = best->lat;
    out->steps = best->steps;
    rc = alt_plan_eval(x, out, err);
out:
    free(nd);
    free(W);
    free(comp);
    free(vs);
    free(side);
    free(best);
    free(gs);
    return rc;
}
