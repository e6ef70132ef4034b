/* The HAPT DP (passes/planner/hapt_dp.c) against brute force (brute.c) on
 * random small instances with a table-driven cost oracle.
 *
 *   memory not binding: DP objective == brute-force objective (Eq. 13) on
 *     every instance; each optimisation toggled off (sparse index, t_max
 *     pruning), other batch sizes and 1/2/4 threads give the same objective,
 *     and threads give the identical plan;
 *   every plan is checked on its own: layers 1..L covered once, every device
 *     of every mesh used, meshes in the plan's order, t_i <= t_max,
 *     C(i) <= t_max, Eq. 24 with the emitted warm-ups, objective = Eq. 13;
 *   memory binding: the DP never beats the brute force (it cannot: its plan
 *     is a feasible layout), and how often its min-F substructure misses the
 *     optimum is printed, not asserted.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brute.h"
#include "hapt_dp.h"
#include "simulate.h"

static int fails;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fails++;                                                                               \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static uint64_t rng = 0x243F6A8885A308D3ULL;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static int irand(int lo, int hi) { return lo + (int)(urand() * (hi - lo + 1)); }

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}
static double hash01(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return (double)(mix(a * 1000003 ^ mix(b * 7919 ^ mix(c * 104729 ^ mix(d + 17)))) >> 11) /
           9007199254740992.0;
}

/* ------------------------------------------------------------ instance */

#define MAXL 12
#define MAXP 3

typedef struct Inst {
    int L, P;
    uint64_t seed;
    double fw[MAXP][MAXL + 1], bw[MAXP][MAXL + 1];  /* per-layer times on one device */
    double par[MAXL + 1], act[MAXL + 1];            /* bytes */
    double out[MAXL + 1];                           /* boundary bytes */
    double bw_link[MAXP][MAXP];                     /* bytes/s, [a][a] inside a mesh */
    double infeasible_frac;
    ClusterSpec c;
    MeshSpec m[MAXP];
} Inst;

static int t_stage(void *ctx, int k, int i, int mesh, Submesh sub, StageCost *o)
{
    const Inst *x = ctx;
    if (k < 1 || i > x->L || k > i || mesh < 0 || mesh >= x->P)
        return -1;
    double g = sub.n * sub.m, f = 0, b = 0, p = 0, a = 0;
    for (int l = k; l <= i; l++) {
        f += x->fw[mesh][l];
        b += x->bw[mesh][l];
        p += x->par[l];
        a += x->act[l];
    }
    /* sub-linear scaling with a random efficiency per (range, submesh):
     * a table, not a formula the DP could exploit */
    double eff = pow(g, 0.85) * (0.8 + 0.4 * hash01(x->seed, (uint64_t)k, (uint64_t)i,
                                                    (uint64_t)(mesh * 64 + sub.n * 8 + sub.m)));
    memset(o, 0, sizeof *o);
    o->t_f = f / eff;
    o->t_b = b / eff;
    o->mem_static = 4 * p / g;
    o->mem_act = a / g;
    o->dp = (int)g;
    o->tp = 1;
    o->feasible = hash01(x->seed + 1, (uint64_t)k, (uint64_t)i, (uint64_t)(mesh * 64 + sub.n * 8 +
                                                                          sub.m)) >=
                  x->infeasible_frac;
    return 0;
}

static double t_comm(void *ctx, int i, int a, int b)
{
    const Inst *x = ctx;
    return x->out[i] / x->bw_link[a][b];
}

static const int kShapes[][2] = {{1, 1}, {1, 2}, {1, 3}, {2, 1}, {2, 2}, {1, 4}};

