/* Single-precision GEMM on the kernel pool (kernels/host/hk_sgemm.c).
 *
 * hk_sgemm is cblas_sgemm (row-major) with one thread budget: OpenBLAS is
 * set to one thread once, and a product big enough to split is cut into
 * column (or row) blocks, one per CPU of the process's affinity mask, that
 * the pool's threads run as single-threaded OpenBLAS calls.  Before this,
 * OpenBLAS's own worker thread spun in sched_yield between GEMMs (~14 % of
 * a GPT-2 step's samples) while the pool's threads wanted the same cores.
 *
 * Every element of C is computed by exactly one block call and the blocks
 * depend only on the shape and the machine's CPUs (hk_sgemm.c), so the
 * result is the same for any thread count (tests/kernels kernels_threads
 * checks HETC_THREADS=1, 2, 3).  It is not the bits a whole multi-threaded
 * OpenBLAS call gave: OpenBLAS's rounding depends on its partition, and
 * before this change results depended on OpenBLAS's thread count. */
#ifndef HETC_HK_SGEMM_H
#define HETC_HK_SGEMM_H

#include <stddef.h>
#include <stdint.h>

void hk_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *a,
              int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* OpenBLAS's build line and kernel (openblas_get_config / _corename),
 * for logs and benchmarks: "OpenBLAS 0.3.21 ... | Zen". */
void hk_blas_info(char *buf, size_t n);

#endif
