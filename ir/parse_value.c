/* The IR parser's values (parse.c): the name table (forward references),
 * types, and initializers (dense, elided, external). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "irtext.h"
#include "parse_internal.h"

/* ------------------------------------------------------------ names -> values */
static uint64_t str_hash(const char *s) { return ir_fnv1a(s, strlen(s)); }

static Ent *lookup(P *p, const char *nm) {
    if (!p->tab_cap) return NULL;
    size_t i = (size_t)str_hash(nm) & (p->tab_cap - 1);
    while (p->tab[i] >= 0) {
        Ent *e = &p->ents[p->tab[i]];
        if (strcmp(e->v->name, nm) == 0) return e;
        i = (i + 1) & (p->tab_cap - 1);
    }
    return NULL;
}

static void tab_insert(P *p, int idx) {
    size_t i = (size_t)str_hash(p->ents[idx].v->name) & (p->tab_cap - 1);
    while (p->tab[i] >= 0)
        i = (i + 1) & (p->tab_cap - 1);
    p->tab[i] = idx;
}

static Ent *add_ent(P *p, IrValue *v, int pending, int line, int col) {
    if (2 * (size_t)(p->nents + 1) > p->tab_cap) {
        size_t cap = p->tab_cap ? 2 * p->tab_cap : 64;
        free(p->tab);
        p->tab = ir_xmalloc(cap * sizeof *p->tab);
        for (size_t i = 0; i < cap; i++)
            p->tab[i] = -1;
        p->tab_cap = cap;
        for (int k = 0; k < p->nents; k++)
            tab_insert(p, k);
    }
    if (p->nents >= p->ents_cap) {
        p->ents_cap = p->ents_cap ? 2 * p->ents_cap : 64;
        p->ents = ir_xrealloc(p->ents, (size_t)p->ents_cap * sizeof *p->ents);
    }
    Ent *e = &p->ents[p->nents];
    e->v = v;
    e->pending = pending;
    e->line = line;
    e->col = col;
    tab_insert(p, p->nents++);
    return e;
}

/* The parser's name table already guarantees unique names, so
 * ir_value_new keeps the name as given. */
static IrValue *new_value(IrGraph *g, const char *nm, IrDType dt, const IrShape *sh,
                          IrValueKind kind) {
    return ir_value_new(g, nm, dt, sh, kind);
}

/* A use of %name: the value, or a placeholder to be defined later. */
IrValue *irp_use(P *p, const char *nm, int line, int col) {
    Ent *e = lookup(p, nm);
    if (e) return e->v;
    IrValue *v = new_value(p->g, nm, IR_UNDEF, NULL, IR_VK_ACT);
    add_ent(p, v, 1, line, col);
    return v;
}

/* A definition of %name: a fresh value, or the placeholder made at an
 * earlier use, filled in.  Fails if it is already defined. */
IrValue *irp_define(P *p, const char *nm, IrValueKind kind, IrDType dt, const IrShape *sh, int line,
                    int col) {
    Ent *e = lookup(p, nm);
    if (e && !e->pending) {
        irp_perr_at(p, line, col, "value '%%%s' is defined twice", nm);
        return NULL;
    }
    if (e) {
        e->pending = 0;
        e->v->kind = kind;
        e->v->dtype = dt;
        e->v->shape_known = sh != NULL;
        if (sh) e->v->shape = *sh;
        return e->v;
    }
    IrValue *v = new_value(p->g, nm, dt, sh, kind);
    add_ent(p, v, 0, line, col);
    return v;
}

/* ------------------------------------------------------------ types */
void irp_type_clear(Type *t) {
    for (int i = 0; i < IR_MAX_RANK; i++) free(t->sym[i]), t->sym[i] = NULL;
}

int irp_kind_from_word(const char *w) {
    for (int k = 0; k < IR_VK_COUNT; k++)
        if (strcmp(w, ir_value_kind_name((IrValueKind)k)) == 0) return k;
    return -1;
}

