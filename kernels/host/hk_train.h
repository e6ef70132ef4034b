/* Host training kernels: backward rules, the fused loss and the optimizer
 * steps, fp32 on raw pointers and dims.  Like hk.h, nothing here knows the
 * IR; the autodiff and optimizer passes (and the stage binaries) call these.
 * docs/TRAINING_KERNELS.md lists each formula beside the PyTorch function it
 * matches and the tolerances the tests hold it to.
 *
 * Conventions (shared with hk.h):
 *  - tensors are dense row-major fp32; "rows" means the tensor viewed as
 *    [outer, n] with the normalised / softmaxed axis last.
 *  - functions that can fail return 0 or -1 and write a one-line reason to
 *    `err` (HK_ERRLEN bytes) when it is non-NULL.
 *  - a gradient output pointer may be NULL: that gradient is not computed.
 *  - `accum` != 0 adds the gradient into the output (a parameter used twice,
 *    or microbatch accumulation); 0 overwrites it.  Kernels without an
 *    `accum` flag overwrite.
 *  - reductions over rows/batch accumulate in double.
 */
#ifndef HETC_HK_TRAIN_H
#define HETC_HK_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "hk.h" /* HK_ERRLEN, HkDType */

/* ------------------------------------------------------------ matmul / linear */
/* Gradients of C[b] = op(A[b]) op(B[b]) for b < batch, op = transpose when
 * ta / tb is set.  A is stored [batch][M,K] ([K,M] if ta), B [batch][K,N]
 * ([N,K] if tb), dC [batch][M,N].  a_shared / b_shared: the operand is one
 * matrix used by every batch element (batch stride 0, e.g. a weight), so
 * its gradient is summed over the batch.  General numpy batch broadcasting
 * is: expand, call this, then hk_reduce_sum_to_shape_f32.
 * Matches torch.matmul's autograd: dA = dC op(B)^T, dB = op(A)^T dC. */
int hk_matmul_backward_f32(const float *a, const float *b, const float *dc, int64_t batch,
                           int64_t M, int64_t N, int64_t K, int ta, int tb, int a_shared,
                           int b_shared, float *da, float *db, int accum, char *err);

/* Gradients of y[M,N] = x[M,K] w[K,N] + bias[N] (the IR's Linear, weight
 * stored [in,out]; torch.nn.functional.linear(x, w.T, bias)):
 * dx = dy w^T, dw = x^T dy, dbias = sum_rows dy.  accum applies to dw, dbias. */
int hk_linear_backward_f32(const float *x, const float *w, const float *dy, int64_t M,
                           int64_t K, int64_t N, float *dx, float *dw, float *dbias, int accum,
                           char *err);

/* ------------------------------------------------------------ normalisation */
/* Per-row statistics of LayerNorm (biased variance, like torch):
 * mean[r], rstd[r] = 1 / sqrt(var + eps). */
void hk_layernorm_stats_f32(const float *x, int64_t outer, int64_t n, double eps, float *mean,
                            float *rstd);
/* torch.nn.functional.layer_norm backward over rows of n.  mean/rstd are
 * the saved statistics or NULL (recomputed).  With xhat = (x-mean)*rstd,
 * g = dy*scale: dx = rstd * (g - mean(g) - xhat * mean(g*xhat)),
 * dscale = sum_rows dy*xhat, dbias = sum_rows dy.  accum: dscale, dbias. */
int hk_layernorm_backward_f32(const float *x, const float *scale, const float *dy,
                              const float *mean, const float *rstd, int64_t outer, int64_t n,
                              double eps, float *dx, float *dscale, float *dbias, int accum,
                              char *err);
/* RMSNorm y = x * r * scale, r = 1/sqrt(mean(x^2) + eps) (LLaMA's
 * RMSNorm, torch.nn.functional.rms_norm).  rstd: saved r per row or NULL.
 * dx = r*g - x * r^3 * mean(g*x) with g = dy*scale; dscale = sum_rows dy*x*r. */
int hk_rmsnorm_backward_f32(const float *x, const float *scale, const float *dy,
                            const float *rstd, int64_t outer, int64_t n, double eps, float *dx,
                            float *dscale, int accum, char *err);

/* ------------------------------------------------------------ softmax */
/* Backward of y = softmax(x) (log = 0) or log_softmax(x) (log = 1) along
 * `axis`, given the forward output y:
 *   softmax:     dx = y * (dy - sum(dy * y))        (torch._softmax_backward_data)
 *   log_softmax: dx = dy - exp(y) * sum(dy)         (torch._log_softmax_backward_data) */
