/* hetc compile's output directory swap: build_dir.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* renameat2 */
#endif
#include "build_dir.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <ftw.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define BUILDING ".building-"

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

void build_dir_rm_tree(const char *path) {
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

uint64_t build_dir_new_id(void) {
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^
             ((uint64_t)getpid() << 40);
    }
    return id ? id : 1;
}

/* parent directory and base name of path (no trailing slashes) */
static void split_path(const char *path, char *parent, size_t np, char *base, size_t nb) {
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s", path);
    size_t n = strlen(a);
    while (n > 1 && a[n - 1] == '/') a[--n] = 0;
    snprintf(b, sizeof b, "%s", a);
    snprintf(parent, np, "%s", dirname(a));
    snprintf(base, nb, "%s", basename(b));
}

void build_dir_abs(const char *final, char *out, size_t n) {
    char parent[4096], base[1024], rp[PATH_MAX];
    split_path(final, parent, sizeof parent, base, sizeof base);
    if (!realpath(parent, rp)) snprintf(rp, sizeof rp, "%s", parent);
    snprintf(out, n, "%s/%s", strcmp(rp, "/") ? rp : "", base);
}

/* The current directory (or /) cannot be swapped out from under the user:
 * such a DIR is written in place. */
static int in_place(const char *final) {
    char a[PATH_MAX], b[PATH_MAX];
    if (!realpath(final, a)) return 0;
    return !strcmp(a, "/") || (getcwd(b, sizeof b) && !strcmp(a, b));
}

int build_dir_begin(const char *final, char *tmp, size_t tmplen, IrError *err) {
    char parent[4096], base[1024];
    split_path(final, parent, sizeof parent, base, sizeof base);
    if (in_place(final)) {
        fprintf(stderr, "hetc compile: warning: -o %s is the current directory: the build is "
                "written in place, so an interrupted compile can leave a mixed build (its "
                "build id check still refuses to run it)\n", final);
        snprintf(tmp, tmplen, "%s", final);
        return 0;
    }
    if (cli_mkdirs(parent, err)) return 1;
    struct stat st;
    if (stat(final, &st) == 0 && !S_ISDIR(st.st_mode))
        return ir_errorf(err, "-o %s: exists and is not a directory", final);
    /* leftovers of killed compiles into the same DIR */
    DIR *d = opendir(parent);
    size_t bl = strlen(base);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, base, bl) || strncmp(e->d_name + bl, BUILDING, strlen(BUILDING)))
            continue;
        char *end;
        long pid = strtol(e->d_name + bl + strlen(BUILDING), &end, 10);
        if (*end || pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH) ||
            pid == (long)getpid()) {
            char p[8192];
            snprintf(p, sizeof p, "%s/%s", parent, e->d_name);
            build_dir_rm_tree(p);
        }
    }
    if (d) closedir(d);
    snprintf(tmp, tmplen, "%s/%s" BUILDING "%ld", parent, base, (long)getpid());
    if (mkdir(tmp, 0755) != 0)
        return ir_errorf(err, "cannot create the build directory %s: %s", tmp, strerror(errno));
    return 0;
}

static int fsync_path(const char *path, int dir) {
    int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return 1;
    int rc = fsync(fd);
    close(fd);
    return rc != 0;
}

static int fsync_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)ftw;
    if (flag == FTW_F && S_ISREG(st->st_mode)) return fsync_path(path, 0);
    if (flag == FTW_DP) return fsync_path(path, 1);
    return 0;
}

/* What hetc compile writes: replaced with the build, never carried over
 * (a stale stage_K of a larger plan, an object file of a killed link). */
static int hetc_output(const char *name) {
    static const char *const exact[] = {"launch.sh", "srun.conf", "job.sbatch", "hostfile",
                                        "stages.txt", "plan.json", "plan.txt", "init", "elastic.env",
                                        NULL};
    for (int i = 0; exact[i]; i++)
        if (!strcmp(name, exact[i])) return 1;
    if (!strcmp(name, "timeline.json") || !strcmp(name, "timeline.svg")) return 1;
    if (name[0] == '.' && strstr(name, ".tmp")) return 1; /* atomic_file.h temporaries */
    /* stage_K, stage_K.o, stage_K.ll, stage_K.fused.txt, stage_K.tmp.PID */
    if (strncmp(name, "stage_", 6) || !isdigit((unsigned char)name[6])) return 0;
    const char *t = name + 6;
    while (isdigit((unsigned char)*t)) t++;
    if (!*t || !strcmp(t, ".o") || !strcmp(t, ".ll") || !strcmp(t, ".fused.txt")) return 1;
    if (strncmp(t, ".tmp.", 5) || !t[5]) return 0;
    for (t += 5; isdigit((unsigned char)*t); t++) {
    }
    return !*t;
}

int build_dir_commit(const char *final, const char *tmp, IrError *err) {
    char parent[4096], base[1024];
    split_path(final, parent, sizeof parent, base, sizeof base);
    if (!strcmp(tmp, final)) return 0; /* written in place */
    if (nftw(tmp, fsync_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return ir_errorf(err, "cannot fsync the new build in %s", tmp);
    struct stat st;
    if (stat(final, &st) != 0) {
        if (rename(tmp, final) != 0)
            return ir_errorf(err, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
        fsync_path(parent, 1);
        return 0;
    }
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) != 0)
        return ir_errorf(err, "cannot swap the new build %s with %s: %s", tmp, final,
                         strerror(errno));
    fsync_path(parent, 1);
    /* tmp now holds the old build: keep what is not ours, drop the rest */
    DIR *d = opendir(tmp);
    int kept_all = d != NULL;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || hetc_output(e->d_name))
            continue;
        char from[8192], to[8192];
        snprintf(from, sizeof from, "%s/%s", tmp, e->d_name);
        snprintf(to, sizeof to, "%s/%s", final, e->d_name);
        if (lstat(to, &st) == 0 || rename(from, to) != 0) {
            fprintf(stderr, "hetc compile: warning: could not move %s into the new build "
                    "(%s): the old build stays in %s\n", from, strerror(errno), tmp);
            kept_all = 0;
        }
    }
    if (d) closedir(d);
    if (kept_all) build_dir_rm_tree(tmp);
    fsync_path(final, 1);
    return 0;
}

void build_dir_abandon(const char *final, const char *tmp) {
    if (strcmp(tmp, final)) build_dir_rm_tree(tmp);
}
