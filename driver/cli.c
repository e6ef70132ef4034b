#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cli_parse_i64(const char *opt, const char *s, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || !end || *end || end == s || v < 0) {
        fprintf(stderr, "hetc: %s expects a non-negative integer, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_opt(int argc, char **argv, int *i, const char *name, const char **val) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "hetc: option %s needs a value\n", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

int cli_take_model(const char *cmd, const char *arg, const char **model) {
    if (arg[0] == '-' && arg[1]) {
        fprintf(stderr, "hetc %s: unknown option '%s' (see hetc %s --help)\n", cmd, arg, cmd);
        return -1;
    }
    if (*model) {
        fprintf(stderr, "hetc %s: more than one model given ('%s' and '%s')\n", cmd, *model, arg);
        return -1;
    }
    *model = arg;
    return 0;
}

int cli_old_eps(const char *cmd, const char *arg) {
    if (strcmp(arg, "--eps") && strncmp(arg, "--eps=", 6)) return 0;
    fprintf(stderr,
            "hetc %s: --eps is no longer accepted, it named two things: AdamW's epsilon is "
            "--adam-eps (default 1e-8), the planner's epsilon of Eq. 2 is --plan-eps "
            "(default 0.1)\n",
            cmd);
    return 1;
}

int cli_mkdirs(const char *path, IrError *err) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return ir_errorf(err, "bad directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return ir_errorf(err, "cannot create directory '%s': %s", buf, strerror(errno));
            buf[i] = c;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return ir_errorf(err, "'%s' exists and is not a directory", path);
    return 0;
}