int hk_softmax_backward_f32(const float *y, const float *dy, int rank, const int64_t *dims,
                            int axis, int log, float *dx, char *err);

/* ------------------------------------------------------------ elementwise */
/* Unary rules dx = dy * f'(x), one table entry per op.  Entries that are
 * cheaper from the output use y when given and recompute it from x when y
 * is NULL; x is always required. */
typedef enum HkUnaryGrad {
    HK_UG_EXP,        /* y = exp(x):      f' = y */
    HK_UG_LOG,        /* y = log(x):      f' = 1/x */
    HK_UG_SQRT,       /* y = sqrt(x):     f' = 1/(2y) */
    HK_UG_TANH,       /* y = tanh(x):     f' = 1 - y^2 */
    HK_UG_SIGMOID,    /* y = sigmoid(x):  f' = y(1-y) */
    HK_UG_ERF,        /* y = erf(x):      f' = 2/sqrt(pi) exp(-x^2) */
    HK_UG_RELU,       /* y = max(x,0):    f' = x > 0 (0 at 0, like torch) */
    HK_UG_NEG,        /* y = -x */
    HK_UG_RECIPROCAL, /* y = 1/x:         f' = -y^2 */
    HK_UG_GELU,       /* y = x Phi(x):    f' = Phi(x) + x phi(x) */
    HK_UG_GELU_TANH,  /* tanh approximation (torch approximate="tanh") */
    HK_UG_SILU,       /* y = x s(x):      f' = s(1 + x(1-s)) */
    HK_UG_COUNT
} HkUnaryGrad;
const char *hk_unary_grad_name(HkUnaryGrad op); /* "exp", "gelu_tanh", ... */
int hk_unary_grad_from_name(const char *name, HkUnaryGrad *op);
int hk_unary_backward_f32(HkUnaryGrad op, const float *x, const float *y, const float *dy,
                          int64_t n, float *dx, char *err);

/* Binary rules for same-shape operands y = a (op) b; broadcast operands are
 * expanded first and their gradient summed back with
 * hk_reduce_sum_to_shape_f32.
 *   add: da = dy,  db = dy          sub: da = dy, db = -dy
 *   mul: da = dy b, db = dy a       div: da = dy / b, db = -dy a / b^2
 *   pow: da = dy b a^(b-1), db = dy a^b log(a), 0 where a == 0 and b >= 0
 *        (torch's pow_backward_exponent masks that case the same way). */
typedef enum HkBinaryGrad {
    HK_BG_ADD,
    HK_BG_SUB,
    HK_BG_MUL,
    HK_BG_DIV,
    HK_BG_POW,
    HK_BG_COUNT
} HkBinaryGrad;
const char *hk_binary_grad_name(HkBinaryGrad op);
int hk_binary_grad_from_name(const char *name, HkBinaryGrad *op);
int hk_binary_backward_f32(HkBinaryGrad op, const float *a, const float *b, const float *dy,
                           int64_t n, float *da, float *db, char *err);

/* Gradient of numpy broadcasting: g has the broadcast shape (grank,
 * gdims); out (rank, dims) is the input's shape that broadcast up to it;
 * out = g summed over every broadcast axis (sum_to_size in torch).
 * -1 if (rank, dims) does not broadcast to gdims. */
int hk_reduce_sum_to_shape_f32(const float *g, int grank, const int64_t *gdims, int rank,
                               const int64_t *dims, float *out, char *err);

/* ------------------------------------------------------------ attention */
/* Backward of hk_attention_f32 (same layouts and mask: causal masks key j
 * when j > i + (S - T)): for each of `batch` heads, recompute
 * P = softmax(q k^T * scale + mask), then
 *   dv = P^T dout, dP = dout v^T, dS = P * (dP - rowsum(dP * P)),
 *   dq = scale * dS k, dk = scale * dS^T q
 * (torch.nn.functional.scaled_dot_product_attention's gradients).
 * Scratch of 2*T*S floats is allocated; -1 if that fails. */
int hk_attention_backward_f32(const float *q, const float *k, const float *v,
                              const float *dout, int64_t batch, int64_t T, int64_t S, int64_t D,
                              int64_t Dv, int causal, float scale, float *dq, float *dk,
                              float *dv, char *err);

/* ------------------------------------------------------------ embedding */
/* Backward of y[i,:] = table[ids[i],:] (torch.nn.functional.embedding):
 * dtable[ids[i],:] += dy[i,:].  ids int32 or int64; negative ids count from
 * the end like the forward Gather; an id outside [-V, V) -> -1 (dtable is
 * untouched: ids are checked before any write). */
