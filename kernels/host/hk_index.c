/* Indexing kernels: GatherND, Tile, IsNaN.  Every index is validated
 * before any memory is touched, so a bad index is an error naming it,
 * never an out-of-bounds access. */
#include "hk.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int64_t idx_at(HkDType idt, const void *idx, int64_t i) {
    return idt == HK_I64 ? ((const int64_t *)idx)[i] : ((const int32_t *)idx)[i];
}

static int idx_dtype_ok(HkDType idt, char *err) {
    if (idt == HK_I64 || idt == HK_I32) return 1;
    if (err) snprintf(err, HK_ERRLEN, "indices must be int32 or int64 (dtype %d)", (int)idt);
    return 0;
}

/* ------------------------------------------------------------ IsNaN */
int hk_isnan(HkDType dt, const void *x, uint8_t *y, int64_t n, char *err) {
    switch (dt) {
    case HK_F32:
        for (int64_t i = 0; i < n; i++) y[i] = isnan(((const float *)x)[i]) != 0;
        return 0;
    case HK_F64:
        for (int64_t i = 0; i < n; i++) y[i] = isnan(((const double *)x)[i]) != 0;
        return 0;
    case HK_F16: /* exponent all ones, mantissa non-zero */
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = ((const uint16_t *)x)[i];
            y[i] = (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
        }
        return 0;
    case HK_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = ((const uint16_t *)x)[i];
            y[i] = (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0;
        }
        return 0;
    default:
        if (err) snprintf(err, HK_ERRLEN, "IsNaN does not support dtype %d", (int)dt);
        return -1;
    }
}

/* ------------------------------------------------------------ GatherND */
/* The geometry shared by GatherND and its adjoint: B batches of M index
 * tuples of k coordinates each, every tuple selecting a contiguous slice of
 * `slice` elements inside the batch's `per_batch` elements. */
typedef struct NdGeom {
    int64_t B, M, k, slice, per_batch;
    int64_t stride[HK_MAX_RANK]; /* element stride of coordinate j */
    const int64_t *cdims;        /* extents the k coordinates index */
} NdGeom;

static int nd_geom(int rank, const int64_t *dims, int irank, const int64_t *idims, int b,
                   NdGeom *g, char *err) {
    if (irank < 1 || b < 0 || b >= rank || b >= irank) {
        if (err) snprintf(err, HK_ERRLEN, "batch_dims %d does not fit data rank %d and indices "
                          "rank %d", b, rank, irank);
        return -1;
    }
    g->k = idims[irank - 1];
    if (g->k < 1 || g->k > rank - b) {
        if (err) snprintf(err, HK_ERRLEN, "index tuples of %lld coordinates for data of rank "
                          "%d (batch_dims %d)", (long long)g->k, rank, b);
        return -1;
    }
    for (int i = 0; i < b; i++)
        if (dims[i] != idims[i]) {
            if (err) snprintf(err, HK_ERRLEN, "batch dim %d differs (%lld vs %lld)", i,
                              (long long)dims[i], (long long)idims[i]);
            return -1;
        }
    g->B = hk_numel(b, dims);
    g->M = hk_numel(irank - 1 - b, idims + b);
    g->slice = hk_numel(rank - b - (int)g->k, dims + b + g->k);
    g->per_batch = hk_numel(rank - b, dims + b);
    g->cdims = dims + b;
    for (int j = (int)g->k - 1; j >= 0; j--)
        g->stride[j] = j == g->k - 1 ? g->slice : g->stride[j + 1] * g->cdims[j + 1];
    return 0;
}

/* Offset (elements) of tuple t = (batch, row) in the data, after validation. */
static int nd_validate(const NdGeom *g, HkDType idt, const void *idx, char *err) {
    for (int64_t t = 0; t < g->B * g->M; t++)
        for (int64_t j = 0; j < g->k; j++) {
            int64_t v = idx_at(idt, idx, t * g->k + j), n = g->cdims[j];
            if (v < -n || v >= n) {
                if (err) snprintf(err, HK_ERRLEN, "index %lld (tuple %lld, coordinate %lld) is "
                                  "out of range for an axis of extent %lld", (long long)v,
                                  (long long)t, (long long)j, (long long)n);
                return -1;
            }
        }
    return 0;
}
static int64_t nd_offset(const NdGeom *g, HkDType idt, const void *idx, int64_t t) {
    int64_t off = (t / (g->M ? g->M : 1)) * g->per_batch;
    for (int64_t j = 0; j < g->k; j++) {
        int64_t v = idx_at(idt, idx, t * g->k + j);
        off += (v < 0 ? v + g->cdims[j] : v) * g->stride[j];
    }
    return off;
}

int hk_gather_nd(size_t esize, const void *x, int rank, const int64_t *dims, HkDType idt,
                 const void *idx, int irank, const int64_t *idims, int batch_dims, void *y,
                 char *err) {
    NdGeom g;
    if (!idx_dtype_ok(idt, err) || nd_geom(rank, dims, irank, idims, batch_dims, &g, err) ||
        nd_validate(&g, idt, idx, err))
        return -1;
    size_t blk = esize * (size_t)g.slice;
    for (int64_t t = 0; t < g.B * g.M; t++)
        if (blk)
            memcpy((char *)y + (size_t)t * blk,
                   (const char *)x + (size_t)nd_offset(&g, idt, idx, t) * esize, blk);
    return 0;
}

/* ------------------------------------------------------------ Tile */
static void tile_rec(size_t esize, int rank, const int64_t *dims, const int64_t *reps,
                     const int64_t *xs, const int64_t *ys, int a, const char *x, char *y) {
    if (a == rank - 1) {
        size_t row = esize * (size_t)dims[a];
        for (int64_t r = 0; r < reps[a]; r++) memcpy(y + (size_t)r * row, x, row);
        return;
    }
    for (int64_t r = 0; r < reps[a]; r++)
        for (int64_t i = 0; i < dims[a]; i++)
            tile_rec(esize, rank, dims, reps, xs, ys, a + 1, x + (size_t)(i * xs[a]) * esize,
                     y + (size_t)((r * dims[a] + i) * ys[a]) * esize);
}

void hk_tile(size_t esize, const void *x, int rank, const int64_t *dims, const int64_t *reps,
             void *y) {
    int64_t yd[HK_MAX_RANK] = {0}, xs[HK_MAX_RANK], ys[HK_MAX_RANK];
    if (rank == 0) {
        memcpy(y, x, esize);
        return;
    }
    for (int i = 0; i < rank; i++) yd[i] = dims[i] * reps[i];
    if (hk_numel(rank, yd) == 0) return;
    hk_contig_strides(rank, dims, xs);
    hk_contig_strides(rank, yd, ys);
    tile_rec(esize, rank, dims, reps, xs, ys, 0, x, y);
}
