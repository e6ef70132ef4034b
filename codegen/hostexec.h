/* Host executor: runs an IrGraph with the fp32 (and integer) reference
 * kernels of kernels/host, one table entry per IrOp (codegen/hostexec_ops.c).
 * It is the host backend `hetc run` and `hetc train` use (a persistent
 * HxRun per graph, below), and const-fold evaluates nodes
 * through it, so there is one way to compute an op on the host.
 *
 * Preconditions: the graph is verified and every value's shape is static
 * (run shape-infer first).
 */
#ifndef HETC_HOSTEXEC_H
#define HETC_HOSTEXEC_H

#include "ir.h"

/* 1 if the executor has a kernel for op (for table-completeness tests). */
/* The deterministic contents `hetc profile` gives a layer's inputs,
 * parameters and states (nb bytes of v's tensor at h), on the host dry run
 * and the device alike (driver/cmd_profile.c, interp/cuda/cudaprof.c):
 * ids and integer inputs 0 (always in range), floats small and varied (no
 * overflow in exp/softmax, no denormals). */
void hexec_fill_pattern(const IrValue *v, void *h, size_t nb);

int hexec_op_supported(IrOp op);
/* 1 if it can run op on these input dtypes (conformance: "unsupported"). */
int hexec_node_supported(const IrNode *n, char *why, size_t whylen);

/* Evaluate one node whose inputs all have data (CONST or PARAM values).
 * Its outputs receive owned data (ir_value_set_data); kinds are unchanged. */
int hexec_eval_node(IrGraph *g, IrNode *n, IrError *err);

/* Run one node into caller-provided buffers: in[i] the bytes of input i
 * (NULL for an omitted optional input), out[i] a ZEROED buffer of output
 * i's static shape and dtype (NULL where n->out[i] is NULL).  This is how
 * stage binaries run a node on arena memory (runtime/stage: hetrt_node);
 * errors name the node and its op. */
int hexec_call_node_into(IrNode *n, const void **in, void **out, IrError *err);

/* A persistent run of one graph: a static memory plan (hostexec_run.c)
 * made once, then any number of steps that allocate nothing after the
 * first (which allocates the arena).  Node outputs live in one arena at
 * first-fit offsets over their live ranges; each output is zeroed before
 * its node runs, except where the op entry marks it in place
 * (HxOpEntry.inplace) and it takes a dead input's buffer.  hetc train
 * keeps one run for the training graph and one for its update graph. */
typedef struct HxRunOpts {
    /* values no node produces (PARAM, OPTSTATE, INPUT), by name, whose
     * storage the caller lets the run overwrite: an in-place output may
     * take such an input's buffer at its last read, so the step updates
     * the caller's data (hetc train's P, m, v).  The run never writes a
     * value that is not donated. */
    const char *const *donate;
    int ndonate;
} HxRunOpts;

typedef struct HxRunStats {
    int64_t steps;        /* completed steps */
    int64_t allocs;       /* allocations the steps made (the arena, on the first) */
    int64_t alloc_bytes;
    int64_t arena_bytes;  /* the node outputs' arena */
    int64_t value_bytes;  /* what one buffer per node output would take */
    int inplace;          /* outputs that take an input's buffer */
    int donated;          /* ... of those, outputs written over a donated value */
} HxRunStats;

typedef struct HxRun HxRun;
/* Plan g (verified, static shapes, compacted ids); o may be NULL.  Errors
 * name the node / value at fault (unsupported op, dtype, non-static shape). */
HxRun *hexec_run_new(IrGraph *g, const HxRunOpts *o, IrError *err);
/* One step: inputs matched to graph inputs by name (every graph input must
 * be given each step; dtype and shape must match exactly; their data is
 * read in place, never copied). */
int hexec_run_step(HxRun *r, IrTensor *const *inputs, int ninputs, IrError *err);
/* The 0-based optimizer step the next hexec_run_step runs (hetc train's
 * executor engine sets it before each forward): what a Cast with `sr`
 * (--bf16-rounding stochastic) draws its rounding bits with.  Such a Cast
 * fails in a run that never set it. */
void hexec_run_set_step(HxRun *r, int64_t step);
int hexec_run_noutputs(const HxRun *r);
/* Output i's data after the last step, BORROWED: valid until the next step
 * or hexec_run_free (a donated value's storage when the output was written
 * over it, a fed input's buffer when the output is a graph input). */
const void *hexec_run_output(const HxRun *r, int i, size_t *nbytes);
void hexec_run_stats(const HxRun *r, HxRunStats *s);
void hexec_run_free(HxRun *r);

/* One step of a fresh run (hexec_run_new + step + free).  On success
 * *outputs is a malloc'd array of *noutputs tensors in graph-output order,
 * each a copy named after its value. */
int hexec_run(IrGraph *g, IrTensor *const *inputs, int ninputs, IrTensor ***outputs,
              int *noutputs, IrError *err);

#endif
