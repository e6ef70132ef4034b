/* HAPT's DP (hapt_dp.h): options, and the oracle tabulated once per search:
 * every (mesh, submesh, k, i) stage candidate, every boundary C(i, a, b),
 * the distinct t_max candidates and the sparse index of §5.2.2 (1). */
#include "hapt_dp_impl.h"

void dp_options_default(DpOptions *o)
{
    memset(o, 0, sizeof *o);
    o->microbatches = 1;
    o->eps = 0.1;
    o->schedule = SCHED_H1F1B;
    o->check_memory = 1;
    o->comm_bound = 1;
    o->sparse_index = 1;
    o->prune_tmax = 1;
    o->threads = 1;
    o->batch = 8;
    o->max_perm_meshes = 5;
    o->fixed_order = 0;
    o->tmax_comm_candidates = 0;
    o->time_limit = 0;
    o->max_groups = 0;
}

void plan_free(Plan *p)
{
    if (!p)
        return;
    free(p->stages);
    free(p->mesh_order);
    memset(p, 0, sizeof *p);
}

/* Eq. 24 as a threshold on K, computed with stage_fits_memory itself (it is
 * monotone in K: mem_act >= 0), so "K <= kmax" and the helper agree on
 * every K in 1..B. */
static int kmax_of(double mem_static, double mem_act, double mem_dev, int B)
{
    if (!stage_fits_memory(mem_static, mem_act, 1, mem_dev))
        return 0;
    if (!(mem_act > 0) || stage_fits_memory(mem_static, mem_act, B, mem_dev))
        return B;
    double e = floor((mem_dev - mem_static) / mem_act);
    int k = e < 1 ? 1 : e > B ? B : (int)e;
    while (k < B && stage_fits_memory(mem_static, mem_act, k + 1, mem_dev))
        k++;
    while (k > 1 && !stage_fits_memory(mem_static, mem_act, k, mem_dev))
        k--;
    return k;
}

static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return a < b ? -1 : a > b;
}

static int cmp_candref(const void *pa, const void *pb)
{
    const CandRef *a = pa, *b = pb;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    return a->i - b->i;
}

void ctx_free(Ctx *x)
{
    free(x->nsub);
    free(x->subs);
    free(x->tab);
    free(x->comm);
    free(x->sp_off);
    free(x->sp);
    free(x->tcand);
    free(x->unit);
    free(x->size);
}

static int mesh_group(int N, int G);

int hapt_dp_units(const ClusterSpec *c, int max_groups)
{
    long d = 0;
    for (int a = 0; a < c->nmeshes; a++) {
        const MeshSpec *m = &c->meshes[a];
        int g = mesh_group(m->nodes, max_groups);
        d += g ? m->nodes / g : (long)m->nodes * m->per_node;
    }
    return d > INT_MAX ? INT_MAX : (int)d;
}

int hapt_dp_searches_shape(const ClusterSpec *c, int max_groups, int mesh, Submesh sub)
{
    const MeshSpec *m = &c->meshes[mesh];
    int g = mesh_group(m->nodes, max_groups);
    return !g || (sub.m == m->per_node && sub.n % g == 0);
}

/* Nodes per group for a mesh of N nodes under DpOptions.max_groups G: 0
 * (search every shape of submesh_enumerate, device by device) when G is 0
 * or N <= G, else the smallest divisor g of N with N / g <= G (N itself
 * when no smaller one exists).  A HEURISTIC, not an exact reduction: the
 * mesh is then offered only the shapes (n·g, M), n = 1..N/g, and the DP
 * counts its devices in units of g·M, so plans with sub-node stages or
 * node counts that are not multiples of g on this mesh are not searched. */
static int mesh_group(int N, int G)
{
    if (G <= 0 || N <= G)
        return 0;
    for (int g = 2; g < N; g++)
        if (N % g == 0 && N / g <= G)
            return g;
    return N;
}

/* Mesh groups (mesh_group), submesh shapes and sizes in DP units, the
 * stage cap, and the tables' memory. */
