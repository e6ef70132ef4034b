/* hetrt checkpoints: one file per layer (not per stage, so any stage layout
 * can read any layer), per-tensor FNV-1a checksums, atomic writes, and a
 * MANIFEST written last that marks a checkpoint complete.  Format in
 * docs/RUNTIME.md. */
#define _POSIX_C_SOURCE 200809L
#include "rt.h"
#include "atomic_file.h"
#include "fnv1a.h"
#include "input_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CKPT_MAGIC "HETCKPT"   /* 8 bytes with its NUL */
/* Version 2 added the run id to the header (and the MANIFEST); version 1
 * files still read, as run 0.  Version 3 changed nothing but the checksums:
 * versions 1 and 2 hashed from 1469598103934665603, FNV-1a 64's offset
 * basis with its last digit lost, so no outside FNV-1a 64 reproduced them;
 * version 3 is the standard FNV-1a 64 (common/fnv1a.h).  Older files are
 * still verified with the basis they were written with. */
#define CKPT_VERSION 3u
#define CKPT_BASIS_V2 1469598103934665603ull
#define CKPT_ALIGN 64u
#define CKPT_FIXED_V1 40u /* magic .. file_bytes */
#define CKPT_FIXED_V2 48u /* + run_id */
#define MANIFEST_HEAD_V1 "hetrt-checkpoint 1"
#define MANIFEST_HEAD_V2 "hetrt-checkpoint 2"
#define MANIFEST_HEAD "hetrt-checkpoint 3"

static void seterr(char *err, size_t len, const char *fmt, ...) {
    if (!err || len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

uint64_t rt_fnv1a64(const void *data, size_t n) { return hetc_fnv1a64(data, n); }

/* The checksum a file of format version `ver` carries (see CKPT_VERSION). */
static uint64_t ckpt_sum(uint32_t ver, const void *data, size_t n) {
    return hetc_fnv1a64_from(ver >= 3 ? HETC_FNV1A64_BASIS : CKPT_BASIS_V2, data, n);
}

size_t rt_dtype_size(RtDtype t) {
    switch (t) {
    case RT_F32: case RT_I32: return 4;
    case RT_F64: case RT_I64: return 8;
    case RT_U8: return 1;
    }
    return 0;
}

const char *rt_dtype_name(RtDtype t) {
    switch (t) {
    case RT_F32: return "f32";
    case RT_F64: return "f64";
    case RT_I32: return "i32";
    case RT_I64: return "i64";
    case RT_U8: return "u8";
    }
    return "?";
}

/* ---- little-endian encoding, so files move between hosts ---- */

typedef struct Buf {
    unsigned char *p;
    size_t len, cap;
} Buf;

static int buf_put(Buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) return 1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}
static int put_u32(Buf *b, uint32_t v) {
    unsigned char x[4];
    for (int i = 0; i < 4; i++) x[i] = (unsigned char)(v >> (8 * i));
    return buf_put(b, x, 4);
}
static int put_u64(Buf *b, uint64_t v) {
    unsigned char x[8];
    for (int i = 0; i < 8; i++) x[i] = (unsigned char)(v >> (8 * i));
    return buf_put(b, x, 8);
}
static void set_u64(unsigned char *at, uint64_t v) {
    for (int i = 0; i < 8; i++) at[i] = (unsigned char)(v >> (8 * i));
}

/* Bounds-checked reader over a loaded file. */
typedef struct Rd {
    const unsigned char *p;
    size_t len, pos;
    int bad;
} Rd;
static uint32_t get_u32(Rd *r) {
    if (r->bad || r->len - r->pos < 4) { r->bad = 1; return 0; }
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)r->p[r->pos + i] << (8 * i);
    r->pos += 4;
    return v;
}
static uint64_t get_u64(Rd *r) {
    if (r->bad || r->len - r->pos < 8) { r->bad = 1; return 0; }
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)r->p[r->pos + i] << (8 * i);
    r->pos += 8;
    return v;
}

/* ---- paths and atomic writes ---- */

static void step_dir(char *out, size_t n, const char *dir, int64_t step) {
    snprintf(out, n, "%s/step_%08" PRId64, dir, step);
}
static void layer_file_name(char *out, size_t n, int layer) {
    snprintf(out, n, "layer_%05d.bin", layer);
}

