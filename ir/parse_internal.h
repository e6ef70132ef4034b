/* Private to the IR parser (parse.c, parse_lex.c, parse_value.c): the
 * parser state, the token and type records, and the functions one part
 * calls in another (irp_ prefix: libhetc_ir exports them, nothing else
 * uses them). */
#ifndef HETC_PARSE_INTERNAL_H
#define HETC_PARSE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ir.h"

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

/* A parsed TYPE (irtext.h): [kind] dtype[dims] [sym=[...]]. */
typedef struct Type {
    IrValueKind kind;
    IrDType dtype;
    int known;
    IrShape shape;
    char *sym[IR_MAX_RANK];
} Type;

/* parse_lex.c */
int irp_col_at(const P *p, size_t i);
int irp_perr_at(P *p, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int irp_expected(P *p, const char *what);
void irp_ws(P *p);
void irp_here(P *p, int *line, int *col);
int irp_peekc(P *p);
int irp_accept(P *p, char c);
int irp_expect(P *p, char c, const char *what);
int irp_eol(P *p);
void irp_skip_blank(P *p);
size_t irp_word(P *p, char *buf, size_t n);
int irp_accept_word(P *p, const char *kw);
int irp_hexval(int c);
char *irp_qstring(P *p);
char *irp_name(P *p, const char *what, int *quoted);
char *irp_vname(P *p);
int irp_number(P *p, Num *n, const char *what);
int irp_num_i64(P *p, const Num *n, int64_t *out);
int irp_int_tok(P *p, int64_t *out, int64_t lo, int64_t hi, const char *what);
double irp_num_f64(const Num *n);
float irp_num_f32(const Num *n);
/* parse_value.c */
IrValue *irp_use(P *p, const char *nm, int line, int col);
IrValue *irp_define(P *p, const char *nm, IrValueKind kind, IrDType dt, const IrShape *sh, int line,
                    int col);
void irp_type_clear(Type *t);
int irp_kind_from_word(const char *w);
int irp_parse_type(P *p, Type *t, int allow_kind);
void irp_type_apply(Type *t, IrValue *v);
int irp_parse_init(P *p, IrValue *v);

#endif
