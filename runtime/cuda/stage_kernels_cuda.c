/* Direct kernel calls of --backend=cuda stage programs (issue 15 item 5):
 * the entries codegen/lower_node_cuda.c's table calls with compile-time
 * shapes and arena pointers (device memory), each launching kernels/cuda's
 * hkc_* kernel on the stage's one stream and cuBLASLt handle (the CudaBe's
 * HkcCtx, the same the node interpreter borrows), so direct calls, the
 * hetrt_node calls left for other nodes, copies and collectives stay in
 * program order without any synchronisation.  Like every hetrt_* entry they
 * print why they failed and return nonzero (the generated code then stops
 * the stage naming the call).  Declarations: runtime/abi/stage_abi.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_cuda_internal.h"
#include "stage_kernels_cuda.h"

HkcCtx *cu_kctx(const char *entry) {
    if (!hetrt_stage_rt) {
        rt_log_error("%s called outside hetrt_stage_main", entry);
        return NULL;
    }
    return stage_be_kernel_ctx(hetrt_stage_rt);
}

int32_t cu_done(const char *entry, int rc, const char *err) {
    if (rc) rt_log_error("stage %d: %s: %s", hetrt_stage_rt->cfg.stage, entry, err);
    return rc ? 1 : 0;
}

int cu_direct_binary(HkcCtx *k, int op, int rank, const int64_t *dims, const float *a,
                     const int64_t *sa, const float *b, const int64_t *sb, float *y, char *err) {
    if (rank < 0 || rank > HKC_MAX_RANK) {
        snprintf(err, HKC_ERRLEN, "rank %d outside 0..%d", rank, HKC_MAX_RANK);
        return -1;
    }
    HkcShape o;
    HkcStrides ta, tb;
    memset(&o, 0, sizeof o);
    memset(&ta, 0, sizeof ta);
    memset(&tb, 0, sizeof tb);
    o.rank = rank;
    for (int d = 0; d < rank; d++) o.dims[d] = dims[d], ta.s[d] = sa[d], tb.s[d] = sb[d];
    return hkc_binary_f32(k, op, a, ta, b, tb, y, o, err);
}

/* A device copy of a constant of the program: made once (the first step),
 * found again by the constant's address.  Synchronous: the copy is done
 * before any kernel of the stream reads it. */
const void *cu_const(const char *entry, const void *host, size_t bytes) {
    CudaBe *b = (CudaBe *)hetrt_stage_rt->be;
    for (int i = 0; i < b->nconsts; i++)
        if (b->consts[i].host == host && b->consts[i].bytes >= bytes) return b->consts[i].dev;
    if (b->nconsts == b->capconsts) {
        int cap = b->capconsts ? 2 * b->capconsts : 16;
        CudaConst *m = realloc(b->consts, (size_t)cap * sizeof *m);
        if (!m) {
            rt_log_error("%s: out of memory for the constants' device copies", entry);
            return NULL;
        }
        b->consts = m, b->capconsts = cap;
    }
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, bytes ? bytes : 4);
    if (e == cudaSuccess && bytes) e = cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        rt_log_error("%s: cannot copy a %zu-byte constant to the device: %s", entry, bytes,
                     cudaGetErrorString(e));
        if (d) cudaFree(d);
        return NULL;
    }
    b->consts[b->nconsts++] = (CudaConst){host, d, bytes};
    return d;
}

/* elements a broadcast operand spans: 1 + sum (dims - 1) * strides */
static size_t span_bytes(int rank, const int64_t *dims, const int64_t *st) {
    int64_t last = 0;
    for (int d = 0; d < rank; d++)
        if (dims[d] > 0) last += (dims[d] - 1) * st[d];
    return (size_t)(last + 1) * sizeof(float);
}

