/* The IR parser: recursive descent over the grammar in irtext.h.
 *
 * It reads what ir_print writes (and hand-written variations: comments,
 * free spacing, forward references), so that print(parse(print(g))) ==
 * print(g).  Text may come from anywhere, so every error is a message with
 * file:line:col and what was expected; nothing here aborts on bad input. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "irtext.h"

/* Largest element count a shape may have: keeps numel * dtype size and
 * ir_shape_numel's running product far from int64 overflow. */
#define MAX_NUMEL (INT64_C(1) << 50)

/* A name seen in the text.  `pending` values were used before their
 * definition: created as placeholders and filled in when defined. */
typedef struct Ent {
    IrValue *v;
    int pending;
    int line, col; /* first use, for "never defined" */
} Ent;

typedef struct P {
    const char *s;
    size_t i;
    int line;
    size_t line_start;
    const char *file;
    IrError *err;
    int failed;
    IrGraph *g;
    Ent *ents;
    int nents, ents_cap;
    int *tab; /* hash of names -> index in ents, -1 empty */
    size_t tab_cap;
} P;

/* ------------------------------------------------------------ errors */
static int col_at(const P *p, size_t i) { return (int)(i - p->line_start) + 1; }

static int perr_at(P *p, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int perr_at(P *p, int line, int col, const char *fmt, ...) {
    if (p->failed) return -1; /* keep the first, most precise message */
    p->failed = 1;
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ir_errorf(p->err, "%s:%d:%d: %s", p->file, line, col, msg);
}

static void ws(P *p);

/* Describe what is at the cursor, for "expected X, found Y". */
static const char *found(P *p, char *buf, size_t n) {
    ws(p);
    const char *s = p->s + p->i;
    if (!*s) return "end of input";
    if (*s == '\n') return "end of line";
    size_t o = 0;
    buf[o++] = '\'';
    for (int k = 0; s[k] && s[k] != '\n' && k < 16 && o + 6 < n; k++) {
        unsigned char c = (unsigned char)s[k];
        if (k > 0 && (c == ' ' || c == '\t')) break;
        if (c < 0x20 || c >= 0x7f)
            o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o++] = '\'';
    buf[o] = 0;
    return buf;
}

static int expected(P *p, const char *what) {
    char b[128];
    const char *f = found(p, b, sizeof b);
    return perr_at(p, p->line, col_at(p, p->i), "expected %s, found %s", what, f);
}

/* ------------------------------------------------------------ lexing */
static void ws(P *p) {
    for (;;) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\r') {
            p->i++;
        } else if (c == '#') {
            while (p->s[p->i] && p->s[p->i] != '\n')
                p->i++;
        } else {
            return;
        }
    }
}

/* Skip blanks and report where the next token starts. */
static void here(P *p, int *line, int *col) {
    ws(p);
    *line = p->line;
    *col = col_at(p, p->i);
}

static int peekc(P *p) {
    ws(p);
    return (unsigned char)p->s[p->i];
}

static int accept(P *p, char c) {
    ws(p);
    if (p->s[p->i] != c || c == '\n' || c == 0) return 0;
    p->i++;
    return 1;
}

static int expect(P *p, char c, const char *what) {
    if (accept(p, c)) return 0;
    return expected(p, what);
}

static int eol(P *p) {
    ws(p);
    if (p->s[p->i] == '\n') {
        p->i++;
        p->line++;
        p->line_start = p->i;
        return 0;
    }
    if (!p->s[p->i]) return 0;
    return expected(p, "end of line");
}

static void skip_blank(P *p) {
    for (;;) {
        ws(p);
        if (p->s[p->i] != '\n') return;
        p->i++;
        p->line++;
        p->line_start = p->i;
    }
}

