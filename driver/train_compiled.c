/* hetc train --engine compiled: the single-process run as the stage
 * binaries' own code path (issue 15 item 4).  hetc compiles the model onto
 * a one-device cluster of this host (one stage, DP 1, TP 1: microbatch B
 * rows, --accum K microbatches per step as the plan's B*K global batch,
 * the same optimizer, schedule, loss and precision) with `hetc compile` run
 * as a child process, then runs that program's stage_0 as a child: no MPI
 * (the runtime's solo transport), the stage runtime's step loop, arena,
 * checkpoints and metrics.  So `hetc train` and `launch.sh` run the same
 * generated code, and what hetc train prints is the program's output.
 *
 * Scratch (the cluster file, the compile log, the program unless
 * --program-dir keeps it, the checkpoints of a --no-checkpoint run) lives
 * in a fresh directory under $TMPDIR, removed at the end. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "train_compiled.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "build_dir.h"
#include "data_loader.h"
#include "rt.h"

extern char **environ;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The child hetc train waits for.  SIGINT / SIGTERM / SIGHUP sent to
 * hetc train alone (a scheduler's, a kill PID) are passed on to it, and
 * hetc train lives on to remove its scratch directory and exit with the
 * child's status; a terminal's ^C reaches both anyway.  The one global of
 * this file: a signal handler has no other way to find the child. */
static volatile sig_atomic_t child_pid;

static void forward_signal(int sig) {
    if (child_pid > 0) kill((pid_t)child_pid, sig);
}

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP};
#define NFORWARDED ((int)(sizeof forwarded / sizeof *forwarded))

/* Run argv[0] with argv; its stdout and stderr into log_path when not
 * NULL.  The exit status (128 + signal when killed), or -1 when it could
 * not start (said so). */
static int run_child(char *const *argv, const char *log_path) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    int fd = -1;
    if (log_path) {
        fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            fprintf(stderr, "hetc train: cannot write %s: %s\n", log_path, strerror(errno));
            posix_spawn_file_actions_destroy(&fa);
            return -1;
        }
        posix_spawn_file_actions_adddup2(&fa, fd, STDOUT_FILENO);
        posix_spawn_file_actions_adddup2(&fa, fd, STDERR_FILENO);
    }
    fflush(stdout);
    fflush(stderr);
    /* the handlers are installed before the spawn, so a signal cannot fall
     * between the two; the child starts with the default dispositions */
    struct sigaction sa, old[NFORWARDED];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    for (int k = 0; k < NFORWARDED; k++) sigaction(forwarded[k], &sa, &old[k]);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t def;
    sigemptyset(&def);
    for (int k = 0; k < NFORWARDED; k++) sigaddset(&def, forwarded[k]);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int e = posix_spawn(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    if (fd >= 0) close(fd);
    int rc = -1, st;
    if (e) {
        fprintf(stderr, "hetc train: cannot run %s: %s\n", argv[0], strerror(e));
    } else {
        child_pid = pid;
        pid_t w;
        while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {}
        child_pid = 0;
        if (w < 0)
            fprintf(stderr, "hetc train: waiting for %s: %s\n", argv[0], strerror(errno));
        else
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    }
    for (int k = 0; k < NFORWARDED; k++) sigaction(forwarded[k], &old[k], NULL);
    return rc;
}

static void print_file(const char *path, FILE *to) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, to);
    fclose(f);
}

/* The one-device cluster the program is planned onto.  The planner only
 * needs a speed (one stage, nothing to balance: any catalog entry) and a
 * memory size: this host's RAM, so a model whose arena cannot fit is
 * refused by the planner's memory check, naming it, before it is built.
 * The program runs on this host's CPUs whatever the device says. */
static int write_cluster(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "hetc train: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
    double gib = pages > 0 && psz > 0 ? (double)pages * (double)psz / 1073741824.0 : 80.0;
    fprintf(f, "# hetc train --engine compiled: one device, one stage (written by hetc)\n"
            "name: hetc-train-host\n"
            "dtype: fp32\n"
            "meshes:\n"
            "  - name: host\n"
            "    device: {base: A100-80GB, name: host-RAM, memory_gb: %.3f}\n"
            "    nodes: 1\n"
            "    devices_per_node: 1\n"
            "    intra_node: {bandwidth_gbps: 2400, latency_us: 5}\n", gib);
    return fclose(f) ? -1 : 0;
}

/* argv under construction: words are copied into a pool owned by tc */
typedef struct Argv {
    char *w[160];
    int n;
} Argv;

static void add(Argv *a, const char *s) {
    if (a->n < (int)(sizeof a->w / sizeof *a->w) - 1) a->w[a->n++] = strdup(s);
    a->w[a->n] = NULL;
}

