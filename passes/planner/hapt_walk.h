/* The transition walker every DP of HAPT's search inlines (private to
 * passes/planner; see hapt_dp_impl.h).  A header of static inline
 * functions: each DP passes its own constant per-transition function, and
 * the compiler specialises the walk for it (the search's hot path). */
#ifndef HETC_HAPT_WALK_H
#define HETC_HAPT_WALK_H

#include "hapt_dp_impl.h"

/* ------------------------------------------------------------ transitions */

/* Every DP below (dp_run, dp_relaxed, dp_prefix, dp_feasible, dp_pareto,
 * dp_bottleneck) visits the same transitions: at layer k on mesh π_p, a
 * candidate stage k..i on submesh j of π_p (nm = n·m devices) with
 * t <= tmax, followed by one kind of successor, by d (the devices of π_p
 * still free before the stage):
 *   TR_SAME  d = nm+1..Dp, i < L: the next stage on π_p, d - nm free;
 *   TR_NEXT  d = nm, i < L, p < P-1: π_p is done, the next stage on π_{p+1}
 *            with all of it free;
 *   TR_LAST  d = nm, i = L, p = P-1: the last stage (F(0, L+1, ...) = 0, c = 0).
 * walk_kp enumerates them once, for one (k, p), and hands each (candidate,
 * successor kind) with its whole d range to a per-transition function.  It
 * is always inlined with a constant function, so every DP gets its own
 * specialised loop (no call per transition: this is the search's hot path).
 * Candidates come from the sparse index (§5.2.2 (1): a t-sorted prefix) or,
 * without it, a scan of i = k..L; the visiting order differs, the DPs'
 * tie-breaks make their results independent of it. */
typedef enum { TR_SAME, TR_NEXT, TR_LAST } TransKind;

typedef struct Trans {
    TransKind kind;
    int k, i, p, j, nm;
    double t;               /* t_f + t_b of the stage */
    int kmax;               /* Eq. 24: K <= kmax (INT_MAX without memory checks) */
    int K1;                 /* with want_k1, H-1F1B's K for N_next = 1 across c:
                               K(N) = min(B, N + K1 - 1) for N >= 1 (Eq. 1, δ of Eq. 2) */
    double c;               /* C(i) across the boundary (TR_LAST: 0) */
    int d0, d1;             /* the d covered (TR_NEXT, TR_LAST: d0 = d1 = nm) */
    size_t cur;             /* (k, d0) in a [L+2][D] table; (k, d) is cur + d - d0 */
    size_t nxt;             /* its successor (i+1, d0 - nm or all of π_{p+1}); that of
                               (k, d) is nxt + d - d0 (TR_LAST: none) */
} Trans;

typedef void (*TransFn)(void *env, const Trans *t);

/* Whether state q of a [L+2][D] table is dead: F infinite, no suffix (the
 * DPs' own "nothing to extend" test). */
typedef int (*DeadFn)(const void *env, size_t q);

/* The d (1-based, devices of π_p free) of row k, mesh p with a live state:
 * lo..hi (empty: lo > hi).  A transition whose successor is dead does
 * nothing in any DP, and most are (in dp_pareto at L = 98 with intra-op
 * choices, 95 % of the successors visited), so the walk clamps each
 * transition's d range to the successor row's live range. */
typedef struct Live {
    int lo, hi;
} Live;

/* K1 for boundary cost c at tmax, remembered for the last c of each kind:
 * C(i, a, a) and C(i, a, b) take few distinct values. */
static inline int k1_memo(const Ctx *x, double c, double tmax, double *mc, int *mk)
{
    if (c != *mc) {
        *mk = schedule_warmup_step(SCHED_H1F1B, 1, 0, c, tmax, x->opt->eps, x->B, NULL, NULL);
        *mc = c;
    }
    return *mk;
}

/* The transitions of (k, p) with t <= tmax and C(i) <= cmax (the comm bound
 * of §5.2.1 (ii); INFINITY: none), each passed to fn(env, ...). */