static int mkdir_ok(const char *path, char *err, size_t errlen) {
    if (mkdir(path, 0755) == 0 || errno == EEXIST) return 0;
    seterr(err, errlen, "cannot create directory %s: %s", path, strerror(errno));
    return 1;
}

/* The pieces of one checkpoint file, written one after the other. */
typedef struct Parts {
    const void *const *parts;
    const size_t *sizes;
    int n;
} Parts;

static int put_parts(FILE *f, const void *x) {
    const Parts *p = x;
    for (int i = 0; i < p->n; i++)
        if (p->sizes[i] && fwrite(p->parts[i], 1, p->sizes[i], f) != p->sizes[i]) return 1;
    return 0;
}

/* Write the pieces to <dir>/<name> atomically (common/atomic_file.h): a
 * crash leaves either the old state or the whole new file, never a prefix
 * under the final name. */
static int write_atomic(const char *dir, const char *name, const void *const *parts,
                        const size_t *sizes, int nparts, char *err, size_t errlen) {
    char final[4096];
    snprintf(final, sizeof final, "%s/%s", dir, name);
    Parts p = {parts, sizes, nparts};
    return atomic_write_file(final, 0644, put_parts, &p, err, errlen) != 0;
}

/* ---- layer files ---- */

static int fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 1;
    int rc = fsync(fd);
    close(fd);
    return rc != 0;
}

/* A step directory being (re)written must not keep a MANIFEST that vouches
 * for its old files: removed (durably) before any new layer file lands. */
static int drop_manifest(const char *sdir, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/MANIFEST", sdir);
    if (unlink(path) != 0) {
        if (errno == ENOENT) return 0;
        seterr(err, errlen, "cannot remove the old %s before rewriting the step: %s", path,
               strerror(errno));
        return 1;
    }
    if (fsync_dir(sdir)) {
        seterr(err, errlen, "cannot fsync %s after removing its MANIFEST", sdir);
        return 1;
    }
    return 0;
}

int rt_ckpt_write_layer(const char *dir, int64_t step, int layer, const RtCkptTensor *t, int n,
                        char *err, size_t errlen) {
    return rt_ckpt_write_layer_run(dir, step, 0, layer, t, n, err, errlen);
}

