/* Backward of MatMul and Linear through cblas_sgemm. */
#include "hk_sgemm.h"
#include <stdio.h>
#include <string.h>

#include "hk_parallel.h"
#include "hk_train.h"
#include "hk_vmath.h"

static int bad(char *err, const char *msg)
{
    if (err)
        snprintf(err, HK_ERRLEN, "%s", msg);
    return -1;
}

/* The four transpose cases, with A stored as a (MxK or KxM) and B as b:
 *   C = A B      dA = dC B^T            dB = A^T dC
 *   C = A^T B    dA(KxM) = B dC^T       dB = A dC
 *   C = A B^T    dA = dC B              dB(NxK) = dC^T A
 *   C = A^T B^T  dA(KxM) = B^T dC^T     dB(NxK) = dC^T A^T
 * so every gradient is one sgemm with the right transposes and leading
 * dimensions; beta = 1 accumulates (shared operands, accum). */
static void grad_a(const float *b, const float *dc, int64_t M, int64_t N, int64_t K, int ta,
                   int tb, float beta, float *da)
{
    int ldb = tb ? (int)K : (int)N;
    if (!ta) /* da[M,K] = dC[M,N] op(B)^T[N,K] */
        hk_sgemm(0, !tb, M, K, N, 1.0f, dc, N, b, ldb, beta, da, K);
    else /* da[K,M] = op(B)[K,N] dC^T[N,M] */
        hk_sgemm(tb, 1, K, M, N, 1.0f, b, ldb, dc, N, beta, da, M);
}

static void grad_b(const float *a, const float *dc, int64_t M, int64_t N, int64_t K, int ta,
                   int tb, float beta, float *db)
{
    int lda = ta ? (int)M : (int)K;
    if (!tb) /* db[K,N] = op(A)^T[K,M] dC[M,N] */
        hk_sgemm(!ta, 0, K, N, M, 1.0f, a, lda, dc, N, beta, db, N);
    else /* db[N,K] = dC^T[N,M] op(A)[M,K] */
        hk_sgemm(1, ta, N, K, M, 1.0f, dc, N, a, lda, beta, db, K);
}

int hk_matmul_backward_f32(const float *a, const float *b, const float *dc, int64_t batch,
                           int64_t M, int64_t N, int64_t K, int ta, int tb, int a_shared,
                           int b_shared, float *da, float *db, int accum, char *err)
{
    if (batch < 0 || M < 0 || N < 0 || K < 0)
        return bad(err, "matmul backward: negative dimension");
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return bad(err, "matmul backward: dimension exceeds BLAS int range");
    int64_t sa = a_shared ? 0 : M * K, sb = b_shared ? 0 : K * N, sc = M * N;
    if (M == 0 || N == 0 || K == 0) {
        /* A zero-sized reduction (M, N or batch empty) still defines the
         * gradient: zero, unless accumulating. */
        if (da && !accum)
            memset(da, 0, sizeof(float) * (size_t)((a_shared ? 1 : batch) * M * K));
        if (db && !accum)
            memset(db, 0, sizeof(float) * (size_t)((b_shared ? 1 : batch) * K * N));
        return 0;
    }
    /* beta 0 where a gradient starts (not accumulating; the first batch
     * entry of a shared operand's sum): the sgemm zeroes its own blocks of
     * the output, in parallel, where a memset of the whole output on this
     * thread used to precede a beta-1 sgemm -- the same sums onto a zeroed
     * output, so the same bits */
    for (int64_t i = 0; i < batch; i++) {
        if (da)
            grad_a(b + i * sb, dc + i * sc, M, N, K, ta, tb,
                   accum || (a_shared && i > 0) ? 1.0f : 0.0f, da + i * sa);
        if (db)
            grad_b(a + i * sa, dc + i * sc, M, N, K, ta, tb,
                   accum || (b_shared && i > 0) ? 1.0f : 0.0f, db + i * sb);
    }
    return 0;
}

/* dbias[j] = sum over rows i of dy[i, j], each column summed in row order
 * in double (as the column-at-a-time loop did, so the bits are the same),
 * but a block of DBIAS_COLS columns at a time walking the rows: contiguous
 * reads instead of a stride-N walk per column, and the blocks split across
 * the kernel pool (each column belongs to one block). */
#define DBIAS_COLS 64
typedef struct DbiasJob {
    const float *dy;
    int64_t M, N;
    float *db;
    int accum;
} DbiasJob;

HK_VECTOR_CLONES /* the columns' double adds in vector lanes (the same bits) */
static void dbias_blocks(void *vctx, int64_t b0, int64_t b1) {
    const DbiasJob *j = vctx;
    for (int64_t b = b0; b < b1; b++) {
        int64_t c0 = b * DBIAS_COLS, nc = j->N - c0 < DBIAS_COLS ? j->N - c0 : DBIAS_COLS;
        double acc[DBIAS_COLS] = {0};
        for (int64_t i = 0; i < j->M; i++) {
            const float *row = j->dy + i * j->N + c0;
            for (int64_t c = 0; c < nc; c++) acc[c] += row[c];
        }
        for (int64_t c = 0; c < nc; c++)
            j->db[c0 + c] = (float)(j->accum ? j->db[c0 + c] + acc[c] : acc[c]);
    }
}

int hk_linear_backward_f32(const float *x, const float *w, const float *dy, int64_t M,
                           int64_t K, int64_t N, float *dx, float *dw, float *dbias, int accum,
                           char *err)
{
    /* x is a [M,K] matrix times the shared weight: dx overwritten, dw
     * summed over all M rows in one gemm. */
    if (dx && hk_matmul_backward_f32(x, w, dy, 1, M, N, K, 0, 0, 0, 0, dx, NULL, 0, err))
        return -1;
    if (dw && hk_matmul_backward_f32(x, w, dy, 1, M, N, K, 0, 0, 0, 0, NULL, dw, accum, err))
        return -1;
    if (dbias) {
        DbiasJob job = {dy, M, N, dbias, accum};
        int64_t nblk = (N + DBIAS_COLS - 1) / DBIAS_COLS;
        int64_t grain = M * DBIAS_COLS >= 16384 ? 1 : 16384 / (M * DBIAS_COLS + 1) + 1;
        hk_parallel_for(nblk, grain, dbias_blocks, &job);
    }
    return 0;
}
