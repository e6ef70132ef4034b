/* hk_sgemm: cblas_sgemm split across the kernel pool (see hk_sgemm.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "hk_sgemm.h"

#include <cblas.h>
#include <sched.h>
#include <pthread.h>
#include <stdio.h>

#include "hk_parallel.h"

/* The split is a function of the shape and of the machine's CPUs -- never
 * of the thread count (HETC_THREADS): OpenBLAS's rounding of an element
 * depends on how the product was partitioned (measured: 1 vs 2 OpenBLAS
 * threads, and column vs row halves, differ in the last bits), so a split
 * by the threads running it would make results depend on HETC_THREADS.
 * Blocks: the CPUs in the process's affinity mask (at most HK_GEMM_MAX_BLOCKS;
 * fewer when a block would fall under HK_GEMM_MIN_MACS multiply-adds, where
 * the call overhead outweighs a core), edges on multiples of 64 (a multiple
 * of every OpenBLAS x86 kernel's register-block width).  One block per CPU,
 * not more: each block repeats the packing of the operand it does not
 * split, and 8 blocks cost 3-30 % more CPU than one call at GPT-2's shapes
 * (one thread, OpenBLAS 0.3.21 Zen), 2 blocks within 1.5 %.  Before this,
 * results depended on OpenBLAS's thread count, also the machine's CPUs. */
#define HK_GEMM_MAX_BLOCKS 64
#define HK_GEMM_MIN_MACS ((int64_t)1 << 20)
#define SPLIT_ALIGN 64

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static int64_t cpu_blocks = 1; /* set once by blas_single: a property of the machine */
/* One thread budget: OpenBLAS runs on the calling thread only (its idle
 * workers go to sleep after their spin timeout and are never woken).  The
 * environment (OPENBLAS_NUM_THREADS, OPENBLAS_CORETYPE) is left as it is. */
static void blas_single(void) {
    openblas_set_num_threads(1);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 1)
        cpu_blocks = CPU_COUNT(&set) < HK_GEMM_MAX_BLOCKS ? CPU_COUNT(&set) : HK_GEMM_MAX_BLOCKS;
}

typedef struct GemmJob {
    int ta, tb, by_cols;
    int64_t M, N, K, lda, ldb, ldc, block;
    float alpha, beta;
    const float *a, *b;
    float *c;
} GemmJob;

static void call(const GemmJob *j, const float *a, const float *b, float *c, int64_t m,
                 int64_t n) {
    cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans,
                j->tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)j->K, j->alpha, a,
                (int)j->lda, b, (int)j->ldb, j->beta, c, (int)j->ldc);
}

static void gemm_blocks(void *vctx, int64_t b0, int64_t b1) {
    const GemmJob *j = vctx;
    int64_t lim = j->by_cols ? j->N : j->M;
    int64_t s = b0 * j->block, e = b1 * j->block < lim ? b1 * j->block : lim;
    if (j->by_cols) /* columns [s, e) of op(B) and C */
        call(j, j->a, j->b + (j->tb ? s * j->ldb : s), j->c + s, j->M, e - s);
    else /* rows [s, e) of op(A) and C */
        call(j, j->a + (j->ta ? s : s * j->lda), j->b, j->c + s * j->ldc, e - s, j->N);
}

void hk_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *a,
              int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    pthread_once(&blas_once, blas_single);
    if (M <= 0 || N <= 0) return;
    GemmJob j = {ta, tb, M < N, M, N, K, lda, ldb, ldc, 0, alpha, beta, a, b, c};
    /* split the longer side of C: a column block repeats the packing of A
     * (M x K), a row block that of B (K x N) */
    int64_t len = j.by_cols ? N : M, other = j.by_cols ? M : N;
    int64_t units = (len + SPLIT_ALIGN - 1) / SPLIT_ALIGN;
    int64_t per_unit = SPLIT_ALIGN * other * (K > 0 ? K : 1);
    int64_t nblk = cpu_blocks;
    int64_t most = (units * per_unit) / HK_GEMM_MIN_MACS;
    if (nblk > most) nblk = most;
    if (nblk > units) nblk = units;
    if (nblk <= 1 || K <= 0) {
        call(&j, a, b, c, M, N);
        return;
    }
    int64_t upb = (units + nblk - 1) / nblk; /* units per block */
    j.block = upb * SPLIT_ALIGN;
    hk_parallel_for((len + j.block - 1) / j.block, 1, gemm_blocks, &j);
}

void hk_blas_info(char *buf, size_t n) {
    snprintf(buf, n, "%s | %s", openblas_get_config(), openblas_get_corename());
}
