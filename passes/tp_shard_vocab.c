/* Vocabulary-parallel embedding and LM head + loss (issue 9 part 1;
 * Megatron-LM, Shoeybi et al. 2019, Sec. 3 "the output embedding ... is
 * parallelized along the vocabulary dimension" and the fused parallel
 * cross entropy), matched on the canonical IR after tp_shard's
 * Linear-anchored patterns:
 *
 *  - embedding: Embedding(table [V, D] parameter, ids).  Rank r keeps rows
 *    [r V/tp, (r+1) V/tp): the node gets attrs vocab_start / vocab_size
 *    (ids outside the rank's rows give 0 rows) and its output becomes a
 *    partial sum, all-reduced by a TpAllReduce (sum).  Backward: the
 *    all-reduce's gradient is the identity, EmbeddingGrad scatters only the
 *    rank's ids (same attrs): no communication.
 *  - LM head + loss: a Linear (weight [D, V] parameter, or Transpose of a
 *    [V, D] parameter: a tied embedding, passes/tie_weights.c) whose output
 *    reaches CrossEntropy's logits through single-reader Reshapes keeping
 *    the vocabulary last.  The Linear is column-parallel over V (TpCopy on
 *    its input, weight columns / bias split; the Reshape targets' last dim
 *    divided by tp), and CrossEntropy becomes the vocab-parallel loss
 *    (ir/ops.def): M = TpAllReduce[max](ReduceMax(z)), stats =
 *    TpAllReduce[sum](VocabCeStats(z, t, M)), loss = VocabCrossEntropy(z,
 *    t, M, stats).  Its gradient is the rank's slice of softmax - onehot,
 *    needing no communication; the head's input gradient is all-reduced by
 *    the TpCopy.
 *
 * Tied weights: one [V, D] parameter read by the Embedding and (through the
 * tie Transpose) by the head is sharded once, by rows, which are the
 * Embedding's vocabulary rows and the head's output columns alike.  When
 * only one of the two lies in the layer range (the pipeline puts the
 * embedding and the head on different stages), both stay replicated: the
 * stages hold the parameter as `shared` and sum its gradient across them
 * whole (partition.h), which a TP slice on one side could not join; the
 * stage runtime refuses a sharded shared parameter (stage_config.c).
 * Counted in `skipped`, like patterns whose V tp does not divide. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tp_shard_int.h"

/* nodes reading v (a graph output is not a reader: a "logits" output of the
 * sharded graph holds the rank's vocabulary slice) */
static int readers(const IrGraph *g, const IrValue *v) {
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *r = g->nodes[i];
        for (int j = 0; j < r->nin && !r->dead; j++) n += r->in[j] == v;
    }
    return n;
}

/* a [V, D] f32 parameter */
static int table_ok(const IrValue *w) {
    return w && w->kind == IR_VK_PARAM && w->dtype == IR_F32 && w->shape.rank == 2;
}

/* Transpose(perm 1,0) of a table parameter, its output read once: the tie */
static IrValue *tie_source(const IrGraph *g, const IrValue *w) {
    const IrNode *p = w->producer;
    const int64_t *perm = NULL;
    int np = p && p->op == IR_OP_TRANSPOSE ? ir_attr_ints(p, "perm", &perm) : -1;
    if (!p || p->op != IR_OP_TRANSPOSE || !table_ok(p->in[0]) || tps_uses(g, w) != 1 ||
        !(np == 0 || (np == 2 && perm[0] == 1 && perm[1] == 0)))
        return NULL;
    return p->in[0];
}

typedef struct Head {
    IrNode *ce, *lin;
    IrNode *reshape[8]; /* between the Linear and the CrossEntropy, ce side first */
    int nreshape;
    IrValue *table;     /* tied: the [V, D] parameter the weight transposes */
    int64_t vocab;
} Head;

