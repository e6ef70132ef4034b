/* Matrix products on OpenBLAS (split across the kernel pool by hk_sgemm),
 * plus the fused attention reference. */
#include "hk.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk_parallel.h"
#include "hk_sgemm.h"
#include "hk_vmath.h"
#include "hk_ws.h"

/* One [M,K] x [K,N] product; BLAS for floats, loops for integers. */
static void mm(HkDType dt, const void *a, const void *b, void *y, int64_t M, int64_t K,
               int64_t N) {
    size_t es = hk_dtype_size(dt);
    if (K == 0 || M == 0 || N == 0) {
        memset(y, 0, (size_t)(M * N) * es);
        return;
    }
    switch (dt) {
    case HK_F32:
        hk_sgemm(0, 0, M, N, K, 1.0f, a, K, b, N, 0.0f, y, N);
        return;
    case HK_F64:
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0, a,
                    (int)K, b, (int)N, 0.0, y, (int)N);
        return;
#define IMM(T)                                                                  \
    {                                                                           \
        const T *A = a, *B = b;                                                 \
        T *Y = y;                                                               \
        for (int64_t i = 0; i < M; i++)                                         \
            for (int64_t j = 0; j < N; j++) {                                   \
                uint64_t s = 0; /* wraps like the fixed-width result would */   \
                for (int64_t k = 0; k < K; k++)                                 \
                    s += (uint64_t)(int64_t)A[i * K + k] * (uint64_t)(int64_t)B[k * N + j]; \
                Y[i * N + j] = (T)s;                                            \
            }                                                                   \
        return;                                                                 \
    }
    case HK_I32: IMM(int32_t)
    case HK_I64: IMM(int64_t)
    case HK_U32: IMM(uint32_t)
    case HK_U64: IMM(uint64_t)
#undef IMM
    default: return;
    }
}

int hk_matmul(HkDType dt, const void *a, int ra, const int64_t *da, const void *b, int rb,
              const int64_t *db, void *y, int ry, const int64_t *dy, char *err) {
    if (dt != HK_F32 && dt != HK_F64 && dt != HK_I32 && dt != HK_I64 && dt != HK_U32 &&
        dt != HK_U64) {
        if (err) snprintf(err, HK_ERRLEN, "MatMul does not support dtype %d", (int)dt);
        return -1;
    }
    if (ra < 1 || rb < 1) {
        if (err) snprintf(err, HK_ERRLEN, "MatMul operands must have rank >= 1");
        return -1;
    }
    int64_t M = ra == 1 ? 1 : da[ra - 2], K = da[ra - 1];
    int64_t Kb = rb == 1 ? db[0] : db[rb - 2], N = rb == 1 ? 1 : db[rb - 1];
    if (K != Kb) {
        if (err) snprintf(err, HK_ERRLEN, "MatMul inner dims differ (%lld vs %lld)", (long long)K,
                          (long long)Kb);
        return -1;
    }
    int rab = ra > 2 ? ra - 2 : 0, rbb = rb > 2 ? rb - 2 : 0, rob;
    int64_t ob[HK_MAX_RANK];
    if (hk_bcast_shape(rab, da, rbb, db, &rob, ob)) {
        if (err) snprintf(err, HK_ERRLEN, "MatMul batch dims do not broadcast");
        return -1;
    }
    int64_t batch = hk_numel(rob, ob);
    if (hk_numel(ry, dy) != batch * M * N) {
        if (err) snprintf(err, HK_ERRLEN, "MatMul output shape does not match its operands");
        return -1;
    }
    int64_t s[3][HK_MAX_RANK];
    hk_contig_strides(rob, ob, s[0]);
    hk_bcast_strides(rab, da, rob, ob, s[1]);
    hk_bcast_strides(rbb, db, rob, ob, s[2]);
    HkIter it;
    hk_iter_init(&it, rob, ob, 3, (const int64_t(*)[HK_MAX_RANK])s, NULL);
    size_t es = hk_dtype_size(dt);
    int64_t off[3];
    while (hk_iter_next(&it, off))
        for (int64_t i = 0; i < it.n; i++)
            mm(dt, (const char *)a + (size_t)((off[1] + i * it.inner[1]) * M * K) * es,
               (const char *)b + (size_t)((off[2] + i * it.inner[2]) * K * N) * es,
               (char *)y + (size_t)((off[0] + i) * M * N) * es, M, K, N);
    return 0;
}

int hk_gemm_f32(const float *a, const float *b, const float *c, int rc, const int64_t *dc,
                int64_t M, int64_t N, int64_t K, int ta, int tb, float alpha, float beta,
                float *y, char *err) {
    int64_t od[2] = {M, N};
    if (c && beta != 0.0f) {
        if (hk_expand(4, c, rc, dc, y, 2, od, err)) return -1;
    } else {
        memset(y, 0, (size_t)(M * N) * sizeof *y);
        beta = 0.0f;
    }
    if (M == 0 || N == 0 || K == 0) {
        for (int64_t i = 0; i < M * N; i++) y[i] *= beta;
        return 0;
    }
    hk_sgemm(ta, tb, M, N, K, alpha, a, (ta ? M : K), b, (tb ? K : N), beta, y, N);
    return 0;
}

