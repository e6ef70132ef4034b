/* The threaded / vectorized host kernels against plain scalar references
 * (the loops they replaced, libm per element, written out below), and a
 * dump of every output so test_hk_threads.py can check the bytes are the
 * same for HETC_THREADS=1, 2 and 3.
 *
 *   test_hk_threads OUT.bin
 *
 * Shapes: sizes that are not multiples of any vector width, long enough
 * to be split into many chunks (above the kernels' grains), broadcast
 * operands (bias rows, scalars, columns, general), and empty tensors.
 * Tolerance per case in float ulps: 0 (bit-exact) where the kernel keeps
 * the reference's arithmetic and summation order; a few ulps where exp /
 * tanh come from hk_vmath.h instead of libm.  Prints the measured max. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk.h"
#include "hk_parallel.h"
#include "hk_sgemm.h"
#include "hk_train.h"
#include "hk_vmath.h" /* the float GELU-tanh twins */

static FILE *dump;
static int failures;
static uint64_t rng = 88172645463325252ull;

static float frand(float lo, float hi) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
}
static float *fvec(int64_t n, float lo, float hi) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = frand(lo, hi);
    return p;
}
static float *fzero(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

static int64_t ulps(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INT64_MAX;
    if (a == b) return 0;
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    int64_t ka = ia < 0 ? -(int64_t)(ia & 0x7fffffff) : ia;
    int64_t kb = ib < 0 ? -(int64_t)(ib & 0x7fffffff) : ib;
    return llabs(ka - kb);
}

/* compare got with want (n floats) to tol ulps, and dump got */
static void check(const char *name, const float *got, const float *want, int64_t n, int64_t tol) {
    int64_t worst = 0, at = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t u = ulps(got[i], want[i]);
        if (u > worst) worst = u, at = i;
    }
    printf("%-34s n=%-8lld max %lld ulp (tol %lld)\n", name, (long long)n, (long long)worst,
           (long long)tol);
    if (worst > tol) {
        printf("  FAIL at %lld: got %.9g want %.9g\n", (long long)at, got[at], want[at]);
        failures++;
    }
    if (n > 0) fwrite(got, sizeof(float), (size_t)n, dump);
}

static void ok(int rc, const char *what, const char *err) {
    if (rc) {
        printf("FAIL %s: %s\n", what, err);
        failures++;
    }
}

/* ------------------------------------------------------------ binary */
static float ref_bin(HkBinOp op, float x, float y) {
    switch (op) {
    case HK_ADD: return x + y;
    case HK_SUB: return x - y;
    case HK_MUL: return x * y;
    case HK_DIV: return x / y;
    case HK_MAX: return (x != x || x > y) ? x : y;
    default: return (x != x || x < y) ? x : y;
    }
}

static void case_binary(int ra, const int64_t *da, int rb, const int64_t *db) {
    int ro;
    int64_t dout[HK_MAX_RANK], sa[HK_MAX_RANK], sb[HK_MAX_RANK], idx[HK_MAX_RANK] = {0};
    hk_bcast_shape(ra, da, rb, db, &ro, dout);
    hk_bcast_strides(ra, da, ro, dout, sa);
    hk_bcast_strides(rb, db, ro, dout, sb);
    int64_t na = hk_numel(ra, da), nb = hk_numel(rb, db), no = hk_numel(ro, dout);
    float *a = fvec(na, -3, 3), *b = fvec(nb, 0.5f, 3), *o = fzero(no), *w = fzero(no);
    if (na > 2) a[1] = NAN;
    const HkBinOp ops[] = {HK_ADD, HK_SUB, HK_MUL, HK_DIV, HK_MAX, HK_MIN};
    for (size_t k = 0; k < 6; k++) {
        char err[HK_ERRLEN] = "", name[96];
        ok(hk_binary(ops[k], HK_F32, a, ra, da, HK_F32, b, rb, db, o, ro, dout, err), "binary",
           err);
        memset(idx, 0, sizeof idx);
        for (int64_t i = 0; i < no; i++) {
            int64_t ia = 0, ib = 0;
            for (int d = 0; d < ro; d++) ia += idx[d] * sa[d], ib += idx[d] * sb[d];
            w[i] = ref_bin(ops[k], a[ia], b[ib]);
            for (int d = ro - 1; d >= 0; d--) {
                if (++idx[d] < dout[d]) break;
                idx[d] = 0;
            }
        }
        snprintf(name, sizeof name, "binary op%d [%lld..]x[%lld..] r%d", (int)ops[k],
                 (long long)(ra ? da[0] : 1), (long long)(rb ? db[0] : 1), ro);
        check(name, o, w, no, 0);
    }
    free(a), free(b), free(o), free(w);
}

/* ------------------------------------------------------------ unary */
static double ref_sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}
static double ref_un(HkUnOp op, double x) {
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
    case HK_SIGMOID: return ref_sigmoid(x);
    case HK_ERF: return erf(x);
    case HK_RELU: return x > 0 ? x : 0 * x;
    case HK_FLOOR: return floor(x);
    case HK_CEIL: return ceil(x);
    case HK_GELU: return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
    case HK_GELU_TANH: /* float by design: the twin test_vmath bounds against the formula */
        return hk_gelu_tanh_f((float)x);
    case HK_SILU: return x * ref_sigmoid(x);
    default: return x;
    }
}

