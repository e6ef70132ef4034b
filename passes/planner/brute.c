/* Brute-force enumeration under Eq. 13 (see brute.h).  Written
 * independently of the DP's tables (hapt_tables.c): it asks the oracle directly. */
#include "brute.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct BStage {
    int k, i, mesh;
    Submesh sub;
    StageCost sc;
} BStage;

typedef struct Brute {
    const ClusterSpec *c;
    const CostOracle *o;
    const DpOptions *opt;
    int L, P;
    const int *order;       /* current mesh order */
    double *tc;             /* candidate t_max, ascending, distinct */
    int ntc;
    BStage *cur;            /* stack */
    double *cbuf;
    int *nbuf;
    long layouts;
    double best;
    BStage *best_st;
    int best_n, best_order_idx, order_idx;
    double best_tmax;
    int *best_order;
    int failed;
} Brute;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void evaluate(Brute *br, int S)
{
    br->layouts++;
    const DpOptions *opt = br->opt;
    double tmax0 = 0, sum = 0;
    for (int q = 0; q < S; q++) {
        BStage *s = &br->cur[q];
        double t = s->sc.t_f + s->sc.t_b;
        br->cbuf[q] = q + 1 < S ? br->o->comm(br->o->ctx, s->i, s->mesh, br->cur[q + 1].mesh) : 0;
        if (t > tmax0)
            tmax0 = t;
        if (opt->comm_bound && br->cbuf[q] > tmax0)
            tmax0 = br->cbuf[q];
    }
    /* the first candidate >= tmax0 */
    int lo = 0, hi = br->ntc;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (br->tc[mid] < tmax0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int q = lo; q < br->ntc; q++) {
        double T = br->tc[q];
        int ok = 1;
        if (opt->check_memory) {
            schedule_warmups(opt->schedule, S, opt->microbatches, br->cbuf, T, opt->eps, br->nbuf,
                             NULL, NULL);
            for (int z = 0; z < S && ok; z++)
                ok = stage_fits_memory(br->cur[z].sc.mem_static, br->cur[z].sc.mem_act,
                                       br->nbuf[z], br->c->meshes[br->cur[z].mesh].dev.mem_bytes);
        }
        if (!ok)
            continue;
        sum = 0;
        for (int z = S - 1; z >= 0; z--)
            sum += br->cur[z].sc.t_f + br->cur[z].sc.t_b + 2.0 * br->cbuf[z];
        double v = sum + (double)(opt->microbatches - 1) * T;
        if (v < br->best) {
            br->best = v;
            br->best_tmax = T;
            br->best_n = S;
            memcpy(br->best_st, br->cur, (size_t)S * sizeof *br->cur);
            memcpy(br->best_order, br->order, (size_t)br->P * sizeof *br->order);
        }
        break; /* larger T only costs more */
    }
}

/* Stages from layer k on, mesh position p with d devices of it left. */
static void rec(Brute *br, int k, int p, int d, int depth)
{
    if (br->failed)
        return;
    int a = br->order[p];
    const MeshSpec *m = &br->c->meshes[a];
    Submesh subs[64];
    int ns = submesh_enumerate(m->nodes, m->per_node, subs, 64);
    for (int j = 0; j < ns && j < 64; j++) {
        int nm = subs[j].n * subs[j].m;
        if (nm > d)
            continue;
        for (int i = k; i <= br->L; i++) {
            StageCost sc;
            memset(&sc, 0, sizeof sc);
            if (br->o->stage(br->o->ctx, k, i, a, subs[j], &sc) != 0) {
                br->failed = 1;
                return;
            }
            if (!sc.feasible || !isfinite(sc.t_f + sc.t_b))
                continue;
            br->cur[depth] = (BStage){k, i, a, subs[j], sc};
            int nd = d - nm;
            if (nd > 0) {
                if (i < br->L)
                    rec(br, i + 1, p, nd, depth + 1);
            } else if (p + 1 < br->P) {
                if (i < br->L)
                    rec(br, i + 1, p + 1,
                        br->c->meshes[br->order[p + 1]].nodes *
                            br->c->meshes[br->order[p + 1]].per_node,
                        depth + 1);
            } else if (i == br->L) {
                evaluate(br, depth + 1);
            }
        }
    }
}

static void permute(Brute *br, int *perm, int l, int all)
{
    if (l == br->P || !all) {
        br->order = perm;
        int a = perm[0];
        rec(br, 1, 0, br->c->meshes[a].nodes * br->c->meshes[a].per_node, 0);
        return;
    }
    for (int q = l; q < br->P; q++) {
        int t = perm[l];
        perm[l] = perm[q];
        perm[q] = t;
        permute(br, perm, l + 1, all);
        t = perm[l];
        perm[l] = perm[q];
        perm[q] = t;
    }
}

