/* Strided N-d iteration shared by every elementwise, broadcast and
 * data-movement kernel: one implementation of numpy broadcasting. */
#include "hk.h"
#include "hk_cpu.h"
#include "hk_parallel.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HK_TILE_AVX2 1 /* 8 x 8 register transposes (tile_rows_avx2) */
#endif

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

/* Transposed tiles: the output's last axis steps the source by cs != 1
 * while its second-to-last steps it by 1 (a transpose of the last two
 * axes, e.g. the tied LM head's [V, D] -> [D, V]).  Copied row by row that
 * reads one element per cache line; here a task takes TILE_ROWS output
 * rows of one batch and copies TILE_ROWS x TILE_COLS tiles, whose source
 * cache lines (TILE_ROWS consecutive elements per column) are read from L1
 * for every row of the tile, and whose rows are written contiguously.  A copy moves each element
 * once, so any split gives the same bytes. */
#define TILE_ROWS 16
#define TILE_COLS 64 /* the tile's source lines stay in L1 across its rows */
typedef struct TileJob {
    size_t esize;
    const char *src;
    char *dst;
    int nlead;                    /* leading (batch) axes */
    const int64_t *dims, *strides; /* of the leading axes */
    int64_t R, C, cs, base, rtiles;
    int avx2; /* hk_vector_isa() >= 1: tile_rows_avx2 for 4-byte elements */
} TileJob;

#ifdef HK_TILE_AVX2
/* o[k*ldo + m] = in[m*ldi + k] for k, m < 8: eight 8-float rows loaded,
 * transposed in registers (unpack, shuffle, 128-bit permute), stored as
 * eight rows.  The scalar tile below reads one element per load; this
 * moves 8, and the tied LM head's [V, D] -> [D, V] copies (154 MB each
 * way on GPT-2) ran at a quarter of memcpy's speed with scalar loads. */
__attribute__((target("avx2"))) static inline void t8x8_f32(const float *in, int64_t ldi,
                                                             float *o, int64_t ldo) {
    __m256 r0 = _mm256_loadu_ps(in), r1 = _mm256_loadu_ps(in + ldi);
    __m256 r2 = _mm256_loadu_ps(in + 2 * ldi), r3 = _mm256_loadu_ps(in + 3 * ldi);
    __m256 r4 = _mm256_loadu_ps(in + 4 * ldi), r5 = _mm256_loadu_ps(in + 5 * ldi);
    __m256 r6 = _mm256_loadu_ps(in + 6 * ldi), r7 = _mm256_loadu_ps(in + 7 * ldi);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    /* u_k: columns k and k + 4 of four input rows (the two 128-bit lanes) */
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(o, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(o + ldo, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(o + 2 * ldo, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(o + 3 * ldo, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(o + 4 * ldo, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(o + 5 * ldo, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(o + 6 * ldo, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(o + 7 * ldo, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* one task's nr x C output rows of 4-byte elements (float bits moved as
 * floats: loads and stores only, so NaN payloads are kept): per 8-column
 * block, every 8-row block of the task, so the source's 64-byte lines
 * (16 rows) are used whole while in L1 -- row blocks outermost ran the
 * [V, D] -> [D, V] copy 1.6x slower -- then the scalar loop for the
 * edges; the same tiles as TILE() */
__attribute__((target("avx2"))) static void tile_rows_avx2(const float *in, float *o, int64_t nr,
                                                           int64_t C, int64_t cs) {
    int64_t nr8 = nr - nr % 8;
    for (int64_t i0 = 0; i0 < C; i0 += TILE_COLS) {
        int64_t i1 = C - i0 < TILE_COLS ? C : i0 + TILE_COLS, i = i0;
        for (; i + 8 <= i1; i += 8)
            for (int64_t r = 0; r < nr8; r += 8) t8x8_f32(in + i * cs + r, cs, o + r * C + i, C);
        for (int64_t r = 0; r < nr8; r++)
            for (int64_t k = i; k < i1; k++) o[r * C + k] = in[k * cs + r];
        for (int64_t r = nr8; r < nr; r++)
            for (int64_t k = i0; k < i1; k++) o[r * C + k] = in[k * cs + r];
    }
}
#endif

static void tile_tasks(void *c, int64_t lo, int64_t hi) {
    const TileJob *j = c;
    for (int64_t t = lo; t < hi; t++) {
        int64_t b = t / j->rtiles, r0 = (t % j->rtiles) * TILE_ROWS;
        int64_t nr = j->R - r0 < TILE_ROWS ? j->R - r0 : TILE_ROWS;
        int64_t so = j->base, rem = b; /* batch b's source offset */
        for (int a = j->nlead - 1; a >= 0; a--) {
            so += (rem % j->dims[a]) * j->strides[a];
            rem /= j->dims[a];
        }
        int64_t C = j->C, cs = j->cs;
        size_t es = j->esize;
        char *d = j->dst + (size_t)((b * j->R + r0) * C) * es;
        const char *s = j->src + (size_t)(so + r0) * es;
#define TILE(T)                                                              \
    {                                                                        \
        T *o = (T *)(void *)d;                                               \
        const T *in = (const T *)(const void *)s;                            \
        for (int64_t i0 = 0; i0 < C; i0 += TILE_COLS) {                      \
            int64_t i1 = C - i0 < TILE_COLS ? C : i0 + TILE_COLS;            \
            for (int64_t r = 0; r < nr; r++)                                 \
                for (int64_t i = i0; i < i1; i++) o[r * C + i] = in[i * cs + r]; \
        }                                                                    \
    }                                                                        \
    break;
#ifdef HK_TILE_AVX2
        if (es == 4 && j->avx2) {
            tile_rows_avx2((const float *)(const void *)s, (float *)(void *)d, nr, C, cs);
            continue;
        }
#endif
        switch (es) {
        case 4: TILE(uint32_t)
        case 8: TILE(uint64_t)
        case 2: TILE(uint16_t)
        default: TILE(uint8_t)
        }
#undef TILE
    }
}

void hk_strided_copy(size_t esize, int rank, const int64_t *dims, const void *src,
                     int64_t src_off, const int64_t *src_strides, void *dst) {
    if (rank >= 2 && (esize == 1 || esize == 2 || esize == 4 || esize == 8) &&
        src_strides[rank - 2] == 1 && src_strides[rank - 1] != 1 && dims[rank - 2] >= TILE_ROWS &&
        dims[rank - 1] >= TILE_ROWS) {
        int64_t R = dims[rank - 2], nb = hk_numel(rank - 2, dims);
        TileJob j = {esize, src, dst, rank - 2, dims, src_strides, R, dims[rank - 1],
                     src_strides[rank - 1], src_off, (R + TILE_ROWS - 1) / TILE_ROWS,
                     esize == 4 && hk_vector_isa() >= 1};
        if (nb == 0) return;
        int64_t per = TILE_ROWS * dims[rank - 1]; /* elements per task */
        int64_t grain = (int64_t)(262144 / esize) / (per > 0 ? per : 1);
        hk_parallel_for(nb * j.rtiles, grain > 0 ? grain : 1, tile_tasks, &j);
        return;
    }
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
