/* canonicalize: rewrite exporter spellings into the canonical training ops
 * (DESIGN §3).  The patterns live in canon_*.c; this file is their table
 * and the driver.  Each pattern sweeps the whole graph before the next one
 * runs, in table order: Identity / no-op Cast removal first (so patterns
 * see weights and values directly), then attention (its MatMuls are not Linears),
 * LayerNorm before RMSNorm (a bias-free LayerNorm also looks like an
 * RMSNorm of x - mean(x)), Add-anchored Linear before bare MatMul Linear.
 * Whatever no pattern matches stays as primitive ops. */
#include <stdio.h>
#include <stdlib.h>

#include "canon.h"
#include "pass.h"

typedef struct CanonPattern {
    const char *name;
    CanonPatternFn fn;
} CanonPattern;

static const CanonPattern patterns[] = {
    {"identity", canon_identity},
    {"attention", canon_attention},
    {"layer-norm", canon_layer_norm},
    {"rms-norm", canon_rms_norm},
    {"gelu-erf", canon_gelu_erf},
    {"gelu-tanh", canon_gelu_tanh},
    {"silu", canon_silu},
    {"linear-bias", canon_linear_bias},
    {"linear-gemm", canon_linear_gemm},
    {"linear", canon_linear},
    {"embedding", canon_embedding},
};
#define NPATTERNS ((int)(sizeof patterns / sizeof patterns[0]))

int pass_canonicalize(IrGraph *g, PassContext *ctx, IrError *err) {
    if (ir_graph_toposort(g, err)) return -1;
    Canon c = {.g = g};
    canon_count_uses(&c);
    int rc = 0;
    for (int p = 0; p < NPATTERNS && rc == 0; p++) {
        /* Backwards, so a pattern anchored at the last node of a spelling
         * sees the longest form first (LayerNorm with its bias Add before
         * the scale Mul alone).  Rewrites insert nodes at or before i, which
         * leaves indices below i in place. */
        for (int i = g->nnodes - 1; i >= 0 && rc == 0; i--) {
            if (i >= g->nnodes) continue;
            IrNode *n = g->nodes[i];
            if (n->dead || !canon_well_formed(n)) continue;
            int r = patterns[p].fn(&c, n, err);
            if (r < 0) rc = ir_error_prefix(err, "pattern '%s' at node '%s'", patterns[p].name,
                                            n->name);
        }
    }
    if (rc == 0 && ctx && ctx->verbose) {
        fprintf(stderr, "hetc: canonicalize:");
        int any = 0;
        for (int op = 0; op < IR_OP_COUNT; op++)
            if (c.rewrites[op]) {
                fprintf(stderr, " %s %d", ir_op_name((IrOp)op), c.rewrites[op]);
                any = 1;
            }
        fprintf(stderr, "%s\n", any ? "" : " no rewrites");
    }
    free(c.uses);
    ir_graph_compact(g);
    return rc;
}