int rt_ckpt_write_layer_run(const char *dir, int64_t step, uint64_t run_id, int layer,
                            const RtCkptTensor *t, int n, char *err, size_t errlen) {
    char sdir[4096], fname[64];
    if (layer < 0) {
        seterr(err, errlen, "checkpoint layer id %d is negative", layer);
        return 1;
    }
    if (mkdir_ok(dir, err, errlen)) return 1;
    step_dir(sdir, sizeof sdir, dir, step);
    if (mkdir_ok(sdir, err, errlen) || drop_manifest(sdir, err, errlen)) return 1;
    layer_file_name(fname, sizeof fname, layer);

    int nt = 0;
    for (int i = 0; i < n; i++)
        if (t[i].layer == layer) nt++;
    const void **parts = calloc((size_t)nt + 2, sizeof *parts);
    size_t *sizes = calloc((size_t)nt + 2, sizeof *sizes);
    size_t *nbytes = calloc((size_t)nt + 1, sizeof *nbytes);
    Buf h = {0};
    int rc = 1;
    if (!parts || !sizes || !nbytes) {
        seterr(err, errlen, "out of memory writing layer %d", layer);
        goto done;
    }
    /* Sizes first: the header records data offsets, so it needs them. */
    for (int i = 0, k = 0; i < n; i++) {
        if (t[i].layer != layer) continue;
        size_t es = rt_dtype_size(t[i].dtype);
        size_t nl = t[i].name ? strlen(t[i].name) : 0;
        if (es == 0 || t[i].ndim < 0 || t[i].ndim > RT_CKPT_MAX_DIMS || nl == 0 ||
            nl >= RT_CKPT_MAX_NAME) {
            seterr(err, errlen, "layer %d tensor %d ('%s'): bad dtype, rank or name", layer, i,
                   t[i].name ? t[i].name : "(null)");
            goto done;
        }
        size_t cnt = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            if (t[i].shape[d] < 0) {
                seterr(err, errlen, "layer %d tensor '%s': negative dimension", layer, t[i].name);
                goto done;
            }
            cnt *= (size_t)t[i].shape[d];
        }
        nbytes[k++] = cnt * es;
    }
    /* Header layout: magic, version, layer, step, ntensors, header_bytes,
     * file_bytes, run_id, then per tensor name/dtype/shape/offset/nbytes/
     * checksum, then the header's own checksum. */
    if (buf_put(&h, CKPT_MAGIC, 8) || put_u32(&h, CKPT_VERSION) || put_u32(&h, (uint32_t)layer) ||
        put_u64(&h, (uint64_t)step) || put_u32(&h, (uint32_t)nt) || put_u32(&h, 0) ||
        put_u64(&h, 0) || put_u64(&h, run_id))
        goto oom;
    size_t hdr_bytes = h.len + 8; /* + the header checksum */
    for (int i = 0; i < n; i++) {
        if (t[i].layer != layer) continue;
        hdr_bytes += 4 + strlen(t[i].name) + 4 + 4 + 8 * (size_t)t[i].ndim + 24;
    }
    size_t data_at = (hdr_bytes + CKPT_ALIGN - 1) / CKPT_ALIGN * CKPT_ALIGN;
    size_t off = data_at;
    for (int i = 0, k = 0; i < n; i++) {
        if (t[i].layer != layer) continue;
        size_t nl = strlen(t[i].name);
        if (put_u32(&h, (uint32_t)nl) || buf_put(&h, t[i].name, nl) ||
            put_u32(&h, (uint32_t)t[i].dtype) || put_u32(&h, (uint32_t)t[i].ndim))
            goto oom;
        for (int d = 0; d < t[i].ndim; d++)
            if (put_u64(&h, (uint64_t)t[i].shape[d])) goto oom;
        if (nbytes[k] && !t[i].data) {
            seterr(err, errlen, "layer %d tensor '%s': NULL data", layer, t[i].name);
            goto done;
        }
        if (put_u64(&h, off) || put_u64(&h, nbytes[k]) ||
            put_u64(&h, ckpt_sum(CKPT_VERSION, nbytes[k] ? t[i].data : "", nbytes[k])))
            goto oom;
        parts[k + 1] = t[i].data;
        sizes[k + 1] = nbytes[k];
        off += nbytes[k];
        k++;
    }
    /* header_bytes at 28, file_bytes at 32 (see the puts above). */
    h.p[28] = (unsigned char)hdr_bytes;
    h.p[29] = (unsigned char)(hdr_bytes >> 8);
    h.p[30] = (unsigned char)(hdr_bytes >> 16);
    h.p[31] = (unsigned char)(hdr_bytes >> 24);
    set_u64(h.p + 32, off);
    if (put_u64(&h, ckpt_sum(CKPT_VERSION, h.p, h.len))) goto oom;
    while (h.len < data_at) {
        unsigned char z = 0;
        if (buf_put(&h, &z, 1)) goto oom;
    }
    parts[0] = h.p;
    sizes[0] = h.len;
    rc = write_atomic(sdir, fname, parts, sizes, nt + 1, err, errlen);
    goto done;
oom:
    seterr(err, errlen, "out of memory writing layer %d", layer);
done:
    free(h.p);
    free(parts);
    free(sizes);
    free(nbytes);
    return rc;
}

static int read_whole(const char *path, unsigned char **out, size_t *len, char *err,
                      size_t errlen) {
    *out = NULL;
    *len = 0;
    /* MANIFEST and layer files: a FIFO would block in fopen() */
    FILE *f = input_fopen(path, err, errlen);
    if (!f)
        return 1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        seterr(err, errlen, "cannot stat %s", path);
        fclose(f);
        return 1;
    }
    size_t n = (size_t)st.st_size;
    unsigned char *p = malloc(n ? n : 1);
    if (!p || fread(p, 1, n, f) != n) {
        seterr(err, errlen, "cannot read %s", path);
        free(p);
        fclose(f);
        return 1;
    }
    fclose(f);
    *out = p;
    *len = n;
    return 0;
}