int hk_embedding_backward_f32(HkDType idt, const void *ids, int64_t n, const float *dy,
                              int64_t V, int64_t D, float *dtable, int accum, char *err);
/* Vocabulary-parallel embedding (a TP rank holds rows [start, start + V) of
 * a table of Vfull rows): y[i,:] = table[ids[i] - start,:] when the
 * (normalized) id falls in the rank's rows, else 0; the all-reduce sum
 * over the ranks gives the full lookup.  Ids outside [-Vfull, Vfull) -> -1. */
int hk_embedding_shard_f32(HkDType idt, const void *ids, int64_t n, const float *table,
                           int64_t start, int64_t V, int64_t Vfull, int64_t D, float *y,
                           char *err);
/* Its backward: dtable[ids[i] - start,:] += dy[i,:] for the rank's ids
 * (start 0, Vfull V: hk_embedding_backward_f32). */
int hk_embedding_backward_shard_f32(HkDType idt, const void *ids, int64_t n, const float *dy,
                                    int64_t start, int64_t V, int64_t Vfull, int64_t D,
                                    float *dtable, int accum, char *err);

/* ------------------------------------------------------------ gathers' adjoints */
/* dx (shape dims, zeroed first) += dy scattered back to where the forward
 * gather read it; repeated indices accumulate; indices are checked before
 * any write (kernels/host/hk_index.c). */
int hk_gather_backward_f32(const float *dy, int rank, const int64_t *dims, int axis,
                           HkDType idt, const void *idx, int64_t nidx, float *dx, char *err);
int hk_gather_nd_backward_f32(const float *dy, int rank, const int64_t *dims, HkDType idt,
                              const void *idx, int irank, const int64_t *idims, int batch_dims,
                              float *dx, char *err);
int hk_gather_elements_backward_f32(const float *dy, int rank, const int64_t *dims, int axis,
                                    HkDType idt, const void *idx, const int64_t *idims,
                                    float *dx, char *err);

/* ------------------------------------------------------------ loss */
/* Fused softmax cross entropy over logits [N,V] and integer targets [N]
 * (int32 or int64), torch.nn.functional.cross_entropy(logits, targets,
 * ignore_index=ii, reduction="mean"):
 *   loss = sum_{i counted} (lse_i - logits[i, t_i]) / count,
 *   lse_i = log sum_j exp(logits[i,j]).
 * Rows whose target equals ignore_index (when use_ignore) are not counted;
 * if no row counts the loss is NaN, as in torch.  lse (N floats) may be
 * NULL; count_out may be NULL.  A counted target outside [0, V) -> -1. */
int hk_cross_entropy_fwd_f32(const float *logits, HkDType tdt, const void *targets, int64_t N,
                             int64_t V, int use_ignore, int64_t ignore_index, float *loss,
                             float *lse, int64_t *count_out, char *err);
/* dlogits = dloss * (softmax(logits) - onehot(t)) / count on counted rows,
 * 0 on ignored rows.  lse from the forward, or NULL (recomputed). */
int hk_cross_entropy_bwd_f32(const float *logits, HkDType tdt, const void *targets,
                             const float *lse, int64_t N, int64_t V, int use_ignore,
                             int64_t ignore_index, float dloss, float *dlogits, char *err);

/* Vocabulary-parallel cross entropy (Megatron-LM, Shoeybi et al. 2019,
 * Sec. 3: the LM head's logits split over the vocabulary across the TP
 * ranks; passes/tp_shard.h).  A rank holds logits [N, Vl], columns
 * [start, start + Vl) of the full vocabulary of Vfull; M[i] is the row max
 * over ALL ranks (an all-reduce max of the local maxima), only a shift for
 * stability.  Targets are checked against [0, Vfull) (or ignored).
 * stats: the rank's partial sums, [N, 2]: stats[i,0] = sum_j exp(z_ij -
 * M_i), stats[i,1] = z_{i, t_i - start} when this rank owns t_i, else 0;
 * the all-reduce sum of stats over the ranks gives the full row's. */
int hk_vocab_ce_stats_f32(const float *logits, HkDType tdt, const void *targets,
                          const float *rowmax, int64_t N, int64_t Vl, int64_t start,
                          int64_t Vfull, int use_ignore, int64_t ignore_index, float *stats,
                          char *err);
/* The loss from the all-reduced stats: mean over counted rows of
 * M_i + log S_i - z_{i,t_i} (= lse_i - z_{i,t_i}); NaN when none counts. */
