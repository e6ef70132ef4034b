/* hetc plan's steps (plan_pipeline.h): each reads what the steps before
 * it left in the PlanCtx and leaves its own result there.
 *
 * Batch handling: the import binds the batch dim to the microbatch b and the
 * sequence dim to --seq, so every layer figure is per microbatch; the DP
 * runs B = G / b microbatches.  A stage with dp ranks splits the microbatch
 * over them (cost_model.c divides FLOPs and activations by dp).
 */
#include "plan_pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_plan_alt.h"
#include "plan_arena.h"
#include "plan_output.h"
#include "planner/zero_memory.h"
#include "planners.h"

#define GIB 1073741824.0
#define RETRY 3 /* step_search: profile again with relaxed options */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int fail(PlanCtx *pc, const char *msg)
{
    fprintf(stderr, "%s: %s\n", pc->who, msg);
    return 1;
}

void plan_ctx_init(PlanCtx *pc, PlanArgs *a, const char *who)
{
    memset(pc, 0, sizeof *pc);
    pc->a = a;
    pc->who = who;
    pc->fixed_batch = -1;
    pc->inflight = 1; /* K the intra-op choice sizes memory for (raised when memory binds) */
    pc->B = plan_args_microbatches(a);
    pc->tty = isatty(2) || a->progress;                          /* the profile's live line */
    pc->dp_progress = a->progress < 0 ? 0 : pc->tty ? 1 : 2;     /* plan_run_dp */
    if (a->progress < 0)
        pc->tty = 0;
    pc->out = a->co.out_dir ? a->co.out_dir : "build";
    snprintf(pc->irdir, sizeof pc->irdir, "%s/ir", pc->out);
    pc->t0 = now_s();
}

/* cluster, profile database, output folders, the pass context */
static int step_setup(PlanCtx *pc)
{
    PlanArgs *a = pc->a;
    if (cluster_load_yaml(a->cluster, &pc->cl, &pc->err))
        return fail(pc, pc->err.msg);
    /* --precision (precision.h): the cluster file's dtype picks the devices'
     * 16-bit peak; the training precision decides what is planned.  fp32,
     * what the stage binaries run, plans 4-byte weights, gradients, moments
     * and activations at the fp32 peak, so the predicted memory is the
     * arena (docs/PLANNER.md "Precision"); cluster-dtype keeps the file's. */
    snprintf(pc->cluster_dtype, sizeof pc->cluster_dtype, "%s", pc->cl.dtype);
    if (a->grad_reduce_bf16 && a->precision != PRECISION_BF16_MIXED)
        return fail(pc, "--grad-reduce-dtype bf16 needs --precision bf16-mixed (an fp32 run "
                        "reduces its fp32 gradients in fp32)");
    if (a->tp_reduce_bf16 && a->precision != PRECISION_BF16_MIXED)
        return fail(pc, "--tp-reduce-dtype bf16 needs --precision bf16-mixed (an fp32 run "
                        "sums its fp32 activations in fp32)");
    if (a->precision == PRECISION_FP32 || a->precision == PRECISION_BF16_MIXED)
        snprintf(pc->cl.dtype, sizeof pc->cl.dtype, "fp32");
    if (!pc->layers_only && pc->quiet < 2 && strcmp(pc->cluster_dtype, pc->cl.dtype))
        fprintf(stderr, "%s: precision %s: planning %s (the cluster file's dtype %s is not "
                "used; --precision cluster-dtype plans it, as a what-if no stage binary runs)\n",
                pc->who, precision_name(a->precision),
                a->precision == PRECISION_BF16_MIXED ? "fp32 with bf16 Linears" : "fp32",
                pc->cluster_dtype);
    if (!pc->layers_only && a->profile_db &&
        profile_db_load(a->profile_db, (int)a->co.batch, a->co.seq > 0 ? (int)a->co.seq : 0,
                        pc->cl.dtype, &pc->pdb, &pc->err)) {
        fprintf(stderr, "%s: profile database: %s\n", pc->who, pc->err.msg);
        return 1;
    }
    pass_context_default(&pc->pctx);
    pc->pctx.verbose = a->co.verbose;
    if (pc->layers_only)
        return 0;
    pc->job = calloc(1, sizeof *pc->job);
    if (!pc->job)
        return fail(pc, "out of memory");
    if (cli_mkdirs(pc->out, &pc->err) || (a->co.dump_after && cli_mkdirs(pc->irdir, &pc->err)))
        return fail(pc, pc->err.msg);
    pc->pctx.dump_after = a->co.dump_after;
    pc->pctx.dump_dir = pc->irdir;
    return 0;
}

