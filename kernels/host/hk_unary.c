/* Elementwise unary maps, activations and Clip.  Float ops evaluate in
 * double and round once, which keeps f32 results within an ulp of numpy
 * (GELU-tanh excepted: float, hk_vmath.h).
 * The f32 path runs in parallel chunks (hk_parallel.h) and uses the
 * vectorizable exp / tanh / sigmoid of hk_vmath.h; f64 keeps libm (the
 * polynomials are accurate to float, not double, precision). */
#include "hk.h"
#include "hk_parallel.h"
#include "hk_vmath.h"

#include <math.h>
#include <stdio.h>

static double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x); /* avoids exp overflow for very negative x */
    return e / (1.0 + e);
}

static inline double apply_f(HkUnOp op, double x) {
    switch (op) {
    case HK_NEG: return -x;
    case HK_ABS: return fabs(x);
    case HK_SQRT: return sqrt(x);
    case HK_RECIP: return 1.0 / x;
    case HK_EXP: return exp(x);
    case HK_LOG: return log(x);
    case HK_SIN: return sin(x);
    case HK_COS: return cos(x);
    case HK_TANH: return tanh(x);
    case HK_SIGMOID: return sigmoid(x);
    case HK_ERF: return erf(x);
    case HK_RELU: return x > 0 ? x : 0 * x; /* keeps NaN, maps -0 to -0*0 */
    case HK_FLOOR: return floor(x);
    case HK_CEIL: return ceil(x);
    case HK_GELU: return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
    case HK_GELU_TANH:
        return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    case HK_SILU: return x * sigmoid(x);
    default: return x;
    }
}

/* f32 map: the transcendental ops through hk_vmath.h, the rest as apply_f */
static inline double apply_f32(HkUnOp op, double x) {
    switch (op) {
    case HK_EXP: return hk_exp_d(x);
    case HK_TANH: return hk_tanh_d(x);
    case HK_SIGMOID: return hk_sigmoid_d(x);
    case HK_GELU_TANH: return hk_gelu_tanh_f((float)x); /* float: hk_vmath.h; x is a float */
    case HK_SILU: return x * hk_sigmoid_d(x);
    default: return apply_f(op, x);
    }
}

/* one loop per op with a constant selector, so the switch folds away once
 * inlined instead of running per element */
HK_VECTOR_CLONES
static void unary_f32_loop(HkUnOp op, const float *a, float *b, int64_t n) {
    switch (op) {
#define LOOP(OP) case OP: for (int64_t i = 0; i < n; i++) b[i] = (float)apply_f32(OP, a[i]); return;
    LOOP(HK_NEG) LOOP(HK_ABS) LOOP(HK_SQRT) LOOP(HK_RECIP) LOOP(HK_EXP) LOOP(HK_LOG)
    LOOP(HK_SIN) LOOP(HK_COS) LOOP(HK_TANH) LOOP(HK_SIGMOID) LOOP(HK_ERF) LOOP(HK_RELU)
    LOOP(HK_FLOOR) LOOP(HK_CEIL) LOOP(HK_GELU) LOOP(HK_GELU_TANH) LOOP(HK_SILU)
#undef LOOP
    default: return;
    }
}

typedef struct UnCtx {
    HkUnOp op;
    const float *a;
    float *b;
} UnCtx;

static void unary_f32_range(void *c, int64_t lo, int64_t hi) {
    const UnCtx *u = c;
    unary_f32_loop(u->op, u->a + lo, u->b + lo, hi - lo);
}

static int64_t unary_grain(HkUnOp op) {
    switch (op) {
    case HK_NEG: case HK_ABS: case HK_RELU: case HK_FLOOR: case HK_CEIL: return HK_GRAIN_CHEAP;
    default: return HK_GRAIN_MATH;
    }
}

int hk_unary_supported(HkUnOp op, HkDType dt) {
    if (op == HK_NOT) return dt == HK_BOOL;
    if (dt == HK_F32 || dt == HK_F64) return 1;
    if (op == HK_NEG || op == HK_ABS || op == HK_RELU)
        return dt == HK_I8 || dt == HK_I16 || dt == HK_I32 || dt == HK_I64;
    return 0;
}

#define INT_MAP(T, U)                                                         \
    {                                                                         \
        const T *a = x;                                                       \
        T *b = y;                                                             \
        for (int64_t i = 0; i < n; i++) {                                     \
            T v = a[i];                                                       \
            /* via the unsigned type: -INT_MIN wraps instead of being UB */   \
            U neg = (U)(0u - (U)v);                                           \
            b[i] = op == HK_NEG ? (T)neg : op == HK_ABS ? (v < 0 ? (T)neg : v) \
                                                        : (v > 0 ? v : 0);    \
        }                                                                     \
        return 0;                                                             \
    }

int hk_unary(HkUnOp op, HkDType dt, const void *x, void *y, int64_t n, char *err) {
    if (!hk_unary_supported(op, dt)) {
        if (err) snprintf(err, HK_ERRLEN, "unary op %d does not support dtype %d", (int)op, (int)dt);
        return -1;
    }
    switch (dt) {
    case HK_F32: {
        /* in place (x == y) is fine: each element is read before written
         * (no restrict: the compiler checks overlap before vectorizing) */
        UnCtx c = {op, x, y};
        hk_parallel_for(n, unary_grain(op), unary_f32_range, &c);
        return 0;
    }
    case HK_F64: {
        const double *a = x;
        double *b = y;
        for (int64_t i = 0; i < n; i++) b[i] = apply_f(op, a[i]);
        return 0;
    }
    case HK_BOOL: {
        const uint8_t *a = x;
        uint8_t *b = y;
        for (int64_t i = 0; i < n; i++) b[i] = !a[i];
        return 0;
    }
    case HK_I8: INT_MAP(int8_t, uint8_t)
    case HK_I16: INT_MAP(int16_t, uint16_t)
    case HK_I32: INT_MAP(int32_t, uint32_t)
    case HK_I64: INT_MAP(int64_t, uint64_t)
    default: return -1;
    }
}

#define CLIP(T)                                                               \
    {                                                                         \
        const T *a = x;                                                       \
        T *b = y;                                                             \
        for (int64_t i = 0; i < n; i++) {                                     \
            T v = a[i];                                                       \
            if (lo && v < *(const T *)lo) v = *(const T *)lo;                 \
            if (hi && v > *(const T *)hi) v = *(const T *)hi;                 \
            b[i] = v;                                                         \
        }                                                                     \
        return 0;                                                             \
    }

int hk_clip(HkDType dt, const void *x, const void *lo, const void *hi, void *y, int64_t n,
            char *err) {
    switch (dt) {
    case HK_F32: CLIP(float)
    case HK_F64: CLIP(double)
    case HK_I8: CLIP(int8_t)
    case HK_U8: CLIP(uint8_t)
    case HK_I16: CLIP(int16_t)
    case HK_U16: CLIP(uint16_t)
    case HK_I32: CLIP(int32_t)
    case HK_U32: CLIP(uint32_t)
    case HK_I64: CLIP(int64_t)
    case HK_U64: CLIP(uint64_t)
    default:
        if (err) snprintf(err, HK_ERRLEN, "Clip does not support dtype %d", (int)dt);
        return -1;
    }
}
