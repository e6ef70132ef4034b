/* The trainer's state: every trainable parameter of a training graph (one
 * with a "grad/<param>" output), its fp32 weights (owned, written back
 * into the graph's parameter value so the executor reads the current
 * weights), accumulated gradient and optimizer state. */
#ifndef HETC_TRAIN_STATE_H
#define HETC_TRAIN_STATE_H

#include "ir.h"

typedef struct TrainParam {
    IrValue *value;   /* the parameter */
    int out_index;    /* its gradient's position in the graph outputs */
    int64_t n;
    float *data;      /* == value->data (owned by the value) */
    float *grad;      /* accumulated over microbatches (allocated when a step has two) */
    const float *gcur; /* this step's gradient: grad, or the training run's
                          grad/<param> output itself (one microbatch, scale 1) */
    float *m, *v;     /* AdamW moments / SGD momentum buffer (m; v NULL): the
                         update graph's optimizer-state values' data */
    int upd_out[3];   /* update-graph outputs carried back into data, m, v */
    IrValue *state[2];
} TrainParam;

typedef struct TrainState {
    IrGraph *g;
    TrainParam *params;
    int nparams;
    int64_t total;    /* parameter elements */
    int loss_index;   /* "loss" in the graph outputs */
    int64_t step;     /* optimizer steps taken */
    IrGraph *upd;     /* the update graph (optimizer pass over grad/<param> inputs) */
    int norm_out;     /* "grad_norm" in its outputs */
    /* the executor runs, planned once: no allocation per step after the
     * first (codegen/hostexec.h HxRun); the update's P, m, v are donated,
     * so in-place ops update the trainer's buffers directly */
    struct HxRun *run, *urun;
    IrTensor *uin;    /* the update's inputs: grad/<param>..., lr, step */
    IrTensor **uinp;
    float *lr_buf;
    int64_t *step_buf;
    int grads_zero;   /* zero_grads since the last forward_backward */
    int borrowed;     /* gcur points into the training run's outputs */
} TrainState;

struct OptimOpts;
/* g: the training graph (fwd + bwd); the update runs as a graph of its own
 * (passes/optimizer.c on inputs grad/<param>) after the microbatches of a
 * step have accumulated their gradients. */
int train_state_init(TrainState *s, IrGraph *g, const struct OptimOpts *o, IrError *err);
void train_state_free(TrainState *s);
void train_state_zero_grads(TrainState *s);
/* run the graph on inputs; grad += scale * gradient; *loss = the loss.
 * The first microbatch after zero_grads with scale 1 is not copied: the
 * step reads the run's gradient outputs in place (until the next run). */
int train_state_forward_backward(TrainState *s, IrTensor *const *in, int nin, float scale,
                                 double *loss, IrError *err);
/* parameter i's gradient accumulated since zero_grads (before clipping; the step
 * clips it in place, so read it before train_state_step) */
const float *train_state_grad(TrainState *s, int i);
/* allocations the executor runs made (hostexec.h HxRunStats.allocs) */
int64_t train_state_allocs(const TrainState *s);
/* one optimizer step at learning rate lr through the update graph (global
 * norm clipping inside); *norm = the gradient norm before clipping */
int train_state_step(TrainState *s, double lr, double *norm, IrError *err);
/* DIR/step-N/<param>.bin per parameter and optimizer state with an FNV-1a
 * checksum in DIR/step-N/MANIFEST; written to a temporary directory and
 * renamed into place, so a crash never leaves a half checkpoint. */
int train_state_save(const TrainState *s, const char *dir, int64_t step, IrError *err);
/* The newest complete checkpoint under dir: the largest N of a
 * DIR/step-N/MANIFEST (temporary step-N.tmp directories are not complete).
 * 0 with *step and path set, 1 when there is none, -1 with err when dir
 * cannot be read. */
int train_state_newest(const char *dir, int64_t *step, char *path, size_t pathlen, IrError *err);
/* Load a train_state_save directory into s: every parameter's weights and
 * optimizer state (each file's size and FNV-1a checksum checked against
 * the MANIFEST), and the step count.  Every trained parameter must be
 * there, with this optimizer's state kinds, and nothing else: a checkpoint
 * of another model or optimizer is refused naming the parameter.  On
 * error s may be partly loaded. */
int train_state_load(TrainState *s, const char *stepdir, IrError *err);
/* The weights (not the optimizer state, nor the step) of a layer-wise stage
 * checkpoint's step directory (runtime/rt.h: the stage binaries' format),
 * by parameter name; every parameter must be found. */
int train_state_load_weights_layers(TrainState *s, const char *stepdir, IrError *err);
/* copy model_path to out_path with every initializer replaced by the
 * trained weights (re-tied copies get the transposed trained weight) */
int train_state_export_onnx(const TrainState *s, const char *model_path, const char *out_path,
                            IrError *err);

#endif
