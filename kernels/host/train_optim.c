/* Optimizer steps, gradient norm / clipping and accumulation.  Element
 * math runs in double and rounds once to the fp32 state, so results match
 * torch's fp32 formulas to within an ulp or two. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hk_parallel.h"
#include "hk_train.h"

int hk_adamw_step_f32(float *p, const float *g, float *m, float *v, int64_t n, int64_t step,
                      double lr, double beta1, double beta2, double eps, double weight_decay,
                      char *err)
{
    if (step < 1) {
        if (err)
            snprintf(err, HK_ERRLEN, "adamw: step must be >= 1 (got %lld)", (long long)step);
        return -1;
    }
    /* torch.optim.adamw._single_tensor_adamw:
     *   param.mul_(1 - lr * weight_decay)
     *   exp_avg.lerp_(grad, 1 - beta1);  exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
     *   step_size = lr / (1 - beta1^step)
     *   denom = exp_avg_sq.sqrt() / sqrt(1 - beta2^step) + eps
     *   param.addcdiv_(exp_avg, denom, value=-step_size) */
    double bc1 = 1.0 - pow(beta1, (double)step);
    double bc2_sqrt = sqrt(1.0 - pow(beta2, (double)step));
    double step_size = lr / bc1, decay = 1.0 - lr * weight_decay;
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i];
        double pi = (double)p[i] * decay;
        double mi = beta1 * m[i] + (1.0 - beta1) * gi;
        double vi = beta2 * v[i] + (1.0 - beta2) * gi * gi;
        m[i] = (float)mi;
        v[i] = (float)vi;
        p[i] = (float)(pi - step_size * mi / (sqrt(vi) / bc2_sqrt + eps));
    }
    return 0;
}

