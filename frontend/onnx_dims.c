/* Symbolic dims: ONNX dim_param names bound by --batch / --seq and explicit
 * name=value bindings (DESIGN.md §3). */
#include "onnx_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Names exporters give the batch and sequence axes (case-insensitive). */
static const char *const batch_names[] = {"batch", "batch_size", "B", "N", NULL};
static const char *const seq_names[] = {"seq", "seq_len", "sequence", "sequence_length",
                                        "T", "S", NULL};

const char *const *hetc_batch_dim_names(void) { return batch_names; }
const char *const *hetc_seq_dim_names(void) { return seq_names; }

static int name_in(const char *s, const char *const *list) {
    for (; *list; list++)
        if (strcasecmp(s, *list) == 0) return 1;
    return 0;
}

static int64_t lookup(const HetcDimBinding *b, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (b[i].name && strcmp(b[i].name, name) == 0 && b[i].value >= 0) return b[i].value;
    return -1;
}

int64_t imp_dim_binding(const HetcImportOptions *opt, const char *name) {
    int64_t v = lookup(opt->bindings, opt->nbindings, name);
    if (v >= 0) return v;
    if (opt->batch >= 0 && name_in(name, batch_names)) return opt->batch;
    if (opt->seq >= 0 && name_in(name, seq_names)) return opt->seq;
    return -1;
}

int hetc_bind_dims(IrGraph *g, const HetcDimBinding *b, int n, IrError *err) {
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *v = g->values[i];
        for (int d = 0; d < v->shape.rank && d < IR_MAX_RANK; d++) {
            if (!v->sym[d] || v->shape.dims[d] >= 0) continue;
            int64_t x = lookup(b, n, v->sym[d]);
            if (x < 0) continue;
            v->shape.dims[d] = x;
            free(v->sym[d]);
            v->sym[d] = NULL;
        }
    }
    for (int i = 0; i < g->ninputs; i++) {
        IrValue *v = g->inputs[i];
        for (int d = 0; d < v->shape.rank && d < IR_MAX_RANK; d++)
            if (v->shape.dims[d] < 0)
                return ir_errorf(err, "%s: input '%s' dim %d ('%s') is still unbound",
                                 g->model_path ? g->model_path : g->name, v->name, d,
                                 v->sym[d] ? v->sym[d] : "unnamed");
    }
    return 0;
}
