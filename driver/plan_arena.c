/* The planner's arena model (issue 17; plan_arena.h, docs/PLANNER.md
 * "Precision and the arena").
 *
 * HAPT's profiler measures each candidate's memory footprint (seed 004
 * §5.1) for the memory constraint mem_p + K mem_a <= mem_device (Eq. 24).
 * The footprint a stage binary has is the arena hetc compile's memory plan
 * gives it (codegen/memplan.h), so the figures come from that plan: for
 * every layer l, the stage a binary holding only layer l runs -- the same
 * forward + loss graph at one DP rank's rows, cut by partition_stage, its
 * elementwise nodes grouped as the host lowering groups them, planned by
 * memplan -- gives
 *   slot    its activation slot (forward values its backward reads, the
 *           received activations, token ids, targets), every value at its
 *           IR dtype's size;
 *   inner   the part of the slot that is not a slot value once the layer
 *           that produces a received activation is in the same stage: a
 *           received value no backward node of layer l reads is a forward
 *           temporary there, and one the producer's own backward reads is
 *           in the producer's slot already;
 *   fwd, bwd, upd  the first-fit peaks of its forward, backward and
 *           update scratch, and grad, its parameter gradients' bytes (they
 *           stay in backward scratch to the backward's end), and the scalars.
 * cost_model.c composes a stage k..i from them (cost_model.h LayerArena).
 */
#include "plan_arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile_opts.h"
#include "loss.h"
#include "lower_stage.h"
#include "memplan.h"
#include "optimizer.h"
#include "partition.h"
#include "stage_abi.h"

/* Two steps read every weight: partition's TP sharding copies every
 * parameter of the graph per stage (passes/tp_shard.c clone_graph), and
 * tie-weights compares each [m,n] parameter with each [n,m] one (all of it
 * when they are equal, as a generated all-zero model's are).  On models
 * above this many parameter bytes neither runs here: TP units are not
 * measured (a tp > 1 candidate scales the tp = 1 arena by the per-op rules'
 * TP share, cost_model.c) and weights are not tied (a tied head then counts
 * as its own parameter: no Transpose gradient in its layer's scratch). */
#define ARENA_BIG_MODEL_BYTES (256.0 * 1048576.0)

static double param_bytes(const IrGraph *g)
{
    double b = 0;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i]->kind == IR_VK_PARAM)
            b += (double)ir_value_bytes(g->values[i]);
    return b;
}

/* Weights tie-weights tied on the first graph (the Transpose's input and
 * the parameter it replaced): the other row counts replay them by name
 * instead of comparing every weight again (on a model whose weights are all
 * zero the comparison reads them all). */
typedef struct Ties {
    char **from, **to;
    int n, known;
} Ties;

static void ties_free(Ties *t)
{
    for (int i = 0; i < t->n; i++)
        free(t->from[i]), free(t->to[i]);
    free(t->from);
    free(t->to);
    memset(t, 0, sizeof *t);
}

static int ties_record(const IrGraph *g, Ties *t)
{
    t->known = 1;
    t->from = calloc((size_t)g->nnodes + 1, sizeof *t->from);
    t->to = calloc((size_t)g->nnodes + 1, sizeof *t->to);
    if (!t->from || !t->to)
        return -1;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        const char *b = n->op == IR_OP_TRANSPOSE && n->nin == 1 && n->in[0]
                            ? ir_attr_string(n, "tied_from", NULL) : NULL;
        if (b) {
            t->from[t->n] = strdup(n->in[0]->name);
            t->to[t->n++] = strdup(b);
        }
    }
    return 0;
}

/* tie-weights' rewrite of each recorded pair (passes/tie_weights.c) */
static int ties_apply(IrGraph *g, const Ties *t, IrError *err)
{
    for (int i = 0; i < t->n; i++) {
        IrValue *a = ir_graph_find_value(g, t->from[i]), *b = ir_graph_find_value(g, t->to[i]);
        if (!a || !b || a->kind != IR_VK_PARAM || b->kind != IR_VK_PARAM)
            return ir_errorf(err, "tie-weights: '%s' / '%s' not parameters at these rows",
                             t->from[i], t->to[i]);
        tie_weights_tie(g, a, b);
    }
    ir_graph_compact(g);
    return 0;
}

