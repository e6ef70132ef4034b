/* Data movement, device side: strided copies (transpose, expand, slice,
 * split, concat) and the row broadcast of a bias.  Host twins:
 * kernels/host/hk_movement.c and hk_iter.c (hk_strided_copy, hk_expand).
 *
 * A strided copy is first simplified on the host (hkc_strided_plan): size-1
 * dims dropped, dims contiguous in both operands merged, and the element
 * widened (2 x 4 bytes -> 8, ... up to 16) while the innermost dim is
 * contiguous in both and everything stays aligned.  Then one of three
 * kernels runs: a batched 32 x 32 shared-memory transpose when the
 * destination's innermost dim is not the source's (K^T and its gradient:
 * both sides coalesced), a 32-bit index walk when every offset fits (the
 * head transposes [B,T,H,D] -> [B,H,T,D] become 16-byte rows), else the
 * general 64-bit walk.  The first version ran every copy through the 64-bit
 * walk, two 64-bit divisions per dim per element: 18 % of GPT-2's kernel
 * time on an H200 (docs/PERF.md). */
#include "hkc_internal.cuh"

/* 16-byte element for the widened copies */
struct __align__(16) HkcV16 {
    uint32_t w[4];
};

template <typename T>
__global__ static void k_strided(HkcShape shape, const T *src, HkcStrides ss, T *dst,
                                 HkcStrides ds, int64_t n) {
    HKC_LOOP(i, n) dst[hkc_offset(i, shape, ds)] = src[hkc_offset(i, shape, ss)];
}

/* The same walk in 32-bit arithmetic (n < 2^31, every offset in int32). */
struct HkcWalk32 {
    int rank;
    uint32_t dims[HKC_MAX_RANK];
    int32_t ss[HKC_MAX_RANK], ds[HKC_MAX_RANK];
};

template <typename T>
__global__ static void k_strided32(HkcWalk32 w, const T *src, T *dst, uint32_t n) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        uint32_t r = i;
        int32_t so = 0, dof = 0;
        for (int d = w.rank - 1; d > 0; d--) {
            uint32_t q = r / w.dims[d], k = r - q * w.dims[d];
            so += (int32_t)k * w.ss[d];
            dof += (int32_t)k * w.ds[d];
            r = q;
        }
        so += (int32_t)r * w.ss[0];
        dof += (int32_t)r * w.ds[0];
        dst[dof] = src[so];
    }
}

/* Batched transpose: dim a is the destination's innermost (dst stride 1,
 * source stride sa), dim b the source's (source stride 1, dst stride db);
 * the other dims ("rest") are walked one per blockIdx.z step. */