typedef struct BiasJob {
    const float *bias;
    float *y;
    int64_t N;
} BiasJob;

HK_VECTOR_CLONES
static void bias_rows(void *vj, int64_t r0, int64_t r1) {
    const BiasJob *j = vj;
    const float *restrict b = j->bias;
    for (int64_t i = r0; i < r1; i++) {
        float *restrict yr = j->y + i * j->N;
        for (int64_t c = 0; c < j->N; c++) yr[c] += b[c];
    }
}

void hk_linear_f32(const float *x, const float *w, const float *bias, int64_t M, int64_t K,
                   int64_t N, float *y) {
    mm(HK_F32, x, w, y, M, K, N);
    if (bias && N > 0) { /* rows on the kernel pool: one add per element, the same bits */
        BiasJob j = {bias, y, N};
        hk_parallel_for(M, hk_row_grain(N), bias_rows, &j);
    }
}

/* One head at a time per pool chunk (heads are independent: each output
 * row belongs to one head, so the result does not depend on the threads);
 * the [T,S] score rows are the running thread's part of the caller's
 * scratch (hk_ws, hk_parallel_worker). */
typedef struct AttnJob {
    const float *q, *k, *v;
    int64_t T, S, D, Dv;
    int causal;
    float scale;
    float *y;
    float *scratch; /* hk_parallel_threads() parts of T*S floats */
} AttnJob;

/* One attention row's P (hk.h): hk_vmath.h's float exp (hk_exp_f, within
 * an ulp, 16 AVX-512 lanes; libm's, one call per element, was ~7 % of a
 * gpt_tiny step, and double lanes half the width), summed in double in
 * hk_vmath.h's 8 lanes (hk_lanes_add_f32, as hk_sum_expf_f32_lanes; one
 * dependent add per element was the row's time), one
 * rounding of e / sum per element.  Rows up to HK_ATTN_ROW_BUF keys keep
 * their exps in a buffer, longer ones compute them twice; the same sum
 * either way, so each row's bits depend only on the row. */
#define HK_ATTN_ROW_BUF 512
HK_VECTOR_CLONES
void hk_attn_softmax_row(float *row, int64_t lim, int64_t S) {
    float m = hk_max_f32(row, lim);
    if (lim <= HK_ATTN_ROW_BUF) {
        float e[HK_ATTN_ROW_BUF];
        double acc[HK_SUMEXP_LANES] = {0};
        for (int64_t c = 0; c < lim; c++) e[c] = hk_exp_f(row[c] - m);
        hk_lanes_add_f32(acc, e, lim);
        double sum = hk_lanes_total(acc);
        for (int64_t c = 0; c < lim; c++) row[c] = (float)((double)e[c] / sum);
    } else {
        double sum = hk_sum_expf_f32_lanes(row, lim, m);
        for (int64_t c = 0; c < lim; c++) row[c] = (float)((double)hk_exp_f(row[c] - m) / sum);
    }
    for (int64_t c = lim > 0 ? lim : 0; c < S; c++) row[c] = 0.0f;
}

static void attn_heads(void *vctx, int64_t h0, int64_t h1) {
    AttnJob *j = vctx;
    int64_t T = j->T, S = j->S, D = j->D, Dv = j->Dv;
    float *p = j->scratch + (size_t)hk_parallel_worker() * (size_t)(T * (S ? S : 1));
    for (int64_t bi = h0; bi < h1; bi++) {
        const float *qb = j->q + bi * T * D, *kb = j->k + bi * S * D, *vb = j->v + bi * S * Dv;
        float *yb = j->y + bi * T * Dv;
        if (S > 0 && D > 0)
            hk_sgemm(0, 1, T, S, D, j->scale, qb, D, kb, D, 0.0f, p, S);
        else memset(p, 0, (size_t)(T * S) * sizeof *p);
        for (int64_t i = 0; i < T; i++) {
            float *row = p + i * S;
            /* keys visible to query i: all, or j <= i + (S - T) */
            int64_t lim = j->causal ? i + (S - T) + 1 : S;
            if (lim > S) lim = S;
            if (lim < 0) lim = 0;
            hk_attn_softmax_row(row, lim, S);
        }
        if (S > 0)
            hk_sgemm(0, 0, T, Dv, S, 1.0f, p, S, vb, Dv, 0.0f, yb, Dv);
        else memset(yb, 0, (size_t)(T * Dv) * sizeof *yb);
    }
}

int hk_attention_f32(const float *q, const float *k, const float *v, int64_t batch, int64_t T,
                     int64_t S, int64_t D, int64_t Dv, int causal, float scale, float *y,
                     char *err) {
    if (T == 0 || Dv == 0 || batch == 0) return 0;
    AttnJob j = {q, k, v, T, S, D, Dv, causal, scale, y, NULL};
    size_t part = (size_t)(T * (S ? S : 1));
    j.scratch = hk_ws(HK_WS_ATTN, (size_t)hk_parallel_threads() * part * sizeof(float));
    if (!j.scratch) {
        if (err) snprintf(err, HK_ERRLEN, "out of memory for %lldx%lld attention scores",
                          (long long)T, (long long)S);
        return -1;
    }
    hk_parallel_for(batch, 1, attn_heads, &j);
    return 0;
}
