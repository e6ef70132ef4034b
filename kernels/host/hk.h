/* Host reference kernels (fp32 first, plus f64 and integers where ONNX
 * models need them for shape arithmetic).  Plain C on raw pointers and
 * dims: nothing here knows the IR, so a stage binary can link these alone.
 *
 * Conventions:
 *  - tensors are dense, row-major; a shape is (rank, dims[]); rank 0 is a
 *    scalar of one element.
 *  - dtypes use the ONNX TensorProto numbering (HkDType), so callers that
 *    hold IR dtypes can cast the value directly.
 *  - functions that can fail return 0 on success, -1 on failure and, when
 *    `err` is non-NULL, write a one-line reason into it (HK_ERRLEN bytes).
 *    Failure is a bad argument (index out of range, unsupported dtype,
 *    shapes that do not broadcast), never a crash.
 */
#ifndef HETC_HK_H
#define HETC_HK_H

#include <stddef.h>
#include <stdint.h>

#define HK_MAX_RANK 8
#define HK_ERRLEN 256

typedef enum HkDType {
    HK_UNDEF = 0,
    HK_F32 = 1,
    HK_U8 = 2,
    HK_I8 = 3,
    HK_U16 = 4,
    HK_I16 = 5,
    HK_I32 = 6,
    HK_I64 = 7,
    HK_BOOL = 9,
    HK_F16 = 10,
    HK_F64 = 11,
    HK_U32 = 12,
    HK_U64 = 13,
    HK_BF16 = 16,
} HkDType;

size_t hk_dtype_size(HkDType t); /* 0 for unknown */
int64_t hk_numel(int rank, const int64_t *dims);

/* ------------------------------------------------------------ iteration */
/* Row iterator over an output shape with up to HK_ITER_MAX operands, each
 * addressed through its own element strides (0 along broadcast axes,
 * negative for reversed slices).  Adjacent axes that are contiguous for
 * every operand are merged, so same-shape operands form one long row.
 * Use:  hk_iter_init(...); while (hk_iter_next(&it, off)) { row of it.n
 *       elements, operand k at off[k] + i * it.inner[k] } */
#define HK_ITER_MAX 4
typedef struct HkIter {
    int rank, nops;
    int64_t dims[HK_MAX_RANK];
    int64_t strides[HK_ITER_MAX][HK_MAX_RANK];
    int64_t idx[HK_MAX_RANK];
    int64_t base[HK_ITER_MAX];
    int64_t n;                  /* innermost row length */
    int64_t inner[HK_ITER_MAX]; /* innermost stride per operand */
    int64_t rows, row;          /* rows to visit, rows visited */
} HkIter;
void hk_iter_init(HkIter *it, int rank, const int64_t *dims, int nops,
                  const int64_t (*strides)[HK_MAX_RANK], const int64_t *base);
int hk_iter_next(HkIter *it, int64_t *off);
/* Position the iterator at row `row` (0 <= row < rows): the next
 * hk_iter_next returns that row. */
void hk_iter_seek(HkIter *it, int64_t row);

/* Contiguous strides of a shape, in elements. */
void hk_contig_strides(int rank, const int64_t *dims, int64_t *strides);
/* Strides that read a tensor of shape (rank, dims) as if broadcast to
 * (orank, odims) (numpy rules, right-aligned); -1 if it does not broadcast. */
int hk_bcast_strides(int rank, const int64_t *dims, int orank, const int64_t *odims,
                     int64_t *strides);
/* numpy broadcast of two shapes; -1 if incompatible. */
int hk_bcast_shape(int ra, const int64_t *a, int rb, const int64_t *b, int *ro, int64_t *o);

/* Gather elements of size esize from src (element strides, start offset in
 * elements, may be negative strides) into a dense dst of shape (rank, dims). */
void hk_strided_copy(size_t esize, int rank, const int64_t *dims, const void *src,
                     int64_t src_off, const int64_t *src_strides, void *dst);
/* Broadcast src (srank, sdims) into dst (orank, odims); -1 if incompatible. */
int hk_expand(size_t esize, const void *src, int srank, const int64_t *sdims, void *dst,
              int orank, const int64_t *odims, char *err);

/* ------------------------------------------------------------ elementwise */
typedef enum HkBinOp {
    HK_ADD, HK_SUB, HK_MUL, HK_DIV, HK_POW, HK_MAX, HK_MIN, HK_MOD, HK_FMOD,
    HK_EQ, HK_LT, HK_LE, HK_GT, HK_GE, /* output bool */
    HK_AND, HK_OR, HK_XOR,             /* bool in, bool out */
    HK_BINOP_COUNT
} HkBinOp;
/* out = a op b with numpy broadcasting to (orank, odims).  Arithmetic:
 * f32 f64 i32 i64 (Pow also i32/i64 base with any of them as exponent via
 * the bdt argument); compare: those four plus bool; logical: bool.
 * Integer division or modulo by zero is an error. */
