/* Direct kernel calls of --backend=cuda stage programs, the rest of a
 * transformer's training graph (issue 15 item 5): MatMul, the movement ops'
 * strided copies, SumToShape, softmax, attention, embedding and cross
 * entropy.  Each entry launches the kernels the device executor's adapter
 * of that op launches (interp/cuda/cudaexec_ops.c), with the same operands,
 * on the stage's one stream: a program whose every node is one of these
 * calls links no node interpreter and no IR parser.  Shapes were resolved at
 * compile time (codegen/lower_node_cuda.c).  Declarations: stage_abi.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_cuda_internal.h"

static HkcShape shape_of(int rank, const int64_t *dims) {
    HkcShape s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    for (int d = 0; d < rank; d++) s.dims[d] = dims[d];
    return s;
}

static HkcStrides strides_of(int rank, const int64_t *st) {
    HkcStrides s;
    memset(&s, 0, sizeof s);
    for (int d = 0; d < rank; d++) s.s[d] = st[d];
    return s;
}

static int rank_ok(const char *entry, int rank) {
    if (rank >= 0 && rank <= HKC_MAX_RANK) return 1;
    rt_log_error("stage %d: %s: rank %d outside 0..%d", hetrt_stage_rt->cfg.stage, entry, rank,
                 HKC_MAX_RANK);
    return 0;
}

/* The device flag the id / target kernels raise: read back (a stream
 * synchronisation, as the device executor's check) and cleared. */
static int *bad_flag(const char *entry) {
    CudaBe *b = (CudaBe *)hetrt_stage_rt->be;
    if (b->kbad) return b->kbad;
    cudaError_t e = cudaMalloc((void **)&b->kbad, sizeof(int));
    if (e == cudaSuccess) e = cudaMemset(b->kbad, 0, sizeof(int));
    if (e != cudaSuccess) {
        rt_log_error("%s: cannot allocate the device id flag: %s", entry, cudaGetErrorString(e));
        if (b->kbad) cudaFree(b->kbad);
        b->kbad = NULL;
    }
    return b->kbad;
}

int cu_check_ids(const char *entry, const char *what) {
    CudaBe *b = (CudaBe *)hetrt_stage_rt->be;
    int bad = 0;
    cudaError_t e = cudaMemcpyAsync(&bad, b->kbad, sizeof bad, cudaMemcpyDeviceToHost, b->k.stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(b->k.stream);
    if (e != cudaSuccess) return cuda_err(entry, e);
    if (!bad) return 0;
    cudaMemsetAsync(b->kbad, 0, sizeof(int), b->k.stream);
    rt_log_error("stage %d: %s: %s outside the table's range", hetrt_stage_rt->cfg.stage, entry,
                 what);
    return 1;
}

int32_t hetrt_cu_matmul(const float *a, int64_t sa, const float *b, int64_t sb, int64_t M,
                        int64_t N, int64_t K, int64_t batch, float *y) {
    HkcCtx *k = cu_kctx("hetrt_cu_matmul");
    if (!k) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_matmul",
                   hkc_gemm_f32(k, 0, 0, M, N, K, 1.f, a, sa, b, sb, 0.f, y, M * N, batch, err),
                   err);
}

int32_t hetrt_cu_strided_copy(int64_t esize, int32_t rank, const int64_t *dims, const void *src,
                              int64_t soff, const int64_t *ss, void *dst, int64_t doff,
                              const int64_t *ds) {
    const char *en = "hetrt_cu_strided_copy";
    HkcCtx *k = cu_kctx(en);
    if (!k || !rank_ok(en, rank)) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done(en,
                   hkc_strided_copy(k, (size_t)esize, shape_of(rank, dims), src, soff,
                                    strides_of(rank, ss), dst, doff, strides_of(rank, ds), err),
                   err);
}

int32_t hetrt_cu_reduce_sum(int32_t rank, const int64_t *od, const int64_t *os, const int64_t *rd,
                            const int64_t *rs, const float *x, float *y) {
    const char *en = "hetrt_cu_reduce_sum";
    HkcCtx *k = cu_kctx(en);
    if (!k || !rank_ok(en, rank)) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done(en,
                   hkc_reduce_f32(k, 0, x, shape_of(rank, od), strides_of(rank, os),
                                  shape_of(rank, rd), strides_of(rank, rs), y, err),
                   err);
}

int32_t hetrt_cu_softmax(const float *x, int64_t rows, int64_t n, int32_t log, float *y) {
    HkcCtx *k = cu_kctx("hetrt_cu_softmax");
    if (!k) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_softmax", hkc_softmax_f32(k, x, rows, n, log, y, err), err);
}

int32_t hetrt_cu_softmax_grad(const float *y, const float *dy, int64_t rows, int64_t n,
                              int32_t log, float *dx) {
    HkcCtx *k = cu_kctx("hetrt_cu_softmax_grad");
    if (!k) return 1;
    char err[HKC_ERRLEN] = "";
    return cu_done("hetrt_cu_softmax_grad", hkc_softmax_grad_f32(k, y, dy, rows, n, log, dx, err),
                   err);
}

