/* Attention, device side.  Host twin: kernels/host/train_attention.c
 * (backward) and hk_matmul.c's hk_attention_f32: the masked, scaled softmax
 * over the score rows (the matmuls around it are hkc_gemm_f32, matmul.c). */
#include <math.h>

#include "hkc_internal.cuh"

__global__ static void k_attn_softmax(float *s, int64_t rows, int64_t T, int64_t S, int causal,
                                      float scale) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    HKC_ROW_LOOP(r, rows) {
        int64_t i = r % T, lim = causal ? i + (S - T) : S - 1; /* keys 0..lim visible */
        float *row = s + r * S;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
            if (j <= lim) m = fmaxf(m, row[j] * scale);
        m = hkc_block_max(m, shf);
        double sum = 0;
        for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
            if (j <= lim) sum += exp((double)row[j] * scale - m);
        sum = hkc_block_sum(sum, shd);
        for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
            row[j] = j <= lim && sum > 0 ? (float)(exp((double)row[j] * scale - m) / sum) : 0.f;
    }
}

/* The same arithmetic with the row held in registers (PER scores a
 * thread): one read and one write of the row instead of three reads, one
 * exp per score instead of two, and masked keys neither read nor exp'd.
 * For rows up to 8 x HKC_ROW_THREADS keys (GPT-2's 1024: PER 4). */
template <int PER>
__global__ static void k_attn_softmax_reg(float *s, int64_t rows, int64_t T, int64_t S, int causal,
                                          float scale) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    HKC_ROW_LOOP(r, rows) {
        int64_t i = r % T, lim = causal ? i + (S - T) : S - 1; /* keys 0..lim visible */
        float *row = s + r * S;
        float x[PER];
        double e[PER];
        float m = -INFINITY;
#pragma unroll
        for (int k = 0; k < PER; k++) {
            int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
            x[k] = j < S && j <= lim ? row[j] : 0.f;
            if (j < S && j <= lim) m = fmaxf(m, x[k] * scale);
        }
        m = hkc_block_max(m, shf);
        double sum = 0;
#pragma unroll
        for (int k = 0; k < PER; k++) {
            int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
            e[k] = j < S && j <= lim ? exp((double)x[k] * scale - m) : 0.0;
            sum += e[k];
        }
        sum = hkc_block_sum(sum, shd);
#pragma unroll
        for (int k = 0; k < PER; k++) {
            int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
            if (j < S) row[j] = j <= lim && sum > 0 ? (float)(e[k] / sum) : 0.f;
        }
    }
}

extern "C" int hkc_attn_softmax_f32(HkcCtx *c, float *s, int64_t batch, int64_t T, int64_t S,
                                    int causal, float scale, char *err) {
    if (batch * T * S == 0) return 0;
    unsigned g = hkc_grid_rows(batch * T);
    int64_t per = (S + HKC_ROW_THREADS - 1) / HKC_ROW_THREADS;
#define REG(P) k_attn_softmax_reg<P><<<g, HKC_ROW_THREADS, 0, c->stream>>>(s, batch * T, T, S, causal, scale)
    if (per <= 1) REG(1);
    else if (per <= 2) REG(2);
    else if (per <= 4) REG(4);
    else if (per <= 8) REG(8);
    else k_attn_softmax<<<g, HKC_ROW_THREADS, 0, c->stream>>>(s, batch * T, T, S, causal, scale);
#undef REG
    return hkc_launched("attention softmax", err);
}
