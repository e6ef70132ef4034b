/* Elementwise binary ops with numpy broadcasting, one typed loop per
 * (dtype class, op) generated from a macro so every dtype shares the same
 * broadcast walk (hk_iter). */
#include "hk.h"
#include "hk_parallel.h"
#include "hk_vmath.h" /* HK_VECTOR_CLONES */

#include <math.h>
#include <stdio.h>
#include <string.h>

/* operand order in the iterator: 0 = out, 1 = a, 2 = b */
static int setup(HkIter *it, int ra, const int64_t *da, int rb, const int64_t *db, int orank,
                 const int64_t *odims, char *err) {
    int64_t st[3][HK_MAX_RANK];
    hk_contig_strides(orank, odims, st[0]);
    if (hk_bcast_strides(ra, da, orank, odims, st[1]) ||
        hk_bcast_strides(rb, db, orank, odims, st[2])) {
        if (err) snprintf(err, HK_ERRLEN, "operand shapes do not broadcast to the output shape");
        return -1;
    }
    hk_iter_init(it, orank, odims, 3, (const int64_t(*)[HK_MAX_RANK])st, NULL);
    return 0;
}

/* One row: o[i] = EXPR(x, y) for x = a[...], y = b[...]. */
#define ROW(T, OT, EXPR)                                                        \
    do {                                                                        \
        const T *A_ = (const T *)a + off[1];                                    \
        const T *B_ = (const T *)b + off[2];                                    \
        OT *O_ = (OT *)out + off[0];                                            \
        int64_t sa_ = it.inner[1], sb_ = it.inner[2];                           \
        for (int64_t i_ = 0; i_ < it.n; i_++) {                                 \
            T x = A_[i_ * sa_], y = B_[i_ * sb_];                               \
            O_[i_] = (OT)(EXPR);                                                \
        }                                                                       \
    } while (0)

#define CMP_CASES(T)                                                            \
    case HK_EQ: ROW(T, uint8_t, x == y); break;                                 \
    case HK_LT: ROW(T, uint8_t, x < y); break;                                  \
    case HK_LE: ROW(T, uint8_t, x <= y); break;                                 \
    case HK_GT: ROW(T, uint8_t, x > y); break;                                  \
    case HK_GE: ROW(T, uint8_t, x >= y); break;

/* NaN-propagating max/min as numpy.maximum / onnxruntime Max. */
#define FMAX(x, y) ((x) != (x) || (x) > (y) ? (x) : (y))
#define FMIN(x, y) ((x) != (x) || (x) < (y) ? (x) : (y))

#define DEF_FLOAT(NAME, T)                                                      \
    static int NAME(HkBinOp op, const void *a, const void *b, void *out, HkIter it, \
                    char *err) {                                                \
        int64_t off[3];                                                         \
        while (hk_iter_next(&it, off)) {                                        \
            switch (op) {                                                       \
            case HK_ADD: ROW(T, T, x + y); break;                               \
            case HK_SUB: ROW(T, T, x - y); break;                               \
            case HK_MUL: ROW(T, T, x * y); break;                               \
            case HK_DIV: ROW(T, T, x / y); break;                               \
            case HK_MAX: ROW(T, T, FMAX(x, y)); break;                          \
            case HK_MIN: ROW(T, T, FMIN(x, y)); break;                          \
            case HK_FMOD: ROW(T, T, fmod(x, y)); break;                         \
            case HK_MOD: ROW(T, T, fmod(x, y)); break;                          \
            CMP_CASES(T)                                                        \
            default:                                                            \
                if (err) snprintf(err, HK_ERRLEN, "op not defined on floats");  \
                return -1;                                                      \
            }                                                                   \
        }                                                                       \
        return 0;                                                               \
    }
DEF_FLOAT(bin_f32, float)
DEF_FLOAT(bin_f64, double)

/* ---- f32 fast path: rows whose operands are contiguous (stride 1) or
 * broadcast (stride 0) along the row -- same-shape operands (one merged
 * row), a scalar operand, a bias row -- in parallel chunks with loops the
 * compiler vectorizes.  Each element is computed exactly as in bin_f32. */
