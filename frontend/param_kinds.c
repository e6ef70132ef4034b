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
 *
 * That first rule misses buffers that do reach the loss through
 * differentiable ops.  Three more rules, derived from the exports in
 * tests/hf (both torch exporters, 13 Hugging Face families), demote them:
 *
 *  - scalar: a one-element float initializer is a constant.  Exporters
 *    write Python float literals that way (falcon's dynamo export has the
 *    attention scale hd^-1/4 as `val_221`, shape [1], multiplied into q and
 *    k of every block); no model in tests/hf has a one-element parameter.
 *  - computed table: look at the initializer's data-independent region, the
 *    nodes whose outputs depend only on initializers, constants and input
 *    *shapes* (Shape's output is data-independent).  If that region holds a
 *    Sin or Cos (position arithmetic: RoPE's cos(positions x inv_freq)), or
 *    computes from the initializer (by an op that is more than a view: not
 *    Identity/Cast/Transpose/Reshape/Squeeze/Unsqueeze/Flatten) a value that
 *    two or more input-dependent nodes read, the initializer is a buffer:
 *    torch computes such tables once per forward (rotary_emb, build_alibi)
 *    and hands them to every block, while a parameter is read by its own
 *    module only.  Cases: `inv_freq` of every RoPE family's dynamo export
 *    (Mul by positions, Cos/Sin), gpt-j's sin/cos table `val_104`
 *    (GatherND by positions, Split, read by the q/k Muls of both blocks),
 *    bloom's ALiBi slopes `unsqueeze_1` (Mul by positions, Tile, added to
 *    the scores of both blocks).  gpt2's position embedding is also
 *    gathered by positions but read once (one Add): it stays a parameter.
 *    A parameter the exporter deduplicated is read by several nodes
 *    directly (or through Identity), not through a computation, so it is
 *    not caught here but untied (param_untie.c).
 *  - mask values: an inline f32 initializer holding -inf or FLT_MAX's
 *    negative (torch.finfo(float32).min, what HF fills masked scores with)
 *    is an additive mask.  External data is not scanned: masks are small
 *    and written inline, and big weights must not be read at import.
 *  - rotary tables: a static-shape dynamo export folds RoPE's cos and sin
 *    into initializers ([1, 1, T, D], read by the q and k Muls of every
 *    block).  Their values prove what they are: along the position axis
 *    each column is cos(p f) or sin(p f), so row 0 is all ones (cos) or all
 *    zeros (sin) and every column obeys the angle-addition recurrence
 *    x[p+1] + x[p-1] = 2 cos(f) x[p] (cos f = row 1 of a cos table; for a
 *    sin table sin 2f / (2 sin f)).  A non-constant table that satisfies it
 *    to 1e-4 in every column is a rotary table; no trained weight does.
 */
#include "onnx_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    [IR_OP_ADAMW] = ALL, /* an optimizer step: nothing flows back through it */
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

int imp_uses_build(IrGraph *g, ImpUses *u) {
    int nv = g->nvalues;
    for (int i = 0; i < nv; i++) g->values[i]->id = i;
    u->nvalues = nv;
    u->start = calloc((size_t)nv + 1, sizeof *u->start);
    int total = 0;
    for (int i = 0; u->start && i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin && j < 32; j++)
            if (g->nodes[i]->in[j]) u->start[g->nodes[i]->in[j]->id + 1]++, total++;
    u->refs = malloc(((size_t)total + 1) * sizeof *u->refs);
    int *fill = calloc((size_t)nv + 1, sizeof *fill);
    if (!u->start || !u->refs || !fill) {
        free(u->start), free(u->refs), free(fill);
        u->start = u->refs = NULL;
        return -1;
    }
    for (int i = 0; i < nv; i++) u->start[i + 1] += u->start[i];
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin && j < 32; j++) {
            IrValue *v = g->nodes[i]->in[j];
            if (v) u->refs[u->start[v->id] + fill[v->id]++] = i * 32 + j;
        }
    free(fill);
    return 0;
}

void imp_uses_free(ImpUses *u) {
    free(u->start), free(u->refs);
    u->start = u->refs = NULL;
}

/* ------------------------------------------------------ computed tables */

/* Ops whose output depends on their input's shape only. */
static const unsigned char shape_only[IR_OP_COUNT] = {[IR_OP_SHAPE] = 1};
/* Views: an initializer seen through them is still the initializer. */
static const unsigned char view_op[IR_OP_COUNT] = {
    [IR_OP_IDENTITY] = 1, [IR_OP_CAST] = 1, [IR_OP_TRANSPOSE] = 1, [IR_OP_RESHAPE] = 1,
    [IR_OP_SQUEEZE] = 1, [IR_OP_UNSQUEEZE] = 1, [IR_OP_FLATTEN] = 1,
};
/* Position arithmetic: a region holding one of these computes a table of
 * positions (RoPE's cos/sin), never a weight. */
static const unsigned char position_op[IR_OP_COUNT] = {[IR_OP_SIN] = 1, [IR_OP_COS] = 1};

/* dep[v]: v depends on the data of a graph input (nodes are in topological
 * order after the import). */
static unsigned char *data_dependent(const IrGraph *g) {
    unsigned char *dep = calloc((size_t)g->nvalues + 1, 1);
    if (!dep) return NULL;
    for (int i = 0; i < g->nvalues; i++) dep[i] = g->values[i]->kind == IR_VK_INPUT;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        int d = 0;
        for (int j = 0; j < n->nin && !shape_only[n->op]; j++) d |= n->in[j] && dep[n->in[j]->id];
        for (int j = 0; j < n->nout; j++)
            if (n->out[j]) dep[n->out[j]->id] = (unsigned char)d;
    }
    return dep;
}

