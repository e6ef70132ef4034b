/* The IR printer: the canonical text form described in irtext.h.
 *
 * The printer is the one debugging tool every pass shares, so it prints any
 * graph, verified or not, and never changes it.  Its output is canonical:
 * the parser reads it back into a graph that prints identically, which is
 * what lets golden files be their own oracle. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "irtext.h"

void ir_print_options_default(IrPrintOptions *o) { o->max_inline_elems = 16; }

/* ------------------------------------------------------------ scalars */
static void put_quoted(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        case '\r': fputs("\\r", f); break;
        default:
            /* bytes >= 0x80 print raw so UTF-8 names stay readable */
            if (*p < 0x20 || *p == 0x7f)
                fprintf(f, "\\x%02x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

static void put_name(FILE *f, const char *s) {
    if (irtext_is_bare(s))
        fputs(s, f);
    else
        put_quoted(f, s);
}

static void put_ref(FILE *f, const IrValue *v) {
    if (!v) {
        fputc('_', f);
        return;
    }
    fputc('%', f);
    put_name(f, v->name);
}

/* Shortest %g form that reads back to the same bits. */
static void fmt_f64(char *b, size_t n, double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    if (isnan(x)) {
        if (bits == 0x7ff8000000000000ULL)
            snprintf(b, n, "nan");
        else if (bits == 0xfff8000000000000ULL)
            snprintf(b, n, "-nan");
        else
            snprintf(b, n, "nan(0x%016" PRIx64 ")", bits);
        return;
    }
    if (isinf(x)) {
        snprintf(b, n, x < 0 ? "-inf" : "inf");
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(b, n, "%.*g", p, x);
        double y = strtod(b, NULL);
        if (memcmp(&x, &y, sizeof x) == 0) return;
    }
}

static void fmt_f32(char *b, size_t n, float x) {
    uint32_t bits = irtext_f32_bits(x);
    if (isnan(x)) {
        if (bits == 0x7fc00000u)
            snprintf(b, n, "nan");
        else if (bits == 0xffc00000u)
            snprintf(b, n, "-nan");
        else
            snprintf(b, n, "nan(0x%08" PRIx32 ")", bits);
        return;
    }
    if (isinf(x)) {
        snprintf(b, n, x < 0 ? "-inf" : "inf");
        return;
    }
    for (int p = 1; p <= 9; p++) {
        snprintf(b, n, "%.*g", p, (double)x);
        if (irtext_f32_bits(strtof(b, NULL)) == bits) return;
    }
}

/* f16 / bf16: shortest decimal whose float rounds back to the same half. */
static void fmt_half(char *b, size_t n, uint16_t h, int is_bf16) {
    float x = is_bf16 ? irtext_bf16_to_f32(h) : irtext_f16_to_f32(h);
    uint16_t qnan = is_bf16 ? 0x7fc0 : 0x7e00;
    if (isnan(x)) {
        if (h == qnan)
            snprintf(b, n, "nan");
        else if (h == (uint16_t)(qnan | 0x8000u))
            snprintf(b, n, "-nan");
        else
            snprintf(b, n, "nan(0x%04x)", (unsigned)h);
        return;
    }
    if (isinf(x)) {
        snprintf(b, n, x < 0 ? "-inf" : "inf");
        return;
    }
    for (int p = 1; p <= 9; p++) {
        snprintf(b, n, "%.*g", p, (double)x);
        float y = strtof(b, NULL);
        uint16_t back = is_bf16 ? irtext_f32_to_bf16(y) : irtext_f32_to_f16(y);
        if (back == h) return;
    }
}

/* A float attribute must not look like an int, or it would read back as one. */
static void put_attr_float(FILE *f, double x) {
    char b[64];
    fmt_f64(b, sizeof b, x);
    fputs(b, f);
    if (!strpbrk(b, ".eEn")) fputs(".0", f);
}

/* One element of a dense constant. */
static void put_elem(FILE *f, IrDType dt, const unsigned char *p) {
    char b[64];
    switch (dt) {
    case IR_F32: {
        float x;
        memcpy(&x, p, 4);
        fmt_f32(b, sizeof b, x);
        fputs(b, f);
        return;
    }
    case IR_F64: {
        double x;
        memcpy(&x, p, 8);
        fmt_f64(b, sizeof b, x);
        fputs(b, f);
        return;
    }
    case IR_F16:
    case IR_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        fmt_half(b, sizeof b, h, dt == IR_BF16);
        fputs(b, f);
        return;
    }
    case IR_BOOL: fputs(*p ? "true" : "false", f); return;
    case IR_I8: fprintf(f, "%d", (int)(int8_t)*p); return;
    case IR_U8: fprintf(f, "%u", (unsigned)*p); return;
    case IR_I16: {
        int16_t x;
        memcpy(&x, p, 2);
        fprintf(f, "%d", (int)x);
        return;
    }
    case IR_U16: {
        uint16_t x;
        memcpy(&x, p, 2);
        fprintf(f, "%u", (unsigned)x);
        return;
    }
    case IR_I32: {
        int32_t x;
        memcpy(&x, p, 4);
        fprintf(f, "%" PRId32, x);
        return;
    }
    case IR_U32: {
        uint32_t x;
        memcpy(&x, p, 4);
        fprintf(f, "%" PRIu32, x);
        return;
    }
    case IR_I64: {
        int64_t x;
        memcpy(&x, p, 8);
        fprintf(f, "%" PRId64, x);
        return;
    }
    case IR_U64: {
        uint64_t x;
        memcpy(&x, p, 8);
        fprintf(f, "%" PRIu64, x);
        return;
    }
    default: fputc('?', f); return; /* unreachable: dense() checks the dtype */
    }
}

/* ------------------------------------------------------------ types */
static void put_type(FILE *f, const IrValue *v, int with_kind) {
    if (with_kind && v->kind != IR_VK_ACT) fprintf(f, "%s ", ir_value_kind_name(v->kind));
    fputs(ir_dtype_name(v->dtype), f);
    if (!v->shape_known || v->shape.rank < 0 || v->shape.rank > IR_MAX_RANK) {
        fputs("[*]", f);
        return;
    }
    fputc('[', f);
    for (int i = 0; i < v->shape.rank; i++) {
        if (i) fputc(',', f);
        if (v->shape.dims[i] < 0)
            fputc('?', f);
        else
            fprintf(f, "%" PRId64, v->shape.dims[i]);
    }
    fputc(']', f);
    int any = 0;
    for (int i = 0; i < v->shape.rank; i++)
        any |= v->sym[i] != NULL;
    if (!any) return;
    fputs(" sym=[", f);
    for (int i = 0; i < v->shape.rank; i++) {
        if (i) fputc(',', f);
        if (!v->sym[i])
            fputc('_', f);
        else if (strcmp(v->sym[i], "_") == 0)
            put_quoted(f, "_"); /* '_' alone means none */
        else
            put_name(f, v->sym[i]);
    }
    fputc(']', f);
}

/* Values print inline when the constant is small, its size consistent with
 * its static shape and its dtype has a fixed element size. */
static int dense_ok(const IrValue *v, const IrPrintOptions *o) {
    if (v->kind != IR_VK_CONST || !v->data || v->has_ext || !v->shape_known) return 0;
    size_t es = ir_dtype_size(v->dtype);
    if (es == 0 || v->dtype == IR_STRING) return 0;
    if (v->shape.rank < 0 || v->shape.rank > IR_MAX_RANK) return 0;
    int64_t n = ir_shape_numel(&v->shape);
    if (n < 0 || n > (int64_t)(o->max_inline_elems < 0 ? 0 : o->max_inline_elems)) return 0;
    return v->nbytes == (size_t)n * es;
}

static void put_init(FILE *f, const IrValue *v, const IrPrintOptions *o) {
    if (v->kind != IR_VK_PARAM && v->kind != IR_VK_CONST) return;
    if (v->has_ext) {
        fputs(" = ext(", f);
        put_quoted(f, v->ext.path);
        fprintf(f, ", %" PRId64 ", %" PRId64 ")", v->ext.offset, v->ext.length);
    } else if (dense_ok(v, o)) {
        size_t es = ir_dtype_size(v->dtype), n = v->nbytes / es;
        fputs(" = dense[", f);
        for (size_t i = 0; i < n; i++) {
            if (i) fputs(", ", f);
            put_elem(f, v->dtype, (const unsigned char *)v->data + i * es);
        }
        fputc(']', f);
    } else if (v->data) {
        fprintf(f, " = data(%zu bytes, fnv1a=%016" PRIx64 ")", v->nbytes,
                ir_fnv1a(v->data, v->nbytes));
    } else if (v->data_elided) {
        fprintf(f, " = data(%zu bytes, fnv1a=%016" PRIx64 ")", v->nbytes, v->elided_hash);
    }
}

static void put_decl(FILE *f, const IrValue *v, const IrPrintOptions *o) {
    fprintf(f, "  %s ", ir_value_kind_name(v->kind));
    put_ref(f, v);
    fputs(" : ", f);
    put_type(f, v, 0);
    put_init(f, v, o);
    fputc('\n', f);
}

/* ------------------------------------------------------------ nodes */
static void put_attr(FILE *f, const IrAttr *a) {
    put_name(f, a->name);
    fputc('=', f);
    switch (a->type) {
    case IR_ATTR_INT: fprintf(f, "%" PRId64, a->i); break;
    case IR_ATTR_FLOAT: put_attr_float(f, a->f); break;
    case IR_ATTR_STRING: put_quoted(f, a->s); break;
    case IR_ATTR_INTS:
        fputc('[', f);
        for (int i = 0; i < a->n; i++)
            fprintf(f, "%s%" PRId64, i ? ", " : "", a->ints[i]);
        fputc(']', f);
        break;
    case IR_ATTR_FLOATS:
        /* an empty list of floats needs its type spelt out: "[]" is ints */
        if (a->n <= 0) {
            fputs("floats[]", f);
            break;
        }
        fputc('[', f);
        for (int i = 0; i < a->n; i++) {
            if (i) fputs(", ", f);
            put_attr_float(f, a->floats[i]);
        }
        fputc(']', f);
        break;
    default: fputs("?", f); break;
    }
}

static void put_node(FILE *f, const IrNode *n) {
    fputs("  ", f);
    for (int i = 0; i < n->nout; i++) {
        if (i) fputs(", ", f);
        put_ref(f, n->out[i]);
    }
    if (n->nout > 0) fputs(" = ", f);
    fprintf(f, "%s(", ir_op_name(n->op));
    for (int i = 0; i < n->nin; i++) {
        if (i) fputs(", ", f);
        put_ref(f, n->in[i]);
    }
    fputc(')', f);
    if (n->nattrs > 0) {
        fputs(" {", f);
        for (int i = 0; i < n->nattrs; i++) {
            if (i) fputs(", ", f);
            put_attr(f, &n->attrs[i]);
        }
        fputc('}', f);
    }
    if (n->nout > 0) {
        fputs(" : ", f);
        for (int i = 0; i < n->nout; i++) {
            if (i) fputs(", ", f);
            if (n->out[i])
                put_type(f, n->out[i], 1);
            else
                fputc('_', f);
        }
    }
    /* Annotations only when set, so forward dumps stay terse. */
    const char *sep = "  ";
    if (n->phase != IR_PHASE_FWD) {
        fprintf(f, "%s@%s", sep, ir_phase_name(n->phase));
        sep = " ";
    }
    if (n->module_id != -1) fprintf(f, "%smodule=%d", sep, n->module_id), sep = " ";
    if (n->layer_id != -1) fprintf(f, "%slayer=%d", sep, n->layer_id), sep = " ";
    if (n->stage_id != -1) fprintf(f, "%sstage=%d", sep, n->stage_id), sep = " ";
    if (n->dead) fprintf(f, "%sdead", sep), sep = " ";
    if (n->name && n->name[0]) {
        fprintf(f, "%sname=", sep);
        put_quoted(f, n->name);
    }
    fputc('\n', f);
}

/* ------------------------------------------------------------ graph */
int ir_print(const IrGraph *g, FILE *f, const IrPrintOptions *o) {
    IrPrintOptions dflt;
    if (!o) {
        ir_print_options_default(&dflt);
        o = &dflt;
    }
    fputs("graph ", f);
    put_name(f, g->name ? g->name : "");
    fprintf(f, " opset=%" PRId64, g->opset);
    if (g->model_path) fputs(" model=", f), put_quoted(f, g->model_path);
    if (g->model_dir) fputs(" dir=", f), put_quoted(f, g->model_dir);
    fputs(" {\n", f);

    /* Values produced by a node print on that node's line; every other value
     * is declared up front: graph inputs in order, then the rest in creation
     * order, each once. */
    IrPtrMap done;
    irpm_init(&done, (size_t)(g->nvalues + g->ninputs));
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nout; j++)
            irpm_put(&done, g->nodes[i]->out[j], 1);
    for (int i = 0; i < g->ninputs; i++) {
        const IrValue *v = g->inputs[i];
        if (v && irpm_put(&done, v, 1)) put_decl(f, v, o);
    }
    for (int i = 0; i < g->nvalues; i++) {
        const IrValue *v = g->values[i];
        if (v && irpm_put(&done, v, 1)) put_decl(f, v, o);
    }
    irpm_free(&done);

    for (int i = 0; i < g->nnodes; i++)
        put_node(f, g->nodes[i]);
    for (int i = 0; i < g->noutputs; i++) {
        fputs("  output ", f);
        put_ref(f, g->outputs[i]);
        fputc('\n', f);
    }
    fputs("}\n", f);
    return ferror(f) ? -1 : 0;
}

char *ir_print_to_string(const IrGraph *g, const IrPrintOptions *o) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    int rc = ir_print(g, f, o);
    if (fclose(f) != 0) rc = -1;
    if (rc != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