/* the LM head feeding CrossEntropy ce (0 if ce is not such a loss) */
static int find_head(const Ts *t, IrNode *ce, Head *h) {
    const IrGraph *g = t->c;
    memset(h, 0, sizeof *h);
    if (ce->op != IR_OP_CROSS_ENTROPY || ce->nin < 2 || !ce->in[0] || !ce->in[1]) return 0;
    h->ce = ce;
    IrValue *v = ce->in[0];
    h->vocab = tps_last_dim(v);
    while (v->producer && v->producer->op == IR_OP_RESHAPE) {
        IrNode *r = v->producer;
        if (readers(g, v) != 1 || h->nreshape == 8 || tps_last_dim(r->in[0]) != h->vocab)
            return 0;
        h->reshape[h->nreshape++] = r;
        v = r->in[0];
    }
    IrNode *l = v->producer;
    if (!l || l->op != IR_OP_LINEAR || l->nin < 2 || !l->in[1] || readers(g, v) != 1) return 0;
    IrValue *w = l->in[1], *b = l->nin > 2 ? l->in[2] : NULL;
    if (b && (b->kind != IR_VK_PARAM || b->shape.rank != 1 || tps_uses(g, b) != 1)) return 0;
    if (w->kind == IR_VK_PARAM) {
        if (w->dtype != IR_F32 || w->shape.rank != 2 || tps_uses(g, w) != 1) return 0;
    } else if (!(h->table = tie_source(g, w))) {
        return 0;
    }
    h->lin = l;
    return h->vocab > 0;
}

/* the reshape targets keep the vocabulary last: its entry divides by tp
 * (-1 there: inferred, left as it is) */
static int head_divides(const Ts *t, const Head *h) {
    if (h->vocab % t->tp) return 0;
    for (int i = 0; i < h->nreshape; i++) {
        int64_t n = 0;
        const int64_t *d = tps_const_i64(h->reshape[i]->in[1], &n);
        if (!d || n < 1) return 0;
        if (d[n - 1] != -1 && !tps_retarget_ok(t, h->reshape[i], 1)) return 0;
    }
    return 1;
}

/* the loss's layer: its own, else the head's (partition places a loss
 * without a layer with its input) */
static int head_in_range(const Ts *t, const Head *h) {
    return tps_in_range(t, h->lin) && (h->ce->layer_id < 1 || tps_in_range(t, h->ce));
}

static IrNode *place(IrNode *n, const IrNode *like) {
    n->layer_id = like->layer_id, n->module_id = like->module_id, n->phase = like->phase;
    return n;
}

static IrValue *new_act(Ts *t, const char *fmt, const char *name, IrDType dt) {
    char nm[1200];
    snprintf(nm, sizeof nm, fmt, name);
    IrShape s = {0};
    IrValue *v = ir_value_new(t->c, nm, dt, &s, IR_VK_ACT);
    v->shape_known = 0; /* shape-infer decides (tp_shard re-infers every value) */
    return v;
}

static void set_vocab(IrNode *n, int64_t start, int64_t size) {
    ir_node_set_int(n, "vocab_start", start);
    ir_node_set_int(n, "vocab_size", size);
}

