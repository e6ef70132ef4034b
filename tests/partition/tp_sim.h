/* Simulated TP ranks for the tensor-parallel pattern tests
 * (tests/partition/test_tp_*.c).
 *
 * A forward graph with input "x" and output "y" is sharded for each rank of
 * tp (tp_shard); autodiff runs on each rank's graph, seeded by the same dy
 * (every TP rank holds the replicated output).  The ranks are simulated in
 * ONE host-executor run: their train graphs are merged into one graph in
 * which the k-th TpAllReduce of every rank becomes the sum of the ranks'
 * k-th inputs (the ranks' graphs have the same structure).  Oracle: the
 * unsharded graph's hexec run.  Compared: y and dx on every rank,
 * replicated parameters' gradients on every rank, and sharded parameters'
 * gradients against the rank's slice of the unsharded one (TpParamShard). */
#ifndef HETC_TESTS_TP_SIM_H
#define HETC_TESTS_TP_SIM_H

#include <stdint.h>
#include <stdio.h>

#include "ir.h"
#include "tp_shard.h"

#define TP_SIM_MAX_TP 8

extern int tp_sim_fails;
#define CHECK(c, ...)                                                    \
    do {                                                                 \
        if (!(c)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);         \
            fprintf(stderr, __VA_ARGS__);                                \
            fprintf(stderr, "\n");                                       \
            tp_sim_fails++;                                              \
        }                                                                \
    } while (0)

/* xorshift stream; tests print the state so a failing case can be rerun */
extern uint64_t tp_sim_rs;
double tp_sim_urand(void);
int64_t tp_sim_irand(int64_t lo, int64_t hi);

/* graph builders: a parameter with uniform(-sc, sc) data; an activation
 * whose shape shape-infer decides; a one-output node */
IrValue *tp_sim_param(IrGraph *g, const char *name, int rank, const int64_t *dims, double sc);
IrValue *tp_sim_act(IrGraph *g, const char *name);
IrValue *tp_sim_op1(IrGraph *g, IrOp op, const char *name, int nin, IrValue **in);
IrValue *tp_sim_shape_const(IrGraph *g, const char *name, int n, const int64_t *v);

/* forward + backward seeded at y by input dy: outputs y, dx, grad/P */
int tp_sim_train(IrGraph *g, IrError *err);
/* the ranks' train graphs as one graph (values prefixed r<k>/) */
IrGraph *tp_sim_merge_ranks(IrGraph **rg, int tp, IrError *err);
IrTensor *tp_sim_find(IrTensor **t, int n, const char *name);
/* L2 relative error (0 when both sides are rounding noise of a zero) */
double tp_sim_rel(const float *a, const float *b, int64_t n);
IrTensor *tp_sim_tensor(const char *name, const IrShape *s, const float *d);
double tp_sim_compare(const char *what, IrTensor **ro, int nro, IrTensor **mo, int nmo, int tp,
                      TpParamShard *const *shards, const int *nshards, int *checked);

/* per rank, after tp_shard: check the result's pattern counts */
typedef void (*TpSimCheck)(const TpShardResult *r, int rank, const char *what, void *arg);
/* the whole comparison for forward graph ref (trained in place; the
 * caller frees it); returns the worst relative error, -1 if it did not run
 * (a CHECK failed) */
double tp_sim_run(IrGraph *ref, int tp, const char *what, TpSimCheck check, void *arg);

#endif
