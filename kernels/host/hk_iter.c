/* Strided N-d iteration shared by every elementwise, broadcast and
 * data-movement kernel: one implementation of numpy broadcasting. */
#include "hk.h"
#include "hk_parallel.h"

#include <stdio.h>
#include <string.h>

size_t hk_dtype_size(HkDType t) {
    switch (t) {
    case HK_F32: case HK_I32: case HK_U32: return 4;
    case HK_F64: case HK_I64: case HK_U64: return 8;
    case HK_F16: case HK_BF16: case HK_I16: case HK_U16: return 2;
    case HK_I8: case HK_U8: case HK_BOOL: return 1;
    default: return 0;
    }
}

int64_t hk_numel(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= dims[i];
    return n;
}

void hk_contig_strides(int rank, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

int hk_bcast_strides(int rank, const int64_t *dims, int orank, const int64_t *odims,
                     int64_t *strides) {
    if (rank > orank) return -1;
    int64_t cs[HK_MAX_RANK];
    hk_contig_strides(rank, dims, cs);
    int lead = orank - rank;
    for (int i = 0; i < orank; i++) {
        if (i < lead) {
            strides[i] = 0;
            continue;
        }
        int64_t d = dims[i - lead];
        if (d == odims[i]) strides[i] = d == 1 ? 0 : cs[i - lead];
        else if (d == 1) strides[i] = 0;
        else return -1;
    }
    return 0;
}

int hk_bcast_shape(int ra, const int64_t *a, int rb, const int64_t *b, int *ro, int64_t *o) {
    int r = ra > rb ? ra : rb;
    for (int i = 0; i < r; i++) {
        int ia = i - (r - ra), ib = i - (r - rb);
        int64_t x = ia >= 0 ? a[ia] : 1, y = ib >= 0 ? b[ib] : 1;
        if (x == y || y == 1) o[i] = x;
        else if (x == 1) o[i] = y;
        else return -1;
    }
    *ro = r;
    return 0;
}

void hk_iter_init(HkIter *it, int rank, const int64_t *dims, int nops,
                  const int64_t (*strides)[HK_MAX_RANK], const int64_t *base) {
    memset(it, 0, sizeof *it);
    it->nops = nops;
    for (int k = 0; k < nops; k++) it->base[k] = base ? base[k] : 0;
    /* drop unit axes, stop at empty ones */
    int r = 0;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 0) {
            it->rows = 0;
            it->rank = 0;
            return;
        }
        if (dims[i] == 1) continue;
        it->dims[r] = dims[i];
        for (int k = 0; k < nops; k++) it->strides[k][r] = strides[k][i];
        r++;
    }
    /* merge an axis into its inner neighbour when every operand walks
     * them as one contiguous run */
    int m = 0;
    for (int i = 0; i < r; i++) {
        if (m > 0) {
            int ok = 1;
            for (int k = 0; k < nops && ok; k++)
                ok = it->strides[k][m - 1] == it->strides[k][i] * it->dims[i];
            if (ok) {
                it->dims[m - 1] *= it->dims[i];
                for (int k = 0; k < nops; k++) it->strides[k][m - 1] = it->strides[k][i];
                continue;
            }
        }
        it->dims[m] = it->dims[i];
        for (int k = 0; k < nops; k++) it->strides[k][m] = it->strides[k][i];
        m++;
    }
    if (m == 0) {
        it->n = 1;
        for (int k = 0; k < nops; k++) it->inner[k] = 0;
        it->rank = 0;
        it->rows = 1;
        return;
    }
    it->n = it->dims[m - 1];
    for (int k = 0; k < nops; k++) it->inner[k] = it->strides[k][m - 1];
    it->rank = m - 1;
    it->rows = hk_numel(it->rank, it->dims);
}

