/* Extra graph inputs bound to constants after import (input_binds.h). */
#include "input_binds.h"

#include <stdlib.h>
#include <string.h>

#include "onnx_import.h"

/* What training on packed token rows means for the inputs HF exports take
 * beside input_ids (optimum's signature; BERT-style token types). */
static const struct {
    const char *name;
    InputBindKind kind;
} recognised[] = {
    {"attention_mask", INPUT_BIND_ONES},
    {"position_ids", INPUT_BIND_ARANGE},
    {"token_type_ids", INPUT_BIND_ZEROS},
};
#define NRECOGNISED ((int)(sizeof recognised / sizeof recognised[0]))

static const char *kind_name(InputBindKind k) {
    switch (k) {
    case INPUT_BIND_ONES: return "ones";
    case INPUT_BIND_ZEROS: return "zeros";
    case INPUT_BIND_ARANGE: return "arange";
    case INPUT_BIND_FILE: return "file";
    }
    return "?";
}

void input_binds_help(FILE *f) {
    fprintf(f,
            "  --bind-input NAME=ones|zeros|arange|FILE.npy\n"
            "                         feed graph input NAME with a constant: all ones, all zeros,\n"
            "                         0..T-1 along the last axis in every row, or a tensor file\n"
            "                         (.npy / .pb) of the input's shape.  hetc train, plan,\n"
            "                         profile and compile bind the inputs beside the token ids\n"
            "                         by name, as packed token rows need them:\n"
            "                        ");
    for (int i = 0; i < NRECOGNISED; i++)
        fprintf(f, "%s %s=%s", i ? "," : "", recognised[i].name, kind_name(recognised[i].kind));
    fprintf(f, ";\n"
               "                         any other input needs a --bind-input\n");
}

int input_binds_parse(InputBinds *b, const char *spec, IrError *err) {
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || !eq[1])
        return ir_errorf(err, "--bind-input expects NAME=ones|zeros|arange|FILE.npy, got '%s'",
                         spec);
    if (b->n >= INPUT_BINDS_MAX)
        return ir_errorf(err, "at most %d --bind-input options", INPUT_BINDS_MAX);
    InputBind *x = &b->b[b->n];
    if ((size_t)(eq - spec) >= sizeof x->name)
        return ir_errorf(err, "--bind-input: input name '%.*s' is too long", (int)(eq - spec),
                         spec);
    memcpy(x->name, spec, (size_t)(eq - spec));
    x->name[eq - spec] = '\0';
    const char *v = eq + 1;
    for (int i = 0; i < b->n; i++)
        if (!strcmp(b->b[i].name, x->name))
            return ir_errorf(err, "--bind-input names input '%s' twice", x->name);
    x->path = NULL;
    if (!strcmp(v, "ones"))
        x->kind = INPUT_BIND_ONES;
    else if (!strcmp(v, "zeros"))
        x->kind = INPUT_BIND_ZEROS;
    else if (!strcmp(v, "arange"))
        x->kind = INPUT_BIND_ARANGE;
    else if (strchr(v, '.'))
        x->kind = INPUT_BIND_FILE, x->path = v;
    else
        return ir_errorf(err,
                         "--bind-input %s=%s: expected ones, zeros, arange or a tensor file "
                         "(.npy, .pb)",
                         x->name, v);
    b->n++;
    return 0;
}

IrValue *input_binds_token_input(const IrGraph *g) {
    for (int i = 0; i < g->ninputs; i++)
        if (!strcmp(g->inputs[i]->name, "input_ids")) return g->inputs[i];
    return g->ninputs > 0 ? g->inputs[0] : NULL;
}

/* ones / zeros / arange in the input's dtype; -1 for a dtype it has no meaning in. */
static int fill(void *data, IrDType dt, const IrShape *s, InputBindKind k) {
    int64_t n = ir_shape_numel(s), last = s->rank > 0 ? s->dims[s->rank - 1] : 1;
    for (int64_t i = 0; i < n; i++) {
        double x = k == INPUT_BIND_ONES ? 1.0 : k == INPUT_BIND_ZEROS ? 0.0 : (double)(i % last);
        switch (dt) {
        case IR_I64: ((int64_t *)data)[i] = (int64_t)x; break;
        case IR_I32: ((int32_t *)data)[i] = (int32_t)x; break;
        case IR_F32: ((float *)data)[i] = (float)x; break;
        case IR_F64: ((double *)data)[i] = x; break;
        case IR_BOOL:
            if (k == INPUT_BIND_ARANGE) return -1;
            ((uint8_t *)data)[i] = (uint8_t)x;
            break;
        default: return -1;
        }
    }
    return 0;
}

