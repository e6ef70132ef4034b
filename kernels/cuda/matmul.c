/* Matmul family, device side.  Host twin: kernels/host/hk_matmul.c and
 * train_matmul.c (the host computes through cblas_sgemm, this through
 * cuBLASLt).  C, not CUDA: no kernel of its own, only library calls.
 *
 * Matmuls through cuBLASLt (fp32 storage, fp32 compute; or bf16 operands
 * with fp32 compute for --precision bf16-mixed: GemmKey.dt), and the
 * context every hkc_* call runs on.  Row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T, so A and B swap places in the cuBLASLt call. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "hkc.h"

#define HKC_WORKSPACE (32u << 20) /* cuBLASLt's recommended size for Hopper */

static void cache_free(HkcCtx *c);

static int fail(char *err, const char *what, int st) {
    if (err) snprintf(err, HKC_ERRLEN, "%s failed (status %d)", what, st);
    return -1;
}

/* A GEMM's cuBLASLt objects, built once per distinct call shape and kept
 * in the context: descriptor, layouts and the heuristic's algorithm.
 * The first version created all of them and asked the heuristic on every
 * call, host work that the GPU waits on when kernels are short; a training
 * step repeats the same few dozen shapes hundreds of times. */
/* GemmKey.dt: the operand types.  bf16 GEMMs accumulate in fp32 (compute
 * and scale type 32F, as hk_linear_bf16 sums in f32) and round once when
 * D is bf16. */
enum { DT_F32, DT_BF16, DT_BF16_F32OUT }; /* all f32 | A, B, C, bias bf16 | A, B bf16, C f32 */

typedef struct GemmKey {
    int ta, tb, bias, dt;
    int64_t M, N, K, sa, sb, sc, batch;
    uint32_t al[3];
} GemmKey;

typedef struct GemmPlan {
    GemmKey key;
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} GemmPlan;

#define HKC_GEMM_PLANS 256 /* distinct shapes kept; beyond, plans are built per call */

typedef struct GemmCache {
    int n;
    GemmPlan p[HKC_GEMM_PLANS];
} GemmCache;

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
    /* allocated here, not on first use: a borrowed copy of the context
     * (cudaexec_init_on) then shares the owner's cache, which the owner frees */
    if ((c->gemm_plans = calloc(1, sizeof(GemmCache))) == NULL) {
        hkc_ctx_free(c);
        if (err) snprintf(err, HKC_ERRLEN, "cuBLASLt plan cache: out of host memory");
        return -1;
    }
    return 0;
}

void hkc_ctx_free(HkcCtx *c) {
    cache_free(c);
    if (c->workspace) cudaFree(c->workspace);
    if (c->lt) cublasLtDestroy((cublasLtHandle_t)c->lt);
    if (c->stream) cudaStreamDestroy(c->stream);
    memset(c, 0, sizeof *c);
}

