/* The other seed planners (issue 8): uniform, coarse, heteroauto (seed 002),
 * metis / metis-mem (seed 003 and the original Metis), zorse (seed 000),
 * autohet (seed 001), all judged on hetc's layers, cost formulas and
 * simulator.  Readings of the papers: docs/COMPARISON.md.
 *
 * Every planner produces an AltPlan: a pipeline of stages, each holding
 * layers k..i on devices of one or more meshes with its own dp, tp,
 * recompute flag and microbatch shares.  alt_plan_eval() costs a layout the
 * same way for every planner (alt_stage_cost below), sizes warm-ups with
 * schedule.h, checks memory with them and simulates the iteration with
 * simulate.h, so "simulated iteration time" compares like with like.
 *
 * Units as planner.h: seconds, bytes, FLOP.  Layers are 1-based.
 */
#ifndef HETC_ALT_PLAN_H
#define HETC_ALT_PLAN_H

#include "cost_model.h"
#include "planner.h"
#include "schedule.h"

#define ALT_MAX_PARTS 8

/* What a planner is given.  `samples` is the global batch in units of the
 * PlanLayer microbatch (the layers' figures are per microbatch of b rows;
 * samples = G / b, the B of `hetc plan`). */
typedef struct AltContext {
    const ClusterSpec *c;
    const PlanLayer *layers;    /* layers[0] is layer 1 */
    int L;
    int samples;
    int rows;                   /* rows of one PlanLayer microbatch (hetc plan's --microbatch
                                   b): a stage's DP ranks split the rows of the pipeline
                                   microbatch, rows x mb_samples, and a dp above them leaves
                                   a rank without a row, which no stage binary runs, so no
                                   planner chooses it (issue 18).  0 (alt_context_default):
                                   unknown, not checked */
    CostOptions co;             /* efficiency, runtime reserve, pcie_bw (the rest unused) */
    double eps;                 /* ε of Eq. 2 for H-1F1B plans (coarse) */
    int coarse_layers;          /* coarse: layer count to merge into (default 8) */
    int tp_max;                 /* cap on TP (0: devices per node of the mesh) */
    int threads;                /* coarse: DP threads */
    double tp_block_bytes;      /* parameters of one repeated block (alt_context_default finds
                                   the period of the layer signatures; 0: unknown) */
    int block_first, block_period, block_count; /* the repeated blocks: block_count blocks of
                                   block_period layers from layer block_first (1-based); 0: none */
    double host_mem_per_node;   /* zorse: host RAM a node gives offloaded state (default 1 TiB;
                                   cluster.yaml does not describe hosts) */
} AltContext;

void alt_context_default(AltContext *x, const ClusterSpec *c, const PlanLayer *layers, int L,
                         int samples);

/* Devices of one mesh inside a stage. */
typedef struct AltPart {
    int mesh;
    int devices;
    double share;               /* fraction of each pipeline microbatch these devices take
                                   (Zorse's per-GPU microbatch sizes); 1 for one-part stages */
} AltPart;

typedef struct AltStage {
    int first_layer, last_layer;
    AltPart parts[ALT_MAX_PARTS];
    int nparts;
    int dp, tp;                 /* dp x tp = devices of the stage */
    int recompute;              /* 1: keep only layer inputs, re-run forward in backward */
    int group;                  /* 0: the stage has its own devices; g > 0: every stage with
                                   group g runs on the same devices (Zorse's ministages of one
                                   GPU group, placed round-robin) */
    int pipe;                   /* 0: the plan is one pipeline; p > 0: the stage belongs to
                                   pipeline p (AutoHet's DP groups, each a whole model
                                   replica with its own stages; stored one after another) */
    int pipe_microbatches;      /* pipe > 0: microbatches this pipeline runs (its share) */
    /* filled by alt_plan_eval */
    double t_f, t_b;            /* per pipeline microbatch (slowest part) */
    double t_sync;              /* gradient all-reduce, once per iteration */
    double c_next;              /* boundary to the next stage, per pipeline microbatch */
    double t_load_f, t_load_b;  /* offload: host->device weight load before the forward pass,
                                   load + gradient write-back around the backward (PCIe) */
    double mem_static, mem_act; /* per device of the tightest part */
    double mem_peak, mem_cap;   /* mem_static + K mem_act (K: in-flight), and the device memory */
    int warmup;                 /* N_i from the schedule */
    int tight_part;             /* part whose memory is closest to its capacity */
} AltStage;