/* 1. import at the microbatch rows (and --seq) */
static int step_import(PlanCtx *pc)
{
    PlanArgs *a = pc->a;
    double t = now_s();
    a->co.report_params = pc->quiet < 2; /* once in a microbatch search */
    pc->g = compile_import(&a->co, NULL, 0, 0, &pc->pctx, &pc->err);
    if (!pc->g || (!pc->layers_only &&
                   compile_check_token_shape(pc->g, &a->co, "--microbatch", &pc->err)))
        return fail(pc, pc->err.msg);
    /* A fixed-batch model runs its microbatch whole on every rank: the
     * stage binaries (--dp-divides-microbatch) can only run it at dp 1. */
    if (a->dp_divides && compile_fixed_batch(&a->co, &pc->fixed_batch, &pc->err))
        return fail(pc, pc->err.msg);
    if (pc->fixed_batch > 0 && !pc->quiet)
        fprintf(stderr, "hetc plan: %s has a fixed batch of %lld rows: every stage gets dp 1 "
                "(to use data parallelism, " COMPILE_REEXPORT_HINT ")\n",
                a->co.model, (long long)pc->fixed_batch);
    pc->t_imp = now_s() - t;
    return 0;
}

/* 2. the forward passes */
static int step_passes(PlanCtx *pc)
{
    double t = now_s();
    if (compile_run_passes(pc->g, &pc->a->co, &pc->pctx, &pc->err))
        return fail(pc, pc->err.msg);
    pc->t_pass = now_s() - t;
    return 0;
}

/* 3. repeated modules (module ids on nodes) */
static int step_modules(PlanCtx *pc)
{
    pc->t_lay = now_s();
    ModuleOptions mo;
    module_options_default(&mo);
    mo.min_heavy = (int)pc->a->min_heavy;
    if (modules_detect(pc->g, &mo, &pc->mrep, &pc->err) ||
        pass_maybe_dump(pc->g, "modules", &pc->pctx, &pc->err))
        return fail(pc, pc->err.msg);
    pc->pctx.dump_index++;
    if (!pc->layers_only && !pc->quiet)
        module_report_print(stderr, &pc->mrep, pc->g);
    return 0;
}

static void layers_report(const PlanCtx *pc);
static void profile_report(const PlanCtx *pc);
static void search_report(const PlanCtx *pc);

/* 4. fine-grained layers (layer ids on nodes) */
static int step_layers(PlanCtx *pc)
{
    PlanArgs *a = pc->a;
    layer_options_default(&pc->lo);
    pc->lo.target_layers = (int)a->layers;
    pc->lo.param_dtype_bytes = dtype_size_bytes(pc->cl.dtype);
    LayerSummary *ls = &pc->ls;
    if (layers_build(pc->g, &pc->lo, &pc->layers, ls, &pc->err) ||
        pass_maybe_dump(pc->g, "layers", &pc->pctx, &pc->err))
        return fail(pc, pc->err.msg);
    pc->pctx.dump_index++;
    pc->t_lay = now_s() - pc->t_lay;
    if (pc->layers_only || pc->quiet)
        return 0;
    layers_report(pc);
    return 0;
}

/* the layers line (also the microbatch search's winner's, after it) */
static void layers_report(const PlanCtx *pc)
{
    const PlanArgs *a = pc->a;
    const LayerSummary *ls = &pc->ls;
    char per[64];
    if (ls->per_module < 0)
        snprintf(per, sizeof per, "%d modules per layer", -ls->per_module);
    else
        snprintf(per, sizeof per, "%d per module", ls->per_module);
    fprintf(stderr, "layers: %d (%s x %d modules, %d outside; <= %d heavy ops per "
            "layer); per microbatch of %lld x %lld tokens: %.3g fwd + %.3g bwd FLOP, %.3g GB "
            "parameters (%s)\n", ls->L, per, ls->modules, ls->outside_layers,
            ls->heavy_bound, (long long)a->co.batch, (long long)(a->co.seq > 0 ? a->co.seq : 0),
            ls->total_fwd_flops, ls->total_bwd_flops, ls->total_param_bytes / 1e9, pc->cl.dtype);
}

