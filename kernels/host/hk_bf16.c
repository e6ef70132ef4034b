/* bf16 GEMM entries (hk_bf16.h): widen the operands to f32 in scratch,
 * run the f32 kernel, round the result once. */
#include "hk_bf16.h"

#include <stdio.h>

#include "hk.h"
#include "hk_parallel.h"
#include "hk_vmath.h"
#include "hk_train.h"
#include "hk_ws.h"

/* Both conversions on the kernel pool, in vector clones: each element's
 * bits depend on that element only, so any split gives the same bytes.
 * Serial and in the generic SSE2 build they were 14 % of a bf16-mixed
 * gpt_tiny step (the GEMM operands widened, the outputs and Casts rounded)
 * while the second core waited. */
typedef struct CvtJob {
    const void *x;
    void *y;
} CvtJob;

HK_VECTOR_CLONES
static void expand_span(void *vj, int64_t i0, int64_t i1) {
    const CvtJob *j = vj;
    const uint16_t *x = j->x;
    float *y = j->y;
    for (int64_t i = i0; i < i1; i++) y[i] = hk_bf16_to_f32(x[i]);
}

HK_VECTOR_CLONES
static void round_span(void *vj, int64_t i0, int64_t i1) {
    const CvtJob *j = vj;
    const float *x = j->x;
    uint16_t *y = j->y;
    for (int64_t i = i0; i < i1; i++) y[i] = hk_f32_to_bf16(x[i]);
}

void hk_bf16_expand(const uint16_t *x, float *y, int64_t n) {
    CvtJob j = {x, y};
    hk_parallel_for(n, 1 << 15, expand_span, &j);
}

void hk_bf16_round(const float *x, uint16_t *y, int64_t n) {
    CvtJob j = {x, y};
    hk_parallel_for(n, 1 << 15, round_span, &j);
}

typedef struct SrJob {
    const float *x;
    uint16_t *y;
    uint32_t seed;
} SrJob;

HK_VECTOR_CLONES
static void sr_span(void *vj, int64_t i0, int64_t i1) {
    const SrJob *j = vj;
    for (int64_t i = i0; i < i1; i++)
        j->y[i] = hk_f32_to_bf16_sr(j->x[i], hk_sr_threshold(j->seed, i));
}

void hk_bf16_round_sr(const float *x, uint16_t *y, int64_t n, int64_t key, int64_t step) {
    SrJob j = {x, y, hk_sr_seed(key, step)};
    hk_parallel_for(n, 1 << 15, sr_span, &j);
}

/* Scratch for `n` f32 arrays of the given lengths, carved from one hk_ws
 * buffer (64-byte aligned parts). */
static float *carve(const int64_t *len, int n, float **part) {
    size_t off[8], tot = 0;
    for (int i = 0; i < n; i++) {
        off[i] = tot;
        tot += ((size_t)len[i] * sizeof(float) + 63) / 64 * 64;
    }
    float *base = hk_ws(HK_WS_BF16, tot ? tot : 64);
    if (!base) return NULL;
    for (int i = 0; i < n; i++) part[i] = (float *)((char *)base + off[i]);
    return base;
}

void hk_linear_bf16(const uint16_t *x, const uint16_t *w, const uint16_t *bias, int64_t M,
                    int64_t K, int64_t N, uint16_t *y) {
    int64_t len[4] = {M * K, K * N, bias ? N : 0, M * N};
    float *p[4];
    if (!carve(len, 4, p)) {
        for (int64_t i = 0; i < M * N; i++) y[i] = 0x7fc0; /* NaN: out of memory shows */
        return;
    }
    hk_bf16_expand(x, p[0], len[0]);
    hk_bf16_expand(w, p[1], len[1]);
    if (bias) hk_bf16_expand(bias, p[2], N);
    hk_linear_f32(p[0], p[1], bias ? p[2] : NULL, M, K, N, p[3]);
    hk_bf16_round(p[3], y, len[3]);
}

int hk_linear_backward_bf16(const uint16_t *x, const uint16_t *w, const uint16_t *dy,
                            int64_t M, int64_t K, int64_t N, uint16_t *dx, float *dw,
                            float *dbias, int accum, char *err) {
    int64_t len[4] = {M * K, K * N, M * N, dx ? M * K : 0};
    float *p[4];
    if (!carve(len, 4, p)) {
        if (err) snprintf(err, HK_ERRLEN, "out of memory for the bf16 Linear gradient's scratch");
        return -1;
    }
    hk_bf16_expand(x, p[0], len[0]);
    hk_bf16_expand(w, p[1], len[1]);
    hk_bf16_expand(dy, p[2], len[2]);
    if (hk_linear_backward_f32(p[0], p[1], p[2], M, K, N, dx ? p[3] : NULL, dw, dbias, accum,
                               err))
        return -1;
    if (dx) hk_bf16_round(p[3], dx, len[3]);
    return 0;
}