static void make_inst(Inst *x, int P, int L, int max_dev)
{
    memset(x, 0, sizeof *x);
    x->P = P;
    x->L = L;
    x->seed = mix((uint64_t)(urand() * 1e15));
    int dev = 0;
    for (int a = 0; a < P; a++) {
        int s;
        do
            s = irand(0, 5);
        while (kShapes[s][0] * kShapes[s][1] > max_dev - dev - (P - 1 - a));
        dev += kShapes[s][0] * kShapes[s][1];
        MeshSpec *m = &x->m[a];
        snprintf(m->name, sizeof m->name, "mesh%d", a);
        m->nodes = kShapes[s][0];
        m->per_node = kShapes[s][1];
        m->dev.mem_bytes = 1e30;
        m->dev.flops_bf16 = m->dev.flops_fp16 = 1e12 * (1 + a);
        double speed = 0.5 + urand();
        for (int l = 1; l <= L; l++) {
            x->fw[a][l] = speed * (0.5 + urand());
            x->bw[a][l] = 2 * x->fw[a][l] * (0.8 + 0.4 * urand());
        }
    }
    for (int l = 1; l <= L; l++) {
        x->par[l] = 1 + urand();
        x->act[l] = 1 + urand();
        x->out[l] = 0.5 + urand();
    }
    /* links: inside a mesh fast or free; across meshes slow enough that
     * boundaries land in every band of Eq. 2 */
    for (int a = 0; a < P; a++)
        for (int b = a; b < P; b++) {
            double v = a == b ? (urand() < 0.3 ? INFINITY : 1 + 20 * urand()) : 0.3 + 3 * urand();
            x->bw_link[a][b] = x->bw_link[b][a] = v;
        }
    x->infeasible_frac = urand() < 0.5 ? 0.0 : 0.15;
    snprintf(x->c.name, sizeof x->c.name, "test");
    strcpy(x->c.dtype, "bf16");
    x->c.meshes = x->m;
    x->c.nmeshes = P;
}

static CostOracle oracle(Inst *x) { return (CostOracle){x, t_stage, t_comm}; }

/* ------------------------------------------------------------ checks */

static int check_plan(const Inst *x, const Plan *p, const DpOptions *o, const char *who)
{
    int bad = fails;
    CostOracle orc = oracle((Inst *)x);
    CHECK(p->nstages >= x->P, "%s: %d stages for %d meshes", who, p->nstages, x->P);
    int next = 1, used[MAXP] = {0}, pos = 0;
    double sum = 0, tmax = 0;
    int N[64], dl[64];
    double c[64];
    for (int z = 0; z < p->nstages; z++) {
        const PlanStage *s = &p->stages[z];
        CHECK(s->first_layer == next && s->last_layer >= s->first_layer, "%s: stage %d layers %d..%d",
              who, z, s->first_layer, s->last_layer);
        next = s->last_layer + 1;
        while (pos < x->P && p->mesh_order[pos] != s->mesh)
            pos++;
        CHECK(pos < x->P, "%s: stage %d on mesh %d out of the plan's order", who, z, s->mesh);
        used[s->mesh] += s->sub.n * s->sub.m;
        StageCost sc;
        t_stage((void *)x, s->first_layer, s->last_layer, s->mesh, s->sub, &sc);
        CHECK(sc.feasible, "%s: stage %d uses an infeasible candidate", who, z);
        c[z] = z + 1 < p->nstages ? t_comm((void *)x, s->last_layer, s->mesh,
                                            p->stages[z + 1].mesh)
                                  : 0;
        CHECK(c[z] == s->c_next, "%s: c_next", who);
        double t = sc.t_f + sc.t_b;
        CHECK(t <= p->t_max, "%s: stage %d t=%g > t_max=%g", who, z, t, p->t_max);
        if (o->comm_bound)
            CHECK(c[z] <= p->t_max, "%s: C(%d)=%g > t_max", who, s->last_layer, c[z]);
        tmax = fmax(tmax, t);
        sum += t + 2 * c[z];
    }
    CHECK(next == x->L + 1, "%s: layers end at %d, L = %d", who, next - 1, x->L);
    for (int a = 0; a < x->P; a++)
        CHECK(used[a] == x->m[a].nodes * x->m[a].per_node, "%s: mesh %d uses %d of %d devices",
              who, a, used[a], x->m[a].nodes * x->m[a].per_node);
    schedule_warmups(p->schedule, p->nstages, p->microbatches, c, p->t_max, p->eps, N, dl, NULL);
    for (int z = 0; z < p->nstages; z++) {
        const PlanStage *s = &p->stages[z];
        CHECK(s->warmup == N[z] && s->delta == dl[z], "%s: stage %d warm-up %d/%d", who, z,
              s->warmup, N[z]);
        if (o->check_memory)
            CHECK(s->mem_pred <= x->m[s->mesh].dev.mem_bytes, "%s: stage %d needs %g of %g", who,
                  z, s->mem_pred, x->m[s->mesh].dev.mem_bytes);
    }
    double obj = sum + (p->microbatches - 1) * p->t_max;
    CHECK(fabs(obj - p->objective) <= 1e-9 * obj, "%s: objective %.15g, Eq. 13 gives %.15g", who,
          p->objective, obj);
    (void)orc;
    return fails == bad;
}

