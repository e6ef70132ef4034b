/* Per-node FLOPs and bytes from static shapes: one table entry per IrOp.
 *
 * Forward FLOPs (multiply-add = 2 FLOPs):
 *   MatMul  [..,M,K] x [..,K,N]        2 * numel(out) * K        (batched)
 *   Linear  x[..,K] W[K,N] b?          2 * numel(out) * K (+ numel(out) with bias)
 *   Gemm    A[M,K] B[K,N] C?           2 * M * N * K (+ M * N with C)
 *   Attention q[..,T,D] k[..,S,D] v[..,S,Dv]:
 *           2*batch*T*S*D (scores) + 2*batch*T*S*Dv (weights x v)
 *           + 5*batch*T*S (softmax); causal halves all three
 *           (= 4*B*H*T*S*D for Dv = D, the usual figure)
 *   elementwise (Add, Mul, Gelu, ...): FLOPs per output element (1 for
 *           arithmetic, ~8 for transcendental activations: exp + a few ops)
 *   LayerNorm / RMSNorm / Softmax: ~5 per element (mean, variance or max,
 *           subtract, exp or scale, normalise)
 *   reductions: 1 per input element
 *   data movement (Reshape, Transpose, Gather, Embedding, Concat, ...): 0
 * Bytes: every input and output of static shape read/written once; for
 *   Embedding and Gather only the rows gathered (= output bytes) are read.
 * Backward FLOPs = bwd_factor x forward:
 *   2 for matmul-like ops (input gradient + weight gradient, one GEMM each)
 *   and attention (dQ, dK, dV, dP: four GEMMs against two forward ones;
 *   FlashAttention's recompute of P would make it 2.5);
 *   1 for elementwise and data movement ops (one pass over the gradient);
 *   2 for norms and softmax (two reductions and an elementwise pass);
 *   1 for Embedding's scatter-add (counted on the output: 1 per element).
 * Training ops (CrossEntropy, the *Grad ops, SumToShape) have rules too, so
 * a training graph can be costed node by node once it exists.
 * These are the approximations the planner plans with until the training
 * graph (@bwd nodes) exists; then layers.c takes the real nodes (hook there).
 */
#include "op_cost.h"

#include <string.h>

typedef enum Rule {
    R_NONE = 0,     /* missing entry: a test checks every op has one */
    R_MATMUL,
    R_LINEAR,
    R_GEMM,
    R_ATTENTION,
    R_OUT_ELEMS,    /* per_elem x numel(output 0) */
    R_IN_ELEMS,     /* per_elem x numel(input 0) */
    R_MOVE,         /* 0 FLOPs, bytes only */
    R_GATHER,       /* 0 FLOPs; reads the gathered rows, not the table */
    R_LINEAR_GRAD,  /* x[..,K] W[K,N] dy[..,N]: 4 * numel(dy) * K (dx and dW) */
} Rule;

typedef struct OpCostRule {
    Rule rule;
    double per_elem;
    double bwd_factor;
    int heavy, saves_inputs, saves_output;
} OpCostRule;

#define ELEM(fl, bw, si, so) {R_OUT_ELEMS, fl, bw, 0, si, so}
#define MOVE {R_MOVE, 0, 1, 0, 0, 0}
/* comparisons and integer ops have no gradient: backward factor 0 */
#define NOGRAD {R_OUT_ELEMS, 1, 0, 0, 0, 0}