static void case_unary(int64_t n) {
    float *x = fvec(n, -12, 12), *y = fzero(n), *w = fzero(n);
    const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, 89.0f, -104.0f};
    for (int64_t i = 0; i < n && i < 9; i++) x[i * 7 % n] = sp[i];
    for (int op = 0; op < HK_UNOP_COUNT; op++) {
        if (op == HK_NOT) continue;
        char err[HK_ERRLEN] = "", name[64];
        ok(hk_unary((HkUnOp)op, HK_F32, x, y, n, err), "unary", err);
        for (int64_t i = 0; i < n; i++) w[i] = (float)ref_un((HkUnOp)op, x[i]);
        snprintf(name, sizeof name, "unary op%d", op);
        check(name, y, w, n, 1);
    }
    free(x), free(y), free(w);
}

/* ------------------------------------------------------------ unary backward */
static double ref_ug(HkUnaryGrad op, double x, const float *yp) {
    switch (op) {
    case HK_UG_EXP: return yp ? *yp : exp(x);
    case HK_UG_LOG: return 1.0 / x;
    case HK_UG_SQRT: return 0.5 / (yp ? *yp : sqrt(x));
    case HK_UG_TANH: { double t = yp ? *yp : tanh(x); return 1.0 - t * t; }
    case HK_UG_SIGMOID: { double s = ref_sigmoid(x); return s * (1.0 - s); }
    case HK_UG_ERF: return 1.12837916709551257390 * exp(-x * x);
    case HK_UG_RELU: return x > 0 ? 1.0 : 0.0;
    case HK_UG_NEG: return -1.0;
    case HK_UG_RECIPROCAL: { double r = yp ? *yp : 1.0 / x; return -r * r; }
    case HK_UG_GELU:
        return 0.5 * (1.0 + erf(x * 0.70710678118654752440)) +
               x * 0.39894228040143267794 * exp(-0.5 * x * x);
    case HK_UG_GELU_TANH: return hk_gelu_tanh_grad_f((float)x); /* as HK_GELU_TANH above */
    case HK_UG_SILU: { double s = ref_sigmoid(x); return s * (1.0 + x * (1.0 - s)); }
    default: return 0;
    }
}

static void case_unary_bwd(int64_t n) {
    float *x = fvec(n, 0.1f, 9), *y = fvec(n, -1, 1), *dy = fvec(n, -2, 2), *dx = fzero(n),
          *w = fzero(n);
    for (int64_t i = 0; i < n; i += 2) x[i] = -x[i] * 0.5f; /* both signs; log/sqrt see > 0 */
    for (int op = 0; op < HK_UG_COUNT; op++)
        for (int withy = 0; withy < 2; withy++) {
            if ((op == HK_UG_LOG || op == HK_UG_SQRT) && 1)
                for (int64_t i = 0; i < n; i++) x[i] = fabsf(x[i]) + 0.1f;
            char err[HK_ERRLEN] = "", name[64];
            ok(hk_unary_backward_f32((HkUnaryGrad)op, x, withy ? y : NULL, dy, n, dx, err),
               "unary backward", err);
            for (int64_t i = 0; i < n; i++)
                w[i] = (float)((double)dy[i] * ref_ug((HkUnaryGrad)op, x[i], withy ? &y[i] : NULL));
            snprintf(name, sizeof name, "unary_backward %s%s", hk_unary_grad_name(op),
                     withy ? " (y)" : "");
            check(name, dx, w, n, 1);
        }
    free(x), free(y), free(dy), free(dx), free(w);
}

/* ------------------------------------------------------------ binary backward */
static void case_binary_bwd(int64_t n) {
    float *a = fvec(n, 0.5f, 3), *b = fvec(n, 0.5f, 3), *dy = fvec(n, -2, 2), *da = fzero(n),
          *db = fzero(n), *wa = fzero(n), *wb = fzero(n);
    for (int op = 0; op < HK_BG_COUNT; op++) {
        char err[HK_ERRLEN] = "", name[64];
        ok(hk_binary_backward_f32((HkBinaryGrad)op, a, b, dy, n, da, db, err), "binary bwd", err);
        for (int64_t i = 0; i < n; i++) {
            double x = a[i], y = b[i], ga, gb;
            switch (op) {
            case HK_BG_ADD: ga = 1, gb = 1; break;
            case HK_BG_SUB: ga = 1, gb = -1; break;
            case HK_BG_MUL: ga = y, gb = x; break;
            case HK_BG_DIV: ga = 1.0 / y, gb = -x / (y * y); break;
            default: ga = y * pow(x, y - 1.0), gb = pow(x, y) * log(x); break;
            }
            wa[i] = (float)((double)dy[i] * ga);
            wb[i] = (float)((double)dy[i] * gb);
        }
        snprintf(name, sizeof name, "binary_backward %s da", hk_binary_grad_name(op));
        check(name, da, wa, n, 0);
        snprintf(name, sizeof name, "binary_backward %s db", hk_binary_grad_name(op));
        check(name, db, wb, n, 0);
    }
    free(a), free(b), free(dy), free(da), free(db), free(wa), free(wb);
}

