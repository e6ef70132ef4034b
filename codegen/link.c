/* Running external tools (the C compiler driver as linker) without a
 * shell: posix_spawnp with an argv array, so paths with spaces or shell
 * metacharacters are passed through untouched.  The tool's stderr is
 * collected through a pipe and returned in the error on failure. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llvm_emit.h"

extern char **environ;

/* The command line as one readable string, for error messages. */
static void format_argv(const char *const *argv, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; argv[i] && len + 1 < cap; i++) {
        int n = snprintf(buf + len, cap - len, "%s%s", i ? " " : "", argv[i]);
        if (n < 0) break;
        len += (size_t)n;
    }
    if (len >= cap) buf[cap - 1] = 0;
}

int le_run_tool(const char *const *argv, IrError *err) {
    char cmd[512];
    format_argv(argv, cmd, sizeof cmd);
    int pfd[2];
    if (pipe(pfd) != 0) return ir_errorf(err, "%s: pipe: %s", cmd, strerror(errno));

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addclose(&fa, pfd[0]);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&fa, pfd[1]);
    pid_t pid;
    /* posix_spawnp takes char *const[]; it does not modify the strings. */
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        return ir_errorf(err, "cannot run %s: %s", argv[0], strerror(rc));
    }

    /* Drain stderr before waiting, so a chatty tool cannot block on a full
     * pipe; keep the first part (the first errors are the useful ones). */
    char out[1536];
    size_t len = 0;
    char junk[512];
    for (;;) {
        ssize_t n;
        if (len + 1 < sizeof out)
            n = read(pfd[0], out + len, sizeof out - 1 - len);
        else
            n = read(pfd[0], junk, sizeof junk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (len + 1 < sizeof out) len += (size_t)n;
    }
    out[len] = 0;
    close(pfd[0]);

    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return ir_errorf(err, "%s: waitpid: %s", cmd, strerror(errno));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && len == 0)
        return ir_errorf(err, "cannot run %s (not found?)", argv[0]);
    if (WIFSIGNALED(status))
        return ir_errorf(err, "%s: killed by signal %d\n%s", cmd, WTERMSIG(status), out);
    return ir_errorf(err, "%s: exit status %d\n%s", cmd,
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
}