/* The cost options of this round (intra-op plans sized for pc->inflight). */
static int profile_options(PlanCtx *pc)
{
    PlanArgs *a = pc->a;
    CostOptions *cop = &pc->cop;
    cost_options_default(cop);
    cop->efficiency = a->efficiency;
    /* bf16-mixed (issue 17): the Linears the mixed-precision pass casts run
     * at each device's bf16 peak, the rest at fp32's (cm_flops_time) */
    cop->bf16_gemm = a->precision == PRECISION_BF16_MIXED;
    cop->grad_reduce_bf16 = a->grad_reduce_bf16; /* the bf16 wire: half the bytes */
    cop->tp_reduce_bf16 = a->tp_reduce_bf16;     /* the same for the TP sums */
    if (!a->no_intra) {
        if (!pc->intra) {
            pc->intra = calloc((size_t)pc->ls.L, sizeof *pc->intra);
            if (!pc->intra ||
                layer_intra_from_ir(pc->g, pc->layers, pc->ls.L, pc->intra, &pc->err))
                return fail(pc, pc->intra ? pc->err.msg : "out of memory");
        }
        cop->intra = pc->intra;
        cop->max_tp = (int)a->max_tp;
        cop->zero_stage = a->zero;
        cop->recompute = a->recompute;
        cop->inflight = pc->inflight;
    }
    if (a->dp_divides)
        cop->dp_divides = pc->fixed_batch > 0 ? 1 : a->co.batch; /* 1: only dp 1 divides it */
    /* A stage's DP ranks split the rows of one microbatch (HAPT's pipeline
     * microbatch is --microbatch rows): a dp above them leaves a rank
     * without a row, which no stage binary runs (issue 18) */
    cop->dp_max_rows = pc->fixed_batch > 0 ? 1 : a->co.batch;
    if (a->imbalance >= 0)
        cop->imbalance_threshold = a->imbalance;
    if (a->profile_db)
        cop->db = &pc->pdb;
    /* (issue 17) the precision a stage binary runs: memory from the arena
     * its memory plan gives every layer (plan_arena.h), measured once */
    if (a->precision != PRECISION_CLUSTER_DTYPE && !pc->arena[0]) {
        double t = now_s();
        int maxdp = 1;
        for (int m = 0; m < pc->cl.nmeshes; m++)
            if (pc->cl.meshes[m].nodes * pc->cl.meshes[m].per_node > maxdp)
                maxdp = pc->cl.meshes[m].nodes * pc->cl.meshes[m].per_node;
        if (plan_arena_build(pc, maxdp, &pc->err))
            return fail(pc, pc->err.msg);
        pc->t_arena = now_s() - t;
    }
    for (int b = 0; b < ARENA_TPB; b++)
        cop->arena[b] = (const LayerArena *const *)pc->arena[b];
    cop->arena_maxdp = pc->arena_maxdp;
    if (pc->retried)
        cop->imbalance_threshold = 0;
    return 0;
}

/* 5. profile: every layer range on every candidate submesh */
static int step_profile(PlanCtx *pc)
{
    PlanArgs *a = pc->a;
    double t = now_s();
    if (profile_options(pc))
        return 1;
    cost_model_free(pc->cm);
    pc->cm = cost_model_new(&pc->cl, pc->layers, pc->ls.L, &pc->cop, &pc->err);
    if (!pc->cm)
        return fail(pc, pc->err.msg);
    ShapeKeep sk = {&pc->cl, (int)a->max_groups};
    if (hapt_dp_units(&pc->cl, sk.max_groups) < cluster_total_devices(&pc->cl)
            ? cost_model_profile_shapes(pc->cm, plan_keep_shape, &sk, plan_progress_profile,
                                        &pc->tty)
            : cost_model_profile_all(pc->cm, plan_progress_profile, &pc->tty))
        return fail(pc, "profile: out of memory");
    if (pc->tty)
        fputc('\n', stderr);
    pc->t_prof += now_s() - t;
    pc->cc = cost_model_counters(pc->cm);
    if (!pc->quiet)
        profile_report(pc);
    if (a->write_profile_db && !pc->retried) {
        if (cost_model_write_profile_db(pc->cm, a->write_profile_db, (int)a->co.batch,
                                        a->co.seq > 0 ? (int)a->co.seq : 0, &pc->err))
            return fail(pc, pc->err.msg);
        fprintf(stderr, "wrote %s (analytic per-layer figures)\n", a->write_profile_db);
    }
    return 0;
}

/* the profile's counters line (also the microbatch search's winner's) */
static void profile_report(const PlanCtx *pc)
{
    char line[512];
    cost_counters_summary(&pc->cc, line, sizeof line);
    /* model states per parameter as the cost model counts them: its ZeRO
     * stage (auto: 0 here) in the cluster's dtype, at dp 1 (ZeRO shares
     * them further over a stage's DP ranks) */
    int z = pc->cop.zero_stage > 0 ? pc->cop.zero_stage : 0;
    fprintf(stderr, "%s (imbalance threshold %g%s; memory: %g B/parameter%s + runtime reserve + "
            "activations, K = 1)\n", line, pc->cop.imbalance_threshold,
            pc->cop.imbalance_threshold > 0 ? "" : " = off",
            zero_state_bytes_per_param(pc->lo.param_dtype_bytes, z, 1),
            z ? " at dp 1, less under ZeRO over a stage's DP ranks" : "");
    if (pc->a->profile_db) {
        cost_counters_db_summary(&pc->cc, &pc->pdb, line, sizeof line);
        fprintf(stderr, "%s\n", line);
    }
}

/* The DP's cap on pipeline stages (0: none): --max-stages, or what keeps
 * the DP table under 16M states per thread. */