int irp_parse_type(P *p, Type *t, int allow_kind) {
    memset(t, 0, sizeof *t);
    t->kind = IR_VK_ACT;
    char w[32];
    size_t save = p->i;
    if (!irp_word(p, w, sizeof w)) return irp_expected(p, "a dtype (f32, i64, bool, ...)");
    if (allow_kind && irp_kind_from_word(w) >= 0) {
        t->kind = (IrValueKind)irp_kind_from_word(w);
        save = p->i;
        if (!irp_word(p, w, sizeof w)) return irp_expected(p, "a dtype (f32, i64, bool, ...)");
    }
    if (strcmp(w, "undef") == 0) {
        t->dtype = IR_UNDEF;
    } else {
        t->dtype = ir_dtype_from_name(w);
        if (t->dtype == IR_UNDEF) {
            p->i = save;
            return irp_expected(p, "a dtype (f32, i64, bool, ...)");
        }
    }
    if (irp_expect(p, '[', "'[' after the dtype") != 0) return -1;
    if (irp_accept(p, '*')) return irp_expect(p, ']', "']' after '*'");
    t->known = 1;
    if (!irp_accept(p, ']')) {
        int64_t prod = 1;
        for (;;) {
            if (t->shape.rank >= IR_MAX_RANK)
                return irp_perr_at(p, p->line, irp_col_at(p, p->i), "shape has more than %d dims",
                                   IR_MAX_RANK);
            int64_t d = -1;
            if (!irp_accept(p, '?')) {
                if (irp_int_tok(p, &d, 0, MAX_NUMEL, "dim") != 0) return -1;
                if (d > 0 && prod > MAX_NUMEL / d)
                    return irp_perr_at(p, p->line, irp_col_at(p, p->i),
                                       "shape has more than 2^50 elements");
                if (d > 0) prod *= d;
            }
            t->shape.dims[t->shape.rank++] = d;
            if (irp_accept(p, ']')) break;
            if (irp_expect(p, ',', "',' or ']' in shape") != 0) return -1;
        }
    }
    irp_ws(p);
    if (!irp_accept_word(p, "sym")) return 0;
    if (irp_expect(p, '=', "'=' after sym") != 0 || irp_expect(p, '[', "'[' after sym=") != 0)
        return -1;
    for (int k = 0;; k++) {
        if (k >= t->shape.rank)
            return irp_perr_at(p, p->line, irp_col_at(p, p->i),
                               "sym=[...] has more names than the shape has dims");
        int quoted;
        char *s = irp_name(p, "a dim name or '_'", &quoted);
        if (!s) return -1;
        if (!quoted && strcmp(s, "_") == 0)
            free(s);
        else
            t->sym[k] = s;
        int line, col;
        irp_here(p, &line, &col);
        if (irp_accept(p, ']')) {
            if (k + 1 != t->shape.rank)
                return irp_perr_at(p, line, col, "sym=[...] has %d names for %d dims", k + 1,
                                   t->shape.rank);
            return 0;
        }
        if (irp_expect(p, ',', "',' or ']' in sym=[...]") != 0) return -1;
    }
}

/* Move a parsed type's shape and symbols into v (which owns them after). */
void irp_type_apply(Type *t, IrValue *v) {
    for (int i = 0; i < IR_MAX_RANK; i++) {
        free(v->sym[i]);
        v->sym[i] = t->sym[i];
        t->sym[i] = NULL;
    }
}

