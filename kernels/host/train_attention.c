/* Backward of (causal) scaled dot-product attention, recomputing the
 * probabilities from q and k rather than saving the [T,S] matrix.  Heads
 * run in parallel on the kernel pool, one per chunk (each output row
 * belongs to one head: the result does not depend on the threads); P and
 * dP of a head are the running thread's part of the caller's scratch
 * (hk_ws, hk_parallel_worker). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "hk_parallel.h"
#include "hk_sgemm.h"
#include "hk_train.h"
#include "hk_ws.h"

typedef struct AttnBwdJob {
    const float *q, *k, *v, *dout;
    int64_t T, S, D, Dv;
    int causal;
    float scale;
    float *dq, *dk, *dv;
    float *scratch; /* hk_parallel_threads() parts of 2*T*S floats (P, dP) */
} AttnBwdJob;

static void bwd_heads(void *vctx, int64_t h0, int64_t h1)
{
    AttnBwdJob *J = vctx;
    int64_t T = J->T, S = J->S, D = J->D, Dv = J->Dv;
    size_t ts = (size_t)T * (size_t)S;
    float *P = J->scratch + (size_t)hk_parallel_worker() * (ts ? 2 * ts : 1);
    float *dP = P + ts;
    int64_t t = T, s = S, d = D, dvn = Dv;
    for (int64_t h = h0; h < h1; h++) {
        const float *qh = J->q + h * T * D, *kh = J->k + h * S * D, *vh = J->v + h * S * Dv;
        const float *doh = J->dout + h * T * Dv;
        /* P = softmax(scale q k^T + causal mask) per row */
        if (T && S && D)
            hk_sgemm(0, 1, t, s, d, J->scale, qh, d, kh, d, 0.0f, P, s);
        else
            for (size_t i = 0; i < ts; i++)
                P[i] = 0.0f;
        for (int64_t i = 0; i < T; i++) {
            float *row = P + i * S;
            int64_t last = J->causal ? i + (S - T) : S - 1; /* last visible key */
            if (last > S - 1)
                last = S - 1;
            hk_attn_softmax_row(row, last + 1, S); /* the forward's P, bit for bit */
        }
        /* dv = P^T dout */
        if (J->dv) {
            float *dvh = J->dv + h * S * Dv;
            if (S && Dv && T)
                hk_sgemm(1, 0, s, dvn, t, 1.0f, P, s, doh, dvn, 0.0f, dvh, dvn);
            else
                for (int64_t i = 0; i < S * Dv; i++)
                    dvh[i] = 0.0f;
        }
        if (!J->dq && !J->dk)
            continue;
        /* dP = dout v^T; dS = P * (dP - rowsum(dP * P)), stored over dP */
        if (T && S && Dv)
            hk_sgemm(0, 1, t, s, dvn, 1.0f, doh, dvn, vh, dvn, 0.0f, dP, s);
        else
            for (size_t i = 0; i < ts; i++)
                dP[i] = 0.0f;
        for (int64_t i = 0; i < T; i++) {
            float *pr = P + i * S, *dr = dP + i * S;
            double dot = 0;
            for (int64_t j = 0; j < S; j++)
                dot += (double)dr[j] * pr[j];
            for (int64_t j = 0; j < S; j++)
                dr[j] = (float)(pr[j] * (dr[j] - dot));
        }
        /* dq = scale dS k; dk = scale dS^T q */
        if (J->dq) {
            float *dqh = J->dq + h * T * D;
            if (T && D && S)
                hk_sgemm(0, 0, t, d, s, J->scale, dP, s, kh, d, 0.0f, dqh, d);
            else
                for (int64_t i = 0; i < T * D; i++)
                    dqh[i] = 0.0f;
        }
        if (J->dk) {
            float *dkh = J->dk + h * S * D;
            if (S && D && T)
                hk_sgemm(1, 0, s, d, t, J->scale, dP, s, qh, d, 0.0f, dkh, d);
            else
                for (int64_t i = 0; i < S * D; i++)
                    dkh[i] = 0.0f;
        }
    }
}

int hk_attention_backward_f32(const float *q, const float *k, const float *v,
                              const float *dout, int64_t batch, int64_t T, int64_t S, int64_t D,
                              int64_t Dv, int causal, float scale, float *dq, float *dk,
                              float *dv, char *err)
{
    if (batch < 0 || T < 0 || S < 0 || D < 0 || Dv < 0 || T > INT32_MAX || S > INT32_MAX ||
        D > INT32_MAX || Dv > INT32_MAX) {
        if (err)
            snprintf(err, HK_ERRLEN, "attention backward: bad dimensions");
        return -1;
    }
    AttnBwdJob j = {q, k, v, dout, T, S, D, Dv, causal, scale, dq, dk, dv, NULL};
    size_t ts = (size_t)T * (size_t)S;
    j.scratch = hk_ws(HK_WS_ATTN_BWD,
                      sizeof(float) * (size_t)hk_parallel_threads() * (ts ? 2 * ts : 1));
    if (!j.scratch) {
        if (err)
            snprintf(err, HK_ERRLEN, "attention backward: out of memory for %lldx%lld scores",
                     (long long)T, (long long)S);
        return -1;
    }
    hk_parallel_for(batch, 1, bwd_heads, &j);
    return 0;
}
