/* Event-driven simulator of one training iteration over the DAG of HAPT
 * §4.2.1 (seed 004).  Owner: "dp".
 *
 * Nodes: F_{mb,i}, B_{mb,i} (compute on stage i) and C^F_{mb,i}, C^B_{mb,i}
 * (transfers on the link between stage i and i+1).  Edges: E_comp, the order
 * of each stage's action list (schedule.h), and E_dep, the data dependencies
 * F_{mb,i} -> C^F_{mb,i} -> F_{mb,i+1} and B_{mb,i+1} -> C^B_{mb,i} -> B_{mb,i}.
 * A stage computes one action at a time; each link direction carries one
 * transfer at a time (in the order the producer finished); compute and comm
 * overlap.  An optional per-stage DP gradient all-reduce ('A') runs after the
 * stage's last backward.
 */
#ifndef HETC_SIMULATE_H
#define HETC_SIMULATE_H

#include "planner.h"
#include "schedule.h"
#include "timeline_svg.h"

/* One interval of the timeline.  kind: 'F' forward, 'B' backward,
 * 'S' send of the forward boundary i -> i+1 (on stage i's outgoing link),
 * 'R' send of the backward gradient i+1 -> i (recorded on stage i+1, the
 * sender), 'A' DP gradient all-reduce of the stage. */
typedef TlSvgEvent TimelineEvent; /* common/timeline_svg.h: {stage, kind, mb, start, end} */

typedef struct SimResult {
    double iter_time;        /* end of the last event */
    int nstages;
    double *busy;            /* [S] compute time (F + B) of each stage */
    double *bubble;          /* [S] 1 - busy/iter_time (idle fraction of the stage) */
    double *comm_total;      /* [S] time of the transfers stage i sends ('S' to i+1, 'R' to i-1) */
    double *comm_hidden;     /* [S] part of that time during which the RECEIVING stage
                                computes: the transfer did not leave it idle */
    double overlap;          /* sum comm_hidden / sum comm_total (1 when no comm) */
    int *peak_inflight;      /* [S] max #microbatches with F done and B not started */
    double *peak_act_mem;    /* [S] peak_inflight * mem_act (+ mem_static when given) */
    TimelineEvent *events;   /* every interval, sorted by start then stage */
    int nevents;
} SimResult;

/* Per-stage inputs of a simulation (independent of Plan so tests can drive
 * it directly).  c_next[i]: forward transfer time i -> i+1 per microbatch;
 * c_back[i]: backward transfer time i+1 -> i (usually == c_next[i]). */
typedef struct SimStage {
    double t_f, t_b;
    double c_next, c_back;
    double t_sync;           /* DP all-reduce at the end (0: none) */
    double mem_act;          /* per in-flight microbatch (0: unknown) */
    double mem_static;       /* added to peak_act_mem (0: unknown) */
} SimStage;

/* Simulate stages under the action lists of sched (one per stage).
 * Returns 0, or -1 with err set (deadlock: an action list that cannot run,
 * bad sizes, out of memory).  Free with sim_result_free. */
int simulate(const SimStage *st, int S, const Schedule *sched, SimResult *out, IrError *err);

/* Convenience: build SimStages from a Plan (t_f, t_b, c_next for both
 * directions), the schedule from plan->schedule with the plan's warm-ups,
 * and simulate.  sync: 1 to include each stage's t_sync (taken from
 * sync_times[i] when non-NULL, else none). */
int simulate_plan(const Plan *p, const double *sync_times, SimResult *out, IrError *err);

void sim_result_free(SimResult *r);

#endif
