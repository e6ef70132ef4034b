/* HAPT's exact-feasibility DPs: dp_feasible (smallest warm-up and fewest
 * stages of any feasible suffix) and dp_pareto (the (stages, N) Pareto
 * front under H-1F1B with the stage cap). */
#include "hapt_walk.h"

/* Exact-feasibility filter (added by "plan2"): a relaxation of the full DP
 * without its F and stage-count dimensions that answers "can any layout be
 * feasible at tmax?" in the time of dp_relaxed.  Two scalar DPs over
 * (k, pos), both sound (full DP finite => both finite), both monotone in
 * tmax (more candidates, δ of Eq. 2 non-increasing, comm bound looser):
 *   Nm: the smallest warm-up N the first stage of any feasible suffix can
 *       have.  The emitted K of a stage is a non-decreasing function of the
 *       next stage's N (H-1F1B: N_next + δ, Eq. 1) or of the suffix's stage
 *       count (1F1B: s, Eager-1F1B: 2s - 1, GPipe: B), and Eq. 24 only gets
 *       harder as K grows, so the smallest N (H-1F1B) is the best any
 *       upstream stage can hope for: Nm is exact feasibility without the
 *       stage cap.
 *   Sm: the fewest stages of any suffix whose stages fit with a lower bound
 *       of their K (H-1F1B: N >= min(B, stages in the suffix), since every
 *       δ >= 1); Sm(start) > Smax means the stage cap cannot be met.
 * The full DP keeps one (F, N) per state, so it may miss a feasible layout
 * (min-F substructure) but never finds one these miss: skipping a tmax that
 * fails here leaves the result unchanged. */
typedef struct FeasEnv {    /* dp_feasible */
    const Ctx *x;
    int *Nm, *Sm;
    double tmax;
    int h1, Kterm;
} FeasEnv;

static inline __attribute__((always_inline)) void feasible_tr(void *env, const Trans *t)
{
    FeasEnv *e = env;
    const Ctx *x = e->x;
    const int B = x->B, kmax = t->kmax;
    int *Nm = e->Nm, *Sm = e->Sm;
    if (t->kind == TR_LAST) { /* Eq. 24 at the last stage's K (in 1..B: kmax agrees) */
        if (e->Kterm <= kmax) {
            if (e->Kterm < Nm[t->cur])
                Nm[t->cur] = e->Kterm;
            Sm[t->cur] = 1;
        }
        return;
    }
    /* H-1F1B: K(n) = min(B, n + K1 - 1) for n >= 1 (Eq. 1 with δ fixed by
     * c), and Eq. 24 is K <= kmax: no call per d. */
    const int K1 = t->K1;
    if (e->h1 && K1 > kmax)
        return; /* every K >= K1 (n >= 1, K1 <= B) */
    for (int d = t->d0; d <= t->d1; d++) {
        size_t q = t->nxt + (size_t)(d - t->d0), o = t->cur + (size_t)(d - t->d0);
        int sv = Sm[q], nv = Nm[q];
        if (sv == INT_MAX)
            continue; /* Nm finite implies Sm finite */
        /* any suffix from q has N >= Nm[q] (H-1F1B) */
        int K;
        if (e->h1) {
            int n = nv != INT_MAX && nv > sv ? nv : sv;
            n = n < B ? n : B;
            K = n + K1 - 1 < B ? n + K1 - 1 : B;
        } else {
            K = schedule_warmup_step(x->opt->schedule, 0, sv + 1, t->c, e->tmax, x->opt->eps, B,
                                     NULL, NULL);
        }
        if (K <= kmax && sv + 1 < Sm[o])
            Sm[o] = sv + 1;
        if (!e->h1 || nv == INT_MAX)
            continue;
        K = nv + K1 - 1 < B ? nv + K1 - 1 : B;
        if (K <= kmax && K < Nm[o])
            Nm[o] = K;
    }
}

static inline int feasible_dead(const void *env, size_t q)
{
    return ((const FeasEnv *)env)->Sm[q] == INT_MAX; /* Nm finite implies Sm finite */
}

int dp_feasible(const Ctx *x, const Order *od, double tmax, int *Nm, int *Sm)
{
    const int D = x->D;
    for (size_t q = 0; q < (size_t)(x->L + 2) * D; q++)
        Nm[q] = Sm[q] = INT_MAX;
    FeasEnv e = {x, Nm, Sm, tmax, x->opt->schedule == SCHED_H1F1B,
                 schedule_warmup_step(x->opt->schedule, 0, 1, 0.0, tmax, x->opt->eps, x->B, NULL,
                                      NULL)};
    walk_back(x, od, tmax, cmax_of(x, tmax), e.h1, feasible_tr, feasible_dead, &e);
    size_t root = (size_t)1 * D + od->off[0] + od->Dp[0] - 1;
    if (e.h1 && Nm[root] == INT_MAX)
        return 0;
    return Sm[root] != INT_MAX && Sm[root] <= x->Smax;
}

