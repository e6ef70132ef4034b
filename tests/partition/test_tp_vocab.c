/* Vocabulary-parallel embedding and LM head + loss (passes/tp_shard_vocab.c)
 * against the unsharded graph: TP ranks simulated in one host-executor run
 * (tp_sim.h), forward loss and every parameter gradient (sharded ones
 * against the rank's slice of the unsharded gradient).
 *
 * Random LMs: ids -> Embedding(wte) (+ a position table read by constant
 * ids: replicated) -> MLP block (residual) -> head Linear
 * (own [D,V] weight or the tied Transpose(wte); bias or not) -> optional
 * Reshape [B*T, V] -> CrossEntropy (ignore_index or not), tp 2 and 4.
 * Also: a V tp does not divide stays replicated (still exact), layer
 * ranges (a tie split over two ranges stays replicated, an untied
 * embedding alone is sharded), dry mode (tp_shard_find) and the example
 * GPT (examples/gpt_tiny.onnx) whole at tp 2 and 4. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "loss.h"
#include "lower_stage.h"
#include "memplan.h"
#include "modules.h"
#include "onnx_import.h"
#include "partition.h"
#include "pass.h"
#include "stage_abi.h"
#include "tp_sim.h"

typedef struct Lm {
    int64_t B, T, V, D, F;
    int tied, bias, reshape, ignore;
    int split; /* layer ids: embedding 1, MLP 2, head 3 (for the range cases) */
} Lm;

/* drop graph output `name` (the logits: the loss reads them) */
static void drop_output(IrGraph *g, const char *name) {
    int k = 0;
    for (int i = 0; i < g->noutputs; i++)
        if (strcmp(g->outputs[i]->name, name)) g->outputs[k++] = g->outputs[i];
    g->noutputs = k;
}

static IrGraph *lm(const Lm *d) {
    IrGraph *g = ir_graph_new("lm");
    int64_t ids_d[2] = {d->B, d->T};
    IrShape is = ir_shape_make(2, ids_d);
    IrValue *ids = ir_value_new(g, "ids", IR_I64, &is, IR_VK_INPUT);
    ids->shape_known = 1;
    ir_graph_add_input(g, ids);
    int64_t wd[2] = {d->V, d->D}, w1[2] = {d->D, d->F}, w2[2] = {d->F, d->D};
    IrValue *wte = tp_sim_param(g, "wte", 2, wd, 0.5);
    IrValue *in[3] = {wte, ids, NULL};
    IrValue *e = tp_sim_op1(g, IR_OP_EMBEDDING, "embed", 2, in);
    e->producer->layer_id = 1;
    /* a position table read by constant ids: stays replicated (its ids are
     * no data), as in Megatron-LM */
    int64_t pd[2] = {d->T, d->D}, *pos = malloc(sizeof *pos * (size_t)d->T);
    for (int64_t i = 0; i < d->T; i++) pos[i] = i;
    in[0] = tp_sim_param(g, "wpe", 2, pd, 0.5), in[1] = ir_const_i64s(g, "pos", (int)d->T, pos);
    free(pos);
    IrValue *pe = tp_sim_op1(g, IR_OP_EMBEDDING, "pos_embed", 2, in);
    pe->producer->layer_id = 1;
    in[0] = e, in[1] = pe;
    e = tp_sim_op1(g, IR_OP_ADD, "embed_sum", 2, in);
    e->producer->layer_id = 1;
    in[0] = e, in[1] = tp_sim_param(g, "mlp.w1", 2, w1, 0.4), in[2] = tp_sim_param(g, "mlp.b1", 1, &d->F, 0.1);
    IrValue *f = tp_sim_op1(g, IR_OP_LINEAR, "mlp.fc", 3, in);
    IrValue *ge = tp_sim_op1(g, IR_OP_GELU, "mlp.gelu", 1, &f);
    in[0] = ge, in[1] = tp_sim_param(g, "mlp.w2", 2, w2, 0.4), in[2] = tp_sim_param(g, "mlp.b2", 1, &d->D, 0.1);
    IrValue *m = tp_sim_op1(g, IR_OP_LINEAR, "mlp.proj", 3, in);
    in[0] = e, in[1] = m;
    IrValue *y = tp_sim_op1(g, IR_OP_ADD, "res", 2, in);
    f->producer->layer_id = ge->producer->layer_id = m->producer->layer_id = 2;
    y->producer->layer_id = 2;
    IrValue *w;
    if (d->tied) {
        w = tp_sim_op1(g, IR_OP_TRANSPOSE, "tie/transpose", 1, &wte);
        int64_t perm[2] = {1, 0};
        ir_node_set_ints(w->producer, "perm", 2, perm);
    } else {
        int64_t wh[2] = {d->D, d->V};
        w = tp_sim_param(g, "head.w", 2, wh, 0.5);
    }
    in[0] = y, in[1] = w, in[2] = d->bias ? tp_sim_param(g, "head.b", 1, &d->V, 0.2) : NULL;
    IrValue *lg = tp_sim_op1(g, IR_OP_LINEAR, d->reshape ? "head" : "logits", d->bias ? 3 : 2, in);
    lg->producer->layer_id = 3;
    if (d->reshape) {
        int64_t tgt[2] = {d->reshape == 2 ? -1 : d->B * d->T, d->V};
        in[0] = lg, in[1] = tp_sim_shape_const(g, "head.flat", 2, tgt);
        lg = tp_sim_op1(g, IR_OP_RESHAPE, "logits", 2, in);
        lg->producer->layer_id = 3;
    }
    ir_graph_add_output(g, lg);
    PassContext ctx;
    IrError err = {{0}};
    pass_context_default(&ctx);
    LossOpts lo;
    loss_opts_default(&lo);
    lo.use_ignore = d->ignore;
    if (pass_run_pipeline(g, "shape-infer", &ctx, &err) || pass_loss_with(g, &lo, &err) ||
        pass_run_pipeline(g, "shape-infer", &ctx, &err)) {
        fprintf(stderr, "FAIL lm: %s\n", err.msg);
        exit(1);
    }
    drop_output(g, "logits");
    return g;
}