static int ctx_meshes(Ctx *x, IrError *err)
{
    const int P = x->P, L = x->L;
    x->nsub = calloc((size_t)P, sizeof *x->nsub);
    if (!x->nsub)
        return ir_errorf(err, "plan: out of memory");
    x->unit = calloc((size_t)P, sizeof *x->unit);
    int *group = calloc((size_t)P, sizeof *group);
    if (!x->unit || !group) {
        free(group);
        return ir_errorf(err, "plan: out of memory");
    }
    x->nsubmax = 0;
    x->D = 0;
    x->ncoarse = 0;
    for (int a = 0; a < P; a++) {
        const MeshSpec *m = &x->c->meshes[a];
        if (m->nodes <= 0 || m->per_node <= 0) {
            free(group);
            return ir_errorf(err, "plan: mesh %d '%s' has %d nodes x %d devices", a, m->name,
                             m->nodes, m->per_node);
        }
        group[a] = mesh_group(m->nodes, x->opt->max_groups);
        x->unit[a] = group[a] ? group[a] * m->per_node : 1;
        x->nsub[a] = group[a] ? m->nodes / group[a]
                              : submesh_enumerate(m->nodes, m->per_node, NULL, 0);
        x->ncoarse += group[a] > 0;
        if (x->nsub[a] > x->nsubmax)
            x->nsubmax = x->nsub[a];
        x->D += m->nodes * m->per_node / x->unit[a];
    }
    /* the DP's choice packs (last layer i <= L, submesh j < nsubmax) in
     * an int (choice_pack) */
    if ((long long)(L + 1) * x->nsubmax > INT_MAX)
        return ir_errorf(err, "plan: %d layers x %d submesh shapes is too many to search", L,
                         x->nsubmax);
    x->Smax = L < x->D ? L : x->D;
    if (x->opt->max_stages > 0 && x->opt->max_stages < x->Smax)
        x->Smax = x->opt->max_stages;
    size_t L2 = (size_t)L + 2;
    size_t ntab = (size_t)P * x->nsubmax * L2 * L2;
    x->subs = calloc((size_t)P * x->nsubmax, sizeof *x->subs);
    x->size = calloc((size_t)P * x->nsubmax, sizeof *x->size);
    x->tab = calloc(ntab, sizeof *x->tab);
    x->comm = calloc(L2 * P * P, sizeof *x->comm);
    x->sp_off = calloc((size_t)P * x->nsubmax * L2 + 1, sizeof *x->sp_off);
    x->tcand = malloc((ntab + L2 * P * P) * sizeof *x->tcand);   /* + boundary costs */
    if (!x->subs || !x->size || !x->tab || !x->comm || !x->sp_off || !x->tcand) {
        free(group);
        return ir_errorf(err, "plan: out of memory tabulating %zu stage candidates", ntab);
    }
    for (int a = 0; a < P; a++) {
        const MeshSpec *m = &x->c->meshes[a];
        Submesh *sa = x->subs + (size_t)a * x->nsubmax;
        if (group[a])
            for (int j = 0; j < x->nsub[a]; j++)
                sa[j] = (Submesh){(j + 1) * group[a], m->per_node};
        else
            submesh_enumerate(m->nodes, m->per_node, sa, x->nsubmax);
        for (int j = 0; j < x->nsub[a]; j++)
            x->size[(size_t)a * x->nsubmax + j] = sa[j].n * sa[j].m / x->unit[a];
    }
    free(group);
    return 0;
}

/* Every (mesh, submesh, k, i) stage candidate from the oracle, its stage
 * time a t_max candidate where it is feasible. */
static int ctx_stages(Ctx *x, long *calls_io, long *nfeas_io, IrError *err)
{
    const int P = x->P, L = x->L;
    long calls = *calls_io, nfeas = *nfeas_io;
    for (int a = 0; a < P; a++)
        for (int j = 0; j < x->nsub[a]; j++) {
            if (out_of_time(x)) /* (issue 16) a huge table: the limit holds here too */
                return ir_errorf(err, "plan: the time limit of %g s passed while tabulating the "
                                 "stage candidates", x->opt->time_limit);
            for (int k = 1; k <= L; k++)
                for (int i = k; i <= L; i++) {
                    StageCost sc;
                    memset(&sc, 0, sizeof sc);
                    calls++;
                    Submesh sub = x->subs[(size_t)a * x->nsubmax + j];
                    if (x->o->stage(x->o->ctx, k, i, a, sub, &sc) != 0)
                        return ir_errorf(err, "plan: cost oracle failed for layers %d..%d on mesh "
                                         "%d '%s' submesh (%d,%d)", k, i, a,
                                         x->c->meshes[a].name, sub.n, sub.m);
                    Tab *t = tab_at(x, a, j, k, i);
                    t->t_f = sc.t_f;
                    t->t_b = sc.t_b;
                    t->t = sc.t_f + sc.t_b;
                    t->mem_static = sc.mem_static;
                    t->mem_act = sc.mem_act;
                    t->dp = sc.dp;
                    t->tp = sc.tp;
                    t->feasible = sc.feasible && isfinite(t->t) && t->t >= 0;
                    t->kmax = kmax_of(sc.mem_static, sc.mem_act, x->c->meshes[a].dev.mem_bytes, x->B);
                    if (t->feasible)
                        x->tcand[nfeas++] = t->t;
                }
        }
    *calls_io = calls;
    *nfeas_io = nfeas;
    return 0;
}

