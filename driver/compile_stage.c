/* Per-stage compilation: the stage graphs from the plan (one import per
 * distinct local batch: rows / dp), the initial parameters as a layer-wise
 * checkpoint, then lowering and emission of every stage. */
#include "compile_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "loss.h"
#include "partition.h"
#include "rt.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void compile_args_default(CompileArgs *a) {
    memset(a, 0, sizeof *a);
    a->optimizer = "adamw";
    a->lr_schedule = "constant";
    a->loss = "xent";
    a->lr = 1e-3;
    a->beta1 = 0.9;
    a->beta2 = 0.95;
    a->adam_eps = 1e-8;
    a->weight_decay = 0.1;
    a->momentum = 0.9;
    a->clip = 1.0;
    a->steps = 100;
}

/* The forward + loss graph at `local` rows, node layer ids from the
 * planner's graph (by name; the loss pass's nodes and tie-weights'
 * Transposes are new and get -1: partition places them). */
static IrGraph *stage_graph(const CompileStages *cs, int64_t local, IrError *err) {
    CompileOpts o = *cs->co;
    o.batch = local;
    o.dump_after = NULL;
    o.ibinds.log = NULL; /* the plan's import said what it bound */
    PassContext ctx;
    pass_context_default(&ctx);
    LossOpts lo;
    loss_opts_default(&lo);
    if (loss_opts_parse(&lo, cs->args->loss, err))
        return NULL;
    IrGraph *g = compile_import(&o, NULL, 0, 0, &ctx, err);
    const IrValue *ids = g ? input_binds_token_input(g) : NULL;
    if (ids && ids->shape.rank >= 1 && ids->shape.dims[0] != local) {
        char sb[96];
        ir_errorf(err,
                  "%s has a fixed batch of %lld rows (input '%s' %s), but this stage runs "
                  "%lld rows per DP rank: give every stage dp 1 in the plan (hetc compile "
                  "plans so by itself), or " COMPILE_REEXPORT_HINT,
                  o.model, (long long)ids->shape.dims[0], ids->name,
                  ir_shape_str(&ids->shape, sb, sizeof sb), (long long)local);
        ir_graph_free(g);
        return NULL;
    }
    if (!g || compile_run_passes(g, &o, &ctx, err) ||
        pass_run_pipeline(g, "tie-weights", &ctx, err) || pass_loss_with(g, &lo, err) ||
        pass_run_pipeline(g, "shape-infer", &ctx, err)) {
        ir_graph_free(g);
        return NULL;
    }
    int unmapped = 0;
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        n->layer_id = layer_index_of(cs->layers, n->name);
        unmapped += n->layer_id < 0;
    }
    (void)unmapped;
    /* after the layer ids: each Cast takes its Linear's layer, so the
     * pipeline cuts between layers see the f32 values only */
    if (cs->args->bf16_mixed &&
        pass_run_pipeline(g, cs->args->bf16_sr ? "mixed-precision,stochastic-rounding,shape-infer"
                                               : "mixed-precision,shape-infer", &ctx, err)) {
        ir_graph_free(g);
        return NULL;
    }
    return g;
}

/* DIR/init/step_00000000: every parameter's initial value in the file of
 * its layer (1..L; layer 0 holds the step, as the runtime's own
 * checkpoints do: runtime/stage/stage_ckpt.c), so a stage binary starts
 * exactly as --resume would from step 0.  Values come from the unsharded
 * stage graphs gs[] (partition shards its own copy), so TP-sharded
 * parameters are written whole, as checkpoints store them. */