static int same_plan(const Plan *a, const Plan *b)
{
    if (a->nstages != b->nstages || a->objective != b->objective || a->t_max != b->t_max)
        return 0;
    for (int z = 0; z < a->nstages; z++) {
        const PlanStage *x = &a->stages[z], *y = &b->stages[z];
        if (x->first_layer != y->first_layer || x->last_layer != y->last_layer ||
            x->mesh != y->mesh || x->sub.n != y->sub.n || x->sub.m != y->sub.m ||
            x->warmup != y->warmup)
            return 0;
    }
    return memcmp(a->mesh_order, b->mesh_order, (size_t)a->nmesh_order * sizeof(int)) == 0;
}

static int rel_eq(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)); }

/* ------------------------------------------------------------ tests */

static void random_opts(DpOptions *o)
{
    dp_options_default(o);
    o->microbatches = irand(1, 16);
    o->comm_bound = urand() < 0.7;
    int r = irand(0, 9);
    o->schedule = r < 6 ? SCHED_H1F1B : (ScheduleKind)(r - 5); /* 1F1B, Eager, GPipe */
    if (o->schedule > SCHED_GPIPE)
        o->schedule = SCHED_GPIPE;
}

static void test_vs_brute(int n)
{
    long layouts_total = 0;
    int three = 0, compared = 0;
    for (int r = 0; r < n; r++) {
        int P = (r % 4 == 3) ? 3 : 2;
        int L = irand(P, MAXL);
        int maxdev = L > 9 ? 5 : L > 6 ? 6 : 8;
        Inst x;
        make_inst(&x, P, L, maxdev);
        CostOracle o = oracle(&x);
        DpOptions opt;
        random_opts(&opt);
        Plan bp, dp;
        IrError e1, e2;
        long lay = 0;
        int rb = brute_plan(&x.c, L, &o, &opt, &bp, &lay, &e1);
        int rd = hapt_dp_plan(&x.c, L, &o, &opt, &dp, NULL, &e2);
        layouts_total += lay;
        CHECK((rb == 0) == (rd == 0), "instance %d: brute %s / DP %s", r, rb ? e1.msg : "ok",
              rd ? e2.msg : "ok");
        if (rb || rd) {
            if (!rb)
                plan_free(&bp);
            if (!rd)
                plan_free(&dp);
            continue;
        }
        compared++;
        three += P == 3;
        CHECK(rel_eq(bp.objective, dp.objective),
              "instance %d (P=%d L=%d B=%d %s comm_bound=%d): DP %.15g, brute %.15g", r, P, L,
              opt.microbatches, schedule_name(opt.schedule), opt.comm_bound, dp.objective,
              bp.objective);
        check_plan(&x, &bp, &opt, "brute");
        check_plan(&x, &dp, &opt, "dp");
        {
            /* the plan runs in the simulator: no deadlock, the slowest
             * stage works B (t_f + t_b), each stage holds N_i in flight */
            SimResult sr;
            IrError es;
            int rs = simulate_plan(&dp, NULL, &sr, &es);
            CHECK(rs == 0, "instance %d: simulate: %s", r, es.msg);
            if (rs == 0) {
                double tslow = 0;
                for (int z = 0; z < dp.nstages; z++) {
                    tslow = fmax(tslow, dp.stages[z].t_f + dp.stages[z].t_b);
                    CHECK(sr.peak_inflight[z] == dp.stages[z].warmup, "instance %d: in flight",
                          r);
                }
                CHECK(sr.iter_time >= opt.microbatches * tslow * (1 - 1e-12),
                      "instance %d: simulated %g < B t_slowest %g", r, sr.iter_time,
                      opt.microbatches * tslow);
                sim_result_free(&sr);
            }
        }
        /* optimisations off, one at a time and together; batch sizes */
        for (int v = 0; v < 4; v++) {
            DpOptions o2 = opt;
            o2.sparse_index = !(v & 1);
            o2.prune_tmax = !(v & 2);
            o2.batch = v == 0 ? 3 : 8;
            Plan q;
            IrError e;
            if (hapt_dp_plan(&x.c, L, &o, &o2, &q, NULL, &e)) {
                CHECK(0, "instance %d variant %d: %s", r, v, e.msg);
                continue;
            }
            CHECK(rel_eq(q.objective, dp.objective), "instance %d sparse=%d prune=%d: %.15g vs %.15g",
                  r, o2.sparse_index, o2.prune_tmax, q.objective, dp.objective);
            plan_free(&q);
        }
        for (int th = 2; th <= 4; th += 2) {
            DpOptions o2 = opt;
            o2.threads = th;
            Plan q;
            IrError e;
            if (hapt_dp_plan(&x.c, L, &o, &o2, &q, NULL, &e)) {
                CHECK(0, "instance %d threads %d: %s", r, th, e.msg);
                continue;
            }
            CHECK(same_plan(&q, &dp), "instance %d: %d threads give another plan", r, th);
            plan_free(&q);
        }
        /* (issue 16) a time limit that does not bind and node groups on no
         * mesh (every mesh has <= 2 nodes) change nothing; node groups of 1
         * group per multi-node mesh (a heuristic: the whole mesh only) give
         * a valid plan never better than the brute force's optimum */
        for (int v = 0; v < 3; v++) {
            DpOptions o2 = opt;
            if (v == 0)
                o2.time_limit = 1e9;
            else
                o2.max_groups = v == 1 ? 2 : 1;
            Plan q;
            IrError e;
            int rq = hapt_dp_plan(&x.c, L, &o, &o2, &q, NULL, &e);
            if (v < 2) {
                CHECK(rq == 0 && same_plan(&q, &dp) && !q.time_limited && !q.coarse_meshes,
                      "instance %d: %s changes the plan", r, v ? "max_groups 2" : "time_limit");
            } else if (rq == 0) {
                int multi = 0;
                for (int a = 0; a < P; a++)
                    multi += x.m[a].nodes > 1;
                CHECK(q.coarse_meshes == multi, "instance %d: %d grouped meshes, want %d", r,
                      q.coarse_meshes, multi);
                CHECK(q.objective >= bp.objective * (1 - 1e-9),
                      "instance %d: grouped DP %.15g below the optimum %.15g", r, q.objective,
                      bp.objective);
                check_plan(&x, &q, &o2, "dp grouped");
                for (int z = 0; z < q.nstages; z++)
                    CHECK(x.m[q.stages[z].mesh].nodes == 1 ||
                              q.stages[z].sub.n == x.m[q.stages[z].mesh].nodes,
                          "instance %d: stage %d on a part of a grouped mesh", r, z);
            }
            if (rq == 0)
                plan_free(&q);
        }
        plan_free(&bp);
        plan_free(&dp);
    }
    CHECK(compared >= n * 9 / 10, "only %d of %d instances feasible", compared, n);
    CHECK(three > n / 8, "too few 3-mesh instances (%d)", three);
    printf("memory not binding: %d instances (%d with 3 meshes), %ld layouts enumerated by the "
           "brute force; %s\n", compared, three, layouts_total,
           fails ? "FAILURES above" : "DP == brute force on all, every option and thread count");
}

