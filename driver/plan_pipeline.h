/* hetc plan as named steps over one context (docs/ARCHITECTURE.md):
 *   import -> passes -> modules -> layers -> profile -> plan (search)
 *   -> schedule (simulate) -> stage ids -> outputs.
 * hetc compile runs the same steps on the options it parsed, and keeps the
 * planner's graph (layer ids on its nodes) for the stage graphs. */
#ifndef HETC_PLAN_PIPELINE_H
#define HETC_PLAN_PIPELINE_H

#include "cost_model.h"
#include "layers.h"
#include "modules.h"
#include "plan_args.h"
#include "plan_output.h"
#include "plan_search.h"
#include "planners.h"
#include "simulate.h"

typedef struct PlanCtx {
    PlanArgs *a;
    const char *who;       /* "hetc plan" / "hetc compile": error prefix */
    int layers_only;       /* hetc compile --plan FILE: import..layers, quietly */
    const char *out;       /* output directory */
    char irdir[4096];
    int B;                 /* microbatches per step, G / b */
    int tty, dp_progress;  /* the profile's live line; plan_run_dp's mode */
    ClusterSpec cl;        /* cl.dtype: the dtype planned (fp32 under --precision fp32) */
    char cluster_dtype[8]; /* the cluster file's dtype (its device-speed key) */
    ProfileDb pdb;
    PassContext pctx;
    /* import .. layers: the planner's graph, its layers */
    IrGraph *g;
    int64_t fixed_batch;   /* the model's fixed batch, or -1 */
    ModuleReport mrep;
    LayerOptions lo;
    LayerSummary ls;
    PlanLayer *layers;
    const PlannerDef *pd;  /* the planner's row (planners.def) */
    /* profile .. outputs */
    LayerIntra *intra;
    LayerArena **arena[ARENA_TPB]; /* (issue 17) arena[b][dp]: measured arenas (plan_arena.h) */
    int arena_maxdp;
    IrGraph **arena_g;     /* arena_g[dp]: the forward + loss graph it was measured on */
    CostOptions cop;
    CostModel *cm;
    CostCounters cc;
    int retried, inflight;
    DpJob *job;
    Plan plan;
    double *sync;
    SimResult sim;
    double t0, t_imp, t_pass, t_lay, t_prof, t_dp, t_sim;
    double t_arena;        /* of t_prof: the per-layer arenas (plan_arena_build) */
    int quiet;             /* a microbatch search candidate: one line per candidate
                              (2: not even the import's parameter count) */
    PlanMbCandidate *mb_cands; /* the microbatch search's sizes (owned), for the outputs */
    int mb_ncand;
    IrError err;
} PlanCtx;

/* a: parsed and plan_args_finish'ed; who: the error prefix. */
void plan_ctx_init(PlanCtx *pc, PlanArgs *a, const char *who);
/* Every step in order; 0, or the command's exit status (said on stderr). */
int plan_pipeline_run(PlanCtx *pc);
/* The steps hetc compile --plan FILE needs for layer ids: import, passes,
 * modules, layers (with the cluster's dtype). */
int plan_pipeline_layers(PlanCtx *pc);
void plan_ctx_free(PlanCtx *pc);
/* The steps, one line each (hetc --list-passes). */
void plan_pipeline_list(FILE *f);

#endif
