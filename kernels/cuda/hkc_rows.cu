/* Row kernels: one block per row (softmax, attention's masked softmax,
 * LayerNorm / RMSNorm and their backward, cross entropy), column sums and
 * general reductions (one thread per output element).  Row statistics are
 * accumulated in double, like the host twins, so the device/host difference
 * is the fp32 rounding of the per-element math only. */
#include <math.h>

#include "hkc_internal.cuh"

#define ROW_THREADS 256

static unsigned grid_rows(int64_t rows) { return (unsigned)(rows < 65535 ? rows : 65535); }
#define ROW_LOOP(r, rows) for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

/* ------------------------------------------------------------ softmax */
__global__ static void k_softmax(const float *x, int64_t rows, int64_t n, int log, float *y) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    ROW_LOOP(r, rows) {
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
    k_softmax<<<grid_rows(rows), ROW_THREADS, 0, c->stream>>>(x, rows, n, log, y);
    return hkc_launched("softmax", err);
}

/* softmax: dx = y (dy - sum dy y); log_softmax: dx = dy - exp(y) sum dy */
__global__ static void k_softmax_grad(const float *y, const float *dy, int64_t rows, int64_t n,
                                      int log, float *dx) {
    __shared__ double shd[32];
    ROW_LOOP(r, rows) {
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
    k_softmax_grad<<<grid_rows(rows), ROW_THREADS, 0, c->stream>>>(y, dy, rows, n, log, dx);
    return hkc_launched("softmax grad", err);
}

__global__ static void k_attn_softmax(float *s, int64_t rows, int64_t T, int64_t S, int causal,
                                      float scale) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    ROW_LOOP(r, rows) {
        int64_t i = r % T, lim = causal ? i + (S - T) : S - 1; /* keys 0..lim visible */
        float *row = s + r * S;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
            if (j <= lim) m = fmaxf(m, row[j] * scale);
        m = hkc_block_max(m, shf);
        double sum = 0;
        for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
            if (j <= lim) sum += exp((double)row[j] * scale - m);
        sum = hkc_block_sum(sum, shd);
        for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
            row[j] = j <= lim && sum > 0 ? (float)(exp((double)row[j] * scale - m) / sum) : 0.f;
    }
}

extern "C" int hkc_attn_softmax_f32(HkcCtx *c, float *s, int64_t batch, int64_t T, int64_t S,
                                    int causal, float scale, char *err) {
    if (batch * T * S == 0) return 0;
    k_attn_softmax<<<grid_rows(batch * T), ROW_THREADS, 0, c->stream>>>(s, batch * T, T, S,
                                                                       causal, scale);
    return hkc_launched("attention softmax", err);
}

/* ------------------------------------------------------------ norms */
/* mean (0 for RMSNorm) and rstd of row r */
__device__ static void row_stats(const float *xr, int64_t n, int rms, double eps, double *sh,
                                 double *mean, double *rstd) {
    double s = 0;
    if (!rms) {
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += xr[j];
        s = hkc_block_sum(s, sh) / (double)n;
    }
    double v = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        double d = (double)xr[j] - s;
        v += d * d;
    }
    v = hkc_block_sum(v, sh) / (double)n;
    *mean = s;
    *rstd = 1.0 / sqrt(v + eps);
}

__global__ static void k_norm(int rms, const float *x, const float *scale, const float *bias,
                              int64_t rows, int64_t n, double eps, float *y) {
    __shared__ double shd[32];
    ROW_LOOP(r, rows) {
        const float *xr = x + r * n;
        double mean, rstd;
        row_stats(xr, n, rms, eps, shd, &mean, &rstd);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            float h = (float)(((double)xr[j] - mean) * rstd) * scale[j];
            y[r * n + j] = bias ? h + bias[j] : h;
        }
    }
}

extern "C" int hkc_norm_f32(HkcCtx *c, int rms, const float *x, const float *scale,
                            const float *bias, int64_t rows, int64_t n, double eps, float *y,
                            char *err) {
    if (rows * n == 0) return 0;
    k_norm<<<grid_rows(rows), ROW_THREADS, 0, c->stream>>>(rms, x, scale, bias, rows, n, eps, y);
    return hkc_launched("norm", err);
}

/* LayerNorm: xhat = (x-mean) rstd, g = dy scale,
 *   dx = rstd (g - mean(g) - xhat mean(g xhat));
 * RMSNorm: dx = rstd g - x rstd^3 mean(g x). */
