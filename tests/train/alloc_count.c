/* LD_PRELOAD allocation counter for tests/train/test_train_noalloc.py:
 * counts every malloc / calloc / realloc / aligned allocation of the
 * made on the step loop's threads -- the main thread and the kernel pool's
 * workers (named "hk-pool", kernels/host/hk_parallel.c), not the threads
 * a library such as Open MPI runs for itself (its progress thread
 * allocates on its own timers) -- and those of at least 64 KiB, and
 * appends one line "EXE calls bytes big_calls all_threads_calls" (EXE: the
 * basename of /proc/self/exe) to the file named by HETC_ALLOC_COUNT_OUT at
 * exit: one line per process, so a launch (mpirun, its daemon, the stage
 * binaries, all inheriting the preload) leaves one line for each.  The test compares a run of N steps with
 * one of M > N steps of the same training: the difference is what the
 * extra steps allocated.  Process-wide counters are this tool's purpose
 * (an interposer has nowhere else to keep them); relaxed atomics, so
 * threaded BLAS does not lose counts. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_llong n_calls, n_bytes, n_big, n_all;

/* the main thread or a kernel pool worker (asked per call: a thread may
 * allocate before it names itself) */
static int step_thread(void) {
    if ((pid_t)syscall(SYS_gettid) == getpid()) return 1;
    char name[16] = "";
    prctl(PR_GET_NAME, name, 0, 0, 0);
    return strncmp(name, "hk-pool", 7) == 0;
}

static void count(size_t nb) {
    static const size_t big = 64 * 1024;
    atomic_fetch_add_explicit(&n_all, 1, memory_order_relaxed);
    if (!step_thread()) return;
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
    if (!path) return;
    char exe[4096], line[4352];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    const char *base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
    int len = snprintf(line, sizeof line, "%s %lld %lld %lld %lld\n", *base ? base : "?",
                       (long long)atomic_load(&n_calls), (long long)atomic_load(&n_bytes),
                       (long long)atomic_load(&n_big), (long long)atomic_load(&n_all));
    /* one write of one short line with O_APPEND: lines of processes that
     * exit together do not interleave */
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return;
    if (write(fd, line, (size_t)len) < 0) { /* nothing to report it to */ }
    close(fd);
}
