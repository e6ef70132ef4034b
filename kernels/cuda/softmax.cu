/* Softmax family, device side.  Host twin: kernels/host/train_softmax.c
 * (softmax backward, fused cross entropy) and hk_reduce.c's hk_softmax.
 * One block per row; row statistics accumulate in double like the host, so
 * the device/host difference is the fp32 rounding of the per-element math. */
#include <math.h>

#include "hkc_internal.cuh"

__global__ static void k_softmax(const float *x, int64_t rows, int64_t n, int log, float *y) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    HKC_ROW_LOOP(r, rows) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, xr[j]);
        m = hkc_block_max(m, shf);
        double s = 0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += exp((double)xr[j] - m);
        s = hkc_block_sum(s, shd);
        double ls = log ? (double)m + ::log(s) : 0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            yr[j] = log ? (float)((double)xr[j] - ls) : (float)(exp((double)xr[j] - m) / s);
    }
}

extern "C" int hkc_softmax_f32(HkcCtx *c, const float *x, int64_t rows, int64_t n, int log,
                               float *y, char *err) {
    if (rows * n == 0) return 0;
    k_softmax<<<hkc_grid_rows(rows), HKC_ROW_THREADS, 0, c->stream>>>(x, rows, n, log, y);
    return hkc_launched("softmax", err);
}

/* softmax: dx = y (dy - sum dy y); log_softmax: dx = dy - exp(y) sum dy */
__global__ static void k_softmax_grad(const float *y, const float *dy, int64_t rows, int64_t n,
                                      int log, float *dx) {
    __shared__ double shd[32];
    HKC_ROW_LOOP(r, rows) {
        const float *yr = y + r * n, *gr = dy + r * n;
        double s = 0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            s += log ? (double)gr[j] : (double)gr[j] * yr[j];
        s = hkc_block_sum(s, shd);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            dx[r * n + j] = log ? (float)(gr[j] - exp((double)yr[j]) * s)
                                : (float)(yr[j] * (gr[j] - s));
    }
}

extern "C" int hkc_softmax_grad_f32(HkcCtx *c, const float *y, const float *dy, int64_t rows,
                                    int64_t n, int log, float *dx, char *err) {
    if (rows * n == 0) return 0;
    k_softmax_grad<<<hkc_grid_rows(rows), HKC_ROW_THREADS, 0, c->stream>>>(y, dy, rows, n, log, dx);
    return hkc_launched("softmax grad", err);
}

/* Scratch: lse[N] floats, counted[N] floats, then 2 doubles (sum, count). */
extern "C" size_t hkc_cross_entropy_scratch(int64_t N) {
    return ((size_t)(2 * N * sizeof(float) + 15) / 16) * 16 + 2 * sizeof(double);
}

__global__ static void k_ce_rows(const float *lg, int tdt, const void *tg, int64_t N, int64_t V,
                                 int use_ignore, int64_t ignore_index, float *lse, float *rowloss,
                                 int *bad) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    HKC_ROW_LOOP(r, N) {
        const float *x = lg + r * V;
        int64_t t = hkc_load_id(tdt, tg, r);
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, x[j]);
        m = hkc_block_max(m, shf);
        double s = 0;
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += exp((double)x[j] - m);
        s = hkc_block_sum(s, shd);
        if (threadIdx.x == 0) {
            double l = (double)m + log(s);
            lse[r] = (float)l;
            int counted = !(use_ignore && t == ignore_index);
            if (counted && (t < 0 || t >= V)) {
                atomicExch(bad, 1);
                counted = 0;
            }
            /* NaN marks a row that is not counted (ignored, or a bad target) */
            rowloss[r] = counted ? (float)(l - x[t]) : NAN;
        }
    }
}

