/* Backward of softmax / log-softmax along one axis, and the fused softmax
 * cross-entropy loss. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk_parallel.h"
#include "hk_train.h"
#include "hk_vmath.h"
#include "hk_ws.h"

static int bad(char *err, const char *msg)
{
    if (err)
        snprintf(err, HK_ERRLEN, "%s", msg);
    return -1;
}

typedef struct SmbJob {
    const float *y, *dy;
    float *dx;
    int64_t n, inner;
    int log;
} SmbJob;

/* rows [lo, hi) of the [outer, inner] grid of softmax rows */
HK_VECTOR_CLONES
static void smb_rows(void *c, int64_t lo, int64_t hi)
{
    const SmbJob *j = c;
    const float *y = j->y, *dy = j->dy;
    float *dx = j->dx;
    int64_t n = j->n, inner = j->inner;
    for (int64_t r = lo; r < hi; r++) {
        int64_t base = (r / inner) * n * inner + r % inner;
        double s = 0;
        for (int64_t jj = 0; jj < n; jj++) {
            int64_t k = base + jj * inner;
            s += j->log ? (double)dy[k] : (double)dy[k] * y[k];
        }
        if (j->log)
            for (int64_t jj = 0; jj < n; jj++) {
                int64_t k = base + jj * inner;
                dx[k] = (float)(dy[k] - hk_exp_d((double)y[k]) * s);
            }
        else
            for (int64_t jj = 0; jj < n; jj++) {
                int64_t k = base + jj * inner;
                dx[k] = (float)(y[k] * (dy[k] - s));
            }
    }
}

int hk_softmax_backward_f32(const float *y, const float *dy, int rank, const int64_t *dims,
                            int axis, int log, float *dx, char *err)
{
    if (rank < 1 || rank > HK_MAX_RANK)
        return bad(err, "softmax backward: rank out of range");
    if (axis < 0)
        axis += rank;
    if (axis < 0 || axis >= rank)
        return bad(err, "softmax backward: axis out of range");
    /* view as [outer, n, inner]: the softmax runs along n with stride inner */
    int64_t outer = 1, n = dims[axis], inner = 1;
    for (int i = 0; i < axis; i++)
        outer *= dims[i];
    for (int i = axis + 1; i < rank; i++)
        inner *= dims[i];
    SmbJob j = {y, dy, dx, n, inner, log};
    hk_parallel_for(outer * inner, hk_row_grain(n), smb_rows, &j);
    return 0;
}

/* ------------------------------------------------------------ cross entropy */
static int target_at(HkDType tdt, const void *t, int64_t i, int64_t *out)
{
    if (tdt == HK_I64)
        *out = ((const int64_t *)t)[i];
    else if (tdt == HK_I32)
        *out = ((const int32_t *)t)[i];
    else
        return -1;
    return 0;
}

/* the row's log-sum-exp: the exps in float (hk_exp_f, within an ulp;
 * the double exps were the loss's time on a 50,257-word vocabulary),
 * summed in double lanes, the log in double */
HK_VECTOR_CLONES
static double row_lse(const float *row, int64_t V)
{
    float mx = hk_max_f32(row, V);
    if (mx == -INFINITY)
        return -INFINITY; /* all -inf: exp sum is 0 */
    return (double)mx + log(hk_sum_expf_f32_lanes(row, V, mx));
}

typedef struct LseJob {
    const float *logits;
    int64_t V;
    double *out;
} LseJob;

HK_VECTOR_CLONES
static void lse_rows(void *c, int64_t lo, int64_t hi)
{
    const LseJob *j = c;
    for (int64_t i = lo; i < hi; i++)
        j->out[i] = row_lse(j->logits + i * j->V, j->V);
}

/* Validate every target once; returns the counted rows or -1. */
static int64_t check_targets(HkDType tdt, const void *targets, int64_t N, int64_t V,
                             int use_ignore, int64_t ignore_index, char *err)
{
    if (N < 0 || V < 1)
        return bad(err, "cross entropy: need N >= 0 and V >= 1");
    int64_t count = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t t = 0;
        if (target_at(tdt, targets, i, &t))
            return bad(err, "cross entropy: targets must be int32 or int64");
        if (use_ignore && t == ignore_index)
            continue;
        if (t < 0 || t >= V) {
            if (err)
                snprintf(err, HK_ERRLEN,
                         "cross entropy: target %lld at row %lld outside [0, %lld)",
                         (long long)t, (long long)i, (long long)V);
            return -1;
        }
        count++;
    }
    return count;
}