/* Exact feasibility under H-1F1B with the stage cap (added by "plan2").
 * Per (k, pos) the Pareto front of (stages in the suffix, N of its first
 * stage) over suffixes whose every stage fits (Eq. 24 with its emitted K)
 * with at most Smax stages: upstream stages need only a small N (K is
 * N_next + δ, non-decreasing in N_next) and a small stage count (the cap),
 * so a dominated pair can never help.  The front is exact while it holds at
 * most PARETO_MAX pairs; *overflow is set otherwise (the caller then trusts
 * nothing from this run).  Exact feasibility is monotone in tmax, which
 * makes it binary-searchable.  Cost: like dp_feasible times the front size
 * (a few), against the full DP's whole stage-count range per transition. */

/* Insert (s, N) into the front f of *n pairs; returns 0, or -1 when the
 * front would exceed PARETO_MAX. */
static inline int front_add(Front *f, unsigned char *n, int s, int N)
{
    const int cnt = *n;
    for (int q = 0; q < cnt; q++)
        if ((int)(f->sn[q] >> 16) <= s && (int)(f->sn[q] & 0xffff) <= N)
            return 0; /* dominated */
    int m = 0;
    for (int q = 0; q < cnt; q++) /* keep what the new pair does not dominate */
        if (!(s <= (int)(f->sn[q] >> 16) && N <= (int)(f->sn[q] & 0xffff)))
            f->sn[m++] = f->sn[q];
    if (m >= PARETO_MAX)
        return -1;
    f->sn[m] = (uint32_t)s << 16 | (uint32_t)N;
    *n = (unsigned char)(m + 1);
    return 0;
}

typedef struct ParetoEnv {  /* dp_pareto */
    const Ctx *x;
    Front *Fr;
    unsigned char *Frn;
    double *Fm;
    int Kterm, overflow;
} ParetoEnv;

static inline __attribute__((always_inline)) void pareto_tr(void *env, const Trans *t)
{
    ParetoEnv *e = env;
    const int B = e->x->B, Smax = e->x->Smax, kmax = t->kmax;
    Front *Fr = e->Fr;
    unsigned char *Frn = e->Frn;
    double *Fm = e->Fm;
    if (t->kind == TR_LAST) { /* Eq. 24 at the last stage's K (in 1..B: kmax agrees) */
        if (e->Kterm <= kmax) {
            if (front_add(&Fr[t->cur], &Frn[t->cur], 1, e->Kterm))
                e->overflow = 1;
            if (t->t < Fm[t->cur])
                Fm[t->cur] = t->t;
        }
        return;
    }
    /* front N >= 1: K(N) = min(B, N + K1 - 1); Eq. 24 as K <= kmax, so
     * nothing passes where K1 (<= B) already exceeds kmax */
    const int K1 = t->K1;
    if (K1 > kmax)
        return;
    const double w0 = 2.0 * t->c + t->t;
    for (int d = t->d0; d <= t->d1; d++) {
        size_t q = t->nxt + (size_t)(d - t->d0), o = t->cur + (size_t)(d - t->d0);
        const int nq = Frn[q];
        int admitted = 0;
        for (int r = 0; r < nq; r++) {
            const int sr = (int)(Fr[q].sn[r] >> 16), Nr = (int)(Fr[q].sn[r] & 0xffff);
            if (sr + 1 > Smax)
                continue;
            int K = Nr + K1 - 1 < B ? Nr + K1 - 1 : B;
            if (K > kmax)
                continue;
            admitted = 1;
            if (front_add(&Fr[o], &Frn[o], sr + 1, K))
                e->overflow = 1;
        }
        double v = Fm[q] + w0;
        if (admitted && v < Fm[o])
            Fm[o] = v;
    }
}

static inline int pareto_dead(const void *env, size_t q)
{
    return ((const ParetoEnv *)env)->Frn[q] == 0; /* no suffix fits */
}

/* dp_pareto on w's tables (w->Fr set: H-1F1B with memory checks, B and the
 * stage cap <= FRONT_LIM). */
int dp_pareto(const Ctx *x, const Order *od, double tmax, Work *w, int *overflow)
{
    const int D = x->D;
    memset(w->Frn, 0, (size_t)(x->L + 2) * D);
    for (size_t q = 0; q < (size_t)(x->L + 2) * D; q++)
        w->Fm[q] = INF;
    ParetoEnv e = {x, w->Fr, w->Frn, w->Fm,
                   schedule_warmup_step(SCHED_H1F1B, 0, 1, 0.0, tmax, x->opt->eps, x->B, NULL, NULL),
                   0};
    walk_back(x, od, tmax, cmax_of(x, tmax), 1, pareto_tr, pareto_dead, &e);
    *overflow = e.overflow;
    return w->Frn[(size_t)1 * D + od->off[0] + od->Dp[0] - 1] > 0;
}

/* Root of Fm after dp_pareto: a lower bound of Eq. 14's F over every
 * layout that fits at tmax (valid when the front did not overflow). */
double pareto_lb(const Ctx *x, const Order *od, const double *Fm)
{
    return Fm[(size_t)1 * x->D + od->off[0] + od->Dp[0] - 1];
}
