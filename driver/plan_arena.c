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

/* The forward + loss graph at `local` rows with the planner graph's layer
 * ids (by node name, as hetc compile's stage graphs get them). */
static IrGraph *arena_graph(const CompileOpts *co, int64_t local, const LayerIndex *lix,
                            IrError *err)
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
        pass_run_pipeline(g, "tie-weights", &ctx, err) || pass_loss_with(g, &lo, err) ||
        pass_run_pipeline(g, "shape-infer", &ctx, err)) {
        ir_graph_free(g);
        return NULL;
    }
    for (int i = 0; i < g->nnodes; i++)
        g->nodes[i]->layer_id = layer_index_of(lix, g->nodes[i]->name);
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

/* Layer l's (0-based stage l) figures into *out and the sent values its slot
 * keeps into kept[l]. */
static int measure_layer(const IrGraph *g, const PartSpec *spec, int l, Kept *kept,
                         LayerArena *out, IrError *err)
{
    PartStage ps;
    memset(&ps, 0, sizeof ps);
    if (partition_stage(g, spec, l, &ps, err))
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
    out->grad = 0;
    for (int p = 0; p < mp.nparams; p++)
        if (mp.params[p].grad) /* trained: its gradient passes through backward scratch */
            out->grad += (double)((mp.params[p].bytes + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN);
    out->inner = 0;
    kept[l].names = calloc((size_t)ps.nxfers + 1, sizeof *kept[l].names);
    for (int x = 0; x < ps.nxfers; x++) {
        const PartXfer *px = &ps.xfers[x];
        if (px->kind != PX_ACT)
            continue;
        const IrValue *v = ir_graph_find_value(t, px->value);
        const MpLoc *loc = v ? memplan_loc(&mp, &ps, 0, v) : NULL;
        if (!loc || loc->region != HETC_BUF_SLOT)
            continue;
        if (px->send) {
            if (kept[l].names)
                kept[l].names[kept[l].n++] = strdup(px->value);
        } else if (px->peer >= 0 && px->peer < l &&
                   (!bwd_reads(t, v) || kept_has(&kept[px->peer], px->value))) {
            out->inner += (double)((loc->bytes + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN);
        }
    }
    memplan_free(&mp);
    partition_stage_free(&ps);
    return 0;
}

/* Every layer's arena at `local` rows into out[0..L-1]. */
static int measure_rows(const PlanCtx *pc, const LayerIndex *lix, int64_t local, LayerArena *out,
                        IrGraph **gout, IrError *err)
{
    int L = pc->ls.L, rc = -1;
    IrGraph *g = arena_graph(&pc->a->co, local, lix, err);
    int *first = malloc((size_t)L * sizeof *first), *dps = malloc((size_t)L * sizeof *dps);
    Kept *kept = calloc((size_t)L, sizeof *kept);
    if (!g || !first || !dps || !kept) {
        if (g)
            ir_errorf(err, "out of memory");
        goto done;
    }
    for (int l = 0; l < L; l++) {
        first[l] = l + 1;
        dps[l] = 1;
    }
    PartSpec spec;
    memset(&spec, 0, sizeof spec);
    spec.nstages = L;
    spec.first_layer = first;
    spec.last_layer = first;
    spec.dp = dps;
    spec.rows = local;
    optim_opts_default(&spec.optim);
    for (int l = 0; l < L; l++)
        if (measure_layer(g, &spec, l, kept, &out[l], err)) {
            ir_error_prefix(err, "layer %d at %lld rows", l + 1, (long long)local);
            goto done;
        }
    rc = 0;
    *gout = g; /* kept for tp > 1 candidates (arena_stage) */
    g = NULL;
done:
    for (int l = 0; kept && l < L; l++) {
        for (int i = 0; i < kept[l].n; i++)
            free(kept[l].names[i]);
        free(kept[l].names);
    }
    free(kept);
    free(first);
    free(dps);
    ir_graph_free(g);
    return rc;
}

int plan_arena_build(PlanCtx *pc, int maxdp, IrError *err)
{
    plan_arena_free(pc);
    int64_t rows = pc->a->co.batch;
    int L = pc->ls.L;
    if (rows < 1 || L < 1)
        return 0;
    if (pc->fixed_batch > 0 || maxdp < 1)
        maxdp = 1; /* a fixed-batch model runs dp 1 only */
    if (maxdp > rows)
        maxdp = (int)rows;
    LayerIndex lix = {0};
    if (layer_index_build(&lix, pc->g, err))
        return -1;
    pc->arena = calloc((size_t)maxdp + 1, sizeof *pc->arena);
    pc->arena_g = calloc((size_t)maxdp + 1, sizeof *pc->arena_g);
    if (!pc->arena || !pc->arena_g) {
        free(pc->arena);
        free(pc->arena_g);
        pc->arena = NULL;
        pc->arena_g = NULL;
        layer_index_free(&lix);
        return ir_errorf(err, "out of memory");
    }
    pc->arena_maxdp = maxdp;
    int rc = 0;
    for (int dp = 1; dp <= maxdp && !rc; dp++) {
        /* DP rank 0 runs the larger share (part_local_rows): its binary is
         * stage_S, the one --print-memory reports */
        int64_t local = pc->fixed_batch > 0 ? rows : part_local_rows(rows, dp, 0);
        for (int q = 1; q < dp && !pc->arena[dp]; q++)
            if (part_local_rows(rows, q, 0) == local) {
                pc->arena[dp] = pc->arena[q];
                pc->arena_g[dp] = pc->arena_g[q];
            }
        if (pc->arena[dp])
            continue;
        LayerArena *la = calloc((size_t)L, sizeof *la);
        if (!la || measure_rows(pc, &lix, local, la, &pc->arena_g[dp], err)) {
            if (!la)
                ir_errorf(err, "out of memory");
            free(la);
            rc = -1;
            break;
        }
        pc->arena[dp] = la;
    }
    layer_index_free(&lix);
    if (rc)
        plan_arena_free(pc);
    return rc;
}

void plan_arena_free(PlanCtx *pc)
{
    for (int dp = 1; pc->arena && dp <= pc->arena_maxdp; dp++) {
        int dup = 0;
        for (int q = 1; q < dp && !dup; q++)
            dup = pc->arena[q] == pc->arena[dp];
        if (!dup) {
            free(pc->arena[dp]);
            ir_graph_free(pc->arena_g ? pc->arena_g[dp] : NULL);
        }
    }
    free(pc->arena);
    free(pc->arena_g);
    pc->arena = NULL;
    pc->arena_g = NULL;
    pc->arena_maxdp = 0;
}

int plan_arena_stage(void *ctx, int k, int i, int dp, int tp, double *act, double *scratch)
{
    const PlanCtx *pc = ctx;
    int L = pc->ls.L;
    if (dp < 1 || dp > pc->arena_maxdp || !pc->arena_g || !pc->arena_g[dp] || k < 1 || i > L)
        return -1;
    /* the stage k..i at tp between whole-model neighbours (partition wants
     * contiguous stages from layer 1 to L) */
    int first[3], last[3], dps[3] = {1, 1, 1}, tps[3] = {1, 1, 1}, n = 0, mid;
    if (k > 1)
        first[n] = 1, last[n] = k - 1, n++;
    mid = n;
    first[n] = k, last[n] = i, tps[n] = tp, n++;
    if (i < L)
        first[n] = i + 1, last[n] = L, n++;
    PartSpec spec;
    memset(&spec, 0, sizeof spec);
    spec.nstages = n;
    spec.first_layer = first;
    spec.last_layer = last;
    spec.dp = dps;
    spec.tp = tps;
    spec.rows = pc->fixed_batch > 0 ? pc->a->co.batch : part_local_rows(pc->a->co.batch, dp, 0);
    optim_opts_default(&spec.optim);
    IrError err;
    PartStage ps;
    memset(&ps, 0, sizeof ps);
    if (partition_stage(pc->arena_g[dp], &spec, mid, &ps, &err))
        return -1;
    MemPlan mp;
    int rc = lower_stage_memplan(&ps, 1, 1, &mp, &err);
    if (!rc) {
        *act = (double)mp.slot_bytes;
        *scratch = (double)(mp.scratch_bytes + mp.scalar_bytes);
        memplan_free(&mp);
    }
    partition_stage_free(&ps);
    return rc ? -1 : 0;
}
