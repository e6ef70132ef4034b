/* CUDA kernels (hkc_*): the device twins of kernels/host (hk.h, hk_train.h),
 * fp32 storage and fp32 accumulation, on raw device pointers and dims.  Like
 * kernels/host nothing here knows the IR: interp/cuda/cudaexec*.c adapts IR
 * nodes to these calls.  Every launch goes on the context's stream; every
 * function returns 0 or -1 with a one-line reason in `err` (HKC_ERRLEN
 * bytes, may be NULL): launch errors and cuBLASLt statuses are reported,
 * asynchronous kernel faults surface at the next synchronisation.
 *
 * Storage is fp32, except the bf16 values of --precision bf16-mixed
 * (issue 17): the Casts around each Linear (hkc_cast, code 16) and the
 * Linear / LinearGrad on bf16 operands (hkc_linear_bf16,
 * hkc_linear_backward_bf16: cuBLASLt bf16 tensor-core GEMMs with fp32
 * accumulation), the twins of kernels/host/hk_bf16.h (docs/CUDA.md).
 *
 * Definitions: one file per op family, named after its kernels/host twin
 * (norm.cu <-> train_norm.c, ...: the table in docs/CUDA.md). */
#ifndef HETC_HKC_H
#define HETC_HKC_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HKC_ERRLEN 256
#define HKC_MAX_RANK 8

/* What every call needs: the stream and (for matmuls) the cuBLASLt handle
 * and its workspace. */
typedef struct HkcCtx {
    cudaStream_t stream;
    void *lt;        /* cublasLtHandle_t */
    void *workspace; /* device memory for cuBLASLt */
    size_t workspace_bytes;
    void *gemm_plans; /* matmul.c's cache of cuBLASLt plans by call shape */
} HkcCtx;

int hkc_ctx_init(HkcCtx *c, char *err);
void hkc_ctx_free(HkcCtx *c);

/* A tensor walk: out index i (row-major over dims) reads/writes element
 * sum_d idx_d * strides[d] of an operand (0 strides broadcast). */
typedef struct HkcShape {
    int rank;
    int64_t dims[HKC_MAX_RANK];
} HkcShape;
typedef struct HkcStrides {
    int64_t s[HKC_MAX_RANK];
} HkcStrides;

/* Element ops; the numbering is kernels/host's HkBinOp / HkUnOp / HkUnaryGrad. */
enum { HKC_ADD, HKC_SUB, HKC_MUL, HKC_DIV, HKC_POW, HKC_MAX, HKC_MIN };
enum {
    HKC_NEG, HKC_ABS, HKC_SQRT, HKC_RECIP, HKC_EXP, HKC_LOG, HKC_SIN, HKC_COS, HKC_TANH,
    HKC_SIGMOID, HKC_ERF, HKC_RELU, HKC_FLOOR, HKC_CEIL, HKC_NOT_UNUSED, HKC_GELU,
    HKC_GELU_TANH, HKC_SILU
};
enum {
    HKC_UG_EXP, HKC_UG_LOG, HKC_UG_SQRT, HKC_UG_TANH, HKC_UG_SIGMOID, HKC_UG_ERF, HKC_UG_RELU,
    HKC_UG_NEG, HKC_UG_RECIPROCAL, HKC_UG_GELU, HKC_UG_GELU_TANH, HKC_UG_SILU
};

/* y[i] = a[.] op b[.] over `out` (broadcast strides sa, sb). */
int hkc_binary_f32(HkcCtx *c, int op, const float *a, HkcStrides sa, const float *b,
                   HkcStrides sb, float *y, HkcShape out, char *err);
int hkc_unary_f32(HkcCtx *c, int op, const float *x, float *y, int64_t n, char *err);
/* dx = dy * f'(x) (y may be NULL: recomputed), hk_unary_backward_f32's rules. */
int hkc_unary_grad_f32(HkcCtx *c, int op, const float *x, const float *y, const float *dy,
                       float *dx, int64_t n, char *err);