static int stage_cap(const PlanCtx *pc)
{
    const PlanArgs *a = pc->a;
    if (a->max_stages > 0)
        return (int)a->max_stages;
    int D = hapt_dp_units(&pc->cl, (int)a->max_groups); /* the DP's device dimension */
    /* the DP table holds (L + 2) x D x (S + 1) states per thread */
    long cap = (16L << 20) / ((long)(pc->ls.L + 2) * D) - 1;
    int smax = pc->ls.L < D ? pc->ls.L : D;
    if (cap < smax)
        return cap < pc->cl.nmeshes ? pc->cl.nmeshes : (int)cap;
    return 0;
}

/* The DP's options: microbatches, threads, the stage cap, the time left. */
static void search_options(PlanCtx *pc, DpJob *job)
{
    PlanArgs *a = pc->a;
    memset(job, 0, sizeof *job);
    job->c = &pc->cl;
    job->L = pc->ls.L;
    job->search = pc->pd->oracle;
    job->o = cost_model_oracle(pc->cm);
    dp_options_default(&job->opt);
    job->opt.microbatches = pc->B;
    job->opt.eps = a->eps;
    job->opt.schedule = (ScheduleKind)a->schedule;
    job->opt.tmax_comm_candidates = 1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    job->opt.threads = a->threads > 0 ? (int)a->threads : (int)(ncpu > 0 ? (ncpu > 16 ? 16 : ncpu) : 1);
    /* One t_max per thread per batch: a batch is evaluated against the best
     * known before it, so larger batches only run DPs a finished one would
     * have pruned (the result does not depend on it). */
    job->opt.batch = job->opt.threads;
    job->opt.max_stages = stage_cap(pc);
    /* the limit covers the whole command: what import, layers and profile
     * took is gone from the search's share (at least 1 ms is left: the
     * search then returns its fallback plan at once) */
    if (a->time_limit > 0) {
        double left = a->time_limit - (now_s() - pc->t0);
        job->opt.time_limit = left > 1e-3 ? left : 1e-3;
    }
    job->opt.max_groups = (int)a->max_groups;
}

/* No plan: retry with relaxed options (RETRY), or say why and fail. */
static int search_failed(PlanCtx *pc)
{
    PlanArgs *a = pc->a;
    DpJob *job = pc->job;
    if (!pc->retried && pc->cop.imbalance_threshold > 0) {
        if (!pc->quiet)
            fprintf(stderr, "search: %s\nsearch: retrying with imbalance pruning off (a pruned "
                    "candidate may be the only one a slow link allows)\n", job->err.msg);
        pc->retried = 1;
        return RETRY;
    }
    if (!a->no_intra && pc->inflight < pc->B) {
        /* memory bound the search: let the intra-op choice size each
         * stage for more microbatches in flight (TP, ZeRO, recompute) */
        pc->inflight = pc->inflight * 4 < pc->B ? pc->inflight * 4 : pc->B;
        if (!pc->quiet)
            fprintf(stderr, "search: %s\nsearch: retrying with intra-op plans sized for K = %d "
                "microbatches in flight\n", job->err.msg, pc->inflight);
        return RETRY;
    }
    if (pc->quiet) /* the candidate's line says it; the pinned run explains */
        return 1;
    plan_explain_memory(pc->cm, &pc->cl, pc->layers, pc->ls.L);
    fprintf(stderr, "hetc plan: no feasible plan: %s\n", job->err.msg);
    CostCounters cc = cost_model_counters(pc->cm);
    if (cc.pruned_rows > 0)
        fprintf(stderr, "hetc plan: no feasible plan: binding constraint: rows: %ld of %ld stage "
                "candidates are "
                "infeasible because every dp x tp split of their submesh has a dp above the %lld "
                "rows of a microbatch (a DP rank without a row: no stage binary runs it), and "
                "every device must hold a stage: give --microbatch at least the largest DP degree "
                "a mesh needs, or allow more TP (--max-tp)\n", cc.pruned_rows, cc.costed,
                (long long)pc->cop.dp_max_rows);
    double act = 0, cap = 0;
    for (int l = 0; l < pc->ls.L; l++)
        act += pc->layers[l].act_bytes;
    for (int m = 0; m < pc->cl.nmeshes; m++)
        cap += pc->cl.meshes[m].dev.mem_bytes * pc->cl.meshes[m].nodes * pc->cl.meshes[m].per_node;
    /* model states per parameter without ZeRO (every replica holds them),
     * in the cluster's dtype: zero_memory.h */
    double states = zero_state_bytes_per_param(pc->lo.param_dtype_bytes, 0, 1);
    fprintf(stderr, "hetc plan: binding constraint: memory (Eq. 24) is the usual one here: the "
            "model's weights, gradients and optimizer states take %.1f GiB once (%g B per "
            "parameter) and every DP replica holds its stage's share again; one microbatch of "
            "saved activations takes %.1f GiB and a stage keeps K_i of them in flight; the "
            "cluster has %.1f GiB in all.  Intra-op plans (TP, ZeRO, recompute) were %s: "
            "try a smaller --microbatch, more --layers, or --schedule 1f1b (smaller K_i)\n",
            pc->ls.total_param_bytes / pc->lo.param_dtype_bytes * states / GIB, states,
            act / GIB, cap / GIB,
            a->no_intra ? "off (--no-intra-op)" : "tried");
    return 1;
}

