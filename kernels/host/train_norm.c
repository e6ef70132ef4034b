/* Backward of LayerNorm and RMSNorm over rows of n elements. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk_train.h"

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

void hk_layernorm_stats_f32(const float *x, int64_t outer, int64_t n, double eps, float *mean,
                            float *rstd)
{
    for (int64_t r = 0; r < outer; r++) {
        double mu, rs;
        row_stats(x + r * n, n, eps, &mu, &rs);
        mean[r] = (float)mu;
        rstd[r] = (float)rs;
    }
}

/* Parameter gradients sum over rows; a double scratch of n per output keeps
 * the row sums accurate before the single rounding to float. */
static double *param_scratch(int64_t n, int count, char *err)
{
    double *s = calloc((size_t)(n > 0 ? n : 1) * (size_t)count, sizeof(double));
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
    double *ps = param_scratch(n, 2, err);
    if (!ps)
        return -1;
    double *sg = ps, *sb = ps + n;
    for (int64_t r = 0; r < outer; r++) {
        const float *xr = x + r * n, *dyr = dy + r * n;
        double mu, rs;
        if (mean) {
            mu = mean[r];
            rs = rstd[r];
        } else {
            row_stats(xr, n, eps, &mu, &rs);
        }
        /* g = dy * scale; dx = rs * (g - mean(g) - xhat * mean(g * xhat)) */
        double mg = 0, mgx = 0;
        for (int64_t j = 0; j < n; j++) {
            double xh = (xr[j] - mu) * rs;
            double g = (double)dyr[j] * (scale ? scale[j] : 1.0f);
            mg += g;
            mgx += g * xh;
            sg[j] += dyr[j] * xh;
            sb[j] += dyr[j];
        }
        mg /= (double)n;
        mgx /= (double)n;
        if (dx)
            for (int64_t j = 0; j < n; j++) {
                double xh = (xr[j] - mu) * rs;
                double g = (double)dyr[j] * (scale ? scale[j] : 1.0f);
                dx[r * n + j] = (float)(rs * (g - mg - xh * mgx));
            }
    }
    if (dscale)
        store_param(dscale, sg, n, accum);
    if (dbias)
        store_param(dbias, sb, n, accum);
    free(ps);
    return 0;
}

int hk_rmsnorm_backward_f32(const float *x, const float *scale, const float *dy,
                            const float *rstd, int64_t outer, int64_t n, double eps, float *dx,
                            float *dscale, int accum, char *err)
{
    if (outer < 0 || n < 0)
        return bad(err, "rmsnorm backward: negative dimension");
    if (n == 0)
        return 0;
    double *sg = param_scratch(n, 1, err);
    if (!sg)
        return -1;
    for (int64_t r = 0; r < outer; r++) {
        const float *xr = x + r * n, *dyr = dy + r * n;
        double rs;
        if (rstd) {
            rs = rstd[r];
        } else {
            double ss = 0;
            for (int64_t j = 0; j < n; j++)
                ss += (double)xr[j] * xr[j];
            rs = 1.0 / sqrt((n ? ss / (double)n : 0.0) + eps);
        }
        /* y = x r s, r = (mean(x^2) + eps)^-1/2, dr/dx_j = -r^3 x_j / n:
         * dx = r g - x r^3 mean(g x), g = dy * scale */
        double mgx = 0;
        for (int64_t j = 0; j < n; j++) {
            double g = (double)dyr[j] * (scale ? scale[j] : 1.0f);
            mgx += g * xr[j];
            sg[j] += (double)dyr[j] * xr[j] * rs;
        }
        mgx /= (double)n;
        if (dx)
            for (int64_t j = 0; j < n; j++) {
                double g = (double)dyr[j] * (scale ? scale[j] : 1.0f);
                dx[r * n + j] = (float)(rs * g - xr[j] * rs * rs * rs * mgx);
            }
    }
    if (dscale)
        store_param(dscale, sg, n, accum);
    free(sg);
    return 0;
}
