/* Host twins of the CUDA backend's direct-call entries (stage_abi.h's CUDA
 * set, hetrt_cu_*), for tests/cuda/test_cuda_host_twin.py: a --backend=cuda
 * stage program, linked with these and the HOST stage runtime, runs on the
 * CPU.  Each twin computes what its entry's kernels compute with the host
 * kernels (kernels/host), taking the same arguments, so the run checks
 * codegen/lower_node_cuda.c's calls -- shapes, strides, offsets, flags,
 * argument order -- against `hetc train` without a GPU.  The device kernels
 * themselves are checked against these host kernels on a GPU
 * (test_cuda_kernels).  Test code: never linked into a product binary. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk.h"
#include "hk_bf16.h"
#include "hk_entry.h"
#include "hk_sgemm.h"
#include "hk_train.h"
#include "stage_abi.h"

static int32_t fail(const char *entry, const char *err) {
    fprintf(stderr, "%s (host twin): %s\n", entry, err && *err ? err : "failed");
    return 1;
}
#define CHECK(entry, rc) ((rc) ? fail(entry, err) : 0)

/* the shape an operand read with broadcast strides st over dims has */
static void bcast_dims(int rank, const int64_t *dims, const int64_t *st, int64_t *out) {
    for (int d = 0; d < rank; d++) out[d] = st[d] == 0 ? 1 : dims[d];
}

int32_t hetrt_cu_binary(int32_t op, int32_t rank, const int64_t *dims, const float *a,
                        const int64_t *sa, const float *b, const int64_t *sb, float *y,
                        int32_t host) {
    (void)host; /* host constants: already host memory here */
    int64_t da[8], db[8];
    char err[256] = "";
    if (rank < 0 || rank > 8) return fail("hetrt_cu_binary", "rank");
    bcast_dims(rank, dims, sa, da);
    bcast_dims(rank, dims, sb, db);
    return CHECK("hetrt_cu_binary", hk_binary((HkBinOp)op, HK_F32, a, rank, da, HK_F32, b, rank,
                                              db, y, rank, dims, err));
}

int32_t hetrt_cu_unary(int32_t op, const float *x, float *y, int64_t n) {
    char err[256] = "";
    return CHECK("hetrt_cu_unary", hk_unary((HkUnOp)op, HK_F32, x, y, n, err));
}

int32_t hetrt_cu_unary_grad(int32_t op, const float *x, const float *y, const float *dy,
                            float *dx, int64_t n) {
    char err[256] = "";
    return CHECK("hetrt_cu_unary_grad", hk_unary_backward_f32((HkUnaryGrad)op, x, y, dy, n, dx,
                                                              err));
}

int32_t hetrt_cu_linear(const float *x, const float *w, const float *b, int64_t M, int64_t K,
                        int64_t N, float *y) {
    hk_linear_f32(x, w, b, M, K, N, y);
    return 0;
}

int32_t hetrt_cu_linear_grad(const float *x, const float *w, const float *dy, int64_t M,
                             int64_t K, int64_t N, float *dx, float *dw, float *db) {
    char err[256] = "";
    return CHECK("hetrt_cu_linear_grad",
                 hk_linear_backward_f32(x, w, dy, M, K, N, dx, dw, db, 0, err));
}

int32_t hetrt_cu_cast(int32_t from, const void *x, int32_t to, void *y, int64_t n) {
    char err[256] = "";
    return CHECK("hetrt_cu_cast", hk_cast((HkDType)from, x, (HkDType)to, y, n, err));
}

int32_t hetrt_cu_linear_bf16(const void *x, const void *w, const void *b, int64_t M, int64_t K,
                             int64_t N, void *y) {
    hk_linear_bf16(x, w, b, M, K, N, y);
    return 0;
}

int32_t hetrt_cu_linear_grad_bf16(const void *x, const void *w, const void *dy, int64_t M,
                                  int64_t K, int64_t N, void *dx, float *dw, float *db) {
    char err[256] = "";
    return CHECK("hetrt_cu_linear_grad_bf16",
                 hk_linear_backward_bf16(x, w, dy, M, K, N, dx, dw, db, 0, err));
}

