/* AutoHet device grouping: GLPK MILP and brute force (alt_autohet.h). */
#include "alt_autohet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef HETC_HAVE_GLPK
#include <glpk.h>
#endif

static double rho(int p, int K)
{
    return (double)(p - 1) / (double)(K + p - 1);
}

/* z of a complete assignment (n[t*J+j]); -1 when a group is empty, too
 * long or short of memory. */
static double eval_assign(const AhTypes *ty, int J, int K, double min_mem, const int *n)
{
    double z = INFINITY;
    for (int j = 0; j < J; j++) {
        int p = 0;
        double g = 0, m = 0;
        for (int t = 0; t < ty->T; t++) {
            p += n[t * J + j];
            g += ty->g[t] * n[t * J + j];
            m += ty->m[t] * n[t * J + j];
        }
        if (p < 1 || (ty->max_stages > 0 && p > ty->max_stages) || m < min_mem)
            return -1;
        double G = g * (1 - rho(p, K));
        if (G < z)
            z = G;
    }
    return z;
}

typedef struct Brute {
    const AhTypes *ty;
    int J, K;
    double min_mem, best;
    int *n, *best_n, *left;
} Brute;

static void brute_rec(Brute *b, int t, int j)
{
    const AhTypes *ty = b->ty;
    if (t == ty->T) {
        double z = eval_assign(ty, b->J, b->K, b->min_mem, b->n);
        if (z > b->best) {
            b->best = z;
            memcpy(b->best_n, b->n, (size_t)ty->T * b->J * sizeof *b->n);
        }
        return;
    }
    if (j == b->J - 1) {   /* the last group takes what is left of type t */
        b->n[t * b->J + j] = b->left[t];
        int save = b->left[t];
        b->left[t] = 0;
        brute_rec(b, t + 1, 0);
        b->left[t] = save;
        return;
    }
    for (int v = 0; v <= b->left[t]; v++) {
        b->n[t * b->J + j] = v;
        b->left[t] -= v;
        brute_rec(b, t, j + 1);
        b->left[t] += v;
    }
}

double autohet_group_brute(const AhTypes *ty, int J, int K, double min_mem, int *n)
{
    Brute b = {ty, J, K, min_mem, -1, NULL, NULL, NULL};
    b.n = calloc((size_t)ty->T * J, sizeof *b.n);
    b.best_n = calloc((size_t)ty->T * J, sizeof *b.best_n);
    b.left = calloc((size_t)ty->T, sizeof *b.left);
    if (!b.n || !b.best_n || !b.left) {
        free(b.n);
        free(b.best_n);
        free(b.left);
        return -1;
    }
    for (int t = 0; t < ty->T; t++)
        b.left[t] = ty->count[t];
    brute_rec(&b, 0, 0);
    if (n && b.best >= 0)
        memcpy(n, b.best_n, (size_t)ty->T * J * sizeof *n);
    free(b.n);
    free(b.best_n);
    free(b.left);
    return b.best;
}

/* Greedy grouping (LPT on computing power): the fallback when the solver
 * stops without an incumbent.  Returns its z or -1. */
static double greedy(const AhTypes *ty, int J, int K, double min_mem, int *n)
{
    int left[AH_MAX_TYPES];
    double *G = calloc((size_t)J, sizeof *G);
    if (!G)
        return -1;
    for (int t = 0; t < ty->T; t++) {
        left[t] = ty->count[t];
        for (int j = 0; j < J; j++)
            n[t * J + j] = 0;
    }
    for (;;) {
        int bt = -1;
        for (int t = 0; t < ty->T; t++)
            if (left[t] > 0 && (bt < 0 || ty->g[t] > ty->g[bt]))
                bt = t;
        if (bt < 0)
            break;
        int bj = 0;
        for (int j = 1; j < J; j++)
            if (G[j] < G[bj])
                bj = j;
        n[bt * J + bj]++;
        G[bj] += ty->g[bt];
        left[bt]--;
    }
    free(G);
    return eval_assign(ty, J, K, min_mem, n);
}

int autohet_have_glpk(void)
{
#ifdef HETC_HAVE_GLPK
    return 1;
#else
    return 0;
#endif
}