int rt_ckpt_read_layer(const char *ckpt_dir, int layer, RtCkptLayer *out, char *err,
                       size_t errlen) {
    memset(out, 0, sizeof *out);
    char fname[64], path[4200];
    layer_file_name(fname, sizeof fname, layer);
    snprintf(path, sizeof path, "%s/%s", ckpt_dir, fname);
    if (read_whole(path, &out->buf, &out->buf_len, err, errlen)) return 1;
    Rd r = {out->buf, out->buf_len, 0, 0};
    if (out->buf_len < 40 || memcmp(out->buf, CKPT_MAGIC, 8) != 0) {
        seterr(err, errlen, "%s: not a hetrt layer file (bad magic or truncated header)", path);
        goto fail;
    }
    r.pos = 8;
    uint32_t ver = get_u32(&r), lay = get_u32(&r);
    uint64_t step = get_u64(&r);
    uint32_t nt = get_u32(&r), hdr_bytes = get_u32(&r);
    uint64_t file_bytes = get_u64(&r);
    if (ver < 1 || ver > CKPT_VERSION) {
        seterr(err, errlen, "%s: format version %u, this runtime reads 1 to %u", path, ver,
               CKPT_VERSION);
        goto fail;
    }
    uint64_t run_id = ver >= 2 ? get_u64(&r) : 0;
    if (file_bytes != out->buf_len) {
        seterr(err, errlen, "%s: file is %zu bytes but its header says %" PRIu64
               " (truncated or extended)", path, out->buf_len, file_bytes);
        goto fail;
    }
    if (hdr_bytes < (ver >= 2 ? CKPT_FIXED_V2 : CKPT_FIXED_V1) + 8 || hdr_bytes > out->buf_len) {
        seterr(err, errlen, "%s: bad header size %u", path, hdr_bytes);
        goto fail;
    }
    Rd hc = {out->buf, hdr_bytes, hdr_bytes - 8, 0};
    if (get_u64(&hc) != ckpt_sum(ver, out->buf, hdr_bytes - 8)) {
        seterr(err, errlen, "%s: header checksum mismatch (corrupt file)", path);
        goto fail;
    }
    if ((int)lay != layer) {
        seterr(err, errlen, "%s: holds layer %u, expected layer %d", path, lay, layer);
        goto fail;
    }
    r.len = hdr_bytes - 8; /* tensor entries must lie inside the header */
    if (nt > r.len / 32) {
        seterr(err, errlen, "%s: %u tensors cannot fit in a %u-byte header", path, nt, hdr_bytes);
        goto fail;
    }
    out->layer = layer;
    out->step = (int64_t)step;
    out->run_id = run_id;
    out->tensors = calloc(nt ? nt : 1, sizeof *out->tensors);
    if (!out->tensors) {
        seterr(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    for (uint32_t i = 0; i < nt; i++) {
        RtCkptLoaded *t = &out->tensors[i];
        uint32_t nl = get_u32(&r);
        if (r.bad || nl == 0 || nl >= RT_CKPT_MAX_NAME || r.len - r.pos < nl) {
            seterr(err, errlen, "%s: tensor %u: bad name", path, i);
            goto fail;
        }
        memcpy(t->name, r.p + r.pos, nl);
        t->name[nl] = '\0';
        r.pos += nl;
        t->dtype = (RtDtype)get_u32(&r);
        uint32_t nd = get_u32(&r);
        if (r.bad || rt_dtype_size(t->dtype) == 0 || nd > RT_CKPT_MAX_DIMS) {
            seterr(err, errlen, "%s: tensor '%s': bad dtype or rank", path, t->name);
            goto fail;
        }
        t->ndim = (int)nd;
        uint64_t cnt = 1;
        int overflow = 0;
        for (uint32_t d = 0; d < nd; d++) {
            t->shape[d] = (int64_t)get_u64(&r);
            if (t->shape[d] < 0) overflow = 1;
            else if (t->shape[d] && cnt > UINT64_MAX / (uint64_t)t->shape[d]) overflow = 1;
            else cnt *= (uint64_t)t->shape[d];
        }
        uint64_t off = get_u64(&r), nb = get_u64(&r), sum = get_u64(&r);
        if (r.bad || overflow || cnt > UINT64_MAX / rt_dtype_size(t->dtype) ||
            nb != cnt * rt_dtype_size(t->dtype) || off < hdr_bytes || off > out->buf_len ||
            nb > out->buf_len - off) {
            seterr(err, errlen, "%s: tensor '%s': shape, size or offset inconsistent with the "
                   "file", path, t->name);
            goto fail;
        }
        t->nbytes = (size_t)nb;
        t->data = out->buf + off;
        if (ckpt_sum(ver, t->data, t->nbytes) != sum) {
            seterr(err, errlen, "%s: tensor '%s': checksum mismatch (corrupt data)", path,
                   t->name);
            goto fail;
        }
        out->ntensors = (int)i + 1;
    }
    out->ntensors = (int)nt;
    return 0;
fail:
    rt_ckpt_layer_free(out);
    return 1;
}

const RtCkptLoaded *rt_ckpt_find(const RtCkptLayer *l, const char *name) {
    for (int i = 0; i < l->ntensors; i++)
        if (strcmp(l->tensors[i].name, name) == 0) return &l->tensors[i];
    return NULL;
}

int rt_ckpt_load_tensor(const RtCkptLayer *l, const char *name, RtDtype dtype, int ndim,
                        const int64_t *shape, void *dst, char *err, size_t errlen) {
    const RtCkptLoaded *t = rt_ckpt_find(l, name);
    if (!t) {
        seterr(err, errlen, "checkpoint layer %d has no tensor '%s'", l->layer, name);
        return 1;
    }
    int same = t->dtype == dtype && t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        seterr(err, errlen, "checkpoint layer %d tensor '%s': stored %s rank %d does not match "
               "the requested %s rank %d shape", l->layer, name, rt_dtype_name(t->dtype),
               t->ndim, rt_dtype_name(dtype), ndim);
        return 1;
    }
    if (t->nbytes) memcpy(dst, t->data, t->nbytes);
    return 0;
}

void rt_ckpt_layer_free(RtCkptLayer *l) {
    free(l->tensors);
    free(l->buf);
    memset(l, 0, sizeof *l);
}

/* ---- manifest ---- */

int rt_ckpt_write_manifest(const char *dir, int64_t step, int nlayers, char *err,
                           size_t errlen) {
    return rt_ckpt_write_manifest_run(dir, step, 0, nlayers, err, errlen);
}

int rt_ckpt_write_manifest_run(const char *dir, int64_t step, uint64_t run_id, int nlayers,
                               char *err, size_t errlen) {
    char sdir[4096];
    step_dir(sdir, sizeof sdir, dir, step);
    if (nlayers < 1) {
        seterr(err, errlen, "manifest for %s: %d layers", sdir, nlayers);
        return 1;
    }
    Buf m = {0};
    char line[512];
    int rc = 1;
    snprintf(line, sizeof line, MANIFEST_HEAD "\nstep %" PRId64 "\nrun %016" PRIx64 "\nlayers %d\n",
             step, run_id, nlayers);
    if (buf_put(&m, line, strlen(line))) goto oom;
    for (int l = 0; l < nlayers; l++) {
        /* Verify every layer fully before the manifest can name it. */
        RtCkptLayer lay;
        char lerr[512];
        if (rt_ckpt_read_layer(sdir, l, &lay, lerr, sizeof lerr)) {
            seterr(err, errlen, "not writing the manifest of %s: %s", sdir, lerr);
            goto done;
        }
        size_t sz = lay.buf_len;
        int64_t lstep = lay.step;
        uint64_t lrun = lay.run_id;
        rt_ckpt_layer_free(&lay);
        if (lstep != step || lrun != run_id) {
            seterr(err, errlen, "not writing the manifest of %s: layer_%05d.bin holds step %"
                   PRId64 " of run %016" PRIx64 ", not step %" PRId64 " of run %016" PRIx64,
                   sdir, l, lstep, lrun, step, run_id);
            goto done;
        }
        char fname[64];
        layer_file_name(fname, sizeof fname, l);
        snprintf(line, sizeof line, "layer %d %s %zu\n", l, fname, sz);
        if (buf_put(&m, line, strlen(line))) goto oom;
    }
    snprintf(line, sizeof line, "checksum %016" PRIx64 "\n", ckpt_sum(CKPT_VERSION, m.p, m.len));
    if (buf_put(&m, line, strlen(line))) goto oom;
    const void *parts[1] = {m.p};
    size_t sizes[1] = {m.len};
    rc = write_atomic(sdir, "MANIFEST", parts, sizes, 1, err, errlen);
    goto done;
oom:
    seterr(err, errlen, "out of memory writing the manifest of %s", sdir);
done:
    free(m.p);
    return rc;
}

/* The fixed part of a layer file's header (magic .. run_id), read without
 * the data: what the MANIFEST check compares.  0 ok, else a reason. */
static int layer_head(const char *path, uint32_t *layer, int64_t *step, uint64_t *run,
                      char *why, size_t whylen) {
    char e[512];
    FILE *f = input_fopen(path, e, sizeof e);
    if (!f) {
        seterr(why, whylen, "%s", e);
        return 1;
    }
    unsigned char b[CKPT_FIXED_V2];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    Rd r = {b, n, 8, 0};
    if (n < CKPT_FIXED_V1 || memcmp(b, CKPT_MAGIC, 8) != 0) {
        seterr(why, whylen, "%s is not a hetrt layer file", path);
        return 1;
    }
    uint32_t ver = get_u32(&r);
    *layer = get_u32(&r);
    *step = (int64_t)get_u64(&r);
    r.pos += 16; /* ntensors, header_bytes, file_bytes */
    *run = ver >= 2 ? get_u64(&r) : 0;
    if (r.bad || ver < 1 || ver > CKPT_VERSION) {
        seterr(why, whylen, "%s: bad header (version %u)", path, ver);
        return 1;
    }
    return 0;
}

/* A step directory holds a complete checkpoint when its MANIFEST parses,
 * its checksum matches, its step matches the directory, and every listed
 * layer file exists with the listed size and a header naming this layer,
 * this step and the MANIFEST's run (a file copied in from another step or
 * run is caught here).  Tensor checksums are verified when a layer is
 * read.  0 ok (*run set), else why in `why`. */
static int manifest_check(const char *sdir, int64_t step, uint64_t *run, char *why,
                          size_t whylen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/MANIFEST", sdir);
    unsigned char *p;
    size_t n;
    char err[512];
    if (read_whole(path, &p, &n, err, sizeof err)) {
        seterr(why, whylen, "no readable MANIFEST (an interrupted write)");
        return 1;
    }
    int bad = 1;
    seterr(why, whylen, "MANIFEST does not parse or its checksum does not match");
    char *text = malloc(n + 1);
    if (!text) goto done;
    memcpy(text, p, n);
    text[n] = '\0';
    char *cs = strstr(text, "checksum ");
    if (!cs || (cs != text && cs[-1] != '\n')) goto done;
    uint64_t want = strtoull(cs + 9, NULL, 16);
    /* the head line says which checksum the MANIFEST carries */
    size_t head = strcspn(text, "\n");
    uint32_t ver = 0;
    if (head == strlen(MANIFEST_HEAD) && !strncmp(text, MANIFEST_HEAD, head)) ver = CKPT_VERSION;
    else if (head == strlen(MANIFEST_HEAD_V2) && !strncmp(text, MANIFEST_HEAD_V2, head)) ver = 2;
    else if (head == strlen(MANIFEST_HEAD_V1) && !strncmp(text, MANIFEST_HEAD_V1, head)) ver = 1;
    if (!ver || want != ckpt_sum(ver, text, (size_t)(cs - text))) goto done;
    *cs = '\0';
    char *save = NULL, *ln = strtok_r(text, "\n", &save);
    int v2 = ver >= 2; /* a run line */
    if (!ln) goto done;
    long long st = -1;
    unsigned long long rid = 0;
    int nl = -1, seen = 0;
    ln = strtok_r(NULL, "\n", &save);
    if (!ln || sscanf(ln, "step %lld", &st) != 1 || st != step) goto done;
    if (v2 && (!(ln = strtok_r(NULL, "\n", &save)) || sscanf(ln, "run %llx", &rid) != 1))
        goto done;
    ln = strtok_r(NULL, "\n", &save);
    if (!ln || sscanf(ln, "layers %d", &nl) != 1 || nl < 1) goto done;
    while ((ln = strtok_r(NULL, "\n", &save))) {
        int id;
        char fname[128];
        unsigned long long sz;
        if (sscanf(ln, "layer %d %127s %llu", &id, fname, &sz) != 3 || id != seen) goto done;
        char lp[4400];
        snprintf(lp, sizeof lp, "%s/%s", sdir, fname);
        struct stat sb;
        if (stat(lp, &sb) != 0 || (unsigned long long)sb.st_size != sz) {
            seterr(why, whylen, "%s is missing or not the size its MANIFEST lists", fname);
            goto done;
        }
        uint32_t hl;
        int64_t hs;
        uint64_t hr;
        if (layer_head(lp, &hl, &hs, &hr, why, whylen)) goto done;
        if ((int)hl != id || hs != step || hr != rid) {
            seterr(why, whylen, "%s holds layer %u of step %" PRId64 " of run %016" PRIx64
                   ", its MANIFEST lists layer %d of step %" PRId64 " of run %016llx (a file "
                   "from another step or run)", fname, hl, hs, hr, id, step, rid);
            goto done;
        }
        seen++;
    }
    if (seen != nl) goto done;
    *run = rid;
    bad = 0;
done:
    free(text);
    free(p);
    return bad;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The step numbers of dir's step_* directories (our spelling), newest
 * first.  0 ok (*out malloc'ed, may be NULL with *n 0), 1 no directory,
 * -1 error. */
static int list_steps(const char *dir, int64_t **out, int *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 1;
        seterr(err, errlen, "cannot open checkpoint directory %s: %s", dir, strerror(errno));
        return -1;
    }
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long s;
        char tail, sdir[4096];
        if (sscanf(e->d_name, "step_%lld%c", &s, &tail) != 1 || s < 0) continue;
        step_dir(sdir, sizeof sdir, dir, (int64_t)s);
        if (strcmp(sdir + strlen(dir) + 1, e->d_name) != 0) continue; /* not our spelling */
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *q = realloc(*out, (size_t)cap * sizeof *q);
            if (!q) {
                closedir(d);
                seterr(err, errlen, "out of memory listing %s", dir);
                return -1;
            }
            *out = q;
        }
        (*out)[(*n)++] = (int64_t)s;
    }
    closedir(d);
    if (*n) qsort(*out, (size_t)*n, sizeof **out, cmp_desc);
    return 0;
}