static inline __attribute__((always_inline)) void
walk_kp(const Ctx *x, const Order *od, int k, int p, double tmax, double cmax, int want_k1,
        const Live *lv, TransFn fn, void *env)
{
    const int L = x->L, a = od->mesh[p], Dp = od->Dp[p], last = p + 1 == od->P;
    const int b = last ? a : od->mesh[p + 1];
    const size_t row = (size_t)k * x->D + od->off[p];
    const size_t next_all = last ? 0 : (size_t)od->off[p + 1] + od->Dp[p + 1] - 1;
    double mc[2] = {NAN, NAN}; /* NaN: nothing remembered yet */
    int mk[2] = {0, 0};
    Trans t;
    t.k = k;
    t.p = p;
    t.K1 = 0;
    for (int j = 0; j < x->nsub[a]; j++) {
        int nm = x->size[(size_t)a * x->nsubmax + j]; /* in DP units */
        if (nm > Dp)
            continue;
        t.j = j;
        t.nm = nm;
        const CandRef *r = NULL;
        int n = L - k + 1; /* scan: i = k + q */
        if (x->opt->sparse_index) {
            size_t q = ((size_t)a * ((size_t)L + 2) + k) * x->nsubmax + j; /* sp_off's order */
            r = x->sp + x->sp_off[q];
            n = x->sp_off[q + 1] - x->sp_off[q];
        }
        for (int q = 0; q < n; q++) {
            int i;
            if (r) {
                if (!(r[q].t <= tmax))
                    break; /* sorted by t */
                i = r[q].i;
                t.t = r[q].t;
                t.kmax = r[q].kmax;
            } else {
                i = k + q;
                const Tab *tb = tab_at(x, a, j, k, i);
                if (!tb->feasible || !(tb->t <= tmax))
                    continue;
                t.t = tb->t;
                t.kmax = x->opt->check_memory ? tb->kmax : INT_MAX;
            }
            t.i = i;
            if (i == L) {
                if (last) {
                    t.kind = TR_LAST;
                    t.c = 0.0;
                    t.d0 = t.d1 = nm;
                    t.cur = row + nm - 1;
                    t.nxt = 0;
                    fn(env, &t);
                }
                continue;
            }
            const size_t rown = (size_t)(i + 1) * x->D;
            /* d = nm+1..Dp, successor d - nm: within the live range + nm */
            int d0 = nm + 1, d1 = Dp;
            if (lv) {
                const Live *l = &lv[(size_t)(i + 1) * od->P + p];
                d0 = l->lo + nm > d0 ? l->lo + nm : d0;
                d1 = l->hi + nm < d1 ? l->hi + nm : d1;
            }
            double c = comm_at(x, i, a, a);
            if (d0 <= d1 && !(c > cmax)) {
                t.kind = TR_SAME;
                t.c = c;
                if (want_k1)
                    t.K1 = k1_memo(x, c, tmax, &mc[0], &mk[0]);
                t.d0 = d0;
                t.d1 = d1;
                t.cur = row + d0 - 1;
                t.nxt = rown + od->off[p] + (d0 - nm - 1);
                fn(env, &t);
            }
            if (last)
                continue;
            /* the successor has all of π_{p+1} free: the live range's top */
            if (lv && lv[(size_t)(i + 1) * od->P + p + 1].hi != od->Dp[p + 1])
                continue;
            c = comm_at(x, i, a, b);
            if (!(c > cmax)) {
                t.kind = TR_NEXT;
                t.c = c;
                if (want_k1)
                    t.K1 = k1_memo(x, c, tmax, &mc[1], &mk[1]);
                t.d0 = t.d1 = nm;
                t.cur = row + nm - 1;
                t.nxt = rown + next_all;
                fn(env, &t);
            }
        }
    }
}

/* walk_kp over the whole table in the backward DPs' order: k = L..1
 * (every successor row i+1 > k is final before row k is read), all p.
 * With dead (NULL: none), the live ranges of each row once it is final
 * (without memory for them, the walk visits every d: the same result). */
static inline __attribute__((always_inline)) void
walk_back(const Ctx *x, const Order *od, double tmax, double cmax, int want_k1, TransFn fn,
          DeadFn dead, void *env)
{
    const int P = od->P;
    Live *lv = dead ? malloc((size_t)(x->L + 2) * P * sizeof *lv) : NULL;
    for (int k = x->L; k >= 1; k--) {
        if (out_of_time(x))
            break; /* the root row stays unset: this DP yields nothing */
        for (int p = 0; p < P; p++)
            walk_kp(x, od, k, p, tmax, cmax, want_k1, lv, fn, env);
        for (int p = 0; lv && p < P; p++) {
            size_t q0 = (size_t)k * x->D + od->off[p] - 1; /* d = 1 at q0 + 1 */
            int lo = 1, hi = od->Dp[p];
            while (lo <= hi && dead(env, q0 + lo))
                lo++;
            while (hi >= lo && dead(env, q0 + hi))
                hi--;
            if (lo > hi)
                lo = 1, hi = 0; /* none (hi != Dp: the top is dead too) */
            lv[(size_t)k * P + p] = (Live){lo, hi};
        }
    }
    free(lv);
}

#endif