typedef struct AltPlan {
    char planner[24];
    AltStage *stages;
    int nstages;
    int microbatches;           /* pipeline microbatches per iteration */
    double mb_samples;          /* PlanLayer microbatches per pipeline microbatch */
    ScheduleKind schedule;
    double eps;
    int zero_stage;             /* 0, or 2 (Zorse) */
    double t_sync_dp;           /* pipelines > 1: gradient sync across them, added once
                                   (AutoHet's T_sync of Eq. 1) */
    int offload;                /* 1: activations and optimizer state on the host (Zorse):
                                   at most 2 microbatches of activations stay on the device */
    /* filled by alt_plan_eval */
    int feasible;               /* every stage within memory */
    double t_max;
    double eq13;                /* Eq. 13 of HAPT on this layout, for reference */
    double sim_time;            /* simulated iteration (simulate.h), s */
    double peak_ratio;          /* max over stages of mem_peak / mem_cap */
    /* filled by the planner */
    double objective;           /* the planner's own cost model value */
    long steps;                 /* search steps: plans (or layouts) costed */
    double seconds;             /* planning wall time */
    int runnable;               /* 1: today's stage binaries run it (docs/STAGES.md) */
    char needs[256];            /* runtime features it needs when not runnable */
} AltPlan;

void alt_plan_free(AltPlan *p);
/* Allocate S zeroed stages. */
int alt_plan_init(AltPlan *p, const char *planner, int S, IrError *err);

/* ---------------------------------------------------------------- cost */

/* Cost of layers k..i on `devices` devices of mesh `mesh` split dp x tp,
 * each DP rank handling `frac` PlanLayer microbatches per pipeline
 * microbatch (mb_samples / dp for an even split; before TP).  The analytic
 * model of cost_model.c extended:
 *   per device a layer's forward is max(fwd_flops frac / tp / peak,
 *       (param_bytes / tp + (act + out) frac / tp) / hbm_bw), backward alike,
 *   TP: Megatron's two ring all-reduces per transformer block in the
 *       forward and two in the backward, of the layer's out_bytes * frac,
 *       shared among a block's layers in proportion to their parameters
 *       (2 param_bytes / tp_block_bytes, at most 2 per layer; heavy_ops / 2
 *       when no block was found), over the intra-node link (TP never leaves
 *       a node);
 *   recompute: saved activations become each block's input (out_bytes of
 *       the layer before a segment start, x frac, not divided by tp; see
 *       alt_segment_start), backward re-runs forward;
 *   memory: params / tp x zero_state_bytes_per_param (zero_memory.h: ZeRO
 *       stage zero over zero_dp) + reserve;
 *   t_sync: ring all-reduce of params / tp over dp, intra-node when the
 *       stage's devices fit in one node, else inter-node.
 * With tp = 1, frac = 1 / dp, recompute = 0, zero = 0 this equals
 * cost_model_stage() on a submesh of dp devices (tests/planner_alt).
 * zero_dp: the group ZeRO shards over (0: dp). */
int alt_stage_cost(const AltContext *x, int k, int i, int mesh, int dp, int tp, int recompute,
                   int zero, int zero_dp, double frac, StageCost *out);
/* Boundary after layer i between meshes a and b for `mb` PlanLayer
 * microbatches (cost_model_comm x mb, without a profile database). */
double alt_comm(const AltContext *x, int i, int a, int b, double mb);

/* Fill every derived field of a layout (see AltStage / AltPlan) and simulate.
 * Returns 0 (p->feasible says whether memory holds), or -1 with err set on
 * a malformed layout. */
int alt_plan_eval(const AltContext *x, AltPlan *p, IrError *err);

/* Independent validity check: layers cover 1..L in order, every part within
 * its mesh, no device used twice, dp x tp = devices, tp a power of two within
 * a node, shares sum to 1, and (recomputed from alt_stage_cost) memory fits.
 * Returns 0, or -1 with err naming the stage and the rule. */