int hk_binary(HkBinOp op, HkDType dt, const void *a, int ra, const int64_t *da,
              HkDType bdt, const void *b, int rb, const int64_t *db, void *out, int orank,
              const int64_t *odims, char *err);

typedef enum HkUnOp {
    HK_NEG, HK_ABS, HK_SQRT, HK_RECIP, HK_EXP, HK_LOG, HK_SIN, HK_COS, HK_TANH,
    HK_SIGMOID, HK_ERF, HK_RELU, HK_FLOOR, HK_CEIL, HK_NOT, HK_GELU, HK_GELU_TANH,
    HK_SILU,
    HK_UNOP_COUNT
} HkUnOp;
/* Same-shape unary map.  Float ops: f32 f64; Neg Abs Relu also i32 i64
 * (and i8 i16); Not: bool. */
int hk_unary(HkUnOp op, HkDType dt, const void *x, void *y, int64_t n, char *err);
/* 1 if hk_unary / hk_binary accept this dtype for op. */
int hk_unary_supported(HkUnOp op, HkDType dt);
int hk_binary_supported(HkBinOp op, HkDType dt);

/* y = cond ? x : z, all broadcast to (orank, odims); cond is bool. */
int hk_where(size_t esize, const uint8_t *cond, int rc, const int64_t *dc, const void *x,
             int rx, const int64_t *dx, const void *z, int rz, const int64_t *dz, void *out,
             int orank, const int64_t *odims, char *err);
/* y = min(max(x, lo), hi); lo/hi may be NULL (scalars of dtype dt). */
int hk_clip(HkDType dt, const void *x, const void *lo, const void *hi, void *y, int64_t n,
            char *err);
/* Convert n elements.  Float -> integer truncates toward zero; NaN -> 0 and
 * out-of-range values saturate (ONNX leaves them undefined; C would be UB).
 * f16/bf16 round to nearest even. */
int hk_cast(HkDType from, const void *x, HkDType to, void *y, int64_t n, char *err);
int hk_cast_supported(HkDType t);
/* Fill n elements of dt with v (ConstantOfShape). */
int hk_fill(HkDType dt, double v, void *y, int64_t n, char *err);

/* ------------------------------------------------------------ reductions */
typedef enum HkRedOp { HK_RSUM, HK_RMEAN, HK_RMAX } HkRedOp;
/* Reduce x over the axes with reduce[i] != 0; y has x's shape with those
 * axes at extent 1 (keepdims form; dropping them does not move data).
 * Floats accumulate in double.  Max of an empty set is -inf (ints: min). */
int hk_reduce(HkRedOp op, HkDType dt, const void *x, int rank, const int64_t *dims,
              const int *reduce, void *y, char *err);
/* x (f32) viewed as [O, R, I]: acc[o*I + i] += sum over r of x[o, r, i],
 * each output summed in r order (so the result does not depend on the
 * thread count); outputs split across threads. */
void hk_sum_mid_f32(const float *x, int64_t outer, int64_t red, int64_t inner, double *acc);
/* The [O, R, I] view of a shape whose reduced (non-unit) axes are
 * adjacent; 0 if they are not. */
int hk_mid_block(int rank, const int64_t *dims, const int *reduce, int64_t *outer,
                 int64_t *red, int64_t *inner);
/* softmax / log-softmax along axis, max-subtracted; f32 f64. */
int hk_softmax(HkDType dt, const void *x, int rank, const int64_t *dims, int axis, int log,
               void *y, char *err);
/* Cumulative sum along axis; f32 f64 i32 i64. */
int hk_cumsum(HkDType dt, const void *x, int rank, const int64_t *dims, int axis,
              int exclusive, int reverse, void *y, char *err);

/* ------------------------------------------------------------ normalisation */
/* x viewed as [outer, n]: y = (x - mean) / sqrt(var + eps) * scale + bias,
 * scale/bias of n elements (bias may be NULL).  f32. */
void hk_layernorm_f32(const float *x, const float *scale, const float *bias, int64_t outer,
                      int64_t n, double eps, float *y);
/* y = x / sqrt(mean(x^2) + eps) * scale over rows of n. */
void hk_rmsnorm_f32(const float *x, const float *scale, int64_t outer, int64_t n, double eps,
                    float *y);

/* ------------------------------------------------------------ linear algebra */
/* numpy matmul: a [..., M, K] (or [K]), b [..., K, N] (or [K]), batch dims
 * broadcast to y's.  Shapes as given (1-D operands handled); dt f32 or f64
 * (BLAS) or i32/i64 (naive loops). */
int hk_matmul(HkDType dt, const void *a, int ra, const int64_t *da, const void *b, int rb,
              const int64_t *db, void *y, int ry, const int64_t *dy, char *err);
