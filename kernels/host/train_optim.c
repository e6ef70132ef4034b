/* Optimizer steps, gradient norm / clipping and accumulation.  Element
 * math runs in double and rounds once to the fp32 state, so results match
 * torch's fp32 formulas to within an ulp or two. */
#include <math.h>
#include <stdio.h>

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

void hk_axpy_f32(int64_t n, float alpha, const float *x, float *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
}