static const OpCostRule op_rules[IR_OP_COUNT] = {
    [IR_OP_ADD] = ELEM(1, 1, 0, 0),
    [IR_OP_SUB] = ELEM(1, 1, 0, 0),
    [IR_OP_MUL] = ELEM(1, 2, 1, 0),      /* dx = g*y, dy = g*x */
    [IR_OP_DIV] = ELEM(1, 3, 1, 0),
    [IR_OP_POW] = ELEM(8, 2, 1, 0),
    [IR_OP_MAX] = ELEM(1, 1, 1, 0),
    [IR_OP_MIN] = ELEM(1, 1, 1, 0),
    [IR_OP_MOD] = NOGRAD,
    [IR_OP_EQUAL] = NOGRAD,
    [IR_OP_LESS] = NOGRAD,
    [IR_OP_LESS_OR_EQUAL] = NOGRAD,
    [IR_OP_GREATER] = NOGRAD,
    [IR_OP_GREATER_OR_EQUAL] = NOGRAD,
    [IR_OP_AND] = NOGRAD,
    [IR_OP_OR] = NOGRAD,
    [IR_OP_XOR] = NOGRAD,
    [IR_OP_WHERE] = ELEM(1, 1, 1, 0),    /* keeps the condition */
    [IR_OP_NEG] = ELEM(1, 1, 0, 0),
    [IR_OP_ABS] = ELEM(1, 1, 1, 0),
    [IR_OP_SQRT] = ELEM(4, 1, 0, 1),
    [IR_OP_RECIPROCAL] = ELEM(1, 2, 0, 1),
    [IR_OP_EXP] = ELEM(8, 1, 0, 1),
    [IR_OP_LOG] = ELEM(8, 1, 1, 0),
    [IR_OP_SIN] = ELEM(8, 1, 1, 0),
    [IR_OP_COS] = ELEM(8, 1, 1, 0),
    [IR_OP_TANH] = ELEM(8, 1, 0, 1),
    [IR_OP_SIGMOID] = ELEM(8, 1, 0, 1),
    [IR_OP_ERF] = ELEM(8, 1, 1, 0),
    [IR_OP_RELU] = ELEM(1, 1, 0, 1),
    [IR_OP_FLOOR] = NOGRAD,
    [IR_OP_CEIL] = NOGRAD,
    [IR_OP_NOT] = NOGRAD,
    [IR_OP_IS_NAN] = NOGRAD,
    [IR_OP_CAST] = MOVE,
    [IR_OP_CLIP] = ELEM(2, 1, 1, 0),
    [IR_OP_IDENTITY] = MOVE,
    [IR_OP_TP_ALL_REDUCE] = MOVE, /* compute only; the planner costs the collective */
    [IR_OP_TP_COPY] = MOVE,
    [IR_OP_DROPOUT] = ELEM(1, 1, 0, 0),
    [IR_OP_MATMUL] = {R_MATMUL, 0, 2, 1, 1, 0},
    [IR_OP_GEMM] = {R_GEMM, 0, 2, 1, 1, 0},
    [IR_OP_REDUCE_MEAN] = {R_IN_ELEMS, 1, 1, 0, 0, 0},
    [IR_OP_REDUCE_SUM] = {R_IN_ELEMS, 1, 1, 0, 0, 0},
    [IR_OP_REDUCE_MAX] = {R_IN_ELEMS, 1, 1, 0, 1, 1},
    [IR_OP_SOFTMAX] = ELEM(5, 2, 0, 1),
    [IR_OP_LOG_SOFTMAX] = ELEM(5, 2, 0, 1),
    [IR_OP_RESHAPE] = MOVE,
    [IR_OP_TRANSPOSE] = MOVE,
    [IR_OP_SPLIT] = MOVE,
    [IR_OP_CONCAT] = MOVE,
    [IR_OP_SLICE] = MOVE,
    [IR_OP_SQUEEZE] = MOVE,
    [IR_OP_UNSQUEEZE] = MOVE,
    [IR_OP_EXPAND] = MOVE,
    [IR_OP_FLATTEN] = MOVE,
    [IR_OP_SHAPE] = {R_MOVE, 0, 0, 0, 0, 0},
    [IR_OP_CONSTANT_OF_SHAPE] = {R_MOVE, 0, 0, 0, 0, 0},
    [IR_OP_RANGE] = {R_MOVE, 0, 0, 0, 0, 0},
    [IR_OP_TRILU] = MOVE,
    [IR_OP_GATHER] = {R_GATHER, 0, 1, 0, 1, 0},   /* keeps the indices */
    [IR_OP_CUMSUM] = ELEM(1, 1, 0, 0),
    [IR_OP_GATHER_ND] = {R_GATHER, 0, 1, 0, 1, 0}, /* keeps the indices */
    [IR_OP_TILE] = MOVE,
    [IR_OP_GATHER_ELEMENTS] = {R_GATHER, 0, 1, 0, 1, 0},
    [IR_OP_SCATTER_ND] = MOVE,
    [IR_OP_LINEAR] = {R_LINEAR, 0, 2, 1, 1, 0},
    [IR_OP_LAYER_NORM] = ELEM(5, 2, 1, 0),
    [IR_OP_RMS_NORM] = ELEM(4, 2, 1, 0),
    [IR_OP_GELU] = ELEM(8, 1, 1, 0),
    [IR_OP_SILU] = ELEM(8, 1, 1, 0),
    [IR_OP_ATTENTION] = {R_ATTENTION, 0, 2, 1, 1, 1}, /* q, k, v and the output */
    [IR_OP_EMBEDDING] = {R_GATHER, 1, 1, 0, 1, 0},    /* keeps the ids */
    /* Training ops (loss, backward, optimizer; the training issue).  Their
     * fwd_flops is the op's own cost; backward ops have no backward (0). */
    [IR_OP_CROSS_ENTROPY] = {R_IN_ELEMS, 5, 1, 0, 1, 0},       /* log-softmax + pick over logits */
    [IR_OP_CROSS_ENTROPY_GRAD] = {R_IN_ELEMS, 5, 0, 0, 0, 0},
    /* vocab-parallel loss (tp_shard_vocab.c): exp-sum over the rank's logits;
     * the loss itself reads [rows, 2]; its gradient as CrossEntropyGrad's */
    [IR_OP_VOCAB_CE_STATS] = {R_IN_ELEMS, 4, 1, 0, 1, 0},
    [IR_OP_VOCAB_CROSS_ENTROPY] = {R_IN_ELEMS, 1, 1, 0, 1, 0},
    [IR_OP_VOCAB_CROSS_ENTROPY_GRAD] = {R_IN_ELEMS, 5, 0, 0, 0, 0},
    [IR_OP_LINEAR_GRAD] = {R_LINEAR_GRAD, 0, 0, 1, 0, 0},      /* dx and dW: two GEMMs */
    [IR_OP_LAYER_NORM_GRAD] = {R_IN_ELEMS, 8, 0, 0, 0, 0},
    [IR_OP_RMS_NORM_GRAD] = {R_IN_ELEMS, 6, 0, 0, 0, 0},
    [IR_OP_ATTENTION_GRAD] = {R_ATTENTION, 2, 0, 1, 0, 0},     /* 2x the forward (dQ dK dV dP) */
    [IR_OP_UNARY_GRAD] = {R_OUT_ELEMS, 2, 0, 0, 0, 0},
    [IR_OP_SOFTMAX_GRAD] = {R_OUT_ELEMS, 4, 0, 0, 0, 0},
    [IR_OP_EMBEDDING_GRAD] = {R_OUT_ELEMS, 1, 0, 0, 0, 0},     /* zero + scatter-add into dtable */
    [IR_OP_SUM_TO_SHAPE] = {R_IN_ELEMS, 1, 0, 0, 0, 0},
    [IR_OP_SLICE_GRAD] = {R_MOVE, 0, 0, 0, 0, 0},
    [IR_OP_GATHER_GRAD] = {R_OUT_ELEMS, 1, 0, 0, 0, 0},          /* zero + scatter-add */
    [IR_OP_GATHER_ND_GRAD] = {R_OUT_ELEMS, 1, 0, 0, 0, 0},
    [IR_OP_GATHER_ELEMENTS_GRAD] = {R_OUT_ELEMS, 1, 0, 0, 0, 0},
    /* the fused optimizer step: ~13 flops (a sqrt, two divisions) per element
     * of the parameter; reads P m v G, writes P m v; no backward */
    [IR_OP_ADAMW] = {R_IN_ELEMS, 13, 0, 0, 0, 0},
};

