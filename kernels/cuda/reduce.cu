/* Reductions, device side.  Host twin: kernels/host/train_reduce.c
 * (sum to a broadcast input's shape: the column sum of a bias gradient) and
 * hk_reduce.c's hk_reduce.  One thread per output element, double accumulation. */
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