/* ------------------------------------------------------------ initializers */
/* Store one dense element of dtype dt at dst. */
static int put_elem(P *p, IrDType dt, unsigned char *dst) {
    if (dt == IR_BOOL) {
        if (irp_accept_word(p, "true"))
            *dst = 1;
        else if (irp_accept_word(p, "false"))
            *dst = 0;
        else {
            int64_t v;
            if (irp_int_tok(p, &v, 0, 1, "bool (true, false, 0 or 1)") != 0) return -1;
            *dst = (unsigned char)v;
        }
        return 0;
    }
    Num n;
    if (irp_number(p, &n, "a number") != 0) return -1;
    if (ir_dtype_is_float(dt)) {
        if (n.overflow == 2) return irp_perr_at(p, n.line, n.col, "number has too many digits");
        if (n.has_bits) {
            /* explicit NaN bits must be a NaN of this width, or the value
             * would print differently from how it was written */
            int ok;
            if (dt == IR_F64)
                ok = (n.bits & 0x7ff0000000000000ULL) == 0x7ff0000000000000ULL &&
                     (n.bits & 0xfffffffffffffULL);
            else if (dt == IR_F32)
                ok = n.bits <= 0xffffffffULL && (n.bits & 0x7f800000u) == 0x7f800000u &&
                     (n.bits & 0x7fffffu);
            else if (dt == IR_F16)
                ok = n.bits <= 0xffffULL && (n.bits & 0x7c00u) == 0x7c00u && (n.bits & 0x3ffu);
            else
                ok = n.bits <= 0xffffULL && (n.bits & 0x7f80u) == 0x7f80u && (n.bits & 0x7fu);
            if (!ok)
                return irp_perr_at(p, n.line, n.col, "nan(0x...) bits are not a %s NaN",
                                   ir_dtype_name(dt));
        }
        if (dt == IR_F64) {
            double d = irp_num_f64(&n);
            memcpy(dst, &d, 8);
        } else if (dt == IR_F32) {
            uint32_t b = n.has_bits ? (uint32_t)n.bits : irtext_f32_bits(irp_num_f32(&n));
            if (!n.has_bits && strcmp(n.text, "nan") == 0) b = 0x7fc00000u;
            if (!n.has_bits && strcmp(n.text, "-nan") == 0) b = 0xffc00000u;
            memcpy(dst, &b, 4);
        } else {
            uint16_t h;
            uint16_t qnan = dt == IR_BF16 ? 0x7fc0 : 0x7e00;
            if (n.has_bits)
                h = (uint16_t)n.bits;
            else if (strcmp(n.text, "nan") == 0)
                h = qnan;
            else if (strcmp(n.text, "-nan") == 0)
                h = (uint16_t)(qnan | 0x8000u);
            else
                h = dt == IR_BF16 ? irtext_f32_to_bf16(irp_num_f32(&n))
                                  : irtext_f32_to_f16(irp_num_f32(&n));
            memcpy(dst, &h, 2);
        }
        return 0;
    }
    if (n.is_float)
        return irp_perr_at(p, n.line, n.col, "expected an integer for dtype %s", ir_dtype_name(dt));
    if (n.overflow)
        return irp_perr_at(p, n.line, n.col, "integer out of range for dtype %s",
                           ir_dtype_name(dt));
    if (dt == IR_U64) {
        if (n.neg && n.mag) return irp_perr_at(p, n.line, n.col, "negative value for dtype u64");
        memcpy(dst, &n.mag, 8);
        return 0;
    }
    int64_t v;
    if (irp_num_i64(p, &n, &v) != 0) return -1;
    int64_t lo, hi;
    switch (dt) {
    case IR_I8: lo = INT8_MIN, hi = INT8_MAX; break;
    case IR_U8: lo = 0, hi = UINT8_MAX; break;
    case IR_I16: lo = INT16_MIN, hi = INT16_MAX; break;
    case IR_U16: lo = 0, hi = UINT16_MAX; break;
    case IR_I32: lo = INT32_MIN, hi = INT32_MAX; break;
    case IR_U32: lo = 0, hi = UINT32_MAX; break;
    default: lo = INT64_MIN, hi = INT64_MAX; break;
    }
    if (v < lo || v > hi)
        return irp_perr_at(p, n.line, n.col, "%" PRId64 " is out of range for dtype %s", v,
                           ir_dtype_name(dt));
    switch (ir_dtype_size(dt)) {
    case 1: {
        uint8_t x = (uint8_t)v;
        memcpy(dst, &x, 1);
        break;
    }
    case 2: {
        uint16_t x = (uint16_t)v;
        memcpy(dst, &x, 2);
        break;
    }
    case 4: {
        uint32_t x = (uint32_t)v;
        memcpy(dst, &x, 4);
        break;
    }
    default: memcpy(dst, &v, 8); break;
    }
    return 0;
}

