/* Entry points for compiled stage code (hk_entry.h). */
#include "hk_entry.h"

#include <stdio.h>
#include <string.h>

#include "hk.h"
#include "hk_train.h"

int hk_entry_reduce(int op, int dt, const void *x, int rank, const int64_t *dims,
                    const int64_t *reduce, void *y, char *err) {
    int red[HK_MAX_RANK];
    if (rank < 0 || rank > HK_MAX_RANK) {
        if (err) snprintf(err, HK_ERRLEN, "reduction of rank %d", rank);
        return -1;
    }
    for (int i = 0; i < rank; i++) red[i] = reduce[i] != 0;
    return hk_reduce((HkRedOp)op, (HkDType)dt, x, rank, dims, red, y, err);
}

void hk_entry_concat_part(size_t esize, const void *x, int rank, const int64_t *xdims, int axis,
                          int64_t at, int64_t ydim, void *y) {
    /* rows of `inner` contiguous bytes: outer x (xdims[axis] * inner) */
    int64_t outer = hk_numel(axis, xdims), inner = hk_numel(rank - axis - 1, xdims + axis + 1);
    size_t xrow = (size_t)(xdims[axis] * inner) * esize, yrow = (size_t)(ydim * inner) * esize;
    const unsigned char *s = x;
    unsigned char *d = (unsigned char *)y + (size_t)(at * inner) * esize;
    if (!xrow) return;
    for (int64_t o = 0; o < outer; o++) memcpy(d + (size_t)o * yrow, s + (size_t)o * xrow, xrow);
}

void hk_entry_slice_grad_f32(const float *dy, int rank, const int64_t *xdims,
                             const int64_t *start, const int64_t *step, const int64_t *ydims,
                             float *dx) {
    int64_t nx = hk_numel(rank, xdims), n = hk_numel(rank, ydims);
    if (nx) memset(dx, 0, (size_t)nx * sizeof *dx);
    int64_t idx[HK_MAX_RANK] = {0}, xs[HK_MAX_RANK], acc = 1;
    for (int d = rank - 1; d >= 0; d--) xs[d] = acc, acc *= xdims[d];
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < rank; d++) off += (start[d] + idx[d] * step[d]) * xs[d];
        dx[off] += dy[i];
        for (int d = rank - 1; d >= 0; d--) {
            if (++idx[d] < ydims[d]) break;
            idx[d] = 0;
        }
    }
}

int hk_entry_ce_bwd_f32(const float *logits, int tdt, const void *targets, int64_t N, int64_t V,
                        int use_ignore, int64_t ignore_index, const float *dloss,
                        float *dlogits, char *err) {
    return hk_cross_entropy_bwd_f32(logits, (HkDType)tdt, targets, NULL, N, V, use_ignore,
                                    ignore_index, *dloss, dlogits, err);
}

int hk_entry_adamw_f32(const float *p, const float *m, const float *v, const float *g, int64_t n,
                       const float *lr, const int64_t *step, const float *clip_scale,
                       double beta1, double beta2, double eps, double weight_decay,
                       float *p_out, float *m_out, float *v_out, char *err) {
    return hk_adamw_fused_f32(p, m, v, g, n, *lr, *step, clip_scale, beta1, beta2, eps,
                              weight_decay, p_out, m_out, v_out, err);
}

void hk_entry_memset(void *y, int v, int64_t n) {
    if (n > 0) memset(y, v, (size_t)n);
}