static int write_init(const CompileStages *cs, PartStage *ps, IrGraph **gs, IrError *err) {
    const CompPlan *p = cs->plan;
    int cap = 0;
    for (int s = 0; s < p->nstages; s++)
        cap += ps[s].nparams;
    RtCkptTensor *t = calloc((size_t)cap + 2, sizeof *t);
    static const int64_t step0 = 0;
    t[0] = (RtCkptTensor){.layer = 0, .name = "step", .dtype = RT_I64, .ndim = 0, .data = &step0};
    int n = 1, rc = 0;
    for (int s = 0; s < p->nstages && !rc; s++)
        for (int k = 0; k < ps[s].nparams && !rc; k++) {
            const PartParam *pp = &ps[s].params[k];
            int dup = 0;
            for (int j = 1; j < n; j++)
                dup |= !strcmp(t[j].name, pp->name);
            if (dup)
                continue;
            IrValue *v = ir_graph_find_value(gs[s], pp->name);
            if (!v || v->kind != IR_VK_PARAM || v->dtype != IR_F32)
                return free(t), ir_errorf(err, "stage %d: parameter '%s' has no f32 initializer",
                                          s, pp->name);
            if (v->shape.rank > RT_CKPT_MAX_DIMS)
                return free(t), ir_errorf(err, "parameter '%s' has rank %d (max %d)", pp->name,
                                          v->shape.rank, RT_CKPT_MAX_DIMS);
            const void *d = ir_value_data(v, err);
            if (!d)
                return free(t), ir_error_prefix(err, "parameter '%s'", pp->name);
            RtCkptTensor *x = &t[n++];
            x->layer = pp->layer;
            x->name = pp->name;
            x->dtype = RT_F32;
            x->ndim = v->shape.rank;
            for (int i = 0; i < v->shape.rank; i++)
                x->shape[i] = v->shape.dims[i];
            x->data = d;
        }
    char dir[4200], msg[512];
    snprintf(dir, sizeof dir, "%s/init", cs->out_dir);
    if (cli_mkdirs(dir, err))
        rc = -1;
    for (int l = 0; l <= cs->nlayers && !rc; l++)
        if (rt_ckpt_write_layer(dir, 0, l, t, n, msg, sizeof msg))
            rc = ir_errorf(err, "initial parameters: %s", msg);
    if (!rc && rt_ckpt_write_manifest(dir, 0, cs->nlayers + 1, msg, sizeof msg))
        rc = ir_errorf(err, "initial parameters: %s", msg);
    free(t);
    return rc;
}

/* Several pipelines, each partitioned on its own (stages numbered from 0
 * in it): into the plan's numbering, one stage after another.  Peers move
 * by the pipeline's first stage; xfer ids by the ids of the pipelines
 * before it, so an id stays plan-wide.  Every parameter is held by one
 * stage of each pipeline (a tied one by several): all are `shared`, so
 * the runtime's cross-stage sum over a parameter's holders (stage_sync.c
 * shared_sum, after each stage's DP sum) is the layer-wise all-reduce of
 * AutoHet's DP groups, and the lowest holder (pipeline 1) writes its
 * checkpoint layer. */
static void pipes_join(const CompPlan *p, PartStage *ps, const StageVariant *var, int nv) {
    int id_off = 0;
    for (int j = 0; j < p->npipes; j++) {
        int f = p->pipe_first[j], top = -1;
        for (int u = 0; u < nv; u++) {
            int s = var[u].stage;
            if (s < f || s >= p->pipe_first[j + 1])
                continue;
            ps[u].stage = s;
            for (int k = 0; k < ps[u].nxfers; k++) {
                PartXfer *x = &ps[u].xfers[k];
                top = x->id > top ? x->id : top;
                x->peer += f;
                x->id += id_off;
            }
            for (int k = 0; k < ps[u].nparams; k++)
                ps[u].params[k].shared = 1;
        }
        id_off += top + 1;
    }
}

