/* Elementwise device kernels: broadcast binary ops, unary ops and their
 * gradients, strided copies (transpose/expand/slice/split/concat), casts,
 * axpy.  fp32 math in float (the host twins compute unary ops in double:
 * docs/CUDA.md lists the resulting tolerances). */
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

template <typename T>
__global__ static void k_strided(HkcShape shape, const T *src, HkcStrides ss, T *dst,
                                 HkcStrides ds, int64_t n) {
    HKC_LOOP(i, n) dst[hkc_offset(i, shape, ds)] = src[hkc_offset(i, shape, ss)];
}

extern "C" int hkc_strided_copy(HkcCtx *c, size_t esize, HkcShape shape, const void *src,
                                int64_t src_off, HkcStrides src_strides, void *dst,
                                int64_t dst_off, HkcStrides dst_strides, char *err) {
    int64_t n = hkc_numel(shape);
    if (n == 0) return 0;
    unsigned g = hkc_blocks(n);
#define STRIDED(T)                                                                          \
    k_strided<T><<<g, HKC_THREADS, 0, c->stream>>>(shape, (const T *)src + src_off, src_strides, \
                                                  (T *)dst + dst_off, dst_strides, n)
    switch (esize) {
    case 1: STRIDED(uint8_t); break;
    case 2: STRIDED(uint16_t); break;
    case 4: STRIDED(uint32_t); break;
    case 8: STRIDED(uint64_t); break;
    default: return hkc_fail(err, "hkc_strided_copy: element size must be 1, 2, 4 or 8");
    }
#undef STRIDED
    return hkc_launched("strided copy", err);
}

/* dtype codes: HkDType (1 f32, 2 u8, 6 i32, 7 i64, 9 bool, 11 f64). */
__device__ static inline double load_any(int t, const void *p, int64_t i) {
    switch (t) {
    case 1: return ((const float *)p)[i];
    case 2: case 9: return ((const uint8_t *)p)[i];
    case 6: return ((const int32_t *)p)[i];
    case 7: return (double)((const int64_t *)p)[i];
    case 11: return ((const double *)p)[i];
    default: return 0;
    }
}

/* Integer targets read their source exactly (i64 -> i32 must not pass through double). */
__global__ static void k_cast(int from, const void *x, int to, void *y, int64_t n) {
    HKC_LOOP(i, n) {
        if (from == 7 && to == 6) {
            ((int32_t *)y)[i] = (int32_t)((const int64_t *)x)[i];
            continue;
        }
        if (from == 6 && to == 7) { ((int64_t *)y)[i] = ((const int32_t *)x)[i]; continue; }
        if (from == 7 && to == 7) { ((int64_t *)y)[i] = ((const int64_t *)x)[i]; continue; }
        double v = load_any(from, x, i);
        switch (to) {
        case 1: ((float *)y)[i] = (float)v; break;
        case 2: ((uint8_t *)y)[i] = (uint8_t)(int64_t)v; break;
        case 9: ((uint8_t *)y)[i] = v != 0; break;
        case 6: ((int32_t *)y)[i] = (int32_t)v; break;
        case 7: ((int64_t *)y)[i] = (int64_t)v; break;
        case 11: ((double *)y)[i] = v; break;
        }
    }
}

extern "C" int hkc_cast(HkcCtx *c, int from, const void *x, int to, void *y, int64_t n,
                        char *err) {
    const int ok[] = {1, 2, 6, 7, 9, 11};
    int fa = 0, ta = 0;
    for (int i = 0; i < 6; i++) fa |= ok[i] == from, ta |= ok[i] == to;
    if (!fa || !ta) return hkc_fail(err, "hkc_cast: dtype not supported on the device");
    if (n == 0) return 0;
    k_cast<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(from, x, to, y, n);
    return hkc_launched("cast", err);
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

__global__ static void k_row_bcast(const float *b, int64_t rows, int64_t n, float *y) {
    HKC_LOOP(i, rows * n) y[i] = b[i % n];
}

extern "C" int hkc_row_broadcast_f32(HkcCtx *c, const float *b, int64_t rows, int64_t n,
                                     float *y, char *err) {
    if (rows * n == 0) return 0;
    k_row_bcast<<<hkc_blocks(rows * n), HKC_THREADS, 0, c->stream>>>(b, rows, n, y);
    return hkc_launched("row broadcast", err);
}

/* ------------------------------------------------------------ optimizer */
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
