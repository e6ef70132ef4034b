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

#include "alt_plan.h"

#define AH_MAX_TYPES 16
#define AH_MAX_POW 31   /* powers of two profiled: 2^0 .. 2^30 */

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

/* Eq. 5 (seed 001 §III-D, runtime profiling): for one device type and TP
 * degree only the layer counts 2^0 .. 2^k (k = floor(log2 L)) are
 * "profiled" (here: evaluated with alt_stage_cost on a window of 2^i
 * consecutive layers starting at the repeated region), and a stage of n
 * layers costs T(n) = sum_i alpha_i T(2^i), alpha the binary digits of n.
 * Memory as the paper's memory profiling: one layer's static memory (less
 * the runtime reserve, paid once) and activations, times n.  The composed
 * figures equal alt_stage_cost exactly when every layer of the stage costs
 * what a profiled layer costs (a uniform stack: the costs are per-layer
 * sums); stages holding other layers (embedding, head, or a sub-block of
 * fine layers out of phase with the profiled window) get the estimate the
 * paper accepts ("negligible error" on repetitive models). */
typedef struct AhBinProfile {
    int npow;                       /* powers profiled: 2^0 .. 2^(npow-1) */
    int first;                      /* first layer of the profiled windows */
    double t_f[AH_MAX_POW], t_b[AH_MAX_POW];
    double mem_layer, act_layer;    /* one layer's static memory less the reserve, activations */
    double reserve;
} AhBinProfile;

/* Profile mesh `mesh` at TP `tp` (dp 1, no recompute or ZeRO, one sample,
 * as AutoHet's stages are).  Returns the number of profile points (npow),
 * or -1 on bad arguments. */
int autohet_profile_binary(const AltContext *x, int mesh, int tp, AhBinProfile *pr);
/* Cost of a stage of n >= 1 layers from the profile (Eq. 5); t_f, t_b,
 * mem_static, mem_act, feasible (against device memory mem_bytes). */
void autohet_compose_binary(const AhBinProfile *pr, int n, double mem_bytes, StageCost *out);

/* AutoHet with a chosen profile mode: AH_PROFILE_EXACT costs every stage
 * with alt_stage_cost (what alt_plan_autohet does); AH_PROFILE_BINARY
 * balances layers (Eq. 4, memory) and scores plans (Eq. 1) with Eq. 5's
 * composed costs; the plan returned is still evaluated by alt_plan_eval.
 * *points (may be NULL) gets the profile points used (binary: npow per
 * device type and TP degree tried) and *exhaustive (may be NULL) what
 * profiling every layer count 1..L would take (L per type and degree). */
enum { AH_PROFILE_EXACT = 0, AH_PROFILE_BINARY = 1 };
int alt_plan_autohet_mode(const AltContext *x, int mode, AltPlan *out, long *points,
                          long *exhaustive, IrError *err);

#endif