/* dst[dst_off + walk(dst_strides)] = src[src_off + walk(src_strides)] over
 * `shape`, elements of esize bytes (1, 2, 4 or 8): transpose, expand, slice,
 * split and concat pieces. */
int hkc_strided_copy(HkcCtx *c, size_t esize, HkcShape shape, const void *src, int64_t src_off,
                     HkcStrides src_strides, void *dst, int64_t dst_off, HkcStrides dst_strides,
                     char *err);
/* dtype codes are HkDType's: 1 f32, 6 i32, 7 i64, 9 bool, 11 f64, 2 u8, 16 bf16
 * (f32 -> bf16 rounds to nearest even as hk_f32_to_bf16, bit for bit). */
int hkc_cast(HkcCtx *c, int from, const void *x, int to, void *y, int64_t n, char *err);
/* f32 -> bf16 rounded stochastically with (key, step), element i's bits
 * those of kernels/host/hk_sr.h (host twin: hk_bf16_round_sr) */
int hkc_round_bf16_sr(HkcCtx *c, const float *x, uint16_t *y, int64_t n, int64_t key,
                      int64_t step, char *err);
/* y[o] = reduce over the walk of `red` (strides rs from x's element o_off):
 * out element o sits at x offset sum idx_d*os[d] over `out`.  op 0 sum,
 * 1 mean (divides by the reduced count), 2 max.  Accumulates in double. */
int hkc_reduce_f32(HkcCtx *c, int op, const float *x, HkcShape out, HkcStrides os, HkcShape red,
                   HkcStrides rs, float *y, char *err);
/* Rows of n along the last axis. */
int hkc_softmax_f32(HkcCtx *c, const float *x, int64_t rows, int64_t n, int log, float *y,
                    char *err);
int hkc_softmax_grad_f32(HkcCtx *c, const float *y, const float *dy, int64_t rows, int64_t n,
                         int log, float *dx, char *err);
/* Attention's masked softmax in place on scores [batch][T][S]:
 * p = softmax(scale * s) with key j masked when causal and j > i + (S - T). */
int hkc_attn_softmax_f32(HkcCtx *c, float *s, int64_t batch, int64_t T, int64_t S, int causal,
                         float scale, char *err);
/* LayerNorm (rms = 0) / RMSNorm (rms = 1) over rows of n; bias may be NULL. */
int hkc_norm_f32(HkcCtx *c, int rms, const float *x, const float *scale, const float *bias,
                 int64_t rows, int64_t n, double eps, float *y, char *err);
/* Backward; stats: 2*rows floats of device scratch.  dx, dscale, dbias may be NULL. */
int hkc_norm_grad_f32(HkcCtx *c, int rms, const float *x, const float *scale, const float *dy,
                      int64_t rows, int64_t n, double eps, float *stats, float *dx,
                      float *dscale, float *dbias, char *err);
/* y[i,:] = table[ids[i],:]; ids i32 (idt 6) or i64 (idt 7), negatives count
 * from the end; an id outside [-V, V) writes zeros and sets *bad (device int). */
int hkc_embedding_f32(HkcCtx *c, const float *table, int64_t V, int64_t D, int idt,
                      const void *ids, int64_t n, float *y, int *bad, char *err);
/* dtable[ids[i],:] += dy[i,:] (atomics: summation order varies, see docs/CUDA.md). */
int hkc_embedding_grad_f32(HkcCtx *c, int64_t V, int64_t D, int idt, const void *ids,
                           int64_t n, const float *dy, float *dtable, int *bad, char *err);
/* Fused cross entropy, hk_cross_entropy_fwd/bwd_f32's semantics; scratch:
 * 2*N floats + 2 doubles of device memory (hkc_cross_entropy_scratch). */
size_t hkc_cross_entropy_scratch(int64_t N);
int hkc_cross_entropy_f32(HkcCtx *c, const float *logits, int tdt, const void *targets,
                          int64_t N, int64_t V, int use_ignore, int64_t ignore_index,
                          void *scratch, float *loss, int *bad, char *err);