int hk_iter_next(HkIter *it, int64_t *off) {
    if (it->row >= it->rows) return 0;
    for (int k = 0; k < it->nops; k++) {
        int64_t o = it->base[k];
        for (int i = 0; i < it->rank; i++) o += it->idx[i] * it->strides[k][i];
        off[k] = o;
    }
    it->row++;
    for (int i = it->rank - 1; i >= 0; i--) {
        if (++it->idx[i] < it->dims[i]) break;
        it->idx[i] = 0;
    }
    return 1;
}

void hk_iter_seek(HkIter *it, int64_t row) {
    it->row = row;
    for (int i = it->rank - 1; i >= 0; i--) {
        it->idx[i] = row % it->dims[i];
        row /= it->dims[i];
    }
}

typedef struct CopyJob {
    size_t esize;
    const HkIter *it;
    const char *src;
    char *dst;
} CopyJob;

/* elements [i0, i1) of one iterator row */
static void copy_row(size_t esize, char *d, const char *s, int64_t is, int64_t n) {
    if (is == 1) {
        memcpy(d, s, (size_t)n * esize);
        return;
    }
    /* fixed element sizes let the compiler emit plain loads */
    switch (esize) {
#define COPY_ROW(T)                                                       \
    {                                                                     \
        T *o = (T *)(void *)d;                                            \
        const T *in = (const T *)(const void *)s;                         \
        for (int64_t i = 0; i < n; i++) o[i] = in[i * is];                \
    }                                                                     \
    break;
    case 1: COPY_ROW(uint8_t)
    case 2: COPY_ROW(uint16_t)
    case 4: COPY_ROW(uint32_t)
    case 8: COPY_ROW(uint64_t)
#undef COPY_ROW
    default:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * esize, s + i * is * esize, esize);
    }
}

static void copy_rows(void *c, int64_t lo, int64_t hi) {
    const CopyJob *j = c;
    HkIter it = *j->it;
    hk_iter_seek(&it, lo);
    int64_t off[2];
    for (int64_t r = lo; r < hi && hk_iter_next(&it, off); r++)
        copy_row(j->esize, j->dst + off[0] * j->esize, j->src + off[1] * j->esize, it.inner[1],
                 it.n);
}

/* one long row split into chunks */
static void copy_chunk(void *c, int64_t lo, int64_t hi) {
    const CopyJob *j = c;
    int64_t off[2];
    HkIter it = *j->it;
    hk_iter_next(&it, off);
    copy_row(j->esize, j->dst + (off[0] + lo) * j->esize,
             j->src + (off[1] + lo * it.inner[1]) * j->esize, it.inner[1], hi - lo);
}

void hk_strided_copy(size_t esize, int rank, const int64_t *dims, const void *src,
                     int64_t src_off, const int64_t *src_strides, void *dst) {
    int64_t st[2][HK_MAX_RANK];
    hk_contig_strides(rank, dims, st[0]);
    for (int i = 0; i < rank; i++) st[1][i] = src_strides[i];
    int64_t base[2] = {0, src_off};
    HkIter it;
    hk_iter_init(&it, rank, dims, 2, (const int64_t(*)[HK_MAX_RANK])st, base);
    if (it.rows == 0) return;
    /* a copy moves each element once: any split gives the same bytes */
    CopyJob j = {esize, &it, src, dst};
    int64_t grain = (int64_t)(262144 / (esize ? esize : 1)); /* ~256 KiB per chunk */
    if (it.rows == 1) hk_parallel_for(it.n, grain, copy_chunk, &j);
    else hk_parallel_for(it.rows, grain / it.n > 0 ? grain / it.n : 1, copy_rows, &j);
}

int hk_expand(size_t esize, const void *src, int srank, const int64_t *sdims, void *dst,
              int orank, const int64_t *odims, char *err) {
    int64_t st[HK_MAX_RANK];
    if (hk_bcast_strides(srank, sdims, orank, odims, st)) {
        if (err) snprintf(err, HK_ERRLEN, "shape of rank %d does not broadcast to rank %d output",
                          srank, orank);
        return -1;
    }
    hk_strided_copy(esize, orank, odims, src, 0, st, dst);
    return 0;
}