int hk_cross_entropy_fwd_f32(const float *logits, HkDType tdt, const void *targets, int64_t N,
                             int64_t V, int use_ignore, int64_t ignore_index, float *loss,
                             float *lse, int64_t *count_out, char *err)
{
    int64_t count = check_targets(tdt, targets, N, V, use_ignore, ignore_index, err);
    if (count < 0)
        return -1;
    /* the rows' log-sum-exps in parallel, then the loss summed in row order */
    double *ls = hk_ws(HK_WS_CE, sizeof(double) * (size_t)(N > 0 ? N : 1));
    if (!ls)
        return bad(err, "cross entropy: out of memory");
    LseJob j = {logits, V, ls};
    hk_parallel_for(N, hk_row_grain(V), lse_rows, &j);
    double total = 0;
    for (int64_t i = 0; i < N; i++) {
        double l = ls[i];
        if (lse)
            lse[i] = (float)l;
        int64_t t = 0;
        target_at(tdt, targets, i, &t);
        if (use_ignore && t == ignore_index)
            continue;
        total += l - logits[i * V + t];
    }
    /* torch's reduction="mean" divides by the counted rows: 0/0 = NaN when
     * every row is ignored. */
    *loss = count ? (float)(total / (double)count) : NAN;
    if (count_out)
        *count_out = count;
    return 0;
}

/* one row of the mean loss's gradient, w * (softmax(row) - onehot(t)), l
 * the row's log-sum-exp over the whole vocabulary; a t outside [0, n) (a
 * column of another TP rank) has no onehot term here */
/* vector clones: the exps in AVX-512 / AVX2 lanes (the same per-element
 * ops, -ffp-contract=off: the same bits); it was the generic SSE2 build's
 * two lanes, 3 % of a GPT-2-shape step.  The exps are float (hk_exp_f) of
 * x - l with l split into two floats, (x - lh) - ll, so the argument keeps
 * l's double precision to within an ulp of the difference (torch's
 * log-softmax rounds x - lse to float once); the target's term, where
 * softmax - 1 can cancel, stays in double. */
HK_VECTOR_CLONES
static void ce_row_grad(const float *row, int64_t n, double l, int64_t t, double w, float *d)
{
    float lh = (float)l, ll = isfinite(l) ? (float)(l - (double)lh) : 0.0f, wf = (float)w;
    for (int64_t j = 0; j < n; j++)
        d[j] = wf * hk_exp_f((row[j] - lh) - ll);
    if (t >= 0 && t < n)
        d[t] = (float)(w * (hk_exp_d((double)row[t] - l) - 1.0));
}

/* the mean loss's gradient scale: dloss over the rows counted (0 when
 * every row is ignored); -1 on bad targets */
static int ce_grad_scale(HkDType tdt, const void *targets, int64_t N, int64_t V, int use_ignore,
                         int64_t ignore_index, float dloss, double *w, char *err)
{
    int64_t count = check_targets(tdt, targets, N, V, use_ignore, ignore_index, err);
    if (count < 0)
        return -1;
    *w = count ? (double)dloss / (double)count : 0.0;
    return 0;
}

/* row i's target into *t; 1 when the loss ignores the row */
static int ce_row_ignored(HkDType tdt, const void *targets, int64_t i, int use_ignore,
                          int64_t ignore_index, int64_t *t)
{
    *t = 0;
    target_at(tdt, targets, i, t);
    return use_ignore && *t == ignore_index;
}

typedef struct CebJob {
    const float *logits;
    HkDType tdt;
    const void *targets;
    const float *lse;
    int64_t V;
    int use_ignore;
    int64_t ignore_index;
    double w;
    float *dlogits;
} CebJob;