/* Column-major layout of a rows x cols matrix (ld = rows), batched. */
static cublasStatus_t layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows,
                             int64_t cols, int64_t batch, int64_t stride) {
    cublasStatus_t st = cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows,
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
static uint32_t align_of(const void *p, int64_t stride_elems, int64_t batch, size_t esize) {
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (batch > 1) a |= (uint64_t)stride_elems * esize;
    uint32_t al = 256;
    while (al > esize && (a & (al - 1))) al >>= 1;
    return al;
}

static void plan_free(GemmPlan *g) {
    if (g->lc) cublasLtMatrixLayoutDestroy(g->lc);
    if (g->la) cublasLtMatrixLayoutDestroy(g->la);
    if (g->lb) cublasLtMatrixLayoutDestroy(g->lb);
    if (g->d) cublasLtMatmulDescDestroy(g->d);
    g->lc = g->la = g->lb = NULL;
    g->d = NULL;
}

static void cache_free(HkcCtx *c) {
    GemmCache *gc = c->gemm_plans;
    if (!gc) return;
    for (int i = 0; i < gc->n; i++) plan_free(&gc->p[i]);
    free(gc);
    c->gemm_plans = NULL;
}

/* Build g for key k; bias (epilogue) plans take the bias pointer per call. */
static cublasStatus_t plan_build(HkcCtx *c, const GemmKey *k, GemmPlan *g, const char **what) {
    memset(g, 0, sizeof *g);
    g->key = *k;
    /* column-major: C^T[N,M] = op(B)^T[N,K] op(A)^T[K,M] */
    cublasOperation_t opB = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                      opA = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    *what = "cublasLtMatmulDescCreate";
    cublasStatus_t st = cublasLtMatmulDescCreate(&g->d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st == CUBLAS_STATUS_SUCCESS) {
        *what = "cublasLtMatmulDescSetAttribute";
        st = cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof opB);
    }
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof opA);
    if (st == CUBLAS_STATUS_SUCCESS && k->bias) {
        /* bias[N] added to every row of C: the rows of column-major C^T */
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = k->dt == DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
        st = cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                sizeof bt);
    }
    /* first operand: B as stored (row-major [K,N] = col-major [N,K], or [N,K] -> [K,N]) */
    cudaDataType_t tab = k->dt == DT_F32 ? CUDA_R_32F : CUDA_R_16BF,
                   tc = k->dt == DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    if (st == CUBLAS_STATUS_SUCCESS) {
        *what = "cublasLtMatrixLayoutCreate";
        st = k->tb ? layout(&g->lb, tab, k->K, k->N, k->batch, k->sb)
                   : layout(&g->lb, tab, k->N, k->K, k->batch, k->sb);
    }
    if (st == CUBLAS_STATUS_SUCCESS)
        st = k->ta ? layout(&g->la, tab, k->M, k->K, k->batch, k->sa)
                   : layout(&g->la, tab, k->K, k->M, k->batch, k->sa);
    if (st == CUBLAS_STATUS_SUCCESS) st = layout(&g->lc, tc, k->N, k->M, k->batch, k->sc);
    cublasLtMatmulPreference_t pref = NULL;
    if (st == CUBLAS_STATUS_SUCCESS) {
        *what = "cublasLtMatmulPreference";
        st = cublasLtMatmulPreferenceCreate(&pref);
    }
    if (st == CUBLAS_STATUS_SUCCESS) {
        uint64_t ws = c->workspace_bytes;
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof ws);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->al[0], sizeof k->al[0]);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->al[1], sizeof k->al[1]);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->al[2], sizeof k->al[2]);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->al[2], sizeof k->al[2]);
    }
    if (st == CUBLAS_STATUS_SUCCESS) {
        *what = "cublasLtMatmulAlgoGetHeuristic";
        cublasLtMatmulHeuristicResult_t h;
        int found = 0;
        st = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, g->d, g->lb, g->la, g->lc,
                                            g->lc, pref, 1, &h, &found);
        if (st == CUBLAS_STATUS_SUCCESS && found < 1) st = CUBLAS_STATUS_NOT_SUPPORTED;
        if (st == CUBLAS_STATUS_SUCCESS) g->algo = h.algo;
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) plan_free(g);
    return st;
}

/* C = alpha op(A) op(B) + beta C (+ bias[N] per row when bias) */
static int gemm(HkcCtx *c, const GemmKey *k, float alpha, const void *A, const void *B,
                const void *bias, float beta, void *C, char *err) {
    GemmCache *gc = c->gemm_plans;
    if (!gc) return fail(err, "hkc_gemm_f32: the context has no plan cache (hkc_ctx_init)", 0);
    GemmPlan *g = NULL, one;
    for (int i = 0; i < gc->n && !g; i++)
        if (!memcmp(&gc->p[i].key, k, sizeof *k)) g = &gc->p[i];
    const char *what = "";
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (!g) {
        g = gc->n < HKC_GEMM_PLANS ? &gc->p[gc->n] : &one;
        st = plan_build(c, k, g, &what);
        if (g != &one) gc->n++; /* a failed build stays as a plan with no descriptor */
        if (st != CUBLAS_STATUS_SUCCESS) return fail(err, what, (int)st);
    }
    if (!g->d) return fail(err, "cuBLASLt (no algorithm for this shape, an earlier call found)",
                           CUBLAS_STATUS_NOT_SUPPORTED);
    if (k->bias) {
        what = "cublasLtMatmulDescSetAttribute (bias)";
        st = cublasLtMatmulDescSetAttribute(g->d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof bias);
    }
    if (st == CUBLAS_STATUS_SUCCESS) {
        what = "cublasLtMatmul";
        st = cublasLtMatmul((cublasLtHandle_t)c->lt, g->d, &alpha, B, g->lb, A, g->la, &beta, C,
                            g->lc, C, g->lc, &g->algo, c->workspace, c->workspace_bytes,
                            c->stream);
    }
    if (g == &one) plan_free(g);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : fail(err, what, (int)st);
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
    GemmKey k;
    memset(&k, 0, sizeof k); /* padding too: keys compare with memcmp */
    k.ta = ta, k.tb = tb, k.M = M, k.N = N, k.K = K, k.batch = batch;
    k.sa = strideA, k.sb = strideB, k.sc = strideC;
    k.al[0] = align_of(B, strideB, batch, 4), k.al[1] = align_of(A, strideA, batch, 4);
    k.al[2] = align_of(C, strideC, batch, 4);
    return gemm(c, &k, alpha, A, B, NULL, beta, C, err);
}

