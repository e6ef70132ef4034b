/* Backward of (causal) scaled dot-product attention, recomputing the
 * probabilities from q and k rather than saving the [T,S] matrix. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "hk_train.h"

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
    size_t ts = (size_t)T * (size_t)S;
    float *P = malloc(sizeof(float) * (ts ? 2 * ts : 1));
    if (!P) {
        if (err)
            snprintf(err, HK_ERRLEN, "attention backward: out of memory for %lldx%lld scores",
                     (long long)T, (long long)S);
        return -1;
    }
    float *dP = P + ts;
    int t = (int)T, s = (int)S, d = (int)D, dvn = (int)Dv;
    for (int64_t h = 0; h < batch; h++) {
        const float *qh = q + h * T * D, *kh = k + h * S * D, *vh = v + h * S * Dv;
        const float *doh = dout + h * T * Dv;
        /* P = softmax(scale q k^T + causal mask) per row */
        if (T && S && D)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, s, d, scale, qh, d, kh, d,
                        0.0f, P, s);
        else
            for (size_t i = 0; i < ts; i++)
                P[i] = 0.0f;
        for (int64_t i = 0; i < T; i++) {
            float *row = P + i * S;
            int64_t last = causal ? i + (S - T) : S - 1; /* last visible key */
            if (last > S - 1)
                last = S - 1;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= last; j++)
                if (row[j] > mx)
                    mx = row[j];
            for (int64_t j = 0; j <= last; j++)
                sum += exp((double)row[j] - mx);
            for (int64_t j = 0; j < S; j++) /* fully masked rows stay 0, as forward */
                row[j] = j <= last ? (float)(exp((double)row[j] - mx) / sum) : 0.0f;
        }
        /* dv = P^T dout */
        if (dv) {
            float *dvh = dv + h * S * Dv;
            if (S && Dv && T)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s, dvn, t, 1.0f, P, s, doh,
                            dvn, 0.0f, dvh, dvn);
            else
                for (int64_t i = 0; i < S * Dv; i++)
                    dvh[i] = 0.0f;
        }
        if (!dq && !dk)
            continue;
        /* dP = dout v^T; dS = P * (dP - rowsum(dP * P)), stored over dP */
        if (T && S && Dv)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, s, dvn, 1.0f, doh, dvn, vh,
                        dvn, 0.0f, dP, s);
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
        if (dq) {
            float *dqh = dq + h * T * D;
            if (T && D && S)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, s, scale, dP, s, kh,
                            d, 0.0f, dqh, d);
            else
                for (int64_t i = 0; i < T * D; i++)
                    dqh[i] = 0.0f;
        }
        if (dk) {
            float *dkh = dk + h * S * D;
            if (S && D && T)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s, d, t, scale, dP, s, qh, d,
                            0.0f, dkh, d);
            else
                for (int64_t i = 0; i < S * D; i++)
                    dkh[i] = 0.0f;
        }
    }
    free(P);
    return 0;
}