#define F32_ROW(EXPR)                                                           \
    do {                                                                        \
        if (sa == 1 && sb == 1)                                                 \
            for (int64_t i = 0; i < n; i++) { float x = A[i], y = B[i]; O[i] = (EXPR); } \
        else if (sa == 1)                                                       \
            for (int64_t i = 0; i < n; i++) { float x = A[i], y = B[0]; O[i] = (EXPR); } \
        else if (sb == 1)                                                       \
            for (int64_t i = 0; i < n; i++) { float x = A[0], y = B[i]; O[i] = (EXPR); } \
        else                                                                    \
            for (int64_t i = 0; i < n; i++) { float x = A[0], y = B[0]; O[i] = (EXPR); } \
    } while (0)

HK_VECTOR_CLONES
static void f32_row(HkBinOp op, const float *A, int64_t sa, const float *B, int64_t sb, float *O,
                    int64_t n) {
    switch (op) {
    case HK_ADD: F32_ROW(x + y); break;
    case HK_SUB: F32_ROW(x - y); break;
    case HK_MUL: F32_ROW(x * y); break;
    case HK_DIV: F32_ROW(x / y); break;
    case HK_MAX: F32_ROW(FMAX(x, y)); break;
    case HK_MIN: F32_ROW(FMIN(x, y)); break;
    default: break;
    }
}

typedef struct F32Job {
    HkBinOp op;
    const float *a, *b;
    float *out;
    const HkIter *it;
} F32Job;

/* offsets of row r of the iterator (its outer axes, odometer order) */
static void row_offsets(const HkIter *it, int64_t r, int64_t *off) {
    for (int k = 0; k < 3; k++) off[k] = it->base[k];
    for (int i = it->rank - 1; i >= 0; i--) {
        int64_t q = r % it->dims[i];
        r /= it->dims[i];
        for (int k = 0; k < 3; k++) off[k] += q * it->strides[k][i];
    }
}

static void f32_rows(void *c, int64_t lo, int64_t hi) {
    const F32Job *j = c;
    int64_t off[3];
    for (int64_t r = lo; r < hi; r++) {
        row_offsets(j->it, r, off);
        f32_row(j->op, j->a + off[1], j->it->inner[1], j->b + off[2], j->it->inner[2],
                j->out + off[0], j->it->n);
    }
}

/* one row split into chunks */
static void f32_chunk(void *c, int64_t lo, int64_t hi) {
    const F32Job *j = c;
    int64_t sa = j->it->inner[1], sb = j->it->inner[2];
    f32_row(j->op, j->a + lo * sa, sa, j->b + lo * sb, sb, j->out + lo, hi - lo);
}

/* 1 when handled; 0 to fall back to the general walk */
static int bin_f32_fast(HkBinOp op, const void *a, const void *b, void *out, const HkIter *it) {
    if (op != HK_ADD && op != HK_SUB && op != HK_MUL && op != HK_DIV && op != HK_MAX &&
        op != HK_MIN)
        return 0;
    if (it->inner[0] != 1 || (it->inner[1] != 0 && it->inner[1] != 1) ||
        (it->inner[2] != 0 && it->inner[2] != 1))
        return 0;
    F32Job j = {op, a, b, out, it};
    if (it->rows == 1) hk_parallel_for(it->n, HK_GRAIN_CHEAP, f32_chunk, &j);
    else hk_parallel_for(it->rows, hk_row_grain(it->n) * 2, f32_rows, &j);
    return 1;
}

/* Integer arithmetic wraps (through the unsigned type) instead of hitting
 * signed-overflow UB; division truncates like C and onnxruntime. */
#define IDIV(T, U, x, y) ((y) == -1 ? (T)(U)(0u - (U)(x)) : (T)((x) / (y)))
#define IREM(T, x, y) ((y) == -1 ? (T)0 : (T)((x) % (y)))
/* Python-style modulo: result takes the divisor's sign. */
#define IMOD(T, x, y) (IREM(T, x, y) != 0 && ((IREM(T, x, y) < 0) != ((y) < 0)) \
                           ? (T)(IREM(T, x, y) + (y)) : IREM(T, x, y))

