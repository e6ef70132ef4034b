/* Elementwise ops, device side: broadcast binary ops, unary ops and their
 * gradients.  Host twins: kernels/host/hk_binary.c, hk_unary.c (forward)
 * and train_elementwise.c (backward rules).  fp32 math in float (the host
 * twins compute unary ops in double: docs/CUDA.md lists the tolerances). */
#include <math.h>

#include "hkc_internal.cuh"

#define HKC_SQRT_2_OVER_PI 0.79788456080286535588f
#define HKC_INV_SQRT_2PI 0.39894228040143267794f
#define HKC_TWO_OVER_SQRT_PI 1.12837916709551257390f

__device__ static inline float bin_op(int op, float x, float y) {
    switch (op) {
    case HKC_ADD: return x + y;
    case HKC_SUB: return x - y;
    case HKC_MUL: return x * y;
    case HKC_DIV: return x / y;
    case HKC_POW: return (float)pow((double)x, (double)y); /* the host rounds pow in double */
    case HKC_MAX: return (x != x || x > y) ? x : y;        /* NaN in x wins, like hk_binary */
    case HKC_MIN: return (x != x || x < y) ? x : y;
    default: return 0.f;
    }
}

__global__ static void k_binary(int op, const float *a, HkcStrides sa, const float *b,
                                HkcStrides sb, float *y, HkcShape out, int64_t n) {
    HKC_LOOP(i, n) y[i] = bin_op(op, a[hkc_offset(i, out, sa)], b[hkc_offset(i, out, sb)]);
}

/* Same-shape fast path: no index arithmetic. */
__global__ static void k_binary_flat(int op, const float *a, const float *b, float *y, int64_t n) {
    HKC_LOOP(i, n) y[i] = bin_op(op, a[i], b[i]);
}

static int contiguous(const HkcShape &s, const HkcStrides &st) {
    int64_t acc = 1;
    for (int d = s.rank - 1; d >= 0; d--) {
        if (s.dims[d] != 1 && st.s[d] != acc) return 0;
        acc *= s.dims[d];
    }
    return 1;
}

extern "C" int hkc_binary_f32(HkcCtx *c, int op, const float *a, HkcStrides sa, const float *b,
                              HkcStrides sb, float *y, HkcShape out, char *err) {
    int64_t n = hkc_numel(out);
    if (op < HKC_ADD || op > HKC_MIN) return hkc_fail(err, "hkc_binary_f32: unknown op");
    if (n == 0) return 0;
    if (contiguous(out, sa) && contiguous(out, sb))
        k_binary_flat<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(op, a, b, y, n);
    else
        k_binary<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(op, a, sa, b, sb, y, out, n);
    return hkc_launched("binary", err);
}

__device__ static inline float sigm(float x) { return 1.f / (1.f + expf(-x)); }

__global__ static void k_unary(int op, const float *x, float *y, int64_t n) {
    HKC_LOOP(i, n) {
        float v = x[i], r;
        switch (op) {
        case HKC_NEG: r = -v; break;
        case HKC_ABS: r = fabsf(v); break;
        case HKC_SQRT: r = sqrtf(v); break;
        case HKC_RECIP: r = 1.f / v; break;
        case HKC_EXP: r = expf(v); break;
        case HKC_LOG: r = logf(v); break;
        case HKC_SIN: r = sinf(v); break;
        case HKC_COS: r = cosf(v); break;
        case HKC_TANH: r = tanhf(v); break;
        case HKC_SIGMOID: r = sigm(v); break;
        case HKC_ERF: r = erff(v); break;
        case HKC_RELU: r = v > 0 ? v : 0 * v; break;
        case HKC_FLOOR: r = floorf(v); break;
        case HKC_CEIL: r = ceilf(v); break;
        case HKC_GELU: r = 0.5f * v * (1.f + erff(v * 0.70710678118654752440f)); break;
        case HKC_GELU_TANH:
            r = 0.5f * v * (1.f + tanhf(HKC_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v)));
            break;
        case HKC_SILU: r = v * sigm(v); break;
        default: r = 0.f;
        }
        y[i] = r;
    }
}

extern "C" int hkc_unary_f32(HkcCtx *c, int op, const float *x, float *y, int64_t n, char *err) {
    if (op < HKC_NEG || op > HKC_SILU || op == HKC_NOT_UNUSED)
        return hkc_fail(err, "hkc_unary_f32: unknown op");
    if (n == 0) return 0;
    k_unary<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(op, x, y, n);
    return hkc_launched("unary", err);
}

__global__ static void k_unary_grad(int op, const float *x, const float *y, const float *dy,
                                    float *dx, int64_t n) {
    HKC_LOOP(i, n) {
        float v = x[i], d;
        switch (op) {
        case HKC_UG_EXP: d = y ? y[i] : expf(v); break;
        case HKC_UG_LOG: d = 1.f / v; break;
        case HKC_UG_SQRT: d = 0.5f / (y ? y[i] : sqrtf(v)); break;
        case HKC_UG_TANH: { float t = y ? y[i] : tanhf(v); d = 1.f - t * t; break; }
        case HKC_UG_SIGMOID: { float s = sigm(v); d = s * (1.f - s); break; }
        case HKC_UG_ERF: d = HKC_TWO_OVER_SQRT_PI * expf(-v * v); break;
        case HKC_UG_RELU: d = v > 0 ? 1.f : 0.f; break;
        case HKC_UG_NEG: d = -1.f; break;
        case HKC_UG_RECIPROCAL: { float r = y ? y[i] : 1.f / v; d = -r * r; break; }
        case HKC_UG_GELU:
            d = 0.5f * (1.f + erff(v * 0.70710678118654752440f)) +
                v * HKC_INV_SQRT_2PI * expf(-0.5f * v * v);
            break;
        case HKC_UG_GELU_TANH: {
            float u = HKC_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v), t = tanhf(u);
            d = 0.5f * (1.f + t) +
                0.5f * v * (1.f - t * t) * HKC_SQRT_2_OVER_PI * (1.f + 3.f * 0.044715f * v * v);
            break;
        }
        case HKC_UG_SILU: { float s = sigm(v); d = s * (1.f + v * (1.f - s)); break; }
        default: d = 0.f;
        }
        dx[i] = dy[i] * d;
    }
}

extern "C" int hkc_unary_grad_f32(HkcCtx *c, int op, const float *x, const float *y,
                                  const float *dy, float *dx, int64_t n, char *err) {
    if (op < HKC_UG_EXP || op > HKC_UG_SILU) return hkc_fail(err, "hkc_unary_grad_f32: unknown op");
    if (n == 0) return 0;
    k_unary_grad<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(op, x, y, dy, dx, n);
    return hkc_launched("unary grad", err);
}