/* P = masked softmax(scale q k^T) into p [batch][T][S] */
static int attn_probs(HkcCtx *k, const float *q, const float *kk, int64_t batch, int64_t T,
                      int64_t S, int64_t D, int causal, float scale, float *p, char *err) {
    if (hkc_gemm_f32(k, 0, 1, T, S, D, 1.f, q, T * D, kk, S * D, 0.f, p, T * S, batch, err))
        return -1;
    return hkc_attn_softmax_f32(k, p, batch, T, S, causal, scale, err);
}

int32_t hetrt_cu_attention(const float *q, const float *kk, const float *v, int64_t batch,
                           int64_t T, int64_t S, int64_t D, int64_t Dv, int32_t causal,
                           double scale, float *y) {
    const char *en = "hetrt_cu_attention";
    HkcCtx *k = cu_kctx(en);
    if (!k) return 1;
    float *p = cu_kscratch(en, (size_t)(batch * T * S) * sizeof(float));
    if (!p) return 1;
    char err[HKC_ERRLEN] = "";
    int rc = attn_probs(k, q, kk, batch, T, S, D, causal, (float)scale, p, err);
    if (!rc)
        rc = hkc_gemm_f32(k, 0, 0, T, Dv, S, 1.f, p, T * S, v, S * Dv, 0.f, y, T * Dv, batch,
                          err);
    return cu_done(en, rc, err);
}

/* dv = P^T dy, dP = dy v^T, dS = P (dP - rowsum(dP P)), dq = scale dS k,
 * dk = scale dS^T q (hk_attention_backward_f32's formulas) */
int32_t hetrt_cu_attention_grad(const float *q, const float *kk, const float *v, const float *dy,
                                int64_t batch, int64_t T, int64_t S, int64_t D, int64_t Dv,
                                int32_t causal, double scale, float *dq, float *dk, float *dv) {
    const char *en = "hetrt_cu_attention_grad";
    HkcCtx *k = cu_kctx(en);
    if (!k) return 1;
    size_t m = (size_t)(batch * T * S);
    float *p = cu_kscratch(en, 2 * m * sizeof(float));
    if (!p) return 1;
    float *dp = p + m, sc = (float)scale;
    int64_t TS = T * S;
    char err[HKC_ERRLEN] = "";
    int rc = attn_probs(k, q, kk, batch, T, S, D, causal, sc, p, err) ||
             hkc_gemm_f32(k, 1, 0, S, Dv, T, 1.f, p, TS, dy, T * Dv, 0.f, dv, S * Dv, batch,
                          err) ||
             hkc_gemm_f32(k, 0, 1, T, S, Dv, 1.f, dy, T * Dv, v, S * Dv, 0.f, dp, TS, batch,
                          err) ||
             hkc_softmax_grad_f32(k, p, dp, batch * T, S, 0, dp, err) ||
             hkc_gemm_f32(k, 0, 0, T, D, S, sc, dp, TS, kk, S * D, 0.f, dq, T * D, batch, err) ||
             hkc_gemm_f32(k, 1, 0, S, D, T, sc, dp, TS, q, T * D, 0.f, dk, S * D, batch, err);
    return cu_done(en, rc ? -1 : 0, err);
}

static size_t id_bytes(int idt, int64_t n) { return (size_t)n * (idt == 6 ? 4 : 8); }

int32_t hetrt_cu_embedding(const float *table, int64_t V, int64_t D, int32_t idt,
                           const void *ids, int32_t host_ids, int64_t n, float *y) {
    const char *en = "hetrt_cu_embedding";
    HkcCtx *k = cu_kctx(en);
    if (!k) return 1;
    int *bad = bad_flag(en);
    if (!bad || (host_ids && !(ids = cu_const(en, ids, id_bytes(idt, n))))) return 1;
    char err[HKC_ERRLEN] = "";
    if (cu_done(en, hkc_embedding_f32(k, table, V, D, idt, ids, n, y, bad, err), err)) return 1;
    return cu_check_ids(en, "a token id is");
}

int32_t hetrt_cu_embedding_grad(int64_t V, int64_t D, int32_t idt, const void *ids,
                                int32_t host_ids, int64_t n, const float *dy, float *dtable) {
    const char *en = "hetrt_cu_embedding_grad";
    HkcCtx *k = cu_kctx(en);
    if (!k) return 1;
    int *bad = bad_flag(en);
    if (!bad || (host_ids && !(ids = cu_const(en, ids, id_bytes(idt, n))))) return 1;
    /* the kernel adds rows into the table's gradient: start from zeros */
    cudaError_t e = cudaMemsetAsync(dtable, 0, (size_t)(V * D) * sizeof(float), k->stream);
    if (e != cudaSuccess) return cuda_err(en, e);
    char err[HKC_ERRLEN] = "";
    if (cu_done(en, hkc_embedding_grad_f32(k, V, D, idt, ids, n, dy, dtable, bad, err), err))
        return 1;
    return cu_check_ids(en, "a token id is");
}

