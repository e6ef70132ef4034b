/* HAPT's lower-bound DPs: the relaxed DP (no stage-count dimension), its
 * forward twin over prefixes, and the bottleneck bound of a mesh order. */
#include "hapt_walk.h"

/* g[d] = min(g[d], h[d] + w) for d in [0, n): the inner loop of the relaxed,
 * prefix and bottleneck DPs (most of their time).  g and h are different
 * rows of a table.  With SSE2, two lanes at a time: _mm_min_pd(v, g) is
 * "v < g ? v : g" and _mm_max_pd(h, w) "h > w ? h : w", the scalar
 * expressions below, bit for bit (no NaN occurs: INF + w stays INF). */
static inline void row_min_add(double *restrict g, const double *restrict h, double w, int n)
{
    int d = 0;
#ifdef __SSE2__
    const __m128d wv = _mm_set1_pd(w);
    for (; d + 2 <= n; d += 2) {
        __m128d v = _mm_add_pd(_mm_loadu_pd(h + d), wv);
        _mm_storeu_pd(g + d, _mm_min_pd(v, _mm_loadu_pd(g + d)));
    }
#endif
    for (; d < n; d++) {
        double v = h[d] + w;
        g[d] = v < g[d] ? v : g[d];
    }
}

static inline void row_min_max(double *restrict g, const double *restrict h, double w, int n)
{
    int d = 0;
#ifdef __SSE2__
    const __m128d wv = _mm_set1_pd(w);
    for (; d + 2 <= n; d += 2) {
        __m128d v = _mm_max_pd(_mm_loadu_pd(h + d), wv);
        _mm_storeu_pd(g + d, _mm_min_pd(v, _mm_loadu_pd(g + d)));
    }
#endif
    for (; d < n; d++) {
        double v = h[d] > w ? h[d] : w;
        g[d] = v < g[d] ? v : g[d];
    }
}

/* Relaxed DP over (k, pos) without the stage count: min Σ (t + 2c) over
 * layouts whose candidates have t <= tmax, whose boundaries obey the comm
 * bound, and whose stages fit with the smallest K the schedule could give
 * them (δ + 1 for H-1F1B, 1 otherwise).  Every plan the full DP can return
 * at tmax is such a layout, so: INF here => the full DP is infeasible at
 * tmax (monotone in tmax: the low side of (b)); with tmax = INF and no
 * filters it is a lower bound of Eq. 13's first term (the high side). */
typedef struct RowEnv {     /* dp_relaxed, dp_prefix, dp_bottleneck */
    const Ctx *x;
    double *G;
    int filters, h1;        /* dp_bottleneck: filters = the comm bound */
    int dlo;                /* dp_prefix: first d - 1 with a finite prefix there */
} RowEnv;

/* Eq. 24 with the smallest K a stage could get across this transition (the
 * relaxed filter; the walk applied the comm bound). */
static inline int relaxed_ok(const RowEnv *e, const Trans *t)
{
    return (e->h1 && t->kind != TR_LAST ? t->K1 : 1) <= t->kmax;
}

static inline __attribute__((always_inline)) void relaxed_tr(void *env, const Trans *t)
{
    RowEnv *e = env;
    if (e->filters && !relaxed_ok(e, t))
        return;
    if (t->kind == TR_LAST) {
        if (t->t < e->G[t->cur])
            e->G[t->cur] = t->t;
        return;
    }
    /* G(k, d) from G(successor of d) for d = d0..d1 */
    row_min_add(e->G + t->cur, e->G + t->nxt, 2.0 * t->c + t->t, t->d1 - t->d0 + 1);
}

/* G infinite: INF + w stays INF (w >= 0), the row minima keep their value
 * (dp_relaxed: only with boundary costs >= 0). */
static inline int row_dead(const void *env, size_t q)
{
    return !(((const RowEnv *)env)->G[q] < INF);
}

