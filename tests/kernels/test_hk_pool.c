/* hk_parallel_for under concurrent and nested use: three threads each run
 * 3000 parallel loops (varying n and grain) whose chunks increment every
 * element once and, from the first chunk, start a nested parallel loop
 * over a separate region (which must run inline).  Every element must end
 * at exactly the number of loops; also every chunk boundary must be a
 * multiple of the grain (the split may not depend on the thread count).
 * Run with HETC_THREADS unset (all CPUs) and 3 by ctest. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "hk_parallel.h"

#define LOOPS 3000

typedef struct Ctx {
    int *a;
    int64_t grain;
    int bad_split;
} Ctx;

static void inner(void *c, int64_t lo, int64_t hi) {
    int *a = c;
    for (int64_t i = lo; i < hi; i++) a[i] += 1;
}

static void outer(void *c, int64_t lo, int64_t hi) {
    Ctx *x = c;
    if (lo % x->grain != 0) x->bad_split = 1;
    for (int64_t i = lo; i < hi; i++) x->a[i] += 1;
    if (lo == 0) hk_parallel_for(100, 10, inner, x->a + 2000);
}

static void *run(void *arg) {
    long id = (long)arg;
    int *a = calloc(2100, sizeof(int));
    long bad = 0;
    for (int r = 0; r < LOOPS; r++) {
        Ctx c = {a, 16 + id + r % 5, 0};
        hk_parallel_for(1000, c.grain, outer, &c);
        bad += c.bad_split;
    }
    for (int i = 0; i < 1000; i++) bad += a[i] != LOOPS;
    for (int i = 2000; i < 2100; i++) bad += a[i] != LOOPS;
    free(a);
    return (void *)bad;
}

int main(void) {
    pthread_t t[3];
    for (long i = 0; i < 3; i++) pthread_create(&t[i], NULL, run, (void *)i);
    long bad = 0;
    for (int i = 0; i < 3; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    printf("%d threads: %ld wrong elements or splits\n", hk_parallel_threads(), bad);
    return bad != 0;
}