int op_is_heavy(IrOp op)
{
    return (unsigned)op < IR_OP_COUNT && op_rules[op].heavy;
}

static double numel_of(const IrValue *v)
{
    if (!v || !v->shape_known || !ir_shape_is_static(&v->shape))
        return -1;
    return (double)ir_shape_numel(&v->shape);
}

static double bytes_of(const IrValue *v)
{
    double n = numel_of(v);
    return n > 0 ? n * (double)ir_dtype_size(v->dtype) : 0;
}

static int need(const IrNode *n, int i, int in, IrError *err)
{
    const IrValue *v = in ? (i < n->nin ? n->in[i] : NULL) : (i < n->nout ? n->out[i] : NULL);
    if (v && numel_of(v) >= 0)
        return 0;
    return ir_errorf(err, "op cost: node '%s' (%s): %s %d has no static shape%s%s", n->name,
                     ir_op_name(n->op), in ? "input" : "output", i, v ? " — value " : "",
                     v ? v->name : "");
}

int op_cost_node(const IrNode *n, OpCost *out, IrError *err)
{
    memset(out, 0, sizeof *out);
    if ((unsigned)n->op >= IR_OP_COUNT || op_rules[n->op].rule == R_NONE)
        return ir_errorf(err, "op cost: node '%s': no cost rule for op %s", n->name,
                         ir_op_name(n->op));
    const OpCostRule *r = &op_rules[n->op];
    double fl = 0;
    switch (r->rule) {
    case R_MATMUL:
    case R_LINEAR: {
        if (need(n, 0, 1, err) || need(n, 0, 0, err))
            return -1;
        const IrShape *a = &n->in[0]->shape;
        double K = a->rank ? (double)a->dims[a->rank - 1] : 1;
        fl = 2.0 * numel_of(n->out[0]) * K;
        if (r->rule == R_LINEAR && n->nin > 2 && n->in[2])
            fl += numel_of(n->out[0]);
        break;
    }
    case R_GEMM: {
        if (need(n, 0, 1, err) || need(n, 0, 0, err))
            return -1;
        const IrShape *a = &n->in[0]->shape;
        if (a->rank != 2)
            return ir_errorf(err, "op cost: Gemm '%s': A is not 2-D", n->name);
        double K = (double)(ir_attr_int(n, "transA", 0) ? a->dims[0] : a->dims[1]);
        fl = 2.0 * numel_of(n->out[0]) * K;
        if (n->nin > 2 && n->in[2])
            fl += numel_of(n->out[0]);
        break;
    }
    case R_ATTENTION: {
        for (int i = 0; i < 3; i++)
            if (need(n, i, 1, err))
                return -1;
        const IrShape *q = &n->in[0]->shape, *k = &n->in[1]->shape, *v = &n->in[2]->shape;
        if (q->rank < 2 || k->rank < 2 || v->rank < 2)
            return ir_errorf(err, "op cost: Attention '%s': rank < 2", n->name);
        double T = (double)q->dims[q->rank - 2], D = (double)q->dims[q->rank - 1];
        double S = (double)k->dims[k->rank - 2], Dv = (double)v->dims[v->rank - 1];
        double batch = numel_of(n->in[0]) / (T * D > 0 ? T * D : 1);
        fl = batch * T * S * (2.0 * D + 2.0 * Dv + 5.0);
        if (ir_attr_int(n, "causal", 0))
            fl *= 0.5;
        if (r->per_elem > 0)
            fl *= r->per_elem;   /* AttentionGrad: a multiple of the forward */
        break;
    }
    case R_LINEAR_GRAD: {
        if (need(n, 0, 1, err) || need(n, 2, 1, err))
            return -1;
        const IrShape *x = &n->in[0]->shape;
        double K = x->rank ? (double)x->dims[x->rank - 1] : 1;
        fl = 4.0 * numel_of(n->in[2]) * K;
        break;
    }
    case R_OUT_ELEMS:
        if (need(n, 0, 0, err))
            return -1;
        fl = r->per_elem * numel_of(n->out[0]);
        break;
    case R_IN_ELEMS:
        if (need(n, 0, 1, err))
            return -1;
        fl = r->per_elem * numel_of(n->in[0]);
        break;
    case R_GATHER:
        if (need(n, 0, 0, err))
            return -1;
        fl = r->per_elem * numel_of(n->out[0]);   /* Embedding: 0 forward, scatter-add backward */
        break;
    case R_MOVE:
    case R_NONE:
        break;
    }
    double bytes = 0;
    if (r->rule == R_GATHER) {
        /* the gathered rows, the indices, and the output */
        int idx = 1;   /* Gather(data, indices), Embedding(table, ids) */
        bytes = 2 * bytes_of(n->out[0]) + (n->nin > idx ? bytes_of(n->in[idx]) : 0);
    } else {
        for (int i = 0; i < n->nin; i++)
            bytes += bytes_of(n->in[i]);
        for (int i = 0; i < n->nout; i++)
            bytes += bytes_of(n->out[i]);
    }
    out->fwd_flops = r->rule == R_GATHER && n->op == IR_OP_EMBEDDING ? 0 : fl;
    out->bwd_flops = r->bwd_factor * fl;
    out->bytes = bytes;
    out->heavy = r->heavy;
    out->saves_inputs = r->saves_inputs;
    out->saves_output = r->saves_output;
    return 0;
}

double op_cost_attention_gemm_flops(const IrNode *n)
{
    const IrValue *x = n->nin > 0 ? n->in[0] : NULL, *k = n->nin > 1 ? n->in[1] : NULL;
    const IrValue *y = n->nout > 0 ? n->out[0] : NULL;
    int64_t nx = x ? ir_shape_numel(&x->shape) : -1, ny = y ? ir_shape_numel(&y->shape) : -1;
    double s = k && k->shape.rank >= 2 ? (double)k->shape.dims[k->shape.rank - 2] : 0;
    return 2.0 * (nx > 0 ? (double)nx : 0) * s + 2.0 * (ny > 0 ? (double)ny : 0) * s;
}

int op_cost_has_rule(IrOp op)
{
    return (unsigned)op < IR_OP_COUNT && op_rules[op].rule != R_NONE;
}