__global__ static void k_norm_grad_dx(int rms, const float *x, const float *scale,
                                      const float *dy, int64_t rows, int64_t n, double eps,
                                      float *stats, float *dx) {
    __shared__ double shd[32];
    ROW_LOOP(r, rows) {
        const float *xr = x + r * n, *gr = dy + r * n;
        double mean, rstd;
        row_stats(xr, n, rms, eps, shd, &mean, &rstd);
        if (threadIdx.x == 0) stats[2 * r] = (float)mean, stats[2 * r + 1] = (float)rstd;
        if (!dx) continue;
        double sg = 0, sgx = 0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            double g = (double)gr[j] * scale[j];
            sg += g;
            sgx += rms ? g * xr[j] : g * ((double)xr[j] - mean) * rstd;
        }
        sg = hkc_block_sum(sg, shd) / (double)n;
        sgx = hkc_block_sum(sgx, shd) / (double)n;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            double g = (double)gr[j] * scale[j];
            dx[r * n + j] = rms ? (float)(rstd * g - (double)xr[j] * rstd * rstd * rstd * sgx)
                                : (float)(rstd * (g - sg - ((double)xr[j] - mean) * rstd * sgx));
        }
    }
}

/* dscale[j] = sum_r dy xhat, dbias[j] = sum_r dy: one thread per column,
 * rows in order (deterministic). */
__global__ static void k_norm_grad_params(const float *x, const float *dy, int64_t rows,
                                          int64_t n, const float *stats, float *dscale,
                                          float *dbias) {
    HKC_LOOP(j, n) {
        double ss = 0, sb = 0;
        for (int64_t r = 0; r < rows; r++) {
            double g = dy[r * n + j];
            ss += g * ((double)x[r * n + j] - stats[2 * r]) * stats[2 * r + 1];
            sb += g;
        }
        if (dscale) dscale[j] = (float)ss;
        if (dbias) dbias[j] = (float)sb;
    }
}

extern "C" int hkc_norm_grad_f32(HkcCtx *c, int rms, const float *x, const float *scale,
                                 const float *dy, int64_t rows, int64_t n, double eps,
                                 float *stats, float *dx, float *dscale, float *dbias,
                                 char *err) {
    if (rows * n == 0) return 0;
    k_norm_grad_dx<<<grid_rows(rows), ROW_THREADS, 0, c->stream>>>(rms, x, scale, dy, rows, n,
                                                                   eps, stats, dx);
    if (hkc_launched("norm grad", err)) return -1;
    if (!dscale && !dbias) return 0;
    k_norm_grad_params<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(x, dy, rows, n, stats,
                                                                     dscale, rms ? NULL : dbias);
    return hkc_launched("norm grad params", err);
}

/* ------------------------------------------------------------ reductions */
__global__ static void k_reduce(int op, const float *x, HkcShape out, HkcStrides os,
                                HkcShape red, HkcStrides rs, int64_t nout, int64_t nred,
                                float *y) {
    HKC_LOOP(o, nout) {
        const float *base = x + hkc_offset(o, out, os);
        double acc = op == 2 ? -INFINITY : 0.0;
        for (int64_t k = 0; k < nred; k++) {
            double v = base[hkc_offset(k, red, rs)];
            if (op == 2) acc = (v != v || v > acc) ? v : acc;
            else acc += v;
        }
        if (op == 1) acc /= (double)nred;
        y[o] = (float)acc;
    }
}

extern "C" int hkc_reduce_f32(HkcCtx *c, int op, const float *x, HkcShape out, HkcStrides os,
                              HkcShape red, HkcStrides rs, float *y, char *err) {
    int64_t nout = hkc_numel(out), nred = hkc_numel(red);
    if (nout == 0) return 0;
    k_reduce<<<hkc_blocks(nout), HKC_THREADS, 0, c->stream>>>(op, x, out, os, red, rs, nout,
                                                              nred, y);
    return hkc_launched("reduce", err);
}

__global__ static void k_col_sum(const float *x, int64_t rows, int64_t n, float *out) {
    HKC_LOOP(j, n) {
        double s = 0;
        for (int64_t r = 0; r < rows; r++) s += x[r * n + j];
        out[j] = (float)s;
    }
}

extern "C" int hkc_col_sum_f32(HkcCtx *c, const float *x, int64_t rows, int64_t n, float *out,
                               char *err) {
    if (n == 0) return 0;
    k_col_sum<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(x, rows, n, out);
    return hkc_launched("column sum", err);
}

__global__ static void k_sumsq(const float *x, int64_t n, double *out) {
    __shared__ double shd[32];
    double s = 0;
    HKC_LOOP(i, n) s += (double)x[i] * x[i];
    s = hkc_block_sum(s, shd);
    if (threadIdx.x == 0) atomicAdd(out, s);
}

