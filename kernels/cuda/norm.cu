/* LayerNorm / RMSNorm, device side.  Host twin: kernels/host/train_norm.c
 * (backward) and hk_reduce.c's hk_layernorm_f32 / hk_rmsnorm_f32 (forward).
 * One block per row; statistics accumulate in double like the host. */
#include <math.h>

#include "hkc_internal.cuh"

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
    HKC_ROW_LOOP(r, rows) {
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
    k_norm<<<hkc_grid_rows(rows), HKC_ROW_THREADS, 0, c->stream>>>(rms, x, scale, bias, rows, n, eps, y);
    return hkc_launched("norm", err);
}

/* LayerNorm: xhat = (x-mean) rstd, g = dy scale,
 *   dx = rstd (g - mean(g) - xhat mean(g xhat));
 * RMSNorm: dx = rstd g - x rstd^3 mean(g x). */
__global__ static void k_norm_grad_dx(int rms, const float *x, const float *scale,
                                      const float *dy, int64_t rows, int64_t n, double eps,
                                      float *stats, float *dx) {
    __shared__ double shd[32];
    HKC_ROW_LOOP(r, rows) {
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

/* dscale[j] = sum_r dy xhat, dbias[j] = sum_r dy: column tiles
 * (hkc_internal.cuh), double accumulation, a fixed split (deterministic). */
__global__ static void k_norm_grad_params(const float *x, const float *dy, int64_t rows,
                                          int64_t n, const float *stats, int chunks,
                                          double *part, float *dscale, float *dbias) {
    __shared__ double ps[HKC_COL_LANES][HKC_COLS], pb[HKC_COL_LANES][HKC_COLS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t r0 = rows * blockIdx.y / chunks, r1 = rows * (blockIdx.y + 1) / chunks;
    for (int64_t j0 = (int64_t)blockIdx.x * HKC_COLS; j0 < n; j0 += (int64_t)gridDim.x * HKC_COLS) {
        int64_t j = j0 + tx;
        double ss = 0, sb = 0;
        if (j < n)
            for (int64_t r = r0 + ty; r < r1; r += HKC_COL_LANES) {
                double g = dy[r * n + j];
                ss += g * ((double)x[r * n + j] - stats[2 * r]) * stats[2 * r + 1];
                sb += g;
            }
        ps[ty][tx] = ss, pb[ty][tx] = sb;
        __syncthreads();
        if (ty == 0 && j < n) {
            double ts = 0, tb = 0;
            for (int l = 0; l < HKC_COL_LANES; l++) ts += ps[l][tx], tb += pb[l][tx];
            if (chunks > 1) { /* part[0][chunk][j] scale sums, part[1][chunk][j] bias sums */
                part[(int64_t)blockIdx.y * n + j] = ts;
                part[((int64_t)chunks + blockIdx.y) * n + j] = tb;
            } else {
                if (dscale) dscale[j] = (float)ts;
                if (dbias) dbias[j] = (float)tb;
            }
        }
        __syncthreads();
    }
}

extern "C" int hkc_norm_grad_f32(HkcCtx *c, int rms, const float *x, const float *scale,
                                 const float *dy, int64_t rows, int64_t n, double eps,
                                 float *stats, float *dx, float *dscale, float *dbias,
                                 char *err) {
    if (rows * n == 0) return 0;
    k_norm_grad_dx<<<hkc_grid_rows(rows), HKC_ROW_THREADS, 0, c->stream>>>(rms, x, scale, dy, rows, n,
                                                                   eps, stats, dx);
    if (hkc_launched("norm grad", err)) return -1;
    if (!dscale && !dbias) return 0;
    int chunks = hkc_col_chunks(c, rows, n, 2);
    double *part = (double *)c->workspace;
    if (rms) dbias = NULL;
    k_norm_grad_params<<<dim3(hkc_col_blocks(n), chunks), dim3(HKC_COLS, HKC_COL_LANES), 0,
                         c->stream>>>(x, dy, rows, n, stats, chunks, part, dscale, dbias);
    if (hkc_launched("norm grad params", err)) return -1;
    if (chunks == 1) return 0;
    k_col_finish<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(part, chunks, n, 2, dscale, dbias);
    return hkc_launched("norm grad params (chunks)", err);
}
