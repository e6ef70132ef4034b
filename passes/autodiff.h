/* Reverse-mode autodiff (passes/autodiff.c) and its gradient rule table
 * (passes/grad_rules.c, one entry per IrOp).  A rule EMITS backward IR
 * nodes: forward ops where they express the gradient (Mul, Transpose,
 * Reshape, Split, ...) and the training ops of ir/ops.def for fused ones. */
#ifndef HETC_AUTODIFF_H
#define HETC_AUTODIFF_H

#include "ir.h"
#include "pass.h"

typedef struct AdCtx AdCtx;

/* gout[j]: gradient of n->out[j] (NULL: that output receives none).  The
 * rule calls ad_contrib for each differentiable input that ad_needs. */
typedef int (*GradRuleFn)(AdCtx *c, IrNode *n, IrValue *const *gout, IrError *err);

/* 1 if the rule handles this node, else 0 with the reason in why (rules
 * that only cover some attribute values or shapes: Pow with a constant
 * exponent, ScatterND without mul/max/min, ...). */
typedef int (*GradCheckFn)(const IrNode *n, char *why, size_t whylen);

typedef struct GradRule {
    GradRuleFn fn;
    unsigned diff;     /* bit i: input i can carry a gradient */
    GradCheckFn check; /* NULL: every node of the op */
} GradRule;

/* The rule for op, or NULL if the op has none (not differentiable). */
const GradRule *grad_rule(IrOp op);
/* 1 if autodiff can take a gradient through node n, else 0 with the reason
 * (no rule for the op, or the rule's check refuses this node).  The one
 * place that knows; autodiff and autodiff_blockers ask it. */
int grad_node_ok(const IrNode *n, char *why, size_t whylen);

/* A node that stops training: a parameter's gradient would have to flow
 * through it and grad_node_ok says no. */
typedef struct AdBlocker {
    const IrNode *node;
    char why[256];
} AdBlocker;
/* The blockers of training a loss on g's float graph outputs, in graph
 * order (up to max filled; returns how many there are).  Run on the
 * forward graph (hetc import warns with it before hetc train would fail);
 * compacts g's value ids like the autodiff pass does. */
int autodiff_blockers(IrGraph *g, AdBlocker *out, int max);

/* ---- helpers rules use (autodiff.c) */
IrGraph *ad_graph(AdCtx *c);
/* 1 if v depends on a parameter and is float: its gradient is wanted */
int ad_needs(AdCtx *c, const IrValue *v);
/* a fresh backward value named after the forward value it differentiates */
IrValue *ad_value(AdCtx *c, const IrValue *like, IrDType dt, const IrShape *s);
/* emit a backward node (phase bwd) at the end of the graph */
IrNode *ad_emit(AdCtx *c, IrOp op, int nin, IrValue *const *in, int nout,
                IrValue *const *out);
/* emit op(in...) with one output shaped s; returns the output */
IrValue *ad_op1(AdCtx *c, IrOp op, const IrValue *like, const IrShape *s, int nin,
                IrValue *const *in);
/* i64 [rank] constant holding the dims of s */
IrValue *ad_shape_const(AdCtx *c, const IrShape *s);
/* g (broadcast shape) summed down to x's shape (g itself if equal) */
IrValue *ad_sum_to(AdCtx *c, IrValue *g, const IrValue *x);
/* a zero tensor of x's dtype and shape (a constant) */
IrValue *ad_zeros(AdCtx *c, const IrValue *x);
/* add g to x's gradient (g is summed to x's shape first); no-op unless
 * ad_needs(x) */
int ad_contrib(AdCtx *c, IrValue *x, IrValue *g, IrError *err);

/* ---- the pass */
/* Differentiate the graph output named "loss" (a scalar) with respect to
 * every parameter; gradients become graph outputs "grad/<param>". */
int pass_autodiff(IrGraph *g, PassContext *ctx, IrError *err);
/* Seeded form (pipeline stages, passes/partition.c): the backward of a
 * graph whose outputs feed other programs.  Each seed's value starts with
 * the given gradient (a value of the same dtype and shape, typically a
 * graph input; grad NULL: 1, for an f32 scalar loss); seeds of one value
 * add up.  Besides parameters (outputs "grad/<P>" as pass_autodiff), the
 * gradient of each wrt[i] (e.g. a received activation, a graph input) is
 * returned in wrt_grad[i], NULL if none reaches it.  Runs once per graph. */
typedef struct AdSeed {
    IrValue *value;
    IrValue *grad;
} AdSeed;
int autodiff_seeded(IrGraph *g, const AdSeed *seeds, int nseeds, IrValue *const *wrt, int nwrt,
                    IrValue **wrt_grad, IrError *err);
/* The gradient value of param p after pass_autodiff (NULL if none). */
IrValue *ad_param_grad(IrGraph *g, const IrValue *p);

#endif
