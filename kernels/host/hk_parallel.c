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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HK_MAX_THREADS 256
/* Polling before a worker (or the caller waiting for one) sleeps: ~0.1-0.5
 * ms.  Between two parallel kernels the caller often runs a short serial
 * stretch (an unsplit GEMM, a small kernel); a worker that went to sleep
 * costs a futex wake and a reschedule per kernel.  20,000 iterations left
 * gpt_tiny's one-stage program 12 % slower in wall time at the same CPU
 * time (2-core EPYC, 7 alternating runs of 200 steps); 2,000,000 gained
 * nothing more; the GPT-2 shape, its kernels long, did not change.  Ranks
 * that share cores get one thread each from launch.sh: no worker spins. */
#define SPIN_ITERS 200000

/* One job, on the caller's stack.  Workers find it through pool.job and
 * announce themselves in pool.refs before reading it, so the caller only
 * ever waits for workers that are running its chunks -- never for one that
 * is still asleep or descheduled (under load, or with several ranks on a
 * host, that could cost a scheduler time slice per call). */
typedef struct Job {
    HkRangeFn fn;
    void *ctx;
    int64_t n, grain, nchunks;
    atomic_llong next; /* next chunk to take */
    atomic_llong done; /* chunks finished */
} Job;

typedef struct Pool {
    int nthreads; /* caller included */
    pthread_mutex_t busy; /* held by the caller running a job */
    pthread_mutex_t lock; /* guards the sleeps on the cond vars */
    pthread_cond_t wake, done;
    atomic_ulong gen;        /* bumped per job */
    _Atomic(Job *) job;      /* the job being run, NULL between jobs */
    atomic_int refs;         /* workers that may be reading *job */
    atomic_int caller_sleeps; /* the caller waits on `done` */
    atomic_int stop;         /* set at exit: workers return */
    int nworkers;
    pthread_t workers[HK_MAX_THREADS];
} Pool;

static Pool pool;
static _Thread_local int worker_index; /* 0: not a pool worker */
static pthread_once_t pool_once = PTHREAD_ONCE_INIT, start_once = PTHREAD_ONCE_INIT;

static int env_threads(void) {
    const char *s = getenv("HETC_THREADS");
    if (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (*end == '\0' && v >= 1) return v > HK_MAX_THREADS ? HK_MAX_THREADS : (int)v;
    }
    int c = 1;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 1)
        c = CPU_COUNT(&set) > HK_MAX_THREADS ? HK_MAX_THREADS : CPU_COUNT(&set);
    /* a typo must not pass silently (the run would still be correct: the
     * thread count never changes results, only speed) */
    if (s && *s)
        fprintf(stderr, "hetc: HETC_THREADS='%s' is not a whole number >= 1; using %d "
                "(the CPUs this process may run on)\n", s, c);
    return c;
}

static void pool_init(void) {
    memset(&pool, 0, sizeof pool);
    pool.nthreads = env_threads();
    pthread_mutex_init(&pool.busy, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
}

static void run_chunks(Job *j, int worker) {
    for (;;) {
        int64_t k = atomic_fetch_add(&j->next, 1);
        if (k >= j->nchunks) return;
        int64_t b = k * j->grain, e = b + j->grain;
        j->fn(j->ctx, b, e < j->n ? e : j->n);
        if (atomic_fetch_add(&j->done, 1) + 1 == j->nchunks && worker &&
            atomic_load(&pool.caller_sleeps)) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
    }
}

static void *worker(void *arg) {
    /* named, so tools can tell the pool's threads from a library's own
     * (tests/train alloc_count.c counts the step loop's threads only) */
    pthread_setname_np(pthread_self(), "hk-pool");
    worker_index = (int)(intptr_t)arg;
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
        if (atomic_load(&pool.stop)) return NULL;
        atomic_fetch_add(&pool.refs, 1); /* before reading pool.job (see Job) */
        Job *j = atomic_load(&pool.job);
        if (j) run_chunks(j, 1);
        atomic_fetch_sub(&pool.refs, 1);
    }
    return NULL;
}

