/* Private helpers shared by the IR printer (print.c), parser (parse.c) and
 * verifier (verify.c).  Not part of the public IR API: everything here is
 * static inline so no symbol leaks out of libhetc_ir.
 *
 * The text grammar (one statement per line; '#' starts a comment):
 *
 *   graph NAME [opset=N] [model="..."] [dir="..."] {
 *     KIND %NAME : TYPE [= INIT]                 declaration (KIND: input,
 *                                                param, const, act, grad,
 *                                                optstate)
 *     OUTS = Op(ARGS) [{ATTRS}] [: TYPES] [ANNOT...]   node
 *     output %NAME[, %NAME...]
 *   }
 *
 *   TYPE  := dtype[d0,d1,...] [sym=[s0,...]]     d is an integer or '?';
 *            dtype[*]                            shape not known yet
 *   TYPES := [kind] TYPE, ... ('_' for an omitted output; kind when != act)
 *   INIT  := dense[v0, v1, ...]                  values, exact
 *          | data(N bytes, fnv1a=HHHH)           elided: size + hash
 *          | ext("path", offset, length)         external data reference
 *   ARGS  := %NAME or '_' (omitted optional input), comma separated
 *   ATTRS := name=V, ...   V: 3 (int), 3.0 / 1e-05 / inf / nan (float),
 *            "s" (string), [1, 2] (ints), [1.0, 2.5] (floats), floats[]
 *   ANNOT := @bwd | @upd | @fwd, module=N, layer=N, stage=N, dead, name="..."
 *
 * Names are bare when made of [A-Za-z0-9_.\-/:] (not ending in ':'),
 * otherwise quoted with C-style escapes.  Floats print in the shortest form
 * that reads back to the same bits; NaNs other than the default quiet NaN
 * print their bits as nan(0x...).
 */
#ifndef HETC_IRTEXT_H
#define HETC_IRTEXT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* ------------------------------------------------------------ names */
static inline int irtext_name_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-' || c == '/' || c == ':';
}

/* A name prints bare when the lexer reads exactly it back.  The lexer takes
 * a ':' only when another name character follows, so that "%x: f32" still
 * reads as %x, while ONNX's "onnx::MatMul_12" stays bare. */
static inline int irtext_is_bare(const char *s) {
    if (!s || !*s) return 0;
    size_t n = 0;
    for (; s[n]; n++)
        if (!irtext_name_char((unsigned char)s[n])) return 0;
    return s[n - 1] != ':';
}

/* ------------------------------------------------------------ halves */
static inline float irtext_bits_f32(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
static inline uint32_t irtext_f32_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static inline float irtext_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, b;
    if (e == 0) {
        if (m == 0) {
            b = s;
        } else { /* subnormal: normalise the mantissa */
            uint32_t sh = 0;
            while (!(m & 0x400u)) {
                m <<= 1;
                sh++;
            }
            m &= 0x3ffu;
            b = s | ((113u - sh) << 23) | (m << 13);
        }
    } else if (e == 31) {
        b = s | 0x7f800000u | (m << 13);
    } else {
        b = s | ((e + 112u) << 23) | (m << 13);
    }
    return irtext_bits_f32(b);
}

/* Round to nearest even; NaN payloads keep their top bits. */
static inline uint16_t irtext_f32_to_f16(float f) {
    uint32_t x = irtext_f32_bits(f);
    uint32_t s = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (e == 0xff) {
        if (!m) return (uint16_t)(s | 0x7c00u);
        return (uint16_t)(s | 0x7c00u | ((m >> 13) ? (m >> 13) : 0x200u));
    }
    int32_t ee = (int32_t)e - 112;
    if (ee >= 31) return (uint16_t)(s | 0x7c00u);
    if (ee <= 0) {
        if (ee < -10) return (uint16_t)s;
        uint32_t mm = m | 0x800000u, shift = (uint32_t)(14 - ee);
        uint32_t r = mm >> shift, rem = mm & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(s | r);
    }
    uint32_t h = s | ((uint32_t)ee << 10) | (m >> 13), rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)h;
}

static inline float irtext_bf16_to_f32(uint16_t h) { return irtext_bits_f32((uint32_t)h << 16); }
static inline uint16_t irtext_f32_to_bf16(float f) {
    uint32_t x = irtext_f32_bits(f);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) {
        uint16_t h = (uint16_t)(x >> 16);
        return (h & 0x7fu) ? h : (uint16_t)(h | 0x40u);
    }
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* ------------------------------------------------------------ pointer map */
/* Open-addressing map from pointer to int, for O(1) membership tests on
 * graphs with tens of thousands of values. */
typedef struct IrPtrMap {
    const void **keys;
    int *vals;
    size_t cap, n;
} IrPtrMap;

static inline size_t irpm_hash(const void *p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}
static inline void irpm_init(IrPtrMap *m, size_t expect) {
    size_t cap = 16;
    while (cap < 2 * expect + 16)
        cap *= 2;
    m->keys = ir_xcalloc(cap, sizeof *m->keys);
    m->vals = ir_xcalloc(cap, sizeof *m->vals);
    m->cap = cap;
    m->n = 0;
}
static inline void irpm_free(IrPtrMap *m) {
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->n = 0;
}
/* Slot of key, or of the empty slot where it would go. */
static inline size_t irpm_slot(const IrPtrMap *m, const void *k) {
    size_t i = irpm_hash(k) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != k)
        i = (i + 1) & (m->cap - 1);
    return i;
}
static inline int irpm_get(const IrPtrMap *m, const void *k, int *val) {
    if (!k) return 0;
    size_t i = irpm_slot(m, k);
    if (!m->keys[i]) return 0;
    if (val) *val = m->vals[i];
    return 1;
}
/* Insert or overwrite; returns 1 if the key was new. */
static inline int irpm_put(IrPtrMap *m, const void *k, int val) {
    if (!k) return 0;
    if (2 * (m->n + 1) > m->cap) {
        IrPtrMap big;
        irpm_init(&big, m->cap);
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) {
                size_t j = irpm_slot(&big, m->keys[i]);
                big.keys[j] = m->keys[i];
                big.vals[j] = m->vals[i];
                big.n++;
            }
        irpm_free(m);
        *m = big;
    }
    size_t i = irpm_slot(m, k);
    int fresh = m->keys[i] == NULL;
    if (fresh) m->n++;
    m->keys[i] = k;
    m->vals[i] = val;
    return fresh;
}

#endif