static void warn_add(char *warn, size_t warnlen, const char *fmt, ...) {
    if (!warn || !warnlen) return;
    size_t at = strlen(warn);
    if (at + 1 >= warnlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(warn + at, warnlen - at, fmt, ap);
    va_end(ap);
}

int rt_checkpoint_find(const char *dir, int64_t below, char *path_out, size_t path_len,
                       int64_t *step, uint64_t *run_id, char *warn, size_t warnlen, char *err,
                       size_t errlen) {
    int64_t *steps;
    int n;
    if (warn && warnlen) warn[0] = '\0';
    int r = list_steps(dir, &steps, &n, err, errlen);
    if (r) return r; /* no checkpoint directory yet: nothing to resume */
    int found = 0;
    for (int i = 0; i < n && !found; i++) {
        if (steps[i] >= below) continue;
        char sdir[4096], why[1024];
        uint64_t run = 0;
        step_dir(sdir, sizeof sdir, dir, steps[i]);
        if (manifest_check(sdir, steps[i], &run, why, sizeof why)) {
            warn_add(warn, warnlen, "%s%s: %s", warn && warn[0] ? "; " : "", sdir, why);
            continue;
        }
        snprintf(path_out, path_len, "%s", sdir);
        *step = steps[i];
        if (run_id) *run_id = run;
        found = 1;
    }
    free(steps);
    return found ? 0 : 1;
}

int rt_checkpoint_latest(const char *dir, char *path_out, size_t path_len, int64_t *step,
                         char *err, size_t errlen) {
    return rt_checkpoint_find(dir, INT64_MAX, path_out, path_len, step, NULL, NULL, 0, err,
                              errlen);
}

/* ---- run identity and the directory lock ---- */

uint64_t rt_ckpt_new_run_id(void) {
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) {
        /* no entropy source: time and pid still differ between runs */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id = rt_fnv1a64(&ts, sizeof ts) ^ ((uint64_t)getpid() << 32);
    }
    return id ? id : 1; /* 0 is "no run" (version-1 files, hetc compile's init) */
}

