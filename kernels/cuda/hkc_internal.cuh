/* Shared by the kernels/cuda translation units (one per op family, each
 * paired with its kernels/host twin: docs/CUDA.md): launch helpers, the
 * index walk of HkcShape/HkcStrides, the row-per-block launch shape and the
 * token-id load used by both embedding.cu and softmax.cu's cross entropy. */
#ifndef HETC_HKC_INTERNAL_CUH
#define HETC_HKC_INTERNAL_CUH

#include <stdio.h>

#include "hkc.h"

#define HKC_THREADS 256

/* Grid for n elements with a grid-stride loop: capped, the loop covers the rest. */
static inline unsigned hkc_blocks(int64_t n) {
    int64_t b = (n + HKC_THREADS - 1) / HKC_THREADS;
    if (b < 1) b = 1;
    if (b > 65535) b = 65535;
    return (unsigned)b;
}

/* Column reductions over many rows (bias and norm-parameter gradients: rows =
 * tokens, thousands): a block owns HKC_COLS adjacent columns (a warp reads
 * them coalesced) and HKC_COL_LANES row lanes; lane y sums rows y, y + LANES,
 * ... in double, then lane 0 adds the lanes in order.  The split is fixed, so
 * results are deterministic; one thread per column (the first version) used
 * 3 of 132 SMs for a 768-wide gradient and took milliseconds. */
#define HKC_COLS 32
#define HKC_COL_LANES 32
static inline unsigned hkc_col_blocks(int64_t n) {
    int64_t b = (n + HKC_COLS - 1) / HKC_COLS;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

/* Row chunks for a column reduction: a 768-wide gradient is 24 column
 * tiles, too few blocks for 132 SMs, so the rows are cut into up to 16
 * chunks (a function of rows only: results do not depend on the GPU),
 * each block's partial sums go to the context's workspace (stream-ordered
 * with cuBLASLt's use of it) in double, and a second kernel adds the
 * chunks in order.  nsums double arrays of chunks x n must fit. */
static inline int hkc_col_chunks(const HkcCtx *c, int64_t rows, int64_t n, int nsums) {
    int64_t k = (rows + 511) / 512;
    if (k > 16) k = 16;
    while (k > 1 && (size_t)(k * n * nsums) * sizeof(double) > c->workspace_bytes) k--;
    return (int)(k < 1 ? 1 : k);
}


/* bf16 bits <-> f32, the device twins of kernels/host/hk_bf16.h's
 * hk_bf16_to_f32 / hk_f32_to_bf16: the same integer operations (round to
 * nearest even on the dropped 16 bits, NaN kept quiet), so a device Cast
 * gives the host's bits; not __float2bfloat16, whose NaN payloads differ. */
__device__ static inline float hkc_bf16_to_f32(uint16_t h) {
    return __uint_as_float((uint32_t)h << 16);
}
__device__ static inline uint16_t hkc_f32_to_bf16(float f) {
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* After a launch: 0, or -1 with the launch error named. */
static inline int hkc_launched(const char *what, char *err) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return 0;
    if (err) snprintf(err, HKC_ERRLEN, "%s: kernel launch failed: %s", what, cudaGetErrorString(e));
    return -1;
}

static inline int hkc_fail(char *err, const char *msg) {
    if (err) snprintf(err, HKC_ERRLEN, "%s", msg);
    return -1;
}

/* Offset of flat index i of `shape` under `st`. */
__device__ static inline int64_t hkc_offset(int64_t i, const HkcShape &shape,
                                            const HkcStrides &st) {
    int64_t off = 0;
    for (int d = shape.rank - 1; d >= 0; d--) {
        int64_t n = shape.dims[d];
        int64_t k = n ? i % n : 0;
        i = n ? i / n : 0;
        off += k * st.s[d];
    }
    return off;
}

static inline int64_t hkc_numel(const HkcShape &s) {
    int64_t n = 1;
    for (int d = 0; d < s.rank; d++) n *= s.dims[d];
    return n;
}

#define HKC_LOOP(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

/* out_s[j] = sum over chunks of part[s][chunk][j], for nsums arrays s */
__global__ static void k_col_finish(const double *part, int chunks, int64_t n, int nsums,
                                    float *out0, float *out1) {
    HKC_LOOP(j, n) {
        for (int s = 0; s < nsums; s++) {
            float *o = s ? out1 : out0;
            if (!o) continue;
            const double *p = part + (int64_t)s * chunks * n;
            double t = 0;
            for (int k = 0; k < chunks; k++) t += p[(int64_t)k * n + j];
            o[j] = (float)t;
        }
    }
}

/* Block-wide sum of a double (blockDim.x a multiple of 32, <= 1024). */
__device__ static inline double hkc_block_sum(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = threadIdx.x < nw ? sh[threadIdx.x] : 0.0;
    if (w == 0)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    v = sh[0];
    __syncthreads();
    return v;
}

__device__ static inline float hkc_block_max(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = threadIdx.x < nw ? sh[threadIdx.x] : -INFINITY;
    if (w == 0)
        for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    v = sh[0];
    __syncthreads();
    return v;
}

/* Row kernels (softmax, attention, norms, cross entropy): one block per row. */
#define HKC_ROW_THREADS 256

static inline unsigned hkc_grid_rows(int64_t rows) {
    return (unsigned)(rows < 65535 ? rows : 65535);
}
#define HKC_ROW_LOOP(r, rows) for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

/* Token ids: i32 (HkDType 6) or i64. */
__device__ static inline int64_t hkc_load_id(int idt, const void *ids, int64_t i) {
    return idt == 6 ? (int64_t)((const int32_t *)ids)[i] : ((const int64_t *)ids)[i];
}

#endif