int hkc_linear_bias_f32(HkcCtx *c, int64_t M, int64_t N, int64_t K, const float *A,
                        const float *B, const float *bias, float *C, char *err) {
    if (M == 0 || N == 0) return 0;
    if (K == 0) return hkc_row_broadcast_f32(c, bias, M, N, C, err);
    if ((uintptr_t)bias & 15) { /* the broadcast, then C += A B */
        if (hkc_row_broadcast_f32(c, bias, M, N, C, err)) return -1;
        return hkc_gemm_f32(c, 0, 0, M, N, K, 1.f, A, 0, B, 0, 1.f, C, 0, 1, err);
    }
    GemmKey k;
    memset(&k, 0, sizeof k);
    k.bias = 1, k.M = M, k.N = N, k.K = K, k.batch = 1;
    k.al[0] = align_of(B, 0, 1, 4), k.al[1] = align_of(A, 0, 1, 4), k.al[2] = align_of(C, 0, 1, 4);
    if (!gemm(c, &k, 1.f, A, B, bias, 0.f, C, err)) return 0;
    /* no epilogue algorithm (or its call failed): the two-step form */
    if (hkc_row_broadcast_f32(c, bias, M, N, C, err)) return -1;
    return hkc_gemm_f32(c, 0, 0, M, N, K, 1.f, A, 0, B, 0, 1.f, C, 0, 1, err);
}

/* ------------------------------------------------------------ bf16 (issue 17) */

/* Row-major C[M,N] = op(A) op(B) (+ bias) on bf16 A, B; C bf16 (dt DT_BF16)
 * or f32 (DT_BF16_F32OUT); beta 0 or 1. */
static int gemm_bf16(HkcCtx *c, int dt, int ta, int tb, int64_t M, int64_t N, int64_t K,
                     const uint16_t *A, const uint16_t *B, const uint16_t *bias, float beta,
                     void *C, char *err) {
    GemmKey k;
    memset(&k, 0, sizeof k);
    size_t ce = dt == DT_BF16 ? 2 : 4;
    k.ta = ta, k.tb = tb, k.bias = bias != NULL, k.dt = dt, k.M = M, k.N = N, k.K = K;
    k.batch = 1;
    k.al[0] = align_of(B, 0, 1, 2), k.al[1] = align_of(A, 0, 1, 2), k.al[2] = align_of(C, 0, 1, ce);
    return gemm(c, &k, 1.f, A, B, bias, beta, C, err);
}

int hkc_linear_bf16(HkcCtx *c, int64_t M, int64_t N, int64_t K, const uint16_t *x,
                    const uint16_t *w, const uint16_t *bias, uint16_t *y, char *err) {
    if (M == 0 || N == 0) return 0;
    if (K == 0) return fail(err, "hkc_linear_bf16: K = 0", 0);
    if (!bias) return gemm_bf16(c, DT_BF16, 0, 0, M, N, K, x, w, NULL, 0.f, y, err);
    if (!((uintptr_t)bias & 15) && !gemm_bf16(c, DT_BF16, 0, 0, M, N, K, x, w, bias, 0.f, y, err))
        return 0;
    /* an unaligned bias or no bias-epilogue algorithm: y = bias in every row (bf16 bits, exact),
     * then y = x w + 1 * y summed in f32 and rounded once, as the epilogue */
    HkcShape sh = {2, {M, N}};
    HkcStrides ss = {{0, 1}}, ds = {{N, 1}};
    if (hkc_strided_copy(c, 2, sh, bias, 0, ss, y, 0, ds, err)) return -1;
    return gemm_bf16(c, DT_BF16, 0, 0, M, N, K, x, w, NULL, 1.f, y, err);
}

int hkc_linear_backward_bf16(HkcCtx *c, const uint16_t *x, const uint16_t *w,
                             const uint16_t *dy, int64_t M, int64_t K, int64_t N, uint16_t *dx,
                             float *dw, float *db, char *err) {
    if (M == 0 || N == 0 || K == 0) return fail(err, "hkc_linear_backward_bf16: empty dims", 0);
    if (dx && gemm_bf16(c, DT_BF16, 0, 1, M, K, N, dy, w, NULL, 0.f, dx, err)) return -1;
    if (dw && gemm_bf16(c, DT_BF16_F32OUT, 1, 0, K, N, M, x, dy, NULL, 0.f, dw, err)) return -1;
    if (db && hkc_col_sum_bf16(c, dy, M, N, db, err)) return -1;
    return 0;
}