int rt_ckpt_lock(const char *dir, int *fd_out, char *err, size_t errlen) {
    *fd_out = -1;
    if (mkdir_ok(dir, err, errlen)) return 1;
    char path[4200];
    snprintf(path, sizeof path, "%s/LOCK", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        seterr(err, errlen, "cannot open the lock file %s: %s", path,
               fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0) close(fd);
        return 1;
    }
    /* A job that just failed can leave a rank alive for a moment after
     * mpirun returns (it is being killed): wait up to HETRT_LOCK_WAIT_S
     * (default 10 s) for a holder to go away before calling it a second run. */
    double wait_s = 10;
    const char *ws = getenv("HETRT_LOCK_WAIT_S");
    if (ws && *ws) {
        char *end;
        double v = strtod(ws, &end);
        if (*end == '\0' && v >= 0 && v <= 3600) wait_s = v;
    }
    int got = flock(fd, LOCK_EX | LOCK_NB) == 0;
    for (int i = 0; !got && errno == EWOULDBLOCK && i < (int)(wait_s * 10); i++) {
        struct timespec ts = {0, 100000000L};
        nanosleep(&ts, NULL);
        got = flock(fd, LOCK_EX | LOCK_NB) == 0;
    }
    if (!got) {
        int e = errno;
        char holder[128] = "";
        ssize_t k = pread(fd, holder, sizeof holder - 1, 0);
        holder[k > 0 ? k : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        close(fd);
        if (e == EWOULDBLOCK)
            seterr(err, errlen, "checkpoint directory %s is in use by another run (%s holds %s, "
                   "waited %g s): wait for it to end or pass another --checkpoint-dir", dir,
                   holder[0] ? holder : "a process", path, wait_s);
        else
            seterr(err, errlen, "cannot lock %s: %s", path, strerror(e));
        return 1;
    }
    char host[64] = "?", line[160];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    int len = snprintf(line, sizeof line, "pid %ld on %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
        seterr(err, errlen, "cannot write %s: %s", path, strerror(errno));
        close(fd);
        return 1;
    }
    *fd_out = fd;
    return 0;
}

int rt_ckpt_count_steps(const char *dir, int *nsteps, int64_t *newest, char *err,
                        size_t errlen) {
    int64_t *steps;
    int r = list_steps(dir, &steps, nsteps, err, errlen);
    if (r < 0) return -1;
    *newest = *nsteps ? steps[0] : -1;
    free(steps);
    return 0;
}

int rt_ckpt_clear(const char *dir, char *err, size_t errlen) {
    int64_t *steps;
    int n;
    int r = list_steps(dir, &steps, &n, err, errlen);
    if (r) return r < 0;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        char sdir[4096];
        step_dir(sdir, sizeof sdir, dir, steps[i]);
        DIR *d = opendir(sdir);
        if (!d) {
            seterr(err, errlen, "cannot open %s: %s", sdir, strerror(errno));
            rc = 1;
            break;
        }
        struct dirent *e;
        while ((e = readdir(d)) && !rc) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char fp[4400];
            snprintf(fp, sizeof fp, "%s/%s", sdir, e->d_name);
            if (unlink(fp) != 0) {
                seterr(err, errlen, "cannot remove %s: %s", fp, strerror(errno));
                rc = 1;
            }
        }
        closedir(d);
        if (!rc && rmdir(sdir) != 0) {
            seterr(err, errlen, "cannot remove %s: %s", sdir, strerror(errno));
            rc = 1;
        }
    }
    free(steps);
    if (!rc && fsync_dir(dir)) {
        seterr(err, errlen, "cannot fsync %s", dir);
        rc = 1;
    }
    return rc;
}

