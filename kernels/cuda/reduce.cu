/* Reductions, device side.  Host twin: kernels/host/train_reduce.c
 * (sum to a broadcast input's shape: the column sum of a bias gradient) and
 * hk_reduce.c's hk_reduce.  Double accumulation; one thread per output
 * element, column sums in column tiles (hkc_internal.cuh). */
#include <math.h>

#include "hkc_internal.cuh"

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

/* column tiles: hkc_internal.cuh's HKC_COLS x HKC_COL_LANES scheme; block
 * row y of the grid sums chunk y of the rows into part[y][j] (double), or
 * straight into out when there is one chunk */
__device__ static inline double col_ld(const float *x, int64_t i) { return x[i]; }
__device__ static inline double col_ld(const uint16_t *x, int64_t i) {
    return hkc_bf16_to_f32(x[i]);
}

template <typename T>
__global__ static void k_col_sum(const T *x, int64_t rows, int64_t n, int chunks,
                                 double *part, float *out) {
    __shared__ double sh[HKC_COL_LANES][HKC_COLS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t r0 = rows * blockIdx.y / chunks, r1 = rows * (blockIdx.y + 1) / chunks;
    for (int64_t j0 = (int64_t)blockIdx.x * HKC_COLS; j0 < n; j0 += (int64_t)gridDim.x * HKC_COLS) {
        int64_t j = j0 + tx;
        double s = 0;
        if (j < n)
            for (int64_t r = r0 + ty; r < r1; r += HKC_COL_LANES) s += col_ld(x, r * n + j);
        sh[ty][tx] = s;
        __syncthreads();
        if (ty == 0 && j < n) {
            double t = 0;
            for (int l = 0; l < HKC_COL_LANES; l++) t += sh[l][tx];
            if (chunks > 1) part[(int64_t)blockIdx.y * n + j] = t;
            else out[j] = (float)t;
        }
        __syncthreads();
    }
}

template <typename T>
static int col_sum(HkcCtx *c, const T *x, int64_t rows, int64_t n, float *out, char *err) {
    if (n == 0) return 0;
    int chunks = hkc_col_chunks(c, rows, n, 1);
    double *part = (double *)c->workspace;
    k_col_sum<T><<<dim3(hkc_col_blocks(n), chunks), dim3(HKC_COLS, HKC_COL_LANES), 0,
                   c->stream>>>(x, rows, n, chunks, part, out);
    if (hkc_launched("column sum", err) || chunks == 1) return chunks == 1 ? 0 : -1;
    k_col_finish<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(part, chunks, n, 1, out, NULL);
    return hkc_launched("column sum (chunks)", err);
}

extern "C" int hkc_col_sum_f32(HkcCtx *c, const float *x, int64_t rows, int64_t n, float *out,
                               char *err) {
    return col_sum(c, x, rows, n, out, err);
}

extern "C" int hkc_col_sum_bf16(HkcCtx *c, const uint16_t *x, int64_t rows, int64_t n,
                                float *out, char *err) {
    return col_sum(c, x, rows, n, out, err);
}
