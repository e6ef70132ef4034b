/* bf16 (bfloat16: the top 16 bits of an IEEE f32 -- 8 exponent bits, 7
 * mantissa bits) conversions and the bf16 GEMM entries of mixed precision
 * (issue 17; docs/TRAINING.md "Mixed precision").
 *
 * Rounding f32 -> bf16 is round-to-nearest-even on the dropped 16 bits
 * (NaN stays a quiet NaN, overflow rounds to inf), as torch's
 * c10::BFloat16 and llm.c round; bf16 -> f32 is exact.  Every f32 -> bf16
 * rounding in hetc goes through hk_f32_to_bf16 (Cast, the GEMM outputs). */
#ifndef HETC_HK_BF16_H
#define HETC_HK_BF16_H

#include <stdint.h>
#include <string.h>

#include "hk_sr.h"

static inline float hk_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t hk_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fff + ((x >> 16) & 1); /* round to nearest even */
    return (uint16_t)(x >> 16);
}

/* n elements each way */
void hk_bf16_expand(const uint16_t *x, float *y, int64_t n);
void hk_bf16_round(const float *x, uint16_t *y, int64_t n);

/* y[i] = hk_f32_to_bf16_sr(x[i], hk_sr_threshold(hk_sr_seed(key, step), i)):
 * split across the kernel pool (each element's bits depend on its index
 * only, so the result does not depend on the threads) */
void hk_bf16_round_sr(const float *x, uint16_t *y, int64_t n, int64_t key, int64_t step);

/* The IR's Linear with bf16 operands: y[M,N] = bf16(x[M,K] w[K,N] + bias[N]),
 * the products summed in f32 (the operands widened exactly, OpenBLAS sgemm:
 * the "converted fp32 GEMM" of issue 17; no avx512_bf16 here, so
 * cblas_sbgemm would be OpenBLAS's generic C loop), one rounding at the end.
 * bias may be NULL.  Scratch: hk_ws slot HK_WS_BF16. */
void hk_linear_bf16(const uint16_t *x, const uint16_t *w, const uint16_t *bias, int64_t M,
                    int64_t K, int64_t N, uint16_t *y);
/* Its gradients, summed in f32: dx = dy w^T rounded once to bf16; the
 * parameter gradients dw = x^T dy and dbias = sum_rows dy stay f32 (fp32
 * gradient accumulation, Megatron's default; accum adds to them).  Any of
 * dx, dw, dbias may be NULL. */
int hk_linear_backward_bf16(const uint16_t *x, const uint16_t *w, const uint16_t *dy,
                            int64_t M, int64_t K, int64_t N, uint16_t *dx, float *dw,
                            float *dbias, int accum, char *err);

#endif