/* the head column-parallel and the loss vocab-parallel */
static void shard_head(Ts *t, Head *h, int64_t st, int64_t ln) {
    IrGraph *c = t->c;
    IrNode *l = h->lin, *ce = h->ce;
    if (h->table) { /* tied: the table's rows are sliced by the embedding side or here */
        IrValue *cp = tps_copy(t, l->in[0], l);
        place(cp->producer, l);
        l->in[0] = cp;
        if (l->nin > 2 && l->in[2]) tps_slice_param(t, l->in[2], 0, 1, &st, &ln);
    } else {
        tps_column_linear(t, l, 1, &st, &ln);
    }
    for (int i = 0; i < h->nreshape; i++) {
        int64_t n = 0;
        const int64_t *d = tps_const_i64(h->reshape[i]->in[1], &n);
        if (d[n - 1] != -1) tps_retarget(t, h->reshape[i], 1);
    }
    const IrNode *at = ce->layer_id >= 1 ? ce : l;
    IrValue *z = ce->in[0], *tg = ce->in[1];
    int pos = ir_node_index(c, ce);
    /* M: the row max over all ranks (a stability shift only) */
    IrValue *ax[2] = {z, NULL};
    int64_t last = -1;
    ax[1] = ir_const_i64s(c, NULL, 1, &last);
    IrValue *lm = new_act(t, "tp/vocab/max/%s", ce->name, IR_F32);
    IrNode *n = place(ir_node_insert(c, pos++, IR_OP_REDUCE_MAX, lm->name, 2, ax, 1, &lm), at);
    ir_node_set_int(n, "keepdims", 0);
    IrValue *m = new_act(t, "tp/vocab/gmax/%s", ce->name, IR_F32);
    n = place(ir_node_insert(c, pos++, IR_OP_TP_ALL_REDUCE, m->name, 1, &lm, 1, &m), at);
    ir_node_set_int(n, "tp", t->tp);
    ir_node_set_string(n, "op", "max");
    /* the partial (sum exp, target logit), summed */
    IrValue *in[3] = {z, tg, m};
    IrValue *ps = new_act(t, "tp/vocab/stats/%s", ce->name, IR_F32);
    n = place(ir_node_insert(c, pos++, IR_OP_VOCAB_CE_STATS, ps->name, 3, in, 1, &ps), at);
    set_vocab(n, st, h->vocab);
    ir_node_set_int(n, "use_ignore", ir_attr_int(ce, "use_ignore", 0));
    ir_node_set_int(n, "ignore_index", ir_attr_int(ce, "ignore_index", -100));
    IrValue *s = new_act(t, "tp/vocab/sum/%s", ce->name, IR_F32);
    n = place(ir_node_insert(c, pos++, IR_OP_TP_ALL_REDUCE, s->name, 1, &ps, 1, &s), at);
    ir_node_set_int(n, "tp", t->tp);
    t->res->allreduce += 2;
    /* the CrossEntropy node itself becomes the loss from the stats */
    ce->op = IR_OP_VOCAB_CROSS_ENTROPY;
    ce->in = ir_xrealloc(ce->in, 4 * sizeof *ce->in);
    ce->in[2] = m, ce->in[3] = s;
    ce->nin = 4;
    set_vocab(ce, st, h->vocab);
}

/* Embedding(table rows [st, st + ln)) -> partial -> TpAllReduce -> y */
static void shard_embedding(Ts *t, IrNode *e, int64_t st, int64_t ln, int64_t full, int slice) {
    IrValue *w = e->in[0], *y = e->out[0];
    if (slice) tps_slice_param(t, w, 0, 1, &st, &ln);
    set_vocab(e, st, full);
    IrValue *p = new_act(t, "tp/vocab/partial/%s", y->name, y->dtype);
    e->out[0] = p;
    p->producer = e;
    p->producer_slot = 0;
    char nm[1200];
    snprintf(nm, sizeof nm, "tp/vocab/sum/%s", y->name);
    IrNode *ar = place(ir_node_insert(t->c, ir_node_index(t->c, e) + 1, IR_OP_TP_ALL_REDUCE, nm,
                                      1, &p, 1, &y), e);
    ir_node_set_int(ar, "tp", t->tp);
    t->res->allreduce++;
}

/* v depends on a graph input's data (token ids), not on constants or
 * shapes only (position ids from Range(Shape(ids))).  *budget bounds the
 * walk: ids are an input or a few casts / reshapes from one. */
static int from_data(const IrValue *v, int *budget) {
    if (v->kind == IR_VK_INPUT) return 1;
    const IrNode *p = v->producer;
    if (!p || p->op == IR_OP_SHAPE || --*budget < 0) return 0;
    for (int j = 0; j < p->nin; j++)
        if (p->in[j] && from_data(p->in[j], budget)) return 1;
    return 0;
}