static double worst_all;

typedef struct Want {
    int embed, head, mlp, attention;
} Want;

static void check_counts(const TpShardResult *r, int rank, const char *what, void *arg) {
    const Want *w = arg;
    CHECK(r->vocab_embed == w->embed && r->vocab_head == w->head && r->mlp == w->mlp &&
              r->attention == w->attention,
          "%s: rank %d: %d vocab embeddings, %d heads, %d mlp, %d attention (want %d %d %d %d), "
          "%d skipped", what, rank, r->vocab_embed, r->vocab_head, r->mlp, r->attention, w->embed,
          w->head, w->mlp, w->attention, r->skipped);
    /* the embedding's sum, the loss's max and stats sums, each block's sum */
    int ar = w->embed + 2 * w->head + w->mlp + w->attention;
    CHECK(r->allreduce == ar, "%s: rank %d: %d TpAllReduce, want %d", what, rank, r->allreduce, ar);
}

static void run_case(const Lm *d, int tp) {
    char what[200];
    snprintf(what, sizeof what, "%s head%s%s%s B=%lld T=%lld V=%lld D=%lld F=%lld tp=%d",
             d->tied ? "tied" : "untied", d->bias ? " +bias" : "",
             d->reshape ? (d->reshape == 2 ? " reshape[-1,V]" : " reshape[BT,V]") : "",
             d->ignore ? " ignore_index" : "", (long long)d->B, (long long)d->T, (long long)d->V,
             (long long)d->D, (long long)d->F, tp);
    IrGraph *g = lm(d);
    int div = d->V % tp == 0;
    Want w = {div, div, d->F % tp == 0};
    double e = tp_sim_run_loss(g, tp, d->V, d->ignore ? -100 : INT64_MIN, what, check_counts, &w);
    if (e >= 0) printf("%s: loss and %s gradients == unsharded to %.2e\n", what,
                       div ? "sharded" : "(replicated)", e);
    if (e > worst_all) worst_all = e;
    ir_graph_free(g);
}

