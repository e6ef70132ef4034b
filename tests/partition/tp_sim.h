/* Simulated TP ranks for the tensor-parallel pattern tests
 * (tests/partition/test_tp_*.c).
 *
 * A forward graph with input "x" and output "y" is sharded for each rank of
 * tp (tp_shard); autodiff runs on each rank's graph, seeded by the same dy
 * (every TP rank holds the replicated output).  The ranks are simulated in
 * ONE host-executor run: their train graphs are merged into one graph in
 * which the k-th TpAllReduce of every rank becomes the sum of the ranks'
 * k-th inputs (the ranks' graphs have the same structure; a TpAllReduce
 * with attr op "max", the vocab-parallel loss's row max, their maximum).  Oracle: the
 * unsharded graph's hexec run.  Compared: y and dx on every rank,
 * replicated parameters' gradients on every rank, and sharded parameters'
 * gradients against the rank's slice of the unsharded one (TpParamShard). */
#ifndef HETC_TESTS_TP_SIM_H
#define HETC_TESTS_TP_SIM_H

#include <stdint.h>
#include <stdio.h>

#include "ir.h"
#include "lower_stage.h"
#include "partition.h"
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
/* a block's input "x" [B, T, D] */
IrValue *tp_sim_input_x(IrGraph *g, int64_t B, int64_t T, int64_t D);
/* a built forward graph's end: y its output, shapes inferred (exits
 * naming `what` if that fails: the test's own graph is wrong); returns g */
IrGraph *tp_sim_output(IrGraph *g, IrValue *y, const char *what);
/* main()'s model cases: fn(<source root argv[1]>/rel) when the test was
 * given the root */
void tp_sim_model(int argc, char **argv, const char *rel, void (*fn)(const char *path));

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

/* The same for a loss graph (ref: inputs of token ids / "targets", output
 * "loss", e.g. after pass_loss): each rank's graph is differentiated from
 * its loss replica (pass autodiff), the ranks merged (TpAllReduce op "max"
 * -> Max), and the loss and every parameter gradient compared (shards
 * against the rank's slice).  Integer inputs are drawn in [0, id_hi);
 * ignore_index != INT64_MIN: about a fifth of "targets" get it. */
double tp_sim_run_loss(IrGraph *ref, int tp, int64_t id_hi, int64_t ignore_index,
                       const char *what, TpSimCheck check, void *arg);

/* An ONNX model (batch 2, seq) through the default pipeline, then by
 * flags: TP_SIM_LAYERS modules and layers detected (*nlayers: their
 * count), TP_SIM_LOSS the exporter's untied weights re-tied and the loss
 * appended, TP_SIM_SHAPES shape-infer last.  NULL after a CHECK failure. */
enum { TP_SIM_LAYERS = 1, TP_SIM_LOSS = 2, TP_SIM_SHAPES = 4 };
IrGraph *tp_sim_import(const char *path, int64_t seq, int flags, int *nlayers);

/* Forward only, for a model's logits: g sharded for every rank (check: the
 * pattern counts per rank), the ranks merged and run on token ids uniform
 * in [0, tok_hi] (g's first input), and every output of every rank
 * compared with g's run.  *rank0 (when given): rank 0's counts (graph and
 * shards NULL).  Returns the worst relative error, -1 if it did not run. */
double tp_sim_run_logits(IrGraph *g, int tp, int64_t tok_hi, const char *what, TpSimCheck check,
                         void *arg, TpShardResult *rank0);

/* lower stage st of the stages all[0..nall) as the tests run them: 2 rows,
 * seq 8, one adamw step, schedule F0 B0 */
int tp_sim_lower(const PartStage *st, const PartStage *all, int nall, const int *dp, int layers,
                 LeProgram *p, char **cfg, MemPlan *mp, IrError *err);

/* main()'s end: the worst error, the failure count; the exit status */
int tp_sim_finish(double worst);

#endif