double dp_relaxed(const Ctx *x, const Order *od, double tmax, int filters, double *G)
{
    const int D = x->D;
    for (size_t q = 0; q < (size_t)(x->L + 2) * D; q++)
        G[q] = INF;
    RowEnv e = {x, G, filters, filters && x->opt->check_memory && x->opt->schedule == SCHED_H1F1B,
                0};
    walk_back(x, od, filters ? tmax : INF, filters ? cmax_of(x, tmax) : INFINITY, e.h1,
              relaxed_tr, x->nonneg ? row_dead : NULL, &e);
    return G[(size_t)1 * D + od->off[0] + od->Dp[0] - 1];
}

/* Forward twin of dp_relaxed (added by "dp-speed"): H[k][pos] = the
 * smallest Σ (t + 2c) of the stages before layer k over prefixes from the
 * root (layer 1, all of π_1 free) to state (k, pos), with the same filters
 * at tmax.  Every prefix of a plan the full DP can return is such a prefix,
 * so H is a lower bound of it, and INF means no plan passes the state.
 * Sums run in the other direction than the full DP's, so its users allow
 * a relative slack for rounding. */
static inline __attribute__((always_inline)) void prefix_tr(void *env, const Trans *t)
{
    RowEnv *e = env;
    if (t->kind == TR_LAST || !relaxed_ok(e, t))
        return; /* a stage ending at L ends the plan: nothing to push */
    /* H(successor of d) from H(k, d) for d = d0..d1 with a finite H(k, d) */
    int d0 = t->d0 > e->dlo + 1 ? t->d0 : e->dlo + 1;
    if (d0 > t->d1)
        return;
    size_t sh = (size_t)(d0 - t->d0);
    row_min_add(e->G + t->nxt + sh, e->G + t->cur + sh, 2.0 * t->c + t->t, t->d1 - d0 + 1);
}

void dp_prefix(const Ctx *x, const Order *od, double tmax, double *H)
{
    const int L = x->L, D = x->D;
    for (size_t q = 0; q < (size_t)(L + 2) * D; q++)
        H[q] = INF;
    H[(size_t)1 * D + od->off[0] + od->Dp[0] - 1] = 0.0;
    RowEnv e = {x, H, 1, x->opt->check_memory && x->opt->schedule == SCHED_H1F1B, 0};
    for (int k = 1; k < L; k++) { /* a stage starting at L ends the plan: nothing to push */
        if (out_of_time(x))
            break;
        for (int p = 0; p < od->P; p++) {
            const double *hk = &H[(size_t)k * D + od->off[p]];
            e.dlo = 0; /* first d - 1 with a finite prefix */
            while (e.dlo < od->Dp[p] && hk[e.dlo] == INF)
                e.dlo++;
            if (e.dlo < od->Dp[p])
                walk_kp(x, od, k, p, tmax, cmax_of(x, tmax), e.h1, NULL, prefix_tr, &e);
        }
    }
}

/* Bottleneck bound of an order (added by "plan5"): the smallest t_max any
 * layout could use, min over layouts of the largest stage time (and, with
 * the comm bound, boundary cost), over candidates that fit with K = 1.
 * Every plan the full DP returns at t_max is such a layout with all of those
 * <= t_max, so Eq. 13 >= (B-1) bottleneck + LB (LB: dp_relaxed unfiltered)
 * for every plan of the order: a key to search orders by, and a cut. */
static inline __attribute__((always_inline)) void bottleneck_tr(void *env, const Trans *t)
{
    RowEnv *e = env;
    if (t->kmax < 1)
        return; /* does not fit even K = 1 */
    if (t->kind == TR_LAST) {
        if (t->t < e->G[t->cur])
            e->G[t->cur] = t->t;
        return;
    }
    double w = t->t;
    if (e->filters && t->c > w) /* filters: the comm bound */
        w = t->c;
    row_min_max(e->G + t->cur, e->G + t->nxt, w, t->d1 - t->d0 + 1);
}

double dp_bottleneck(const Ctx *x, const Order *od, double *G)
{
    const int D = x->D;
    for (size_t q = 0; q < (size_t)(x->L + 2) * D; q++)
        G[q] = INF;
    RowEnv e = {x, G, x->opt->comm_bound, 0, 0};
    walk_back(x, od, INF, INFINITY, 0, bottleneck_tr, row_dead, &e);
    return G[(size_t)1 * D + od->off[0] + od->Dp[0] - 1];
}