/* ------------------------------------------------------------ softmax / CE */
static void case_softmax(int rank, const int64_t *dims, int axis) {
    int64_t n = hk_numel(rank, dims), outer = hk_numel(axis, dims), len = dims[axis];
    int64_t inner = hk_numel(rank - axis - 1, dims + axis + 1);
    float *x = fvec(n, -20, 20), *y = fzero(n), *w = fzero(n), *dy = fvec(n, -1, 1),
          *dx = fzero(n);
    for (int lg = 0; lg < 2; lg++) {
        char err[HK_ERRLEN] = "", name[64];
        ok(hk_softmax(HK_F32, x, rank, dims, axis, lg, y, err), "softmax", err);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < inner; j++) {
                int64_t b = o * len * inner + j;
                double m = -INFINITY, s = 0;
                for (int64_t i = 0; i < len; i++) m = fmax(m, x[b + i * inner]);
                for (int64_t i = 0; i < len; i++) s += exp(x[b + i * inner] - m);
                for (int64_t i = 0; i < len; i++) {
                    double v = x[b + i * inner];
                    w[b + i * inner] = (float)(lg ? v - (m + log(s)) : exp(v - m) / s);
                }
            }
        snprintf(name, sizeof name, "softmax%s axis %d of rank %d", lg ? " (log)" : "", axis, rank);
        check(name, y, w, n, 2);
        /* backward from the kernel's own y */
        ok(hk_softmax_backward_f32(y, dy, rank, dims, axis, lg, dx, err), "softmax bwd", err);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < inner; j++) {
                int64_t b = o * len * inner + j;
                double s = 0;
                for (int64_t i = 0; i < len; i++) {
                    int64_t k = b + i * inner;
                    s += lg ? (double)dy[k] : (double)dy[k] * y[k];
                }
                for (int64_t i = 0; i < len; i++) {
                    int64_t k = b + i * inner;
                    w[k] = lg ? (float)(dy[k] - exp((double)y[k]) * s) : (float)(y[k] * (dy[k] - s));
                }
            }
        snprintf(name, sizeof name, "softmax_backward%s axis %d", lg ? " (log)" : "", axis);
        /* log: dy - exp(y) s cancels where the two are close; compare absolutely */
        if (lg) {
            double worst = 0;
            for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(dx[i] - w[i]));
            printf("%-34s max abs diff %.3g (tol 1e-6)\n", name, worst);
            if (worst > 1e-6) failures++;
            if (n) fwrite(dx, sizeof(float), (size_t)n, dump);
        } else check(name, dx, w, n, 0);
    }
    free(x), free(y), free(w), free(dy), free(dx);
}

static void case_ce(int64_t N, int64_t V) {
    float *x = fvec(N * V, -8, 8), *lse = fzero(N), *d = fzero(N * V), *w = fzero(N * V),
          *wl = fzero(N);
    int64_t *t = malloc(sizeof(int64_t) * (size_t)(N > 0 ? N : 1)), count = 0;
    for (int64_t i = 0; i < N; i++) t[i] = i % 11 == 3 ? -100 : (int64_t)(frand(0, 1) * (float)V) % V;
    float loss = 0;
    char err[HK_ERRLEN] = "";
    ok(hk_cross_entropy_fwd_f32(x, HK_I64, t, N, V, 1, -100, &loss, lse, &count, err), "ce fwd", err);
    double total = 0;
    int64_t cnt = 0;
    for (int64_t i = 0; i < N; i++) {
        const float *r = x + i * V;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < V; j++) m = fmax(m, r[j]);
        for (int64_t j = 0; j < V; j++) s += exp((double)r[j] - m);
        double l = m + log(s);
        wl[i] = (float)l;
        if (t[i] == -100) continue;
        total += l - r[t[i]];
        cnt++;
    }
    float wloss = cnt ? (float)(total / (double)cnt) : NAN;
    check("cross_entropy lse", lse, wl, N, 1);
    check("cross_entropy loss", &loss, &wloss, 1, 2);
    ok(hk_cross_entropy_bwd_f32(x, HK_I64, t, lse, N, V, 1, -100, 1.0f, d, err), "ce bwd", err);
    double wt = cnt ? 1.0 / (double)cnt : 0.0;
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < V; j++)
            w[i * V + j] = t[i] == -100 ? 0.0f
                                        : (float)(wt * (exp((double)x[i * V + j] - lse[i]) -
                                                        (j == t[i] ? 1.0 : 0.0)));
    /* the exps are float (hk_exp_f, within an ulp) of x - lse rounded to
     * float (as torch's log-softmax is), so an element's relative error is
     * bounded by (|x - lse| + 3) 2^-23: the argument's rounding, the exp's
     * ulp, w's rounding and the product's; the target's term is double */
    double worst = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < V; j++) {
            int64_t k = i * V + j;
            double e = fabs((double)d[k] - (double)w[k]), lim = (fabs((double)x[k] - lse[i]) + 3.0) *
                                                                 0x1p-23 * fabs((double)w[k]);
            double r = e == 0 ? 0 : lim > 0 ? e / lim : INFINITY;
            if (r > worst) worst = r, at = k;
        }
    printf("%-34s n=%-8lld max %.2f of the bound (|x - lse| + 3) 2^-23 relative\n",
           "cross_entropy dlogits", (long long)(N * V), worst);
    if (worst > 1) {
        printf("  FAIL at %lld: got %.9g want %.9g\n", (long long)at, d[at], w[at]);
        failures++;
    }
    if (N * V > 0) fwrite(d, sizeof(float), (size_t)(N * V), dump);
    free(x), free(lse), free(d), free(w), free(wl), free(t);
}