static int parse_dense(P *p, IrValue *v, int line, int col) {
    size_t es = ir_dtype_size(v->dtype);
    if (es == 0 || v->dtype == IR_STRING)
        return irp_perr_at(p, line, col, "dense[...] needs a numeric or bool dtype, not %s",
                           ir_dtype_name(v->dtype));
    if (!v->shape_known || !ir_shape_is_static(&v->shape))
        return irp_perr_at(p, line, col, "dense[...] needs a static shape");
    int64_t numel = ir_shape_numel(&v->shape);
    if (irp_expect(p, '[', "'[' after dense") != 0) return -1;
    unsigned char *d = NULL;
    int64_t cnt = 0;
    size_t cap = 0;
    if (!irp_accept(p, ']')) {
        for (;;) {
            if (cnt >= numel) {
                free(d);
                irp_ws(p);
                return irp_perr_at(p, p->line, irp_col_at(p, p->i),
                                   "dense[...] has more than the %" PRId64 " elements of its shape",
                                   numel);
            }
            if ((size_t)(cnt + 1) * es > cap) {
                cap = cap ? 2 * cap : 8 * es;
                d = ir_xrealloc(d, cap);
            }
            if (put_elem(p, v->dtype, d + (size_t)cnt * es) != 0) {
                free(d);
                return -1;
            }
            cnt++;
            if (irp_accept(p, ']')) break;
            if (irp_expect(p, ',', "',' or ']' in dense[...]") != 0) {
                free(d);
                return -1;
            }
        }
    }
    if (cnt != numel) {
        free(d);
        return irp_perr_at(p, line, col,
                           "dense[...] has %" PRId64 " elements, shape needs %" PRId64, cnt, numel);
    }
    ir_value_set_data(v, d ? d : ir_xmalloc(1), (size_t)cnt * es);
    return 0;
}

int irp_parse_init(P *p, IrValue *v) {
    int line, col;
    irp_here(p, &line, &col);
    char w[16];
    size_t save = p->i;
    irp_word(p, w, sizeof w);
    if (v->kind != IR_VK_PARAM && v->kind != IR_VK_CONST)
        return irp_perr_at(p, line, col, "only param and const values take an initializer");
    if (strcmp(w, "dense") == 0) return parse_dense(p, v, line, col);
    if (strcmp(w, "data") == 0) {
        Num n;
        if (irp_expect(p, '(', "'(' after data") != 0 || irp_number(p, &n, "a byte count") != 0)
            return -1;
        if (n.is_float || n.neg || n.overflow || n.mag > (uint64_t)INT64_MAX)
            return irp_perr_at(p, n.line, n.col, "expected a byte count");
        if (!irp_accept_word(p, "bytes")) return irp_expected(p, "'bytes'");
        if (irp_expect(p, ',', "','") != 0) return -1;
        if (!irp_accept_word(p, "fnv1a")) return irp_expected(p, "'fnv1a'");
        if (irp_expect(p, '=', "'=' after fnv1a") != 0) return -1;
        irp_ws(p);
        uint64_t h = 0;
        int nd = 0;
        for (int c; (c = irp_hexval((unsigned char)p->s[p->i])) >= 0; p->i++) {
            if (++nd > 16)
                return irp_perr_at(p, p->line, irp_col_at(p, p->i),
                                   "fnv1a hash longer than 16 hex digits");
            h = h << 4 | (uint64_t)c;
        }
        if (nd == 0) return irp_expected(p, "a hex fnv1a hash");
        if (irp_expect(p, ')', "')' after the hash") != 0) return -1;
        v->data_elided = 1;
        v->elided_hash = h;
        v->nbytes = (size_t)n.mag;
        return 0;
    }
    if (strcmp(w, "ext") == 0) {
        if (irp_expect(p, '(', "'(' after ext") != 0) return -1;
        char *path = irp_qstring(p);
        if (!path) return -1;
        int64_t off, len;
        if (irp_expect(p, ',', "',' after the path") != 0 ||
            irp_int_tok(p, &off, 0, INT64_MAX, "offset") != 0 || irp_expect(p, ',', "','") != 0 ||
            irp_int_tok(p, &len, 0, INT64_MAX, "length") != 0 || irp_expect(p, ')', "')'") != 0) {
            free(path);
            return -1;
        }
        v->has_ext = 1;
        free(v->ext.path);
        v->ext.path = path;
        v->ext.offset = off;
        v->ext.length = len;
        return 0;
    }
    p->i = save;
    return irp_expected(p, "dense[...], data(...) or ext(...)");
}