#define DEF_INT(NAME, T, U, DIVX, REMX, MODX)                                                     \
    static int NAME(HkBinOp op, const void *a, const void *b, void *out, HkIter it, \
                    char *err) {                                                \
        int64_t off[3];                                                         \
        if (op == HK_DIV || op == HK_MOD || op == HK_FMOD) {                    \
            /* check divisors first: a zero must be an error, not SIGFPE */     \
            HkIter chk = it;                                                    \
            while (hk_iter_next(&chk, off)) {                                   \
                const T *B_ = (const T *)b + off[2];                            \
                for (int64_t i = 0; i < chk.n; i++)                             \
                    if (B_[i * chk.inner[2]] == 0) {                            \
                        if (err) snprintf(err, HK_ERRLEN, "integer division by zero"); \
                        return -1;                                              \
                    }                                                           \
            }                                                                   \
        }                                                                       \
        while (hk_iter_next(&it, off)) {                                        \
            switch (op) {                                                       \
            case HK_ADD: ROW(T, T, (U)x + (U)y); break;                         \
            case HK_SUB: ROW(T, T, (U)x - (U)y); break;                         \
            case HK_MUL: ROW(T, T, (U)x * (U)y); break;                         \
            case HK_DIV: ROW(T, T, DIVX); break;                    \
            case HK_MAX: ROW(T, T, x > y ? x : y); break;                       \
            case HK_MIN: ROW(T, T, x < y ? x : y); break;                       \
            case HK_FMOD: ROW(T, T, REMX); break;                      \
            case HK_MOD: ROW(T, T, MODX); break;                       \
            CMP_CASES(T)                                                        \
            default:                                                            \
                if (err) snprintf(err, HK_ERRLEN, "op not defined on integers"); \
                return -1;                                                      \
            }                                                                   \
        }                                                                       \
        return 0;                                                               \
    }
#define DEF_SINT(NAME, T, U) \
    DEF_INT(NAME, T, U, IDIV(T, U, x, y), IREM(T, x, y), IMOD(T, x, y))
#define DEF_UINT(NAME, T) DEF_INT(NAME, T, T, x / y, x % y, x % y)
DEF_SINT(bin_i8, int8_t, uint8_t)
DEF_UINT(bin_u8, uint8_t)
DEF_SINT(bin_i16, int16_t, uint16_t)
DEF_UINT(bin_u16, uint16_t)
DEF_SINT(bin_i32, int32_t, uint32_t)
DEF_UINT(bin_u32, uint32_t)
DEF_SINT(bin_i64, int64_t, uint64_t)
DEF_UINT(bin_u64, uint64_t)

static int bin_bool(HkBinOp op, const void *a, const void *b, void *out, HkIter it,
                    char *err) {
    int64_t off[3];
    while (hk_iter_next(&it, off)) {
        switch (op) {
        case HK_AND: ROW(uint8_t, uint8_t, (x != 0) & (y != 0)); break;
        case HK_OR: ROW(uint8_t, uint8_t, (x != 0) | (y != 0)); break;
        case HK_XOR: ROW(uint8_t, uint8_t, (x != 0) ^ (y != 0)); break;
        case HK_EQ: ROW(uint8_t, uint8_t, (x != 0) == (y != 0)); break;
        default:
            if (err) snprintf(err, HK_ERRLEN, "op not defined on bool");
            return -1;
        }
    }
    return 0;
}

static double load_d(HkDType dt, const void *p, int64_t i) {
    switch (dt) {
    case HK_F32: return ((const float *)p)[i];
    case HK_F64: return ((const double *)p)[i];
    case HK_I8: return ((const int8_t *)p)[i];
    case HK_U8: return ((const uint8_t *)p)[i];
    case HK_I16: return ((const int16_t *)p)[i];
    case HK_U16: return ((const uint16_t *)p)[i];
    case HK_I32: return ((const int32_t *)p)[i];
    case HK_U32: return ((const uint32_t *)p)[i];
    case HK_I64: return (double)((const int64_t *)p)[i];
    case HK_U64: return (double)((const uint64_t *)p)[i];
    default: return 0;
    }
}

/* Pow allows a different exponent dtype; go through double and convert
 * back with hk_cast's saturating rules. */