/* ------------------------------------------------------------ norms */
static void case_norm(int64_t R, int64_t n) {
    float *x = fvec(R * n, -3, 3), *sc = fvec(n, 0.5f, 1.5f), *bi = fvec(n, -1, 1),
          *dy = fvec(R * n, -1, 1), *y = fzero(R * n), *w = fzero(R * n);
    float *mean = fzero(R), *rstd = fzero(R), *wm = fzero(R), *wr = fzero(R);
    float *dsc = fvec(n, -1, 1), *dbi = fvec(n, -1, 1), *wdsc = fzero(n), *wdbi = fzero(n);
    double eps = 1e-5;
    double *sg = calloc((size_t)n + 1, sizeof(double)), *sb = calloc((size_t)n + 1, sizeof(double));
    char err[HK_ERRLEN] = "";
    hk_layernorm_f32(x, sc, bi, R, n, eps, y);
    hk_layernorm_stats_f32(x, R, n, eps, mean, rstd);
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * n;
        double mu = 0, var = 0, s = 0, ss = 0;
        for (int64_t i = 0; i < n; i++) mu += xr[i];
        mu /= (double)n;
        for (int64_t i = 0; i < n; i++) var += (xr[i] - mu) * (xr[i] - mu);
        var /= (double)n;
        double inv = 1.0 / sqrt(var + eps);
        for (int64_t i = 0; i < n; i++) w[r * n + i] = (float)((xr[i] - mu) * inv * sc[i] + bi[i]);
        for (int64_t i = 0; i < n; i++) s += xr[i];
        double m2 = s / (double)n;
        for (int64_t i = 0; i < n; i++) ss += (xr[i] - m2) * (xr[i] - m2);
        wm[r] = (float)m2;
        wr[r] = (float)(1.0 / sqrt(ss / (double)n + eps));
    }
    check("layernorm fwd", y, w, R * n, 0);
    check("layernorm stats mean", mean, wm, R, 0);
    check("layernorm stats rstd", rstd, wr, R, 0);
    /* backward, accumulating into dscale / dbias */
    for (int64_t j = 0; j < n; j++) wdsc[j] = dsc[j], wdbi[j] = dbi[j];
    ok(hk_layernorm_backward_f32(x, sc, dy, mean, rstd, R, n, eps, y, dsc, dbi, 1, err), "ln bwd",
       err);
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * n, *dyr = dy + r * n;
        double mu = mean[r], rs = rstd[r], mg = 0, mgx = 0;
        for (int64_t j = 0; j < n; j++) {
            double xh = (xr[j] - mu) * rs, g = (double)dyr[j] * sc[j];
            mg += g;
            mgx += g * xh;
            sg[j] += dyr[j] * xh;
            sb[j] += dyr[j];
        }
        mg /= (double)n;
        mgx /= (double)n;
        for (int64_t j = 0; j < n; j++) {
            double xh = (xr[j] - mu) * rs, g = (double)dyr[j] * sc[j];
            w[r * n + j] = (float)(rs * (g - mg - xh * mgx));
        }
    }
    for (int64_t j = 0; j < n; j++) wdsc[j] = (float)(wdsc[j] + sg[j]), wdbi[j] = (float)(wdbi[j] + sb[j]);
    check("layernorm bwd dx", y, w, R * n, 0);
    check("layernorm bwd dscale (accum)", dsc, wdsc, n, 0);
    check("layernorm bwd dbias (accum)", dbi, wdbi, n, 0);
    /* RMSNorm */
    hk_rmsnorm_f32(x, sc, R, n, eps, y);
    memset(sg, 0, sizeof(double) * (size_t)n);
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * n;
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        double inv = 1.0 / sqrt(ss / (double)n + eps);
        for (int64_t i = 0; i < n; i++) w[r * n + i] = (float)(xr[i] * inv * sc[i]);
    }
    check("rmsnorm fwd", y, w, R * n, 0);
    ok(hk_rmsnorm_backward_f32(x, sc, dy, NULL, R, n, eps, y, dsc, 0, err), "rms bwd", err);
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * n, *dyr = dy + r * n;
        double ss = 0, mgx = 0;
        for (int64_t j = 0; j < n; j++) ss += (double)xr[j] * xr[j];
        double rs = 1.0 / sqrt(ss / (double)n + eps);
        for (int64_t j = 0; j < n; j++) {
            double g = (double)dyr[j] * sc[j];
            mgx += g * xr[j];
            sg[j] += (double)dyr[j] * xr[j] * rs;
        }
        mgx /= (double)n;
        for (int64_t j = 0; j < n; j++) {
            double g = (double)dyr[j] * sc[j];
            w[r * n + j] = (float)(rs * g - xr[j] * rs * rs * rs * mgx);
        }
    }
    for (int64_t j = 0; j < n; j++) wdsc[j] = (float)sg[j];
    check("rmsnorm bwd dx", y, w, R * n, 0);
    check("rmsnorm bwd dscale", dsc, wdsc, n, 0);
    free(x), free(sc), free(bi), free(dy), free(y), free(w), free(mean), free(rstd), free(wm);
    free(wr), free(dsc), free(dbi), free(wdsc), free(wdbi), free(sg), free(sb);
}