static int is_word_start(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static int is_word_char(int c) { return is_word_start(c) || (c >= '0' && c <= '9'); }

/* A keyword, op or dtype name: [A-Za-z_][A-Za-z0-9_]*.  Returns its length
 * (0 if none is here, buf then empty); a longer word than fits is copied
 * truncated and cannot match anything. */
static size_t word(P *p, char *buf, size_t n) {
    ws(p);
    size_t k = 0, o = 0;
    if (!is_word_start((unsigned char)p->s[p->i])) {
        buf[0] = 0;
        return 0;
    }
    while (is_word_char((unsigned char)p->s[p->i + k])) {
        if (o + 1 < n) buf[o++] = p->s[p->i + k];
        k++;
    }
    buf[o] = 0;
    if (k >= n) buf[0] = 0;
    p->i += k;
    return k;
}

/* Is the next word exactly kw (followed by a non-word char)?  Consumes it if so. */
static int accept_word(P *p, const char *kw) {
    ws(p);
    size_t n = strlen(kw);
    if (strncmp(p->s + p->i, kw, n) != 0 || is_word_char((unsigned char)p->s[p->i + n])) return 0;
    p->i += n;
    return 1;
}

typedef struct Buf {
    char *s;
    size_t n, cap;
} Buf;
static void buf_put(Buf *b, char c) {
    if (b->n + 1 >= b->cap) {
        b->cap = b->cap ? 2 * b->cap : 32;
        b->s = ir_xrealloc(b->s, b->cap);
    }
    b->s[b->n++] = c;
    b->s[b->n] = 0;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "..." with \" \\ \n \t \r \xHH escapes; returns malloc'd text or NULL. */
static char *qstring(P *p) {
    ws(p);
    if (p->s[p->i] != '"') {
        expected(p, "'\"'");
        return NULL;
    }
    size_t start = p->i++;
    Buf b = {0};
    buf_put(&b, 0), b.n = 0; /* ensure a buffer even for "" */
    for (;;) {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') {
            p->i++;
            return b.s;
        }
        if (c == 0 || c == '\n') {
            perr_at(p, p->line, col_at(p, start), "unterminated string");
            break;
        }
        if (c < 0x20 || c == 0x7f) {
            perr_at(p, p->line, col_at(p, p->i),
                    "raw control character 0x%02x in string (use \\x%02x)", c, c);
            break;
        }
        if (c != '\\') {
            buf_put(&b, (char)c);
            p->i++;
            continue;
        }
        char e = p->s[p->i + 1];
        if (e == '"' || e == '\\')
            buf_put(&b, e), p->i += 2;
        else if (e == 'n')
            buf_put(&b, '\n'), p->i += 2;
        else if (e == 't')
            buf_put(&b, '\t'), p->i += 2;
        else if (e == 'r')
            buf_put(&b, '\r'), p->i += 2;
        else if (e == 'x' && hexval((unsigned char)p->s[p->i + 2]) >= 0 &&
                 hexval((unsigned char)p->s[p->i + 3]) >= 0) {
            int v =
                hexval((unsigned char)p->s[p->i + 2]) * 16 + hexval((unsigned char)p->s[p->i + 3]);
            if (v == 0) {
                perr_at(p, p->line, col_at(p, p->i), "\\x00 is not allowed in a string");
                break;
            }
            buf_put(&b, (char)v);
            p->i += 4;
        } else {
            perr_at(p, p->line, col_at(p, p->i),
                    "bad escape in string (expected \\\" \\\\ \\n \\t \\r or \\xHH)");
            break;
        }
    }
    free(b.s);
    return NULL;
}

/* A bare name ([A-Za-z0-9_.\-/:]+, ':' only before another name char) or a
 * quoted string.  *quoted tells which (a bare '_' means "none" in places). */
static char *name(P *p, const char *what, int *quoted) {
    ws(p);
    if (quoted) *quoted = 0;
    if (p->s[p->i] == '"') {
        if (quoted) *quoted = 1;
        return qstring(p);
    }
    size_t k = 0;
    for (;;) {
        unsigned char c = (unsigned char)p->s[p->i + k];
        if (c == ':') {
            if (!irtext_name_char((unsigned char)p->s[p->i + k + 1])) break;
        } else if (!irtext_name_char(c)) {
            break;
        }
        k++;
    }
    if (k == 0) {
        expected(p, what);
        return NULL;
    }
    char *r = ir_xmalloc(k + 1);
    memcpy(r, p->s + p->i, k);
    r[k] = 0;
    p->i += k;
    return r;
}

/* %NAME after the '%': a value name, never empty (the builder would
 * invent one). */
static char *vname(P *p) {
    int line, col;
    here(p, &line, &col);
    char *s = name(p, "a value name", NULL);
    if (s && !*s) {
        free(s);
        perr_at(p, line, col, "empty value name");
        return NULL;
    }
    return s;
}

/* A number token.  Integers keep their magnitude exactly; floats keep their
 * text for strtod/strtof; NaNs may carry explicit bits: nan(0x...). */
typedef struct Num {
    int is_float, neg, overflow;
    uint64_t mag;  /* integers */
    char text[96]; /* floats, as written (inf/nan included) */
    int has_bits;
    uint64_t bits; /* nan(0x...) */
    int line, col;
} Num;

static int number(P *p, Num *n, const char *what) {
    ws(p);
    memset(n, 0, sizeof *n);
    n->line = p->line;
    n->col = col_at(p, p->i);
    size_t i = p->i, t = 0;
    if (p->s[i] == '-' || p->s[i] == '+') {
        n->neg = p->s[i] == '-';
        if (n->neg) n->text[t++] = '-';
        i++;
    }
    const char *s = p->s;
    if (strncmp(s + i, "inf", 3) == 0 && !irtext_name_char((unsigned char)s[i + 3])) {
        n->is_float = 1;
        memcpy(n->text + t, "inf", 4);
        p->i = i + 3;
        return 0;
    }
    if (strncmp(s + i, "nan", 3) == 0 &&
        (s[i + 3] == '(' || !irtext_name_char((unsigned char)s[i + 3]))) {
        n->is_float = 1;
        memcpy(n->text + t, "nan", 4);
        i += 3;
        if (s[i] == '(') {
            if (n->neg)
                return perr_at(p, n->line, n->col, "nan(0x...) takes no sign: the bits hold it");
            if (s[i + 1] != '0' || (s[i + 2] != 'x' && s[i + 2] != 'X'))
                return perr_at(p, p->line, col_at(p, i + 1), "expected 0x after nan(");
            i += 3;
            int nd = 0;
            uint64_t b = 0;
            for (int h; (h = hexval((unsigned char)s[i])) >= 0; i++) {
                if (++nd > 16) return perr_at(p, n->line, n->col, "NaN bits wider than 64 bits");
                b = b << 4 | (uint64_t)h;
            }
            if (nd == 0 || s[i] != ')')
                return perr_at(p, p->line, col_at(p, i),
                               "expected hex digits and ')' in nan(0x...)");
            i++;
            n->has_bits = 1;
            n->bits = b;
        }
        p->i = i;
        return 0;
    }
    int digits = 0;
    while (s[i] >= '0' && s[i] <= '9') {
        uint64_t d = (uint64_t)(s[i] - '0');
        if (n->mag > (UINT64_MAX - d) / 10)
            n->overflow = 1;
        else
            n->mag = n->mag * 10 + d;
        if (t + 1 < sizeof n->text)
            n->text[t++] = s[i];
        else
            n->overflow = 2;
        i++, digits++;
    }
    if (s[i] == '.') {
        n->is_float = 1;
        if (t + 1 < sizeof n->text) n->text[t++] = '.';
        i++;
        while (s[i] >= '0' && s[i] <= '9') {
            if (t + 1 < sizeof n->text)
                n->text[t++] = s[i];
            else
                n->overflow = 2;
            i++, digits++;
        }
    }
    if (digits == 0) return expected(p, what);
    if (s[i] == 'e' || s[i] == 'E') {
        n->is_float = 1;
        if (t + 1 < sizeof n->text) n->text[t++] = 'e';
        i++;
        if (s[i] == '-' || s[i] == '+') {
            if (t + 1 < sizeof n->text) n->text[t++] = s[i];
            i++;
        }
        if (!(s[i] >= '0' && s[i] <= '9'))
            return perr_at(p, p->line, col_at(p, i), "expected exponent digits");
        while (s[i] >= '0' && s[i] <= '9') {
            if (t + 1 < sizeof n->text)
                n->text[t++] = s[i];
            else
                n->overflow = 2;
            i++;
        }
    }
    n->text[t] = 0;
    if (irtext_name_char((unsigned char)s[i]) && s[i] != ':')
        return perr_at(p, p->line, col_at(p, i), "unexpected '%c' after number", s[i]);
    if (n->is_float && n->overflow == 2)
        return perr_at(p, n->line, n->col, "number has too many digits");
    p->i = i;
    return 0;
}

static int num_i64(P *p, const Num *n, int64_t *out) {
    if (n->is_float || n->overflow)
        return perr_at(p, n->line, n->col, "expected an integer in 64-bit range");
    if (n->neg) {
        if (n->mag > (uint64_t)INT64_MAX + 1)
            return perr_at(p, n->line, n->col, "integer out of 64-bit range");
        *out = n->mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)n->mag;
    } else {
        if (n->mag > (uint64_t)INT64_MAX)
            return perr_at(p, n->line, n->col, "integer out of 64-bit range");
        *out = (int64_t)n->mag;
    }
    return 0;
}