static int bin_pow(HkDType dt, const void *a, HkDType bdt, const void *b, void *out,
                   HkIter it, char *err) {
    int64_t off[3];
    while (hk_iter_next(&it, off)) {
        for (int64_t i = 0; i < it.n; i++) {
            double r = pow(load_d(dt, a, off[1] + i * it.inner[1]),
                           load_d(bdt, b, off[2] + i * it.inner[2]));
            if (dt == HK_F32) ((float *)out)[off[0] + i] = (float)r;
            else if (hk_cast(HK_F64, &r, dt, (char *)out + (off[0] + i) * hk_dtype_size(dt), 1,
                             err))
                return -1;
        }
    }
    return 0;
}

static int is_arith_type(HkDType dt) {
    switch (dt) {
    case HK_F32: case HK_F64: case HK_I8: case HK_U8: case HK_I16: case HK_U16:
    case HK_I32: case HK_U32: case HK_I64: case HK_U64: return 1;
    default: return 0;
    }
}

int hk_binary_supported(HkBinOp op, HkDType dt) {
    switch (op) {
    case HK_AND: case HK_OR: case HK_XOR: return dt == HK_BOOL;
    case HK_EQ: return dt == HK_BOOL || is_arith_type(dt);
    case HK_LT: case HK_LE: case HK_GT: case HK_GE: return is_arith_type(dt);
    default: return is_arith_type(dt);
    }
}

int hk_binary(HkBinOp op, HkDType dt, const void *a, int ra, const int64_t *da,
              HkDType bdt, const void *b, int rb, const int64_t *db, void *out, int orank,
              const int64_t *odims, char *err) {
    if (!hk_binary_supported(op, dt) || (op == HK_POW && !is_arith_type(bdt))) {
        if (err) snprintf(err, HK_ERRLEN, "binary op %d does not support dtype %d", (int)op, (int)dt);
        return -1;
    }
    HkIter it;
    if (setup(&it, ra, da, rb, db, orank, odims, err)) return -1;
    if (op == HK_POW) return bin_pow(dt, a, bdt, b, out, it, err);
    switch (dt) {
    case HK_F32:
        if (it.rows == 0 || bin_f32_fast(op, a, b, out, &it)) return 0;
        return bin_f32(op, a, b, out, it, err);
    case HK_F64: return bin_f64(op, a, b, out, it, err);
    case HK_I8: return bin_i8(op, a, b, out, it, err);
    case HK_U8: return bin_u8(op, a, b, out, it, err);
    case HK_I16: return bin_i16(op, a, b, out, it, err);
    case HK_U16: return bin_u16(op, a, b, out, it, err);
    case HK_I32: return bin_i32(op, a, b, out, it, err);
    case HK_U32: return bin_u32(op, a, b, out, it, err);
    case HK_I64: return bin_i64(op, a, b, out, it, err);
    case HK_U64: return bin_u64(op, a, b, out, it, err);
    case HK_BOOL: return bin_bool(op, a, b, out, it, err);
    default: break;
    }
    if (err) snprintf(err, HK_ERRLEN, "unsupported dtype %d", (int)dt);
    return -1;
}

int hk_where(size_t esize, const uint8_t *cond, int rc, const int64_t *dc, const void *x,
             int rx, const int64_t *dx, const void *z, int rz, const int64_t *dz, void *out,
             int orank, const int64_t *odims, char *err) {
    int64_t st[4][HK_MAX_RANK];
    hk_contig_strides(orank, odims, st[0]);
    if (hk_bcast_strides(rc, dc, orank, odims, st[1]) ||
        hk_bcast_strides(rx, dx, orank, odims, st[2]) ||
        hk_bcast_strides(rz, dz, orank, odims, st[3])) {
        if (err) snprintf(err, HK_ERRLEN, "Where operands do not broadcast to the output shape");
        return -1;
    }
    HkIter it;
    hk_iter_init(&it, orank, odims, 4, (const int64_t(*)[HK_MAX_RANK])st, NULL);
    int64_t off[4];
    char *o = out;
    const char *xs = x, *zs = z;
    while (hk_iter_next(&it, off))
        for (int64_t i = 0; i < it.n; i++) {
            const char *src = cond[off[1] + i * it.inner[1]] ? xs + (off[2] + i * it.inner[2]) * esize
                                                             : zs + (off[3] + i * it.inner[3]) * esize;
            memcpy(o + (off[0] + i) * esize, src, esize);
        }
    return 0;
}