/* 6. plan: the HAPT DP over every mesh order (Eq. 13-24) */
static int step_search(PlanCtx *pc)
{
    DpJob *job = pc->job;
    double t = now_s();
    search_options(pc, job);
    int dprc = plan_run_dp(job, pc->dp_progress);
    pc->t_dp += now_s() - t;
    if (dprc)
        return search_failed(pc);
    pc->plan = job->plan;
    memset(&job->plan, 0, sizeof job->plan);
    if (!pc->quiet)
        search_report(pc);
    return 0;
}

/* the search's counters (also the microbatch search's winner's) */
static void search_report(const PlanCtx *pc)
{
    const DpJob *job = pc->job;
    const DpStats *st = &job->stats;
    fprintf(stderr, "search: %ld mesh orders, %ld t_max candidates: %ld full DPs, pruned %ld low + "
            "%ld high + %ld by bound; %ld transitions; %.3f s (+ %.3f s tabulating, %d threads%s)\n",
            st->orders, st->tmax_candidates, st->tmax_evaluated, st->tmax_pruned_low,
            st->tmax_pruned_high, st->tmax_pruned_bound, st->transitions, st->seconds,
            st->seconds_tabulate, job->opt.threads,
            job->opt.max_stages ? ", stages capped" : "");
    if (pc->plan.coarse_meshes)
        fprintf(stderr, "search: heuristic: %d mesh(es) searched in node groups (whole groups "
                "only, no sub-node stages there; %s)\n", pc->plan.coarse_meshes,
                pc->plan.time_limited && pc->a->max_groups == 0
                    ? "the time limit's fallback search"
                    : "--max-node-groups 0 searches every shape");
    if (pc->plan.time_limited)
        fprintf(stderr, "search: stopped by --time-limit %g s: this is the best plan found so far, "
                "not proven optimal\n", pc->a->time_limit);
}

/* 7. schedule: simulate the plan's iteration under its schedule */
static int step_simulate(PlanCtx *pc)
{
    double t = now_s();
    Plan *plan = &pc->plan;
    pc->sync = calloc((size_t)plan->nstages, sizeof *pc->sync);
    if (!pc->sync)
        return fail(pc, "out of memory");
    for (int s = 0; s < plan->nstages; s++) {
        StageCost sc;
        const PlanStage *ps = &plan->stages[s];
        if (cost_model_stage(pc->cm, ps->first_layer, ps->last_layer, ps->mesh, ps->sub, &sc) == 0 &&
            isfinite(sc.t_sync))
            pc->sync[s] = sc.t_sync;
    }
    if (simulate_plan(plan, pc->sync, &pc->sim, &pc->err))
        return fail(pc, pc->err.msg);
    pc->t_sim = now_s() - t;
    return 0;
}

/* 8. stage ids on the planner graph's nodes (--dump-ir-after=plan) */
static int step_stage_ids(PlanCtx *pc)
{
    const Plan *plan = &pc->plan;
    IrGraph *g = pc->g;
    for (int s = 0; s < plan->nstages; s++)
        for (int l = plan->stages[s].first_layer; l <= plan->stages[s].last_layer; l++)
            for (int q = pc->layers[l - 1].first_node; q <= pc->layers[l - 1].last_node; q++)
                if (!g->nodes[q]->dead && g->nodes[q]->layer_id == l)
                    g->nodes[q]->stage_id = s;
    if (pass_maybe_dump(g, "plan", &pc->pctx, &pc->err))
        return fail(pc, pc->err.msg);
    return 0;
}