static int int_tok(P *p, int64_t *out, int64_t lo, int64_t hi, const char *what) {
    Num n;
    if (number(p, &n, what) != 0) return -1;
    if (num_i64(p, &n, out) != 0) return -1;
    if (*out < lo || *out > hi)
        return perr_at(p, n.line, n.col, "%s out of range [%" PRId64 ", %" PRId64 "]", what, lo,
                       hi);
    return 0;
}

static double num_f64(const Num *n) {
    uint64_t bits;
    double d;
    const char *t = n->text + (n->text[0] == '-');
    if (n->has_bits)
        bits = n->bits;
    else if (strcmp(t, "nan") == 0)
        bits = n->neg ? 0xfff8000000000000ULL : 0x7ff8000000000000ULL;
    else if (strcmp(t, "inf") == 0)
        return n->neg ? -INFINITY : INFINITY;
    else
        return strtod(n->text, NULL); /* ints too: text holds sign and digits */
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* Read as a float directly (not via double) so shortest-form f32 text reads
 * back to the same bits without double rounding.  NaNs are handled by the
 * caller, which knows their bits. */
static float num_f32(const Num *n) {
    const char *t = n->text + (n->text[0] == '-');
    if (strcmp(t, "inf") == 0) return n->neg ? -INFINITY : INFINITY;
    return strtof(n->text, NULL);
}

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
static IrValue *use(P *p, const char *nm, int line, int col) {
    Ent *e = lookup(p, nm);
    if (e) return e->v;
    IrValue *v = new_value(p->g, nm, IR_UNDEF, NULL, IR_VK_ACT);
    add_ent(p, v, 1, line, col);
    return v;
}

/* A definition of %name: a fresh value, or the placeholder made at an
 * earlier use, filled in.  Fails if it is already defined. */
static IrValue *define(P *p, const char *nm, IrValueKind kind, IrDType dt, const IrShape *sh,
                       int line, int col) {
    Ent *e = lookup(p, nm);
    if (e && !e->pending) {
        perr_at(p, line, col, "value '%%%s' is defined twice", nm);
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
typedef struct Type {
    IrValueKind kind;
    IrDType dtype;
    int known;
    IrShape shape;
    char *sym[IR_MAX_RANK];
} Type;

static void type_clear(Type *t) {
    for (int i = 0; i < IR_MAX_RANK; i++)
        free(t->sym[i]), t->sym[i] = NULL;
}

static int kind_from_word(const char *w) {
    for (int k = 0; k < IR_VK_COUNT; k++)
        if (strcmp(w, ir_value_kind_name((IrValueKind)k)) == 0) return k;
    return -1;
}

static int parse_type(P *p, Type *t, int allow_kind) {
    memset(t, 0, sizeof *t);
    t->kind = IR_VK_ACT;
    char w[32];
    size_t save = p->i;
    if (!word(p, w, sizeof w)) return expected(p, "a dtype (f32, i64, bool, ...)");
    if (allow_kind && kind_from_word(w) >= 0) {
        t->kind = (IrValueKind)kind_from_word(w);
        save = p->i;
        if (!word(p, w, sizeof w)) return expected(p, "a dtype (f32, i64, bool, ...)");
    }
    if (strcmp(w, "undef") == 0) {
        t->dtype = IR_UNDEF;
    } else {
        t->dtype = ir_dtype_from_name(w);
        if (t->dtype == IR_UNDEF) {
            p->i = save;
            return expected(p, "a dtype (f32, i64, bool, ...)");
        }
    }
    if (expect(p, '[', "'[' after the dtype") != 0) return -1;
    if (accept(p, '*')) return expect(p, ']', "']' after '*'");
    t->known = 1;
    if (!accept(p, ']')) {
        int64_t prod = 1;
        for (;;) {
            if (t->shape.rank >= IR_MAX_RANK)
                return perr_at(p, p->line, col_at(p, p->i), "shape has more than %d dims",
                               IR_MAX_RANK);
            int64_t d = -1;
            if (!accept(p, '?')) {
                if (int_tok(p, &d, 0, MAX_NUMEL, "dim") != 0) return -1;
                if (d > 0 && prod > MAX_NUMEL / d)
                    return perr_at(p, p->line, col_at(p, p->i),
                                   "shape has more than 2^50 elements");
                if (d > 0) prod *= d;
            }
            t->shape.dims[t->shape.rank++] = d;
            if (accept(p, ']')) break;
            if (expect(p, ',', "',' or ']' in shape") != 0) return -1;
        }
    }
    ws(p);
    if (!accept_word(p, "sym")) return 0;
    if (expect(p, '=', "'=' after sym") != 0 || expect(p, '[', "'[' after sym=") != 0) return -1;
    for (int k = 0;; k++) {
        if (k >= t->shape.rank)
            return perr_at(p, p->line, col_at(p, p->i),
                           "sym=[...] has more names than the shape has dims");
        int quoted;
        char *s = name(p, "a dim name or '_'", &quoted);
        if (!s) return -1;
        if (!quoted && strcmp(s, "_") == 0)
            free(s);
        else
            t->sym[k] = s;
        int line, col;
        here(p, &line, &col);
        if (accept(p, ']')) {
            if (k + 1 != t->shape.rank)
                return perr_at(p, line, col, "sym=[...] has %d names for %d dims", k + 1,
                               t->shape.rank);
            return 0;
        }
        if (expect(p, ',', "',' or ']' in sym=[...]") != 0) return -1;
    }
}

/* Move a parsed type's shape and symbols into v (which owns them after). */
static void type_apply(Type *t, IrValue *v) {
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
        if (accept_word(p, "true"))
            *dst = 1;
        else if (accept_word(p, "false"))
            *dst = 0;
        else {
            int64_t v;
            if (int_tok(p, &v, 0, 1, "bool (true, false, 0 or 1)") != 0) return -1;
            *dst = (unsigned char)v;
        }
        return 0;
    }
    Num n;
    if (number(p, &n, "a number") != 0) return -1;
    if (ir_dtype_is_float(dt)) {
        if (n.overflow == 2) return perr_at(p, n.line, n.col, "number has too many digits");
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
                return perr_at(p, n.line, n.col, "nan(0x...) bits are not a %s NaN",
                               ir_dtype_name(dt));
        }
        if (dt == IR_F64) {
            double d = num_f64(&n);
            memcpy(dst, &d, 8);
        } else if (dt == IR_F32) {
            uint32_t b = n.has_bits ? (uint32_t)n.bits : irtext_f32_bits(num_f32(&n));
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
                h = dt == IR_BF16 ? irtext_f32_to_bf16(num_f32(&n))
                                  : irtext_f32_to_f16(num_f32(&n));
            memcpy(dst, &h, 2);
        }
        return 0;
    }
    if (n.is_float)
        return perr_at(p, n.line, n.col, "expected an integer for dtype %s", ir_dtype_name(dt));
    if (n.overflow)
        return perr_at(p, n.line, n.col, "integer out of range for dtype %s", ir_dtype_name(dt));
    if (dt == IR_U64) {
        if (n.neg && n.mag) return perr_at(p, n.line, n.col, "negative value for dtype u64");
        memcpy(dst, &n.mag, 8);
        return 0;
    }
    int64_t v;
    if (num_i64(p, &n, &v) != 0) return -1;
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
        return perr_at(p, n.line, n.col, "%" PRId64 " is out of range for dtype %s", v,
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
        return perr_at(p, line, col, "dense[...] needs a numeric or bool dtype, not %s",
                       ir_dtype_name(v->dtype));
    if (!v->shape_known || !ir_shape_is_static(&v->shape))
        return perr_at(p, line, col, "dense[...] needs a static shape");
    int64_t numel = ir_shape_numel(&v->shape);
    if (expect(p, '[', "'[' after dense") != 0) return -1;
    unsigned char *d = NULL;
    int64_t cnt = 0;
    size_t cap = 0;
    if (!accept(p, ']')) {
        for (;;) {
            if (cnt >= numel) {
                free(d);
                ws(p);
                return perr_at(p, p->line, col_at(p, p->i),
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
            if (accept(p, ']')) break;
            if (expect(p, ',', "',' or ']' in dense[...]") != 0) {
                free(d);
                return -1;
            }
        }
    }
    if (cnt != numel) {
        free(d);
        return perr_at(p, line, col, "dense[...] has %" PRId64 " elements, shape needs %" PRId64,
                       cnt, numel);
    }
    ir_value_set_data(v, d ? d : ir_xmalloc(1), (size_t)cnt * es);
    return 0;
}

static int parse_init(P *p, IrValue *v) {
    int line, col;
    here(p, &line, &col);
    char w[16];
    size_t save = p->i;
    word(p, w, sizeof w);
    if (v->kind != IR_VK_PARAM && v->kind != IR_VK_CONST)
        return perr_at(p, line, col, "only param and const values take an initializer");
    if (strcmp(w, "dense") == 0) return parse_dense(p, v, line, col);
    if (strcmp(w, "data") == 0) {
        Num n;
        if (expect(p, '(', "'(' after data") != 0 || number(p, &n, "a byte count") != 0) return -1;
        if (n.is_float || n.neg || n.overflow || n.mag > (uint64_t)INT64_MAX)
            return perr_at(p, n.line, n.col, "expected a byte count");
        if (!accept_word(p, "bytes")) return expected(p, "'bytes'");
        if (expect(p, ',', "','") != 0) return -1;
        if (!accept_word(p, "fnv1a")) return expected(p, "'fnv1a'");
        if (expect(p, '=', "'=' after fnv1a") != 0) return -1;
        ws(p);
        uint64_t h = 0;
        int nd = 0;
        for (int c; (c = hexval((unsigned char)p->s[p->i])) >= 0; p->i++) {
            if (++nd > 16)
                return perr_at(p, p->line, col_at(p, p->i), "fnv1a hash longer than 16 hex digits");
            h = h << 4 | (uint64_t)c;
        }
        if (nd == 0) return expected(p, "a hex fnv1a hash");
        if (expect(p, ')', "')' after the hash") != 0) return -1;
        v->data_elided = 1;
        v->elided_hash = h;
        v->nbytes = (size_t)n.mag;
        return 0;
    }
    if (strcmp(w, "ext") == 0) {
        if (expect(p, '(', "'(' after ext") != 0) return -1;
        char *path = qstring(p);
        if (!path) return -1;
        int64_t off, len;
        if (expect(p, ',', "',' after the path") != 0 ||
            int_tok(p, &off, 0, INT64_MAX, "offset") != 0 || expect(p, ',', "','") != 0 ||
            int_tok(p, &len, 0, INT64_MAX, "length") != 0 || expect(p, ')', "')'") != 0) {
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
    return expected(p, "dense[...], data(...) or ext(...)");
}

/* ------------------------------------------------------------ statements */
static int parse_decl(P *p, IrValueKind kind) {
    if (expect(p, '%', "'%' and a value name") != 0) return -1;
    int line, col;
    here(p, &line, &col);
    char *nm = vname(p);
    if (!nm) return -1;
    Type t;
    memset(&t, 0, sizeof t);
    IrValue *v = NULL;
    if (expect(p, ':', "':' and a type") != 0 || parse_type(p, &t, 0) != 0) {
        free(nm);
        type_clear(&t);
        return -1;
    }
    v = define(p, nm, kind, t.dtype, t.known ? &t.shape : NULL, line, col);
    free(nm);
    if (!v) {
        type_clear(&t);
        return -1;
    }
    type_apply(&t, v);
    if (kind == IR_VK_INPUT) ir_graph_add_input(p->g, v);
    if (accept(p, '=') && parse_init(p, v) != 0) return -1;
    return eol(p);
}

static int parse_output(P *p) {
    do {
        if (expect(p, '%', "'%' and a value name") != 0) return -1;
        int line, col;
        here(p, &line, &col);
        char *nm = vname(p);
        if (!nm) return -1;
        IrValue *v = use(p, nm, line, col);
        free(nm);
        ir_graph_add_output(p->g, v);
    } while (accept(p, ','));
    return eol(p);
}

typedef struct PAttr {
    char *name;
    IrAttrType type;
    int64_t i;
    double f;
    char *s;
    int64_t *ints;
    double *floats;
    int n;
} PAttr;

typedef struct NodeTmp {
    char **outs; /* NULL entries: '_' */
    int *oline, *ocol;
    int nout, outs_cap;
    IrValue **in;
    int nin, in_cap;
    PAttr *attrs;
    int nattrs, attrs_cap;
    Type *types;
    int ntypes;
} NodeTmp;

static void node_tmp_free(NodeTmp *t) {
    for (int i = 0; i < t->nout; i++)
        free(t->outs[i]);
    free(t->outs), free(t->oline), free(t->ocol), free(t->in);
    for (int i = 0; i < t->nattrs; i++) {
        free(t->attrs[i].name), free(t->attrs[i].s);
        free(t->attrs[i].ints), free(t->attrs[i].floats);
    }
    free(t->attrs);
    for (int i = 0; i < t->ntypes; i++)
        type_clear(&t->types[i]);
    free(t->types);
}

static int parse_attr_value(P *p, PAttr *a) {
    if (peekc(p) == '"') {
        a->type = IR_ATTR_STRING;
        a->s = qstring(p);
        return a->s ? 0 : -1;
    }
    if (accept_word(p, "floats")) {
        if (expect(p, '[', "'[' after floats") != 0 ||
            expect(p, ']', "']' (floats[] is the empty list)") != 0)
            return -1;
        a->type = IR_ATTR_FLOATS;
        return 0;
    }
    if (accept(p, '[')) {
        int cap = 0, any_float = 0;
        Num *nums = NULL;
        a->n = 0;
        if (!accept(p, ']')) {
            for (;;) {
                if (a->n >= cap) {
                    cap = cap ? 2 * cap : 8;
                    nums = ir_xrealloc(nums, (size_t)cap * sizeof *nums);
                }
                if (number(p, &nums[a->n], "a number") != 0) {
                    free(nums);
                    return -1;
                }
                any_float |= nums[a->n].is_float;
                a->n++;
                if (accept(p, ']')) break;
                if (expect(p, ',', "',' or ']' in the list") != 0) {
                    free(nums);
                    return -1;
                }
            }
        }
        /* one float element makes the whole list floats */
        a->type = any_float ? IR_ATTR_FLOATS : IR_ATTR_INTS;
        if (any_float)
            a->floats = ir_xmalloc((size_t)(a->n ? a->n : 1) * sizeof *a->floats);
        else
            a->ints = ir_xmalloc((size_t)(a->n ? a->n : 1) * sizeof *a->ints);
        int rc = 0;
        for (int k = 0; k < a->n && rc == 0; k++) {
            if (nums[k].overflow == 2)
                rc = perr_at(p, nums[k].line, nums[k].col, "number has too many digits");
            else if (any_float)
                a->floats[k] = num_f64(&nums[k]);
            else
                rc = num_i64(p, &nums[k], &a->ints[k]);
        }
        free(nums);
        return rc;
    }
    Num n;
    if (number(p, &n, "an attribute value (number, \"string\" or [list])") != 0) return -1;
    if (n.is_float) {
        if (n.overflow == 2) return perr_at(p, n.line, n.col, "number has too many digits");
        a->type = IR_ATTR_FLOAT;
        a->f = num_f64(&n);
        return 0;
    }
    a->type = IR_ATTR_INT;
    return num_i64(p, &n, &a->i);
}

static int parse_attrs(P *p, NodeTmp *t) {
    if (accept(p, '}')) return 0;
    for (;;) {
        int line, col;
        here(p, &line, &col);
        char *nm = name(p, "an attribute name", NULL);
        if (!nm) return -1;
        for (int k = 0; k < t->nattrs; k++)
            if (strcmp(t->attrs[k].name, nm) == 0) {
                free(nm);
                return perr_at(p, line, col, "duplicate attribute '%s'", t->attrs[k].name);
            }
        if (t->nattrs >= t->attrs_cap) {
            t->attrs_cap = t->attrs_cap ? 2 * t->attrs_cap : 4;
            t->attrs = ir_xrealloc(t->attrs, (size_t)t->attrs_cap * sizeof *t->attrs);
        }
        PAttr *a = &t->attrs[t->nattrs++];
        memset(a, 0, sizeof *a);
        a->name = nm;
        if (expect(p, '=', "'=' after the attribute name") != 0 || parse_attr_value(p, a) != 0)
            return -1;
        if (accept(p, '}')) return 0;
        if (expect(p, ',', "',' or '}' in attributes") != 0) return -1;
    }
}

static int add_out(NodeTmp *t, char *nm, int line, int col) {
    if (t->nout >= t->outs_cap) {
        t->outs_cap = t->outs_cap ? 2 * t->outs_cap : 4;
        t->outs = ir_xrealloc(t->outs, (size_t)t->outs_cap * sizeof *t->outs);
        t->oline = ir_xrealloc(t->oline, (size_t)t->outs_cap * sizeof *t->oline);
        t->ocol = ir_xrealloc(t->ocol, (size_t)t->outs_cap * sizeof *t->ocol);
    }
    t->outs[t->nout] = nm;
    t->oline[t->nout] = line;
    t->ocol[t->nout++] = col;
    return 0;
}

typedef struct Annot {
    int phase, module_id, layer_id, stage_id, dead;
    char *name;
    unsigned seen;
} Annot;

static int parse_annots(P *p, Annot *an) {
    for (;;) {
        int c = peekc(p);
        if (c == '\n' || c == 0) return 0;
        int line, col;
        here(p, &line, &col);
        char w[16];
        unsigned bit;
        if (accept(p, '@')) {
            if (p->s[p->i] == ' ' || p->s[p->i] == '\t')
                return expected(p, "a phase right after '@'");
            word(p, w, sizeof w);
            bit = 1;
            if (strcmp(w, "fwd") == 0)
                an->phase = IR_PHASE_FWD;
            else if (strcmp(w, "bwd") == 0)
                an->phase = IR_PHASE_BWD;
            else if (strcmp(w, "upd") == 0)
                an->phase = IR_PHASE_UPD;
            else
                return perr_at(p, line, col, "expected @fwd, @bwd or @upd");
        } else {
            size_t save = p->i;
            word(p, w, sizeof w);
            int *dst = NULL;
            if (strcmp(w, "module") == 0)
                dst = &an->module_id, bit = 2;
            else if (strcmp(w, "layer") == 0)
                dst = &an->layer_id, bit = 4;
            else if (strcmp(w, "stage") == 0)
                dst = &an->stage_id, bit = 8;
            else if (strcmp(w, "dead") == 0)
                an->dead = 1, bit = 16;
            else if (strcmp(w, "name") == 0)
                bit = 32;
            else {
                p->i = save;
                return expected(p,
                                "an annotation (@bwd, @upd, module=, layer=, stage=, dead, name=) "
                                "or end of line");
            }
            if (bit & (2 | 4 | 8 | 32))
                if (expect(p, '=', "'='") != 0) return -1;
            if (dst) {
                int64_t v;
                if (int_tok(p, &v, INT32_MIN, INT32_MAX, w) != 0) return -1;
                *dst = (int)v;
            } else if (bit == 32) {
                if (an->seen & 32) return perr_at(p, line, col, "duplicate annotation 'name'");
                an->name = name(p, "a node name", NULL);
                if (!an->name) return -1;
            }
        }
        if (an->seen & bit) return perr_at(p, line, col, "duplicate annotation '%s'", w);
        an->seen |= bit;
    }
}

/* OUTS = Op(ARGS) {ATTRS} : TYPES ANNOTS, or Op(ARGS) ... with no outputs.
 * `have_outs` says whether the line starts with an output list. */
static int parse_node(P *p, int have_outs) {
    NodeTmp t;
    memset(&t, 0, sizeof t);
    Annot an = {IR_PHASE_FWD, -1, -1, -1, 0, NULL, 0};
    int rc = -1;
    char w[64];
    if (have_outs) {
        do {
            int line, col;
            here(p, &line, &col);
            if (accept(p, '%')) {
                char *nm = vname(p);
                if (!nm) goto out;
                add_out(&t, nm, line, col);
            } else if (accept_word(p, "_")) {
                add_out(&t, NULL, line, col);
            } else {
                expected(p, "'%' and a value name, or '_'");
                goto out;
            }
        } while (accept(p, ','));
        if (expect(p, '=', "'=' or ',' after the outputs") != 0) goto out;
    }
    int opline, opcol;
    here(p, &opline, &opcol);
    if (!word(p, w, sizeof w)) {
        expected(p, "an op name");
        goto out;
    }
    int op = ir_op_from_name(w);
    if (op < 0) {
        perr_at(p, opline, opcol, "unknown op '%s'", w);
        goto out;
    }
    if (expect(p, '(', "'(' after the op name") != 0) goto out;
    if (!accept(p, ')')) {
        for (;;) {
            int line, col;
            here(p, &line, &col);
            IrValue *v = NULL;
            if (accept(p, '%')) {
                char *nm = vname(p);
                if (!nm) goto out;
                v = use(p, nm, line, col);
                free(nm);
            } else if (!accept_word(p, "_")) {
                expected(p, "'%' and a value name, or '_' for an omitted input");
                goto out;
            }
            if (t.nin >= t.in_cap) {
                t.in_cap = t.in_cap ? 2 * t.in_cap : 4;
                t.in = ir_xrealloc(t.in, (size_t)t.in_cap * sizeof *t.in);
            }
            t.in[t.nin++] = v;
            if (accept(p, ')')) break;
            if (expect(p, ',', "',' or ')' in the inputs") != 0) goto out;
        }
    }
    if (accept(p, '{') && parse_attrs(p, &t) != 0) goto out;
    if (t.nout > 0) {
        if (expect(p, ':', "':' and the output types") != 0) goto out;
        t.types = ir_xcalloc((size_t)t.nout, sizeof *t.types);
        for (int k = 0; k < t.nout; k++) {
            if (k > 0 && expect(p, ',', "',' and the next output type") != 0) goto out;
            t.ntypes = k + 1;
            if (!t.outs[k]) {
                if (!accept_word(p, "_")) {
                    expected(p, "'_' as the type of an omitted output");
                    goto out;
                }
                continue;
            }
            if (parse_type(p, &t.types[k], 1) != 0) goto out;
        }
        if (peekc(p) == ',') {
            perr_at(p, p->line, col_at(p, p->i), "more output types than the %d outputs", t.nout);
            goto out;
        }
    }
    if (parse_annots(p, &an) != 0 || eol(p) != 0) goto out;

    IrValue **outs = ir_xcalloc((size_t)(t.nout ? t.nout : 1), sizeof *outs);
    for (int k = 0; k < t.nout; k++) {
        if (!t.outs[k]) continue;
        Type *ty = &t.types[k];
        outs[k] = define(p, t.outs[k], ty->kind, ty->dtype, ty->known ? &ty->shape : NULL,
                         t.oline[k], t.ocol[k]);
        if (!outs[k]) {
            free(outs);
            goto out;
        }
        type_apply(ty, outs[k]);
    }
    IrNode *n = ir_node_new(p->g, (IrOp)op, an.name ? an.name : "", t.nin, t.in, t.nout, outs);
    free(outs);
    for (int k = 0; k < t.nattrs; k++) {
        PAttr *a = &t.attrs[k];
        switch (a->type) {
        case IR_ATTR_INT: ir_node_set_int(n, a->name, a->i); break;
        case IR_ATTR_FLOAT: ir_node_set_float(n, a->name, a->f); break;
        case IR_ATTR_STRING: ir_node_set_string(n, a->name, a->s); break;
        case IR_ATTR_INTS: ir_node_set_ints(n, a->name, a->n, a->ints); break;
        case IR_ATTR_FLOATS: ir_node_set_floats(n, a->name, a->n, a->floats); break;
        }
    }
    n->phase = (IrPhase)an.phase;
    n->module_id = an.module_id;
    n->layer_id = an.layer_id;
    n->stage_id = an.stage_id;
    n->dead = an.dead;
    rc = 0;
out:
    free(an.name);
    node_tmp_free(&t);
    return rc;
}

static int parse_header(P *p) {
    skip_blank(p);
    if (!accept_word(p, "graph")) return expected(p, "'graph'");
    char *gname = name(p, "a graph name", NULL);
    if (!gname) return -1;
    free(p->g->name);
    p->g->name = gname;
    for (;;) {
        if (accept(p, '{')) return eol(p);
        char w[16];
        size_t save = p->i;
        int line, col;
        here(p, &line, &col);
        word(p, w, sizeof w);
        if (strcmp(w, "opset") == 0) {
            if (expect(p, '=', "'=' after opset") != 0) return -1;
            if (int_tok(p, &p->g->opset, INT64_MIN, INT64_MAX, "opset") != 0) return -1;
        } else if (strcmp(w, "model") == 0 || strcmp(w, "dir") == 0) {
            char **dst = w[0] == 'm' ? &p->g->model_path : &p->g->model_dir;
            if (*dst) return perr_at(p, line, col, "duplicate '%s='", w);
            if (expect(p, '=', "'='") != 0) return -1;
            if (!(*dst = qstring(p))) return -1;
        } else {
            p->i = save;
            return expected(p, "opset=, model=, dir= or '{'");
        }
    }
}

static int parse_body(P *p) {
    for (;;) {
        skip_blank(p);
        int c = peekc(p);
        if (c == 0) return expected(p, "'}' closing the graph");
        if (c == '}') {
            p->i++;
            if (eol(p) != 0) return -1;
            skip_blank(p);
            if (p->s[p->i]) return expected(p, "end of input after the graph's '}'");
            return 0;
        }
        if (c == '%') {
            if (parse_node(p, 1) != 0) return -1;
            continue;
        }
        char w[64];
        size_t save = p->i;
        word(p, w, sizeof w);
        int kind = kind_from_word(w);
        int rc;
        if (kind >= 0) {
            rc = parse_decl(p, (IrValueKind)kind);
        } else if (strcmp(w, "output") == 0) {
            rc = parse_output(p);
        } else if (strcmp(w, "_") == 0) {
            p->i = save;
            rc = parse_node(p, 1);
        } else if (w[0] && ir_op_from_name(w) >= 0) {
            p->i = save;
            rc = parse_node(p, 0);
        } else {
            p->i = save;
            rc =
                expected(p, "a statement (input/param/const/... declaration, node, output or '}')");
        }
        if (rc != 0) return -1;
    }
}

IrGraph *ir_parse(const char *text, const char *filename, IrError *err) {
    P p;
    memset(&p, 0, sizeof p);
    p.s = text ? text : "";
    p.file = filename ? filename : "<input>";
    p.line = 1;
    p.err = err;
    p.g = ir_graph_new("graph");
    int rc = parse_header(&p);
    if (rc == 0) rc = parse_body(&p);
    if (rc == 0)
        for (int k = 0; k < p.nents; k++)
            if (p.ents[k].pending) {
                rc = perr_at(&p, p.ents[k].line, p.ents[k].col,
                             "value '%%%s' is used but never defined", p.ents[k].v->name);
                break;
            }
    free(p.ents);
    free(p.tab);
    if (rc != 0) {
        ir_graph_free(p.g);
        return NULL;
    }
    return p.g;
}