/* ------------------------------------------------------------ reductions */
static void case_reduce(int rank, const int64_t *dims, const int *red) {
    int64_t n = hk_numel(rank, dims), ydims[HK_MAX_RANK], sy[HK_MAX_RANK], idx[HK_MAX_RANK] = {0};
    for (int i = 0; i < rank; i++) ydims[i] = red[i] ? 1 : dims[i];
    int64_t ny = hk_numel(rank, ydims), count = n / (ny ? ny : 1);
    hk_contig_strides(rank, ydims, sy);
    float *x = fvec(n, -2, 2), *y = fzero(ny), *w = fzero(ny);
    double *acc = malloc(sizeof(double) * (size_t)(ny ? ny : 1));
    const HkRedOp ops[] = {HK_RSUM, HK_RMEAN, HK_RMAX};
    for (int k = 0; k < 3; k++) {
        char err[HK_ERRLEN] = "", name[64];
        ok(hk_reduce(ops[k], HK_F32, x, rank, dims, red, y, err), "reduce", err);
        for (int64_t j = 0; j < ny; j++) acc[j] = ops[k] == HK_RMAX ? -INFINITY : 0;
        memset(idx, 0, sizeof idx);
        for (int64_t i = 0; i < n; i++) {
            int64_t o = 0;
            for (int d = 0; d < rank; d++) o += red[d] ? 0 : idx[d] * sy[d];
            double v = x[i];
            acc[o] = ops[k] == HK_RMAX ? ((v > acc[o] || v != v) ? v : acc[o]) : acc[o] + v;
            for (int d = rank - 1; d >= 0; d--) {
                if (++idx[d] < dims[d]) break;
                idx[d] = 0;
            }
        }
        for (int64_t j = 0; j < ny; j++)
            w[j] = (float)(ops[k] == HK_RMEAN ? acc[j] / (double)count : acc[j]);
        snprintf(name, sizeof name, "reduce op%d rank %d (%d%d%d)", k, rank, red[0],
                 rank > 1 ? red[1] : 0, rank > 2 ? red[2] : 0);
        check(name, y, w, ny, 0);
        /* the same sum through reduce-sum-to-shape (gradient of broadcasting) */
        if (ops[k] == HK_RSUM) {
            ok(hk_reduce_sum_to_shape_f32(x, rank, dims, rank, ydims, y, err), "sum_to_shape", err);
            check("reduce_sum_to_shape", y, w, ny, 0);
        }
    }
    free(x), free(y), free(w), free(acc);
}

/* LinearGrad's bias gradient: column sums of dy in row order, in double
 * (the column-at-a-time loop it replaced), fresh and accumulated */
static void case_linear_dbias(int64_t M, int64_t N) {
    float *dy = fvec(M * N, -1, 1), *db = fzero(N), *w = fzero(N), *acc = fvec(N, -1, 1),
          *wacc = fzero(N);
    char err[256] = "";
    for (int64_t j = 0; j < N; j++) {
        double sum = 0;
        for (int64_t i = 0; i < M; i++) sum += dy[i * N + j];
        w[j] = (float)sum;
        wacc[j] = (float)(acc[j] + sum);
    }
    ok(hk_linear_backward_f32(NULL, NULL, dy, M, 1, N, NULL, NULL, db, 0, err),
       "linear_backward dbias", err);
    check("linear_backward dbias", db, w, N, 0);
    ok(hk_linear_backward_f32(NULL, NULL, dy, M, 1, N, NULL, NULL, acc, 1, err),
       "linear_backward dbias accum", err);
    check("linear_backward dbias accum", acc, wacc, N, 0);
    free(dy), free(db), free(w), free(acc), free(wacc);
}


