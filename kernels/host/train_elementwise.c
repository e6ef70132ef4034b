/* Elementwise backward rules: one table entry per op, so the autodiff
 * pass and the tests can enumerate them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hk_parallel.h"
#include "hk_train.h"
#include "hk_vmath.h"

#define INV_SQRT_2PI 0.39894228040143267794   /* 1/sqrt(2 pi) */
#define TWO_OVER_SQRT_PI 1.12837916709551257390

/* Each rule is f'(x, y) evaluated in double and rounded once.  exp, tanh
 * and the sigmoid come from hk_vmath.h (vectorizable, < 1e-12 relative,
 * so the float results match libm's to within an ulp); erf stays libm.
 * GELU-tanh's derivative is hk_vmath.h's float one (its bound there). */

/* forward y(x), used only when the rule reads y and the caller passes none */
static inline double ug_fwd(HkUnaryGrad op, double x)
{
    switch (op) {
    case HK_UG_EXP: return hk_exp_d(x);
    case HK_UG_SQRT: return sqrt(x);
    case HK_UG_TANH: return hk_tanh_d(x);
    case HK_UG_RECIPROCAL: return 1.0 / x;
    default: return 0.0;
    }
}

/* f'(x, y) */
static inline double ug_deriv(HkUnaryGrad op, double x, double y)
{
    switch (op) {
    case HK_UG_EXP: return y;
    case HK_UG_LOG: return 1.0 / x;
    case HK_UG_SQRT: return 0.5 / y;
    case HK_UG_TANH: return 1.0 - y * y;
    case HK_UG_SIGMOID: {
        double s = hk_sigmoid_d(x); /* from x: y = 1 in fp32 would lose the tail */
        return s * (1.0 - s);
    }
    case HK_UG_ERF: return TWO_OVER_SQRT_PI * hk_exp_d(-x * x);
    case HK_UG_RELU: return x > 0 ? 1.0 : 0.0;
    case HK_UG_NEG: return -1.0;
    case HK_UG_RECIPROCAL: return -y * y;
    /* torch GeluBackward (approximate="none"): Phi(x) + x phi(x) */
    case HK_UG_GELU: return 0.5 * (1.0 + erf(x * M_SQRT1_2)) + x * INV_SQRT_2PI * hk_exp_d(-0.5 * x * x);
    /* torch GeluBackward (approximate="tanh"), in float: hk_vmath.h (x is a float) */
    case HK_UG_GELU_TANH: return hk_gelu_tanh_grad_f((float)x);
    /* torch silu_backward: s (1 + x (1 - s)) */
    case HK_UG_SILU: {
        double s = hk_sigmoid_d(x);
        return s * (1.0 + x * (1.0 - s));
    }
    default: return 0.0;
    }
}

typedef struct UnaryRule {
    const char *name;
    int reads_y; /* f' needs y: from the caller, else ug_fwd(x) */
} UnaryRule;

