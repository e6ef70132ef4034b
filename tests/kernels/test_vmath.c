/* Accuracy of kernels/host/hk_vmath.h against double-precision libm.
 *
 * For each function f in {exp, exp_f (float), tanh, sigmoid, silu}: every
 * STRIDE-th float bit pattern (both signs, all exponents: zeros,
 * subnormals, normals, inf, nan) plus special values is evaluated as
 * (float)f_vmath(x) and as (float)f_libm((double)x); the two floats must
 * agree to within MAX_ULP units in the last place (NaN must give NaN,
 * +-inf and +-0 must match exactly).  Prints the measured max per function.
 *
 * GELU-tanh and its derivative are computed in float (hk_vmath.h), so
 * their bound is looser and stated per input: the value within
 * 8 + 8|u| ulps (u = sqrt(2/pi)(x + 0.044715 x^3): u's five roundings and
 * its two float constants move e^-2|u| by up to ~7|u| 2^-23 relative;
 * every float measured stays within 0.76 of the bound), the derivative within
 * (8 + 8|u|) 2^-24 of the sum of its two terms' magnitudes (it crosses
 * zero near x = -0.75, where a relative bound cannot hold), plus the
 * spacing of subnormal floats carried through (far negative tails).
 *
 *   test_vmath [STRIDE]     (default 97: ~44 M inputs per function)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk_vmath.h"

#define MAX_ULP 1

static double ref_sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}
/* GELU-tanh in the cancellation-free form 1 + tanh(u) = 2 / (1 + e^-2u)
 * (libm exp; its derivative is formed in gelu_sweep) */
static double ref_gelu_tanh(double x) {
    double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
}
static double ref_silu(double x) { return x * ref_sigmoid(x); }
static double v_silu(double x) { return x * hk_sigmoid_d(x); }
static double v_exp(double x) { return hk_exp_d(x); }
static double v_exp_f(double x) { return hk_exp_f((float)x); } /* x is a float */
static double v_tanh(double x) { return hk_tanh_d(x); }
static double v_sigmoid(double x) { return hk_sigmoid_d(x); }

/* distance in ulps between two floats of the same sign class; huge if the
 * signs differ (other than +0 / -0 against a tiny value) */
static int64_t ulp_key(float f) {
    int32_t i;
    memcpy(&i, &f, 4);
    return i < 0 ? -(int64_t)(i & 0x7fffffff) : (int64_t)i;
}

typedef struct Fn {
    const char *name;
    double (*v)(double), (*ref)(double);
} Fn;

/* the sweep's next input into *x: every stride-th float bit pattern from
 * *b = 0, then the specials; 0 when done */
static int next_input(uint64_t *b, uint32_t stride, const float *specials, size_t nspecials,
                      float *x) {
    if (*b >= (1ull << 32) + nspecials) return 0;
    if (*b < (1ull << 32)) {
        uint32_t u = (uint32_t)*b;
        memcpy(x, &u, 4);
        *b += stride;
        if (*b >= (1ull << 32)) *b = 1ull << 32;
    } else {
        *x = specials[*b - (1ull << 32)];
        ++*b;
    }
    return 1;
}

/* the float GELU-tanh pair against the double formulas, each input's
 * error over its bound (above); the worst ratio must stay <= 1 */
