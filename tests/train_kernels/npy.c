/* Minimal .npy I/O (see npy.h).  The header is a Python dict literal; we
 * parse only the three keys numpy writes, in any order. */
#include "npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    NpyType t;
    const char *descr;
    int size;
} types[] = {{NPY_F4, "<f4", 4}, {NPY_F8, "<f8", 8}, {NPY_I4, "<i4", 4},
             {NPY_I8, "<i8", 8}, {NPY_U2, "<u2", 2}};
#define NTYPES (int)(sizeof types / sizeof types[0])

int npy_type_size(NpyType t)
{
    for (int i = 0; i < NTYPES; i++)
        if (types[i].t == t)
            return types[i].size;
    return 0;
}

static int fail(char *err, const char *path, const char *what)
{
    snprintf(err, 256, "%s: %s", path, what);
    return -1;
}

static int parse_header(const char *h, Npy *a, const char *path, char *err)
{
    const char *d = strstr(h, "'descr':");
    if (!d)
        return fail(err, path, "no descr");
    d = strchr(d + 8, '\'');
    if (!d)
        return fail(err, path, "bad descr");
    int found = 0;
    for (int i = 0; i < NTYPES; i++)
        if (strncmp(d + 1, types[i].descr, 3) == 0 && d[4] == '\'') {
            a->type = types[i].t;
            found = 1;
        }
    if (!found)
        return fail(err, path, "unsupported dtype");
    const char *f = strstr(h, "'fortran_order':");
    if (!f || strncmp(f + 16 + strspn(f + 16, " "), "False", 5) != 0)
        return fail(err, path, "fortran order not supported");
    const char *s = strstr(h, "'shape':");
    if (!s || !(s = strchr(s, '(')))
        return fail(err, path, "no shape");
    s++;
    a->rank = 0;
    a->numel = 1;
    while (*s && *s != ')') {
        while (*s == ' ' || *s == ',')
            s++;
        if (*s == ')')
            break;
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v < 0 || a->rank >= NPY_MAX_RANK)
            return fail(err, path, "bad shape");
        a->dims[a->rank++] = v;
        a->numel *= v;
        s = end;
    }
    return 0;
}

int npy_read(const char *path, Npy *a, char *err)
{
    memset(a, 0, sizeof *a);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return fail(err, path, "cannot open");
    unsigned char pre[10];
    int rc = -1;
    char *h = NULL;
    if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        fail(err, path, "not a .npy file");
        goto out;
    }
    size_t hlen, extra = 0;
    if (pre[6] == 1) {
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else {
        unsigned char b2[2];
        if (fread(b2, 1, 2, fp) != 2) {
            fail(err, path, "truncated header");
            goto out;
        }
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)b2[0] << 16 | (size_t)b2[1] << 24;
        extra = 2;
    }
    (void)extra;
    h = calloc(hlen + 1, 1);
    if (!h || fread(h, 1, hlen, fp) != hlen) {
        fail(err, path, "truncated header");
        goto out;
    }
    if (parse_header(h, a, path, err))
        goto out;
    size_t nbytes = (size_t)a->numel * (size_t)npy_type_size(a->type);
    a->data = malloc(nbytes ? nbytes : 1);
    if (!a->data || fread(a->data, 1, nbytes, fp) != nbytes) {
        fail(err, path, "truncated data");
        npy_free(a);
        goto out;
    }
    rc = 0;
out:
    free(h);
    fclose(fp);
    return rc;
}

int npy_write(const char *path, NpyType type, int rank, const int64_t *dims, const void *data,
              char *err)
{
    const char *descr = NULL;
    for (int i = 0; i < NTYPES; i++)
        if (types[i].t == type)
            descr = types[i].descr;
    if (!descr)
        return fail(err, path, "unsupported dtype");
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr);
    int64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld,%s", (long long)dims[i],
                      i + 1 < rank ? " " : "");
        numel *= dims[i];
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    /* pad with spaces so magic(6)+ver(2)+len(2)+header ends on 64 bytes, '\n' last */
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    int hlen = n + pad + 1;
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return fail(err, path, "cannot create");
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    fwrite(pre, 1, 10, fp);
    fwrite(dict, 1, (size_t)n, fp);
    for (int i = 0; i < pad; i++)
        fputc(' ', fp);
    fputc('\n', fp);
    size_t nbytes = (size_t)numel * (size_t)npy_type_size(type);
    int ok = fwrite(data, 1, nbytes, fp) == nbytes;
    if (fclose(fp) != 0 || !ok)
        return fail(err, path, "write failed");
    return 0;
}

void npy_free(Npy *a)
{
    free(a->data);
    a->data = NULL;
}
