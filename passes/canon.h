/* canonicalize internals (private to passes/): a small matcher toolkit and
 * the pattern entry points, one per canon_*.c file.
 *
 * A pattern is anchored at the LAST node of the exporter spelling (the one
 * whose output the canonical op will produce) and walks producers
 * backwards.  Every node it consumes goes into a Match; before rewriting it
 * checks that no value produced inside the match (other than the root's
 * output) is used outside it, so a rewrite never changes what any other
 * node sees. */
#ifndef HETC_CANON_H
#define HETC_CANON_H

#include "ir.h"

#define MATCH_MAX 64

typedef struct Canon {
    IrGraph *g;
    int *uses;     /* uses[value->id]: live node inputs + graph outputs */
    int nuses;
    int rewrites[IR_OP_COUNT]; /* canonical ops produced, by op (verbose) */
    /* masks already found causal: every layer of an export usually shares
     * one mask constant, and checking it is O(T*S) */
    struct { const IrValue *v; int kind; int64_t t, s; } causal_memo[8];
    int ncausal_memo;
} Canon;

typedef struct Match {
    IrNode *nodes[MATCH_MAX];
    int n;
} Match;

void canon_count_uses(Canon *c);
int canon_uses(const Canon *c, const IrValue *v);

/* Patterns read required inputs and the first output without checking:
 * nodes missing one, or with inputs of unknown shape, never match. */
int canon_well_formed(const IrNode *n);
/* v's producer if it is live, well formed and of op `op`; NULL otherwise. */
IrNode *canon_def(const IrValue *v, IrOp op);
/* v is a CONST with one element; its value in *x. */
int canon_const_scalar(IrValue *v, double *x);
/* v is a CONST or PARAM with data (a weight, a bias, a norm scale). */
int canon_is_weight(const IrValue *v);
int canon_near(double a, double b, double rtol);

void match_add(Match *m, IrNode *n);
int match_has(const Match *m, const IrNode *n);
/* Values produced inside m, other than root's output, are used only by
 * nodes of m and are not graph outputs. */
int match_internal(const Canon *c, const Match *m, const IrNode *root);

/* Leaves of the tree of Mul nodes rooted at v (v's own producer always
 * expands; inner Muls only when used once): *n leaves, Muls added to m.
 * Returns 0, or -1 if more than max leaves. */
int canon_mul_leaves(const Canon *c, IrValue *v, IrValue **leaves, int max, int *n, Match *m);

/* An attribute of a node canonicalize creates: string if s, else float if
 * is_float, else int. */
typedef struct CanonAttr {
    const char *name;
    int is_float;
    int64_t i;
    double f;
    const char *s;
} CanonAttr;

/* Replace root by a new node `op`(in) producing root's output, named after
 * root, with attrs, at root's position; kill every node of m (root included) and
 * recount uses.  The new node's output shape is re-inferred (it must agree
 * with what root produced). */
IrNode *canon_rewrite(Canon *c, Match *m, IrNode *root, IrOp op, int nin, IrValue *const *in,
                      const CanonAttr *attrs, int nattrs, IrError *err);
/* Insert a helper node op(in) -> fresh value before `before`, shape inferred. */
IrValue *canon_insert(Canon *c, IrNode *before, IrOp op, const char *name, int nin,
                      IrValue *const *in, IrError *err);

/* Patterns: each returns 1 rewritten, 0 no match, -1 error. */
typedef int (*CanonPatternFn)(Canon *c, IrNode *root, IrError *err);
int canon_identity(Canon *c, IrNode *root, IrError *err);
int canon_attention(Canon *c, IrNode *root, IrError *err);
int canon_layer_norm(Canon *c, IrNode *root, IrError *err);
int canon_rms_norm(Canon *c, IrNode *root, IrError *err);
int canon_gelu_erf(Canon *c, IrNode *root, IrError *err);
int canon_gelu_tanh(Canon *c, IrNode *root, IrError *err);
int canon_silu(Canon *c, IrNode *root, IrError *err);
int canon_linear_bias(Canon *c, IrNode *root, IrError *err);
int canon_linear_gemm(Canon *c, IrNode *root, IrError *err);
int canon_linear(Canon *c, IrNode *root, IrError *err);
int canon_embedding(Canon *c, IrNode *root, IrError *err);

#endif