/* ------------------------------------------------------------ GEMM, attention */
/* hk_sgemm (split across the pool in blocks that depend on the shape only)
 * against a double-precision product, within the float error bound
 * K * 2^-23 * sum_k |a_ik b_kj| (+ the output's own rounding); the dump
 * then shows it is the same bits for every thread count. */
static void case_gemm(int64_t M, int64_t N, int64_t K, int ta, int tb, float beta) {
    float *a = fvec(M * K, -1, 1), *b = fvec(K * N, -1, 1), *c = fvec(M * N, -1, 1);
    float *c0 = malloc(sizeof(float) * (size_t)(M * N > 0 ? M * N : 1));
    memcpy(c0, c, sizeof(float) * (size_t)(M * N));
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    hk_sgemm(ta, tb, M, N, K, 0.5f, a, lda, b, ldb, beta, c, N);
    int64_t bad = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                double x = a[ta ? k * lda + i : i * lda + k], y = b[tb ? j * ldb + k : k * ldb + j];
                s += x * y;
                mag += fabs(x * y);
            }
            double want = 0.5 * s + beta * c0[i * N + j];
            double tol = (double)(K + 2) * 0x1p-23 * (0.5 * mag + fabs(beta * c0[i * N + j]));
            if (fabs(c[i * N + j] - want) > tol) bad++;
        }
    printf("%-34s %lldx%lldx%lld t%d%d: %lld outside the error bound\n", "sgemm", (long long)M,
           (long long)N, (long long)K, ta, tb, (long long)bad);
    if (bad) failures++;
    if (M * N > 0) fwrite(c, sizeof(float), (size_t)(M * N), dump);
    free(a), free(b), free(c), free(c0);
}

/* Attention forward and backward over many heads (one head per pool chunk)
 * equal the same kernels called one head at a time, bit for bit. */
static void case_attention(int64_t H, int64_t T, int64_t D, int causal) {
    int64_t nq = H * T * D;
    float *q = fvec(nq, -1, 1), *k = fvec(nq, -1, 1), *v = fvec(nq, -1, 1), *dout = fvec(nq, -1, 1);
    float *y = fzero(nq), *dq = fzero(nq), *dk = fzero(nq), *dv = fzero(nq);
    float *y1 = fzero(nq), *dq1 = fzero(nq), *dk1 = fzero(nq), *dv1 = fzero(nq);
    char err[256] = "";
    float sc = 1.0f / sqrtf((float)D);
    ok(hk_attention_f32(q, k, v, H, T, T, D, D, causal, sc, y, err), "attention", err);
    ok(hk_attention_backward_f32(q, k, v, dout, H, T, T, D, D, causal, sc, dq, dk, dv, err),
       "attention backward", err);
    for (int64_t h = 0; h < H; h++) {
        int64_t o = h * T * D;
        ok(hk_attention_f32(q + o, k + o, v + o, 1, T, T, D, D, causal, sc, y1 + o, err),
           "attention (one head)", err);
        ok(hk_attention_backward_f32(q + o, k + o, v + o, dout + o, 1, T, T, D, D, causal, sc,
                                     dq1 + o, dk1 + o, dv1 + o, err),
           "attention backward (one head)", err);
    }
    check("attention heads", y, y1, nq, 0);
    check("attention backward dq", dq, dq1, nq, 0);
    check("attention backward dk", dk, dk1, nq, 0);
    check("attention backward dv", dv, dv1, nq, 0);
    free(q), free(k), free(v), free(dout), free(y), free(dq), free(dk), free(dv);
    free(y1), free(dq1), free(dk1), free(dv1);
}

/* ------------------------------------------------------------ optimizer, norm, memory */
/* The fused AdamW on the pool, in place and out of place, against the
 * element-wise reference of its float chain (the kernel's comment: no FMA,
 * the scalars rounded as the op chain rounds them), bit for bit. */
static void case_adamw(int64_t n) {
    float *p = fvec(n, -1, 1), *m = fvec(n, -0.1f, 0.1f), *v = fvec(n, 0, 0.01f),
          *g = fvec(n, -1, 1);
    float *wp = fzero(n), *wm = fzero(n), *wv = fzero(n), *po = fzero(n), *mo = fzero(n),
          *vo = fzero(n);
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    const float lr = 1e-3f, cs = 0.75f;
    const int64_t step = 3;
    volatile float t = (float)step; /* the reference, written out */
    float bc1 = 1.0f - (float)pow((double)(float)b1, (double)t);
    float bc2 = 1.0f - (float)pow((double)(float)b2, (double)t);
    float fb1 = (float)b1, omb1 = (float)(1.0 - b1), fb2 = (float)b2, omb2 = (float)(1.0 - b2);
    float decay = 1.0f - lr * (float)wd, step_size = lr / bc1;
    float bc2s = (float)sqrt((double)bc2), feps = (float)eps;
    for (int64_t i = 0; i < n; i++) {
        volatile float gi = g[i] * cs;
        volatile float mi = m[i] * fb1 + gi * omb1;
        volatile float vi = v[i] * fb2 + (gi * gi) * omb2;
        volatile float den = sqrtf(vi) / bc2s + feps;
        volatile float pi = p[i] * decay;
        wm[i] = mi, wv[i] = vi;
        wp[i] = pi - (mi / den) * step_size;
    }
    char err[256] = "";
    ok(hk_adamw_fused_f32(p, m, v, g, n, lr, step, &cs, b1, b2, eps, wd, po, mo, vo, err),
       "adamw out of place", err);
    check("adamw P (out of place)", po, wp, n, 0);
    check("adamw m (out of place)", mo, wm, n, 0);
    check("adamw v (out of place)", vo, wv, n, 0);
    ok(hk_adamw_fused_f32(p, m, v, g, n, lr, step, &cs, b1, b2, eps, wd, p, m, v, err),
       "adamw in place", err);
    check("adamw P (in place)", p, wp, n, 0);
    check("adamw m (in place)", m, wm, n, 0);
    free(p), free(m), free(v), free(g), free(wp), free(wm), free(wv), free(po), free(mo), free(vo);
}

