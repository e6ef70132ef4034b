/* Indexing kernels: GatherND, GatherElements, ScatterND, Tile, IsNaN, and
 * the gathers' adjoints (hk_train.h).  Every index is validated
 * before any memory is touched, so a bad index is an error naming it,
 * never an out-of-bounds access. */
#include "hk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk_train.h"

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

/* Every coordinate of every tuple within its axis (before any access). */
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
/* Offset (elements) in the data of tuple t = batch * M + row (validated). */
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

/* ------------------------------------------------------------ ScatterND */
#define RED_APPLY(T)                                                              \
    {                                                                             \
        T *o = (T *)y + off;                                                      \
        const T *u = (const T *)upd + t * g.slice;                                \
        for (int64_t i = 0; i < g.slice; i++)                                     \
            o[i] = red == HK_RED_ADD ? (T)(o[i] + u[i])                           \
                 : red == HK_RED_MUL ? (T)(o[i] * u[i])                           \
                 : red == HK_RED_MAX ? (o[i] > u[i] ? o[i] : u[i])                \
                                     : (o[i] < u[i] ? o[i] : u[i]);               \
        break;                                                                    \
    }

/* y (already holding the data) gets the B*M update slices; batch_dims b
 * (0 for ONNX ScatterND; GatherND's adjoint uses its batch_dims). */
static int scatter_nd_into(HkDType dt, void *y, int rank, const int64_t *dims, HkDType idt,
                           const void *idx, int irank, const int64_t *idims, int b,
                           const void *upd, HkScatterRed red, char *err) {
    NdGeom g;
    size_t es = hk_dtype_size(dt);
    if (!es || (red != HK_RED_NONE && dt != HK_F32 && dt != HK_F64 && dt != HK_I32 &&
                dt != HK_I64)) {
        if (err) snprintf(err, HK_ERRLEN, "ScatterND reduction %d does not support dtype %d",
                          (int)red, (int)dt);
        return -1;
    }
    if (!idx_dtype_ok(idt, err) || nd_geom(rank, dims, irank, idims, b, &g, err) ||
        nd_validate(&g, idt, idx, err))
        return -1;
    for (int64_t t = 0; t < g.B * g.M; t++) {
        int64_t off = nd_offset(&g, idt, idx, t);
        if (red == HK_RED_NONE) {
            if (g.slice)
                memcpy((char *)y + (size_t)off * es, (const char *)upd + (size_t)(t * g.slice) * es,
                       (size_t)g.slice * es);
            continue;
        }
        switch (dt) {
        case HK_F32: RED_APPLY(float)
        case HK_F64: RED_APPLY(double)
        case HK_I32: RED_APPLY(int32_t)
        default: RED_APPLY(int64_t)
        }
    }
    return 0;
}
#undef RED_APPLY

int hk_scatter_nd(HkDType dt, const void *x, int rank, const int64_t *dims, HkDType idt,
                  const void *idx, int irank, const int64_t *idims, const void *upd,
                  HkScatterRed red, void *y, char *err) {
    size_t nb = hk_dtype_size(dt) * (size_t)hk_numel(rank, dims);
    if (nb && y != x) memcpy(y, x, nb);
    return scatter_nd_into(dt, y, rank, dims, idt, idx, irank, idims, 0, upd, red, err);
}

int hk_gather_nd_backward_f32(const float *dy, int rank, const int64_t *dims, HkDType idt,
                              const void *idx, int irank, const int64_t *idims, int batch_dims,
                              float *dx, char *err) {
    int64_t n = hk_numel(rank, dims);
    if (n) memset(dx, 0, (size_t)n * sizeof *dx);
    return scatter_nd_into(HK_F32, dx, rank, dims, idt, idx, irank, idims, batch_dims, dy,
                           HK_RED_ADD, err);
}

