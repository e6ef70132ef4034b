/* A small fork-join pool for the host kernels (kernels/host/hk_parallel.c).
 *
 * hk_parallel_for(n, grain, fn, ctx) runs fn(ctx, begin, end) over [0, n)
 * in chunks of `grain` items: chunk k is [k*grain, min(n, (k+1)*grain)).
 * The chunks depend only on n and grain, never on the thread count, and
 * a kernel gives each output element (or each reduced row) to exactly one
 * call, so results are bit-identical for any number of threads.  Work of
 * at most one chunk runs inline on the caller; so does a call made while
 * the pool is busy (a nested call, or another thread already using it).
 *
 * Threads: env HETC_THREADS (>= 1), else the CPUs in the process's
 * affinity mask.  Workers start on the first parallel call and sleep on a
 * condition variable between calls (after a short spin), so they do not
 * compete with OpenBLAS's threads for the cores while idle.
 */
#ifndef HETC_HK_PARALLEL_H
#define HETC_HK_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

typedef void (*HkRangeFn)(void *ctx, int64_t begin, int64_t end);

void hk_parallel_for(int64_t n, int64_t grain, HkRangeFn fn, void *ctx);
/* Threads the pool runs with (the caller included); starts nothing. */
int hk_parallel_threads(void);
/* Which of the pool's threads is calling: 1 .. hk_parallel_threads() - 1
 * on a worker, 0 on any other thread (the caller of a job).  A kernel whose
 * chunks need scratch takes one buffer of hk_parallel_threads() parts on
 * the calling thread and gives each chunk the part of the thread running
 * it: the buffer is then allocated by the same thread on the same call
 * every step, whichever threads happen to take the chunks. */
int hk_parallel_worker(void);

/* memcpy / memset of large buffers split across the pool (64 KiB
 * chunks); dst and src must not overlap */
void hk_parallel_memcpy(void *dst, const void *src, size_t n);
void hk_parallel_memset0(void *dst, size_t n);

/* Grains, in items, sized so one chunk is ~10-50 us of work: cheap
 * arithmetic, transcendental maps, and whole rows (pass the row length). */
#define HK_GRAIN_CHEAP 32768
#define HK_GRAIN_MATH 4096
/* rows per chunk for a row kernel over rows of n elements */
static inline int64_t hk_row_grain(int64_t n) {
    int64_t g = n > 0 ? 16384 / n : 16384;
    return g < 1 ? 1 : g;
}

#endif
