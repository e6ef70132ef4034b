/* Vectorizable exp / tanh / sigmoid for the fp32 kernels.
 *
 * The f32 kernels evaluate in double and round once to float (hk_unary.c,
 * train_*.c).  These keep that: they compute in double with a branch-free
 * range reduction and polynomial, so a loop over them vectorizes (no libm
 * call per element), and their relative error (~1e-13, far below a float
 * ulp of 6e-8) means the float results match correctly rounded ones to
 * within 1 ulp (tests/kernels/test_vmath.c sweeps it against libm and
 * states the measured bound).  No -ffast-math: only IEEE operations in a
 * fixed order, so results do not depend on the machine, the vector width
 * (target_clones) or the thread count.
 *
 * Two exceptions run in float, at twice the vector width: hk_exp_f, for
 * the wide softmax-shaped exps (the loss over the vocabulary, attention
 * rows; within 1 ulp of the correctly rounded e^x, swept the same way; the
 * sums around them stay in double), and GELU-tanh with its derivative
 * (hk_gelu_tanh_f, whose bound is below).
 *
 * Domain notes: hk_exp_d saturates its argument to [-800, 800] (beyond
 * that the double result is 0 or +inf anyway, as for exp) and passes NaN
 * through; inputs come from floats, so subnormal results are produced by
 * the final double -> float rounding exactly as with libm. */
#ifndef HETC_HK_VMATH_H
#define HETC_HK_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Always inlined: called from a HK_VECTOR_CLONES loop (below), a copy
 * of its own would be compiled for the baseline ISA only -- GCC made
 * hk_sum_exp_f32 an out-of-line SSE2 function, 4-9 % of a gpt_tiny step. */
#if defined(__GNUC__)
#define HK_INLINE static inline __attribute__((always_inline))
#else
#define HK_INLINE static inline
#endif