/* The fused op's per-element pass: fp32 only, no libm call but sqrtf
 * (this file is compiled with -fno-math-errno -O3 so it becomes a vector
 * sqrt and the loop is vectorized) and no FMA contraction
 * (-ffp-contract=off: a fused multiply-add would round differently from the
 * op chain), so the result is the same on every ISA the clones target.
 * Two bodies, both with restrict pointers so GCC needs no alias checks: in
 * place (P m v updated where they are) and out of place (seven disjoint
 * buffers). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(__SANITIZE_ADDRESS__)
#define HK_ADAMW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HK_ADAMW_CLONES
#endif

typedef struct AdamwK {
    float b1, omb1, b2, omb2, eps, decay, step_size, bc2_sqrt, cs;
} AdamwK;

#define ADAMW_BODY(P, M, V, G, PO, MO, VO)                                                \
    const float b1 = k->b1, omb1 = k->omb1, b2 = k->b2, omb2 = k->omb2, eps = k->eps;    \
    const float decay = k->decay, step_size = k->step_size, bc2_sqrt = k->bc2_sqrt;      \
    const float cs = k->cs;                                                              \
    for (int64_t i = lo; i < hi; i++) {                                                  \
        float gi = G[i] * cs;                                                            \
        float mi = M[i] * b1 + gi * omb1;                                                \
        float vi = V[i] * b2 + (gi * gi) * omb2;                                         \
        float den = sqrtf(vi) / bc2_sqrt + eps;                                          \
        float pi = P[i] * decay;                                                         \
        MO[i] = mi;                                                                      \
        VO[i] = vi;                                                                      \
        PO[i] = pi - (mi / den) * step_size;                                             \
    }

HK_ADAMW_CLONES
static void adamw_span_inplace(const AdamwK *k, float *restrict p, float *restrict m,
                               float *restrict v, const float *restrict g, int64_t lo,
                               int64_t hi) {
    ADAMW_BODY(p, m, v, g, p, m, v)
}

HK_ADAMW_CLONES
static void adamw_span(const AdamwK *k, const float *restrict p, const float *restrict m,
                       const float *restrict v, const float *restrict g, int64_t lo, int64_t hi,
                       float *restrict po, float *restrict mo, float *restrict vo) {
    ADAMW_BODY(p, m, v, g, po, mo, vo)
}

typedef struct AdamwJob {
    const AdamwK *k;
    const float *p, *m, *v, *g;
    float *po, *mo, *vo;
} AdamwJob;

static void adamw_job_inplace(void *vj, int64_t lo, int64_t hi) {
    const AdamwJob *j = vj;
    adamw_span_inplace(j->k, j->po, j->mo, j->vo, j->g, lo, hi);
}

static void adamw_job(void *vj, int64_t lo, int64_t hi) {
    const AdamwJob *j = vj;
    adamw_span(j->k, j->p, j->m, j->v, j->g, lo, hi, j->po, j->mo, j->vo);
}

int hk_adamw_fused_f32(const float *p, const float *m, const float *v, const float *g,
                       int64_t n, float lr, int64_t step, const float *clip_scale,
                       double beta1, double beta2, double eps, double weight_decay,
                       float *p_out, float *m_out, float *v_out, char *err)
{
    if (step < 1) {
        if (err)
            snprintf(err, HK_ERRLEN, "AdamW: step must be >= 1 (got %lld)", (long long)step);
        return -1;
    }
    /* the chain's per-step scalars, each op rounded to f32 as its node did:
     * Cast(step), Pow (evaluated in double by the host kernel), Sub, Div,
     * Sqrt, and 1 - lr * wd.  Multiplying by 1 (no decay, no clip) is exact,
     * so one loop serves every case with the chain's results. */
    float t = (float)step;
    float bc1 = 1.0f - (float)pow((double)(float)beta1, (double)t);
    float bc2 = 1.0f - (float)pow((double)(float)beta2, (double)t);
    AdamwK k = {
        .b1 = (float)beta1, .omb1 = (float)(1.0 - beta1),
        .b2 = (float)beta2, .omb2 = (float)(1.0 - beta2),
        .eps = (float)eps,
        .decay = weight_decay != 0 ? 1.0f - lr * (float)weight_decay : 1.0f,
        .step_size = lr / bc1,
        .bc2_sqrt = (float)sqrt((double)bc2),
        .cs = clip_scale ? *clip_scale : 1.0f,
    };
    int inplace = p_out == p && m_out == m && v_out == v;
    if (!inplace && (p_out == p || m_out == m || v_out == v)) {
        /* some outputs alias their inputs, some not: carry the others over
         * and update all three in place (buffers either coincide or are
         * disjoint; the executors never hand out partial overlaps) */
        if (p_out != p) memcpy(p_out, p, (size_t)n * sizeof *p);
        if (m_out != m) memcpy(m_out, m, (size_t)n * sizeof *m);
        if (v_out != v) memcpy(v_out, v, (size_t)n * sizeof *v);
        inplace = 1;
    }
    /* spans of the kernel pool: each element is updated by one call from
     * its own inputs, so the bits do not depend on the threads (a gpt_tiny
     * step ran the whole update on one core while the other waited) */
    AdamwJob j = {&k, p, m, v, g, p_out, m_out, v_out};
    hk_parallel_for(n, HK_GRAIN_CHEAP, inplace ? adamw_job_inplace : adamw_job, &j);
    return 0;
}

int hk_sgd_step_f32(float *p, const float *g, float *buf, int64_t n, double lr, double momentum,
                    double dampening, double weight_decay, int nesterov, int first, char *err)
{
    if (momentum != 0.0 && !buf) {
        if (err)
            snprintf(err, HK_ERRLEN, "sgd: momentum %g needs a momentum buffer", momentum);
        return -1;
    }
    if (nesterov && (momentum <= 0.0 || dampening != 0.0)) {
        if (err) /* torch raises the same ValueError */
            snprintf(err, HK_ERRLEN,
                     "sgd: nesterov momentum requires a momentum and zero dampening");
        return -1;
    }
    /* torch.optim.sgd._single_tensor_sgd */
    for (int64_t i = 0; i < n; i++) {
        double d = (double)g[i] + weight_decay * p[i];
        if (momentum != 0.0) {
            double b = first ? d : momentum * buf[i] + (1.0 - dampening) * d;
            buf[i] = (float)b;
            d = nesterov ? d + momentum * b : b;
        }
        p[i] = (float)((double)p[i] - lr * d);
    }
    return 0;
}

