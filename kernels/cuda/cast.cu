/* Dtype conversion, device side.  Host twin: kernels/host/hk_cast.c. */
#include "hkc_internal.cuh"
#include "hk_sr.h"

/* dtype codes: HkDType (1 f32, 2 u8, 6 i32, 7 i64, 9 bool, 11 f64, 16 bf16). */
__device__ static inline double load_any(int t, const void *p, int64_t i) {
    switch (t) {
    case 1: return ((const float *)p)[i];
    case 2: case 9: return ((const uint8_t *)p)[i];
    case 6: return ((const int32_t *)p)[i];
    case 7: return (double)((const int64_t *)p)[i];
    case 11: return ((const double *)p)[i];
    case 16: return hkc_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0;
    }
}

/* Integer targets read their source exactly (i64 -> i32 must not pass through double). */
__global__ static void k_cast(int from, const void *x, int to, void *y, int64_t n) {
    HKC_LOOP(i, n) {
        if (from == 7 && to == 6) {
            ((int32_t *)y)[i] = (int32_t)((const int64_t *)x)[i];
            continue;
        }
        if (from == 6 && to == 7) { ((int64_t *)y)[i] = ((const int32_t *)x)[i]; continue; }
        if (from == 7 && to == 7) { ((int64_t *)y)[i] = ((const int64_t *)x)[i]; continue; }
        if (to == 16 && from == 1) { /* one rounding, from the f32 itself (no double) */
            ((uint16_t *)y)[i] = hkc_f32_to_bf16(((const float *)x)[i]);
            continue;
        }
        double v = load_any(from, x, i);
        switch (to) {
        case 1: ((float *)y)[i] = (float)v; break;
        case 2: ((uint8_t *)y)[i] = (uint8_t)(int64_t)v; break;
        case 9: ((uint8_t *)y)[i] = v != 0; break;
        case 6: ((int32_t *)y)[i] = (int32_t)v; break;
        case 7: ((int64_t *)y)[i] = (int64_t)v; break;
        case 11: ((double *)y)[i] = v; break;
        case 16: ((uint16_t *)y)[i] = hkc_f32_to_bf16((float)v); break;
        }
    }
}

extern "C" int hkc_cast(HkcCtx *c, int from, const void *x, int to, void *y, int64_t n,
                        char *err) {
    const int ok[] = {1, 2, 6, 7, 9, 11, 16};
    int fa = 0, ta = 0;
    for (int i = 0; i < 7; i++) fa |= ok[i] == from, ta |= ok[i] == to;
    if (!fa || !ta) return hkc_fail(err, "hkc_cast: dtype not supported on the device");
    if (n == 0) return 0;
    k_cast<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(from, x, to, y, n);
    return hkc_launched("cast", err);
}

/* --bf16-rounding stochastic: a weight's bf16 copy (kernels/host/hk_sr.h) */
__global__ static void k_round_sr(const float *x, uint16_t *y, int64_t n, uint32_t seed) {
    HKC_LOOP(i, n) y[i] = hk_f32_to_bf16_sr(x[i], hk_sr_threshold(seed, i));
}

extern "C" int hkc_round_bf16_sr(HkcCtx *c, const float *x, uint16_t *y, int64_t n,
                                 int64_t key, int64_t step, char *err) {
    if (n == 0) return 0;
    k_round_sr<<<hkc_blocks(n), HKC_THREADS, 0, c->stream>>>(x, y, n, hk_sr_seed(key, step));
    return hkc_launched("stochastic rounding", err);
}
