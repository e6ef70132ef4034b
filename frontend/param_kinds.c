/* Which float initializers are trainable parameters.
 *
 * ONNX exporters write torch buffers (causal-mask tables, RoPE caches) as
 * initializers exactly like weights, so the importer first makes every float
 * initializer of rank >= 1 a parameter and then demotes to constant those
 * through which no gradient can flow: every use is a non-differentiable
 * operand (a comparison, Where's condition, a shape or index operand, Shape,
 * a Cast to a non-float type), possibly through data-movement ops whose own
 * results are used only that way.  A tril mask compared with 0 and fed to
 * Where is the common case.  Values on a differentiable path stay
 * parameters even when PyTorch kept them as buffers (say, an additive float
 * mask); training has --frozen for those.
 */
#include "onnx_internal.h"

#include <stdlib.h>

/* Bit i set: input i carries no gradient.  ALL: no input does. */
#define ALL 0xffffu
static const unsigned nondiff_inputs[IR_OP_COUNT] = {
    [IR_OP_EQUAL] = ALL, [IR_OP_LESS] = ALL, [IR_OP_LESS_OR_EQUAL] = ALL,
    [IR_OP_GREATER] = ALL, [IR_OP_GREATER_OR_EQUAL] = ALL, [IR_OP_AND] = ALL,
    [IR_OP_OR] = ALL, [IR_OP_XOR] = ALL, [IR_OP_NOT] = ALL, [IR_OP_SHAPE] = ALL,
    [IR_OP_CONSTANT_OF_SHAPE] = ALL, [IR_OP_RANGE] = ALL, [IR_OP_FLOOR] = ALL,
    [IR_OP_CEIL] = ALL, [IR_OP_MOD] = ALL, [IR_OP_IS_NAN] = ALL,
    [IR_OP_WHERE] = 1u << 0,
    [IR_OP_RESHAPE] = 1u << 1, [IR_OP_EXPAND] = 1u << 1, [IR_OP_SQUEEZE] = 1u << 1,
    [IR_OP_UNSQUEEZE] = 1u << 1, [IR_OP_SPLIT] = 1u << 1, [IR_OP_GATHER] = 1u << 1,
    [IR_OP_EMBEDDING] = 1u << 1, [IR_OP_REDUCE_MEAN] = 1u << 1, [IR_OP_REDUCE_SUM] = 1u << 1,
    [IR_OP_REDUCE_MAX] = 1u << 1, [IR_OP_TRILU] = 1u << 1, [IR_OP_CUMSUM] = 1u << 1,
    [IR_OP_GATHER_ND] = 1u << 1, [IR_OP_TILE] = 1u << 1, [IR_OP_GATHER_ELEMENTS] = 1u << 1,
    [IR_OP_SCATTER_ND] = 1u << 1,
    [IR_OP_SLICE] = 0x1eu,
};

/* Ops that only move or select data: a gradient reaches their data input
 * only if one reaches their output. */
static const unsigned char pass_through[IR_OP_COUNT] = {
    [IR_OP_RESHAPE] = 1, [IR_OP_TRANSPOSE] = 1, [IR_OP_SLICE] = 1, [IR_OP_SQUEEZE] = 1,
    [IR_OP_UNSQUEEZE] = 1, [IR_OP_EXPAND] = 1, [IR_OP_GATHER] = 1, [IR_OP_IDENTITY] = 1,
    [IR_OP_CONCAT] = 1, [IR_OP_SPLIT] = 1, [IR_OP_FLATTEN] = 1, [IR_OP_TRILU] = 1,
    [IR_OP_CAST] = 1, [IR_OP_DROPOUT] = 1, [IR_OP_GATHER_ND] = 1, [IR_OP_TILE] = 1,
    [IR_OP_GATHER_ELEMENTS] = 1, [IR_OP_SCATTER_ND] = 1,
};

typedef struct Uses {
    int *start;   /* per value id: first index into refs */
    int *refs;    /* node index * 32 + input slot */
    signed char *memo; /* -1 unknown, 0 no gradient, 1 gradient */
} Uses;

static int diff_used(const IrGraph *g, Uses *u, const IrValue *v);

static int node_passes_gradient(const IrGraph *g, Uses *u, const IrNode *n, int slot) {
    if (slot < 16 && (nondiff_inputs[n->op] >> slot) & 1u) return 0;
    if (n->op == IR_OP_CAST && !ir_dtype_is_float((IrDType)ir_attr_int(n, "to", 0))) return 0;
    if (!pass_through[n->op]) return 1;
    for (int j = 0; j < n->nout; j++)
        if (n->out[j] && diff_used(g, u, n->out[j])) return 1;
    return 0;
}

static int diff_used(const IrGraph *g, Uses *u, const IrValue *v) {
    if (u->memo[v->id] >= 0) return u->memo[v->id];
    u->memo[v->id] = 0; /* the graph is acyclic; this only guards malformed input */
    int r = v->is_graph_output;
    for (int k = u->start[v->id]; !r && k < u->start[v->id + 1]; k++) {
        const IrNode *n = g->nodes[u->refs[k] / 32];
        r = node_passes_gradient(g, u, n, u->refs[k] % 32);
    }
    u->memo[v->id] = (signed char)r;
    return r;
}

void imp_demote_buffers(IrGraph *g) {
    int nv = g->nvalues;
    for (int i = 0; i < nv; i++) g->values[i]->id = i;
    Uses u;
    u.start = calloc((size_t)nv + 1, sizeof *u.start);
    u.memo = malloc((size_t)nv + 1);
    int total = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin && j < 32; j++)
            if (g->nodes[i]->in[j]) u.start[g->nodes[i]->in[j]->id + 1]++, total++;
    for (int i = 0; i < nv; i++) u.start[i + 1] += u.start[i];
    u.refs = malloc(((size_t)total + 1) * sizeof *u.refs);
    int *fill = calloc((size_t)nv + 1, sizeof *fill);
    if (!u.start || !u.memo || !u.refs || !fill) {
        /* leave kinds as they are: a missed demotion is not an error */
        free(u.start), free(u.memo), free(u.refs), free(fill);
        return;
    }
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin && j < 32; j++) {
            IrValue *v = g->nodes[i]->in[j];
            if (v) u.refs[u.start[v->id] + fill[v->id]++] = i * 32 + j;
        }
    for (int i = 0; i < nv; i++) u.memo[i] = -1;
    for (int i = 0; i < nv; i++) {
        IrValue *v = g->values[i];
        if (v->kind == IR_VK_PARAM && u.start[i + 1] > u.start[i] && !diff_used(g, &u, v))
            v->kind = IR_VK_CONST;
    }
    free(u.start), free(u.memo), free(u.refs), free(fill);
}
