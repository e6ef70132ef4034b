/* The IR parser's lexer (parse.c): error messages with file:line:col,
 * blanks and comments, words, quoted names, numbers. */
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

/* ------------------------------------------------------------ errors */
int irp_col_at(const P *p, size_t i) { return (int)(i - p->line_start) + 1; }

int irp_perr_at(P *p, int line, int col, const char *fmt, ...) {
    if (p->failed) return -1; /* keep the first, most precise message */
    p->failed = 1;
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ir_errorf(p->err, "%s:%d:%d: %s", p->file, line, col, msg);
}

/* Describe what is at the cursor, for "expected X, found Y". */
static const char *found(P *p, char *buf, size_t n) {
    irp_ws(p);
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

int irp_expected(P *p, const char *what) {
    char b[128];
    const char *f = found(p, b, sizeof b);
    return irp_perr_at(p, p->line, irp_col_at(p, p->i), "expected %s, found %s", what, f);
}

/* ------------------------------------------------------------ lexing */
void irp_ws(P *p) {
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
void irp_here(P *p, int *line, int *col) {
    irp_ws(p);
    *line = p->line;
    *col = irp_col_at(p, p->i);
}

int irp_peekc(P *p) {
    irp_ws(p);
    return (unsigned char)p->s[p->i];
}

int irp_accept(P *p, char c) {
    irp_ws(p);
    if (p->s[p->i] != c || c == '\n' || c == 0) return 0;
    p->i++;
    return 1;
}

int irp_expect(P *p, char c, const char *what) {
    if (irp_accept(p, c)) return 0;
    return irp_expected(p, what);
}

int irp_eol(P *p) {
    irp_ws(p);
    if (p->s[p->i] == '\n') {
        p->i++;
        p->line++;
        p->line_start = p->i;
        return 0;
    }
    if (!p->s[p->i]) return 0;
    return irp_expected(p, "end of line");
}

void irp_skip_blank(P *p) {
    for (;;) {
        irp_ws(p);
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
size_t irp_word(P *p, char *buf, size_t n) {
    irp_ws(p);
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
int irp_accept_word(P *p, const char *kw) {
    irp_ws(p);
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

int irp_hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "..." with \" \\ \n \t \r \xHH escapes; returns malloc'd text or NULL. */
char *irp_qstring(P *p) {
    irp_ws(p);
    if (p->s[p->i] != '"') {
        irp_expected(p, "'\"'");
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
            irp_perr_at(p, p->line, irp_col_at(p, start), "unterminated string");
            break;
        }
        if (c < 0x20 || c == 0x7f) {
            irp_perr_at(p, p->line, irp_col_at(p, p->i),
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
        else if (e == 'x' && irp_hexval((unsigned char)p->s[p->i + 2]) >= 0 &&
                 irp_hexval((unsigned char)p->s[p->i + 3]) >= 0) {
            int v = irp_hexval((unsigned char)p->s[p->i + 2]) * 16 +
                    irp_hexval((unsigned char)p->s[p->i + 3]);
            if (v == 0) {
                irp_perr_at(p, p->line, irp_col_at(p, p->i), "\\x00 is not allowed in a string");
                break;
            }
            buf_put(&b, (char)v);
            p->i += 4;
        } else {
            irp_perr_at(p, p->line, irp_col_at(p, p->i),
                        "bad escape in string (expected \\\" \\\\ \\n \\t \\r or \\xHH)");
            break;
        }
    }
    free(b.s);
    return NULL;
}

/* A bare name ([A-Za-z0-9_.\-/:]+, ':' only before another name char) or a
 * quoted string.  *quoted tells which (a bare '_' means "none" in places). */
char *irp_name(P *p, const char *what, int *quoted) {
    irp_ws(p);
    if (quoted) *quoted = 0;
    if (p->s[p->i] == '"') {
        if (quoted) *quoted = 1;
        return irp_qstring(p);
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
        irp_expected(p, what);
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
char *irp_vname(P *p) {
    int line, col;
    irp_here(p, &line, &col);
    char *s = irp_name(p, "a value name", NULL);
    if (s && !*s) {
        free(s);
        irp_perr_at(p, line, col, "empty value name");
        return NULL;
    }
    return s;
}

int irp_number(P *p, Num *n, const char *what) {
    irp_ws(p);
    memset(n, 0, sizeof *n);
    n->line = p->line;
    n->col = irp_col_at(p, p->i);
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
                return irp_perr_at(p, n->line, n->col,
                                   "nan(0x...) takes no sign: the bits hold it");
            if (s[i + 1] != '0' || (s[i + 2] != 'x' && s[i + 2] != 'X'))
                return irp_perr_at(p, p->line, irp_col_at(p, i + 1), "expected 0x after nan(");
            i += 3;
            int nd = 0;
            uint64_t b = 0;
            for (int h; (h = irp_hexval((unsigned char)s[i])) >= 0; i++) {
                if (++nd > 16)
                    return irp_perr_at(p, n->line, n->col, "NaN bits wider than 64 bits");
                b = b << 4 | (uint64_t)h;
            }
            if (nd == 0 || s[i] != ')')
                return irp_perr_at(p, p->line, irp_col_at(p, i),
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
    if (digits == 0) return irp_expected(p, what);
    if (s[i] == 'e' || s[i] == 'E') {
        n->is_float = 1;
        if (t + 1 < sizeof n->text) n->text[t++] = 'e';
        i++;
        if (s[i] == '-' || s[i] == '+') {
            if (t + 1 < sizeof n->text) n->text[t++] = s[i];
            i++;
        }
        if (!(s[i] >= '0' && s[i] <= '9'))
            return irp_perr_at(p, p->line, irp_col_at(p, i), "expected exponent digits");
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
        return irp_perr_at(p, p->line, irp_col_at(p, i), "unexpected '%c' after number", s[i]);
    if (n->is_float && n->overflow == 2)
        return irp_perr_at(p, n->line, n->col, "number has too many digits");
    p->i = i;
    return 0;
}

int irp_num_i64(P *p, const Num *n, int64_t *out) {
    if (n->is_float || n->overflow)
        return irp_perr_at(p, n->line, n->col, "expected an integer in 64-bit range");
    if (n->neg) {
        if (n->mag > (uint64_t)INT64_MAX + 1)
            return irp_perr_at(p, n->line, n->col, "integer out of 64-bit range");
        *out = n->mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)n->mag;
    } else {
        if (n->mag > (uint64_t)INT64_MAX)
            return irp_perr_at(p, n->line, n->col, "integer out of 64-bit range");
        *out = (int64_t)n->mag;
    }
    return 0;
}

int irp_int_tok(P *p, int64_t *out, int64_t lo, int64_t hi, const char *what) {
    Num n;
    if (irp_number(p, &n, what) != 0) return -1;
    if (irp_num_i64(p, &n, out) != 0) return -1;
    if (*out < lo || *out > hi)
        return irp_perr_at(p, n.line, n.col, "%s out of range [%" PRId64 ", %" PRId64 "]", what, lo,
                           hi);
    return 0;
}

double irp_num_f64(const Num *n) {
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
float irp_num_f32(const Num *n) {
    const char *t = n->text + (n->text[0] == '-');
    if (strcmp(t, "inf") == 0) return n->neg ? -INFINITY : INFINITY;
    return strtof(n->text, NULL);
}