/* y[M,N] = alpha * op(A) op(B) + beta * C (C broadcast to [M,N], may be NULL). */
int hk_gemm_f32(const float *a, const float *b, const float *c, int rc, const int64_t *dc,
                int64_t M, int64_t N, int64_t K, int ta, int tb, float alpha, float beta,
                float *y, char *err);
/* y[M,N] = x[M,K] w[K,N] (+ bias[N]). */
void hk_linear_f32(const float *x, const float *w, const float *bias, int64_t M, int64_t K,
                   int64_t N, float *y);
/* For each of `batch` heads: y[T,Dv] = softmax(q k^T * scale + mask) v,
 * q [T,D], k [S,D], v [S,Dv]; causal masks key j when j > i + (S - T).
 * Fully masked rows give zeros. */
/* Row i of attention's P in place: softmax over row[0 .. lim) (the keys
 * query i sees), zeros in row[lim .. S).  The forward and the backward's
 * recomputation share it, so both hold the same bits. */
void hk_attn_softmax_row(float *row, int64_t lim, int64_t S);
int hk_attention_f32(const float *q, const float *k, const float *v, int64_t batch, int64_t T,
                     int64_t S, int64_t D, int64_t Dv, int causal, float scale, float *y,
                     char *err);

/* ------------------------------------------------------------ data movement */
/* y = transpose(x, perm): y.dims[i] = x.dims[perm[i]]. */
void hk_transpose(size_t esize, const void *x, int rank, const int64_t *dims,
                  const int64_t *perm, void *y);
/* y[i...] = x[start + i * step ...] per axis; y dims given (steps may be negative;
 * starts must already be clamped into range for non-empty axes). */
void hk_slice(size_t esize, const void *x, int rank, const int64_t *dims,
              const int64_t *start, const int64_t *step, const int64_t *ydims, void *y);
/* Concat n inputs along axis (each of `rank` dims, equal except at axis). */
void hk_concat(size_t esize, int n, const void *const *xs, const int64_t *const *xdims,
               int rank, int axis, void *y);
/* Split x along axis into n outputs of sizes[i] each. */
void hk_split(size_t esize, const void *x, int rank, const int64_t *dims, int axis, int n,
              const int64_t *sizes, void *const *ys);
/* Gather along axis with int32/int64 indices (negatives count from the end);
 * y shape = x[:axis] + idx.shape + x[axis+1:].  Index out of range -> error. */
int hk_gather(size_t esize, const void *x, int rank, const int64_t *dims, int axis,
              HkDType idt, const void *idx, int64_t nidx, void *y, char *err);
/* Keep the upper (or lower) triangle of each of the last two axes,
 * diagonal offset k. */
void hk_trilu(size_t esize, const void *x, int rank, const int64_t *dims, int64_t k,
              int upper, void *y);
/* ONNX GatherND (kernels/host/hk_index.c): idx (irank, idims) holds tuples
 * of k = idims[irank-1] coordinates into the dims after the first
 * batch_dims (which data and indices share); y = the selected slices, shape
 * idims[:-1] + dims[batch_dims + k:].  Negative coordinates count from the
 * end; out of range -> error. */
int hk_gather_nd(size_t esize, const void *x, int rank, const int64_t *dims, HkDType idt,
                 const void *idx, int irank, const int64_t *idims, int batch_dims, void *y,
                 char *err);
/* ONNX GatherElements: y (shape idims, same rank as x) takes
 * x[p with p[axis] = idx[p]]; idims[d] <= dims[d] off the axis. */
int hk_gather_elements(size_t esize, const void *x, int rank, const int64_t *dims, int axis,
                       HkDType idt, const void *idx, const int64_t *idims, void *y, char *err);
typedef enum HkScatterRed {
    HK_RED_NONE, HK_RED_ADD, HK_RED_MUL, HK_RED_MAX, HK_RED_MIN
} HkScatterRed;
/* ONNX ScatterND: y = x, then each index tuple's slice of y is replaced by
 * (or combined with, per red: f32 f64 i32 i64) the matching slice of upd
 * (shape idims[:-1] + dims[k:]).  Tuples apply in order. */
int hk_scatter_nd(HkDType dt, const void *x, int rank, const int64_t *dims, HkDType idt,
                  const void *idx, int irank, const int64_t *idims, const void *upd,
                  HkScatterRed red, void *y, char *err);
/* y = x repeated reps[i] times along each axis i (ONNX Tile). */
void hk_tile(size_t esize, const void *x, int rank, const int64_t *dims, const int64_t *reps,
             void *y);
/* y[i] = isnan(x[i]) as bool bytes; f32 f64 f16 bf16. */
int hk_isnan(HkDType dt, const void *x, uint8_t *y, int64_t n, char *err);
/* y[i] = start + i * delta for i < n (f32 f64 i16 i32 i64). */
int hk_range(HkDType dt, const void *start, const void *delta, int64_t n, void *y, char *err);

#endif
