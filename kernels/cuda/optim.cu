/* Optimizer steps, device side: fused AdamW, axpy (gradient accumulation)
 * and the sum of squares behind the global gradient norm.  Host twin:
 * kernels/host/train_optim.c (hk_adamw_fused_f32, hk_axpy_f32,
 * hk_global_grad_norm_f32). */
#include <math.h>

#include "hkc_internal.cuh"

/* hk_adamw_fused_f32's arithmetic; _rn intrinsics keep nvcc from fusing
 * multiply-adds, which would round differently from the host. */
__global__ static void k_adamw(const float *p, const float *m, const float *v, const float *g,
                               const float *lrp, const int64_t *stepp, const float *csp,
                               int64_t n, float b1, float omb1, float b2, float omb2, float eps,
                               float wd, float *po, float *mo, float *vo) {
    float lr = *lrp, t = (float)*stepp, cs = csp ? *csp : 1.f;
    float bc1 = __fsub_rn(1.f, (float)pow((double)b1, (double)t));
    float bc2 = __fsub_rn(1.f, (float)pow((double)b2, (double)t));
    float step_size = __fdiv_rn(lr, bc1), bc2_sqrt = __fsqrt_rn(bc2);
    float decay = wd != 0.f ? __fsub_rn(1.f, __fmul_rn(lr, wd)) : 1.f;
    HKC_LOOP(i, n) {
        float gi = __fmul_rn(g[i], cs);
        float mi = __fadd_rn(__fmul_rn(m[i], b1), __fmul_rn(gi, omb1));
        float vi = __fadd_rn(__fmul_rn(v[i], b2), __fmul_rn(__fmul_rn(gi, gi), omb2));
        float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
        float pi = __fmul_rn(p[i], decay);
        mo[i] = mi;
        vo[i] = vi;
        po[i] = __fsub_rn(pi, __fmul_rn(__fdiv_rn(mi, den), step_size));
    }
}

extern "C" int hkc_adamw_f32(HkcCtx *c, const float *p, const float *m, const float *v,
                             const float *g, const float *lr, const int64_t *step,
                             const float *clip_scale, int64_t n, double beta1, double beta2,
                             double eps, double weight_decay, float *p_out, float *m_out,
                             float *v_out, char *err) {
    if (n == 0) return 0;
    k_adamw<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(
        p, m, v, g, lr, step, clip_scale, n, (float)beta1, (float)(1.0 - beta1), (float)beta2,
        (float)(1.0 - beta2), (float)eps, (float)weight_decay, p_out, m_out, v_out);
    return hkc_launched("adamw", err);
}

__global__ static void k_axpy(int64_t n, float alpha, const float *x, float *y) {
    HKC_LOOP(i, n) y[i] += alpha * x[i];
}

extern "C" int hkc_axpy_f32(HkcCtx *c, int64_t n, float alpha, const float *x, float *y,
                            char *err) {
    if (n == 0) return 0;
    k_axpy<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(n, alpha, x, y);
    return hkc_launched("axpy", err);
}

__global__ static void k_sumsq(const float *x, int64_t n, double *out) {
    __shared__ double shd[32];
    double s = 0;
    HKC_LOOP(i, n) s += (double)x[i] * x[i];
    s = hkc_block_sum(s, shd);
    if (threadIdx.x == 0) atomicAdd(out, s);
}

extern "C" int hkc_sumsq_f32(HkcCtx *c, const float *x, int64_t n, double *out, char *err) {
    if (cudaMemsetAsync(out, 0, sizeof(double), c->stream) != cudaSuccess)
        return hkc_fail(err, "sumsq: cudaMemsetAsync failed");
    if (n == 0) return 0;
    unsigned g = hkc_blocks(n);
    k_sumsq<<<g < 1024 ? g : 1024, HKC_THREADS, 0, c->stream>>>(x, n, out);
    return hkc_launched("sum of squares", err);
}