/* The forward + loss graph at `local` rows with the planner graph's layer
 * ids (by node name, as hetc compile's stage graphs get them). */
static IrGraph *arena_graph(const CompileOpts *co, int64_t local, const LayerIndex *lix,
                            Ties *ties, int bf16_mixed, IrError *err)
{
    CompileOpts o = *co;
    o.batch = local;
    o.dump_after = NULL;
    o.ibinds.log = NULL; /* the planner graph's import said what it bound */
    o.report_params = 0;
    PassContext ctx;
    pass_context_default(&ctx);
    LossOpts lo;
    loss_opts_default(&lo);
    IrGraph *g = compile_import(&o, NULL, 0, 0, &ctx, err);
    if (!g || compile_run_passes(g, &o, &ctx, err) ||
        (ties->known ? ties_apply(g, ties, err)
                     : pass_run_pipeline(g, "tie-weights", &ctx, err) ||
                           (ties_record(g, ties) && ir_errorf(err, "out of memory"))) ||
        pass_loss_with(g, &lo, err) || pass_run_pipeline(g, "shape-infer", &ctx, err)) {
        ir_graph_free(g);
        return NULL;
    }
    for (int i = 0; i < g->nnodes; i++)
        g->nodes[i]->layer_id = layer_index_of(lix, g->nodes[i]->name);
    /* bf16-mixed: the casts hetc compile adds after the layer ids
     * (compile_stage.c stage_graph), so bf16 values count their 2 B */
    if (bf16_mixed && pass_run_pipeline(g, "mixed-precision,shape-infer", &ctx, err)) {
        ir_graph_free(g);
        return NULL;
    }
    return g;
}

static int bwd_reads(const IrGraph *t, const IrValue *v)
{
    for (int k = 0; k < t->nnodes; k++) {
        const IrNode *n = t->nodes[k];
        if (n->dead || n->phase != IR_PHASE_BWD)
            continue;
        for (int i = 0; i < n->nin; i++)
            if (n->in[i] == v)
                return 1;
    }
    return 0;
}

/* The sent activations a one-layer stage keeps in its slot (its backward
 * reads them), by name: what a later layer receiving them must not count
 * again. */
typedef struct Kept {
    char **names;
    int n;
} Kept;

static int kept_has(const Kept *k, const char *name)
{
    for (int i = 0; i < k->n; i++)
        if (!strcmp(k->names[i], name))
            return 1;
    return 0;
}

/* Stage s's figures into *out and the sent values its slot keeps into
 * kept[s]. */