/* ---- collective save ---- */

int rt_checkpoint_save(const RtContext *ctx, const char *dir, int64_t step, int nlayers,
                       const RtCkptTensor *t, int n) {
    char err[1024];
    int rc = 0;
    /* dp rank 0 of each stage owns its layers' files: the other DP ranks
     * hold identical replicas. */
    if (ctx->dp_rank == 0) {
        for (int i = 0; i < n && rc == 0; i++) {
            int seen = 0;
            for (int j = 0; j < i; j++) seen |= t[j].layer == t[i].layer;
            if (seen) continue;
            if (rt_ckpt_write_layer(dir, step, t[i].layer, t, n, err, sizeof err)) {
                rt_log_error("checkpoint step %lld: %s", (long long)step, err);
                rc = 1;
            }
        }
    }
    /* A failed writer still joins the barrier so the others do not wait
     * out the timeout; the manifest check then refuses the checkpoint. */
    if (rt_barrier(ctx, "checkpoint: layer files written")) return 1;
    if (ctx->world_rank == 0 && rt_ckpt_write_manifest(dir, step, nlayers, err, sizeof err)) {
        rt_log_error("checkpoint step %lld: %s", (long long)step, err);
        rc = 1;
    }
    if (rt_barrier(ctx, "checkpoint: manifest written")) return 1;
    return rc;
}
