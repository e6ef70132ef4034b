/* External initializer data: validated at import, never read.
 *
 * A model from the internet is hostile input: its `location` must name a
 * regular file inside the model's directory (no absolute paths, no '..',
 * no symlink that resolves outside), and [offset, offset+length) must lie in
 * that file and hold exactly numel * dtype-size bytes.  Only stat() and
 * realpath() touch the file, so a multi-GiB model imports in milliseconds;
 * ir_value_data() mmaps the bytes when a pass or the executor needs them.
 */
#include "onnx_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Strict non-negative decimal ("0".."9223372036854775807"). */
static int parse_i64(const char *s, int64_t *out) {
    if (!s || !*s) return -1;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        int d = *s - '0';
        if (v > (INT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static int has_dotdot(const char *p) {
    /* components split on '/' and '\\' (Windows exporters write either) */
    const char *s = p;
    while (*s) {
        const char *e = s;
        while (*e && *e != '/' && *e != '\\') e++;
        if (e - s == 2 && s[0] == '.' && s[1] == '.') return 1;
        s = *e ? e + 1 : e;
    }
    return 0;
}

int imp_external_ref(ImportCtx *c, const Onnx__TensorProto *t, IrDType dt, int64_t nbytes,
                     IrValue *v, const char *what) {
    const char *loc = NULL, *off_s = NULL, *len_s = NULL;
    for (size_t i = 0; i < t->n_external_data; i++) {
        const Onnx__StringStringEntryProto *kv = t->external_data[i];
        if (!kv->key) continue;
        if (strcmp(kv->key, "location") == 0) loc = kv->value;
        else if (strcmp(kv->key, "offset") == 0) off_s = kv->value;
        else if (strcmp(kv->key, "length") == 0) len_s = kv->value;
    }
    if (!loc || !*loc)
        return ir_errorf(c->err, "%s: %s has external data without a location", c->file, what);
    if (loc[0] == '/' || loc[0] == '\\' || (loc[0] && loc[1] == ':'))
        return ir_errorf(c->err, "%s: %s: external data location '%s' is an absolute path; "
                         "only paths inside the model directory are allowed", c->file, what, loc);
    if (has_dotdot(loc))
        return ir_errorf(c->err, "%s: %s: external data location '%s' contains a '..' "
                         "component; only paths inside the model directory are allowed",
                         c->file, what, loc);
    int64_t off = 0, len = nbytes;
    if (off_s && parse_i64(off_s, &off))
        return ir_errorf(c->err, "%s: %s: external data offset '%s' (location '%s') is not a "
                         "non-negative integer", c->file, what, off_s, loc);
    if (len_s && parse_i64(len_s, &len))
        return ir_errorf(c->err, "%s: %s: external data length '%s' (location '%s') is not a "
                         "non-negative integer", c->file, what, len_s, loc);
    if (len != nbytes)
        return ir_errorf(c->err, "%s: %s: external data length %lld (location '%s') does not "
                         "match its shape and dtype (%lld bytes of %s)", c->file, what,
                         (long long)len, loc, (long long)nbytes, ir_dtype_name(dt));
    if (!c->model_dir)
        return ir_errorf(c->err, "%s: %s uses external data '%s' but no model directory is "
                         "known", c->file, what, loc);
    char *dir = realpath(c->model_dir, NULL);
    if (!dir)
        return ir_errorf(c->err, "%s: %s: model directory '%s' cannot be resolved: %s", c->file,
                         what, c->model_dir, strerror(errno));
    size_t n = strlen(dir) + strlen(loc) + 2;
    char *full = ir_xmalloc(n);
    snprintf(full, n, "%s/%s", dir, loc);
    char *real = realpath(full, NULL);
    int rc = 0;
    struct stat st;
    size_t dl = strlen(dir);
    if (!real) {
        rc = ir_errorf(c->err, "%s: %s: external data file '%s' cannot be opened: %s", c->file,
                       what, loc, strerror(errno));
    } else if (strncmp(real, dir, dl) != 0 || (real[dl] != '/' && dl > 1)) {
        rc = ir_errorf(c->err, "%s: %s: external data location '%s' resolves to '%s', outside "
                       "the model directory '%s'", c->file, what, loc, real, dir);
    } else if (stat(real, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = ir_errorf(c->err, "%s: %s: external data location '%s' is not a regular file",
                       c->file, what, loc);
    } else if (off > (int64_t)st.st_size || len > (int64_t)st.st_size - off) {
        rc = ir_errorf(c->err, "%s: %s: external data range (offset %lld, length %lld, location "
                       "'%s') is beyond the end of the file (%lld bytes)", c->file, what,
                       (long long)off, (long long)len, loc, (long long)st.st_size);
    } else {
        v->has_ext = 1;
        free(v->ext.path);
        v->ext.path = real;
        v->ext.offset = off;
        v->ext.length = len;
        real = NULL;
    }
    free(real);
    free(full);
    free(dir);
    return rc;
}