static int bind_one(IrGraph *g, IrValue *v, const InputBind *b, const char *why,
                    FILE *log, IrError *err) {
    const char *model = g->model_path ? g->model_path : g->name;
    char want[96], got[96];
    ir_shape_str(&v->shape, want, sizeof want);
    if (ir_shape_numel(&v->shape) < 0) {
        for (int d = 0; d < v->shape.rank; d++)
            if (v->shape.dims[d] < 0)
                return ir_errorf(err,
                                 "%s: input '%s' dim %d ('%s') is unbound, so it cannot be bound "
                                 "to %s (give --batch / --seq / --bind)",
                                 model, v->name, d, v->sym[d] ? v->sym[d] : "unnamed",
                                 b->path ? b->path : kind_name(b->kind));
    }
    size_t nb = ir_value_bytes(v);
    void *data = NULL;
    char what[4200];
    if (b->kind == INPUT_BIND_FILE) {
        IrTensor *t = NULL;
        if (hetc_read_tensor(b->path, &t, err))
            return ir_error_prefix(err, "--bind-input %s", v->name);
        ir_shape_str(&t->shape, got, sizeof got);
        if (t->dtype != v->dtype || !ir_shape_equal(&t->shape, &v->shape) || t->nbytes != nb) {
            ir_errorf(err,
                      "--bind-input %s=%s: the file holds %s%s, the input is %s%s (with the "
                      "batch and sequence dims bound as given)",
                      v->name, b->path, ir_dtype_name(t->dtype), got, ir_dtype_name(v->dtype),
                      want);
            ir_tensor_free(t);
            return -1;
        }
        data = t->data;
        t->data = NULL;
        ir_tensor_free(t);
        snprintf(what, sizeof what, "%s", b->path);
    } else {
        data = malloc(nb ? nb : 1);
        if (!data) return ir_errorf(err, "out of memory binding input '%s'", v->name);
        if (fill(data, v->dtype, &v->shape, b->kind)) {
            free(data);
            return ir_errorf(err, "%s: input '%s' is %s%s: cannot bind it to %s", model, v->name,
                             ir_dtype_name(v->dtype), want, kind_name(b->kind));
        }
        snprintf(what, sizeof what, "%s", b->kind == INPUT_BIND_ARANGE
                                              ? "arange (0..T-1 in every row)"
                                              : kind_name(b->kind));
    }
    v->kind = IR_VK_CONST;
    ir_value_set_data(v, data, nb);
    for (int d = 0; d < IR_MAX_RANK; d++) {
        free(v->sym[d]);
        v->sym[d] = NULL;
    }
    int k = 0;
    for (int i = 0; i < g->ninputs; i++)
        if (g->inputs[i] != v) g->inputs[k++] = g->inputs[i];
    g->ninputs = k;
    if (log)
        fprintf(log, "hetc: input %s %s%s bound to %s (%s)\n", v->name, ir_dtype_name(v->dtype),
                want, what, why);
    return 0;
}

int input_binds_apply(IrGraph *g, const InputBinds *b, IrError *err) {
    const char *model = g->model_path ? g->model_path : g->name;
    for (int i = 0; i < b->n; i++) {
        IrValue *v = ir_graph_find_value(g, b->b[i].name);
        if (!v || v->kind != IR_VK_INPUT) {
            char list[1024] = "";
            size_t len = 0;
            for (int k = 0; k < g->ninputs && len < sizeof list - 1; k++)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", k ? ", " : "",
                                        g->inputs[k]->name);
            return ir_errorf(err, "--bind-input %s: '%s' has no graph input of that name "
                                  "(inputs: %s)",
                             b->b[i].name, model, list);
        }
    }
    IrValue *ids = input_binds_token_input(g);
    /* walk a snapshot: binding removes inputs from g->inputs */
    int n = g->ninputs;
    IrValue **ins = malloc(sizeof *ins * (size_t)(n ? n : 1));
    if (!ins) return ir_errorf(err, "out of memory");
    memcpy(ins, g->inputs, sizeof *ins * (size_t)n);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        IrValue *v = ins[i];
        const InputBind *bind = NULL;
        for (int k = 0; k < b->n; k++)
            if (!strcmp(b->b[k].name, v->name)) bind = &b->b[k];
        if (bind) {
            rc = bind_one(g, v, bind, "--bind-input", b->log, err);
            continue;
        }
        if (!b->all_extra || v == ids) continue;
        InputBind def = {.kind = INPUT_BIND_ONES};
        snprintf(def.name, sizeof def.name, "%s", v->name);
        int known = 0;
        for (int k = 0; k < NRECOGNISED; k++)
            if (!strcmp(recognised[k].name, v->name)) def.kind = recognised[k].kind, known = 1;
        if (!known) {
            char s[96];
            rc = ir_errorf(err,
                           "%s: graph input '%s' (%s%s) is not the token ids ('%s') and hetc "
                           "does not know what to feed it when training on token files; bind "
                           "it with --bind-input %s=ones|zeros|arange|FILE.npy",
                           model, v->name, ir_dtype_name(v->dtype),
                           ir_shape_str(&v->shape, s, sizeof s), ids ? ids->name : "?",
                           v->name);
            break;
        }
        rc = bind_one(g, v, &def, "recognised name; override with --bind-input", b->log, err);
    }
    free(ins);
    return rc;
}