int32_t hetrt_cu_adamw(const float *p, const float *m, const float *v, const float *g, int64_t n,
                       const float *lr, const int64_t *step, const float *clip_scale,
                       double beta1, double beta2, double eps, double weight_decay,
                       float *p_out, float *m_out, float *v_out) {
    char err[256] = "";
    return CHECK("hetrt_cu_adamw",
                 hk_entry_adamw_f32(p, m, v, g, n, lr, step, clip_scale, beta1, beta2, eps,
                                    weight_decay, p_out, m_out, v_out, err));
}

int32_t hetrt_cu_norm(int32_t rms, const float *x, const float *scale, const float *bias,
                      int64_t rows, int64_t n, double eps, float *y) {
    if (rms) hk_rmsnorm_f32(x, scale, rows, n, eps, y);
    else hk_layernorm_f32(x, scale, bias, rows, n, eps, y);
    return 0;
}

int32_t hetrt_cu_norm_grad(int32_t rms, const float *x, const float *scale, const float *dy,
                           int64_t rows, int64_t n, double eps, float *dx, float *dscale,
                           float *dbias) {
    /* the host kernels write every output: unused ones go to scratch */
    float *tx = dx ? NULL : malloc(sizeof(float) * (size_t)(rows * n));
    float *ts = dscale ? NULL : malloc(sizeof(float) * (size_t)n);
    float *tb = dbias || rms ? NULL : malloc(sizeof(float) * (size_t)n);
    char err[256] = "";
    int rc = rms ? hk_rmsnorm_backward_f32(x, scale, dy, NULL, rows, n, eps, dx ? dx : tx,
                                           dscale ? dscale : ts, 0, err)
                 : hk_layernorm_backward_f32(x, scale, dy, NULL, NULL, rows, n, eps,
                                             dx ? dx : tx, dscale ? dscale : ts,
                                             dbias ? dbias : tb, 0, err);
    free(tx), free(ts), free(tb);
    return CHECK("hetrt_cu_norm_grad", rc);
}

int32_t hetrt_cu_matmul(const float *a, int64_t sa, const float *b, int64_t sb, int64_t M,
                        int64_t N, int64_t K, int64_t batch, float *y) {
    for (int64_t i = 0; i < batch; i++)
        hk_sgemm(0, 0, M, N, K, 1.f, a + i * sa, K, b + i * sb, N, 0.f, y + i * M * N, N);
    return 0;
}

/* dst[doff + sum idx*ds] = src[soff + sum idx*ss] over dims (hk_iter's rows) */
int32_t hetrt_cu_strided_copy(int64_t esize, int32_t rank, const int64_t *dims, const void *src,
                              int64_t soff, const int64_t *ss, void *dst, int64_t doff,
                              const int64_t *ds) {
    if (rank < 0 || rank > HK_MAX_RANK) return fail("hetrt_cu_strided_copy", "rank");
    int64_t st[2][HK_MAX_RANK] = {{0}}, base[2] = {soff, doff}, off[2];
    memcpy(st[0], ss, sizeof(int64_t) * (size_t)rank);
    memcpy(st[1], ds, sizeof(int64_t) * (size_t)rank);
    HkIter it;
    hk_iter_init(&it, rank, dims, 2, (const int64_t(*)[HK_MAX_RANK])st, base);
    while (hk_iter_next(&it, off))
        for (int64_t i = 0; i < it.n; i++)
            memcpy((char *)dst + (off[1] + i * it.inner[1]) * esize,
                   (const char *)src + (off[0] + i * it.inner[0]) * esize, (size_t)esize);
    return 0;
}

int32_t hetrt_cu_reduce_sum(int32_t rank, const int64_t *od, const int64_t *os, const int64_t *rd,
                            const int64_t *rs, const float *x, float *y) {
    (void)os, (void)rs;
    int64_t gd[8];
    char err[256] = "";
    if (rank < 0 || rank > 8) return fail("hetrt_cu_reduce_sum", "rank");
    for (int d = 0; d < rank; d++) gd[d] = rd[d] > 1 ? rd[d] : od[d];
    return CHECK("hetrt_cu_reduce_sum", hk_reduce_sum_to_shape_f32(x, rank, gd, rank, od, y, err));
}

int32_t hetrt_cu_softmax(const float *x, int64_t rows, int64_t n, int32_t log, float *y) {
    int64_t d[2] = {rows, n};
    char err[256] = "";
    return CHECK("hetrt_cu_softmax", hk_softmax(HK_F32, x, 2, d, 1, log, y, err));
}

