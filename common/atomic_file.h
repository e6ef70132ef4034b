/* Atomic file replacement, shared by the compiler (hetc compile's launcher
 * files, the planner's plan and timeline files) and the runtime
 * (checkpoint layer files and MANIFEST): the content goes to a temporary
 * file in the same folder, is fsync'ed, gets its mode and is renamed over
 * the final name; then the folder is fsync'ed so the rename itself is
 * durable.  A crash leaves the old file or the whole new one, never a
 * prefix under the final name.
 *
 * Header-only (static inline) and free of ir/ and runtime/ headers: common/
 * sits below both (docs DESIGN §2: the runtime knows nothing of the
 * compiler), and a header adds no library to the stage binaries' link line
 * (driver/CMakeLists.txt HETC_STAGE_LINK). */
#ifndef HETC_ATOMIC_FILE_H
#define HETC_ATOMIC_FILE_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes the whole content to f; returns 0, non-zero on failure (errno
 * says why where the failure came from the C library). */
typedef int (*AtomicWriteFn)(FILE *f, const void *ctx);

static inline void atomic_file_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void atomic_file_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Replace path with what fn writes, file mode `mode` (not masked by the
 * umask, as chmod).  Returns 0, or -1 with a message naming path in err
 * (err may be NULL).  The temporary file is ".NAME.tmpXXXXXX" beside path:
 * in the same folder because rename(2) does not cross file systems, hidden
 * and unique (mkstemp) because several ranks or threads may write beside
 * each other; it is removed on every failure. */
static inline int atomic_write_file(const char *path, int mode, AtomicWriteFn fn, const void *ctx,
                                    char *err, size_t errlen)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dirlen = slash ? (int)(slash - path) : 0;
    char tmp[4200], dir[4200];
    if (snprintf(tmp, sizeof tmp, "%.*s%s.%s.tmpXXXXXX", dirlen, path, slash ? "/" : "", base) >=
        (int)sizeof tmp) {
        atomic_file_err(err, errlen, "%s: path too long", path);
        return -1;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) {
        atomic_file_err(err, errlen, "%s: cannot create a temporary file: %s", path,
                        strerror(errno));
        return -1;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        atomic_file_err(err, errlen, "%s: %s", path, strerror(e));
        return -1;
    }
    errno = 0;
    int rc = fn(f, ctx) != 0 || fflush(f) != 0 || fsync(fd) != 0 ||
             fchmod(fd, (mode_t)mode) != 0;
    int e = errno;
    if (fclose(f) != 0 && !rc) {
        rc = 1;
        e = errno;
    }
    if (rc) {
        unlink(tmp);
        atomic_file_err(err, errlen, "%s: write failed: %s", path,
                        e ? strerror(e) : "incomplete write");
        return -1;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        atomic_file_err(err, errlen, "%s: cannot rename into place: %s", path, strerror(e));
        return -1;
    }
    /* the new directory entry: best effort (some file systems refuse to
     * fsync a directory; the file's own data is already on disk) */
    snprintf(dir, sizeof dir, "%.*s", slash ? (dirlen ? dirlen : 1) : 1, slash ? path : ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return 0;
}

#endif
