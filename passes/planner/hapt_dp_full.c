/* HAPT's full DP of Eq. 14-23 for one t_max (with branch and bound), and
 * the trace of the plan it found. */
#include "hapt_walk.h"

static int better(double v, int n, int ch, double v0, int n0, int ch0)
{
    /* (F, N, i, j) lexicographic: min F (Eq. 14/18), then the smaller
     * warm-up (less memory upstream), then a fixed order. */
    if (v != v0)
        return v < v0;
    if (n != n0)
        return n < n0;
    return ch < ch0;
}

/* A stage choice (last layer i, submesh index j) as one int: i major, so
 * comparing packed values orders by (i, j) as better() wants.  The radix is
 * the largest submesh count (a mesh of N nodes has N + log2(M) shapes,
 * more than 256 on 256 x 8 devices); ctx_build checks it fits. */
static inline int choice_pack(const Ctx *x, int i, int j)
{
    return i * x->nsubmax + j;
}

typedef struct RunEnv {     /* dp_run's state for its transition function */
    const Ctx *x;
    const Order *od;
    Work *w;
    double bound;
    const double *Gb, *Hf;
    int h1, Kterm;
    long trans;
} RunEnv;

/* Offer (F, N, choice) = (v, K, chv) to the state of stage count s at
 * (k, pos) = cstate (its F index q); keep it if better. */
static inline void run_offer(Work *w, size_t q, size_t cstate, int s, double v, int K, int chv)
{
    if (!better(v, K, chv, w->F[q], w->N[q], w->ch[q]))
        return;
    w->F[q] = v;
    w->N[q] = K;
    w->ch[q] = chv;
    if (s < w->slo[cstate])
        w->slo[cstate] = s;
    if (s > w->shi[cstate])
        w->shi[cstate] = s;
}

/* Eq. 14 / 18 for one transition over its d range: F(s, k, d) from
 * F(s - 1, successor) + t + 2C(i), with Eq. 24 and the bounds. */
static inline __attribute__((always_inline)) void run_tr(void *env, const Trans *t)
{
    RunEnv *e = env;
    const Ctx *x = e->x;
    Work *w = e->w;
    const int L = x->L, B = x->B, S1 = x->Smax + 1, p = t->p;
    const int terminal = t->kind == TR_LAST, kmax = t->kmax, K1 = t->K1;
    const int chv = choice_pack(x, t->i, t->j);
    const double w0 = 2.0 * t->c + t->t;
    /* s stages for layers k..L: at most one per layer and per free device
     * (d here and the meshes after p), at least one per remaining mesh */
    const int smax0 = L - t->k + 1 < x->Smax ? L - t->k + 1 : x->Smax;
    const int smin = e->od->P - p, rem = e->od->rem_after[p];
    const int s_lo0 = terminal ? 1 : (smin > 2 ? smin : 2);
    /* H-1F1B between stages: K = min(B, N + K1 - 1), and Eq. 24 (K <= kmax)
     * as a limit on N, hoisted */
    const int nlim = kmax >= B ? INT_MAX : kmax - K1 + 1;
    for (int d = t->d0; d <= t->d1; d++) {
        const size_t cstate = t->cur + (size_t)(d - t->d0), nstate = t->nxt + (size_t)(d - t->d0);
        int s_lo = s_lo0, s_hi = 1;
        if (!terminal) { /* only where F(s - 1, next) is finite */
            s_hi = smax0 < d + rem ? smax0 : d + rem;
            if (w->shi[nstate] < 0)
                continue;
            if (s_lo < w->slo[nstate] + 1)
                s_lo = w->slo[nstate] + 1;
            if (s_hi > w->shi[nstate] + 1)
                s_hi = w->shi[nstate] + 1;
        }
        /* (added by "dp-speed") thr: the bound for this state's suffix; Hf
         * (a lower bound of every prefix reaching the state) makes it
         * tighter, Gb (a lower bound of F at the next state) skips the whole
         * stage-count run. */
        double thr = e->bound;
        if (e->Hf) {
            double h = e->Hf[cstate];
            if (h == INF)
                continue; /* no prefix reaches this state */
            if (thr < INF)
                thr = thr - h + 1e-9 * (fabs(thr) + h);
        }
        if (e->Gb && !terminal && thr < INF && e->Gb[nstate] + w0 >= thr)
            continue;
        const size_t cur = cstate * (size_t)S1;
        if (terminal) { /* F(0, L+1, 0..0) = 0, N(0, L+1, ...) = 0: s = 1 only */
            e->trans++;
            if (e->Kterm <= kmax && w0 < thr) /* Eq. 24; the bound */
                run_offer(w, cur + 1, cstate, 1, w0, e->Kterm, chv);
            continue;
        }
        const double *Fn = w->F + nstate * (size_t)S1 - 1; /* F(s - 1, next) at Fn[s] */
        const int *Nn = w->N + nstate * (size_t)S1 - 1;
        for (int s = s_lo; s <= s_hi; s++) {
            double fn = Fn[s];
            if (fn == INF)
                continue;
            e->trans++;
            int K;
            if (e->h1) {
                int nn = Nn[s];
                if (nn > nlim)
                    continue; /* Eq. 24 */
                K = nn + K1 - 1 < B ? nn + K1 - 1 : B;
            } else {
                K = w->Ks[s];
                if (K > kmax)
                    continue; /* Eq. 24 */
            }
            double v = fn + w0;
            if (v < thr)
                run_offer(w, cur + s, cstate, s, v, K, chv);
        }
    }
}

