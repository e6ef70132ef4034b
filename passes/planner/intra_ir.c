/* Per-layer tensor-parallel structure read from the canonical IR (issue 9).
 *
 * The planner costs exactly what the stage binaries run: the patterns come
 * from tp_shard's own matchers (tp_shard_find, passes/tp_shard.h), so a
 * layer's TP benefit and collectives are those of the Megatron MLPs
 * (Linear -> activation -> Linear), gated MLPs (SwiGLU: gate and up
 * column-parallel over the same columns, down row-parallel) and attention
 * blocks (fused or separate QKV Linears -> any head-agnostic q/k/v subgraph:
 * layout ops, rotary embedding, a GQA repeat of the kv heads -> Attention
 * -> output Linear, heads split; tp must divide the kv heads) that tp_shard
 * shards, and nothing else: a layer without such a pattern (the norms, an
 * attention whose q/k/v path is not provably head-agnostic or whose kv
 * heads tp does not divide; the embedding, LM head and loss unless
 * vocabulary-parallel, below) is replicated under TP, its full cost on
 * every TP rank.
 *
 * Per pattern: its column-parallel Linears (MLP-in, gate and up, QKV) and
 * the nodes between them and the row-parallel Linear produce sharded
 * values; the row Linear's output is a partial sum, one forward all-reduce
 * (TpAllReduce); each distinct input of a column-parallel Linear needs one
 * backward all-reduce of its gradient (TpCopy: Q, K, V share one, as do
 * gate and up).  Sharded parameters: the column Linears' weights and biases
 * and the row Linear's weight (its bias is added once, after the sum).  So
 * a GPT or LLaMA block reads as 2 forward + 2 backward all-reduces.
 *
 * tp_divides: tp_shard leaves a pattern replicated when tp does not divide
 * its dims (heads, hidden, ffn); the planner then does not offer that tp
 * for a stage holding the layer (cost_model.c), rather than cost a mix.
 *
 * Vocabulary parallelism (tp_shard_vocab.c, executed by the stage
 * binaries; default on, layer_intra_from_ir_opts(.., vocab_parallel = 0, ..)
 * leaves it out for comparisons): a parameter Embedding of token ids is
 * vocabulary-parallel (its table split by rows; one forward all-reduce of
 * its output) and the LM head feeding CrossEntropy is column-parallel over
 * the vocabulary (one backward all-reduce of its input) with a
 * vocabulary-parallel loss (forward all-reduces of the row max, rows x 4
 * bytes, and of the (sum exp, target logit) stats, rows x 8 bytes).  Costed
 * only where tp_shard would shard them whatever the plan, so the per-layer
 * figures hold for every stage range and tp the planner may offer:
 *  - the graph shows its loss (a VOCAB_HEAD pattern was found: hetc plan
 *    reads the model before the loss pass, so there nothing is costed and
 *    the stage binaries' vocabulary sharding only makes the run cheaper
 *    than planned);
 *  - untied: a table the head reads too (tie-weights) is sharded only by a
 *    stage holding both ends, replicated otherwise (tp_shard_vocab.c);
 *  - every tp up to 2^(TP_BITS-1) divides the vocabulary: tp_shard leaves
 *    an undivided one replicated while the stage's blocks still shard, so
 *    it must neither clear tp_divides nor be costed as sharded. */
#include <stdlib.h>
#include <string.h>

#include "cost_model.h"
#include "../op_cost.h"  /* hetc_passes: the per-op FLOPs */
#include "../tp_shard.h" /* hetc_passes: tp_shard_find */

enum { TP_BITS = 7 }; /* tp_divides bits checked: tp = 1, 2, ..., 64 */

static double numel_bytes(const IrValue *v)
{
    int64_t ne = v ? ir_shape_numel(&v->shape) : -1;
    size_t sz = v ? ir_dtype_size(v->dtype) : 0;
    return ne > 0 ? (double)ne * (double)(sz ? sz : 4) : 0;
}

static double numel(const IrValue *v)
{
    int64_t ne = v ? ir_shape_numel(&v->shape) : -1;
    return ne > 0 ? (double)ne : 0;
}

static int is_act(const IrValue *v)
{
    return v && (v->kind == IR_VK_ACT || v->kind == IR_VK_INPUT);
}