/* Memory binding: find the unconstrained optimum, then shrink each mesh's
 * memory below what that optimum needs, so Eq. 24 cuts it. */
static void test_memory_binding(int n)
{
    int binding = 0, optimal = 0, dp_infeasible = 0;
    for (int r = 0; r < 4 * n && binding < n; r++) {
        int P = (r % 4 == 3) ? 3 : 2;
        int L = irand(P + 2, 10);
        Inst x;
        make_inst(&x, P, L, L > 8 ? 5 : 7);
        for (int a = 0; a < P; a++) /* hide more comm: warm-ups > 1 */
            for (int b = 0; b < P; b++)
                if (a != b)
                    x.bw_link[a][b] *= 0.25;
        x.infeasible_frac = 0;
        CostOracle o = oracle(&x);
        DpOptions opt;
        dp_options_default(&opt);
        opt.microbatches = irand(4, 16);
        opt.check_memory = 0;
        Plan free_opt;
        IrError e;
        if (brute_plan(&x.c, L, &o, &opt, &free_opt, NULL, &e))
            continue;
        double need[MAXP] = {0};
        for (int z = 0; z < free_opt.nstages; z++) {
            int a = free_opt.stages[z].mesh;
            need[a] = fmax(need[a], free_opt.stages[z].mem_pred);
        }
        if (r % 2) {
            for (int a = 0; a < P; a++)
                x.m[a].dev.mem_bytes = need[a] * (0.75 + 0.2 * urand());
        } else {
            /* cut one stage's warm-up by one slot: K, not the stage's
             * static memory, is what binds (where the warm-up is > 1) */
            for (int a = 0; a < P; a++)
                x.m[a].dev.mem_bytes = need[a];
            const PlanStage *s = &free_opt.stages[irand(0, free_opt.nstages - 1)];
            StageCost sc;
            t_stage(&x, s->first_layer, s->last_layer, s->mesh, s->sub, &sc);
            if (s->warmup > 1)
                x.m[s->mesh].dev.mem_bytes = sc.mem_static + (s->warmup - 0.5) * sc.mem_act;
            else
                x.m[s->mesh].dev.mem_bytes = need[s->mesh] * 0.9;
        }
        plan_free(&free_opt);
        opt.check_memory = 1;
        Plan bp, dp;
        IrError e1, e2;
        if (brute_plan(&x.c, L, &o, &opt, &bp, NULL, &e1))
            continue; /* nothing fits at all: not an instance of the question */
        binding++;
        int rd = hapt_dp_plan(&x.c, L, &o, &opt, &dp, NULL, &e2);
        check_plan(&x, &bp, &opt, "brute (memory)");
        if (rd) {
            dp_infeasible++;
        } else {
            check_plan(&x, &dp, &opt, "dp (memory)");
            CHECK(dp.objective >= bp.objective * (1 - 1e-9), "DP %.15g beats brute force %.15g",
                  dp.objective, bp.objective);
            optimal += rel_eq(dp.objective, bp.objective);
            plan_free(&dp);
        }
        plan_free(&bp);
    }
    CHECK(binding >= n / 2, "only %d memory-binding instances", binding);
    printf("memory-binding instances: %d, DP optimal in %d (%.1f%%), DP found no plan in %d\n",
           binding, optimal, binding ? 100.0 * optimal / binding : 0.0, dp_infeasible);
}

