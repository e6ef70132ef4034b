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
#include "parse_internal.h"

/* ------------------------------------------------------------ statements */
static int parse_decl(P *p, IrValueKind kind) {
    if (irp_expect(p, '%', "'%' and a value name") != 0) return -1;
    int line, col;
    irp_here(p, &line, &col);
    char *nm = irp_vname(p);
    if (!nm) return -1;
    Type t;
    memset(&t, 0, sizeof t);
    IrValue *v = NULL;
    if (irp_expect(p, ':', "':' and a type") != 0 || irp_parse_type(p, &t, 0) != 0) {
        free(nm);
        irp_type_clear(&t);
        return -1;
    }
    v = irp_define(p, nm, kind, t.dtype, t.known ? &t.shape : NULL, line, col);
    free(nm);
    if (!v) {
        irp_type_clear(&t);
        return -1;
    }
    irp_type_apply(&t, v);
    if (kind == IR_VK_INPUT) ir_graph_add_input(p->g, v);
    if (irp_accept(p, '=') && irp_parse_init(p, v) != 0) return -1;
    return irp_eol(p);
}

static int parse_output(P *p) {
    do {
        if (irp_expect(p, '%', "'%' and a value name") != 0) return -1;
        int line, col;
        irp_here(p, &line, &col);
        char *nm = irp_vname(p);
        if (!nm) return -1;
        IrValue *v = irp_use(p, nm, line, col);
        free(nm);
        ir_graph_add_output(p->g, v);
    } while (irp_accept(p, ','));
    return irp_eol(p);
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
    for (int i = 0; i < t->ntypes; i++) irp_type_clear(&t->types[i]);
    free(t->types);
}