static void addf(Argv *a, const char *opt, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void addf(Argv *a, const char *opt, const char *fmt, ...) {
    char v[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    add(a, opt);
    add(a, v);
}

static void argv_free(Argv *a) {
    for (int i = 0; i < a->n; i++) free(a->w[i]);
    a->n = 0;
}

/* hetc compile's command line: the model onto the one-device cluster, at
 * hetc train's rows, precision and training options. */
static void compile_argv(Argv *a, const char *self, const char *cluster, const char *out,
                         const CompileOpts *co, const TrainOpts *t) {
    add(a, self);
    add(a, "compile");
    add(a, co->model);
    add(a, cluster);
    add(a, "-o");
    add(a, out);
    addf(a, "--microbatch", "%lld", (long long)co->batch);
    addf(a, "--global-batch", "%lld", (long long)(co->batch * t->accum));
    addf(a, "--seq", "%lld", (long long)co->seq);
    add(a, "--precision");
    add(a, precision_name(t->precision));
    if (t->bf16_sr) {
        add(a, "--bf16-rounding");
        add(a, "stochastic");
    }
    add(a, "--optimizer");
    add(a, t->optimizer);
    add(a, "--lr-schedule");
    add(a, t->schedule);
    add(a, "--loss");
    add(a, t->loss);
    addf(a, "--lr", "%.17g", t->lr);
    addf(a, "--beta1", "%.17g", t->beta1);
    addf(a, "--beta2", "%.17g", t->beta2);
    addf(a, "--adam-eps", "%.17g", t->eps);
    addf(a, "--weight-decay", "%.17g", t->wd);
    addf(a, "--momentum", "%.17g", t->momentum);
    addf(a, "--clip", "%.17g", t->clip);
    addf(a, "--warmup", "%lld", (long long)t->warmup);
    /* the schedule decays over --steps, as the executor's does */
    addf(a, "--steps", "%lld", (long long)t->steps);
    for (int i = 0; i < t->nfwd; i++) add(a, t->fwd[i]);
}

/* The program's command line: what hetc train's options say of the run. */
static void run_argv(Argv *a, const TrainCompiled *tc, const TrainOpts *t) {
    char bin[4200];
    snprintf(bin, sizeof bin, "%s/stage_0", tc->program);
    add(a, bin);
    add(a, "--data");
    add(a, t->data);
    if (t->data_format) {
        add(a, "--data-format");
        add(a, t->data_format);
    }
    addf(a, "--steps", "%lld", (long long)t->steps);
    add(a, "--checkpoint-dir");
    add(a, tc->ckpt_dir);
    if (t->ckpt_every > 0) addf(a, "--checkpoint-every", "%lld", (long long)t->ckpt_every);
    /* the executor's default: metrics beside the checkpoints, none without them */
    if (t->metrics || t->no_ckpt) {
        add(a, "--metrics");
        add(a, t->metrics ? t->metrics : "none");
    }
    if (t->val_data) {
        add(a, "--val-data");
        add(a, t->val_data);
        addf(a, "--val-every", "%lld", (long long)t->val_every);
        addf(a, "--val-batches", "%lld", (long long)t->val_batches);
    }
    if (t->resume) add(a, "--resume");
    if (t->overwrite) add(a, "--overwrite-checkpoints");
    if (t->quiet) add(a, "--quiet");
    add(a, "--no-trace"); /* one process: no pipeline timeline to draw */
}

int train_compiled_run(TrainCompiled *tc, const CompileOpts *co, const TrainOpts *t) {
    memset(tc, 0, sizeof *tc);
    const char *tmp = getenv("TMPDIR");
    snprintf(tc->scratch, sizeof tc->scratch, "%s/hetc-train-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tc->scratch)) {
        fprintf(stderr, "hetc train: cannot create a scratch directory %s: %s\n", tc->scratch,
                strerror(errno));
        tc->scratch[0] = 0;
        return 1;
    }
    if (t->program_dir) snprintf(tc->program, sizeof tc->program, "%s", t->program_dir);
    else snprintf(tc->program, sizeof tc->program, "%s/program", tc->scratch);
    if (t->no_ckpt) snprintf(tc->ckpt_dir, sizeof tc->ckpt_dir, "%s/checkpoint", tc->scratch);
    else snprintf(tc->ckpt_dir, sizeof tc->ckpt_dir, "%s", t->ckpt_dir);

    char cluster[4200], log[4200], self[4096];
    snprintf(cluster, sizeof cluster, "%s/cluster.yaml", tc->scratch);
    snprintf(log, sizeof log, "%s/compile.log", tc->scratch);
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0) {
        fprintf(stderr, "hetc train: cannot find the hetc executable (/proc/self/exe): %s\n",
                strerror(errno));
        return 1;
    }
    self[k] = 0;
    if (write_cluster(cluster)) return 1;

    Argv a = {{0}, 0};
    compile_argv(&a, self, cluster, tc->program, co, t);
    double t0 = now_s();
    int rc = run_child(a.w, log);
    argv_free(&a);
    if (rc) {
        print_file(log, stderr);
        fprintf(stderr, "hetc train: compiling the one-stage program failed (hetc compile "
                "exited %d; its output above)\n", rc);
        return 1;
    }
    if (!t->quiet)
        printf("hetc train: compiled %s into a one-stage program for this host in %.2f s: "
               "%s/stage_0 (%s, %lld x %lld tokens x %lld microbatches per step)\n",
               co->model, now_s() - t0, t->program_dir ? tc->program : "<scratch>",
               precision_name(t->precision), (long long)co->batch, (long long)co->seq,
               (long long)t->accum);

    run_argv(&a, tc, t);
    rc = run_child(a.w, NULL);
    argv_free(&a);
    if (rc > 128) { /* killed: hetc train reports the signal as a shell would */
        fprintf(stderr, "hetc train: the one-stage program was killed by signal %d\n", rc - 128);
        return rc;
    }
    if (rc) {
        if (rc > 0) fprintf(stderr, "hetc train: the one-stage program exited %d\n", rc);
        return 1;
    }
    char err[RT_ERRLEN] = "";
    int64_t step = 0;
    int r = rt_checkpoint_latest(tc->ckpt_dir, tc->final_step, sizeof tc->final_step, &step, err,
                                 sizeof err);
    if (r) {
        tc->final_step[0] = 0;
        fprintf(stderr, "hetc train: no checkpoint of the run in %s%s%s\n", tc->ckpt_dir,
                r < 0 ? ": " : "", r < 0 ? err : "");
        return 1;
    }
    return 0;
}

void train_compiled_cleanup(TrainCompiled *tc) {
    if (tc->scratch[0]) build_dir_rm_tree(tc->scratch);
    tc->scratch[0] = 0;
}