static void test_submesh(void)
{
    Submesh s[32];
    /* §5.2: M = 8: (1,1) (1,2) (1,4) (1,8) (2,8) (3,8) (4,8) */
    int n = submesh_enumerate(4, 8, s, 32);
    int want8[][2] = {{1, 1}, {1, 2}, {1, 4}, {1, 8}, {2, 8}, {3, 8}, {4, 8}};
    CHECK(n == 7, "4x8: %d shapes", n);
    for (int q = 0; q < n && q < 7; q++)
        CHECK(s[q].n == want8[q][0] && s[q].m == want8[q][1], "4x8 shape %d", q);
    /* M = 6 (not a power of two): (1,1) (1,2) (1,4) (1,6) (2,6) */
    n = submesh_enumerate(2, 6, s, 32);
    int want6[][2] = {{1, 1}, {1, 2}, {1, 4}, {1, 6}, {2, 6}};
    CHECK(n == 5, "2x6: %d shapes", n);
    for (int q = 0; q < n && q < 5; q++)
        CHECK(s[q].n == want6[q][0] && s[q].m == want6[q][1], "2x6 shape %d", q);
    for (int N = 1; N <= 5; N++)
        for (int M = 1; M <= 16; M++) {
            n = submesh_enumerate(N, M, s, 32);
            int pw = 0;
            while ((1 << pw) < M)
                pw++;
            CHECK(n == pw + 1 + (N - 1), "%dx%d: %d shapes", N, M, n);
            for (int q = 0; q < n; q++)
                CHECK(s[q].n * s[q].m <= N * M && (s[q].n == 1 || s[q].m == M), "shape");
        }
}

/* Beyond max_perm_meshes the DP searches the cluster's order and the
 * meshes sorted by peak FLOP/s and by memory (both ways): at most 5 orders,
 * never better than all of them (the brute force). */