/* a node's forward FLOPs as op_cost.c counts them (the attention written
 * out: its MatMuls and Softmax); 0 without static shapes */
static double fwd_flops(const IrNode *n)
{
    OpCost c;
    IrError e;
    return op_cost_node(n, &c, &e) ? 0 : c.fwd_flops;
}

/* forward FLOPs of a Linear: 2 * outputs * K */
static double linear_flops(const IrNode *n)
{
    const IrValue *x = n->in[0], *y = n->out[0];
    double kdim = x && x->shape.rank > 0 ? (double)x->shape.dims[x->shape.rank - 1] : 0;
    return 2.0 * numel(y) * (kdim > 0 ? kdim : 0);
}

/* the layers (0-based) a pattern's nodes lie in, [*lo, *hi]; -1 when one
 * of them has no layer.  The layers pass may cut a block between its QKV
 * and its attention-out (gpt_tiny: 4 layers a block): tp_shard shards a
 * pattern only when one stage holds all of it (tp_shard_layers). */
static int pattern_span(const TpPattern *p, int L, int *lo, int *hi)
{
    const IrNode *ns[3 + TP_PATTERN_MAX_INNER + 1];
    int k = 0;
    ns[k++] = p->row;
    for (int c = 0; c < p->ncolumn; c++)
        ns[k++] = p->column[c];
    for (int j = 0; j < p->ninner; j++)
        ns[k++] = p->inner[j];
    *lo = L, *hi = -1;
    for (int j = 0; j < k; j++) {
        int l = ns[j]->layer_id - 1;
        if (l < 0 || l >= L)
            return -1;
        if (l < *lo)
            *lo = l;
        if (l > *hi)
            *hi = l;
    }
    return 0;
}

/* a node of a pattern pattern_span accepted: its layer, 0-based */
static int node_layer(const IrNode *n)
{
    return n->layer_id - 1;
}

static int64_t last_dim(const IrValue *v)
{
    return v && v->shape.rank > 0 ? v->shape.dims[v->shape.rank - 1] : 0;
}

/* the vocabulary of a vocab pattern: the table's rows, the head's columns */
static int64_t vocab_of(const TpPattern *p)
{
    return p->kind == TP_PATTERN_VOCAB_EMBED ? p->row->in[0]->shape.dims[0]
                                             : last_dim(p->column[0]->out[0]);
}

/* a head reading its weight through the tie Transpose, or an embedding
 * whose table has another reader (the head's tie) */
static int vocab_tied(const IrGraph *g, const TpPattern *p)
{
    if (p->kind == TP_PATTERN_VOCAB_HEAD)
        return p->column[0]->in[1]->kind != IR_VK_PARAM;
    return ir_value_num_uses(g, p->row->in[0]) > 1;
}

/* is vocab pattern p costed (the header's rules)?  has_head: the graph
 * has its loss */
static int vocab_costed(const IrGraph *g, const TpPattern *p, int has_head)
{
    int64_t v = vocab_of(p);
    return has_head && !vocab_tied(g, p) && v > 0 && v % (1 << (TP_BITS - 1)) == 0;
}

/* the layers (0-based) of a vocab pattern: the embedding's; the head's to
 * its loss's (a loss without a layer runs with the head) */
static int vocab_span(const TpPattern *p, int L, int *lo, int *hi)
{
    const IrNode *a = p->kind == TP_PATTERN_VOCAB_EMBED ? p->row : p->column[0];
    *lo = *hi = node_layer(a);
    if (p->kind == TP_PATTERN_VOCAB_HEAD && p->row->layer_id >= 1)
        *hi = node_layer(p->row);
    if (*hi < *lo) {
        int t = *lo;
        *lo = *hi, *hi = t;
    }
    return *lo < 0 || *hi >= L ? -1 : 0;
}

