/* The loss pass (passes/loss.h): appends CrossEntropy(logits, targets). */
#include "loss.h"

#include <stdlib.h>
#include <string.h>

void loss_opts_default(LossOpts *o) {
    memset(o, 0, sizeof *o);
    o->ignore_index = -100;
}

int loss_opts_parse(LossOpts *o, const char *spec, IrError *err) {
    if (!strcmp(spec, "xent")) return 0;
    if (!strncmp(spec, "xent:ignore=", 12) && spec[12]) {
        char *end;
        long long v = strtoll(spec + 12, &end, 10);
        if (!*end) {
            o->use_ignore = 1;
            o->ignore_index = v;
            return 0;
        }
    }
    return ir_errorf(err, "--loss '%s': expected xent or xent:ignore=N", spec);
}

static IrValue *find_logits(IrGraph *g, const LossOpts *o, IrError *err) {
    const char *want = o->logits ? o->logits : "logits";
    IrValue *found = NULL;
    int nfloat = 0;
    for (int i = 0; i < g->noutputs; i++) {
        IrValue *v = g->outputs[i];
        if (!strcmp(v->name, want)) return v;
        if (ir_dtype_is_float(v->dtype) && v->shape.rank >= 2) found = v, nfloat++;
    }
    if (o->logits) {
        ir_errorf(err, "graph '%s' has no output named '%s'", g->name, o->logits);
        return NULL;
    }
    if (nfloat != 1) {
        ir_errorf(err, "graph '%s': cannot tell which output holds the logits (%d float "
                  "outputs of rank >= 2, none named 'logits')", g->name, nfloat);
        return NULL;
    }
    return found;
}

int pass_loss_with(IrGraph *g, const LossOpts *o, IrError *err) {
    for (int i = 0; i < g->noutputs; i++)
        if (!strcmp(g->outputs[i]->name, "loss"))
            return ir_errorf(err, "graph '%s' already has an output named 'loss'", g->name);
    IrValue *lg = find_logits(g, o, err);
    if (!lg) return -1;
    if (lg->dtype != IR_F32 || !ir_shape_is_static(&lg->shape))
        return ir_errorf(err, "logits '%s' must be f32 with a static shape", lg->name);
    if (ir_graph_find_value(g, "loss"))
        return ir_errorf(err, "graph '%s' already has a value named 'loss'", g->name);
    if (ir_graph_find_value(g, "targets"))
        return ir_errorf(err, "graph '%s' already has a value named 'targets'", g->name);
    IrShape ts = lg->shape;
    ts.rank--;
    IrValue *t = ir_value_new(g, "targets", IR_I64, &ts, IR_VK_INPUT);
    ir_graph_add_input(g, t);
    IrShape s0 = {0};
    IrValue *loss = ir_value_new(g, "loss", IR_F32, &s0, IR_VK_ACT);
    IrValue *in[2] = {lg, t};
    IrNode *n = ir_node_new(g, IR_OP_CROSS_ENTROPY, "loss/cross_entropy", 2, in, 1, &loss);
    n->phase = IR_PHASE_FWD;
    ir_node_set_int(n, "use_ignore", o->use_ignore);
    ir_node_set_int(n, "ignore_index", o->ignore_index);
    ir_graph_add_output(g, loss);
    return 0;
}

int pass_loss(IrGraph *g, PassContext *ctx, IrError *err) {
    (void)ctx;
    LossOpts o;
    loss_opts_default(&o);
    return pass_loss_with(g, &o, err);
}
