/* ONNX TensorProto decoding: dtypes, shapes and inline data.  Shared by
 * initializers, Constant nodes, tensor attributes and .pb tensor files. */
#include "onnx_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Names indexed by TensorProto.DataType (onnx 1.23.2). */
static const char *const dtype_names[] = {
    "UNDEFINED", "FLOAT",   "UINT8",        "INT8",           "UINT16",      "INT16",
    "INT32",     "INT64",   "STRING",       "BOOL",           "FLOAT16",     "DOUBLE",
    "UINT32",    "UINT64",  "COMPLEX64",    "COMPLEX128",     "BFLOAT16",    "FLOAT8E4M3FN",
    "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4",     "FLOAT4E2M1",
    "FLOAT8E8M0", "UINT2",  "INT2",         "FLOAT6E2M3",     "FLOAT6E3M2",
};
#define NDTYPE_NAMES ((int32_t)(sizeof dtype_names / sizeof dtype_names[0]))

const char *onnx_dtype_name(int32_t dt) {
    return dt >= 0 && dt < NDTYPE_NAMES ? dtype_names[dt] : "UNKNOWN";
}

int onnx_dtype_from_string(const char *s) {
    for (int32_t i = 1; i < NDTYPE_NAMES; i++)
        if (strcasecmp(s, dtype_names[i]) == 0) return i;
    /* Cast-1 also documents the C-ish spellings */
    if (strcasecmp(s, "float32") == 0) return IR_F32;
    if (strcasecmp(s, "float64") == 0) return IR_F64;
    return -1;
}

int onnx_dtype_to_ir(int32_t dt, const char *what, IrError *err) {
    switch (dt) {
    case IR_F32: case IR_U8: case IR_I8: case IR_U16: case IR_I16: case IR_I32: case IR_I64:
    case IR_BOOL: case IR_F16: case IR_F64: case IR_U32: case IR_U64: case IR_BF16:
        return dt;
    default:
        break;
    }
    return ir_errorf(err, "%s has dtype %s (%d), which hetc does not support", what,
                     onnx_dtype_name(dt), (int)dt);
}

int onnx_tensor_shape(const Onnx__TensorProto *t, IrShape *s, const char *what, IrError *err) {
    memset(s, 0, sizeof *s);
    if (t->n_dims > IR_MAX_RANK)
        return ir_errorf(err, "%s has rank %zu; hetc supports rank <= %d", what, t->n_dims,
                         IR_MAX_RANK);
    s->rank = (int)t->n_dims;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0)
            return ir_errorf(err, "%s has a negative dim (%lld at axis %zu)", what,
                             (long long)t->dims[i], i);
        s->dims[i] = t->dims[i];
    }
    return 0;
}

int64_t onnx_checked_numel(const IrShape *s, size_t elem, const char *what, IrError *err) {
    /* Bound numel * elem by 2^62 so byte counts fit int64 and size_t. */
    const int64_t lim = (int64_t)1 << 62;
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        int64_t d = s->dims[i];
        if (d < 0) return ir_errorf(err, "%s has an unknown or negative dim", what);
        if (d != 0 && n > lim / d) return ir_errorf(err, "%s: element count overflows", what);
        n *= d;
    }
    if (elem && n > lim / (int64_t)elem)
        return ir_errorf(err, "%s: byte size overflows", what);
    return n;
}

/* Copy n values from a typed protobuf field into the narrower storage type. */
static void narrow_i32(void *dst, const int32_t *src, int64_t n, IrDType dt) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case IR_U8: case IR_I8: case IR_BOOL:
            ((uint8_t *)dst)[i] = (uint8_t)src[i];
            break;
        case IR_U16: case IR_I16: case IR_F16: case IR_BF16:
            ((uint16_t *)dst)[i] = (uint16_t)src[i];
            break;
        default:
            ((int32_t *)dst)[i] = src[i];
            break;
        }
    }
}

int onnx_tensor_inline_data(const Onnx__TensorProto *t, IrDType dt, int64_t numel,
                            void **data, size_t *nbytes, const char *what, IrError *err) {
    size_t esz = ir_dtype_size(dt);
    size_t nb = (size_t)numel * esz;
    *data = NULL;
    *nbytes = 0;
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return ir_errorf(err, "%s: external data is not allowed here", what);
    if (t->has_raw_data) {
        if (t->raw_data.len != nb)
            return ir_errorf(err, "%s: raw_data has %zu bytes, expected %zu (%lld x %s)", what,
                             t->raw_data.len, nb, (long long)numel, ir_dtype_name(dt));
        void *d = ir_xmalloc(nb);
        if (nb) memcpy(d, t->raw_data.data, nb);
        *data = d;
        *nbytes = nb;
        return 0;
    }
    /* Typed fields: which one ONNX uses depends on the dtype. */
    size_t have;
    const void *src;
    switch (dt) {
    case IR_F32: have = t->n_float_data; src = t->float_data; break;
    case IR_I64: have = t->n_int64_data; src = t->int64_data; break;
    case IR_F64: have = t->n_double_data; src = t->double_data; break;
    case IR_U32: case IR_U64: have = t->n_uint64_data; src = t->uint64_data; break;
    default: have = t->n_int32_data; src = t->int32_data; break;
    }
    if ((int64_t)have != numel)
        return ir_errorf(err, "%s: has %zu stored elements, expected %lld", what, have,
                         (long long)numel);
    void *d = ir_xmalloc(nb);
    switch (dt) {
    case IR_F32: case IR_I64: case IR_F64: case IR_U64:
        if (nb) memcpy(d, src, nb);
        break;
    case IR_U32:
        for (int64_t i = 0; i < numel; i++) ((uint32_t *)d)[i] = (uint32_t)t->uint64_data[i];
        break;
    default:
        narrow_i32(d, t->int32_data, numel, dt);
        break;
    }
    *data = d;
    *nbytes = nb;
    return 0;
}

static double half_to_double(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp(m, -24); /* subnormal */
    else if (e == 31) v = m ? (double)NAN : (double)INFINITY;
    else v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

double onnx_elem_as_double(const void *p, IrDType dt) {
    switch (dt) {
    case IR_F32: { float f; memcpy(&f, p, 4); return f; }
    case IR_F64: { double f; memcpy(&f, p, 8); return f; }
    case IR_F16: { uint16_t h; memcpy(&h, p, 2); return half_to_double(h); }
    case IR_BF16: {
        uint16_t h; memcpy(&h, p, 2);
        uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
    }
    case IR_U8: case IR_BOOL: return *(const uint8_t *)p;
    case IR_I8: return *(const int8_t *)p;
    case IR_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case IR_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case IR_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case IR_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case IR_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case IR_U64: { uint64_t v; memcpy(&v, p, 8); return (double)v; }
    default: return 0.0;
    }
}

uint16_t onnx_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

uint16_t onnx_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;           /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;          /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                /* below 2^-14: subnormal or 0 */
        if (a < 0x33000000u) return sign;                 /* below half the smallest: 0 */
        /* value = m * 2^(E-150) = m * 2^(E-126) half-subnormal units (2^-24) */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        int sh = 126 - (int)(a >> 23); /* 14..24 */
        uint32_t q = m >> sh;
        uint32_t rem = m & ((1u << sh) - 1), halfway = 1u << (sh - 1);
        if (rem > halfway || (rem == halfway && (q & 1))) q++;
        return sign | (uint16_t)q;
    }
    /* normal: rebias exponent 127 -> 15, round mantissa 23 -> 10 bits */
    uint32_t h = ((a >> 23) - 112) << 10 | ((a >> 13) & 0x3ffu);
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return sign | (uint16_t)h;
}
