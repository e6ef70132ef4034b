/* Brute-force reference for the HAPT DP (tests and benchmarks only).
 * Owner: "dp".
 *
 * Enumerates every mesh order (the same set hapt_dp_plan searches), every
 * partition of layers 1..L into contiguous stages and every assignment of
 * §5.2 submeshes that allocates every device, and evaluates Eq. 13 under the
 * DP's feasibility rules with the EXACT warm-ups of the whole layout:
 *   t_max ranges over the same candidates (distinct feasible stage times),
 *   t_i <= t_max, C(i) <= t_max (when opt->comm_bound), and
 *   mem_static + N_i mem_act <= mem_device (Eq. 24) with N_i from
 *   schedule_warmups(opt->schedule, ...) at that t_max.
 * For a layout the best t_max is the smallest feasible candidate (the
 * objective grows with t_max and feasibility is monotone in it).
 * It ignores opt->max_stages (the DP's cap on the stage count).
 * Exponential: keep L <= 12 and a handful of devices.
 */
#ifndef HETC_BRUTE_H
#define HETC_BRUTE_H

#include "hapt_dp.h"

/* Fills *out (plan_free) with an optimal plan; *layouts (may be NULL) gets
 * the number of complete layouts evaluated.  Returns 0, or -1 with err set
 * when nothing is feasible. */
int brute_plan(const ClusterSpec *c, int L, const CostOracle *o, const DpOptions *opt, Plan *out,
               long *layouts, IrError *err);

#endif