static inline uint64_t hk_asu64(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline double hk_asf64(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* e^x for double x, relative error < 1e-13 (degree-11 Taylor on
 * |r| <= ln2/2).  The power of two is split into two factors so that
 * 2^k with k in [-1155, 1155] stays representable: results underflow to 0
 * and overflow to inf like exp. */
HK_INLINE double hk_exp_d(double x) {
    const double shift = 0x1.8p52; /* round-to-nearest integer trick */
    const double log2e = 1.4426950408889634074;
    const double ln2hi = 6.93147180369123816490e-01; /* trailing zeros: k*ln2hi exact */
    const double ln2lo = 1.90821492927058770002e-10;
    double xc = x != x ? 0.0 : x;
    xc = xc > 800.0 ? 800.0 : xc;
    xc = xc < -800.0 ? -800.0 : xc;
    double kd = xc * log2e + shift;
    kd -= shift; /* k = round(x / ln2), |k| <= 1155 */
    double r = (xc - kd * ln2hi) - kd * ln2lo;
    double p = 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    /* 2^k = 2^k1 * 2^k2 (each factor a normal double).  The exponent bits
     * come from j + shift, whose bit pattern is shift's plus j; only
     * unsigned 64-bit add and left shift, which AVX2 has (no signed
     * shifts or float -> int64 conversions, which it lacks). */
    double k1 = (kd * 0.5 + shift) - shift, k2 = kd - k1;
    uint64_t b1 = hk_asu64(k1 + shift) - hk_asu64(shift) + 1023u;
    uint64_t b2 = hk_asu64(k2 + shift) - hk_asu64(shift) + 1023u;
    double y = p * hk_asf64(b1 << 52) * hk_asf64(b2 << 52);
    return x != x ? x : y;
}

/* e^x for float x, in float: within 1 ulp of the correctly rounded result
 * over every float (tests/kernels/test_vmath.c sweeps it), and 99.6 % of
 * floats exact.  For the wide exps of the softmax-shaped kernels (the
 * loss over a 50,257-word vocabulary, attention rows), where hk_exp_d's
 * double lanes were half the vector width: 16 AVX-512 lanes instead of 8.
 * Same structure as hk_exp_d: k = round(x / ln2) by the shift trick, r =
 * x - k ln2 in two parts (|r| <= ln2/2), e^r = 1 + (r + r^2 q(r)) with q
 * the Taylor terms through r^7 (the last addition carries the rounding,
 * so the result is within an ulp), and 2^k as two normal-float factors
 * so k in [-150, 128] stays representable: underflow to subnormals and 0,
 * overflow to inf, NaN through. */
HK_INLINE float hk_exp_f(float x) {
    const float shift = 0x1.8p23f; /* round-to-nearest integer trick */
    const float log2e = 1.44269504088896341f;
    const float ln2hi = 0x1.62e4p-1f; /* trailing zeros: k*ln2hi exact */
    const float ln2lo = 0x1.7f7d1cp-20f;
    float xc = x != x ? 0.0f : x;
    xc = xc > 88.8f ? 88.8f : xc;
    xc = xc < -104.0f ? -104.0f : xc;
    float kd = xc * log2e + shift;
    kd -= shift; /* |k| <= 151 */
    float r = (xc - kd * ln2hi) - kd * ln2lo;
    float q = 1.0f / 5040.0f;
    q = q * r + 1.0f / 720.0f;
    q = q * r + 1.0f / 120.0f;
    q = q * r + 1.0f / 24.0f;
    q = q * r + 1.0f / 6.0f;
    q = q * r + 0.5f;
    float p = 1.0f + (r + (r * r) * q);
    float k1 = (kd * 0.5f + shift) - shift, k2 = kd - k1;
    float t1 = k1 + shift, t2 = k2 + shift, ts = shift;
    uint32_t b1, b2, bs;
    memcpy(&b1, &t1, 4);
    memcpy(&b2, &t2, 4);
    memcpy(&bs, &ts, 4);
    b1 = (b1 - bs + 127u) << 23; /* unsigned 32-bit add and shift only */
    b2 = (b2 - bs + 127u) << 23;
    float f1, f2;
    memcpy(&f1, &b1, 4);
    memcpy(&f2, &b2, 4);
    float y = p * f1 * f2;
    return x != x ? x : y;
}

/* tanh for double u, relative error < 1e-12: odd Taylor series for
 * |u| < 0.01, else (e - 1) / (e + 1) with e = exp(2|u|) (|u| capped at 20,
 * where tanh is 1 in double). */
static inline double hk_tanh_d(double u) {
    double a = u < 0 ? -u : u;
    double ac = a > 20.0 ? 20.0 : a;
    double e = hk_exp_d(2.0 * ac);
    double big = (e - 1.0) / (e + 1.0);
    double a2 = a * a;
    double small = a * (1.0 + a2 * (-1.0 / 3.0 + a2 * (2.0 / 15.0 + a2 * (-17.0 / 315.0))));
    double t = a < 0.01 ? small : big;
    t = u < 0 ? -t : t;
    return u != u ? u : t;
}

/* 1 / (1 + e^-x), without overflow for very negative x */
static inline double hk_sigmoid_d(double x) {
    double e = hk_exp_d(x < 0 ? x : -x); /* e^-|x| in (0, 1] */
    double s = 1.0 / (1.0 + e);
    return x < 0 ? e * s : s;
}

/* GELU, tanh approximation, in float: 0.5 x (1 + tanh(u)), u =
 * sqrt(2/pi) (x + 0.044715 x^3) -- torch's gelu(approximate="tanh") and
 * the CUDA kernels compute it in float too.  Evaluated in double it was
 * 10 % of a gpt_tiny step (one double division and a degree-11 exp per
 * element); in float it runs at twice the vector width.  1 + tanh(u) =
 * 2 sigmoid(2u) and 1 - tanh(u) = 2 sigmoid(-2u) are formed without the
 * cancellation of forming tanh first (the tails).  The error grows with
 * |u| where the rounded u moves e^-2|u| (tests/kernels/test_vmath.c
 * states and checks the bound: within 8 + 8|u| ulps, the far negative
 * tail included); codegen/fused_llvm.c emits the same operations. */
#define HK_SQRT_2_OVER_PI 0.79788456080286535588
#define HK_SQRT_2_OVER_PI_F ((float)HK_SQRT_2_OVER_PI)
#define HK_GELU_A_F 0.044715f
#define HK_GELU_3A_F (3.0f * 0.044715f) /* folded in float */
HK_INLINE void hk_one_pm_tanh_f(float u, float *plus, float *minus) {
    float a = u < 0 ? -u : u;
    float e = hk_exp_f(-2.0f * a); /* (0, 1] */
    float big = 2.0f / (1.0f + e), small = big * e;
    *plus = u < 0 ? small : big;
    *minus = u < 0 ? big : small;
}
HK_INLINE float hk_gelu_tanh_u_f(float x) {
    return HK_SQRT_2_OVER_PI_F * (x + HK_GELU_A_F * x * x * x);
}
HK_INLINE float hk_gelu_tanh_f(float x) {
    float p, m;
    hk_one_pm_tanh_f(hk_gelu_tanh_u_f(x), &p, &m);
    return 0.5f * x * p;
}
/* its derivative (torch GeluBackward, approximate="tanh"):
 * 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
HK_INLINE float hk_gelu_tanh_grad_f(float x) {
    float p, m;
    hk_one_pm_tanh_f(hk_gelu_tanh_u_f(x), &p, &m);
    /* the second term with x capped at +-20, where p m is already 0 in
     * float, so x^2 cannot overflow into 0 * inf */
    float xc = x > 20.0f ? 20.0f : x < -20.0f ? -20.0f : x;
    return 0.5f * p + 0.5f * xc * (p * m) * HK_SQRT_2_OVER_PI_F * (1.0f + HK_GELU_3A_F * xc * xc);
}

/* sum over j < n of e^(x[j*stride] - m), added in j order (so it equals
 * the plain loop bit for bit); the exps are computed a block at a time
 * into a buffer so that part vectorizes -- an in-order double sum cannot. */
#define HK_SUMEXP_BLOCK 64
HK_INLINE double hk_sum_exp_f32(const float *x, int64_t stride, int64_t n, double m) {
    double buf[HK_SUMEXP_BLOCK], s = 0;
    for (int64_t j = 0; j < n; j += HK_SUMEXP_BLOCK) {
        int64_t len = n - j < HK_SUMEXP_BLOCK ? n - j : HK_SUMEXP_BLOCK;
        const float *xj = x + j * stride;
        for (int64_t k = 0; k < len; k++) buf[k] = hk_exp_d((double)xj[k * stride] - m);
        for (int64_t k = 0; k < len; k++) s += buf[k];
    }
    return s;
}

/* Sums in HK_SUMEXP_LANES interleaved double accumulators (element j into
 * lane j % LANES), the lanes then added in order: a fixed association, so
 * the same bits on every thread count and ISA, but not the in-order sum's.
 * The in-order double sum is one dependent add per element; over a
 * 50,257-word vocabulary row that add chain, not the exps, was the cross
 * entropy's time.  hk_lanes_add_f32 adds x[0..n) into acc, x[0] into lane
 * 0: called on consecutive pieces that start at multiples of LANES, it
 * keeps element j in lane j % LANES. */
#define HK_SUMEXP_LANES 8
HK_INLINE void hk_lanes_add_f32(double *acc, const float *x, int64_t n) {
    int64_t k = 0;
    for (; k + HK_SUMEXP_LANES <= n; k += HK_SUMEXP_LANES)
        for (int l = 0; l < HK_SUMEXP_LANES; l++) acc[l] += (double)x[k + l];
    for (int l = 0; k < n; k++, l++) acc[l] += (double)x[k];
}
HK_INLINE double hk_lanes_total(const double *acc) {
    double s = 0;
    for (int l = 0; l < HK_SUMEXP_LANES; l++) s += acc[l];
    return s;
}

/* sum over j < n of e^(x[j] - m) with hk_exp_f (the difference a float
 * subtraction, correctly rounded), in the lanes above, HK_SUMEXP_BLOCK
 * exps at a time */
HK_INLINE double hk_sum_expf_f32_lanes(const float *x, int64_t n, float m) {
    double acc[HK_SUMEXP_LANES] = {0};
    float buf[HK_SUMEXP_BLOCK];
    for (int64_t j = 0; j < n; j += HK_SUMEXP_BLOCK) {
        int64_t len = n - j < HK_SUMEXP_BLOCK ? n - j : HK_SUMEXP_BLOCK;
        for (int64_t k = 0; k < len; k++) buf[k] = hk_exp_f(x[j + k] - m);
        hk_lanes_add_f32(acc, buf, len);
    }
    return hk_lanes_total(acc);
}

/* max of x[0..n), NaNs skipped (as a running `x > m ? x : m` skips them),
 * -inf for n = 0.  In 16 lanes, combined in order: GCC vectorizes that,
 * not one running max (without -ffast-math); it was 60 % of the loss's
 * log-sum-exp once the exps were float.  The value is the running max's
 * (max is associative on non-NaN floats; only a zero's sign may differ). */
#define HK_MAX_LANES 16
HK_INLINE float hk_max_f32(const float *x, int64_t n) {
    float m[HK_MAX_LANES], r = -INFINITY;
    for (int l = 0; l < HK_MAX_LANES; l++) m[l] = -INFINITY;
    int64_t j = 0;
    for (; j + HK_MAX_LANES <= n; j += HK_MAX_LANES)
        for (int l = 0; l < HK_MAX_LANES; l++) m[l] = x[j + l] > m[l] ? x[j + l] : m[l];
    for (; j < n; j++) r = x[j] > r ? x[j] : r;
    for (int l = 0; l < HK_MAX_LANES; l++) r = m[l] > r ? m[l] : r;
    return r;
}

/* Functions holding a hot loop get one clone per vector ISA, picked at
 * load time (GCC ifunc on glibc), so a generic build still runs AVX2 or
 * AVX-512 loops where the CPU has them. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_ADDRESS__)
#define HK_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HK_VECTOR_CLONES
#endif

#endif