/* 9. plan.json, plan.txt, timeline.*; plan.txt on stdout; the times */
static int step_outputs(PlanCtx *pc)
{
    PlanArgs *a = pc->a;
    PlanOutputInfo info;
    memset(&info, 0, sizeof info);
    info.model = a->co.model;
    info.global_batch = a->global_batch;
    info.seq = a->co.seq > 0 ? a->co.seq : 0;
    info.counters = &pc->cc;
    info.mb_cands = pc->mb_cands;
    info.mb_ncand = pc->mb_ncand;
    info.precision = precision_planned(a->precision, pc->cl.dtype);
    info.cluster_dtype = pc->cluster_dtype;
    info.grad_reduce_bf16 = a->grad_reduce_bf16;
    info.tp_reduce_bf16 = a->tp_reduce_bf16;
    info.reserve_bytes = pc->cop.runtime_reserve_bytes;
    info.has_reserve = 1;
    if (plan_write_outputs(pc->out, &pc->plan, &pc->cl, &info, pc->sim.events, pc->sim.nevents,
                           &pc->err))
        return fail(pc, pc->err.msg);
    char path[4200];
    snprintf(path, sizeof path, "%s/plan.txt", pc->out);
    FILE *f = fopen(path, "r");
    if (f) {
        char buf[4096];
        size_t nr;
        while ((nr = fread(buf, 1, sizeof buf, f)) > 0)
            fwrite(buf, 1, nr, stdout);
        fclose(f);
    }
    fprintf(stderr, "simulated iteration %.4f s (%d stages, B = %d, %s), bubbles:",
            pc->sim.iter_time, pc->plan.nstages, pc->B, schedule_name(pc->plan.schedule));
    for (int s = 0; s < pc->sim.nstages; s++)
        fprintf(stderr, " %.1f%%", 100 * pc->sim.bubble[s]);
    /* "layer arenas" is part of "profile" (the bench scripts parse
     * "profile X s, search Y s") */
    fprintf(stderr, "\ntime: import %.3f s, passes %.3f s, modules+layers %.3f s, layer arenas "
            "%.3f s, profile %.3f s, search %.3f s, simulate %.3f s, total %.3f s\nwrote "
            "%s/plan.json, plan.txt, timeline.json, timeline.svg\n", pc->t_imp, pc->t_pass,
            pc->t_lay, pc->t_arena, pc->t_prof, pc->t_dp, pc->t_sim, now_s() - pc->t0, pc->out);
    return 0;
}

/* --baseline-equal: the same stages with equal layer counts */
static void step_baseline(PlanCtx *pc)
{
    /* The baseline is costed without imbalance pruning: an equal split
     * may well give a slow mesh more than T times its share. */
    int fits = 0;
    double obj = INFINITY;
    CostOptions c0 = pc->cop;
    c0.imbalance_threshold = 0;
    CostModel *cm0 = cost_model_new(&pc->cl, pc->layers, pc->ls.L, &c0, &pc->err);
    double tb = cm0 ? plan_baseline_equal(&pc->plan, cm0, &pc->cl, pc->ls.L, &fits, &obj, &pc->err)
                    : INFINITY;
    cost_model_free(cm0);
    if (isfinite(tb))
        fprintf(stderr, "baseline (equal layers per stage, same stages and submeshes): "
                "iteration %.4f s%s, Eq. 13 %.4f s (HAPT: %.4f s simulated, %.4f s Eq. 13); "
                "HAPT / baseline throughput %.3f\n", tb,
                fits ? "" : " (exceeds device memory)", obj, pc->sim.iter_time, pc->plan.objective,
                tb / pc->sim.iter_time);
    else
        fprintf(stderr, "baseline (equal layers per stage): cannot be built (%s)\n",
                pc->err.msg[0] ? pc->err.msg : "more stages than layers");
}

int plan_pipeline_layers(PlanCtx *pc)
{
    if (step_setup(pc) || step_import(pc) || step_passes(pc) || step_modules(pc) ||
        step_layers(pc))
        return 1;
    return 0;
}

/* profile + search, again with relaxed options while they ask (RETRY) */
static int profile_and_search(PlanCtx *pc)
{
    int rc;
    do {
        if (step_profile(pc))
            return 1;
        rc = step_search(pc);
    } while (rc == RETRY);
    return rc;
}

/* The microbatch sizes searched for a global batch G: every power of two
 * that divides G, and G itself (B = 1).  Ascending; at most 64. */
static int mb_candidates(long G, long *out)
{
    int n = 0;
    for (long b = 1; b <= G && n < 63; b *= 2)
        if (G % b == 0)
            out[n++] = b;
    if (out[n - 1] != G)
        out[n++] = G;
    return n;
}

/* A size no plan can have, known before profiling: every device must hold
 * a stage (Eq. 22 ends at all of every mesh's devices), a stage lies on one
 * mesh and has dp <= b ranks (a DP rank needs a row) of tp <= min(--max-tp,
 * devices per node) devices, so mesh m needs ceil(D_m / (b tp_m)) stages,
 * and the DP allows at most min(L, the stage cap).  Saying so here saves
 * the profile and the failed searches (with their retries) of such b: at
 * paper scale they dominate the search (H2's 1,024 chips at b = 1).  Only
 * skips what the search itself would find infeasible. */