static int measure_stage(const IrGraph *g, const PartSpec *spec, int s, Kept *kept,
                         LayerArena *out, IrError *err)
{
    PartStage ps;
    memset(&ps, 0, sizeof ps);
    if (partition_stage(g, spec, s, &ps, err))
        return -1;
    MemPlan mp;
    if (lower_stage_memplan(&ps, 1, 1, &mp, err)) {
        partition_stage_free(&ps);
        return -1;
    }
    const IrGraph *t = ps.train;
    out->slot = (double)mp.slot_bytes;
    out->fwd = (double)mp.fwd_scratch_bytes;
    out->bwd = (double)mp.bwd_scratch_bytes;
    out->upd = (double)mp.upd_scratch_bytes;
    out->scalars = (double)mp.scalar_bytes;
    out->span = spec->last_layer[s] - spec->first_layer[s] + 1;
    out->grad = 0;
    for (int p = 0; p < mp.nparams; p++)
        if (mp.params[p].grad) /* trained: its gradient passes through backward scratch */
            out->grad += (double)((mp.params[p].bytes + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN);
    out->inner = 0;
    kept[s].names = calloc((size_t)ps.nxfers + 1, sizeof *kept[s].names);
    for (int x = 0; x < ps.nxfers; x++) {
        const PartXfer *px = &ps.xfers[x];
        if (px->kind != PX_ACT)
            continue;
        const IrValue *v = ir_graph_find_value(t, px->value);
        const MpLoc *loc = v ? memplan_loc(&mp, &ps, 0, v) : NULL;
        if (!loc || loc->region != HETC_BUF_SLOT)
            continue;
        if (px->send) {
            if (kept[s].names)
                kept[s].names[kept[s].n++] = strdup(px->value);
        } else if (px->peer >= 0 && px->peer < s &&
                   (!bwd_reads(t, v) || kept_has(&kept[px->peer], px->value))) {
            out->inner += (double)((loc->bytes + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN);
        }
    }
    memplan_free(&mp);
    partition_stage_free(&ps);
    return 0;
}

/* Every stage of the split first[s]..last[s] (s < n, contiguous from layer
 * 1 to L) at tps[s] on g, stage s's figures into out[first[s] - 1]. */
static int measure_split(const IrGraph *g, int64_t local, const int *first, const int *last,
                         const int *tps, int n, LayerArena *out, IrError *err)
{
    int *dps = malloc((size_t)n * sizeof *dps), rc = 0;
    Kept *kept = calloc((size_t)n, sizeof *kept);
    if (!dps || !kept) {
        free(dps);
        free(kept);
        return ir_errorf(err, "out of memory");
    }
    for (int s = 0; s < n; s++)
        dps[s] = 1; /* g is at one DP rank's rows already */
    PartSpec spec;
    memset(&spec, 0, sizeof spec);
    spec.nstages = n;
    spec.first_layer = first;
    spec.last_layer = last;
    spec.dp = dps;
    spec.tp = tps;
    spec.rows = local;
    optim_opts_default(&spec.optim);
    for (int s = 0; s < n && !rc; s++)
        if (measure_stage(g, &spec, s, kept, &out[first[s] - 1], err))
            rc = ir_error_prefix(err, "layers %d..%d at %lld rows, tp %d", first[s], last[s],
                                 (long long)local, tps[s]);
    for (int s = 0; s < n; s++) {
        for (int i = 0; i < kept[s].n; i++)
            free(kept[s].names[i]);
        free(kept[s].names);
    }
    free(kept);
    free(dps);
    return rc;
}

/* The TP units at tp = 2^b: the fewest layers each pattern's layers stay
 * together in (LayerIntra.tp_span_*), each at tp if it holds a pattern tp
 * divides, else at 1 (replicated: partition shards nothing there).
 * Returns the unit count. */
static int tp_units(const LayerIntra *in, int L, int b, int *first, int *last, int *tps)
{
    int n = 0;
    for (int l = 1; l <= L;) {
        int e = l + in[l - 1].tp_span_after;
        for (int j = l; j <= e && j <= L; j++)
            if (j + in[j - 1].tp_span_after > e)
                e = j + in[j - 1].tp_span_after;
        if (e > L)
            e = L;
        int pat = 0, div = 1;
        for (int j = l; j <= e; j++)
            if (in[j - 1].tp_patterns > 0) {
                pat = 1;
                div &= (int)((in[j - 1].tp_divides >> b) & 1u);
            }
        first[n] = l, last[n] = e, tps[n] = pat && div ? 1 << b : 1;
        n++;
        l = e + 1;
    }
    return n;
}

static int64_t local_rows_of(const PlanCtx *pc, int dp)
{
    /* DP rank 0 runs the larger share (part_local_rows): its binary is
     * stage_S, the one --print-memory reports */
    return pc->fixed_batch > 0 ? pc->a->co.batch : part_local_rows(pc->a->co.batch, dp, 0);
}

int plan_arena_build(PlanCtx *pc, int maxdev, IrError *err)
{
    plan_arena_free(pc);
    int64_t rows = pc->a->co.batch;
    int L = pc->ls.L;
    if (rows < 1 || L < 1)
        return 0;
    int maxdp = maxdev < 1 ? 1 : maxdev;
    if (pc->fixed_batch > 0)
        maxdp = 1; /* a fixed-batch model runs dp 1 only */
    if (maxdp > rows)
        maxdp = (int)rows;
    int *first = malloc((size_t)L * sizeof *first), *last = malloc((size_t)L * sizeof *last);
    int *tps = malloc((size_t)L * sizeof *tps);
    pc->arena_g = calloc((size_t)maxdp + 1, sizeof *pc->arena_g);
    for (int b = 0; b < ARENA_TPB; b++)
        pc->arena[b] = calloc((size_t)maxdp + 1, sizeof *pc->arena[b]);
    pc->arena_maxdp = maxdp;
    LayerIndex lix = {0};
    Ties ties = {0};
    int warned = 0;
    ties.known = param_bytes(pc->g) > ARENA_BIG_MODEL_BYTES; /* none replayed: untied */
    int rc = layer_index_build(&lix, pc->g, err);
    for (int b = 0; b < ARENA_TPB && !rc; b++)
        if (!pc->arena[b])
            rc = ir_errorf(err, "out of memory");
    if (!rc && (!first || !last || !tps || !pc->arena_g))
        rc = ir_errorf(err, "out of memory");
    /* the graphs, one per distinct row count */
    for (int dp = 1; dp <= maxdp && !rc; dp++) {
        for (int q = 1; q < dp && !pc->arena_g[dp]; q++)
            if (local_rows_of(pc, q) == local_rows_of(pc, dp))
                pc->arena_g[dp] = pc->arena_g[q];
        if (!pc->arena_g[dp] &&
            !(pc->arena_g[dp] = arena_graph(&pc->a->co, local_rows_of(pc, dp), &lix, &ties,
                                            pc->a->precision == PRECISION_BF16_MIXED, err)))
            rc = -1;
    }
    for (int b = 0; b < ARENA_TPB && !rc; b++) {
        int tp = 1 << b, n = L;
        if (tp > 1 && (!pc->intra || tp > pc->a->max_tp ||
                       param_bytes(pc->g) > ARENA_BIG_MODEL_BYTES))
            break;
        if (tp == 1)
            for (int l = 0; l < L; l++)
                first[l] = last[l] = l + 1, tps[l] = 1;
        else
            n = tp_units(pc->intra, L, b, first, last, tps);
        for (int dp = 1; dp <= maxdp && dp * tp <= maxdev && !rc; dp++) {
            for (int q = 1; q < dp && !pc->arena[b][dp]; q++)
                if (pc->arena_g[q] == pc->arena_g[dp])
                    pc->arena[b][dp] = pc->arena[b][q];
            if (pc->arena[b][dp])
                continue;
            LayerArena *la = calloc((size_t)L, sizeof *la);
            IrError why = {{0}};
            if (!la) {
                rc = ir_errorf(err, "out of memory");
            } else if (measure_split(pc->arena_g[dp], local_rows_of(pc, dp), first, last, tps, n,
                                     la, &why)) {
                /* A one-layer cut the stage binaries could not run either
                 * (e.g. a boundary value whose first dim is not the rows,
                 * as some dynamo exports flatten [B*T, H]): the planner
                 * keeps its per-op estimate for this tp and row count. */
                free(la);
                la = NULL;
                if (!warned++ && pc->quiet < 2)
                    fprintf(stderr, "%s: arena model: %s; memory of the candidates at tp %d, %lld "
                            "rows (and any other cut that fails) from the per-op estimate\n",
                            pc->who, why.msg, tp, (long long)local_rows_of(pc, dp));
            }
            if (rc)
                free(la);
            else
                pc->arena[b][dp] = la;
        }
    }
    layer_index_free(&lix);
    ties_free(&ties);
    free(first);
    free(last);
    free(tps);
    if (rc)
        plan_arena_free(pc);
    return rc;
}

void plan_arena_free(PlanCtx *pc)
{
    for (int b = 0; b < ARENA_TPB; b++) {
        for (int dp = 1; pc->arena[b] && dp <= pc->arena_maxdp; dp++) {
            int dup = 0;
            for (int q = 1; q < dp && !dup; q++)
                dup = pc->arena[b][q] == pc->arena[b][dp];
            if (!dup)
                free(pc->arena[b][dp]);
        }
        free(pc->arena[b]);
        pc->arena[b] = NULL;
    }
    for (int dp = 1; pc->arena_g && dp <= pc->arena_maxdp; dp++) {
        int dup = 0;
        for (int q = 1; q < dp && !dup; q++)
            dup = pc->arena_g[q] == pc->arena_g[dp];
        if (!dup)
            ir_graph_free(pc->arena_g[dp]);
    }
    free(pc->arena_g);
    pc->arena_g = NULL;
    pc->arena_maxdp = 0;
}
