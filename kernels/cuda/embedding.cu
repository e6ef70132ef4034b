/* Embedding, device side.  Host twin: kernels/host/train_embedding.c
 * (forward shard and backward). */
#include "hkc_internal.cuh"

__global__ static void k_embedding(const float *table, int64_t V, int64_t D, int idt,
                                   const void *ids, int64_t n, float *y, int *bad) {
    HKC_LOOP(e, n * D) {
        int64_t i = e / D, d = e % D, t = hkc_load_id(idt, ids, i);
        if (t < 0) t += V;
        if (t < 0 || t >= V) {
            if (d == 0) atomicExch(bad, 1);
            y[e] = 0.f;
            continue;
        }
        y[e] = table[t * D + d];
    }
}

extern "C" int hkc_embedding_f32(HkcCtx *c, const float *table, int64_t V, int64_t D, int idt,
                                 const void *ids, int64_t n, float *y, int *bad, char *err) {
    if (n * D == 0) return 0;
    k_embedding<<<hkc_blocks(n * D), HKC_THREADS, 0, c->stream>>>(table, V, D, idt, ids, n, y, bad);
    return hkc_launched("embedding", err);
}

__global__ static void k_embedding_grad(int64_t V, int64_t D, int idt, const void *ids,
                                        int64_t n, const float *dy, float *dtable, int *bad) {
    HKC_LOOP(e, n * D) {
        int64_t i = e / D, d = e % D, t = hkc_load_id(idt, ids, i);
        if (t < 0) t += V;
        if (t < 0 || t >= V) {
            if (d == 0) atomicExch(bad, 1);
            continue;
        }
        atomicAdd(&dtable[t * D + d], dy[e]);
    }
}

extern "C" int hkc_embedding_grad_f32(HkcCtx *c, int64_t V, int64_t D, int idt, const void *ids,
                                      int64_t n, const float *dy, float *dtable, int *bad,
                                      char *err) {
    if (n * D == 0) return 0;
    k_embedding_grad<<<hkc_blocks(n * D), HKC_THREADS, 0, c->stream>>>(V, D, idt, ids, n, dy,
                                                                       dtable, bad);
    return hkc_launched("embedding grad", err);
}
