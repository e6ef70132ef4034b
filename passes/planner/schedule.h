/* Pipeline schedules: warm-up counts and per-stage F/B action lists
 * (HAPT §2.3, §4.1; seed 004).  Owner: "dp".
 *
 * Stages are 0-based in arrays (stage i here is stage i+1 of the paper);
 * microbatches are 0-based in action lists and timeline events.
 *
 * ONE rule sizes the warm-up: schedule_warmup_step() gives N_i from N_{i+1}
 * for every schedule kind.  schedule_warmups() applies it stage by stage to
 * produce the emitted schedule, and the DP (hapt_dp.c) calls the same
 * function to get K of Eq. 23 for its memory check (Eq. 24).
 */
#ifndef HETC_SCHEDULE_H
#define HETC_SCHEDULE_H

#include "planner.h"

/* δ_i of Eq. 2 for boundary cost c and slowest stage t_max:
 *   1  when c <= eps * t_max (c = 0 inside a mesh included),
 *   2  when c <= t_max / 2,
 *   3  when c <= t_max,
 *   ceil(1 + 2c / t_max) (Eq. 11's form) when c > t_max, which the paper
 *      excludes; *beyond_paper (may be NULL) is set to 1 in that case only. */
int h1f1b_delta(double c, double t_max, double eps, int *beyond_paper);

/* Warm-up count N of a stage from the one after it (the single rule).
 *   kind       schedule
 *   n_next     N_{i+1} (0 for the last stage: then N = 1 for H-1F1B)
 *   s_suffix   number of stages from this one to the last, inclusive (S - i + 1)
 *   c          boundary cost to the next stage (0 for the last stage)
 * H-1F1B: N = N_{i+1} + δ_i (Eq. 1 written recursively; δ from h1f1b_delta);
 * 1F1B: N = s_suffix; Eager-1F1B: N = 2 s_suffix - 1 (§2.3.1); GPipe: N = B.
 * Always capped to [1, B].  *delta (may be NULL) gets δ_i for H-1F1B (the
 * step N_i - N_{i+1} before capping for the others), *beyond_paper as in
 * h1f1b_delta. */
int schedule_warmup_step(ScheduleKind kind, int n_next, int s_suffix, double c, double t_max,
                         double eps, int B, int *delta, int *beyond_paper);

/* Warm-ups of all S stages: c[i] boundary cost after stage i (c[S-1] is
 * ignored), N[i] out, delta[i] / beyond[i] out (may be NULL; 0 for the last
 * stage).  Returns 0, or -1 on bad arguments. */
int schedule_warmups(ScheduleKind kind, int S, int B, const double *c, double t_max, double eps,
                     int *N, int *delta, int *beyond);

typedef struct SchedAction {
    char kind;              /* 'F' or 'B' */
    int mb;                 /* 0-based microbatch */
} SchedAction;

/* Per-stage action lists: stage i runs actions[i][0..2B-1] in order. */
typedef struct Schedule {
    int S, B;
    int *warmup;            /* [S] N_i actually used (capped to [1, B]) */
    SchedAction **actions;  /* [S][2B] */
} Schedule;

/* Build the action lists from warm-up counts: N_i forwards, then B/F
 * alternating (steady 1F1B), then the remaining backwards.  N must be
 * non-increasing along the pipe (N_i >= N_{i+1}), else the pipe deadlocks:
 * returns -1 with err set.  GPipe is N_i = B. */
int schedule_build(int S, int B, const int *warmup, Schedule *out, IrError *err);
/* Same, with warm-ups from schedule_warmups(kind, ...). */
int schedule_build_kind(ScheduleKind kind, int S, int B, const double *c, double t_max, double eps,
                        Schedule *out, IrError *err);
void schedule_free(Schedule *s);

#endif
