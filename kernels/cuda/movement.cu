/* Data movement, device side: strided copies (transpose, expand, slice,
 * split, concat) and the row broadcast of a bias.  Host twins:
 * kernels/host/hk_movement.c and hk_iter.c (hk_strided_copy, hk_expand). */
#include "hkc_internal.cuh"

template <typename T>
__global__ static void k_strided(HkcShape shape, const T *src, HkcStrides ss, T *dst,
                                 HkcStrides ds, int64_t n) {
    HKC_LOOP(i, n) dst[hkc_offset(i, shape, ds)] = src[hkc_offset(i, shape, ss)];
}

extern "C" int hkc_strided_copy(HkcCtx *c, size_t esize, HkcShape shape, const void *src,
                                int64_t src_off, HkcStrides src_strides, void *dst,
                                int64_t dst_off, HkcStrides dst_strides, char *err) {
    int64_t n = hkc_numel(shape);
    if (n == 0) return 0;
    unsigned g = hkc_blocks(n);
#define STRIDED(T)                                                                          \
    k_strided<T><<<g, HKC_THREADS, 0, c->stream>>>(shape, (const T *)src + src_off, src_strides, \
                                                  (T *)dst + dst_off, dst_strides, n)
    switch (esize) {
    case 1: STRIDED(uint8_t); break;
    case 2: STRIDED(uint16_t); break;
    case 4: STRIDED(uint32_t); break;
    case 8: STRIDED(uint64_t); break;
    default: return hkc_fail(err, "hkc_strided_copy: element size must be 1, 2, 4 or 8");
    }
#undef STRIDED
    return hkc_launched("strided copy", err);
}

__global__ static void k_row_bcast(const float *b, int64_t rows, int64_t n, float *y) {
    HKC_LOOP(i, rows * n) y[i] = b[i % n];
}

extern "C" int hkc_row_broadcast_f32(HkcCtx *c, const float *b, int64_t rows, int64_t n,
                                     float *y, char *err) {
    if (rows * n == 0) return 0;
    k_row_bcast<<<hkc_blocks(rows * n), HKC_THREADS, 0, c->stream>>>(b, rows, n, y);
    return hkc_launched("row broadcast", err);
}