int hkc_cross_entropy_grad_f32(HkcCtx *c, const float *logits, int tdt, const void *targets,
                               int64_t N, int64_t V, int use_ignore, int64_t ignore_index,
                               const float *dloss, void *scratch, float *dlogits, int *bad,
                               char *err);
/* out[j] = sum_i x[i*n + j] over rows (bias gradients). */
int hkc_col_sum_f32(HkcCtx *c, const float *x, int64_t rows, int64_t n, float *out, char *err);
/* The same over bf16 x (bits), summed in double, out f32. */
int hkc_col_sum_bf16(HkcCtx *c, const uint16_t *x, int64_t rows, int64_t n, float *out,
                     char *err);
/* y[i*n + j] = b[j] (bias broadcast before a beta = 1 matmul). */
int hkc_row_broadcast_f32(HkcCtx *c, const float *b, int64_t rows, int64_t n, float *y,
                          char *err);
/* y += alpha x */
int hkc_axpy_f32(HkcCtx *c, int64_t n, float alpha, const float *x, float *y, char *err);
/* The fused AdamW step (the IR's AdamW op): the device twin of kernels/host
 * hk_adamw_fused_f32, the same fp32 operations in the same order (no FMA
 * contraction: __fmul_rn / __fadd_rn), so it matches the host bit for bit
 * up to the double pow of the bias corrections.  lr (f32), step (i64) and
 * clip_scale (f32, NULL: none) are device scalars; outputs may be their
 * inputs' buffers (in place).  step < 1 is not checked on the device (the
 * host twin rejects it; stage runtimes count steps from 1). */
int hkc_adamw_f32(HkcCtx *c, const float *p, const float *m, const float *v, const float *g,
                  const float *lr, const int64_t *step, const float *clip_scale, int64_t n,
                  double beta1, double beta2, double eps, double weight_decay, float *p_out,
                  float *m_out, float *v_out, char *err);
/* *out (device double) = sum x^2, accumulated in double. */
int hkc_sumsq_f32(HkcCtx *c, const float *x, int64_t n, double *out, char *err);

/* Row-major batched C[b] = alpha op(A[b]) op(B[b]) + beta C[b] through
 * cuBLASLt (fp32 compute): A is [M,K] ([K,M] when ta), B [K,N] ([N,K] when
 * tb); batch strides in elements (0: shared operand). */
int hkc_gemm_f32(HkcCtx *c, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t strideA, const float *B, int64_t strideB, float beta,
                 float *C, int64_t strideC, int64_t batch, char *err);

/* Row-major C[M,N] = A[M,K] B[K,N] + bias[N] (every row): one cuBLASLt GEMM
 * with the bias epilogue (a 16-byte aligned bias), else the row broadcast
 * then C += A B. */
int hkc_linear_bias_f32(HkcCtx *c, int64_t M, int64_t N, int64_t K, const float *A,
                        const float *B, const float *bias, float *C, char *err);

/* bf16 operands (bits), fp32 accumulation (cuBLASLt CUBLAS_COMPUTE_32F), the
 * twins of hk_linear_bf16 / hk_linear_backward_bf16: y[M,N] = bf16(x[M,K]
 * w[K,N] + bias[N]) rounded once (bias may be NULL); dx = bf16(dy w^T),
 * dw = x^T dy and db = column sums of dy in f32 (overwritten; any of the
 * three may be NULL).  The sums' order is cuBLAS's, so results match the
 * host within the f32 summation error plus one bf16 rounding. */
int hkc_linear_bf16(HkcCtx *c, int64_t M, int64_t N, int64_t K, const uint16_t *x,
                    const uint16_t *w, const uint16_t *bias, uint16_t *y, char *err);
int hkc_linear_backward_bf16(HkcCtx *c, const uint16_t *x, const uint16_t *w,
                             const uint16_t *dy, int64_t M, int64_t K, int64_t N, uint16_t *dx,
                             float *dw, float *db, char *err);

#ifdef __cplusplus
}
#endif
#endif