static int mb_rows_hopeless(const PlanCtx *s, long b, char *why, size_t nwhy)
{
    const PlanArgs *a = s->a;
    long rows = s->fixed_batch > 0 ? 1 : b, need = 0;
    for (int m = 0; m < s->cl.nmeshes; m++) {
        const MeshSpec *ms = &s->cl.meshes[m];
        long tp = a->no_intra ? 1 : (ms->per_node < a->max_tp ? ms->per_node : a->max_tp);
        long per = rows * (tp > 0 ? tp : 1), dm = (long)ms->nodes * ms->per_node;
        need += (dm + per - 1) / per;
    }
    long cap = stage_cap(s);
    long smax = cap > 0 && cap < s->ls.L ? cap : s->ls.L;
    if (need <= smax)
        return 0;
    snprintf(why, nwhy, "the meshes need at least %ld stages to use every device (a stage on "
             "one mesh, of at most %ld DP rank(s) x the TP a node allows) and at most %ld are "
             "allowed (layers%s); not profiled", need, rows, smax,
             cap > 0 && cap < s->ls.L ? ", stage cap" : "");
    return 1;
}

/* One candidate: import .. search at b rows per microbatch, quietly.  The
 * context (heap, with its own copy of the options: pc->a points there) is
 * returned with its plan, or NULL when it has none (why says why). */
static PlanCtx *mb_try(const PlanCtx *outer, long b, int first, char *why, size_t nwhy)
{
    PlanCtx *s = calloc(1, sizeof *s + sizeof(PlanArgs));
    if (!s) {
        snprintf(why, nwhy, "out of memory");
        return NULL;
    }
    PlanArgs *sa = (PlanArgs *)(s + 1);
    *sa = *outer->a;
    sa->co.batch = b;
    sa->mb_search = 0;
    plan_ctx_init(s, sa, outer->who);
    s->quiet = first ? 1 : 2;
    s->tty = 0;
    s->dp_progress = outer->dp_progress;
    s->t0 = outer->t0; /* --time-limit covers the whole command */
    s->pd = outer->pd;
    int rc = plan_pipeline_layers(s);
    if (!rc && mb_rows_hopeless(s, b, why, nwhy)) {
        plan_ctx_free(s);
        free(s);
        return NULL;
    }
    if (!rc)
        rc = profile_and_search(s);
    if (rc) {
        snprintf(why, nwhy, "%s", s->job && s->job->err.msg[0] ? s->job->err.msg
                                  : s->err.msg[0] ? s->err.msg : "see the messages above");
        plan_ctx_free(s);
        free(s);
        return NULL;
    }
    return s;
}

/* The microbatch search.  HAPT fixes the global batch (seed 004 §6: "the
 * global batch size is fixed at 1024") and its objective, Eq. 13 / Eq. 22,
 * is the time of one iteration of B microbatches, B = G / b: both the
 * per-microbatch costs t_i, c_i and the (B - 1) t_max term change with b,
 * and so does which dp a stage may take (a DP rank needs a row: dp <= b).
 * Like Alpa's, which HAPT follows (§5.2.1), the number of microbatches is
 * searched with the partition: the DP of Eq. 13-24 runs once per candidate
 * b, and the plan with the smallest Eq. 13 (time per global batch, the
 * objective a pinned run minimises) wins; ties keep the smaller b.  Each
 * candidate imports, profiles and searches at its own b (the layer costs,
 * activations and the dp <= b rule all depend on it); the model file is
 * read once (co.src).  The winner then runs the remaining steps here and
 * its graph and plan move into pc, so hetc compile binds the stage
 * binaries' batch dim to the chosen rows. */
static int mb_search(PlanCtx *pc)
{
    PlanArgs *a = pc->a;
    long G = (long)a->global_batch, cand[64];
    int n = mb_candidates(G, cand);
    PlanMbCandidate *mc = calloc((size_t)n, sizeof *mc);
    if (!mc)
        return fail(pc, "out of memory");
    fprintf(stderr, "microbatch search: global batch %ld, %d sizes (powers of two dividing it, "
            "and %ld); --microbatch N pins one\n", G, n, G);
    PlanCtx *best = NULL;
    double t_all = now_s();
    for (int i = 0; i < n; i++) {
        double t = now_s();
        char why[512];
        PlanCtx *s = mb_try(pc, cand[i], i == 0, why, sizeof why);
        mc[i].rows = cand[i];
        mc[i].objective = s ? s->plan.objective : INFINITY;
        int better = s && (!best || s->plan.objective < best->plan.objective);
        if (s)
            fprintf(stderr, "microbatch search: %d/%d: %ld rows x B = %ld: Eq. 13 %.6g s, %d "
                    "stages%s (%.2f s)\n", i + 1, n, cand[i], G / cand[i], s->plan.objective,
                    s->plan.nstages, better ? ", best so far" : "", now_s() - t);
        else
            fprintf(stderr, "microbatch search: %d/%d: %ld rows x B = %ld: no plan: %s "
                    "(%.2f s)\n", i + 1, n, cand[i], G / cand[i], why, now_s() - t);
        if (better) {
            if (best) {
                plan_ctx_free(best);
                free(best);
            }
            best = s;
        } else if (s) {
            plan_ctx_free(s);
            free(s);
        }
    }
    if (!best) {
        /* no size has a plan: the pinned run at 1 row says why, in full */
        free(mc);
        fprintf(stderr, "microbatch search: no size has a feasible plan (%.2f s); the smallest, "
                "1 row, again with the reasons:\n", now_s() - t_all);
        a->mb_search = 0;
        a->co.batch = 1;
        pc->B = plan_args_microbatches(a);
        return plan_pipeline_run(pc);
    }
    long b = (long)best->a->co.batch;
    fprintf(stderr, "microbatch search: chose %ld rows x B = %ld (Eq. 13 %.6g s) in %.2f s\n", b,
            G / b, best->plan.objective, now_s() - t_all);
    /* the winner's own steps, with its messages */
    best->quiet = 0;
    layers_report(best);
    profile_report(best);
    search_report(best);
    best->mb_cands = mc;
    best->mb_ncand = n;
    best->t_dp = now_s() - t_all; /* the search time the outputs report: every size */
    int rc = step_simulate(best) || step_stage_ids(best) || step_outputs(best);
    if (!rc && a->baseline_equal)
        step_baseline(best);
    /* move it into pc: the caller keeps the planner's graph (hetc compile's
     * layer ids).  The cost model points at best->cl; it is done with. */
    cost_model_free(best->cm);
    best->cm = NULL;
    a->co.batch = b;
    plan_ctx_free(pc);
    *pc = *best;
    pc->a = a;
    pc->pctx.dump_dir = pc->irdir;
    pc->B = plan_args_microbatches(a);
    free(best);
    return rc;
}

