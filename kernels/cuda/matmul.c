/* Matmul family, device side.  Host twin: kernels/host/hk_matmul.c and
 * train_matmul.c (the host computes through cblas_sgemm, this through
 * cuBLASLt).  C, not CUDA: no kernel of its own, only library calls.
 *
 * Matmuls through cuBLASLt (fp32 storage, fp32 compute), and the context
 * every hkc_* call runs on.  Row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T, so A and B swap places in the cuBLASLt call. */
#include <stdio.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "hkc.h"

#define HKC_WORKSPACE (32u << 20) /* cuBLASLt's recommended size for Hopper */

static int fail(char *err, const char *what, int st) {
    if (err) snprintf(err, HKC_ERRLEN, "%s failed (status %d)", what, st);
    return -1;
}

int hkc_ctx_init(HkcCtx *c, char *err) {
    memset(c, 0, sizeof *c);
    cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        if (err) snprintf(err, HKC_ERRLEN, "cudaStreamCreate: %s", cudaGetErrorString(e));
        return -1;
    }
    cublasLtHandle_t h;
    cublasStatus_t st = cublasLtCreate(&h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        hkc_ctx_free(c);
        return fail(err, "cublasLtCreate", (int)st);
    }
    c->lt = h;
    if ((e = cudaMalloc(&c->workspace, HKC_WORKSPACE)) != cudaSuccess) {
        c->workspace = NULL;
        hkc_ctx_free(c);
        if (err) snprintf(err, HKC_ERRLEN, "cuBLASLt workspace: %s", cudaGetErrorString(e));
        return -1;
    }
    c->workspace_bytes = HKC_WORKSPACE;
    return 0;
}

void hkc_ctx_free(HkcCtx *c) {
    if (c->workspace) cudaFree(c->workspace);
    if (c->lt) cublasLtDestroy((cublasLtHandle_t)c->lt);
    if (c->stream) cudaStreamDestroy(c->stream);
    memset(c, 0, sizeof *c);
}

/* Column-major layout of a rows x cols matrix (ld = rows), batched. */
static cublasStatus_t layout(cublasLtMatrixLayout_t *l, int64_t rows, int64_t cols,
                             int64_t batch, int64_t stride) {
    cublasStatus_t st = cublasLtMatrixLayoutCreate(l, CUDA_R_32F, (uint64_t)rows,
                                                   (uint64_t)cols, rows);
    if (st != CUBLAS_STATUS_SUCCESS || batch <= 1) return st;
    int32_t b = (int32_t)batch;
    st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    return cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &stride, sizeof stride);
}

/* Largest power of two <= 256 dividing the address and every batch offset:
 * cuBLASLt's heuristics otherwise assume 256-byte aligned operands, and
 * arena buffers are only 64-byte aligned (memplan), batch strides less. */
static uint32_t align_of(const void *p, int64_t stride_elems, int64_t batch) {
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (batch > 1) a |= (uint64_t)stride_elems * sizeof(float);
    uint32_t al = 256;
    while (al > 4 && (a & (al - 1))) al >>= 1;
    return al;
}

int hkc_gemm_f32(HkcCtx *c, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t strideA, const float *B, int64_t strideB, float beta,
                 float *C, int64_t strideC, int64_t batch, char *err) {
    if (M == 0 || N == 0 || batch == 0) return 0;
    if (K == 0) { /* C = beta C: cuBLASLt rejects empty inner dims */
        if (beta != 0.f) return fail(err, "hkc_gemm_f32: K = 0 with beta != 0", 0);
        for (int64_t b = 0; b < batch; b++)
            if (cudaMemsetAsync(C + b * strideC, 0, (size_t)(M * N) * sizeof(float), c->stream))
                return fail(err, "cudaMemsetAsync", 0);
        return 0;
    }
    if (batch > INT32_MAX) return fail(err, "hkc_gemm_f32: batch too large", 0);
    /* column-major: C^T[N,M] = op(B)^T[N,K] op(A)^T[K,M] */
    cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDesc_t d = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasStatus_t st = cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const char *what = "cublasLtMatmulDescCreate";
    if (st == CUBLAS_STATUS_SUCCESS) {
        what = "cublasLtMatmulDescSetAttribute";
        st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof opB);
    }
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof opA);
    /* first operand: B as stored (row-major [K,N] = col-major [N,K], or [N,K] -> [K,N]) */
    if (st == CUBLAS_STATUS_SUCCESS) {
        what = "cublasLtMatrixLayoutCreate";
        st = tb ? layout(&lb, K, N, batch, strideB) : layout(&lb, N, K, batch, strideB);
    }
    if (st == CUBLAS_STATUS_SUCCESS)
        st = ta ? layout(&la, M, K, batch, strideA) : layout(&la, K, M, batch, strideA);
    if (st == CUBLAS_STATUS_SUCCESS) st = layout(&lc, N, M, batch, strideC);
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
        what = "cublasLtMatmulPreference";
        st = cublasLtMatmulPreferenceCreate(&pref);
    }
    if (st == CUBLAS_STATUS_SUCCESS) {
        uint64_t ws = c->workspace_bytes;
        uint32_t al[3] = {align_of(B, strideB, batch), align_of(A, strideA, batch),
                          align_of(C, strideC, batch)};
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof ws);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2]);
    }
    if (st == CUBLAS_STATUS_SUCCESS) {
        what = "cublasLtMatmulAlgoGetHeuristic";
        st = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, d, lb, la, lc, lc, pref, 1,
                                            &h, &found);
        if (st == CUBLAS_STATUS_SUCCESS && found < 1) st = CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (st == CUBLAS_STATUS_SUCCESS) {
        what = "cublasLtMatmul";
        st = cublasLtMatmul((cublasLtHandle_t)c->lt, d, &alpha, B, lb, A, la, &beta, C, lc, C,
                            lc, &h.algo, c->workspace, c->workspace_bytes, c->stream);
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (d) cublasLtMatmulDescDestroy(d);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : fail(err, what, (int)st);
}