int brute_plan(const ClusterSpec *c, int L, const CostOracle *o, const DpOptions *opt, Plan *out,
               long *layouts, IrError *err)
{
    memset(out, 0, sizeof *out);
    if (layouts)
        *layouts = 0;
    if (!c || c->nmeshes <= 0 || L <= 0 || opt->microbatches <= 0)
        return ir_errorf(err, "brute: bad instance");
    if (c->nmeshes > opt->max_perm_meshes && !opt->fixed_order)
        return ir_errorf(err, "brute: %d meshes: the DP searches a heuristic subset of orders "
                         "beyond %d, the brute force only all of them", c->nmeshes,
                         opt->max_perm_meshes);
    Brute br;
    memset(&br, 0, sizeof br);
    br.c = c;
    br.o = o;
    br.opt = opt;
    br.L = L;
    br.P = c->nmeshes;
    br.best = DBL_MAX;
    /* Candidate t_max: every distinct feasible stage time (as the DP). */
    long ncap = 0;
    for (int a = 0; a < br.P; a++)
        ncap += (long)submesh_enumerate(c->meshes[a].nodes, c->meshes[a].per_node, NULL, 0) *
                L * (L + 1) / 2;
    br.tc = malloc((size_t)(ncap + 1) * sizeof *br.tc);
    br.cur = calloc((size_t)L, sizeof *br.cur);
    br.best_st = calloc((size_t)L, sizeof *br.best_st);
    br.cbuf = calloc((size_t)L, sizeof *br.cbuf);
    br.nbuf = calloc((size_t)L, sizeof *br.nbuf);
    br.best_order = calloc((size_t)br.P, sizeof *br.best_order);
    int *perm = calloc((size_t)br.P, sizeof *perm);
    int rc = -1;
    if (!br.tc || !br.cur || !br.best_st || !br.cbuf || !br.nbuf || !br.best_order || !perm) {
        ir_errorf(err, "brute: out of memory");
        goto done;
    }
    for (int a = 0; a < br.P; a++) {
        Submesh subs[64];
        int ns = submesh_enumerate(c->meshes[a].nodes, c->meshes[a].per_node, subs, 64);
        for (int j = 0; j < ns && j < 64; j++)
            for (int k = 1; k <= L; k++)
                for (int i = k; i <= L; i++) {
                    StageCost sc;
                    memset(&sc, 0, sizeof sc);
                    if (o->stage(o->ctx, k, i, a, subs[j], &sc) != 0) {
                        ir_errorf(err, "brute: oracle failed");
                        goto done;
                    }
                    double t = sc.t_f + sc.t_b;
                    if (sc.feasible && isfinite(t) && t >= 0)
                        br.tc[br.ntc++] = t;
                }
    }
    qsort(br.tc, (size_t)br.ntc, sizeof *br.tc, cmp_d);
    int nd = 0;
    for (int q = 0; q < br.ntc; q++)
        if (nd == 0 || br.tc[q] != br.tc[nd - 1])
            br.tc[nd++] = br.tc[q];
    br.ntc = nd;
    for (int a = 0; a < br.P; a++)
        perm[a] = a;
    if (br.P <= L)
        permute(&br, perm, 0, !opt->fixed_order);
    if (br.failed) {
        ir_errorf(err, "brute: oracle failed");
        goto done;
    }
    if (layouts)
        *layouts = br.layouts;
    if (br.best == DBL_MAX) {
        ir_errorf(err, "brute: no feasible layout (%ld evaluated)", br.layouts);
        goto done;
    }
    out->stages = calloc((size_t)br.best_n, sizeof *out->stages);
    out->mesh_order = calloc((size_t)br.P, sizeof *out->mesh_order);
    if (!out->stages || !out->mesh_order) {
        ir_errorf(err, "brute: out of memory");
        goto done;
    }
    out->nstages = br.best_n;
    out->nmesh_order = br.P;
    memcpy(out->mesh_order, br.best_order, (size_t)br.P * sizeof *br.best_order);
    out->microbatches = opt->microbatches;
    out->t_max = br.best_tmax;
    out->objective = br.best;
    out->schedule = opt->schedule;
    out->eps = opt->eps;
    for (int z = 0; z < br.best_n; z++) {
        out->stages[z].first_layer = br.best_st[z].k;
        out->stages[z].last_layer = br.best_st[z].i;
        out->stages[z].mesh = br.best_st[z].mesh;
        out->stages[z].sub = br.best_st[z].sub;
    }
    rc = plan_fill_schedule(out, o, err);
done:
    if (rc)
        plan_free(out);
    free(br.tc);
    free(br.cur);
    free(br.best_st);
    free(br.cbuf);
    free(br.nbuf);
    free(br.best_order);
    free(perm);
    return rc;
}