int32_t hetrt_cu_binary(int32_t op, int32_t rank, const int64_t *dims, const float *a,
                        const int64_t *sa, const float *b, const int64_t *sb, float *y,
                        int32_t host) {
    HkcCtx *k = cu_kctx("hetrt_cu_binary");
    if (!k) return 1;
    if (rank < 0 || rank > HKC_MAX_RANK) return cu_done("hetrt_cu_binary", -1, "rank out of range");
    if ((host & 1) && !(a = cu_const("hetrt_cu_binary", a, span_bytes(rank, dims, sa)))) return 1;
    if ((host & 2) && !(b = cu_const("hetrt_cu_binary", b, span_bytes(rank, dims, sb)))) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_binary", cu_direct_binary(k, op, rank, dims, a, sa, b, sb, y, err), err);
}

int32_t hetrt_cu_unary(int32_t op, const float *x, float *y, int64_t n) {
    HkcCtx *k = cu_kctx("hetrt_cu_unary");
    if (!k) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_unary", hkc_unary_f32(k, op, x, y, n, err), err);
}

int32_t hetrt_cu_unary_grad(int32_t op, const float *x, const float *y, const float *dy,
                            float *dx, int64_t n) {
    HkcCtx *k = cu_kctx("hetrt_cu_unary_grad");
    if (!k) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_unary_grad", hkc_unary_grad_f32(k, op, x, y, dy, dx, n, err), err);
}

/* y[M,N] = x[M,K] w[K,N] (+ b[N]): one cuBLASLt GEMM, the bias added by its
 * epilogue (the device executor's Linear). */
int cu_direct_linear(HkcCtx *k, const float *x, const float *w, const float *b, int64_t M,
                     int64_t K, int64_t N, float *y, char *err) {
    if (b) return hkc_linear_bias_f32(k, M, N, K, x, w, b, y, err);
    return hkc_gemm_f32(k, 0, 0, M, N, K, 1.f, x, 0, w, 0, 0.f, y, 0, 1, err);
}

/* dx = dy w^T, dw = x^T dy, db = column sums of dy; each output optional. */
int cu_direct_linear_grad(HkcCtx *k, const float *x, const float *w, const float *dy, int64_t M,
                          int64_t K, int64_t N, float *dx, float *dw, float *db, char *err) {
    if (dx && hkc_gemm_f32(k, 0, 1, M, K, N, 1.f, dy, 0, w, 0, 0.f, dx, 0, 1, err)) return -1;
    if (dw && hkc_gemm_f32(k, 1, 0, K, N, M, 1.f, x, 0, dy, 0, 0.f, dw, 0, 1, err)) return -1;
    if (db && hkc_col_sum_f32(k, dy, M, N, db, err)) return -1;
    return 0;
}

int32_t hetrt_cu_linear(const float *x, const float *w, const float *b, int64_t M, int64_t K,
                        int64_t N, float *y) {
    HkcCtx *k = cu_kctx("hetrt_cu_linear");
    if (!k) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_linear", cu_direct_linear(k, x, w, b, M, K, N, y, err), err);
}

int32_t hetrt_cu_linear_grad(const float *x, const float *w, const float *dy, int64_t M,
                             int64_t K, int64_t N, float *dx, float *dw, float *db) {
    HkcCtx *k = cu_kctx("hetrt_cu_linear_grad");
    if (!k) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_linear_grad",
                cu_direct_linear_grad(k, x, w, dy, M, K, N, dx, dw, db, err), err);
}

int32_t hetrt_cu_cast(int32_t from, const void *x, int32_t to, void *y, int64_t n) {
    HkcCtx *k = cu_kctx("hetrt_cu_cast");
    if (!k) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_cast", hkc_cast(k, from, x, to, y, n, err), err);
}

/* bf16-mixed (issue 17): bf16 operands, fp32 accumulation; dw, db f32. */
int32_t hetrt_cu_linear_bf16(const void *x, const void *w, const void *b, int64_t M, int64_t K,
                             int64_t N, void *y) {
    HkcCtx *k = cu_kctx("hetrt_cu_linear_bf16");
    if (!k) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_linear_bf16", hkc_linear_bf16(k, M, N, K, x, w, b, y, err), err);
}