HK_VECTOR_CLONES
static void ceb_rows(void *c, int64_t lo, int64_t hi)
{
    const CebJob *j = c;
    int64_t V = j->V;
    for (int64_t i = lo; i < hi; i++) {
        const float *row = j->logits + i * V;
        int64_t t = 0;
        if (ce_row_ignored(j->tdt, j->targets, i, j->use_ignore, j->ignore_index, &t))
            memset(j->dlogits + i * V, 0, sizeof(float) * (size_t)V);
        else
            ce_row_grad(row, V, j->lse ? (double)j->lse[i] : row_lse(row, V), t, j->w,
                        j->dlogits + i * V);
    }
}

int hk_cross_entropy_bwd_f32(const float *logits, HkDType tdt, const void *targets,
                             const float *lse, int64_t N, int64_t V, int use_ignore,
                             int64_t ignore_index, float dloss, float *dlogits, char *err)
{
    double w;
    if (ce_grad_scale(tdt, targets, N, V, use_ignore, ignore_index, dloss, &w, err))
        return -1;
    CebJob j = {logits, tdt, targets, lse, V, use_ignore, ignore_index, w, dlogits};
    hk_parallel_for(N, hk_row_grain(V), ceb_rows, &j);
    return 0;
}

/* ------------------------------------------------------------ vocab-parallel */
int hk_vocab_ce_stats_f32(const float *logits, HkDType tdt, const void *targets,
                          const float *rowmax, int64_t N, int64_t Vl, int64_t start,
                          int64_t Vfull, int use_ignore, int64_t ignore_index, float *stats,
                          char *err)
{
    if (Vl < 1 || start < 0 || start + Vl > Vfull)
        return bad(err, "vocab-parallel cross entropy: the rank's columns must lie in the "
                        "vocabulary");
    if (check_targets(tdt, targets, N, Vfull, use_ignore, ignore_index, err) < 0)
        return -1;
    for (int64_t i = 0; i < N; i++) {
        const float *row = logits + i * Vl;
        double s = hk_sum_expf_f32_lanes(row, Vl, rowmax[i]); /* as row_lse's */
        int64_t t = 0;
        target_at(tdt, targets, i, &t);
        int own = !(use_ignore && t == ignore_index) && t >= start && t < start + Vl;
        stats[2 * i] = (float)s;
        stats[2 * i + 1] = own ? row[t - start] : 0.0f;
    }
    return 0;
}

int hk_vocab_ce_loss_f32(const float *stats, const float *rowmax, HkDType tdt,
                         const void *targets, int64_t N, int64_t Vfull, int use_ignore,
                         int64_t ignore_index, float *loss, char *err)
{
    int64_t count = check_targets(tdt, targets, N, Vfull, use_ignore, ignore_index, err);
    if (count < 0)
        return -1;
    double total = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t t = 0;
        target_at(tdt, targets, i, &t);
        if (use_ignore && t == ignore_index)
            continue;
        total += (double)rowmax[i] + log((double)stats[2 * i]) - (double)stats[2 * i + 1];
    }
    *loss = count ? (float)(total / (double)count) : NAN;
    return 0;
}

int hk_vocab_ce_bwd_f32(const float *logits, HkDType tdt, const void *targets,
                        const float *rowmax, const float *stats, int64_t N, int64_t Vl,
                        int64_t start, int64_t Vfull, int use_ignore, int64_t ignore_index,
                        float dloss, float *dlogits, char *err)
{
    double w;
    if (ce_grad_scale(tdt, targets, N, Vfull, use_ignore, ignore_index, dloss, &w, err))
        return -1;
    for (int64_t i = 0; i < N; i++) {
        int64_t t = 0;
        if (ce_row_ignored(tdt, targets, i, use_ignore, ignore_index, &t)) {
            memset(dlogits + i * Vl, 0, sizeof(float) * (size_t)Vl);
            continue;
        }
        /* l: the full row's lse; the target may lie in another rank's columns */
        double l = (double)rowmax[i] + log((double)stats[2 * i]);
        ce_row_grad(logits + i * Vl, Vl, l, t - start, w, dlogits + i * Vl);
    }
    return 0;
}