static const UnaryRule unary_rules[HK_UG_COUNT] = {
    [HK_UG_EXP] = {"exp", 1},
    [HK_UG_LOG] = {"log", 0},
    [HK_UG_SQRT] = {"sqrt", 1},
    [HK_UG_TANH] = {"tanh", 1},
    [HK_UG_SIGMOID] = {"sigmoid", 0},
    [HK_UG_ERF] = {"erf", 0},
    [HK_UG_RELU] = {"relu", 0},
    [HK_UG_NEG] = {"neg", 0},
    [HK_UG_RECIPROCAL] = {"reciprocal", 1},
    [HK_UG_GELU] = {"gelu", 0},
    [HK_UG_GELU_TANH] = {"gelu_tanh", 0},
    [HK_UG_SILU] = {"silu", 0},
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

typedef struct UgCtx {
    HkUnaryGrad op;
    const float *x, *y, *dy;
    float *dx;
} UgCtx;

/* one loop per (op, y given or not), so the switches fold into straight
 * vectorizable code; cloned per vector ISA */
HK_VECTOR_CLONES
static void ug_loop(HkUnaryGrad op, const float *x, const float *y, const float *dy, float *dx,
                    int64_t n)
{
    switch (op) {
#define UG(OP)                                                                             \
    case OP:                                                                               \
        if (!unary_rules[OP].reads_y)                                                      \
            for (int64_t i = 0; i < n; i++)                                                \
                dx[i] = (float)((double)dy[i] * ug_deriv(OP, x[i], 0.0));                  \
        else if (y)                                                                        \
            for (int64_t i = 0; i < n; i++)                                                \
                dx[i] = (float)((double)dy[i] * ug_deriv(OP, x[i], y[i]));                 \
        else                                                                               \
            for (int64_t i = 0; i < n; i++)                                                \
                dx[i] = (float)((double)dy[i] * ug_deriv(OP, x[i], ug_fwd(OP, x[i])));     \
        return;
        UG(HK_UG_EXP) UG(HK_UG_LOG) UG(HK_UG_SQRT) UG(HK_UG_TANH) UG(HK_UG_SIGMOID)
        UG(HK_UG_ERF) UG(HK_UG_RELU) UG(HK_UG_NEG) UG(HK_UG_RECIPROCAL) UG(HK_UG_GELU)
        UG(HK_UG_GELU_TANH) UG(HK_UG_SILU)
#undef UG
    default: return;
    }
}

static void ug_range(void *c, int64_t lo, int64_t hi)
{
    const UgCtx *u = c;
    ug_loop(u->op, u->x + lo, u->y ? u->y + lo : NULL, u->dy + lo, u->dx + lo, hi - lo);
}

int hk_unary_backward_f32(HkUnaryGrad op, const float *x, const float *y, const float *dy,
                          int64_t n, float *dx, char *err)
{
    if ((unsigned)op >= HK_UG_COUNT) {
        if (err)
            snprintf(err, HK_ERRLEN, "unary backward: unknown rule %d", (int)op);
        return -1;
    }
    UgCtx c = {op, x, y, dy, dx};
    hk_parallel_for(n, HK_GRAIN_MATH, ug_range, &c);
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

/* d/da, d/db as inline switches so the per-op loops below fold and vectorize
 * (the table's function pointers stay the reference the names come from) */
static inline double bg_da(HkBinaryGrad op, double a, double b)
{
    switch (op) {
    case HK_BG_ADD: case HK_BG_SUB: return 1.0;
    case HK_BG_MUL: return b;
    case HK_BG_DIV: return 1.0 / b;
    default: return pow_da(a, b);
    }
}
static inline double bg_db(HkBinaryGrad op, double a, double b)
{
    switch (op) {
    case HK_BG_ADD: return 1.0;
    case HK_BG_SUB: return -1.0;
    case HK_BG_MUL: return a;
    case HK_BG_DIV: return -a / (b * b);
    default: return pow_db(a, b);
    }
}

typedef struct BgCtx {
    HkBinaryGrad op;
    const float *a, *b, *dy;
    float *da, *db;
} BgCtx;

HK_VECTOR_CLONES
static void bg_loop(HkBinaryGrad op, const float *a, const float *b, const float *dy, float *da,
                    float *db, int64_t n)
{
    switch (op) {
#define BG(OP)                                                                        \
    case OP:                                                                          \
        if (da)                                                                       \
            for (int64_t i = 0; i < n; i++)                                           \
                da[i] = (float)((double)dy[i] * bg_da(OP, a[i], b[i]));               \
        if (db)                                                                       \
            for (int64_t i = 0; i < n; i++)                                           \
                db[i] = (float)((double)dy[i] * bg_db(OP, a[i], b[i]));               \
        return;
        BG(HK_BG_ADD) BG(HK_BG_SUB) BG(HK_BG_MUL) BG(HK_BG_DIV) BG(HK_BG_POW)
#undef BG
    default: return;
    }
}

static void bg_range(void *c, int64_t lo, int64_t hi)
{
    const BgCtx *u = c;
    bg_loop(u->op, u->a + lo, u->b + lo, u->dy + lo, u->da ? u->da + lo : NULL,
            u->db ? u->db + lo : NULL, hi - lo);
}

int hk_binary_backward_f32(HkBinaryGrad op, const float *a, const float *b, const float *dy,
                           int64_t n, float *da, float *db, char *err)
{
    if ((unsigned)op >= HK_BG_COUNT) {
        if (err)
            snprintf(err, HK_ERRLEN, "binary backward: unknown rule %d", (int)op);
        return -1;
    }
    BgCtx c = {op, a, b, dy, da, db};
    hk_parallel_for(n, HK_GRAIN_CHEAP, bg_range, &c);
    return 0;
}