int32_t hetrt_cu_linear_grad_bf16(const void *x, const void *w, const void *dy, int64_t M,
                                  int64_t K, int64_t N, void *dx, float *dw, float *db) {
    HkcCtx *k = cu_kctx("hetrt_cu_linear_grad_bf16");
    if (!k) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_linear_grad_bf16",
                hkc_linear_backward_bf16(k, x, w, dy, M, K, N, dx, dw, db, err), err);
}

int cu_direct_adamw(HkcCtx *k, const float *p, const float *m, const float *v, const float *g,
                    int64_t n, const float *lr, const int64_t *step, const float *clip_scale,
                    double beta1, double beta2, double eps, double weight_decay, float *p_out,
                    float *m_out, float *v_out, char *err) {
    return hkc_adamw_f32(k, p, m, v, g, lr, step, clip_scale, n, beta1, beta2, eps, weight_decay,
                         p_out, m_out, v_out, err);
}

int32_t hetrt_cu_adamw(const float *p, const float *m, const float *v, const float *g, int64_t n,
                       const float *lr, const int64_t *step, const float *clip_scale,
                       double beta1, double beta2, double eps, double weight_decay,
                       float *p_out, float *m_out, float *v_out) {
    HkcCtx *k = cu_kctx("hetrt_cu_adamw");
    if (!k) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_adamw",
                cu_direct_adamw(k, p, m, v, g, n, lr, step, clip_scale, beta1, beta2, eps,
                                weight_decay, p_out, m_out, v_out, err),
                err);
}

int cu_direct_norm(HkcCtx *k, int rms, const float *x, const float *scale, const float *bias,
                   int64_t rows, int64_t n, double eps, float *y, char *err) {
    return hkc_norm_f32(k, rms, x, scale, rms ? NULL : bias, rows, n, eps, y, err);
}

int cu_direct_norm_grad(HkcCtx *k, int rms, const float *x, const float *scale, const float *dy,
                        int64_t rows, int64_t n, double eps, float *stats, float *dx,
                        float *dscale, float *dbias, char *err) {
    return hkc_norm_grad_f32(k, rms, x, scale, dy, rows, n, eps, stats, dx, dscale,
                             rms ? NULL : dbias, err);
}

/* The backend's device scratch, grown to n bytes (only while the first
 * steps meet larger needs; the stream orders its reuse). */
void *cu_kscratch(const char *entry, size_t n) {
    CudaBe *b = (CudaBe *)hetrt_stage_rt->be;
    if (n <= b->kscratch_bytes) return b->kscratch;
    cudaStreamSynchronize(b->k.stream); /* earlier kernels may still read the old one */
    if (b->kscratch) cudaFree(b->kscratch);
    b->kscratch = NULL, b->kscratch_bytes = 0;
    cudaError_t e = cudaMalloc(&b->kscratch, n);
    if (e != cudaSuccess) {
        rt_log_error("%s: cannot allocate %zu bytes of device scratch: %s", entry, n,
                     cudaGetErrorString(e));
        b->kscratch = NULL;
        return NULL;
    }
    b->kscratch_bytes = n;
    return b->kscratch;
}

int32_t hetrt_cu_norm(int32_t rms, const float *x, const float *scale, const float *bias,
                      int64_t rows, int64_t n, double eps, float *y) {
    HkcCtx *k = cu_kctx("hetrt_cu_norm");
    if (!k) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_norm", cu_direct_norm(k, rms, x, scale, bias, rows, n, eps, y, err),
                err);
}

int32_t hetrt_cu_norm_grad(int32_t rms, const float *x, const float *scale, const float *dy,
                           int64_t rows, int64_t n, double eps, float *dx, float *dscale,
                           float *dbias) {
    HkcCtx *k = cu_kctx("hetrt_cu_norm_grad");
    if (!k) return 1;
    float *stats = cu_kscratch("hetrt_cu_norm_grad", (size_t)(2 * rows + 1) * sizeof(float));
    if (!stats) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_norm_grad",
                cu_direct_norm_grad(k, rms, x, scale, dy, rows, n, eps, stats, dx, dscale, dbias,
                                    err),
                err);
}
