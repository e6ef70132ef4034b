/* Fork-join pool behind hk_parallel_for (see hk_parallel.h).
 *
 * The pool is process-wide state created once (pthread_once): the threads
 * are a property of the process (its cores), not of one graph or runtime
 * context, and the kernels are called from places that carry no context
 * (hk_unary(...) from the host executor, the stage binaries' kernel calls).
 * It holds no results -- only the job being run -- so it changes no
 * kernel's output, and a mutex makes it safe to call from several threads:
 * a caller that finds it busy runs its loop inline. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "hk_parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define HK_MAX_THREADS 256
#define SPIN_ITERS 20000 /* ~10-50 us of polling before a worker sleeps */

typedef struct Pool {
    int nthreads; /* caller included */
    int started;  /* workers running (under lock) */
    pthread_mutex_t busy; /* held by the caller running a job */
    pthread_mutex_t lock; /* guards gen / the cond vars */
    pthread_cond_t wake, done;
    atomic_ulong gen; /* bumped per job */
    /* the current job */
    HkRangeFn fn;
    void *ctx;
    int64_t n, grain, nchunks;
    atomic_llong next;  /* next chunk to take */
    atomic_int pending; /* workers still inside this job */
} Pool;

static Pool pool;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static int env_threads(void) {
    const char *s = getenv("HETC_THREADS");
    if (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (*end == '\0' && v >= 1) return v > HK_MAX_THREADS ? HK_MAX_THREADS : (int)v;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int c = CPU_COUNT(&set);
        if (c >= 1) return c > HK_MAX_THREADS ? HK_MAX_THREADS : c;
    }
    return 1;
}

static void pool_init(void) {
    memset(&pool, 0, sizeof pool);
    pool.nthreads = env_threads();
    pthread_mutex_init(&pool.busy, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
}

static void run_chunks(void) {
    for (;;) {
        int64_t k = atomic_fetch_add(&pool.next, 1);
        if (k >= pool.nchunks) return;
        int64_t b = k * pool.grain, e = b + pool.grain;
        pool.fn(pool.ctx, b, e < pool.n ? e : pool.n);
    }
}

static void *worker(void *arg) {
    (void)arg;
    unsigned long seen = 0;
    for (;;) {
        unsigned long g;
        int spins = 0;
        while ((g = atomic_load(&pool.gen)) == seen && spins < SPIN_ITERS) spins++;
        if (g == seen) {
            pthread_mutex_lock(&pool.lock);
            while ((g = atomic_load(&pool.gen)) == seen) pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = g;
        run_chunks();
        if (atomic_fetch_sub(&pool.pending, 1) == 1) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
    }
    return NULL;
}

/* start the workers once; on failure run with the ones that started */
static void start_workers(void) {
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int ok = 1;
    for (int i = 1; i < pool.nthreads; i++) {
        pthread_t t;
        if (pthread_create(&t, &at, worker, NULL) != 0) break;
        ok++;
    }
    pthread_attr_destroy(&at);
    pool.nthreads = ok;
    pool.started = 1;
}

int hk_parallel_threads(void) {
    pthread_once(&pool_once, pool_init);
    return pool.nthreads;
}

void hk_parallel_for(int64_t n, int64_t grain, HkRangeFn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    pthread_once(&pool_once, pool_init);
    int64_t nchunks = (n + grain - 1) / grain;
    if (pool.nthreads <= 1 || pthread_mutex_trylock(&pool.busy) != 0) {
        /* one thread, or the pool is in use (nested / concurrent call):
         * the same chunks, in order, on this thread */
        for (int64_t k = 0; k < nchunks; k++) {
            int64_t b = k * grain, e = b + grain;
            fn(ctx, b, e < n ? e : n);
        }
        return;
    }
    if (!pool.started) start_workers();
    int nw = pool.nthreads - 1;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    pool.grain = grain;
    pool.nchunks = nchunks;
    atomic_store(&pool.next, 0);
    atomic_store(&pool.pending, nw);
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add(&pool.gen, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    run_chunks();
    /* wait for every worker to leave the job before it is replaced */
    int spins = 0;
    while (atomic_load(&pool.pending) > 0 && spins < SPIN_ITERS) spins++;
    if (atomic_load(&pool.pending) > 0) {
        pthread_mutex_lock(&pool.lock);
        while (atomic_load(&pool.pending) > 0) pthread_cond_wait(&pool.done, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
    }
    pthread_mutex_unlock(&pool.busy);
}