/* ------------------------------------------------------------ Gather's adjoint */
int hk_gather_backward_f32(const float *dy, int rank, const int64_t *dims, int axis,
                           HkDType idt, const void *idx, int64_t nidx, float *dx, char *err) {
    if (!idx_dtype_ok(idt, err)) return -1;
    int64_t n = dims[axis], outer = hk_numel(axis, dims);
    int64_t inner = hk_numel(rank - axis - 1, dims + axis + 1);
    for (int64_t i = 0; i < nidx; i++) {
        int64_t v = idx_at(idt, idx, i);
        if (v < -n || v >= n) {
            if (err) snprintf(err, HK_ERRLEN, "index %lld (position %lld) is out of range for "
                              "an axis of extent %lld", (long long)v, (long long)i, (long long)n);
            return -1;
        }
    }
    int64_t total = hk_numel(rank, dims);
    if (total) memset(dx, 0, (size_t)total * sizeof *dx);
    for (int64_t b = 0; b < outer; b++)
        for (int64_t i = 0; i < nidx; i++) {
            int64_t v = idx_at(idt, idx, i);
            if (v < 0) v += n;
            float *o = dx + (b * n + v) * inner;
            const float *g = dy + (b * nidx + i) * inner;
            for (int64_t j = 0; j < inner; j++) o[j] += g[j];
        }
    return 0;
}

/* ------------------------------------------------------------ GatherElements */
/* Element offsets into the data of every index position (malloc'd), after
 * checking shapes and index values. */
static int64_t *ge_offsets(int rank, const int64_t *dims, int axis, HkDType idt, const void *idx,
                           const int64_t *idims, char *err) {
    if (!idx_dtype_ok(idt, err)) return NULL;
    if (axis < 0 || axis >= rank) {
        if (err) snprintf(err, HK_ERRLEN, "axis %d is out of range for rank %d", axis, rank);
        return NULL;
    }
    for (int d = 0; d < rank; d++)
        if (d != axis && idims[d] > dims[d]) {
            if (err) snprintf(err, HK_ERRLEN, "indices extent %lld exceeds the data's %lld on "
                              "axis %d", (long long)idims[d], (long long)dims[d], d);
            return NULL;
        }
    int64_t n = hk_numel(rank, idims), xs[HK_MAX_RANK], p[HK_MAX_RANK] = {0};
    hk_contig_strides(rank, dims, xs);
    int64_t *off = malloc((size_t)(n ? n : 1) * sizeof *off);
    if (!off) {
        if (err) snprintf(err, HK_ERRLEN, "out of memory for %lld index offsets", (long long)n);
        return NULL;
    }
    int64_t ext = dims[axis];
    for (int64_t i = 0; i < n; i++) {
        int64_t v = idx_at(idt, idx, i);
        if (v < -ext || v >= ext) {
            if (err) snprintf(err, HK_ERRLEN, "index %lld (position %lld) is out of range for "
                              "an axis of extent %lld", (long long)v, (long long)i,
                              (long long)ext);
            free(off);
            return NULL;
        }
        int64_t o = (v < 0 ? v + ext : v) * xs[axis];
        for (int d = 0; d < rank; d++)
            if (d != axis) o += p[d] * xs[d];
        off[i] = o;
        for (int d = rank - 1; d >= 0; d--) { /* next position, row-major */
            if (++p[d] < idims[d]) break;
            p[d] = 0;
        }
    }
    return off;
}

int hk_gather_elements(size_t esize, const void *x, int rank, const int64_t *dims, int axis,
                       HkDType idt, const void *idx, const int64_t *idims, void *y, char *err) {
    int64_t *off = ge_offsets(rank, dims, axis, idt, idx, idims, err);
    if (!off) return -1;
    int64_t n = hk_numel(rank, idims);
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)y + (size_t)i * esize, (const char *)x + (size_t)off[i] * esize, esize);
    free(off);
    return 0;
}

int hk_gather_elements_backward_f32(const float *dy, int rank, const int64_t *dims, int axis,
                                    HkDType idt, const void *idx, const int64_t *idims,
                                    float *dx, char *err) {
    int64_t *off = ge_offsets(rank, dims, axis, idt, idx, idims, err);
    if (!off) return -1;
    int64_t total = hk_numel(rank, dims), n = hk_numel(rank, idims);
    if (total) memset(dx, 0, (size_t)total * sizeof *dx);
    for (int64_t i = 0; i < n; i++) dx[off[i]] += dy[i];
    free(off);
    return 0;
}