int compile_stages(CompileStages *cs, IrError *err) {
    const CompPlan *p = cs->plan;
    int S = p->nstages, rc = -1, nv = S, cap = S;
    int64_t rows = p->prows; /* a pipeline's rows of each microbatch (cs->rows with one) */
    for (int s = 0; s < S; s++)
        cap += p->stages[s].dp;
    /* var[u] for u < S: stage u at DP rank 0's rows; then every other row
     * count of a stage's DP ranks (uneven DP: the runtime's split or the
     * plan's row table), one binary each; a graph is shared by equal row
     * counts */
    StageVariant *var = calloc((size_t)cap, sizeof *var);
    IrGraph **gs = calloc((size_t)cap, sizeof *gs);
    PartStage *ps = calloc((size_t)cap, sizeof *ps);
    int *first = malloc((size_t)S * sizeof *first), *last = malloc((size_t)S * sizeof *last);
    int *dp = malloc((size_t)S * sizeof *dp), *tp = malloc((size_t)S * sizeof *tp);
    PartRecompute *recompute = malloc((size_t)S * sizeof *recompute);
    int *zero = malloc((size_t)S * sizeof *zero);
    for (int s = 0; s < S; s++) {
        zero[s] = p->stages[s].zero;
        first[s] = p->stages[s].first_layer;
        last[s] = p->stages[s].last_layer;
        dp[s] = p->stages[s].dp;
        tp[s] = p->stages[s].tp > 1 ? p->stages[s].tp : 1;
        recompute[s] = (PartRecompute)p->stages[s].recompute;
        var[s].stage = s;
        var[s].rows = comp_plan_rank_rows(p, s, 0);
    }
    for (int s = 0; s < S; s++)
        for (int r = 1; r < dp[s] && rows >= dp[s]; r++) {
            int64_t n = comp_plan_rank_rows(p, s, r);
            int seen = n == var[s].rows;
            for (int u = S; u < nv && !seen; u++)
                seen = var[u].stage == s && var[u].rows == n;
            if (!seen)
                var[nv++] = (StageVariant){.stage = s, .rows = n};
        }
    for (int u = 0; u < nv; u++)
        comp_plan_binary_suffix(p, var[u].stage, var[u].rows, var[u].suffix,
                                sizeof var[u].suffix);
    PartSpec spec;
    memset(&spec, 0, sizeof spec);
    spec.nstages = S;
    spec.first_layer = first;
    spec.last_layer = last;
    spec.dp = dp;
    spec.rows = rows;
    /* the loss scale over the whole microbatch: each pipeline's last stage
     * scales by its rows of all pipelines' (partition.h loss_rows), so the
     * plain sums over pipelines stay the uniform batch's mean */
    spec.loss_rows = cs->rows;
    spec.recompute = recompute;
    spec.zero = zero; /* optimizer-state sharding in the DP group (passes/partition.h) */
    /* Tensor parallelism: TP rank 0's graphs.  Every TP rank's graphs have
     * the same structure (only parameter slices differ, and the runtime
     * slices those from the unsharded checkpoint by its tp_rank), so one
     * binary per stage serves all its TP ranks (docs/STAGE_ABI.md). */
    spec.tp = tp;
    spec.tp_rank = 0;
    optim_opts_default(&spec.optim);
    spec.optim.sgd = !strcmp(cs->args->optimizer, "sgd");
    spec.optim.beta1 = cs->args->beta1;
    spec.optim.beta2 = cs->args->beta2;
    spec.optim.eps = cs->args->adam_eps;
    spec.optim.weight_decay = cs->args->weight_decay;
    spec.optim.momentum = cs->args->momentum;
    spec.optim.clip = cs->args->clip;

    double t = now_s();
    for (int u = 0; u < nv; u++) {
        int s = var[u].stage;
        if (rows < dp[s]) {
            ir_errorf(err, "stage %d: dp %d over a microbatch of %lld rows leaves DP ranks "
                      "without a row: give the stage at most %lld DP ranks or a larger "
                      "--microbatch", s, dp[s], (long long)rows, (long long)rows);
            goto done;
        }
        spec.local_rows = var[u].rows; /* the loss scale local_rows / rows (partition.h) */
        /* several pipelines: stage s is stage s - f of its pipeline's
         * partition (each pipeline a whole copy of the model, its own cuts) */
        int f, e;
        comp_plan_pipe_range(p, s, &f, &e);
        spec.nstages = e - f;
        spec.first_layer = first + f;
        spec.last_layer = last + f;
        spec.dp = dp + f;
        spec.recompute = recompute + f;
        spec.zero = zero + f;
        spec.tp = tp + f;
        for (int q = 0; q < u && !gs[u]; q++)
            if (var[q].rows == var[u].rows)
                gs[u] = gs[q];
        if (!gs[u] && !(gs[u] = stage_graph(cs, var[u].rows, err))) {
            ir_error_prefix(err, "stage %d (local batch %lld)", s, (long long)var[u].rows);
            goto done;
        }
        if (partition_stage(gs[u], &spec, s - f, &ps[u], err))
            goto done;
    }
    if (p->npipes > 1)
        pipes_join(p, ps, var, nv);
    cs->t_graphs = now_s() - t;
    t = now_s();
    if (write_init(cs, ps, gs, err))
        goto done;
    cs->t_init = now_s() - t;
    t = now_s();
    if (compile_emit_stages(cs, ps, var, nv, err))
        goto done;
    cs->t_lower = now_s() - t;
    rc = 0;
done:
    for (int u = 0; u < cap; u++) {
        partition_stage_free(&ps[u]);
        int dup = !gs[u];
        for (int q = 0; q < u && !dup; q++)
            dup |= gs[q] == gs[u];
        if (!dup)
            ir_graph_free(gs[u]);
    }
    free(ps);
    free(gs);
    free(var);
    free(first);
    free(last);
    free(dp);
    free(tp);
    free(recompute);
    free(zero);
    return rc;
}

void compile_stages_free(CompileStages *cs) { (void)cs; }
