/* Backward of LayerNorm and RMSNorm over rows of n elements. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk_parallel.h"
#include "hk_train.h"
#include "hk_ws.h"
#include "hk_vmath.h" /* HK_VECTOR_CLONES */

static int bad(char *err, const char *msg)
{
    if (err)
        snprintf(err, HK_ERRLEN, "%s", msg);
    return -1;
}

static void row_stats(const float *x, int64_t n, double eps, double *mean, double *rstd)
{
    double s = 0, ss = 0;
    for (int64_t j = 0; j < n; j++)
        s += x[j];
    double mu = n ? s / (double)n : 0.0;
    for (int64_t j = 0; j < n; j++) {
        double d = x[j] - mu;
        ss += d * d;
    }
    *mean = mu;
    *rstd = 1.0 / sqrt((n ? ss / (double)n : 0.0) + eps); /* biased variance, as torch */
}

typedef struct StatsJob {
    const float *x;
    int64_t n;
    double eps;
    float *mean, *rstd;
} StatsJob;

static void stats_rows(void *c, int64_t lo, int64_t hi)
{
    const StatsJob *j = c;
    for (int64_t r = lo; r < hi; r++) {
        double mu, rs;
        row_stats(j->x + r * j->n, j->n, j->eps, &mu, &rs);
        j->mean[r] = (float)mu;
        j->rstd[r] = (float)rs;
    }
}

void hk_layernorm_stats_f32(const float *x, int64_t outer, int64_t n, double eps, float *mean,
                            float *rstd)
{
    StatsJob j = {x, n, eps, mean, rstd};
    hk_parallel_for(outer, hk_row_grain(n), stats_rows, &j);
}

/* Parameter gradients sum over rows; a double scratch of n per output keeps
 * the row sums accurate before the single rounding to float (this thread's
 * HK_WS_NORM buffer: allocated once, not per call). */
static double *param_scratch(int64_t n, int count, int64_t outer, char *err)
{
    /* count sums of n, then per-row mean and rstd (2 * outer) */
    double *s = hk_ws_zero(HK_WS_NORM, sizeof(double) * ((size_t)(n > 0 ? n : 1) * (size_t)count +
                                                         2 * (size_t)(outer > 0 ? outer : 0)));
    if (!s && err)
        snprintf(err, HK_ERRLEN, "norm backward: out of memory for %lld-element scratch",
                 (long long)n);
    return s;
}

static void store_param(float *out, const double *s, int64_t n, int accum)
{
    for (int64_t j = 0; j < n; j++)
        out[j] = (float)(accum ? out[j] + s[j] : s[j]);
}

/* The backward runs in two parallel passes so that every sum keeps the
 * order of a plain row-by-row loop: (1) rows: each row's mean(g),
 * mean(g xhat) and dx, plus its (mu, rstd) kept in a scratch; (2) columns:
 * dscale[j] / dbias[j] summed over the rows in row order, for a chunk of
 * columns at a time. */
typedef struct NormJob {
    const float *x, *scale, *dy, *mean, *rstd;
    int64_t outer, n;
    double eps;
    float *dx;
    double *mu, *rs; /* per row (pass 1 -> pass 2) */
    double *sg, *sb; /* per column sums (sb NULL for RMSNorm) */
} NormJob;

HK_VECTOR_CLONES
static void ln_rows(void *c, int64_t lo, int64_t hi)
{
    const NormJob *J = c;
    int64_t n = J->n;
    const float *scale = J->scale;
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = J->x + r * n, *dyr = J->dy + r * n;
        double mu, rs;
        if (J->mean) {
            mu = J->mean[r];
            rs = J->rstd[r];
        } else {
            row_stats(xr, n, J->eps, &mu, &rs);
        }
        J->mu[r] = mu;
        J->rs[r] = rs;
        if (!J->dx)
            continue;
        /* g = dy * scale; dx = rs * (g - mean(g) - xhat * mean(g * xhat)) */
        double mg = 0, mgx = 0;
        for (int64_t j = 0; j < n; j++) {
            double xh = (xr[j] - mu) * rs;
            double g = (double)dyr[j] * (scale ? scale[j] : 1.0f);
            mg += g;
            mgx += g * xh;
        }
        mg /= (double)n;
        mgx /= (double)n;
        float *dxr = J->dx + r * n;
        for (int64_t j = 0; j < n; j++) {
            double xh = (xr[j] - mu) * rs;
            double g = (double)dyr[j] * (scale ? scale[j] : 1.0f);
            dxr[j] = (float)(rs * (g - mg - xh * mgx));
        }
    }
}