int32_t hetrt_cu_softmax_grad(const float *y, const float *dy, int64_t rows, int64_t n,
                              int32_t log, float *dx) {
    int64_t d[2] = {rows, n};
    char err[256] = "";
    return CHECK("hetrt_cu_softmax_grad", hk_softmax_backward_f32(y, dy, 2, d, 1, log, dx, err));
}

int32_t hetrt_cu_attention(const float *q, const float *k, const float *v, int64_t batch,
                           int64_t T, int64_t S, int64_t D, int64_t Dv, int32_t causal,
                           double scale, float *y) {
    char err[256] = "";
    return CHECK("hetrt_cu_attention",
                 hk_attention_f32(q, k, v, batch, T, S, D, Dv, causal, (float)scale, y, err));
}

int32_t hetrt_cu_attention_grad(const float *q, const float *k, const float *v, const float *dy,
                                int64_t batch, int64_t T, int64_t S, int64_t D, int64_t Dv,
                                int32_t causal, double scale, float *dq, float *dk, float *dv) {
    char err[256] = "";
    return CHECK("hetrt_cu_attention_grad",
                 hk_attention_backward_f32(q, k, v, dy, batch, T, S, D, Dv, causal, (float)scale,
                                           dq, dk, dv, err));
}

static int64_t id_at(int32_t idt, const void *ids, int64_t i) {
    return idt == HK_I32 ? ((const int32_t *)ids)[i] : ((const int64_t *)ids)[i];
}

int32_t hetrt_cu_embedding(const float *table, int64_t V, int64_t D, int32_t idt,
                           const void *ids, int32_t host_ids, int64_t n, float *y) {
    (void)host_ids;
    for (int64_t i = 0; i < n; i++) {
        int64_t t = id_at(idt, ids, i);
        if (t < 0) t += V;
        if (t < 0 || t >= V) return fail("hetrt_cu_embedding", "a token id outside the table");
        memcpy(y + i * D, table + t * D, sizeof(float) * (size_t)D);
    }
    return 0;
}

int32_t hetrt_cu_embedding_grad(int64_t V, int64_t D, int32_t idt, const void *ids,
                                int32_t host_ids, int64_t n, const float *dy, float *dtable) {
    (void)host_ids;
    char err[256] = "";
    memset(dtable, 0, sizeof(float) * (size_t)(V * D));
    return CHECK("hetrt_cu_embedding_grad",
                 hk_embedding_backward_f32((HkDType)idt, ids, n, dy, V, D, dtable, 1, err));
}

int32_t hetrt_cu_cross_entropy(const float *logits, int32_t tdt, const void *targets, int64_t N,
                               int64_t V, int32_t use_ignore, int64_t ignore_index,
                               float *loss) {
    char err[256] = "";
    return CHECK("hetrt_cu_cross_entropy",
                 hk_cross_entropy_fwd_f32(logits, (HkDType)tdt, targets, N, V, use_ignore,
                                          ignore_index, loss, NULL, NULL, err));
}

int32_t hetrt_cu_cross_entropy_grad(const float *logits, int32_t tdt, const void *targets,
                                    int64_t N, int64_t V, int32_t use_ignore,
                                    int64_t ignore_index, const float *dloss,
                                    int32_t host_dloss, float *dlogits) {
    (void)host_dloss;
    char err[256] = "";
    return CHECK("hetrt_cu_cross_entropy_grad",
                 hk_cross_entropy_bwd_f32(logits, (HkDType)tdt, targets, NULL, N, V, use_ignore,
                                          ignore_index, *dloss, dlogits, err));
}

int32_t hetrt_cu_launch(const char *ptx, const char *name, int64_t numel, int32_t nargs,
                        int32_t host, const int64_t *cbytes, void *a0, void *a1, void *a2,
                        void *a3, void *a4, void *a5, void *a6, void *a7, void *a8, void *a9,
                        void *a10, void *a11, void *a12, void *a13, void *a14, void *a15) {
    (void)ptx, (void)numel, (void)nargs, (void)host, (void)cbytes, (void)a0, (void)a1, (void)a2,
        (void)a3, (void)a4, (void)a5, (void)a6, (void)a7, (void)a8, (void)a9, (void)a10,
        (void)a11, (void)a12, (void)a13, (void)a14, (void)a15;
    fprintf(stderr, "hetrt_cu_launch (host twin): generated PTX kernel %s cannot run here\n",
            name);
    return 1;
}
