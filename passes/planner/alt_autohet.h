/* AutoHet's device grouping (seed 001 §III-B, Eq. 2-3) as a MILP per fixed
 * number of DP groups J, and the brute force it is tested against.
 *
 * The paper's problem is a non-linear integer program (the objective
 * multiplies the number of non-empty groups by the minimum effective
 * computing power, and the bubble ratio rho_j depends on how many stages
 * group j gets); the paper solves it with SCIP.  Here it is REFORMULATED:
 * J is fixed (every group non-empty, so sum_j y_j = J and the objective is
 * J z), GPUs of one type are interchangeable so the variables are integer
 * counts n_tj of TP entities of type t in group j, and rho is precomputed
 * per stage count p with a binary w_jp choosing group j's count:
 *   max z
 *   s.t. sum_j n_tj = c_t                         (3e: every entity placed)
 *        sum_t n_tj = sum_p p w_jp, sum_p w_jp = 1 (group j has p stages)
 *        sum_t m_t n_tj >= MIN_mem                 (3b)
 *        z <= (1 - rho_p) sum_t g_t n_tj + M (1 - w_jp)   (3c with Eq. 2)
 *        sum_t g_t n_tj >= sum_t g_t n_t,j+1       (symmetry: groups ordered)
 *   rho_p = (p - 1) / (K + p - 1), the 1F1B bubble ratio with K microbatches.
 * The optimum over J of J z is the paper's (3a).  Solved with GLPK.
 */
#ifndef HETC_ALT_AUTOHET_H
#define HETC_ALT_AUTOHET_H

#define AH_MAX_TYPES 16

typedef struct AhTypes {
    int T;
    int count[AH_MAX_TYPES];   /* c_t: TP entities of type t */
    double g[AH_MAX_TYPES];    /* computing power of one entity */
    double m[AH_MAX_TYPES];    /* memory of one entity */
    int max_stages;            /* cap on p (the layer count) */
    int time_limit_ms;         /* GLPK's limit per MILP (0: 2000, < 0: none); the incumbent is
                                  kept after it (optimal = 0) */
} AhTypes;

/* Best z for J groups, K microbatches per group; n[t * J + j] gets the
 * counts.  Returns z, or -1 when infeasible.  *optimal (may be NULL) is 1
 * when the solver proved optimality (0 after its time limit).  When the
 * solver stops without any solution (time limit) the greedy LPT grouping is
 * returned instead (optimal = 0).  Without GLPK this is the brute force when
 * the instance is small, else the greedy grouping. */
double autohet_group_milp(const AhTypes *ty, int J, int K, double min_mem, int *n, int *optimal);
/* Exhaustive search over every assignment of counts (small instances). */
double autohet_group_brute(const AhTypes *ty, int J, int K, double min_mem, int *n);
/* 1 when built with GLPK. */
int autohet_have_glpk(void);

#endif
