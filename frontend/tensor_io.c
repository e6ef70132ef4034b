/* Tensor files: ONNX TensorProto (.pb, as in the ONNX backend test data)
 * and NumPy .npy (v1/v2/v3, C order, little endian). */
#include "onnx_internal.h"

#include "atomic_file.h"
#include "input_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whole file into memory (tensor files are small test/feed data). */
static int slurp(const char *path, unsigned char **buf, size_t *len, IrError *err) {
    char ebuf[sizeof err->msg];
    FILE *f = input_fopen(path, ebuf, sizeof ebuf); /* a FIFO would block in fopen() */
    if (!f) return ir_errorf(err, "%s", ebuf);
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return ir_errorf(err, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    unsigned char *b = ir_xmalloc(n + 1);
    if (n && fread(b, 1, n, f) != n) {
        fclose(f);
        free(b);
        return ir_errorf(err, "%s: read failed", path);
    }
    fclose(f);
    *buf = b;
    *len = n;
    return 0;
}

/* ---------------------------------------------------------------- .pb */
int hetc_read_tensor_pb(const char *path, IrTensor **out, IrError *err) {
    *out = NULL;
    unsigned char *buf;
    size_t len;
    if (slurp(path, &buf, &len, err)) return -1;
    Onnx__TensorProto *t = len ? onnx__tensor_proto__unpack(NULL, len, buf) : NULL;
    free(buf);
    if (!t) return ir_errorf(err, "%s: not a valid ONNX TensorProto (truncated or corrupt)", path);
    int rc = -1;
    IrShape s;
    int dt = onnx_dtype_to_ir(t->has_data_type ? t->data_type : 0, "tensor", err);
    int64_t numel = -1;
    if (dt >= 0 && onnx_tensor_shape(t, &s, "tensor", err) == 0)
        numel = onnx_checked_numel(&s, ir_dtype_size(dt), "tensor", err);
    void *data;
    size_t nb;
    if (numel >= 0 && onnx_tensor_inline_data(t, dt, numel, &data, &nb, "tensor", err) == 0) {
        IrTensor *r = ir_xcalloc(1, sizeof *r);
        r->name = t->name && *t->name ? ir_strdup(t->name) : NULL;
        r->dtype = dt;
        r->shape = s;
        r->data = data;
        r->nbytes = nb;
        *out = r;
        rc = 0;
    }
    onnx__tensor_proto__free_unpacked(t, NULL);
    if (rc) ir_error_prefix(err, "%s", path);
    return rc;
}

/* ---------------------------------------------------------------- .npy */
static const struct {
    const char *descr;
    IrDType dt;
} npy_types[] = {
    {"<f4", IR_F32}, {"<f8", IR_F64}, {"<i8", IR_I64}, {"<i4", IR_I32}, {"|b1", IR_BOOL},
    {"|u1", IR_U8},  {"<i2", IR_I16}, {"|i1", IR_I8},  {"<f2", IR_F16},
};
#define NNPY (sizeof npy_types / sizeof npy_types[0])

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* Find the value after 'key': in the header dict. */
static const char *dict_value(const char *h, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p) return NULL;
    p = skip_ws(p + strlen(pat));
    if (*p != ':') return NULL;
    return skip_ws(p + 1);
}

static int parse_npy_header(const char *path, const char *h, IrDType *dt, IrShape *s,
                            IrError *err) {
    const char *d = dict_value(h, "descr");
    if (!d || (*d != '\'' && *d != '"'))
        return ir_errorf(err, "%s: .npy header has no 'descr'", path);
    char q = *d++;
    const char *e = strchr(d, q);
    if (!e || e - d > 16) return ir_errorf(err, "%s: bad 'descr' in .npy header", path);
    char descr[20];
    memcpy(descr, d, (size_t)(e - d));
    descr[e - d] = 0;
    /* numpy writes '|u1' but tolerate '<u1'/'=u1' style for one-byte types */
    if (strlen(descr) == 3 && descr[2] == '1' && (descr[0] == '<' || descr[0] == '='))
        descr[0] = '|';
    *dt = IR_UNDEF;
    for (size_t i = 0; i < NNPY; i++)
        if (strcmp(descr, npy_types[i].descr) == 0) *dt = npy_types[i].dt;
    if (*dt == IR_UNDEF)
        return ir_errorf(err, "%s: .npy dtype '%s' is not supported (f4 f8 f2 i8 i4 i2 i1 u1 "
                         "b1, little endian)", path, descr);
    const char *f = dict_value(h, "fortran_order");
    if (!f) return ir_errorf(err, "%s: .npy header has no 'fortran_order'", path);
    if (strncmp(f, "True", 4) == 0)
        return ir_errorf(err, "%s: .npy array is in Fortran order; only C order is supported "
                         "(save with np.ascontiguousarray)", path);
    if (strncmp(f, "False", 5) != 0)
        return ir_errorf(err, "%s: bad 'fortran_order' in .npy header", path);
    const char *p = dict_value(h, "shape");
    if (!p || *p != '(') return ir_errorf(err, "%s: .npy header has no 'shape' tuple", path);
    p++;
    memset(s, 0, sizeof *s);
    for (;;) {
        p = skip_ws(p);
        if (*p == ')') break;
        if (*p < '0' || *p > '9') return ir_errorf(err, "%s: bad 'shape' in .npy header", path);
        if (s->rank >= IR_MAX_RANK)
            return ir_errorf(err, "%s: .npy rank exceeds %d", path, IR_MAX_RANK);
        int64_t v = 0;
        while (*p >= '0' && *p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return ir_errorf(err, "%s: .npy dim too large", path);
            v = v * 10 + (*p++ - '0');
        }
        if (*p == 'L') p++; /* Python 2 longs */
        s->dims[s->rank++] = v;
        p = skip_ws(p);
        if (*p == ',') p++;
        else if (*p != ')') return ir_errorf(err, "%s: bad 'shape' in .npy header", path);
    }
    return 0;
}

