/* dce: remove nodes none of whose outputs is used by a live node or is a
 * graph output.  One backward sweep over the topological order suffices:
 * a node's users all come after it. */
#include <stdlib.h>

#include "pass.h"

int pass_dce(IrGraph *g, PassContext *ctx, IrError *err) {
    (void)ctx;
    if (ir_graph_toposort(g, err)) return -1;
    for (int i = 0; i < g->nvalues; i++) g->values[i]->id = i;
    int *uses = ir_xcalloc((size_t)(g->nvalues ? g->nvalues : 1), sizeof *uses);
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j]) uses[n->in[j]->id]++;
    }
    for (int i = 0; i < g->noutputs; i++) uses[g->outputs[i]->id]++;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        IrNode *n = g->nodes[i];
        if (n->dead) continue;
        int live = 0;
        for (int j = 0; j < n->nout; j++)
            if (n->out[j] && uses[n->out[j]->id]) live = 1;
        if (live) continue;
        ir_node_kill(n);
        for (int j = 0; j < n->nin; j++)
            if (n->in[j]) uses[n->in[j]->id]--;
    }
    free(uses);
    ir_graph_compact(g);
    return 0;
}