/* a vocab pattern's costs (the header); sh, cg as in the caller */
static void vocab_cost(const TpPattern *p, LayerIntra *out, int L, unsigned char *sh,
                       unsigned char *cg, int maxv)
{
    if (p->kind == TP_PATTERN_VOCAB_EMBED) {
        const IrNode *e = p->row;
        LayerIntra *li = &out[node_layer(e)];
        li->tp_patterns++;
        li->tp_param_bytes += numel(e->in[0]);
        li->ar_fwd++;
        li->ar_fwd_bytes += numel_bytes(e->out[0]);
        return;
    }
    const IrNode *h = p->column[0], *ce = p->row;
    const IrValue *hx = h->in[0];
    LayerIntra *lh = &out[node_layer(h)];
    lh->tp_patterns++;
    lh->tp_flops += linear_flops(h);
    lh->tp_param_bytes += numel(h->in[1]);
    if (h->nin > 2 && h->in[2])
        lh->tp_param_bytes += numel(h->in[2]);
    if (h->out[0]->id <= maxv)
        sh[h->out[0]->id] = 1; /* the vocabulary-sharded logits */
    for (int j = 0; j < p->ninner; j++)
        if (p->inner[j]->out[0]->id <= maxv)
            sh[p->inner[j]->out[0]->id] = 1;
    if (hx && hx->id <= maxv && !cg[hx->id] && is_act(hx)) {
        cg[hx->id] = 1;
        lh->ar_bwd++;
        lh->ar_bwd_bytes += numel_bytes(hx);
    }
    int l = ce->layer_id >= 1 && ce->layer_id <= L ? node_layer(ce) : node_layer(h);
    const IrValue *z = ce->in[0];
    double rows = numel(z) / (double)(last_dim(z) > 0 ? last_dim(z) : 1);
    out[l].ar_fwd += 2; /* the row max (4 bytes a row) and the stats (8) */
    out[l].ar_fwd_bytes += rows * 4 + rows * 8;
}

/* Layer l lies in a pattern spanning layers lo..hi: widen its span. */
static void span_widen(int *span_lo, int *span_hi, int l, int lo, int hi)
{
    if (lo < span_lo[l])
        span_lo[l] = lo;
    if (hi > span_hi[l])
        span_hi[l] = hi;
}

/* Bytes each layer's nodes output, and of those the ones produced sharded
 * (sh[id]). */
static void layer_out_bytes(const IrGraph *g, int L, const unsigned char *sh, int maxv,
                            double *tot_out, double *sh_out)
{
    for (int q = 0; q < g->nnodes; q++) {
        const IrNode *n = g->nodes[q];
        int l = n && !n->dead ? n->layer_id - 1 : -1;
        if (l < 0 || l >= L)
            continue;
        for (int j = 0; j < n->nout; j++) {
            const IrValue *v = n->out[j];
            if (!v)
                continue;
            tot_out[l] += numel_bytes(v);
            if (v->id <= maxv && sh[v->id])
                sh_out[l] += numel_bytes(v);
        }
    }
}

/* tp_divides bit b: tp = 2^b shards every pattern of the layer tp = 1
 * found (out[].tp_patterns); cnt is scratch of L ints. */
static int tp_divides_fill(const IrGraph *g, int L, int vocab_parallel, int has_head,
                           LayerIntra *out, int *cnt, IrError *err)
{
    for (int b = 1; b < TP_BITS; b++) {
        TpPattern *pt = NULL;
        int nt = 0;
        if (tp_shard_find(g, 1 << b, 0, 0, &pt, &nt, NULL, err)) {
            return ir_error_prefix(err, "intra-op, tp %d", 1 << b);
        }
        memset(cnt, 0, (size_t)L * sizeof *cnt);
        for (int q = 0; q < nt; q++) {
            int lo, hi;
            const TpPattern *p = &pt[q];
            if (p->kind == TP_PATTERN_VOCAB_EMBED || p->kind == TP_PATTERN_VOCAB_HEAD) {
                /* costed ones are found at every tp (64 | V), in their
                 * layer as counted above */
                if (vocab_parallel && vocab_costed(g, p, has_head) && !vocab_span(p, L, &lo, &hi))
                    cnt[node_layer(p->kind == TP_PATTERN_VOCAB_EMBED ? p->row : p->column[0])]++;
                continue;
            }
            if (!pattern_span(p, L, &lo, &hi))
                cnt[node_layer(p->row)]++;
        }
        for (int l = 0; l < L; l++)
            if (cnt[l] == out[l].tp_patterns)
                out[l].tp_divides |= 1u << b;
        free(pt);
    }
    return 0;
}

/* Each layer's TP fractions of its own figures (layers.c's op costs), and
 * what selective recompute may drop. */