static void test_heuristic_orders(void)
{
    for (int r = 0; r < 40; r++) {
        Inst x;
        make_inst(&x, 3, irand(3, 8), 7);
        for (int a = 0; a < 3; a++) {
            x.m[a].dev.flops_bf16 = 1e12 * (1 + urand());
            x.m[a].dev.mem_bytes = 1e29 * (1 + urand());
        }
        CostOracle o = oracle(&x);
        DpOptions opt;
        dp_options_default(&opt);
        opt.microbatches = irand(1, 8);
        opt.max_perm_meshes = 2;
        Plan dp, bp;
        DpStats st;
        IrError e;
        if (hapt_dp_plan(&x.c, x.L, &o, &opt, &dp, &st, &e))
            continue;
        CHECK(st.orders >= 1 && st.orders <= 5, "%ld orders", st.orders);
        /* the chosen order: identity or sorted by one of the keys */
        int ok = dp.mesh_order[0] == 0 && dp.mesh_order[1] == 1;
        for (int key = 0; key < 4 && !ok; key++) {
            int mono = 1;
            for (int q = 0; q + 1 < 3; q++) {
                const DeviceSpec *u = &x.m[dp.mesh_order[q]].dev, *v = &x.m[dp.mesh_order[q + 1]].dev;
                double ku = key < 2 ? u->flops_bf16 : u->mem_bytes, kv = key < 2 ? v->flops_bf16
                                                                                : v->mem_bytes;
                mono &= key % 2 == 0 ? ku >= kv : ku <= kv;
            }
            ok = mono;
        }
        CHECK(ok, "order %d %d %d is not one of the heuristic orders", dp.mesh_order[0],
              dp.mesh_order[1], dp.mesh_order[2]);
        opt.max_perm_meshes = 5;
        if (brute_plan(&x.c, x.L, &o, &opt, &bp, NULL, &e) == 0) {
            CHECK(dp.objective >= bp.objective * (1 - 1e-9), "heuristic orders beat all orders");
            plan_free(&bp);
        }
        plan_free(&dp);
    }
}

/* A cap on the stage count: never exceeded, never better than no cap, and
 * equal to the brute force's best layout with at most that many stages
 * (the uncapped optimum when it has few enough). */
static void test_max_stages(void)
{
    for (int r = 0; r < 40; r++) {
        Inst x;
        make_inst(&x, 2, irand(4, 9), 6);
        CostOracle o = oracle(&x);
        DpOptions opt;
        dp_options_default(&opt);
        opt.microbatches = irand(1, 8);
        Plan full, cap;
        IrError e;
        if (hapt_dp_plan(&x.c, x.L, &o, &opt, &full, NULL, &e))
            continue;
        opt.max_stages = irand(2, 4);
        if (hapt_dp_plan(&x.c, x.L, &o, &opt, &cap, NULL, &e) == 0) {
            CHECK(cap.nstages <= opt.max_stages, "%d stages > cap %d", cap.nstages, opt.max_stages);
            CHECK(cap.objective >= full.objective * (1 - 1e-9), "cap beats no cap");
            if (full.nstages <= opt.max_stages)
                CHECK(rel_eq(cap.objective, full.objective), "cap not binding but changed result");
            check_plan(&x, &cap, &opt, "capped");
            plan_free(&cap);
        }
        plan_free(&full);
    }
}

static void test_errors(void)
{
    Inst x;
    make_inst(&x, 2, 4, 4);
    CostOracle o = oracle(&x);
    DpOptions opt;
    dp_options_default(&opt);
    Plan p;
    IrError e;
    /* more meshes than layers: every mesh needs a stage */
    CHECK(hapt_dp_plan(&x.c, 1, &o, &opt, &p, NULL, &e) != 0 && strstr(e.msg, "layers"),
          "L < meshes: %s", e.msg);
    /* nothing fits in memory */
    for (int a = 0; a < 2; a++)
        x.m[a].dev.mem_bytes = 1e-3;
    CHECK(hapt_dp_plan(&x.c, 4, &o, &opt, &p, NULL, &e) != 0 && strstr(e.msg, "memory"),
          "no memory: %s", e.msg);
    opt.microbatches = 0;
    CHECK(hapt_dp_plan(&x.c, 4, &o, &opt, &p, NULL, &e) != 0, "B = 0");
}

