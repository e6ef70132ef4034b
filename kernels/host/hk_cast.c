/* Dtype conversion (Cast, ConstantOfShape fill) including the 16-bit
 * float formats, which have no C type: they are converted bit by bit. */
#include "hk.h"
#include "hk_bf16.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);
    else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or NaN */
        return sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0);
    if (absx >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: inf */
    if (absx < 0x38800000u) { /* below the smallest normal half: subnormal or 0 */
        if (absx < 0x33000000u) return sign;
        uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
        int shift = 126 - (int)e; /* 14..24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return sign | (uint16_t)r;
    }
    uint32_t r = ((absx >> 13) - ((127 - 15) << 10));
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return sign | (uint16_t)r;
}

/* bf16: hk_bf16.h (the one place f32 -> bf16 rounds, to nearest even) */
#define bf16_to_f32 hk_bf16_to_f32
#define f32_to_bf16 hk_f32_to_bf16

static int is_float(HkDType t) {
    return t == HK_F32 || t == HK_F64 || t == HK_F16 || t == HK_BF16;
}

int hk_cast_supported(HkDType t) { return hk_dtype_size(t) != 0; }

static double load_f(HkDType t, const void *p, int64_t i) {
    switch (t) {
    case HK_F32: return ((const float *)p)[i];
    case HK_F64: return ((const double *)p)[i];
    case HK_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    case HK_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0;
    }
}

/* Integers (and bool) travel as int64, or uint64 for u64 sources, so that
 * i64 <-> i64/u64 copies keep all 64 bits. */
static int64_t load_i(HkDType t, const void *p, int64_t i) {
    switch (t) {
    case HK_I8: return ((const int8_t *)p)[i];
    case HK_U8: return ((const uint8_t *)p)[i];
    case HK_BOOL: return ((const uint8_t *)p)[i] != 0;
    case HK_I16: return ((const int16_t *)p)[i];
    case HK_U16: return ((const uint16_t *)p)[i];
    case HK_I32: return ((const int32_t *)p)[i];
    case HK_U32: return ((const uint32_t *)p)[i];
    case HK_I64: return ((const int64_t *)p)[i];
    case HK_U64: return (int64_t)((const uint64_t *)p)[i];
    default: return 0;
    }
}

static void store_i(HkDType t, void *p, int64_t i, int64_t v) {
    switch (t) {
    case HK_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case HK_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case HK_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case HK_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case HK_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case HK_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case HK_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case HK_I64: ((int64_t *)p)[i] = v; break;
    case HK_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    default: break;
    }
}

static void store_f(HkDType t, void *p, int64_t i, double v) {
    switch (t) {
    case HK_F32: ((float *)p)[i] = (float)v; break;
    case HK_F64: ((double *)p)[i] = v; break;
    case HK_F16: ((uint16_t *)p)[i] = f32_to_f16((float)v); break;
    case HK_BF16: ((uint16_t *)p)[i] = f32_to_bf16((float)v); break;
    default: break;
    }
}

/* float -> integer without UB: NaN -> 0, saturate, truncate toward 0. */
static void store_f_as_i(HkDType t, void *p, int64_t i, double v) {
    if (t == HK_BOOL) {
        ((uint8_t *)p)[i] = v != 0;
        return;
    }
    if (v != v) v = 0;
    if (t == HK_U64) {
        ((uint64_t *)p)[i] = v <= 0 ? 0 : v >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)v;
        return;
    }
    int64_t r = v <= -9223372036854775808.0 ? INT64_MIN
                : v >= 9223372036854775808.0 ? INT64_MAX : (int64_t)v;
    store_i(t, p, i, r);
}

int hk_cast(HkDType from, const void *x, HkDType to, void *y, int64_t n, char *err) {
    if (!hk_cast_supported(from) || !hk_cast_supported(to)) {
        if (err) snprintf(err, HK_ERRLEN, "cast from dtype %d to %d is not supported",
                          (int)from, (int)to);
        return -1;
    }
    if (from == to) {
        memcpy(y, x, (size_t)n * hk_dtype_size(to));
        return 0;
    }
    /* mixed precision's casts: straight loops, the same values as the
     * general path's round trip through double */
    if (from == HK_F32 && to == HK_BF16) {
        hk_bf16_round(x, y, n);
        return 0;
    }
    if (from == HK_BF16 && to == HK_F32) {
        hk_bf16_expand(x, y, n);
        return 0;
    }
    int ff = is_float(from), tf = is_float(to);
    for (int64_t i = 0; i < n; i++) {
        if (ff && tf) store_f(to, y, i, load_f(from, x, i));
        else if (ff) store_f_as_i(to, y, i, load_f(from, x, i));
        else if (tf) {
            double v = from == HK_U64 ? (double)((const uint64_t *)x)[i] : (double)load_i(from, x, i);
            store_f(to, y, i, v);
        } else store_i(to, y, i, load_i(from, x, i));
    }
    return 0;
}

int hk_fill(HkDType dt, double v, void *y, int64_t n, char *err) {
    size_t es = hk_dtype_size(dt);
    if (!es) {
        if (err) snprintf(err, HK_ERRLEN, "fill: unsupported dtype %d", (int)dt);
        return -1;
    }
    unsigned char one[8];
    if (hk_cast(HK_F64, &v, dt, one, 1, err)) return -1;
    unsigned char *p = y;
    for (int64_t i = 0; i < n; i++) memcpy(p + (size_t)i * es, one, es);
    return 0;
}