extern "C" int hkc_sumsq_f32(HkcCtx *c, const float *x, int64_t n, double *out, char *err) {
    if (cudaMemsetAsync(out, 0, sizeof(double), c->stream) != cudaSuccess)
        return hkc_fail(err, "sumsq: cudaMemsetAsync failed");
    if (n == 0) return 0;
    unsigned g = hkc_blocks(n);
    k_sumsq<<<g < 1024 ? g : 1024, HKC_THREADS, 0, c->stream>>>(x, n, out);
    return hkc_launched("sum of squares", err);
}

/* ------------------------------------------------------------ embedding */
__device__ static inline int64_t load_id(int idt, const void *ids, int64_t i) {
    return idt == 6 ? (int64_t)((const int32_t *)ids)[i] : ((const int64_t *)ids)[i];
}

__global__ static void k_embedding(const float *table, int64_t V, int64_t D, int idt,
                                   const void *ids, int64_t n, float *y, int *bad) {
    HKC_LOOP(e, n * D) {
        int64_t i = e / D, d = e % D, t = load_id(idt, ids, i);
        if (t < 0) t += V;
        if (t < 0 || t >= V) {
            if (d == 0) atomicExch(bad, 1);
            y[e] = 0.f;
            continue;
        }
        y[e] = table[t * D + d];
    }
}

extern "C" int hkc_embedding_f32(HkcCtx *c, const float *table, int64_t V, int64_t D, int idt,
                                 const void *ids, int64_t n, float *y, int *bad, char *err) {
    if (n * D == 0) return 0;
    k_embedding<<<hkc_blocks(n * D), HKC_THREADS, 0, c->stream>>>(table, V, D, idt, ids, n, y, bad);
    return hkc_launched("embedding", err);
}

__global__ static void k_embedding_grad(int64_t V, int64_t D, int idt, const void *ids,
                                        int64_t n, const float *dy, float *dtable, int *bad) {
    HKC_LOOP(e, n * D) {
        int64_t i = e / D, d = e % D, t = load_id(idt, ids, i);
        if (t < 0) t += V;
        if (t < 0 || t >= V) {
            if (d == 0) atomicExch(bad, 1);
            continue;
        }
        atomicAdd(&dtable[t * D + d], dy[e]);
    }
}

extern "C" int hkc_embedding_grad_f32(HkcCtx *c, int64_t V, int64_t D, int idt, const void *ids,
                                      int64_t n, const float *dy, float *dtable, int *bad,
                                      char *err) {
    if (n * D == 0) return 0;
    k_embedding_grad<<<hkc_blocks(n * D), HKC_THREADS, 0, c->stream>>>(V, D, idt, ids, n, dy,
                                                                       dtable, bad);
    return hkc_launched("embedding grad", err);
}

/* ------------------------------------------------------------ cross entropy */
/* Scratch: lse[N] floats, counted[N] floats, then 2 doubles (sum, count). */
extern "C" size_t hkc_cross_entropy_scratch(int64_t N) {
    return ((size_t)(2 * N * sizeof(float) + 15) / 16) * 16 + 2 * sizeof(double);
}

__global__ static void k_ce_rows(const float *lg, int tdt, const void *tg, int64_t N, int64_t V,
                                 int use_ignore, int64_t ignore_index, float *lse, float *rowloss,
                                 int *bad) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    ROW_LOOP(r, N) {
        const float *x = lg + r * V;
        int64_t t = load_id(tdt, tg, r);
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
        k_ce_rows<<<grid_rows(N), ROW_THREADS, 0, c->stream>>>(lg, tdt, tg, N, V, use_ignore,
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

__global__ static void k_ce_grad(const float *lg, int tdt, const void *tg, int64_t N, int64_t V,
                                 const float *lse, const float *rowloss, const double *tot,
                                 const float *dloss, float *dl) {
    HKC_LOOP(e, N * V) {
        int64_t r = e / V, j = e % V;
        float rl = rowloss[r];
        if (rl != rl || !(tot[1] > 0)) {
            dl[e] = 0.f;
            continue;
        }
        double p = exp((double)lg[e] - lse[r]);
        double oh = j == load_id(tdt, tg, r) ? 1.0 : 0.0;
        dl[e] = (float)((double)*dloss * (p - oh) / tot[1]);
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
    k_ce_grad<<<hkc_blocks(N * V), HKC_THREADS, 0, c->stream>>>(logits, tdt, targets, N, V, lse,
                                                                rowloss, tot, dloss, dlogits);
    return hkc_launched("cross entropy grad", err);
}