int alt_plan_check(const AltContext *x, const AltPlan *p, IrError *err);

/* The rows of a pipeline microbatch of p (x->rows x mb_samples; 0 when
 * x->rows is unknown), and the check every planner's result passes: no
 * stage's dp above them.  Returns 0, or -1 with err naming the stage. */
int alt_plan_rows(const AltContext *x, const AltPlan *p);
int alt_plan_check_rows(const AltContext *x, const AltPlan *p, IrError *err);

/* Convert a plan whose stages are single-mesh, tp = 1, no recompute, into
 * hetc's Plan (for plan.json / plan.txt); -1 with err otherwise. */
int alt_plan_to_plan(const AltContext *x, const AltPlan *ap, Plan *out, IrError *err);

/* GPipe over stages that share devices (group > 0): each group computes
 * its ministages' forwards (ministage by ministage, every microbatch), then
 * the backwards in reverse; a transfer takes c_next and links do not
 * contend; with offload a ministage's weights come over the group's PCIe
 * link (t_load_f / t_load_b), prefetched at most one ministage ahead; each
 * ministage's gradient sync overlaps the next backward (interleaved
 * optimizer updates), so only the last one shows.  Returns the iteration
 * time. */
double alt_sim_grouped(const AltPlan *p);

/* One line per stage + totals. */
void alt_plan_print(FILE *f, const AltContext *x, const AltPlan *p);

/* ---------------------------------------------------------------- planners */

/* Names: the PLANNER_LAYERS rows of planners.def ("uniform", "coarse",
 * "coarse-blocks" (HAPT's DP over whole blocks: HexiScale's granularity),
 * "heteroauto", "metis", "metis-mem", "zorse", "autohet").  Each returns 0
 * with *out filled (and evaluated), or -1 with err saying "no feasible
 * plan: <binding constraint>" or what was wrong. */
int alt_plan_run(const char *name, const AltContext *x, AltPlan *out, IrError *err);
int alt_planner_known(const char *name);        /* a PLANNER_LAYERS row */
extern const char *const alt_planner_names[];   /* those rows' names, NULL-terminated */

int alt_plan_uniform(const AltContext *x, AltPlan *out, IrError *err);
int alt_plan_coarse(const AltContext *x, AltPlan *out, IrError *err);
int alt_plan_heteroauto(const AltContext *x, AltPlan *out, IrError *err);
int alt_plan_metis(const AltContext *x, int memory_aware, AltPlan *out, IrError *err);
/* The table's entries for "coarse-blocks", "metis" and "metis-mem". */
int alt_plan_coarse_blocks(const AltContext *x, AltPlan *out, IrError *err);
int alt_plan_metis_plain(const AltContext *x, AltPlan *out, IrError *err);
int alt_plan_metis_mem(const AltContext *x, AltPlan *out, IrError *err);
int alt_plan_zorse(const AltContext *x, AltPlan *out, IrError *err);
int alt_plan_autohet(const AltContext *x, AltPlan *out, IrError *err);

/* Block-granular view (the seed papers plan whole transformer layers, and
 * their cost models cannot see that cutting inside a block moves a 3-4x
 * wider tensor): layers merged into the repeated blocks found by
 * alt_context_default (layers outside them stay as they are).  *bx gets a
 * context over the merged layers (*merged, free it), first[q] the first fine
 * layer of merged layer q (q = 0..nb, first[nb] = L + 1; free it).  Returns
 * 0, or -1 when there are no blocks (then nothing is allocated). */
int alt_block_view(const AltContext *x, AltContext *bx, PlanLayer **merged, int **first);
/* 1 when fine layer l starts a block-view layer (what recompute keeps). */
int alt_segment_start(const AltContext *x, int l);

/* Small helpers shared by the planners. */
double alt_now(void);
/* Layers 1..L split into S contiguous stages with counts cnt[0..S-1]
 * (sum L): writes first/last layer of every stage. */
void alt_assign_layers(AltPlan *p, const int *cnt);
/* Single-part stage on `devices` of mesh. */
void alt_stage_single(AltStage *s, int mesh, int devices, int dp, int tp, int recompute);

#endif
