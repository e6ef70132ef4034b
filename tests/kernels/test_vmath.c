/* Accuracy of kernels/host/hk_vmath.h against double-precision libm.
 *
 * For each function f in {exp, exp_f (float), tanh, sigmoid, gelu_tanh,
 * silu}: every
 * STRIDE-th float bit pattern (both signs, all exponents: zeros,
 * subnormals, normals, inf, nan) plus special values is evaluated as
 * (float)f_vmath(x) and as (float)f_libm((double)x); the two floats must
 * agree to within MAX_ULP units in the last place (NaN must give NaN,
 * +-inf and +-0 must match exactly).  Prints the measured max per function.
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
/* GELU-tanh and its derivative in the cancellation-free form
 * 1 + tanh(u) = 2 / (1 + e^-2u), 1 - tanh(u) = 2 / (1 + e^2u) (libm exp) */
static double ref_gelu_tanh(double x) {
    double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
}
static double ref_gelu_tanh_grad(double x) {
    double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    double p = 2.0 / (1.0 + exp(-2.0 * u)), m = 2.0 / (1.0 + exp(2.0 * u));
    return 0.5 * p + 0.5 * x * (p * m) * 0.79788456080286535588 * (1.0 + 3.0 * 0.044715 * x * x);
}
static double ref_silu(double x) { return x * ref_sigmoid(x); }
static double v_gelu_tanh(double x) { return hk_gelu_tanh_d(x); }
static double v_gelu_tanh_grad(double x) { return hk_gelu_tanh_grad_d(x); }
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

int main(int argc, char **argv) {
    uint32_t stride = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 97;
    if (stride == 0) stride = 1;
    const Fn fns[] = {{"exp", v_exp, exp},
                      {"exp_f", v_exp_f, exp},
                      {"tanh", v_tanh, tanh},
                      {"sigmoid", v_sigmoid, ref_sigmoid},
                      {"gelu_tanh", v_gelu_tanh, ref_gelu_tanh},
                      {"gelu_tanh_grad", v_gelu_tanh_grad, ref_gelu_tanh_grad},
                      {"silu", v_silu, ref_silu}};
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f,
                              1.17549435e-38f, 88.72283f, 88.72284f, 89.0f, -87.33655f,
                              -103.97207f, -104.0f, -150.0f, 3.4028235e38f, -3.4028235e38f,
                              1e-8f, -1e-8f, 0.01f, -0.01f, 9.0f, -9.0f, 20.0f, -20.0f};
    int fail = 0, shown = 0;
    for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++) {
        int64_t worst = 0;
        float worst_x = 0;
        uint64_t count = 0;
        for (uint64_t b = 0; b < (1ull << 32) + sizeof specials / sizeof specials[0];) {
            float x;
            if (b < (1ull << 32)) {
                uint32_t u = (uint32_t)b;
                memcpy(&x, &u, 4);
                b += stride;
                if (b >= (1ull << 32)) b = 1ull << 32;
            } else {
                x = specials[b - (1ull << 32)];
                b++;
            }
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
    return fail;
}