static int parse_attr_value(P *p, PAttr *a) {
    if (irp_peekc(p) == '"') {
        a->type = IR_ATTR_STRING;
        a->s = irp_qstring(p);
        return a->s ? 0 : -1;
    }
    if (irp_accept_word(p, "floats")) {
        if (irp_expect(p, '[', "'[' after floats") != 0 ||
            irp_expect(p, ']', "']' (floats[] is the empty list)") != 0)
            return -1;
        a->type = IR_ATTR_FLOATS;
        return 0;
    }
    if (irp_accept(p, '[')) {
        int cap = 0, any_float = 0;
        Num *nums = NULL;
        a->n = 0;
        if (!irp_accept(p, ']')) {
            for (;;) {
                if (a->n >= cap) {
                    cap = cap ? 2 * cap : 8;
                    nums = ir_xrealloc(nums, (size_t)cap * sizeof *nums);
                }
                if (irp_number(p, &nums[a->n], "a number") != 0) {
                    free(nums);
                    return -1;
                }
                any_float |= nums[a->n].is_float;
                a->n++;
                if (irp_accept(p, ']')) break;
                if (irp_expect(p, ',', "',' or ']' in the list") != 0) {
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
                rc = irp_perr_at(p, nums[k].line, nums[k].col, "number has too many digits");
            else if (any_float)
                a->floats[k] = irp_num_f64(&nums[k]);
            else
                rc = irp_num_i64(p, &nums[k], &a->ints[k]);
        }
        free(nums);
        return rc;
    }
    Num n;
    if (irp_number(p, &n, "an attribute value (number, \"string\" or [list])") != 0) return -1;
    if (n.is_float) {
        if (n.overflow == 2) return irp_perr_at(p, n.line, n.col, "number has too many digits");
        a->type = IR_ATTR_FLOAT;
        a->f = irp_num_f64(&n);
        return 0;
    }
    a->type = IR_ATTR_INT;
    return irp_num_i64(p, &n, &a->i);
}

static int parse_attrs(P *p, NodeTmp *t) {
    if (irp_accept(p, '}')) return 0;
    for (;;) {
        int line, col;
        irp_here(p, &line, &col);
        char *nm = irp_name(p, "an attribute name", NULL);
        if (!nm) return -1;
        for (int k = 0; k < t->nattrs; k++)
            if (strcmp(t->attrs[k].name, nm) == 0) {
                free(nm);
                return irp_perr_at(p, line, col, "duplicate attribute '%s'", t->attrs[k].name);
            }
        if (t->nattrs >= t->attrs_cap) {
            t->attrs_cap = t->attrs_cap ? 2 * t->attrs_cap : 4;
            t->attrs = ir_xrealloc(t->attrs, (size_t)t->attrs_cap * sizeof *t->attrs);
        }
        PAttr *a = &t->attrs[t->nattrs++];
        memset(a, 0, sizeof *a);
        a->name = nm;
        if (irp_expect(p, '=', "'=' after the attribute name") != 0 || parse_attr_value(p, a) != 0)
            return -1;
        if (irp_accept(p, '}')) return 0;
        if (irp_expect(p, ',', "',' or '}' in attributes") != 0) return -1;
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
        int c = irp_peekc(p);
        if (c == '\n' || c == 0) return 0;
        int line, col;
        irp_here(p, &line, &col);
        char w[16];
        unsigned bit;
        if (irp_accept(p, '@')) {
            if (p->s[p->i] == ' ' || p->s[p->i] == '\t')
                return irp_expected(p, "a phase right after '@'");
            irp_word(p, w, sizeof w);
            bit = 1;
            if (strcmp(w, "fwd") == 0)
                an->phase = IR_PHASE_FWD;
            else if (strcmp(w, "bwd") == 0)
                an->phase = IR_PHASE_BWD;
            else if (strcmp(w, "upd") == 0)
                an->phase = IR_PHASE_UPD;
            else
                return irp_perr_at(p, line, col, "expected @fwd, @bwd or @upd");
        } else {
            size_t save = p->i;
            irp_word(p, w, sizeof w);
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
                return irp_expected(
                    p, "an annotation (@bwd, @upd, module=, layer=, stage=, dead, name=) "
                       "or end of line");
            }
            if (bit & (2 | 4 | 8 | 32))
                if (irp_expect(p, '=', "'='") != 0) return -1;
            if (dst) {
                int64_t v;
                if (irp_int_tok(p, &v, INT32_MIN, INT32_MAX, w) != 0) return -1;
                *dst = (int)v;
            } else if (bit == 32) {
                if (an->seen & 32) return irp_perr_at(p, line, col, "duplicate annotation 'name'");
                an->name = irp_name(p, "a node name", NULL);
                if (!an->name) return -1;
            }
        }
        if (an->seen & bit) return irp_perr_at(p, line, col, "duplicate annotation '%s'", w);
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
            irp_here(p, &line, &col);
            if (irp_accept(p, '%')) {
                char *nm = irp_vname(p);
                if (!nm) goto out;
                add_out(&t, nm, line, col);
            } else if (irp_accept_word(p, "_")) {
                add_out(&t, NULL, line, col);
            } else {
                irp_expected(p, "'%' and a value name, or '_'");
                goto out;
            }
        } while (irp_accept(p, ','));
        if (irp_expect(p, '=', "'=' or ',' after the outputs") != 0) goto out;
    }
    int opline, opcol;
    irp_here(p, &opline, &opcol);
    if (!irp_word(p, w, sizeof w)) {
        irp_expected(p, "an op name");
        goto out;
    }
    int op = ir_op_from_name(w);
    if (op < 0) {
        irp_perr_at(p, opline, opcol, "unknown op '%s'", w);
        goto out;
    }
    if (irp_expect(p, '(', "'(' after the op name") != 0) goto out;
    if (!irp_accept(p, ')')) {
        for (;;) {
            int line, col;
            irp_here(p, &line, &col);
            IrValue *v = NULL;
            if (irp_accept(p, '%')) {
                char *nm = irp_vname(p);
                if (!nm) goto out;
                v = irp_use(p, nm, line, col);
                free(nm);
            } else if (!irp_accept_word(p, "_")) {
                irp_expected(p, "'%' and a value name, or '_' for an omitted input");
                goto out;
            }
            if (t.nin >= t.in_cap) {
                t.in_cap = t.in_cap ? 2 * t.in_cap : 4;
                t.in = ir_xrealloc(t.in, (size_t)t.in_cap * sizeof *t.in);
            }
            t.in[t.nin++] = v;
            if (irp_accept(p, ')')) break;
            if (irp_expect(p, ',', "',' or ')' in the inputs") != 0) goto out;
        }
    }
    if (irp_accept(p, '{') && parse_attrs(p, &t) != 0) goto out;
    if (t.nout > 0) {
        if (irp_expect(p, ':', "':' and the output types") != 0) goto out;
        t.types = ir_xcalloc((size_t)t.nout, sizeof *t.types);
        for (int k = 0; k < t.nout; k++) {
            if (k > 0 && irp_expect(p, ',', "',' and the next output type") != 0) goto out;
            t.ntypes = k + 1;
            if (!t.outs[k]) {
                if (!irp_accept_word(p, "_")) {
                    irp_expected(p, "'_' as the type of an omitted output");
                    goto out;
                }
                continue;
            }
            if (irp_parse_type(p, &t.types[k], 1) != 0) goto out;
        }
        if (irp_peekc(p) == ',') {
            irp_perr_at(p, p->line, irp_col_at(p, p->i), "more output types than the %d outputs",
                        t.nout);
            goto out;
        }
    }
    if (parse_annots(p, &an) != 0 || irp_eol(p) != 0) goto out;

    IrValue **outs = ir_xcalloc((size_t)(t.nout ? t.nout : 1), sizeof *outs);
    for (int k = 0; k < t.nout; k++) {
        if (!t.outs[k]) continue;
        Type *ty = &t.types[k];
        outs[k] = irp_define(p, t.outs[k], ty->kind, ty->dtype, ty->known ? &ty->shape : NULL,
                             t.oline[k], t.ocol[k]);
        if (!outs[k]) {
            free(outs);
            goto out;
        }
        irp_type_apply(ty, outs[k]);
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
    irp_skip_blank(p);
    if (!irp_accept_word(p, "graph")) return irp_expected(p, "'graph'");
    char *gname = irp_name(p, "a graph name", NULL);
    if (!gname) return -1;
    free(p->g->name);
    p->g->name = gname;
    for (;;) {
        if (irp_accept(p, '{')) return irp_eol(p);
        char w[16];
        size_t save = p->i;
        int line, col;
        irp_here(p, &line, &col);
        irp_word(p, w, sizeof w);
        if (strcmp(w, "opset") == 0) {
            if (irp_expect(p, '=', "'=' after opset") != 0) return -1;
            if (irp_int_tok(p, &p->g->opset, INT64_MIN, INT64_MAX, "opset") != 0) return -1;
        } else if (strcmp(w, "model") == 0 || strcmp(w, "dir") == 0) {
            char **dst = w[0] == 'm' ? &p->g->model_path : &p->g->model_dir;
            if (*dst) return irp_perr_at(p, line, col, "duplicate '%s='", w);
            if (irp_expect(p, '=', "'='") != 0) return -1;
            if (!(*dst = irp_qstring(p))) return -1;
        } else {
            p->i = save;
            return irp_expected(p, "opset=, model=, dir= or '{'");
        }
    }
}

static int parse_body(P *p) {
    for (;;) {
        irp_skip_blank(p);
        int c = irp_peekc(p);
        if (c == 0) return irp_expected(p, "'}' closing the graph");
        if (c == '}') {
            p->i++;
            if (irp_eol(p) != 0) return -1;
            irp_skip_blank(p);
            if (p->s[p->i]) return irp_expected(p, "end of input after the graph's '}'");
            return 0;
        }
        if (c == '%') {
            if (parse_node(p, 1) != 0) return -1;
            continue;
        }
        char w[64];
        size_t save = p->i;
        irp_word(p, w, sizeof w);
        int kind = irp_kind_from_word(w);
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
            rc = irp_expected(
                p, "a statement (input/param/const/... declaration, node, output or '}')");
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
                rc = irp_perr_at(&p, p.ents[k].line, p.ents[k].col,
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