int hk_vocab_ce_loss_f32(const float *stats, const float *rowmax, HkDType tdt,
                         const void *targets, int64_t N, int64_t Vfull, int use_ignore,
                         int64_t ignore_index, float *loss, char *err);
/* The rank's slice of dlogits: dloss/count * (exp(z_ij - M_i) / S_i -
 * [j + start == t_i]) on counted rows, 0 on ignored ones: no communication
 * (the all-reduced stats carry the full softmax denominator). */
int hk_vocab_ce_bwd_f32(const float *logits, HkDType tdt, const void *targets,
                        const float *rowmax, const float *stats, int64_t N, int64_t Vl,
                        int64_t start, int64_t Vfull, int use_ignore, int64_t ignore_index,
                        float dloss, float *dlogits, char *err);

/* ------------------------------------------------------------ optimizers */
/* One torch.optim.AdamW step (amsgrad=False, maximize=False) on n elements;
 * step is 1-based (torch's state["step"] after its increment):
 *   p -= lr * wd * p
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p -= (lr / (1 - b1^step)) * m / (sqrt(v) / sqrt(1 - b2^step) + eps)
 * -1 on step < 1. */
int hk_adamw_step_f32(float *p, const float *g, float *m, float *v, int64_t n, int64_t step,
                      double lr, double beta1, double beta2, double eps, double weight_decay,
                      char *err);
/* The IR's fused AdamW op (ir/ops.def): one torch.optim.AdamW step on n
 * elements in fp32, in ONE pass over p, m, v, g, with the float operations
 * (and their order) of the elementwise op chain passes/optimizer.c emitted
 * before the op existed, so trajectories are unchanged bit for bit:
 *   t = (float)step;  bc1 = 1 - (float)pow(b1, t);  bc2 = 1 - (float)pow(b2, t)
 *   step_size = lr / bc1;  bc2_sqrt = sqrtf(bc2);  decay = 1 - lr * wd
 *   g' = g * clip_scale                        (clip_scale NULL: g' = g)
 *   m' = m * b1 + g' * (1 - b1);  v' = v * b2 + (g' * g') * (1 - b2)
 *   p' = p * decay - (m' / (sqrtf(v') / bc2_sqrt + eps)) * step_size
 * (wd == 0: p' = p - ...).  b1, b2, eps, wd, 1 - b1 and 1 - b2 are rounded
 * to f32 from the doubles given, as the chain's constants were.
 * In place: p_out / m_out / v_out may be p / m / v (element i of an input is
 * read before element i of its output is written); the outputs need not be
 * zeroed.  -1 on step < 1 (a zero bias correction). */
int hk_adamw_fused_f32(const float *p, const float *m, const float *v, const float *g,
                       int64_t n, float lr, int64_t step, const float *clip_scale,
                       double beta1, double beta2, double eps, double weight_decay,
                       float *p_out, float *m_out, float *v_out, char *err);
/* One torch.optim.SGD step (maximize=False) on n elements:
 *   d = g + wd p
 *   if momentum: buf = d on the first step, else buf = momentum buf + (1 - dampening) d;
 *                d = nesterov ? d + momentum buf : buf
 *   p -= lr d
 * buf may be NULL when momentum == 0.  first: this is the first step
 * (torch's momentum_buffer is None). */
int hk_sgd_step_f32(float *p, const float *g, float *buf, int64_t n, double lr, double momentum,
                    double dampening, double weight_decay, int nesterov, int first, char *err);
/* sqrt of the sum of squares over nbuf buffers (lens[i] floats each),
 * accumulated in double: torch.nn.utils.clip_grad_norm_'s total_norm for
 * norm_type 2 (the norm of the per-tensor norms). */
double hk_global_grad_norm_f32(int nbuf, const float *const *bufs, const int64_t *lens);
/* clip_grad_norm_'s factor: min(1, max_norm / (total_norm + 1e-6)).  The
 * caller scales every gradient by it (torch multiplies even when it is 1). */
double hk_clip_scale(double total_norm, double max_norm);
/* x *= s */
void hk_scale_f32(float *x, int64_t n, float s);
/* y += alpha x (gradient accumulation over microbatches) */
void hk_axpy_f32(int64_t n, float alpha, const float *x, float *y); /* on the kernel pool */
/* sum of x[i]^2 in double, in blocks summed in a fixed order whatever the
 * threads (the gradient norm) */
double hk_sumsq_f32(const float *x, int64_t n);

#endif
