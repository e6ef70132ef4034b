/* Reductions, softmax, cumulative sums and the normalisations.  Sums of
 * floats accumulate in double so results match numpy's pairwise sums to
 * well inside 1e-5 relative. */
#include "hk.h"
#include "hk_parallel.h"
#include "hk_vmath.h"
#include "hk_ws.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int is_int(HkDType t) {
    return t == HK_I8 || t == HK_U8 || t == HK_I16 || t == HK_U16 || t == HK_I32 ||
           t == HK_U32 || t == HK_I64;
}

static double ld(HkDType t, const void *p, int64_t i) {
    return t == HK_F32 ? ((const float *)p)[i] : ((const double *)p)[i];
}
static void st(HkDType t, void *p, int64_t i, double v) {
    if (t == HK_F32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
}
static int64_t ldi(HkDType t, const void *p, int64_t i) {
    switch (t) {
    case HK_I8: return ((const int8_t *)p)[i];
    case HK_U8: return ((const uint8_t *)p)[i];
    case HK_I16: return ((const int16_t *)p)[i];
    case HK_U16: return ((const uint16_t *)p)[i];
    case HK_I32: return ((const int32_t *)p)[i];
    case HK_U32: return ((const uint32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}
static void sti(HkDType t, void *p, int64_t i, int64_t v) {
    switch (t) {
    case HK_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case HK_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case HK_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case HK_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case HK_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case HK_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((int64_t *)p)[i] = v; break;
    }
}

/* ---- f32 reductions whose axes form one block: x viewed as [O, R, In]
 * with the R axes reduced (sum over rows, columns, or a middle axis).
 * Outputs are split across threads; each output still accumulates its
 * inputs in r order, exactly as the flat walk below. */
typedef struct MidJob {
    const float *x;
    int64_t O, R, In, nic; /* nic: chunks of In per o */
    int max;
    double *acc;
} MidJob;

#define MID_CHUNK 512

HK_VECTOR_CLONES
static void mid_tasks(void *c, int64_t lo, int64_t hi) {
    const MidJob *j = c;
    int64_t R = j->R, In = j->In;
    for (int64_t t = lo; t < hi; t++) {
        int64_t o = t / j->nic, i0 = (t % j->nic) * MID_CHUNK;
        int64_t i1 = i0 + MID_CHUNK < In ? i0 + MID_CHUNK : In;
        double *acc = j->acc + o * In;
        const float *xo = j->x + o * R * In;
        if (In == 1) {
            double a = acc[0];
            if (j->max)
                for (int64_t r = 0; r < R; r++) {
                    double v = xo[r];
                    a = (v > a || v != v) ? v : a;
                }
            else
                for (int64_t r = 0; r < R; r++) a += xo[r];
            acc[0] = a;
            continue;
        }
        for (int64_t r = 0; r < R; r++) {
            const float *xr = xo + r * In;
            if (j->max)
                for (int64_t i = i0; i < i1; i++) {
                    double v = xr[i];
                    acc[i] = (v > acc[i] || v != v) ? v : acc[i];
                }
            else
                for (int64_t i = i0; i < i1; i++) acc[i] += xr[i];
        }
    }
}

static void reduce_mid(const float *x, int64_t O, int64_t R, int64_t In, int max, double *acc) {
    int64_t nic = In > 0 ? (In + MID_CHUNK - 1) / MID_CHUNK : 1;
    int64_t per = R * (In < MID_CHUNK ? In : MID_CHUNK); /* inputs per task */
    int64_t grain = per > 0 ? 16384 / per : 16384;
    MidJob j = {x, O, R, In, nic, max, acc};
    if (O > 0 && In > 0) hk_parallel_for(O * nic, grain < 1 ? 1 : grain, mid_tasks, &j);
}

void hk_sum_mid_f32(const float *x, int64_t O, int64_t R, int64_t In, double *acc) {
    reduce_mid(x, O, R, In, 0, acc);
}

/* [O, R, In] of a shape whose non-unit reduced axes are adjacent; 0 if not */
int hk_mid_block(int rank, const int64_t *dims, const int *reduce, int64_t *O, int64_t *R,
                 int64_t *In) {
    int stage = 0; /* 0: before the reduced block, 1: in it, 2: after */
    *O = *R = *In = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 1) continue;
        if (reduce[i]) {
            if (stage == 2) return 0;
            stage = 1;
            *R *= dims[i];
        } else if (stage == 0) *O *= dims[i];
        else {
            stage = 2;
            *In *= dims[i];
        }
    }
    return 1;
}

int hk_reduce(HkRedOp op, HkDType dt, const void *x, int rank, const int64_t *dims,
              const int *reduce, void *y, char *err) {
    int fl = dt == HK_F32 || dt == HK_F64;
    if (!fl && !is_int(dt)) {
        if (err) snprintf(err, HK_ERRLEN, "reduction does not support dtype %d", (int)dt);
        return -1;
    }
    int64_t ydims[HK_MAX_RANK], s[2][HK_MAX_RANK], count = 1;
    for (int i = 0; i < rank; i++) {
        ydims[i] = reduce[i] ? 1 : dims[i];
        if (reduce[i]) count *= dims[i];
    }
    hk_contig_strides(rank, dims, s[0]);
    hk_contig_strides(rank, ydims, s[1]);
    for (int i = 0; i < rank; i++)
        if (reduce[i]) s[1][i] = 0;
    int64_t ny = hk_numel(rank, ydims);
    /* accumulators: this thread's scratch, allocated once (hk_ws.h) */
    double *accd = fl ? hk_ws_zero(HK_WS_REDUCE, (size_t)(ny ? ny : 1) * sizeof *accd) : NULL;
    int64_t *acci = fl ? NULL : hk_ws_zero(HK_WS_REDUCE, (size_t)(ny ? ny : 1) * sizeof *acci);
    if (!accd && !acci) {
        if (err) snprintf(err, HK_ERRLEN, "out of memory");
        return -1;
    }
    for (int64_t j = 0; j < ny; j++) {
        if (op == HK_RMAX) {
            if (fl) accd[j] = -INFINITY;
            else acci[j] = INT64_MIN;
        }
    }
    int64_t bo, br, bi;
    if (dt == HK_F32 && hk_numel(rank, dims) > 0 && hk_mid_block(rank, dims, reduce, &bo, &br, &bi)) {
        reduce_mid(x, bo, br, bi, op == HK_RMAX, accd);
        goto store;
    }
    HkIter it;
    hk_iter_init(&it, rank, dims, 2, (const int64_t(*)[HK_MAX_RANK])s, NULL);
    int64_t off[2];
    while (hk_iter_next(&it, off)) {
        for (int64_t i = 0; i < it.n; i++) {
            int64_t xi = off[0] + i * it.inner[0], yi = off[1] + i * it.inner[1];
            if (fl) {
                double v = ld(dt, x, xi);
                if (op == HK_RMAX) accd[yi] = (v > accd[yi] || v != v) ? v : accd[yi];
                else accd[yi] += v;
            } else {
                int64_t v = ldi(dt, x, xi);
                if (op == HK_RMAX) acci[yi] = v > acci[yi] ? v : acci[yi];
                else acci[yi] = (int64_t)((uint64_t)acci[yi] + (uint64_t)v);
            }
        }
    }
store:
    for (int64_t j = 0; j < ny; j++) {
        if (fl) st(dt, y, j, op == HK_RMEAN ? accd[j] / (double)count : accd[j]);
        else sti(dt, y, j, op == HK_RMEAN && count ? acci[j] / count : acci[j]);
    }
    return 0;
}

/* outer x n x inner view around one axis */
static void around(int rank, const int64_t *dims, int axis, int64_t *outer, int64_t *n,
                   int64_t *inner) {
    *outer = hk_numel(axis, dims);
    *n = dims[axis];
    *inner = hk_numel(rank - axis - 1, dims + axis + 1);
}

/* f32 softmax rows (the [outer, inner] grid) in parallel, exp from
 * hk_vmath.h; the sum of each row stays sequential in double */
typedef struct SmJob {
    const float *x;
    float *y;
    int64_t n, inner;
    int want_log;
} SmJob;

HK_VECTOR_CLONES
static void softmax_f32_rows(void *c, int64_t lo, int64_t hi) {
    const SmJob *j = c;
    const float *x = j->x;
    float *y = j->y;
    int64_t n = j->n, inner = j->inner;
    for (int64_t r = lo; r < hi; r++) {
        int64_t b = (r / inner) * n * inner + r % inner;
        double m = -INFINITY, sum = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = x[b + i * inner];
            if (v > m) m = v;
        }
        sum = hk_sum_exp_f32(x + b, inner, n, m);
        if (j->want_log) {
            double ls = m + log(sum);
            for (int64_t i = 0; i < n; i++) y[b + i * inner] = (float)(x[b + i * inner] - ls);
        } else {
            for (int64_t i = 0; i < n; i++)
                y[b + i * inner] = (float)(hk_exp_d(x[b + i * inner] - m) / sum);
        }
    }
}

int hk_softmax(HkDType dt, const void *x, int rank, const int64_t *dims, int axis, int want_log,
               void *y, char *err) {
    if (dt != HK_F32 && dt != HK_F64) {
        if (err) snprintf(err, HK_ERRLEN, "softmax needs f32 or f64, got dtype %d", (int)dt);
        return -1;
    }
    if (rank == 0) { /* a scalar is a one-element row */
        st(dt, y, 0, want_log ? 0.0 : 1.0);
        return 0;
    }
    int64_t outer, n, inner;
    around(rank, dims, axis, &outer, &n, &inner);
    if (dt == HK_F32) {
        SmJob job = {x, y, n, inner, want_log};
        hk_parallel_for(outer * inner, hk_row_grain(n), softmax_f32_rows, &job);
        return 0;
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            int64_t b = o * n * inner + j;
            double m = -INFINITY, sum = 0;
            for (int64_t i = 0; i < n; i++) {
                double v = ld(dt, x, b + i * inner);
                if (v > m) m = v;
            }
            for (int64_t i = 0; i < n; i++) sum += exp(ld(dt, x, b + i * inner) - m);
            double ls = want_log ? m + log(sum) : 0;
            for (int64_t i = 0; i < n; i++) {
                double v = ld(dt, x, b + i * inner);
                st(dt, y, b + i * inner, want_log ? v - ls : exp(v - m) / sum);
            }
        }
    return 0;
}

int hk_cumsum(HkDType dt, const void *x, int rank, const int64_t *dims, int axis,
              int exclusive, int reverse, void *y, char *err) {
    int fl = dt == HK_F32 || dt == HK_F64;
    if (!fl && !is_int(dt) && dt != HK_U64) {
        if (err) snprintf(err, HK_ERRLEN, "CumSum does not support dtype %d", (int)dt);
        return -1;
    }
    int64_t outer, n, inner;
    if (rank == 0) {
        outer = n = inner = 1;
    } else around(rank, dims, axis, &outer, &n, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            int64_t b = o * n * inner + j;
            double accd = 0;
            int64_t acci = 0;
            for (int64_t t = 0; t < n; t++) {
                int64_t i = b + (reverse ? n - 1 - t : t) * inner;
                if (fl) {
                    double v = ld(dt, x, i);
                    if (!exclusive) accd += v;
                    st(dt, y, i, accd);
                    if (exclusive) accd += v;
                } else {
                    int64_t v = ldi(dt, x, i);
                    if (!exclusive) acci = (int64_t)((uint64_t)acci + (uint64_t)v);
                    sti(dt, y, i, acci);
                    if (exclusive) acci = (int64_t)((uint64_t)acci + (uint64_t)v);
                }
            }
        }
    return 0;
}

/* LayerNorm / RMSNorm forward: rows in parallel, each row as before */
typedef struct NormFwd {
    const float *x, *scale, *bias;
    int64_t n;
    double eps;
    float *y;
} NormFwd;

HK_VECTOR_CLONES
static void ln_fwd_rows(void *c, int64_t lo, int64_t hi) {
    const NormFwd *j = c;
    int64_t n = j->n;
    const float *scale = j->scale, *bias = j->bias;
    for (int64_t o = lo; o < hi; o++) {
        const float *r = j->x + o * n;
        float *w = j->y + o * n;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++) mean += r[i];
        mean /= (double)n;
        for (int64_t i = 0; i < n; i++) var += (r[i] - mean) * (r[i] - mean);
        var /= (double)n;
        double inv = 1.0 / sqrt(var + j->eps);
        if (bias)
            for (int64_t i = 0; i < n; i++)
                w[i] = (float)((r[i] - mean) * inv * scale[i] + bias[i]);
        else
            for (int64_t i = 0; i < n; i++)
                w[i] = (float)((r[i] - mean) * inv * scale[i] + 0.0);
    }
}

void hk_layernorm_f32(const float *x, const float *scale, const float *bias, int64_t outer,
                      int64_t n, double eps, float *y) {
    NormFwd j = {x, scale, bias, n, eps, y};
    hk_parallel_for(outer, hk_row_grain(n), ln_fwd_rows, &j);
}

HK_VECTOR_CLONES
static void rms_fwd_rows(void *c, int64_t lo, int64_t hi) {
    const NormFwd *j = c;
    int64_t n = j->n;
    for (int64_t o = lo; o < hi; o++) {
        const float *r = j->x + o * n;
        float *w = j->y + o * n;
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)r[i] * r[i];
        double inv = 1.0 / sqrt(ss / (double)n + j->eps);
        for (int64_t i = 0; i < n; i++) w[i] = (float)(r[i] * inv * j->scale[i]);
    }
}

void hk_rmsnorm_f32(const float *x, const float *scale, int64_t outer, int64_t n, double eps,
                    float *y) {
    NormFwd j = {x, scale, NULL, n, eps, y};
    hk_parallel_for(outer, hk_row_grain(n), rms_fwd_rows, &j);
}
