/* --seq against the model's maximum positions: seq_limit.h. */
#include "seq_limit.h"

#include <stdio.h>
#include <string.h>

#include "input_binds.h"

static int is_table(const IrValue *v) {
    return v && (v->kind == IR_VK_PARAM || v->kind == IR_VK_CONST) && v->shape.rank == 2;
}

/* v is the token ids, up to shape-only ops (then the table is the token
 * embedding, whose rows are the vocabulary, not positions). */
static int from_tokens(const IrValue *v, const IrValue *ids) {
    for (int k = 0; v && k < 16; k++) {
        if (v == ids) return 1;
        const IrNode *n = v->producer;
        if (!n || n->nin < 1) return 0;
        switch (n->op) {
        case IR_OP_CAST: case IR_OP_RESHAPE: case IR_OP_UNSQUEEZE: case IR_OP_SQUEEZE:
        case IR_OP_IDENTITY: case IR_OP_FLATTEN:
            v = n->in[0];
            break;
        default:
            return 0;
        }
    }
    return 0;
}

void seq_limit_explain(IrGraph *g, int64_t seq, IrError *err) {
    if (seq <= 0) return;
    const IrValue *ids = input_binds_token_input(g), *best = NULL;
    int64_t P = 0;
    const char *kind = NULL;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        const IrValue *d = n->nin > 0 ? n->in[0] : NULL;
        if (!d || (d->kind != IR_VK_PARAM && d->kind != IR_VK_CONST)) continue;
        int r = d->shape.rank;
        int64_t p = -1;
        const char *k = NULL;
        if ((n->op == IR_OP_GATHER || n->op == IR_OP_EMBEDDING || n->op == IR_OP_GATHER_ND) &&
            is_table(d) && n->nin > 1 &&
            !from_tokens(n->in[1], ids)) {
            p = d->shape.dims[0];
            k = "position table";
        } else if (n->op == IR_OP_SLICE && r >= 2 && d->shape.dims[r - 1] == d->shape.dims[r - 2]) {
            p = d->shape.dims[r - 1];
            k = "attention-mask buffer";
        }
        if (p > 0 && p < seq && (!best || p < P)) {
            best = d;
            P = p;
            kind = k;
        }
    }
    if (!best) return;
    size_t len = strlen(err->msg);
    snprintf(err->msg + len, sizeof err->msg - len,
             " -- --seq %lld exceeds the model's maximum positions %lld (its %s '%s' covers "
             "%lld): use --seq %lld or less",
             (long long)seq, (long long)P, kind, best->name, (long long)P, (long long)P);
}

/* The largest index in a constant integer tensor (INT64_MIN if none). */
static int64_t max_index(IrValue *v, int64_t *minv) {
    IrError e = {{0}};
    const void *p = ir_value_data(v, &e);
    int64_t n = ir_shape_numel(&v->shape), mx = INT64_MIN;
    *minv = INT64_MAX;
    if (!p || n <= 0) return mx;
    for (int64_t i = 0; i < n; i++) {
        int64_t x = v->dtype == IR_I64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
        if (x > mx) mx = x;
        if (x < *minv) *minv = x;
    }
    return mx;
}

int seq_limit_check(IrGraph *g, int64_t seq, IrError *err) {
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if ((n->op != IR_OP_GATHER && n->op != IR_OP_EMBEDDING) || n->nin < 2) continue;
        IrValue *d = n->in[0], *x = n->in[1];
        if (!is_table(d) || !x || x->kind != IR_VK_CONST ||
            (x->dtype != IR_I64 && x->dtype != IR_I32))
            continue;
        if (n->op == IR_OP_GATHER && ir_attr_int(n, "axis", 0) != 0) continue;
        int64_t rows = d->shape.dims[0], lo, hi = max_index(x, &lo);
        if (hi == INT64_MIN || (hi < rows && lo >= -rows)) continue;
        /* positions 0..seq-1, or shifted by a small offset (OPT's 2) */
        int64_t off = hi - (seq - 1);
        if (seq > 0 && hi >= rows && off >= 0 && off <= 8 && rows - off > 0)
            return ir_errorf(err, "--seq %lld exceeds the model's maximum positions %lld: node "
                             "'%s' (%s) reads row %lld of the position table '%s', which "
                             "has %lld rows; use --seq %lld or less",
                             (long long)seq, (long long)(rows - off), n->name ? n->name : "?",
                             ir_op_name(n->op), (long long)hi, d->name, (long long)rows,
                             (long long)(rows - off));
        return ir_errorf(err, "node '%s' (%s): constant indices '%s' reach %lld, outside the "
                         "%lld rows of '%s'", n->name ? n->name : "?", ir_op_name(n->op),
                         x->name, (long long)(hi >= rows ? hi : lo), (long long)rows, d->name);
    }
    return 0;
}