/* Walk w's data-independent region; 1 if it is a computed table. */
static int is_table(const IrGraph *g, const ImpUses *u, const unsigned char *dep, IrValue *w,
                    int *stack, unsigned char *seen) {
    /* seen: 0 not reached, 1 reached as a view of w, 2 reached computed */
    int sp = 0, r = 0;
    int *touched = stack + 2 * g->nvalues, nt = 0; /* a value is pushed at most twice */
    stack[sp++] = w->id;
    seen[w->id] = 1;
    touched[nt++] = w->id;
    while (sp && !r) {
        int vid = stack[--sp];
        int readers = 0;
        for (int k = u->start[vid]; k < u->start[vid + 1] && !r; k++) {
            const IrNode *n = g->nodes[u->refs[k] / 32];
            if (shape_only[n->op]) continue; /* reads no data */
            if (n->nout && n->out[0] && dep[n->out[0]->id]) {
                readers++;
                continue;
            }
            if (position_op[n->op]) r = 1;
            unsigned char s = seen[vid] == 2 || !view_op[n->op] ? 2 : 1;
            for (int j = 0; j < n->nout; j++) {
                IrValue *o = n->out[j];
                if (!o || seen[o->id] >= s) continue;
                if (!seen[o->id]) touched[nt++] = o->id;
                seen[o->id] = s;
                stack[sp++] = o->id;
            }
        }
        if (seen[vid] == 2 && readers >= 2) r = 1;
    }
    for (int i = 0; i < nt; i++) seen[touched[i]] = 0;
    return r;
}

/* f32 data holding -inf or -FLT_MAX (an additive attention mask) */
static int holds_mask_values(const IrValue *v) {
    if (v->dtype != IR_F32 || v->has_ext || !v->data) return 0;
    const float *f = v->data;
    size_t n = v->nbytes / sizeof(float);
    for (size_t i = 0; i < n; i++)
        if (f[i] == -INFINITY || f[i] == -FLT_MAX) return 1;
    return 0;
}

/* cos(f) of column i of a [rows, cols] table, or NAN when the column does
 * not start like a cos (1) or sin (0) column of distinct angles. */
static double rotary_cos_f(const float *t, int64_t cols, int64_t i, int is_cos) {
    if (is_cos) return t[cols + i];
    double s1 = t[cols + i], s2 = t[2 * cols + i];
    if (fabs(s1) < 1e-6) return fabs(s2) < 1e-6 ? 1.0 : NAN; /* f = 0: a zero column */
    return s2 / (2 * s1);
}

/* An inline f32 table, trailing dims [T >= 3, D], leading dims 1, that is
 * RoPE's cos or sin table (the recurrence in the header comment). */
static int holds_rotary_table(const IrValue *v) {
    if (v->dtype != IR_F32 || v->has_ext || !v->data || !v->shape_known || v->shape.rank < 2)
        return 0;
    int r = v->shape.rank;
    for (int k = 0; k < r - 2; k++)
        if (v->shape.dims[k] != 1) return 0;
    int64_t rows = v->shape.dims[r - 2], cols = v->shape.dims[r - 1];
    if (rows < 3 || cols < 1) return 0;
    const float *t = v->data;
    int is_cos = t[0] == 1.0f;
    if (!is_cos && t[0] != 0.0f) return 0;
    int varies = 0;
    for (int64_t i = 0; i < cols; i++) {
        if (t[i] != (is_cos ? 1.0f : 0.0f)) return 0;
        double c = rotary_cos_f(t, cols, i, is_cos);
        if (!(fabs(c) <= 1.0 + 1e-6)) return 0;
        for (int64_t p = 1; p + 1 < rows; p++) {
            double x0 = t[(p - 1) * cols + i], x1 = t[p * cols + i], x2 = t[(p + 1) * cols + i];
            if (fabs(x1) > 1.0 + 1e-6 || fabs(x2 + x0 - 2 * c * x1) > 1e-4) return 0;
            varies |= x1 != t[i];
        }
    }
    return varies;
}

static void demote_tables(IrGraph *g, ImpUses *u) {
    int nv = g->nvalues;
    unsigned char *dep = data_dependent(g);
    int *stack = malloc(((size_t)nv * 3 + 3) * sizeof *stack);
    unsigned char *seen = calloc((size_t)nv + 1, 1);
    if (dep && stack && seen)
        for (int i = 0; i < nv; i++) {
            IrValue *v = g->values[i];
            if (v->kind != IR_VK_PARAM) continue;
            if (ir_shape_numel(&v->shape) == 1 || holds_mask_values(v) ||
                holds_rotary_table(v) || is_table(g, u, dep, v, stack, seen))
                v->kind = IR_VK_CONST;
        }
    free(dep), free(stack), free(seen);
}

void imp_demote_buffers(IrGraph *g) {
    ImpUses iu;
    /* out of memory: leave kinds as they are (a missed demotion is not an
     * error; --frozen can still demote) */
    if (imp_uses_build(g, &iu)) return;
    int nv = g->nvalues;
    Uses u = {iu.start, iu.refs, malloc((size_t)nv + 1)};
    if (u.memo) {
        for (int i = 0; i < nv; i++) u.memo[i] = -1;
        for (int i = 0; i < nv; i++) {
            IrValue *v = g->values[i];
            if (v->kind == IR_VK_PARAM && u.start[i + 1] > u.start[i] && !diff_used(g, &u, v))
                v->kind = IR_VK_CONST;
        }
        demote_tables(g, &iu);
    }
    free(u.memo);
    imp_uses_free(&iu);
}