/* At exit the workers return and are joined, so nothing runs beside the
 * exit handlers registered before the pool started (library destructors,
 * LeakSanitizer's exit-time check, which then sees only the threads that
 * hold state).  Skipped when exit() comes from a worker or while a job
 * runs; each join is bounded (2 s). */
static void stop_workers(void) {
    if (worker_index || pthread_mutex_trylock(&pool.busy) != 0) return;
    atomic_store(&pool.stop, 1);
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add(&pool.gen, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 2;
    for (int i = 0; i < pool.nworkers; i++) pthread_timedjoin_np(pool.workers[i], NULL, &dl);
    pool.nworkers = 0;
    pool.nthreads = 1;
    pthread_mutex_unlock(&pool.busy);
}

/* start the workers once; on failure run with the ones that started */
static void start_workers(void) {
    int ok = 1;
    for (int i = 1; i < pool.nthreads; i++) {
        if (pthread_create(&pool.workers[ok - 1], NULL, worker, (void *)(intptr_t)ok) != 0) break;
        ok++;
    }
    pool.nworkers = ok - 1;
    pool.nthreads = ok;
    if (pool.nworkers) atexit(stop_workers);
}

int hk_parallel_worker(void) { return worker_index; }

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
    pthread_once(&start_once, start_workers); /* lazily, once; may lower nthreads */
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
    Job j = {.fn = fn, .ctx = ctx, .n = n, .grain = grain, .nchunks = nchunks};
    atomic_init(&j.next, 0);
    atomic_init(&j.done, 0);
    atomic_store(&pool.job, &j);
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add(&pool.gen, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    run_chunks(&j, 0);
    /* wait for the chunks other threads took */
    int spins = 0;
    while (atomic_load(&j.done) < nchunks && spins < SPIN_ITERS) spins++;
    if (atomic_load(&j.done) < nchunks) {
        pthread_mutex_lock(&pool.lock);
        atomic_store(&pool.caller_sleeps, 1);
        while (atomic_load(&j.done) < nchunks) pthread_cond_wait(&pool.done, &pool.lock);
        atomic_store(&pool.caller_sleeps, 0);
        pthread_mutex_unlock(&pool.lock);
    }
    /* retire the job; then only workers already holding a reference can
     * still touch j (they find no chunk left), and they are running */
    atomic_store(&pool.job, NULL);
    while (atomic_load(&pool.refs) > 0) sched_yield();
    pthread_mutex_unlock(&pool.busy);
}

/* Large copies and zero fills on the pool: between two kernels a stage
 * program copies or clears megabytes (gradient carries, accumulators) on
 * one core while the others wait. */
#define HK_MEM_CHUNK ((int64_t)1 << 16)
typedef struct MemJob {
    char *dst;
    const char *src; /* NULL: zero fill */
    size_t n;
} MemJob;

static void mem_chunks(void *vj, int64_t c0, int64_t c1) {
    const MemJob *j = vj;
    size_t b = (size_t)c0 * HK_MEM_CHUNK, e = (size_t)c1 * HK_MEM_CHUNK;
    if (e > j->n) e = j->n;
    if (j->src) memcpy(j->dst + b, j->src + b, e - b);
    else memset(j->dst + b, 0, e - b);
}

void hk_parallel_memcpy(void *dst, const void *src, size_t n) {
    MemJob j = {dst, src, n};
    hk_parallel_for((int64_t)((n + HK_MEM_CHUNK - 1) / HK_MEM_CHUNK), 1, mem_chunks, &j);
}

void hk_parallel_memset0(void *dst, size_t n) {
    MemJob j = {dst, NULL, n};
    hk_parallel_for((int64_t)((n + HK_MEM_CHUNK - 1) / HK_MEM_CHUNK), 1, mem_chunks, &j);
}
