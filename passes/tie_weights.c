/* tie-weights (passes/loss.h): re-tie weights an exporter untied.
 * torch.onnx writes a tied embedding/head as two initializers, the table
 * [V,D] and its transposed copy [D,V] for the head's MatMul.  Training them
 * apart would not follow torch, so a parameter whose bytes equal an earlier
 * parameter's transpose exactly is replaced by Transpose(earlier).  The
 * comparison is bit-exact: weights that merely look alike stay apart. */
#include <stdint.h>
#include <string.h>

#include "loss.h"

static int is_transpose_of(const float *a, const float *b, int64_t m, int64_t n) {
    /* a [m,n], b [n,m]: b[j,i] == a[i,j] bitwise */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            if (memcmp(&a[i * n + j], &b[j * m + i], sizeof(float))) return 0;
    return 1;
}

void tie_weights_tie(IrGraph *g, IrValue *a, IrValue *b) {
    IrValue *t = ir_value_new(g, b->name, IR_F32, &b->shape, IR_VK_ACT);
    ir_replace_uses(g, b, t);
    IrNode *tn = ir_node_insert(g, 0, IR_OP_TRANSPOSE, "tie/transpose", 1, &a, 1, &t);
    int64_t perm[2] = {1, 0};
    ir_node_set_ints(tn, "perm", 2, perm);
    ir_node_set_string(tn, "tied_from", b->name);
}

int pass_tie_weights(IrGraph *g, PassContext *ctx, IrError *err) {
    (void)ctx;
    int nv = g->nvalues;
    for (int i = 0; i < nv; i++) {
        IrValue *a = g->values[i];
        if (a->kind != IR_VK_PARAM || a->dtype != IR_F32 || a->shape.rank != 2) continue;
        int64_t m = a->shape.dims[0], n = a->shape.dims[1];
        for (int j = i + 1; j < nv; j++) {
            IrValue *b = g->values[j];
            if (b->kind != IR_VK_PARAM || b->dtype != IR_F32 || b->shape.rank != 2 ||
                b->shape.dims[0] != n || b->shape.dims[1] != m || !ir_value_num_uses(g, b))
                continue;
            const float *da = ir_value_data(a, err), *db;
            if (!da) return ir_error_prefix(err, "tie-weights: parameter '%s'", a->name);
            if (!(db = ir_value_data(b, err)))
                return ir_error_prefix(err, "tie-weights: parameter '%s'", b->name);
            if (!is_transpose_of(da, db, m, n)) continue;
            tie_weights_tie(g, a, b);
        }
    }
    ir_graph_compact(g);
    return 0;
}