/* dry mode: the planner's view names the same patterns */
static void check_find(void) {
    Lm d = {.B = 2, .T = 3, .V = 12, .D = 4, .F = 8, .tied = 1, .reshape = 1};
    IrGraph *g = lm(&d);
    IrError err = {{0}};
    TpPattern *p = NULL;
    int n = 0, sk = 0, emb = 0, head = 0;
    CHECK(!tp_shard_find(g, 4, 0, 0, &p, &n, &sk, &err), "find: %s", err.msg);
    for (int i = 0; i < n; i++) {
        if (p[i].kind == TP_PATTERN_VOCAB_EMBED) {
            emb++;
            CHECK(p[i].row->op == IR_OP_EMBEDDING, "embed pattern's row is %s",
                  ir_op_name(p[i].row->op));
        }
        if (p[i].kind == TP_PATTERN_VOCAB_HEAD) {
            head++;
            CHECK(p[i].row->op == IR_OP_CROSS_ENTROPY && p[i].ncolumn == 1 &&
                      p[i].column[0]->op == IR_OP_LINEAR && p[i].ninner == 1,
                  "head pattern: row %s, %d columns, %d inner", ir_op_name(p[i].row->op),
                  p[i].ncolumn, p[i].ninner);
        }
    }
    CHECK(emb == 1 && head == 1 && sk == 0, "find tp 4: %d embed, %d head, %d skipped", emb, head, sk);
    free(p);
    /* V = 12: tp 8 does not divide it -> not found, counted as skipped */
    CHECK(!tp_shard_find(g, 8, 0, 0, &p, &n, &sk, &err), "find: %s", err.msg);
    emb = head = 0;
    for (int i = 0; i < n; i++)
        emb += p[i].kind == TP_PATTERN_VOCAB_EMBED, head += p[i].kind == TP_PATTERN_VOCAB_HEAD;
    CHECK(emb == 0 && head == 0 && sk >= 1, "find tp 8: %d embed %d head %d skipped", emb, head, sk);
    free(p);
    ir_graph_free(g);
    printf("tp_shard_find: vocab embedding + head found at tp 4, not at tp 8 (V = 12)\n");
}

/* layer ranges: the embedding in layers 1-2, the head in 3 (two stages) */
static void check_ranges(void) {
    IrError err = {{0}};
    for (int tied = 0; tied < 2; tied++) {
        Lm d = {.B = 2, .T = 3, .V = 8, .D = 4, .F = 8, .tied = tied, .bias = 1};
        IrGraph *g = lm(&d);
        TpShardResult a, b;
        CHECK(!tp_shard_layers(g, 2, 1, 1, 2, &a, &err), "range 1-2: %s", err.msg);
        CHECK(!tp_shard_layers(g, 2, 1, 3, 3, &b, &err), "range 3: %s", err.msg);
        /* tied across the ranges: both replicated (the stages sum the
         * shared table's gradient whole); untied: each side sharded */
        CHECK(a.vocab_embed == !tied && b.vocab_head == !tied && a.vocab_head == 0 &&
                  b.vocab_embed == 0 && (!tied || (a.skipped >= 1 && b.skipped >= 1)),
              "%s, ranges 1-2 / 3: embed %d head %d / embed %d head %d, skipped %d / %d",
              tied ? "tied" : "untied", a.vocab_embed, a.vocab_head, b.vocab_embed, b.vocab_head,
              a.skipped, b.skipped);
        int wte_sharded = 0;
        for (int i = 0; i < a.nshards; i++) wte_sharded |= !strcmp(a.shards[i].name, "wte");
        for (int i = 0; i < b.nshards; i++) wte_sharded |= !strcmp(b.shards[i].name, "wte");
        CHECK(wte_sharded == !tied, "%s: wte sharded %d", tied ? "tied" : "untied", wte_sharded);
        tp_shard_free(&a);
        tp_shard_free(&b);
        /* one range holding both: the tie is sharded once */
        CHECK(!tp_shard_layers(g, 2, 0, 1, 3, &a, &err), "range 1-3: %s", err.msg);
        int n = 0;
        for (int i = 0; i < a.nshards; i++) n += !strcmp(a.shards[i].name, "wte");
        CHECK(a.vocab_embed == 1 && a.vocab_head == 1 && n == 1, "range 1-3: %d %d, wte %d",
              a.vocab_embed, a.vocab_head, n);
        tp_shard_free(&a);
        ir_graph_free(g);
    }
    printf("layer ranges: a tie split over two ranges stays replicated, an untied embedding / "
           "head is sharded in its own range\n");
}

/* the example GPT with its loss, whole, at tp */
static void check_gpt(const char *path, int tp) {
    IrGraph *g = tp_sim_import(path, 8, TP_SIM_LOSS | TP_SIM_SHAPES, NULL);
    if (!g) return;
    int64_t V = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == IR_OP_CROSS_ENTROPY) {
            const IrShape *s = &g->nodes[i]->in[0]->shape;
            V = s->dims[s->rank - 1];
        }
    for (int i = 0; i < g->noutputs; i++)
        if (strcmp(g->outputs[i]->name, "loss")) drop_output(g, g->outputs[i]->name), i--;
    int blocks = 0, tied = 0;
    for (int i = 0; i < g->nnodes; i++) {
        blocks += g->nodes[i]->op == IR_OP_ATTENTION;
        tied |= g->nodes[i]->op == IR_OP_TRANSPOSE && g->nodes[i]->in[0]->kind == IR_VK_PARAM;
    }
    Want w = {1, 1, blocks, blocks};
    char what[160];
    snprintf(what, sizeof what, "gpt_tiny (V=%lld, %s head, %d blocks) tp=%d", (long long)V,
             tied ? "tied" : "untied", blocks, tp);
    double e = tp_sim_run_loss(g, tp, V, INT64_MIN, what, check_counts, &w);
    if (e >= 0) printf("%s: loss and every parameter gradient == unsharded to %.2e\n", what, e);
    if (e > worst_all) worst_all = e;
    ir_graph_free(g);
}