double autohet_group_milp(const AhTypes *ty, int J, int K, double min_mem, int *n, int *optimal)
{
    if (optimal)
        *optimal = 0;
    int T = ty->T, total = 0;
    for (int t = 0; t < T; t++)
        total += ty->count[t];
    if (J < 1 || J > total)
        return -1;
    int P = total - (J - 1);
    if (ty->max_stages > 0 && P > ty->max_stages)
        P = ty->max_stages;
#ifndef HETC_HAVE_GLPK
    double space = 1;
    for (int t = 0; t < T; t++)
        space *= pow(ty->count[t] + 1, J - 1);
    if (space > 2e6)
        return n ? greedy(ty, J, K, min_mem, n) : -2;
    if (optimal)
        *optimal = 1;
    (void)P;
    return autohet_group_brute(ty, J, K, min_mem, n);
#else
    /* GLPK works in absolute tolerances: scale powers and memories to O(1) */
    double gs = 0, ms = 0;
    for (int t = 0; t < T; t++) {
        gs = fmax(gs, ty->g[t]);
        ms = fmax(ms, ty->m[t]);
    }
    double bigM = 0;
    for (int t = 0; t < T; t++)
        bigM += ty->g[t] / gs * ty->count[t];
    glp_prob *lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MAX);
    /* columns: n_tj (T J), w_jp (J P), z */
    int nN = T * J, nW = J * P, nc = nN + nW + 1;
    glp_add_cols(lp, nc);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < J; j++) {
            int c = 1 + t * J + j;
            glp_set_col_kind(lp, c, GLP_IV);
            glp_set_col_bnds(lp, c, GLP_DB, 0, ty->count[t]);
        }
    for (int j = 0; j < J; j++)
        for (int p = 1; p <= P; p++)
            glp_set_col_kind(lp, 1 + nN + j * P + (p - 1), GLP_BV);
    int zc = nc;
    /* z never exceeds an equal share of the whole cluster's power */
    glp_set_col_bnds(lp, zc, GLP_DB, 0, bigM / J);
    glp_set_obj_coef(lp, zc, 1.0);
    /* rows */
    int nrows = T + J + J + J + J * P + (J - 1);
    glp_add_rows(lp, nrows);
    size_t cap = (size_t)nrows * (T + P + 2) + 16;
    int *ia = malloc((cap + 1) * sizeof *ia), *ja = malloc((cap + 1) * sizeof *ja);
    double *ar = malloc((cap + 1) * sizeof *ar);
    if (!ia || !ja || !ar) {
        free(ia);
        free(ja);
        free(ar);
        glp_delete_prob(lp);
        return -1;
    }
    int k = 0, r = 0;
#define NZ(row, col, v) (++k, ia[k] = (row), ja[k] = (col), ar[k] = (v))
    for (int t = 0; t < T; t++) {   /* (3e) */
        r++;
        glp_set_row_bnds(lp, r, GLP_FX, ty->count[t], ty->count[t]);
        for (int j = 0; j < J; j++)
            NZ(r, 1 + t * J + j, 1.0);
    }
    for (int j = 0; j < J; j++) {   /* stage count = chosen p */
        r++;
        glp_set_row_bnds(lp, r, GLP_FX, 0, 0);
        for (int t = 0; t < T; t++)
            NZ(r, 1 + t * J + j, 1.0);
        for (int p = 1; p <= P; p++)
            NZ(r, 1 + nN + j * P + (p - 1), -(double)p);
    }
    for (int j = 0; j < J; j++) {   /* one p per group */
        r++;
        glp_set_row_bnds(lp, r, GLP_FX, 1, 1);
        for (int p = 1; p <= P; p++)
            NZ(r, 1 + nN + j * P + (p - 1), 1.0);
    }
    for (int j = 0; j < J; j++) {   /* (3b) */
        r++;
        glp_set_row_bnds(lp, r, GLP_LO, min_mem / ms, 0);
        for (int t = 0; t < T; t++)
            NZ(r, 1 + t * J + j, ty->m[t] / ms);
    }
    for (int j = 0; j < J; j++)     /* (3c): z - (1-rho_p) G_j + M w_jp <= M */
        for (int p = 1; p <= P; p++) {
            r++;
            glp_set_row_bnds(lp, r, GLP_UP, 0, bigM);
            NZ(r, zc, 1.0);
            for (int t = 0; t < T; t++)
                NZ(r, 1 + t * J + j, -(1 - rho(p, K)) * ty->g[t] / gs);
            NZ(r, 1 + nN + j * P + (p - 1), bigM);
        }
    for (int j = 0; j + 1 < J; j++) {   /* symmetry breaking */
        r++;
        glp_set_row_bnds(lp, r, GLP_LO, 0, 0);
        for (int t = 0; t < T; t++) {
            NZ(r, 1 + t * J + j, ty->g[t] / gs);
            NZ(r, 1 + t * J + j + 1, -ty->g[t] / gs);
        }
    }
#undef NZ
    glp_load_matrix(lp, k, ia, ja, ar);
    free(ia);
    free(ja);
    free(ar);
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev = GLP_MSG_OFF;
    if (ty->time_limit_ms >= 0)   /* incumbent kept, optimal = 0 */
        parm.tm_lim = ty->time_limit_ms > 0 ? ty->time_limit_ms : 2000;
    int rc = glp_intopt(lp, &parm);
    int st = glp_mip_status(lp);
    double z = -1;
    if ((rc == 0 || rc == GLP_ETMLIM) && (st == GLP_OPT || st == GLP_FEAS)) {
        z = glp_mip_obj_val(lp) * gs;
        if (optimal)
            *optimal = st == GLP_OPT;
        if (n)
            for (int t = 0; t < T; t++)
                for (int j = 0; j < J; j++)
                    n[t * J + j] = (int)lround(glp_mip_col_val(lp, 1 + t * J + j));
        /* report z of the rounded counts exactly as the brute force would */
        if (n) {
            double ze = eval_assign(ty, J, K, min_mem, n);
            if (ze >= 0)
                z = ze;
        }
    }
    int proven_infeasible = st == GLP_NOFEAS || rc == GLP_ENOPFS;
    glp_delete_prob(lp);
    if (z < 0 && !proven_infeasible && n)
        z = greedy(ty, J, K, min_mem, n);   /* stopped without an incumbent */
    return z;
#endif
}
