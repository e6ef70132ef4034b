/* Opening an input file without hanging on it.
 *
 * open(2) of a FIFO for reading blocks until a writer appears, forever if
 * none does, before any timeout of ours can run (a model, cluster.yaml,
 * --plan, --data or a checkpoint MANIFEST that is a named pipe hung hetc and
 * the ranks).  input_open opens with O_NONBLOCK (which returns at once for a
 * FIFO), fstat's the descriptor and refuses anything but a regular file with
 * a message naming the file and what it is, then clears O_NONBLOCK so reads
 * behave as usual.  fstat on the opened descriptor, not stat on the name, so
 * the check is about the file actually read.
 *
 * Header-only (static inline), like atomic_file.h: common/ sits below ir/ and
 * runtime/ and adds nothing to the stage binaries' link line.
 */
#ifndef HETC_INPUT_FILE_H
#define HETC_INPUT_FILE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a non-regular st_mode is, for messages. */
static inline const char *input_file_kind(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO (named pipe)";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a regular file";
}

/* Opens path read-only (O_CLOEXEC).  Returns the descriptor, or -1 with
 * "PATH: cannot open: REASON" or "PATH: is a FIFO (named pipe), not a
 * regular file; hetc reads inputs only from regular files" in err (errlen
 * bytes; err may be NULL). */
static inline int input_open(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (err)
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        if (err)
            snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(e));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        if (err)
            snprintf(err, errlen,
                     "%s: is %s, not a regular file; hetc reads inputs only from regular files",
                     path, input_file_kind(st.st_mode));
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        if (err)
            snprintf(err, errlen, "%s: cannot clear O_NONBLOCK: %s", path, strerror(e));
        return -1;
    }
    return fd;
}

/* input_open as a stdio stream ("rb"); NULL with err as input_open. */
static inline FILE *input_fopen(const char *path, char *err, size_t errlen)
{
    int fd = input_open(path, err, errlen);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        if (err)
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
    }
    return f;
}

#endif