static int gelu_sweep(uint32_t stride, const float *specials, size_t nspecials) {
    int fail = 0, shown = 0;
    double worst[2] = {0, 0};
    float worst_x[2] = {0, 0};
    float x;
    for (uint64_t b = 0; next_input(&b, stride, specials, nspecials, &x);) {
        double xd = x, u = 0.79788456080286535588 * (xd + 0.044715 * xd * xd * xd);
        double p = 2.0 / (1.0 + exp(-2.0 * u)), m = 2.0 / (1.0 + exp(2.0 * u));
        /* the second term is 0 past |x| = 30 (p m underflows in double);
         * capped there so +-inf gets the limit, not inf * 0 */
        double xq = xd > 30 ? 30 : xd < -30 ? -30 : xd;
        double terms[2] = {0.5 * p, 0.5 * xq * (p * m) * 0.79788456080286535588 *
                                        (1.0 + 3.0 * 0.044715 * xq * xq)};
        float got[2] = {hk_gelu_tanh_f(x), hk_gelu_tanh_grad_f(x)};
        float want[2] = {(float)ref_gelu_tanh(xd), (float)(terms[0] + terms[1])};
        double k = 8.0 + 8.0 * fabs(u);
        for (int f = 0; f < 2; f++) {
            if (isnan(want[f]) || isnan(got[f]) || isinf(want[f]) || isinf(got[f])) {
                if (isnan(want[f]) != isnan(got[f]) || (!isnan(want[f]) && got[f] != want[f])) {
                    if (shown++ < 10)
                        fprintf(stderr, "gelu_tanh%s(%a): got %a want %a\n", f ? "_grad" : "", x,
                                got[f], want[f]);
                    fail = 1;
                }
                continue;
            }
            double r;
            if (f == 0) /* ulps */
                r = (double)llabs(ulp_key(got[0]) - ulp_key(want[0])) / k;
            else {
                double e = fabs((double)got[1] - (terms[0] + terms[1]));
                /* plus the subnormal e^-2|u| (spacing 2^-149) carried
                 * through x and the polynomial factor */
                double lim = k * 0x1p-24 * (fabs(terms[0]) + fabs(terms[1])) +
                             (1.0 + fabs(xq) * (1.0 + 3.0 * 0.044715 * xq * xq)) * 0x1p-147;
                r = e / lim;
            }
            if (r > worst[f]) worst[f] = r, worst_x[f] = x;
        }
    }
    printf("%-15s max %.2f of 8 + 8|u| ulps (at %a)\n", "gelu_tanh_f", worst[0], worst_x[0]);
    printf("%-15s max %.2f of (8 + 8|u|) 2^-24 (|a| + |b|) (at %a)\n", "gelu_tanh_grad_f",
           worst[1], worst_x[1]);
    return fail || worst[0] > 1 || worst[1] > 1;
}

int main(int argc, char **argv) {
    uint32_t stride = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 97;
    if (stride == 0) stride = 1;
    const Fn fns[] = {{"exp", v_exp, exp},
                      {"exp_f", v_exp_f, exp},
                      {"tanh", v_tanh, tanh},
                      {"sigmoid", v_sigmoid, ref_sigmoid},
                      {"silu", v_silu, ref_silu}};
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f,
                              1.17549435e-38f, 88.72283f, 88.72284f, 89.0f, -87.33655f,
                              -103.97207f, -104.0f, -150.0f, 3.4028235e38f, -3.4028235e38f,
                              1e-8f, -1e-8f, 0.01f, -0.01f, 9.0f, -9.0f, 20.0f, -20.0f};
    const size_t nspecials = sizeof specials / sizeof specials[0];
    int fail = 0, shown = 0;
    for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++) {
        int64_t worst = 0;
        float worst_x = 0;
        uint64_t count = 0;
        float x;
        for (uint64_t b = 0; next_input(&b, stride, specials, nspecials, &x);) {
            count++;
            float got = (float)fns[f].v(x), want = (float)fns[f].ref(x);
            if (isnan(want) || isnan(got)) {
                if (isnan(want) != isnan(got)) {
                    if (shown++ < 10) fprintf(stderr, "%s(%a): got %a want %a\n", fns[f].name, x, got, want);
                    fail = 1;
                }
                continue;
            }
            if (isinf(want) || isinf(got) || want == 0 || got == 0) {
                /* exact at the ends: inf, and zero of the same sign */
                if (got != want || signbit(got) != signbit(want)) {
                    int64_t d = llabs(ulp_key(got) - ulp_key(want));
                    if (d > MAX_ULP || isinf(got) != isinf(want)) {
                        if (shown++ < 10) fprintf(stderr, "%s(%a): got %a want %a\n", fns[f].name, x, got, want);
                        fail = 1;
                    }
                }
                continue;
            }
            int64_t d = llabs(ulp_key(got) - ulp_key(want));
            if (d > worst) {
                worst = d;
                worst_x = x;
            }
        }
        printf("%-15s max %lld ulp (at %a) over %llu inputs\n", fns[f].name, (long long)worst,
               worst_x, (unsigned long long)count);
        if (worst > MAX_ULP) fail = 1;
    }
    fail |= gelu_sweep(stride, specials, nspecials);
    return fail;
}
