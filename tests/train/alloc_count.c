/* LD_PRELOAD allocation counter for tests/train/test_train_noalloc.py:
 * counts every malloc / calloc / realloc / aligned allocation of the
 * process (and those of at least HETC_ALLOC_BIG bytes, default 64 KiB)
 * and writes "calls bytes big_calls" to the file named by
 * HETC_ALLOC_COUNT_OUT at exit.  The test compares a run of N steps with
 * one of M > N steps of the same training: the difference is what the
 * extra steps allocated.  Process-wide counters are this tool's purpose
 * (an interposer has nowhere else to keep them); relaxed atomics, so
 * threaded BLAS does not lose counts. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_llong n_calls, n_bytes, n_big;

static void count(size_t nb) {
    static const size_t big = 64 * 1024;
    atomic_fetch_add_explicit(&n_calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&n_bytes, (long long)nb, memory_order_relaxed);
    if (nb >= big) atomic_fetch_add_explicit(&n_big, 1, memory_order_relaxed);
}

void *malloc(size_t n) {
    count(n);
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t m) {
    count(n * m);
    return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n) {
    count(n);
    return __libc_realloc(p, n);
}
void *memalign(size_t a, size_t n) {
    count(n);
    return __libc_memalign(a, n);
}
void *aligned_alloc(size_t a, size_t n) {
    count(n);
    return __libc_memalign(a, n);
}
int posix_memalign(void **p, size_t a, size_t n) {
    count(n);
    *p = __libc_memalign(a, n);
    return *p ? 0 : 12; /* ENOMEM */
}

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("HETC_ALLOC_COUNT_OUT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) return;
    fprintf(f, "%lld %lld %lld\n", (long long)atomic_load(&n_calls),
            (long long)atomic_load(&n_bytes), (long long)atomic_load(&n_big));
    fclose(f);
}