/* One block: sum and count of counted rows (rows in a fixed order per thread). */
__global__ static void k_ce_total(const float *rowloss, int64_t N, double *tot) {
    __shared__ double shd[32];
    double s = 0, cnt = 0;
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
        float v = rowloss[r];
        if (v == v) s += v, cnt += 1;
    }
    s = hkc_block_sum(s, shd);
    cnt = hkc_block_sum(cnt, shd);
    if (threadIdx.x == 0) tot[0] = s, tot[1] = cnt;
}

__global__ static void k_ce_loss(const double *tot, float *loss) {
    *loss = tot[1] > 0 ? (float)(tot[0] / tot[1]) : NAN;
}

static int ce_common(HkcCtx *c, const float *lg, int tdt, const void *tg, int64_t N, int64_t V,
                     int use_ignore, int64_t ignore_index, void *scratch, int *bad, char *err) {
    float *lse = (float *)scratch, *rowloss = lse + N;
    double *tot = (double *)((char *)scratch + hkc_cross_entropy_scratch(N) - 2 * sizeof(double));
    if (N > 0) {
        k_ce_rows<<<hkc_grid_rows(N), HKC_ROW_THREADS, 0, c->stream>>>(lg, tdt, tg, N, V, use_ignore,
                                                               ignore_index, lse, rowloss, bad);
        if (hkc_launched("cross entropy rows", err)) return -1;
    }
    k_ce_total<<<1, 1024, 0, c->stream>>>(rowloss, N, tot);
    return hkc_launched("cross entropy total", err);
}

extern "C" int hkc_cross_entropy_f32(HkcCtx *c, const float *logits, int tdt,
                                     const void *targets, int64_t N, int64_t V, int use_ignore,
                                     int64_t ignore_index, void *scratch, float *loss, int *bad,
                                     char *err) {
    if (ce_common(c, logits, tdt, targets, N, V, use_ignore, ignore_index, scratch, bad, err))
        return -1;
    double *tot = (double *)((char *)scratch + hkc_cross_entropy_scratch(N) - 2 * sizeof(double));
    k_ce_loss<<<1, 1, 0, c->stream>>>(tot, loss);
    return hkc_launched("cross entropy loss", err);
}

/* one block per row: the flat walk it replaced divided a 64-bit index by V
 * per element (same arithmetic per element) */
__global__ static void k_ce_grad(const float *lg, int tdt, const void *tg, int64_t N, int64_t V,
                                 const float *lse, const float *rowloss, const double *tot,
                                 const float *dloss, float *dl) {
    HKC_ROW_LOOP(r, N) {
        const float *x = lg + r * V;
        float *d = dl + r * V;
        float rl = rowloss[r];
        if (rl != rl || !(tot[1] > 0)) {
            for (int64_t j = threadIdx.x; j < V; j += blockDim.x) d[j] = 0.f;
            continue;
        }
        int64_t t = hkc_load_id(tdt, tg, r);
        double l = lse[r], g = (double)*dloss, cnt = tot[1];
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
            double p = exp((double)x[j] - l);
            double oh = j == t ? 1.0 : 0.0;
            d[j] = (float)(g * (p - oh) / cnt);
        }
    }
}

extern "C" int hkc_cross_entropy_grad_f32(HkcCtx *c, const float *logits, int tdt,
                                          const void *targets, int64_t N, int64_t V,
                                          int use_ignore, int64_t ignore_index,
                                          const float *dloss, void *scratch, float *dlogits,
                                          int *bad, char *err) {
    if (ce_common(c, logits, tdt, targets, N, V, use_ignore, ignore_index, scratch, bad, err))
        return -1;
    if (N * V == 0) return 0;
    float *lse = (float *)scratch, *rowloss = lse + N;
    double *tot = (double *)((char *)scratch + hkc_cross_entropy_scratch(N) - 2 * sizeof(double));
    k_ce_grad<<<hkc_grid_rows(N), HKC_ROW_THREADS, 0, c->stream>>>(logits, tdt, targets, N, V,
                                                                   lse, rowloss, tot, dloss,
                                                                   dlogits);
    return hkc_launched("cross entropy grad", err);
}
