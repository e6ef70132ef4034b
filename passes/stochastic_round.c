/* stochastic-rounding: the bf16 copies of the fp32 master weights rounded
 * stochastically (hetc compile / train --bf16-rounding stochastic, issue
 * 17; docs/TRAINING.md "Where rounding happens").
 *
 * Runs after mixed-precision.  Every live Cast(to=bf16) whose input is a
 * parameter gets the attribute `sr`, the parameter's key (sr_key of its
 * name): its kernel (kernels/host/hk_bf16.h hk_bf16_round_sr) rounds
 * element i of step s away from zero with
 * probability d / 2^16 (d the dropped bits), drawing its bits from
 * (key, s, i) -- llm.c's stochastic rounding of the bf16 weights written
 * from the fp32 master copy.  The key comes from the name, so every stage
 * split, DP rank, engine and resumed run rounds a weight the same way, and
 * the backward's re-cast of a weight (autodiff copies `sr`) gives the
 * forward's bits.  Activations, gradients and the Linears' outputs keep
 * round-to-nearest-even.  A graph without such a Cast is left as it is. */
#include <stdint.h>

#include "mixed_precision.h"

/* FNV-1a of the name folded to 31 bits, never 0 (0 reads as "nearest") */
static int64_t sr_key(const char *name) {
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 16777619u;
    h &= 0x7fffffffu;
    return h ? (int64_t)h : 1;
}

int pass_stochastic_round(IrGraph *g, PassContext *ctx, IrError *err) {
    (void)ctx;
    (void)err;
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->dead || n->op != IR_OP_CAST || n->nin != 1 || n->nout != 1 || !n->in[0] ||
            !n->out[0] || n->in[0]->kind != IR_VK_PARAM || n->in[0]->dtype != IR_F32 ||
            n->out[0]->dtype != IR_BF16)
            continue;
        ir_node_set_int(n, "sr", sr_key(n->in[0]->name));
    }
    return 0;
}

int mixed_precision_has_sr(const IrGraph *g) {
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->op == IR_OP_CAST &&
            ir_attr_int(g->nodes[i], "sr", 0))
            return 1;
    return 0;
}