int32_t hetrt_cu_cross_entropy(const float *logits, int32_t tdt, const void *targets, int64_t N,
                               int64_t V, int32_t use_ignore, int64_t ignore_index,
                               float *loss) {
    const char *en = "hetrt_cu_cross_entropy";
    HkcCtx *k = cu_kctx(en);
    if (!k) return 1;
    int *bad = bad_flag(en);
    void *s = cu_kscratch(en, hkc_cross_entropy_scratch(N));
    if (!bad || !s) return 1;
    char err[HKC_ERRLEN] = "";
    if (cu_done(en,
                hkc_cross_entropy_f32(k, logits, tdt, targets, N, V, use_ignore, ignore_index, s,
                                      loss, bad, err),
                err))
        return 1;
    return cu_check_ids(en, "a target is");
}

int32_t hetrt_cu_cross_entropy_grad(const float *logits, int32_t tdt, const void *targets,
                                    int64_t N, int64_t V, int32_t use_ignore,
                                    int64_t ignore_index, const float *dloss,
                                    int32_t host_dloss, float *dlogits) {
    const char *en = "hetrt_cu_cross_entropy_grad";
    HkcCtx *k = cu_kctx(en);
    if (!k) return 1;
    int *bad = bad_flag(en);
    void *s = cu_kscratch(en, hkc_cross_entropy_scratch(N));
    if (!bad || !s || (host_dloss && !(dloss = cu_const(en, dloss, sizeof(float))))) return 1;
    char err[HKC_ERRLEN] = "";
    if (cu_done(en,
                hkc_cross_entropy_grad_f32(k, logits, tdt, targets, N, V, use_ignore,
                                           ignore_index, dloss, s, dlogits, bad, err),
                err))
        return 1;
    return cu_check_ids(en, "a target is");
}

/* ------------------------------------------------------------ generated kernels */

/* The module of one generated kernel: loaded (the driver JIT-compiles the
 * PTX for this GPU) at its first launch, found again by the text's address. */
static const CudaPtx *ptx_module(const char *entry, const char *text, const char *name) {
    CudaBe *b = (CudaBe *)hetrt_stage_rt->be;
    for (int i = 0; i < b->nptx; i++)
        if (b->ptx[i].text == text) return &b->ptx[i];
    if (b->nptx == b->capptx) {
        int cap = b->capptx ? 2 * b->capptx : 16;
        CudaPtx *m = realloc(b->ptx, (size_t)cap * sizeof *m);
        if (!m) {
            rt_log_error("%s: out of memory for the kernel modules", entry);
            return NULL;
        }
        b->ptx = m, b->capptx = cap;
    }
    CudaPtx p = {text, NULL, NULL};
    cudaError_t e = cudaLibraryLoadData(&p.lib, text, NULL, NULL, 0, NULL, NULL, 0);
    if (e == cudaSuccess) e = cudaLibraryGetKernel(&p.kernel, p.lib, name);
    if (e != cudaSuccess) {
        rt_log_error("stage %d: %s: generated kernel %s: cannot load its PTX: %s",
                     hetrt_stage_rt->cfg.stage, entry, name, cudaGetErrorString(e));
        if (p.lib) cudaLibraryUnload(p.lib);
        return NULL;
    }
    b->ptx[b->nptx++] = p;
    return &b->ptx[b->nptx - 1];
}

int32_t hetrt_cu_launch(const char *ptx, const char *name, int64_t numel, int32_t nargs,
                        int32_t host, const int64_t *cbytes, void *a0, void *a1, void *a2,
                        void *a3, void *a4, void *a5, void *a6, void *a7, void *a8, void *a9,
                        void *a10, void *a11, void *a12, void *a13, void *a14, void *a15) {
    const char *en = "hetrt_cu_launch";
    HkcCtx *k = cu_kctx(en);
    if (!k) return 1;
    void *a[16] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15};
    if (nargs < 0 || nargs > 16) {
        rt_log_error("stage %d: %s: %s: %d arguments (at most 16)", hetrt_stage_rt->cfg.stage,
                     en, name, nargs);
        return 1;
    }
    for (int i = 0; i < nargs; i++)
        if ((host >> i) & 1 && !(a[i] = (void *)cu_const(en, a[i], (size_t)cbytes[i]))) return 1;
    const CudaPtx *m = ptx_module(en, ptx, name);
    if (!m) return 1;
    if (numel <= 0) return 0;
    /* a grid-stride loop: any grid covers every element; enough blocks to
     * fill the GPU several times over, no more */
    int64_t blocks = (numel + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    void *args[16];
    for (int i = 0; i < nargs; i++) args[i] = &a[i];
    dim3 grid = {(unsigned)blocks, 1, 1}, block = {256, 1, 1};
    cudaError_t e = cudaLaunchKernel((const void *)m->kernel, grid, block, args, 0, k->stream);
    if (e != cudaSuccess) {
        rt_log_error("stage %d: %s: generated kernel %s: %s", hetrt_stage_rt->cfg.stage, en, name,
                     cudaGetErrorString(e));
        return 1;
    }
    return 0;
}
