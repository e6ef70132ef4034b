/* Identity and no-op Cast (to the dtype the value already has) forward
 * their input: exporters leave them around parameters that torch
 * deduplicated (Identity of a shared LayerNorm weight) and around code that
 * casts f32 to f32 (LLaMA's RMSNorm).  Removing them first lets the other
 * patterns see the weights and values they consume directly.  A graph
 * output keeps its producer (its name is the model's interface). */
#include "canon.h"

int canon_identity(Canon *c, IrNode *root, IrError *err) {
    (void)err;
    int noop = root->op == IR_OP_IDENTITY ||
               (root->op == IR_OP_CAST && root->in[0] &&
                ir_attr_int(root, "to", -1) == (int64_t)root->in[0]->dtype);
    if (!noop || !root->in[0] || !root->out[0] || root->out[0]->is_graph_output) return 0;
    ir_replace_uses(c->g, root->out[0], root->in[0]);
    ir_node_kill(root);
    canon_count_uses(c);
    return 1;
}