/* a parameter Embedding of data ids (0 if e is not one).  A position table
 * read with constant ids stays replicated as in Megatron-LM: sharding it
 * would add a [B, T, D] all-reduce to save a [T, D] table. */
static int embed_ok(const IrNode *e) {
    return e->op == IR_OP_EMBEDDING && e->nin >= 2 && table_ok(e->in[0]) && e->in[1] &&
           (e->in[1]->dtype == IR_I64 || e->in[1]->dtype == IR_I32) && e->out[0] &&
           !ir_node_attr(e, "vocab_start") && from_data(e->in[1], &(int){64});
}

int tps_vocab(Ts *t, IrError *err) {
    (void)err;
    IrGraph *c = t->c;
    int n0 = c->nnodes, found = 0;
    IrNode **orig = ir_xcalloc((size_t)n0 + 1, sizeof *orig);
    memcpy(orig, c->nodes, sizeof *orig * (size_t)n0);
    /* heads first: a tied table is sharded with its head or not at all */
    IrValue *tied[8];
    int ntied = 0;
    for (int i = 0; i < n0; i++) {
        Head h;
        if (orig[i]->dead || !find_head(t, orig[i], &h)) continue;
        int in_range = head_in_range(t, &h);
        if (!in_range && !h.table) continue; /* another stage's head */
        if (!in_range || !head_divides(t, &h) ||
            (h.table && h.table->shape.dims[0] != h.vocab)) {
            t->res->skipped += in_range;
            continue;
        }
        if (h.table) {
            /* every other reader of the table: Embeddings in range (the
             * same rows), nothing else */
            int ok = 1;
            for (int k = 0; k < n0 && ok; k++) {
                const IrNode *r = orig[k];
                for (int j = 0; j < r->nin; j++) {
                    if (r->dead || r->in[j] != h.table || r == h.lin->in[1]->producer) continue;
                    if (j != 0 || !embed_ok(r) || !tps_in_range(t, r)) ok = 0;
                }
            }
            if (!ok || ntied == 8) {
                t->res->skipped++; /* the tie spans stages (or odd readers): replicated */
                continue;
            }
            tied[ntied++] = h.table;
        }
        found++;
        if (t->dry) {
            TpPattern *p = tps_add_found(t, TP_PATTERN_VOCAB_HEAD, h.ce);
            p->column[p->ncolumn++] = h.lin;
            for (int k = h.nreshape - 1; k >= 0; k--) tps_add_inner(p, h.reshape[k]);
            continue;
        }
        int64_t ln = h.vocab / t->tp, st = t->rank * ln;
        if (h.table) tps_slice_param(t, h.table, 0, 1, &st, &ln);
        shard_head(t, &h, st, ln);
        t->res->vocab_head++;
    }
    for (int i = 0; i < n0; i++) {
        IrNode *e = orig[i];
        if (e->dead || !embed_ok(e)) continue;
        IrValue *w = e->in[0];
        int is_tied = 0;
        for (int k = 0; k < ntied; k++) is_tied |= tied[k] == w;
        int64_t V = w->shape.dims[0];
        if (!is_tied) {
            if (!tps_in_range(t, e)) continue;
            if (tps_uses(c, w) != 1 || V % t->tp) {
                /* another reader (a head on another stage, a tie the head
                 * matcher refused) or V tp does not divide: replicated */
                t->res->skipped++;
                continue;
            }
        }
        found++;
        if (t->dry) {
            tps_add_found(t, TP_PATTERN_VOCAB_EMBED, e);
            continue;
        }
        /* a tied table's rows were sliced with its head (V is the shard's now) */
        int64_t full = is_tied ? V * t->tp : V, ln = full / t->tp, st = t->rank * ln;
        shard_embedding(t, e, st, ln, full, !is_tied);
        t->res->vocab_embed++;
    }
    free(orig);
    return found;
}
