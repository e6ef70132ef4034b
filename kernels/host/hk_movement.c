/* Data movement: every kernel here is a strided copy (hk_strided_copy) or
 * a block copy, so it works for any element size. */
#include "hk.h"

#include <stdio.h>
#include <string.h>

void hk_transpose(size_t esize, const void *x, int rank, const int64_t *dims,
                  const int64_t *perm, void *y) {
    int64_t xs[HK_MAX_RANK], ys[HK_MAX_RANK], yd[HK_MAX_RANK];
    hk_contig_strides(rank, dims, xs);
    for (int i = 0; i < rank; i++) {
        yd[i] = dims[perm[i]];
        ys[i] = xs[perm[i]];
    }
    hk_strided_copy(esize, rank, yd, x, 0, ys, y);
}

void hk_slice(size_t esize, const void *x, int rank, const int64_t *dims,
              const int64_t *start, const int64_t *step, const int64_t *ydims, void *y) {
    int64_t xs[HK_MAX_RANK], ss[HK_MAX_RANK], off = 0;
    hk_contig_strides(rank, dims, xs);
    if (hk_numel(rank, ydims) == 0) return;
    for (int i = 0; i < rank; i++) {
        /* an axis that keeps one element never steps: its step may be
         * INT64_MAX, whose product with the stride would overflow */
        ss[i] = ydims[i] > 1 ? xs[i] * step[i] : 0;
        off += start[i] * xs[i];
    }
    hk_strided_copy(esize, rank, ydims, x, off, ss, y);
}

/* outer blocks before axis, bytes per block at and after axis */
static int64_t outer_of(int axis, const int64_t *dims) { return hk_numel(axis, dims); }
static size_t block_of(size_t esize, int rank, int axis, const int64_t *dims) {
    return esize * (size_t)hk_numel(rank - axis, dims + axis);
}

void hk_concat(size_t esize, int n, const void *const *xs, const int64_t *const *xdims,
               int rank, int axis, void *y) {
    int64_t outer = outer_of(axis, xdims[0]);
    char *o = y;
    for (int64_t b = 0; b < outer; b++)
        for (int k = 0; k < n; k++) {
            size_t blk = block_of(esize, rank, axis, xdims[k]);
            if (blk) memcpy(o, (const char *)xs[k] + (size_t)b * blk, blk);
            o += blk;
        }
}

void hk_split(size_t esize, const void *x, int rank, const int64_t *dims, int axis, int n,
              const int64_t *sizes, void *const *ys) {
    int64_t outer = outer_of(axis, dims);
    size_t inner = esize * (size_t)hk_numel(rank - axis - 1, dims + axis + 1);
    const char *s = x;
    for (int64_t b = 0; b < outer; b++)
        for (int k = 0; k < n; k++) {
            size_t blk = inner * (size_t)sizes[k];
            if (blk) memcpy((char *)ys[k] + (size_t)b * blk, s, blk);
            s += blk;
        }
}

int hk_gather(size_t esize, const void *x, int rank, const int64_t *dims, int axis,
              HkDType idt, const void *idx, int64_t nidx, void *y, char *err) {
    if (idt != HK_I64 && idt != HK_I32) {
        if (err) snprintf(err, HK_ERRLEN, "indices must be int32 or int64 (dtype %d)", (int)idt);
        return -1;
    }
    int64_t n = dims[axis], outer = outer_of(axis, dims);
    size_t inner = esize * (size_t)hk_numel(rank - axis - 1, dims + axis + 1);
    /* validate every index before touching memory */
    for (int64_t i = 0; i < nidx; i++) {
        int64_t v = idt == HK_I64 ? ((const int64_t *)idx)[i] : ((const int32_t *)idx)[i];
        if (v < -n || v >= n) {
            if (err) snprintf(err, HK_ERRLEN, "index %lld (position %lld) is out of range for "
                              "an axis of extent %lld", (long long)v, (long long)i, (long long)n);
            return -1;
        }
    }
    char *o = y;
    const char *s = x;
    for (int64_t b = 0; b < outer; b++)
        for (int64_t i = 0; i < nidx; i++) {
            int64_t v = idt == HK_I64 ? ((const int64_t *)idx)[i] : ((const int32_t *)idx)[i];
            if (v < 0) v += n;
            if (inner) memcpy(o, s + ((size_t)b * (size_t)n + (size_t)v) * inner, inner);
            o += inner;
        }
    return 0;
}

void hk_trilu(size_t esize, const void *x, int rank, const int64_t *dims, int64_t k,
              int upper, void *y) {
    int64_t total = hk_numel(rank, dims);
    if (rank < 2 || total == 0) {
        if (total) memcpy(y, x, (size_t)total * esize);
        return;
    }
    int64_t R = dims[rank - 2], C = dims[rank - 1], mats = total / (R * C);
    const char *s = x;
    char *o = y;
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) {
                size_t at = (size_t)((m * R + i) * C + j) * esize;
                /* upper keeps j - i >= k; lower keeps j - i <= k */
                int keep = upper ? (j - i >= k) : (j - i <= k);
                if (keep) memcpy(o + at, s + at, esize);
                else memset(o + at, 0, esize);
            }
}

int hk_range(HkDType dt, const void *start, const void *delta, int64_t n, void *y, char *err) {
    switch (dt) {
#define RANGE(T)                                                              \
    {                                                                         \
        T s = *(const T *)start, d = *(const T *)delta;                       \
        T *o = y;                                                             \
        for (int64_t i = 0; i < n; i++) o[i] = (T)(s + (T)i * d);             \
        return 0;                                                             \
    }
    case HK_F32: RANGE(float)
    case HK_F64: RANGE(double)
    case HK_I16: RANGE(int16_t)
    case HK_I32: RANGE(int32_t)
    case HK_I64: RANGE(int64_t)
#undef RANGE
    default:
        if (err) snprintf(err, HK_ERRLEN, "Range does not support dtype %d", (int)dt);
        return -1;
    }
}