/* Every boundary cost C(i, a, b) from the oracle. */
static void ctx_boundaries(Ctx *x, long *calls_io, long *nfeas_io)
{
    const int P = x->P, L = x->L;
    long calls = *calls_io, nfeas = *nfeas_io;
    x->nonneg = 1;
    for (int i = 1; i < L; i++)
        for (int a = 0; a < P; a++)
            for (int b = 0; b < P; b++) {
                double cv = x->o->comm(x->o->ctx, i, a, b);
                x->comm[((size_t)i * P + a) * P + b] = cv;
                x->nonneg &= cv >= 0;
                calls++;
                /* (added by "plan") Where a slow link forces t_max above every
                 * stage time (constraint (ii), C(i) <= t_max), the stage times
                 * alone offer no usable t_max near C(i): offer C(i) itself. */
                if (x->opt->tmax_comm_candidates && x->opt->comm_bound && nfeas > 0 &&
                    isfinite(cv) && cv > 0)
                    x->tcand[nfeas++] = cv;
            }
    *calls_io = calls;
    *nfeas_io = nfeas;
}

static int ctx_sparse_index(Ctx *x, IrError *err)
{
    const int P = x->P, L = x->L;
    size_t L2 = (size_t)L + 2;
    /* Sparse index: the feasible ends i of each (mesh, submesh, start k),
     * sorted by stage time so a given t_max visits a prefix only. */
    size_t nk = (size_t)P * x->nsubmax * L2;
    for (size_t q = 0; q < nk; q++) {
        int a = (int)(q / ((size_t)x->nsubmax * L2)), k = (int)(q / x->nsubmax % L2),
            j = (int)(q % x->nsubmax);
        int cnt = 0;
        if (j < x->nsub[a] && k >= 1 && k <= L)
            for (int i = k; i <= L; i++)
                cnt += tab_at(x, a, j, k, i)->feasible;
        x->sp_off[q + 1] = x->sp_off[q] + cnt;
    }
    x->sp = malloc(((size_t)x->sp_off[nk] + 1) * sizeof *x->sp);
    if (!x->sp)
        return ir_errorf(err, "plan: out of memory building the sparse index");
    for (size_t q = 0; q < nk; q++) {
        int a = (int)(q / ((size_t)x->nsubmax * L2)), k = (int)(q / x->nsubmax % L2),
            j = (int)(q % x->nsubmax);
        CandRef *r = x->sp + x->sp_off[q];
        int cnt = 0;
        if (j < x->nsub[a] && k >= 1 && k <= L)
            for (int i = k; i <= L; i++) {
                const Tab *t = tab_at(x, a, j, k, i);
                if (t->feasible)
                    r[cnt++] = (CandRef){t->t, i, x->opt->check_memory ? t->kmax : INT_MAX};
            }
        qsort(r, (size_t)cnt, sizeof *r, cmp_candref);
    }
    return 0;
}

int ctx_build(Ctx *x, DpStats *st, IrError *err)
{
    if (ctx_meshes(x, err))
        return -1;
    double t0 = now_s();
    long calls = 0, nfeas = 0;
    if (ctx_stages(x, &calls, &nfeas, err))
        return -1;
    ctx_boundaries(x, &calls, &nfeas);
    if (st) {
        st->oracle_calls += calls;
        st->seconds_tabulate += now_s() - t0;
    }
    if (nfeas == 0)
        return ir_errorf(err, "plan: no stage candidate fits on any submesh (every (layers, "
                         "submesh) pair was reported infeasible: memory, imbalance, or every dp above the "
                         "rows of a microbatch)");
    qsort(x->tcand, (size_t)nfeas, sizeof *x->tcand, cmp_double);
    int nd = 0;
    for (long q = 0; q < nfeas; q++)
        if (nd == 0 || x->tcand[q] != x->tcand[nd - 1])
            x->tcand[nd++] = x->tcand[q];
    x->ntcand = nd;
    return ctx_sparse_index(x, err);
}
