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

extern "C" int hkc_attn_softmax_f32(HkcCtx *c, float *s, int64_t batch, int64_t T, int64_t S,
                                    int causal, float scale, char *err) {
    if (batch * T * S == 0) return 0;
    k_attn_softmax<<<hkc_grid_rows(batch * T), HKC_ROW_THREADS, 0, c->stream>>>(s, batch * T, T, S,
                                                                       causal, scale);
    return hkc_launched("attention softmax", err);
}