#define HKC_TILE 32
#define HKC_TILE_ROWS 8
template <typename T>
__global__ static void k_transpose_tiled(const T *src, T *dst, int64_t na, int64_t nb,
                                         int64_t sa, int64_t db, HkcShape rest,
                                         HkcStrides rs, HkcStrides rd, int64_t nrest) {
    __shared__ T tile[HKC_TILE][HKC_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t a0 = (int64_t)blockIdx.x * HKC_TILE, b0 = (int64_t)blockIdx.y * HKC_TILE;
    for (int64_t r = blockIdx.z; r < nrest; r += gridDim.z) {
        const T *s = src + hkc_offset(r, rest, rs);
        T *d = dst + hkc_offset(r, rest, rd);
        for (int j = ty; j < HKC_TILE; j += HKC_TILE_ROWS) {
            int64_t a = a0 + j, b = b0 + tx; /* read along b: contiguous in src */
            if (a < na && b < nb) tile[j][tx] = s[a * sa + b];
        }
        __syncthreads();
        for (int j = ty; j < HKC_TILE; j += HKC_TILE_ROWS) {
            int64_t b = b0 + j, a = a0 + tx; /* write along a: contiguous in dst */
            if (a < na && b < nb) d[b * db + a] = tile[tx][j];
        }
        __syncthreads();
    }
}

/* A strided copy after simplification: byte pointers, element size 1..16. */
struct StridedPlan {
    int rank;
    int64_t dims[HKC_MAX_RANK], ss[HKC_MAX_RANK], ds[HKC_MAX_RANK];
    size_t esize;
    const char *src;
    char *dst;
};

static void strided_plan(StridedPlan *p, size_t esize, const HkcShape &shape, const char *src,
                         const HkcStrides &ss, char *dst, const HkcStrides &ds) {
    p->rank = 0;
    p->esize = esize;
    p->src = src;
    p->dst = dst;
    for (int d = 0; d < shape.rank; d++) {
        int64_t n = shape.dims[d];
        if (n == 1) continue;
        int r = p->rank;
        /* the previous (outer) dim steps over exactly this one in both: merge */
        if (r > 0 && p->ss[r - 1] == ss.s[d] * n && p->ds[r - 1] == ds.s[d] * n) {
            p->dims[r - 1] *= n;
            p->ss[r - 1] = ss.s[d];
            p->ds[r - 1] = ds.s[d];
            continue;
        }
        p->dims[r] = n;
        p->ss[r] = ss.s[d];
        p->ds[r] = ds.s[d];
        p->rank++;
    }
    if (p->rank == 0) { /* one element */
        p->rank = 1;
        p->dims[0] = 1;
        p->ss[0] = p->ds[0] = 0;
    }
    /* widen while the innermost dim is contiguous in both and all stays aligned */
    for (;;) {
        int in = p->rank - 1;
        size_t w = p->esize * 2;
        if (w > 16 || p->ss[in] != 1 || p->ds[in] != 1 || p->dims[in] % 2) break;
        if ((uintptr_t)p->src % w || (uintptr_t)p->dst % w) break;
        int ok = 1;
        for (int d = 0; d < in; d++) ok &= p->ss[d] % 2 == 0 && p->ds[d] % 2 == 0;
        if (!ok) break;
        p->esize = w;
        p->dims[in] /= 2;
        for (int d = 0; d < in; d++) {
            p->ss[d] /= 2;
            p->ds[d] /= 2;
        }
    }
}

/* Largest |offset| the walk reaches under strides st, or -1 past int64. */
static int fits_int32(const StridedPlan *p, const int64_t *st) {
    int64_t m = 0;
    for (int d = 0; d < p->rank; d++) {
        int64_t s = st[d] < 0 ? -st[d] : st[d];
        if (s > INT32_MAX || p->dims[d] - 1 > INT32_MAX) return 0;
        m += (p->dims[d] - 1) * s;
        if (m > INT32_MAX) return 0;
    }
    return 1;
}

template <typename T>
static void launch_strided(HkcCtx *c, const StridedPlan *p, int64_t n) {
    const T *src = (const T *)p->src;
    T *dst = (T *)p->dst;
    int in = p->rank - 1;
    /* transpose: the destination's innermost dim is not the source's */
    if (p->rank >= 2 && p->ds[in] == 1 && p->ss[in] != 1 && p->dims[in] >= 16) {
        int b = -1;
        for (int d = 0; d < in; d++)
            if (p->ss[d] == 1 && p->dims[d] >= 16) b = d;
        int64_t ty = (p->dims[b < 0 ? 0 : b] + HKC_TILE - 1) / HKC_TILE;
        if (b >= 0 && ty <= 65535) {
            HkcShape rest;
            HkcStrides rs, rd;
            rest.rank = 0;
            int64_t nrest = 1;
            for (int d = 0; d < in; d++) {
                if (d == b) continue;
                rest.dims[rest.rank] = p->dims[d];
                rs.s[rest.rank] = p->ss[d];
                rd.s[rest.rank] = p->ds[d];
                rest.rank++;
                nrest *= p->dims[d];
            }
            dim3 g((unsigned)((p->dims[in] + HKC_TILE - 1) / HKC_TILE), (unsigned)ty,
                   (unsigned)(nrest < 65535 ? nrest : 65535));
            k_transpose_tiled<T><<<g, dim3(HKC_TILE, HKC_TILE_ROWS), 0, c->stream>>>(
                src, dst, p->dims[in], p->dims[b], p->ss[in], p->ds[b], rest, rs, rd, nrest);
            return;
        }
    }
    if (n <= INT32_MAX && fits_int32(p, p->ss) && fits_int32(p, p->ds)) {
        HkcWalk32 w;
        w.rank = p->rank;
        for (int d = 0; d < p->rank; d++) {
            w.dims[d] = (uint32_t)p->dims[d];
            w.ss[d] = (int32_t)p->ss[d];
            w.ds[d] = (int32_t)p->ds[d];
        }
        k_strided32<T><<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(w, src, dst, (uint32_t)n);
        return;
    }
    HkcShape sh;
    HkcStrides ss, ds;
    sh.rank = p->rank;
    for (int d = 0; d < p->rank; d++) {
        sh.dims[d] = p->dims[d];
        ss.s[d] = p->ss[d];
        ds.s[d] = p->ds[d];
    }
    k_strided<T><<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(sh, src, ss, dst, ds, n);
}

extern "C" int hkc_strided_copy(HkcCtx *c, size_t esize, HkcShape shape, const void *src,
                                int64_t src_off, HkcStrides src_strides, void *dst,
                                int64_t dst_off, HkcStrides dst_strides, char *err) {
    int64_t n = hkc_numel(shape);
    if (n == 0) return 0;
    if (esize != 1 && esize != 2 && esize != 4 && esize != 8)
        return hkc_fail(err, "hkc_strided_copy: element size must be 1, 2, 4 or 8");
    StridedPlan p;
    strided_plan(&p, esize, shape, (const char *)src + src_off * (int64_t)esize, src_strides,
                 (char *)dst + dst_off * (int64_t)esize, dst_strides);
    n = 1;
    for (int d = 0; d < p.rank; d++) n *= p.dims[d];
    switch (p.esize) {
    case 1: launch_strided<uint8_t>(c, &p, n); break;
    case 2: launch_strided<uint16_t>(c, &p, n); break;
    case 4: launch_strided<uint32_t>(c, &p, n); break;
    case 8: launch_strided<uint64_t>(c, &p, n); break;
    default: launch_strided<HkcV16>(c, &p, n); break;
    }
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
