/* Elementwise backward rules: one table entry per op, so the autodiff
 * pass and the tests can enumerate them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hk_train.h"

#define SQRT_2_OVER_PI 0.79788456080286535588 /* sqrt(2/pi) */
#define INV_SQRT_2PI 0.39894228040143267794   /* 1/sqrt(2 pi) */
#define TWO_OVER_SQRT_PI 1.12837916709551257390

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* forward y(x), used only when the caller passes no y */
static double f_exp(double x) { return exp(x); }
static double f_sqrt(double x) { return sqrt(x); }
static double f_tanh(double x) { return tanh(x); }
static double f_recip(double x) { return 1.0 / x; }

/* f'(x, y) */
static double d_exp(double x, double y) { return y; }
static double d_log(double x, double y) { return 1.0 / x; }
static double d_sqrt(double x, double y) { return 0.5 / y; }
static double d_tanh(double x, double y) { return 1.0 - y * y; }
static double d_sigmoid(double x, double y)
{
    double s = sigmoid(x); /* from x: y = 1 in fp32 would lose the tail */
    return s * (1.0 - s);
}
static double d_erf(double x, double y) { return TWO_OVER_SQRT_PI * exp(-x * x); }
static double d_relu(double x, double y) { return x > 0 ? 1.0 : 0.0; }
static double d_neg(double x, double y) { return -1.0; }
static double d_recip(double x, double y) { return -y * y; }
/* torch GeluBackward (approximate="none"): Phi(x) + x phi(x) */
static double d_gelu(double x, double y)
{
    return 0.5 * (1.0 + erf(x * M_SQRT1_2)) + x * INV_SQRT_2PI * exp(-0.5 * x * x);
}
/* torch GeluBackward (approximate="tanh"): with u = sqrt(2/pi)(x + 0.044715 x^3),
 * t = tanh(u): 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
static double d_gelu_tanh(double x, double y)
{
    double u = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
    double t = tanh(u);
    return 0.5 * (1.0 + t) +
           0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x);
}
/* torch silu_backward: s (1 + x (1 - s)) */
static double d_silu(double x, double y)
{
    double s = sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}

typedef struct UnaryRule {
    const char *name;
    double (*fwd)(double); /* non-NULL when the rule reads y */
    double (*deriv)(double x, double y);
} UnaryRule;

static const UnaryRule unary_rules[HK_UG_COUNT] = {
    [HK_UG_EXP] = {"exp", f_exp, d_exp},
    [HK_UG_LOG] = {"log", NULL, d_log},
    [HK_UG_SQRT] = {"sqrt", f_sqrt, d_sqrt},
    [HK_UG_TANH] = {"tanh", f_tanh, d_tanh},
    [HK_UG_SIGMOID] = {"sigmoid", NULL, d_sigmoid},
    [HK_UG_ERF] = {"erf", NULL, d_erf},
    [HK_UG_RELU] = {"relu", NULL, d_relu},
    [HK_UG_NEG] = {"neg", NULL, d_neg},
    [HK_UG_RECIPROCAL] = {"reciprocal", f_recip, d_recip},
    [HK_UG_GELU] = {"gelu", NULL, d_gelu},
    [HK_UG_GELU_TANH] = {"gelu_tanh", NULL, d_gelu_tanh},
    [HK_UG_SILU] = {"silu", NULL, d_silu},
};

const char *hk_unary_grad_name(HkUnaryGrad op)
{
    return (unsigned)op < HK_UG_COUNT ? unary_rules[op].name : NULL;
}

int hk_unary_grad_from_name(const char *name, HkUnaryGrad *op)
{
    for (int i = 0; i < HK_UG_COUNT; i++)
        if (strcmp(unary_rules[i].name, name) == 0) {
            *op = (HkUnaryGrad)i;
            return 0;
        }
    return -1;
}

int hk_unary_backward_f32(HkUnaryGrad op, const float *x, const float *y, const float *dy,
                          int64_t n, float *dx, char *err)
{
    if ((unsigned)op >= HK_UG_COUNT) {
        if (err)
            snprintf(err, HK_ERRLEN, "unary backward: unknown rule %d", (int)op);
        return -1;
    }
    const UnaryRule *r = &unary_rules[op];
    for (int64_t i = 0; i < n; i++) {
        double xi = x[i];
        double yi = r->fwd ? (y ? (double)y[i] : r->fwd(xi)) : 0.0;
        dx[i] = (float)((double)dy[i] * r->deriv(xi, yi));
    }
    return 0;
}

/* ------------------------------------------------------------ binary */
typedef struct BinaryRule {
    const char *name;
    double (*da)(double a, double b);
    double (*db)(double a, double b);
} BinaryRule;

static double one(double a, double b) { return 1.0; }
static double minus_one(double a, double b) { return -1.0; }
static double mul_da(double a, double b) { return b; }
static double mul_db(double a, double b) { return a; }
static double div_da(double a, double b) { return 1.0 / b; }
static double div_db(double a, double b) { return -a / (b * b); }
/* torch pow_backward_self: b * a^(b-1), 0 where b == 0 */
static double pow_da(double a, double b) { return b == 0.0 ? 0.0 : b * pow(a, b - 1.0); }
/* torch pow_backward_exponent: a^b * log(a), 0 where a == 0 and b >= 0 */
static double pow_db(double a, double b)
{
    return (a == 0.0 && b >= 0.0) ? 0.0 : pow(a, b) * log(a);
}

static const BinaryRule binary_rules[HK_BG_COUNT] = {
    [HK_BG_ADD] = {"add", one, one},
    [HK_BG_SUB] = {"sub", one, minus_one},
    [HK_BG_MUL] = {"mul", mul_da, mul_db},
    [HK_BG_DIV] = {"div", div_da, div_db},
    [HK_BG_POW] = {"pow", pow_da, pow_db},
};

const char *hk_binary_grad_name(HkBinaryGrad op)
{
    return (unsigned)op < HK_BG_COUNT ? binary_rules[op].name : NULL;
}

int hk_binary_grad_from_name(const char *name, HkBinaryGrad *op)
{
    for (int i = 0; i < HK_BG_COUNT; i++)
        if (strcmp(binary_rules[i].name, name) == 0) {
            *op = (HkBinaryGrad)i;
            return 0;
        }
    return -1;
}

int hk_binary_backward_f32(HkBinaryGrad op, const float *a, const float *b, const float *dy,
                           int64_t n, float *da, float *db, char *err)
{
    if ((unsigned)op >= HK_BG_COUNT) {
        if (err)
            snprintf(err, HK_ERRLEN, "binary backward: unknown rule %d", (int)op);
        return -1;
    }
    const BinaryRule *r = &binary_rules[op];
    for (int64_t i = 0; i < n; i++) {
        if (da)
            da[i] = (float)((double)dy[i] * r->da(a[i], b[i]));
        if (db)
            db[i] = (float)((double)dy[i] * r->db(a[i], b[i]));
    }
    return 0;
}