static inline int run_dead(const void *env, size_t q)
{
    return ((const RunEnv *)env)->w->shi[q] < 0; /* no s with a finite F */
}

/* Full DP of Eq. 14-23 for one t_max.  Returns min_s F(s, 1, all devices)
 * (INF if infeasible); *best_s gets the s.
 * bound: partial sums >= bound are dropped (branch and bound; INF: none).
 * Stage times and boundary costs are >= 0, so a dropped partial sum can
 * only lead to a total >= bound, and every state whose F stays below the
 * bound keeps the same F, N and choice as without it. */
double dp_run(const Ctx *x, const Order *od, double tmax, double bound, const double *Gb,
              const double *Hf, Work *w, int *best_s)
{
    const int L = x->L, S1 = x->Smax + 1;
    const DpOptions *opt = x->opt;
    size_t total = widx(x, 0, L + 2, 0);
    for (size_t q = 0; q < total; q++) {
        w->F[q] = INF;
        w->N[q] = 0;
        w->ch[q] = -1;
    }
    for (size_t q = 0; q < (size_t)(L + 2) * x->D; q++) {
        w->slo[q] = INT_MAX;
        w->shi[q] = -1;
    }
    /* K of Eq. 23 is the warm-up this stage gets in the emitted schedule:
     * schedule_warmup_step, the same function, evaluated outside the
     * transition loop.  H-1F1B: K(N_next) = min(B, N_next + δ) for
     * N_next >= 1, so K(n) = min(B, n + K(1) - 1) (also when K(1) = B;
     * Trans.K1).  The others depend on s only. */
    RunEnv e = {x, od, w, bound, Gb, Hf, opt->schedule == SCHED_H1F1B, 0, 0};
    for (int s = 1; s <= x->Smax; s++)
        w->Ks[s] = schedule_warmup_step(opt->schedule, 1, s, 0.0, tmax, opt->eps, x->B, NULL, NULL);
    e.Kterm = schedule_warmup_step(opt->schedule, 0, 1, 0.0, tmax, opt->eps, x->B, NULL, NULL);
    walk_back(x, od, tmax, cmax_of(x, tmax), e.h1, run_tr, run_dead, &e);
    w->transitions += e.trans;
    double best = INF;
    size_t b0 = widx(x, 0, 1, od->off[0] + od->Dp[0] - 1);
    *best_s = -1;
    for (int s = 1; s < S1; s++) {
        double v = w->F[b0 + s];
        if (v < best) {
            best = v;
            *best_s = s;
        }
    }
    return best;
}

/* Follow the choices from (s, 1, all devices) and write the stages. */
int dp_trace(const Ctx *x, const Order *od, const Work *w, int s, StageRec *out)
{
    int k = 1, p = 0, d = od->Dp[0], n = 0;
    while (s > 0) {
        int chv = w->ch[widx(x, s, k, od->off[p] + d - 1)];
        if (chv < 0)
            return -1;
        int i = chv / x->nsubmax, j = chv % x->nsubmax;
        out[n++] = (StageRec){k, i, p, j};
        d -= x->size[(size_t)od->mesh[p] * x->nsubmax + j];
        if (d == 0 && p + 1 < od->P) {
            p++;
            d = od->Dp[p];
        }
        k = i + 1;
        s--;
    }
    return n;
}