int hetc_read_npy(const char *path, IrTensor **out, IrError *err) {
    *out = NULL;
    unsigned char *b;
    size_t len;
    if (slurp(path, &b, &len, err)) return -1;
    int rc = -1;
    size_t hl = 0, start = 0;
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0) {
        ir_errorf(err, "%s: not a .npy file (bad magic)", path);
        goto done;
    }
    if (b[6] == 1) {
        hl = (size_t)b[8] | (size_t)b[9] << 8;
        start = 10;
    } else if (b[6] == 2 || b[6] == 3) {
        if (len < 12) {
            ir_errorf(err, "%s: truncated .npy header", path);
            goto done;
        }
        hl = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        start = 12;
    } else {
        ir_errorf(err, "%s: unsupported .npy version %d.%d", path, b[6], b[7]);
        goto done;
    }
    if (hl > len - start) {
        ir_errorf(err, "%s: truncated .npy header", path);
        goto done;
    }
    char *h = ir_xmalloc(hl + 1);
    memcpy(h, b + start, hl);
    h[hl] = 0;
    IrDType dt = IR_UNDEF;
    IrShape s = {0};
    int hr = parse_npy_header(path, h, &dt, &s, err);
    free(h);
    if (hr) goto done;
    int64_t numel = onnx_checked_numel(&s, ir_dtype_size(dt), "array", err);
    if (numel < 0) {
        ir_error_prefix(err, "%s", path);
        goto done;
    }
    size_t nb = (size_t)numel * ir_dtype_size(dt), avail = len - start - hl;
    if (avail != nb) {
        ir_errorf(err, "%s: .npy data has %zu bytes, the header says %zu", path, avail, nb);
        goto done;
    }
    IrTensor *t = ir_xcalloc(1, sizeof *t);
    t->dtype = dt;
    t->shape = s;
    t->nbytes = nb;
    t->data = ir_xmalloc(nb ? nb : 1);
    if (nb) memcpy(t->data, b + start + hl, nb);
    *out = t;
    rc = 0;
done:
    free(b);
    return rc;
}

/* the .npy file's three parts, written by atomic_write_file */
typedef struct NpyParts {
    const unsigned char *pre;
    const char *hdr;
    size_t hl;
    const IrTensor *t;
} NpyParts;

static int write_npy_parts(FILE *f, const void *ctx) {
    const NpyParts *np = ctx;
    return !(fwrite(np->pre, 1, 10, f) == 10 && fwrite(np->hdr, 1, np->hl, f) == np->hl &&
             (np->t->nbytes == 0 || fwrite(np->t->data, 1, np->t->nbytes, f) == np->t->nbytes));
}

int hetc_write_npy(const char *path, const IrTensor *t, IrError *err) {
    const char *descr = NULL;
    for (size_t i = 0; i < NNPY; i++)
        if (npy_types[i].dt == t->dtype) descr = npy_types[i].descr;
    if (!descr)
        return ir_errorf(err, "%s: dtype %s cannot be written as .npy", path,
                         ir_dtype_name(t->dtype));
    int64_t numel = ir_shape_numel(&t->shape);
    if (numel < 0 || (size_t)numel * ir_dtype_size(t->dtype) != t->nbytes)
        return ir_errorf(err, "%s: tensor shape and byte size disagree", path);
    char shape[IR_MAX_RANK * 24 + 8];
    size_t o = 0;
    o += (size_t)snprintf(shape + o, sizeof shape - o, "(");
    for (int i = 0; i < t->shape.rank; i++)
        o += (size_t)snprintf(shape + o, sizeof shape - o, "%lld%s", (long long)t->shape.dims[i],
                              t->shape.rank == 1 ? "," : i + 1 < t->shape.rank ? ", " : "");
    snprintf(shape + o, sizeof shape - o, ")");
    char hdr[512];
    int hn = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      descr, shape);
    /* pad with spaces so data starts on a 64-byte boundary, '\n' last */
    size_t total = 10 + (size_t)hn + 1;
    size_t pad = (64 - total % 64) % 64;
    memset(hdr + hn, ' ', pad);
    hdr[hn + (int)pad] = '\n';
    size_t hl = (size_t)hn + pad + 1;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 255),
                             (unsigned char)(hl >> 8)};
    NpyParts np = {pre, hdr, hl, t};
    char msg[sizeof err->msg];
    /* the usual permissions of a new file (mkstemp's are 0600) */
    mode_t um = umask(0);
    umask(um);
    if (atomic_write_file(path, (int)(0666 & ~um), write_npy_parts, &np, msg, sizeof msg))
        return ir_errorf(err, "%s", msg);
    return 0;
}

int hetc_read_tensor(const char *path, IrTensor **out, IrError *err) {
    const char *dot = strrchr(path, '.');
    if (dot && strcasecmp(dot, ".npy") == 0) return hetc_read_npy(path, out, err);
    if (dot && strcasecmp(dot, ".pb") == 0) return hetc_read_tensor_pb(path, out, err);
    *out = NULL;
    return ir_errorf(err, "%s: unknown tensor file type (expected .npy or .pb)", path);
}