double hk_global_grad_norm_f32(int nbuf, const float *const *bufs, const int64_t *lens)
{
    double ss = 0;
    for (int b = 0; b < nbuf; b++)
        for (int64_t i = 0; i < lens[b]; i++)
            ss += (double)bufs[b][i] * bufs[b][i];
    return sqrt(ss);
}

double hk_clip_scale(double total_norm, double max_norm)
{
    /* torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6),
     * clamped to at most 1 (a NaN/inf norm gives a NaN/0 factor, as in torch
     * with error_if_nonfinite=False). */
    double c = max_norm / (total_norm + 1e-6);
    return c < 1.0 ? c : (c != c ? c : 1.0);
}

void hk_scale_f32(float *x, int64_t n, float s)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

/* y += alpha x on the kernel pool (one add per element: the bits do not
 * depend on the threads), vectorized (this file: -O3, no FMA contraction) */
typedef struct AxpyJob {
    const float *x;
    float *y;
    float alpha;
} AxpyJob;

HK_ADAMW_CLONES
static void axpy_span(void *vj, int64_t lo, int64_t hi) {
    const AxpyJob *j = vj;
    const float *restrict x = j->x;
    float *restrict y = j->y;
    const float alpha = j->alpha;
    for (int64_t i = lo; i < hi; i++)
        y[i] += alpha * x[i];
}

void hk_axpy_f32(int64_t n, float alpha, const float *x, float *y)
{
    AxpyJob j = {x, y, alpha};
    hk_parallel_for(n, HK_GRAIN_CHEAP, axpy_span, &j);
}

/* Sum of squares in double, in a fixed association that does not depend on
 * the threads: blocks of HK_SUMSQ_BLOCK elements, each summed in
 * HK_SUMSQ_LANES interleaved double accumulators (a vector's worth: the
 * in-order sum was one dependent add per element), the lanes added in
 * order, then the blocks' sums in block order. */
#define HK_SUMSQ_BLOCK 8192
#define HK_SUMSQ_LANES 8
typedef struct SumsqJob {
    const float *x;
    int64_t n, base; /* chunk item k is block base + k; its sum goes to part[k] */
    double *part;
} SumsqJob;

HK_ADAMW_CLONES
static void sumsq_blocks(void *vj, int64_t b0, int64_t b1) {
    const SumsqJob *j = vj;
    const float *restrict x = j->x;
    for (int64_t k = b0; k < b1; k++) {
        int64_t b = j->base + k;
        int64_t lo = b * HK_SUMSQ_BLOCK, hi = lo + HK_SUMSQ_BLOCK < j->n ? lo + HK_SUMSQ_BLOCK : j->n;
        double acc[HK_SUMSQ_LANES] = {0};
        int64_t i = lo;
        for (; i + HK_SUMSQ_LANES <= hi; i += HK_SUMSQ_LANES)
            for (int l = 0; l < HK_SUMSQ_LANES; l++)
                acc[l] += (double)x[i + l] * (double)x[i + l];
        for (int l = 0; i < hi; i++, l++)
            acc[l] += (double)x[i] * (double)x[i];
        double s = 0;
        for (int l = 0; l < HK_SUMSQ_LANES; l++)
            s += acc[l];
        j->part[k] = s;
    }
}

double hk_sumsq_f32(const float *x, int64_t n)
{
    enum { GROUP = 64 }; /* blocks per pool call: their sums on the stack */
    double part[GROUP], s = 0;
    int64_t nb = n > 0 ? (n + HK_SUMSQ_BLOCK - 1) / HK_SUMSQ_BLOCK : 0;
    for (int64_t g = 0; g < nb; g += GROUP) {
        int64_t m = nb - g < GROUP ? nb - g : GROUP;
        SumsqJob j = {x, n, g, part};
        hk_parallel_for(m, 1, sumsq_blocks, &j);
        for (int64_t b = 0; b < m; b++)
            s += part[b];
    }
    return s;
}
