/* Embedding: Gather(table, ids) on axis 0 of a 2-D parameter with integer
 * ids -> Embedding(table, ids).  A Gather of an activation or of a shape
 * vector stays a Gather: only a trainable table is an embedding. */
#include "canon.h"

int canon_embedding(Canon *c, IrNode *root, IrError *err) {
    if (root->op != IR_OP_GATHER || root->nin != 2) return 0;
    IrValue *table = root->in[0], *ids = root->in[1];
    if (table->kind != IR_VK_PARAM || table->shape.rank != 2 || table->dtype != IR_F32) return 0;
    if (ids->dtype != IR_I64 && ids->dtype != IR_I32) return 0;
    int64_t axis = ir_attr_int(root, "axis", 0);
    if (axis != 0 && axis != -2) return 0;
    Match m = {0};
    IrValue *in[2] = {table, ids};
    return canon_rewrite(c, &m, root, IR_OP_EMBEDDING, 2, in, NULL, 0, err) ? 1 : -1;
}