#define COL_CHUNK 256
/* columns [lo, hi) chunks of COL_CHUNK: sg[j] += dy xhat, sb[j] += dy over rows */
HK_VECTOR_CLONES
static void ln_cols(void *c, int64_t lo, int64_t hi)
{
    const NormJob *J = c;
    int64_t n = J->n;
    int64_t j0 = lo * COL_CHUNK, j1 = hi * COL_CHUNK < n ? hi * COL_CHUNK : n;
    double *sg = J->sg, *sb = J->sb;
    for (int64_t r = 0; r < J->outer; r++) {
        const float *xr = J->x + r * n, *dyr = J->dy + r * n;
        double mu = J->mu ? J->mu[r] : 0.0, rs = J->rs[r];
        if (sb)
            for (int64_t j = j0; j < j1; j++) {
                double xh = (xr[j] - mu) * rs;
                sg[j] += dyr[j] * xh;
                sb[j] += dyr[j];
            }
        else
            for (int64_t j = j0; j < j1; j++)
                sg[j] += (double)dyr[j] * xr[j] * rs;
    }
}

static int64_t col_chunks(int64_t n) { return (n + COL_CHUNK - 1) / COL_CHUNK; }
/* column chunks per task: ~16k elements of work */
static int64_t col_grain(int64_t outer)
{
    int64_t g = outer > 0 ? 16384 / (outer * COL_CHUNK) : 1;
    return g < 1 ? 1 : g;
}

int hk_layernorm_backward_f32(const float *x, const float *scale, const float *dy,
                              const float *mean, const float *rstd, int64_t outer, int64_t n,
                              double eps, float *dx, float *dscale, float *dbias, int accum,
                              char *err)
{
    if (outer < 0 || n < 0)
        return bad(err, "layernorm backward: negative dimension");
    if ((mean == NULL) != (rstd == NULL))
        return bad(err, "layernorm backward: give both saved mean and rstd, or neither");
    if (n == 0)
        return 0; /* nothing to normalise; no gradient elements exist */
    double *ps = param_scratch(n, 2, outer, err);
    if (!ps)
        return -1;
    double *sg = ps, *sb = ps + n, *mr = ps + 2 * n, *rr = mr + outer;
    NormJob J = {x, scale, dy, mean, rstd, outer, n, eps, dx, mr, rr, sg, sb};
    hk_parallel_for(outer, hk_row_grain(n), ln_rows, &J);
    if (dscale || dbias)
        hk_parallel_for(col_chunks(n), col_grain(outer), ln_cols, &J);
    if (dscale)
        store_param(dscale, sg, n, accum);
    if (dbias)
        store_param(dbias, sb, n, accum);
    return 0;
}

HK_VECTOR_CLONES
static void rms_rows(void *c, int64_t lo, int64_t hi)
{
    const NormJob *J = c;
    int64_t n = J->n;
    const float *scale = J->scale;
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = J->x + r * n, *dyr = J->dy + r * n;
        double rs;
        if (J->rstd) {
            rs = J->rstd[r];
        } else {
            double ss = 0;
            for (int64_t j = 0; j < n; j++)
                ss += (double)xr[j] * xr[j];
            rs = 1.0 / sqrt((n ? ss / (double)n : 0.0) + J->eps);
        }
        J->rs[r] = rs;
        if (!J->dx)
            continue;
        /* y = x r s, r = (mean(x^2) + eps)^-1/2, dr/dx_j = -r^3 x_j / n:
         * dx = r g - x r^3 mean(g x), g = dy * scale */
        double mgx = 0;
        for (int64_t j = 0; j < n; j++) {
            double g = (double)dyr[j] * (scale ? scale[j] : 1.0f);
            mgx += g * xr[j];
        }
        mgx /= (double)n;
        float *dxr = J->dx + r * n;
        for (int64_t j = 0; j < n; j++) {
            double g = (double)dyr[j] * (scale ? scale[j] : 1.0f);
            dxr[j] = (float)(rs * g - xr[j] * rs * rs * rs * mgx);
        }
    }
}

int hk_rmsnorm_backward_f32(const float *x, const float *scale, const float *dy,
                            const float *rstd, int64_t outer, int64_t n, double eps, float *dx,
                            float *dscale, int accum, char *err)
{
    if (outer < 0 || n < 0)
        return bad(err, "rmsnorm backward: negative dimension");
    if (n == 0)
        return 0;
    double *sg = param_scratch(n, 1, outer, err);
    if (!sg)
        return -1;
    double *rr = sg + n;
    NormJob J = {x, scale, dy, NULL, rstd, outer, n, eps, dx, NULL, rr, sg, NULL};
    hk_parallel_for(outer, hk_row_grain(n), rms_rows, &J);
    if (dscale)
        hk_parallel_for(col_chunks(n), col_grain(outer), ln_cols, &J);
    if (dscale)
        store_param(dscale, sg, n, accum);
    return 0;
}