int plan_pipeline_run(PlanCtx *pc)
{
    PlanArgs *a = pc->a;
    pc->pd = planner_find(a->planner ? a->planner : planner_table[0].name);
    if (a->mb_search) {
        /* the seed planners plan at the rows given (1 by default), and a
         * profile database was measured at one microbatch size */
        if (!pc->pd->layers && !a->profile_db && !a->write_profile_db)
            return mb_search(pc);
        fprintf(stderr, "%s: microbatch rows not searched (%s): 1 row per microbatch; "
                "--microbatch N sets them\n", pc->who,
                pc->pd->layers ? "only --planner hapt searches them" : "a profile database is "
                "for one microbatch size");
        a->mb_search = 0;
    }
    if (plan_pipeline_layers(pc))
        return 1;
    if (pc->pd->layers) {
        PlanAltArgs pa = {a->planner, pc->B, a->efficiency, (int)a->threads,
                          (int)a->coarse_layers, pc->out, a->co.model, (long)a->global_batch,
                          a->co.seq > 0 ? (long)a->co.seq : 0, a->autohet_binary,
                          precision_planned(a->precision, pc->cl.dtype), pc->cluster_dtype,
                          a->grad_reduce_bf16, a->tp_reduce_bf16};
        return cmd_plan_alt(&pa, &pc->cl, pc->layers, pc->ls.L);
    }
    int rc = profile_and_search(pc);
    if (rc || step_simulate(pc) || step_stage_ids(pc) || step_outputs(pc))
        return 1;
    if (a->baseline_equal)
        step_baseline(pc);
    return 0;
}

/* The steps in order, for hetc --list-passes (the ones --dump-ir-after
 * names write OUT/ir/NN-<step>.ir after them). */
static const struct {
    const char *name, *summary;
} STEPS[] = {
    {"import", "the model at the microbatch rows and --seq (00-import.ir)"},
    {"passes", "the forward passes: --passes or the default pipeline above"},
    {"modules", "repeated modules: module ids on nodes (dumpable)"},
    {"layers", "fine-grained layers: layer ids on nodes (dumpable)"},
    {"profile", "every layer range on every candidate submesh (cost model, profile db)"},
    {"plan", "the HAPT DP over every mesh order; stage ids on nodes (dumpable)"},
    {"schedule", "the plan's iteration simulated under its schedule"},
    {"outputs", "plan.json, plan.txt, timeline.json, timeline.svg"},
};

void plan_pipeline_list(FILE *f)
{
    fprintf(f, "planner steps (hetc plan, hetc compile; docs/ARCHITECTURE.md):\n");
    for (size_t i = 0; i < sizeof STEPS / sizeof STEPS[0]; i++)
        fprintf(f, "  %-14s %s\n", STEPS[i].name, STEPS[i].summary);
}

void plan_ctx_free(PlanCtx *pc)
{
    if (pc->job)
        plan_free(&pc->job->plan);
    free(pc->job);
    plan_free(&pc->plan);
    sim_result_free(&pc->sim);
    free(pc->sync);
    cost_model_free(pc->cm);
    free(pc->intra);
    plan_arena_free(pc);
    free(pc->layers);
    module_report_free(&pc->mrep);
    ir_graph_free(pc->g);
    cluster_free(&pc->cl);
    profile_db_free(&pc->pdb);
    free(pc->mb_cands);
    pc->mb_cands = NULL;
    pc->g = NULL;
}