static void layer_fracs(const IrGraph *g, const PlanLayer *layers, int L, const double *tot_out,
                        const double *sh_out, int any_mm, LayerIntra *out)
{
    for (int l = 0; l < L; l++) {
        LayerIntra *li = &out[l];
        const PlanLayer *p = &layers[l];
        /* fractions of the layer's own figures (layers.c's op costs) */
        li->tp_flops_frac = p->fwd_flops > 0 ? li->tp_flops / p->fwd_flops : 0;
        if (li->tp_flops_frac > 1)
            li->tp_flops_frac = 1;
        /* tp_param_bytes counted elements; param_bytes is in the training dtype */
        li->tp_param_frac = 0;
        if (p->param_bytes > 0 && li->tp_param_bytes > 0) {
            double tot_el = 0;
            for (int q = 0; q < g->nnodes; q++) {
                const IrNode *n = g->nodes[q];
                if (!n || n->dead || n->layer_id != l + 1)
                    continue;
                for (int j = 0; j < n->nin; j++)
                    if (n->in[j] && n->in[j]->kind == IR_VK_PARAM)
                        tot_el += numel(n->in[j]);
            }
            li->tp_param_frac = tot_el > 0 ? li->tp_param_bytes / tot_el : 0;
            if (li->tp_param_frac > 1)
                li->tp_param_frac = 1;
        }
        li->tp_act_frac = tot_out[l] > 0 ? sh_out[l] / tot_out[l] : 0;
        if (!any_mm) { /* fused Attention keeps only q, k, v: nothing for selective to drop */
            li->attn_bytes = 0;
            li->attn_flops = 0;
        }
        if (li->attn_bytes > p->act_bytes)
            li->attn_bytes = p->act_bytes;
    }
}

int layer_intra_from_ir(const IrGraph *g, const PlanLayer *layers, int L, LayerIntra *out,
                        IrError *err)
{
    return layer_intra_from_ir_opts(g, layers, L, 1, out, err);
}