/* axpy on the pool (one add per element: bit for bit); the sum of squares
 * in its fixed block order against an exactly rounded reference (long
 * double, within n * 2^-52 relative: the double sum's bound), dumped so the
 * thread counts must agree; copies and zero fills. */
static void case_axpy_sumsq_mem(int64_t n) {
    float *x = fvec(n, -2, 2), *y = fvec(n, -1, 1), *w = fzero(n), *z = fvec(n, 1, 2);
    for (int64_t i = 0; i < n; i++) w[i] = y[i] + 0.25f * x[i];
    hk_axpy_f32(n, 0.25f, x, y);
    check("axpy (pool)", y, w, n, 0);
    long double ref = 0;
    for (int64_t i = 0; i < n; i++) ref += (long double)x[i] * (long double)x[i];
    double s = hk_sumsq_f32(x, n);
    double rel = ref != 0 ? fabs((double)((s - ref) / ref)) : fabs(s);
    printf("%-34s n=%-8lld rel err %.2g\n", "sum of squares (blocks)", (long long)n, rel);
    if (rel > (double)(n + 1) * 0x1p-52) {
        printf("  FAIL: %.17g vs %.17Lg\n", s, ref);
        failures++;
    }
    fwrite(&s, sizeof s, 1, dump);
    hk_parallel_memcpy(z, x, sizeof(float) * (size_t)n);
    check("memcpy (pool)", z, x, n, 0);
    hk_parallel_memset0(z, sizeof(float) * (size_t)n);
    float *zero = fzero(n);
    check("memset 0 (pool)", z, zero, n, 0);
    free(x), free(y), free(w), free(z), free(zero);
}

/* The weight gradient of a Linear: an output full of NaN beforehand must
 * not matter (beta 0 where the gradient starts), and it equals a double
 * product within the float bound; with accum it adds to what is there. */
static void case_linear_dw(int64_t M, int64_t K, int64_t N) {
    float *x = fvec(M * K, -1, 1), *dy = fvec(M * N, -1, 1), *dw = fzero(K * N),
          *acc = fvec(K * N, -1, 1), *acc0 = fzero(K * N);
    memcpy(acc0, acc, sizeof(float) * (size_t)(K * N));
    for (int64_t i = 0; i < K * N; i++) dw[i] = NAN;
    char err[256] = "";
    ok(hk_linear_backward_f32(x, NULL, dy, M, K, N, NULL, dw, NULL, 0, err), "linear dw", err);
    ok(hk_linear_backward_f32(x, NULL, dy, M, K, N, NULL, acc, NULL, 1, err), "linear dw accum",
       err);
    int64_t bad = 0;
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) {
            double sum = 0, mag = 0;
            for (int64_t i = 0; i < M; i++) {
                sum += (double)x[i * K + k] * dy[i * N + j];
                mag += fabs((double)x[i * K + k] * dy[i * N + j]);
            }
            double tol = (double)(M + 2) * 0x1p-23 * mag;
            if (!(fabs(dw[k * N + j] - sum) <= tol)) bad++;
            if (!(fabs(acc[k * N + j] - (acc0[k * N + j] + sum)) <=
                  tol + 0x1p-23 * fabs(acc0[k * N + j] + sum) * 2))
                bad++;
        }
    printf("%-34s %lldx%lldx%lld: %lld outside the error bound\n", "linear dw (NaN before)",
           (long long)M, (long long)K, (long long)N, (long long)bad);
    if (bad) failures++;
    fwrite(dw, sizeof(float), (size_t)(K * N), dump);
    free(x), free(dy), free(dw), free(acc), free(acc0);
}