/* (added by "dp-speed") The search's pruning against none at all, where it
 * bites hardest: many microbatches (the (B-1) t_max term dominates, so most
 * t_max and most DP states are cut by bounds), memory binding on some
 * instances, 2-3 meshes.  Pruning may only skip what cannot be strictly
 * better, so the objective and t_max must be bit-identical with pruning on
 * and off (the plan too, except where two mesh orders tie), and the plan
 * must not depend on the thread count or the batch size. */
static void test_prune_exact(int n)
{
    int compared = 0, binding = 0;
    for (int r = 0; r < n; r++) {
        int P = (r % 3 == 2) ? 3 : 2;
        int L = irand(P + 1, MAXL);
        Inst x;
        make_inst(&x, P, L, L > 9 ? 5 : 7);
        CostOracle o = oracle(&x);
        DpOptions opt;
        dp_options_default(&opt);
        opt.microbatches = irand(16, 512);
        opt.comm_bound = urand() < 0.8;
        if (r % 5 == 4)
            opt.schedule = (ScheduleKind)irand(1, 3);
        if (r % 2) { /* memory: bind on the stages of the unconstrained plan */
            Plan fp;
            IrError e;
            DpOptions o0 = opt;
            o0.check_memory = 0;
            if (hapt_dp_plan(&x.c, L, &o, &o0, &fp, NULL, &e) == 0) {
                for (int z = 0; z < fp.nstages; z++) {
                    MeshSpec *m = &x.m[fp.stages[z].mesh];
                    double v = fp.stages[z].mem_pred * (0.8 + 0.3 * urand());
                    if (m->dev.mem_bytes > 1e29 || v < m->dev.mem_bytes)
                        m->dev.mem_bytes = v;
                }
                plan_free(&fp);
                binding++;
            }
        }
        Plan ref, dp;
        IrError e1, e2;
        DpOptions off = opt;
        off.prune_tmax = 0;
        int r0 = hapt_dp_plan(&x.c, L, &o, &off, &ref, NULL, &e1);
        int r1 = hapt_dp_plan(&x.c, L, &o, &opt, &dp, NULL, &e2);
        CHECK((r0 == 0) == (r1 == 0), "prune instance %d: unpruned %s / pruned %s", r,
              r0 ? e1.msg : "ok", r1 ? e2.msg : "ok");
        if (r0 || r1) {
            if (!r0)
                plan_free(&ref);
            if (!r1)
                plan_free(&dp);
            continue;
        }
        compared++;
        CHECK(ref.objective == dp.objective && ref.t_max == dp.t_max,
              "prune instance %d (P=%d L=%d B=%d %s): pruned %.17g (t_max %.17g), unpruned "
              "%.17g (t_max %.17g)", r, P, L, opt.microbatches, schedule_name(opt.schedule),
              dp.objective, dp.t_max, ref.objective, ref.t_max);
        check_plan(&x, &dp, &opt, "dp (pruned)");
        for (int v = 0; v < 3; v++) {
            DpOptions o2 = opt;
            o2.threads = v == 0 ? 2 : v == 1 ? 3 : 1;
            o2.batch = v == 0 ? 1 : v == 1 ? 5 : 2;
            Plan q;
            IrError e;
            if (hapt_dp_plan(&x.c, L, &o, &o2, &q, NULL, &e)) {
                CHECK(0, "prune instance %d threads %d: %s", r, o2.threads, e.msg);
                continue;
            }
            CHECK(same_plan(&q, &dp), "prune instance %d: threads %d batch %d give another plan",
                  r, o2.threads, o2.batch);
            plan_free(&q);
        }
        plan_free(&ref);
        plan_free(&dp);
    }
    CHECK(compared >= n / 2, "only %d of %d pruning instances feasible", compared, n);
    printf("pruning on vs off: %d instances (%d with memory bound on the free plan's stages), "
           "B in 16..512: %s\n", compared, binding, fails ? "FAILURES above" : "same objective");
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 300;
    test_submesh();
    test_errors();
    test_heuristic_orders();
    test_max_stages();
    test_vs_brute(n);
    test_memory_binding(n);
    test_prune_exact(n / 2);
    if (fails) {
        fprintf(stderr, "test_dp: %d failures\n", fails);
        return 1;
    }
    printf("test_dp: ok\n");
    return 0;
}