/* gpt_tiny in one stage under tp 2, partitioned and lowered: the loss's
 * row max becomes hetrt_tp_allreduce_max, every other TpAllReduce
 * hetrt_tp_allreduce, and the tied table a 'tpshard' record by rows */
static void check_lower(const char *path) {
    int L = 0;
    IrGraph *g = tp_sim_import(path, 8, TP_SIM_LAYERS | TP_SIM_LOSS, &L);
    if (!g) return;
    IrError err = {{0}};
    int first = 1, last = L, dp = 1, tp = 2;
    PartSpec sp = {.nstages = 1, .first_layer = &first, .last_layer = &last, .dp = &dp,
                   .rows = 2, .tp = &tp};
    optim_opts_default(&sp.optim);
    PartStage st;
    if (partition_stage(g, &sp, 0, &st, &err)) {
        CHECK(0, "partition (one stage, tp 2): %s", err.msg);
        ir_graph_free(g);
        return;
    }
    LeProgram p;
    char *cfg = NULL;
    MemPlan mp;
    if (tp_sim_lower(&st, &st, 1, &dp, L, &p, &cfg, &mp, &err)) {
        CHECK(0, "lower: %s", err.msg);
    } else {
        int nmax = 0, nsum = 0, cmax = 0, csum = 0;
        for (int i = 0; i < st.train->nnodes; i++) {
            const IrNode *n = st.train->nodes[i];
            if (n->op != IR_OP_TP_ALL_REDUCE) continue;
            if (!strcmp(ir_attr_string(n, "op", "sum"), "max")) nmax++;
            else nsum++;
        }
        for (int f = 0; f < p.nfuncs; f++)
            for (int c = 0; c < p.funcs[f].ncalls; c++) {
                cmax += !strcmp(p.funcs[f].calls[c].fn, "hetrt_tp_allreduce_max");
                csum += !strcmp(p.funcs[f].calls[c].fn, "hetrt_tp_allreduce");
            }
        int ext = 0;
        for (int i = 0; i < p.nexterns; i++) ext |= !strcmp(p.externs[i].name, "hetrt_tp_allreduce_max");
        CHECK(nmax == 1 && cmax == nmax && csum == nsum && ext,
              "TpAllReduce max %d / sum %d nodes, hetrt_tp_allreduce_max %d / hetrt_tp_allreduce "
              "%d calls, extern %d", nmax, nsum, cmax, csum, ext);
        CHECK(strstr(cfg, "\ntpshard wte.weight axis 0 full 512 ") != NULL,
              "config: no tpshard record of wte.weight by rows");
        printf("lowered (gpt_tiny, one stage, tp 2): %d TpAllReduce max -> hetrt_tp_allreduce_max, "
               "%d sum -> hetrt_tp_allreduce; tpshard wte.weight axis 0\n", cmax, csum);
        lower_stage_free(&p);
        free(cfg);
        memplan_free(&mp);
    }
    partition_stage_free(&st);
    ir_graph_free(g);
}

/* the example GPT: whole at tp 2 and 4, then as a stage */
static void check_model(const char *p) {
    check_gpt(p, 2);
    check_gpt(p, 4);
    check_lower(p);
}

int main(int argc, char **argv) {
    for (int tpi = 0; tpi < 2; tpi++) {
        int tp = tpi ? 4 : 2;
        for (int c = 0; c < 6; c++) {
            Lm d = {.B = tp_sim_irand(1, 3), .T = tp_sim_irand(2, 5), .V = tp * tp_sim_irand(2, 6),
                    .D = tp_sim_irand(3, 6), .F = tp * tp_sim_irand(1, 3), .tied = c & 1,
                    .bias = (c >> 1) & 1, .reshape = (int)(c % 3), .ignore = c >= 3};
            run_case(&d, tp);
        }
        /* V tp does not divide: replicated, still the unsharded loss */
        Lm d = {.B = 2, .T = 3, .V = tp * 3 + 1, .D = 4, .F = tp * 2, .tied = 1, .reshape = 1};
        run_case(&d, tp);
    }
    check_find();
    check_ranges();
    tp_sim_model(argc, argv, "examples/gpt_tiny.onnx", check_model);
    return tp_sim_finish(worst_all);
}