/* ------------------------------------------------------------ movement */
static void case_transpose(int rank, const int64_t *dims, const int64_t *perm) {
    int64_t n = hk_numel(rank, dims), xs[HK_MAX_RANK], yd[HK_MAX_RANK], idx[HK_MAX_RANK] = {0};
    hk_contig_strides(rank, dims, xs);
    for (int i = 0; i < rank; i++) yd[i] = dims[perm[i]];
    float *x = fvec(n, -1, 1), *y = fzero(n), *w = fzero(n);
    hk_transpose(sizeof(float), x, rank, dims, perm, y);
    for (int64_t i = 0; i < n; i++) {
        int64_t o = 0;
        for (int d = 0; d < rank; d++) o += idx[d] * xs[perm[d]];
        w[i] = x[o];
        for (int d = rank - 1; d >= 0; d--) {
            if (++idx[d] < yd[d]) break;
            idx[d] = 0;
        }
    }
    check("transpose", y, w, n, 0);
    free(x), free(y), free(w);
}

int main(int argc, char **argv) {
    if (argc != 2 || !(dump = fopen(argv[1], "wb"))) {
        fprintf(stderr, "usage: test_hk_threads OUT.bin\n");
        return 2;
    }
    { int64_t a[] = {100003}, b[] = {100003}; case_binary(1, a, 1, b); }
    { int64_t a[] = {97, 1031}, b[] = {1031}; case_binary(2, a, 1, b); }   /* bias row */
    { int64_t a[] = {1031}, b[] = {97, 1031}; case_binary(1, a, 2, b); }
    { int64_t a[] = {67, 1001}, b[] = {1}; case_binary(2, a, 0, b); }      /* scalar */
    { int64_t a[] = {1}, b[] = {67, 1001}; case_binary(0, a, 2, b); }
    { int64_t a[] = {3, 70001}, b[] = {3, 1}; case_binary(2, a, 2, b); }   /* column */
    { int64_t a[] = {5, 1, 7}, b[] = {1, 3, 1}; case_binary(3, a, 3, b); } /* general */
    { int64_t a[] = {67, 5, 301}, b[] = {67, 1, 301}; case_binary(3, a, 3, b); }
    { int64_t a[] = {0, 5}, b[] = {5}; case_binary(2, a, 1, b); }          /* empty */
    case_unary(100003);
    case_unary(13);
    case_unary(0);
    case_unary_bwd(50021);
    case_unary_bwd(0);
    case_binary_bwd(100003);
    case_binary_bwd(7);
    { int64_t d[] = {67, 1001}; case_softmax(2, d, 1); }
    { int64_t d[] = {7, 301, 5}; case_softmax(3, d, 1); }
    { int64_t d[] = {3, 0}; case_softmax(2, d, 1); }
    case_ce(301, 1037);
    case_ce(5, 3);
    case_norm(129, 771);
    case_norm(3, 5);
    { int64_t d[] = {37, 503, 9}; int r[] = {0, 1, 0}; case_reduce(3, d, r); }
    { int64_t d[] = {37, 503, 9}; int r[] = {0, 0, 1}; case_reduce(3, d, r); }
    { int64_t d[] = {370, 53, 9}; int r[] = {1, 0, 0}; case_reduce(3, d, r); }
    { int64_t d[] = {37, 503, 9}; int r[] = {1, 1, 1}; case_reduce(3, d, r); }
    { int64_t d[] = {64, 129, 77}; int r[] = {1, 1, 0}; case_reduce(3, d, r); } /* bias grad */
    { int64_t d[] = {37, 53, 9}; int r[] = {1, 0, 1}; case_reduce(3, d, r); }  /* general walk */
    { int64_t d[] = {0, 53, 9}; int r[] = {0, 1, 0}; case_reduce(3, d, r); }
    case_linear_dbias(1024, 3000 + 7); /* column blocks split across the pool, a partial one */
    case_linear_dbias(5, 3);
    case_linear_dbias(0, 65);
    case_gemm(300, 700, 129, 0, 0, 0.0f); /* column blocks, a partial one */
    case_gemm(700, 300, 129, 1, 1, 1.0f); /* row blocks, transposed operands, beta */
    case_gemm(257, 259, 65, 0, 1, 0.0f);
    case_gemm(9, 7, 5, 1, 0, 0.5f);       /* too small to split */
    case_adamw(100003);
    case_adamw(7);
    case_axpy_sumsq_mem(300007);
    case_axpy_sumsq_mem(5);
    case_linear_dw(256, 64, 192);
    case_linear_dw(33, 7, 5);
    case_attention(6, 67, 16, 1);
    case_attention(3, 33, 8, 0);
    { int64_t d[] = {67, 301, 3}, p[] = {2, 0, 1}; case_transpose(3, d, p); }
    { int64_t d[] = {257, 1031}, p[] = {1, 0}; case_transpose(2, d, p); }
    { int64_t d[] = {5, 67, 301}, p[] = {0, 2, 1}; case_transpose(3, d, p); } /* batched tiles */
    { int64_t d[] = {3, 40, 17, 20}, p[] = {2, 0, 3, 1}; case_transpose(4, d, p); } /* strided batches, a partial tile */
    { int64_t d[] = {4, 0, 3}, p[] = {2, 0, 1}; case_transpose(3, d, p); }
    fclose(dump);
    printf("%s (%d failures)\n", failures ? "FAIL" : "OK", failures);
    return failures ? 1 : 0;
}