int layer_intra_from_ir_opts(const IrGraph *g, const PlanLayer *layers, int L, int vocab_parallel,
                             LayerIntra *out, IrError *err)
{
    if (!g || !layers || !out || L <= 0)
        return ir_errorf(err, "intra-op: need a graph and %d layers", L);
    memset(out, 0, (size_t)L * sizeof *out);
    int maxv = 0;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i] && g->values[i]->id > maxv)
            maxv = g->values[i]->id;
    /* sh[id]: produced sharded; cg[id]: counted as a column group's input already */
    unsigned char *sh = calloc((size_t)maxv + 1, 2);
    double *tot_out = calloc((size_t)L, sizeof *tot_out);
    double *sh_out = calloc((size_t)L, sizeof *sh_out);
    int *cnt = calloc((size_t)L, sizeof *cnt);
    TpPattern *pat = NULL;
    int np = 0;
    if (!sh || !tot_out || !sh_out || !cnt) {
        free(sh), free(tot_out), free(sh_out), free(cnt);
        return ir_errorf(err, "intra-op: out of memory");
    }
    unsigned char *cg = sh + maxv + 1;
    if (tp_shard_find(g, 1, 0, 0, &pat, &np, NULL, err)) {
        free(sh), free(tot_out), free(sh_out), free(cnt);
        return ir_error_prefix(err, "intra-op");
    }
    int *span_lo = cnt; /* reused below for the counts at each tp */
    int *span_hi = calloc((size_t)L, sizeof *span_hi);
    if (!span_hi) {
        free(pat), free(sh), free(tot_out), free(sh_out), free(cnt);
        return ir_errorf(err, "intra-op: out of memory");
    }
    for (int l = 0; l < L; l++)
        span_lo[l] = span_hi[l] = l;
    int has_head = 0;
    for (int q = 0; q < np; q++)
        has_head |= pat[q].kind == TP_PATTERN_VOCAB_HEAD;
    for (int q = 0; q < np; q++) {
        const TpPattern *p = &pat[q];
        int lo, hi;
        int vocab = p->kind == TP_PATTERN_VOCAB_EMBED || p->kind == TP_PATTERN_VOCAB_HEAD;
        if (vocab) {
            if (!vocab_parallel || !vocab_costed(g, p, has_head) || vocab_span(p, L, &lo, &hi))
                continue;
            for (int l = lo; l <= hi; l++)
                span_widen(span_lo, span_hi, l, lo, hi);
            vocab_cost(p, out, L, sh, cg, maxv);
            continue;
        }
        if (pattern_span(p, L, &lo, &hi))
            continue; /* not placed in layers: never inside one stage's range */
        /* each node's costs go to its own layer; the pattern is counted
         * (tp_patterns, tp_divides) at its row-parallel Linear */
        out[node_layer(p->row)].tp_patterns++;
        const IrNode *all[3 + TP_PATTERN_MAX_INNER + 1];
        int na = 0;
        all[na++] = p->row;
        for (int c = 0; c < p->ncolumn; c++)
            all[na++] = p->column[c];
        for (int j = 0; j < p->ninner; j++)
            all[na++] = p->inner[j];
        for (int j = 0; j < na; j++)
            span_widen(span_lo, span_hi, node_layer(all[j]), lo, hi);
        for (int c = 0; c < p->ncolumn; c++) {
            const IrNode *n = p->column[c];
            const IrValue *x = n->in[0];
            LayerIntra *li = &out[node_layer(n)];
            li->tp_flops += linear_flops(n);
            li->tp_param_bytes += numel(n->in[1]);
            if (n->nin > 2 && n->in[2])
                li->tp_param_bytes += numel(n->in[2]); /* column bias is split too */
            if (n->out[0]->id <= maxv)
                sh[n->out[0]->id] = 1;
            if (x && x->id <= maxv && !cg[x->id] && is_act(x)) {
                cg[x->id] = 1;
                li->ar_bwd++;
                li->ar_bwd_bytes += numel_bytes(x);
            }
        }
        for (int j = 0; j < p->ninner; j++) {
            const IrNode *n = p->inner[j];
            LayerIntra *li = &out[node_layer(n)];
            for (int o = 0; o < n->nout; o++)
                if (n->out[o] && n->out[o]->id <= maxv)
                    sh[n->out[o]->id] = 1;
            if (n->op == IR_OP_ATTENTION) /* head-parallel: q k^T and p v */
                li->tp_flops += op_cost_attention_gemm_flops(n);
        }
        LayerIntra *li = &out[node_layer(p->row)];
        li->tp_flops += linear_flops(p->row);
        li->tp_param_bytes += numel(p->row->in[1]); /* row weight; its bias is replicated */
        li->ar_fwd++;
        li->ar_fwd_bytes += numel_bytes(p->row->out[0]);
    }
    for (int l = 0; l < L; l++) {
        out[l].tp_span_before = l - span_lo[l];
        out[l].tp_span_after = span_hi[l] - l;
    }
    free(span_hi);
    /* tp_divides: tp = 2^b shards every pattern of the layer tp = 1 found */
    for (int l = 0; l < L; l++)
        out[l].tp_divides = 1u;
    if (tp_divides_fill(g, L, vocab_parallel, has_head, out, cnt, err)) {
        free(pat), free(sh), free(tot_out), free(sh_out), free(cnt);
        return -1;
    }
    free(pat);
    int any_mm = 0;
    for (int q = 0; q < g->nnodes; q++) {
        const IrNode *n = g->nodes[q];
        if (!n || n->dead)
            continue;
        int l = n->layer_id - 1;
        LayerIntra *li = (l >= 0 && l < L) ? &out[l] : NULL;
        const IrValue *x = n->nin > 0 ? n->in[0] : NULL;
        const IrValue *y = n->nout > 0 ? n->out[0] : NULL;
        if (n->op == IR_OP_MATMUL && is_act(x) && n->nin > 1 && is_act(n->in[1])) {
            /* an activation x activation MatMul: attention written out (not a
             * pattern tp_shard shards: replicated under TP) */
            any_mm = 1;
            if (li)
                li->attn_flops += fwd_flops(n);
        } else if (n->op == IR_OP_SOFTMAX && li) {
            /* attention probabilities: saved for backward, what selective
             * recompute drops (checked below: only beside an act x act MatMul) */
            li->attn_bytes += numel_bytes(y);
            li->attn_flops += fwd_flops(n);
        }
    }
    layer_out_bytes(g, L, sh, maxv, tot_out, sh_out);
    layer_fracs(g, layers, L, tot_out, sh_out, any_mm, out);
    free(sh), free(tot_out), free(sh_out), free(cnt);
    return 0;
}
