/* Constant evaluation of single nodes; see fold.h. */
#include <string.h>

#include "fold.h"
#include "hostexec.h"
#include "shape_rules.h"

int fold_inputs_const(const IrNode *n) {
    int any = 0;
    const IrOpInfo *info = ir_op_info(n->op);
    for (int i = 0; i < n->nin; i++) {
        const IrValue *v = n->in[i];
        if (!v && info && i < info->min_inputs) return 0; /* a required input is missing */
        if (!v) continue;
        if (v->kind != IR_VK_CONST || !ir_value_has_data(v) || v->data_elided) return 0;
        any = 1;
    }
    return any;
}

/* The node's outputs become constants with no producer; the node dies. */
static void outputs_to_consts(IrNode *n) {
    for (int j = 0; j < n->nout; j++) {
        IrValue *o = n->out[j];
        if (!o) continue;
        o->kind = IR_VK_CONST;
        o->producer = NULL;
        o->producer_slot = -1;
    }
    ir_node_kill(n);
}

int fold_node(IrGraph *g, IrNode *n, size_t max_bytes, IrError *err) {
    size_t total = 0;
    for (int j = 0; j < n->nout; j++) {
        IrValue *o = n->out[j];
        if (!o) continue;
        if (!o->shape_known || !ir_shape_is_static(&o->shape) || !ir_dtype_size(o->dtype))
            return 0;
        total += (size_t)ir_shape_numel(&o->shape) * ir_dtype_size(o->dtype);
    }
    if (total > max_bytes) return 0;
    char why[256] = "";
    if (!hexec_node_supported(n, why, sizeof why)) return 0;
    if (hexec_eval_node(g, n, err) != 0)
        return ir_error_prefix(err, "evaluating constant node '%s' (%s)", n->name,
                               ir_op_name(n->op));
    for (int j = 0; j < n->nout; j++) {
        IrValue *o = n->out[j];
        if (!o) continue;
        size_t want = (size_t)ir_shape_numel(&o->shape) * ir_dtype_size(o->dtype);
        if (!o->data || o->nbytes != want)
            return node_errorf(err, n, "the host executor returned %zu bytes for output '%s', "
                               "expected %zu", o->data ? o->nbytes : 0, o->name, want);
    }
    outputs_to_consts(n);
    return 1;
}

int fold_shape_node(IrGraph *g, IrNode *n, IrError *err) {
    (void)g;
    IrValue *x = n->in[0], *o = n->out[0];
    if (!x || !o || !x->shape_known || !ir_shape_is_static(&x->shape)) return 0;
    int st, en;
    ir_shape_op_range(n, x->shape.rank, &st, &en);
    int64_t len = en > st ? en - st : 0;
    int64_t *d = ir_xmalloc((size_t)(len ? len : 1) * sizeof *d);
    for (int64_t i = 0; i < len; i++) d[i] = x->shape.dims[st + i];
    o->dtype = IR_I64;
    o->shape = ir_shape_make(1, &len);
    o->shape_known = 1;
    ir_value_set_data(o, d, (size_t)len * sizeof *d);
    outputs_to_consts(n);
    (void)err;
    return 1;
}
