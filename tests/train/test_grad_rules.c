/* Finite-difference checks of every gradient rule (passes/grad_rules.c).
 *
 * The test ENUMERATES the rule table: every IrOp with a rule must have a
 * case below, or the test fails.  A case builds a tiny graph around one
 * node of that op with random parameters; the loss is sum_i <y_i, R_i> for
 * fixed random R_i, autodiff builds the backward graph, and the analytic
 * gradient of each parameter (the executor running the emitted backward
 * IR) is compared with central differences of the loss (the executor
 * running the forward graph with a perturbed parameter) — the oracle is
 * the forward ops alone.  fp32 kernels: eps 1e-2 on inputs of order 1, and
 * |num - ana| <= 2e-2 max(|num|, |ana|) + 2e-3.  Parameters of up to 32
 * elements are checked at every element, larger ones at 6 random ones. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"
#include "hostexec.h"
#include "pass.h"

typedef struct Rng {
    uint64_t s;
} Rng;
static double urand(Rng *r) {
    r->s = r->s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(r->s >> 11) / (double)(1ULL << 53);
}

/* parameter with values uniform in [lo, hi]; sign: also negate half of them */
static IrValue *param(IrGraph *g, Rng *r, const char *name, int rank, const int64_t *dims,
                      double lo, double hi, int sign) {
    IrShape s = ir_shape_make(rank, dims);
    int64_t n = ir_shape_numel(&s);
    float *d = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        double v = lo + (hi - lo) * urand(r);
        d[i] = (float)(sign && urand(r) < 0.5 ? -v : v);
    }
    IrValue *v = ir_value_new(g, name, IR_F32, &s, IR_VK_PARAM);
    ir_value_set_data(v, d, (size_t)n * sizeof(float));
    return v;
}
static IrValue *ci64(IrGraph *g, int n, const int64_t *v) { return ir_const_i64s(g, NULL, n, v); }
static IrValue *node(IrGraph *g, IrOp op, int nin, IrValue **in, IrDType dt) {
    IrValue *o = ir_value_new(g, NULL, dt, NULL, IR_VK_ACT);
    ir_node_new(g, op, NULL, nin, in, 1, &o);
    return o;
}
static IrNode *last(IrGraph *g) { return g->nodes[g->nnodes - 1]; }

#define D(...) ((const int64_t[]){__VA_ARGS__})
#define NV(a) ((int)(sizeof(a) / sizeof(a[0])))

/* Build the graph around one op; return the float outputs to put in the loss. */
static int build(IrOp op, IrGraph *g, Rng *r, IrValue **ys) {
    IrValue *a, *b, *in[6];
    switch (op) {
    case IR_OP_ADD: case IR_OP_SUB: case IR_OP_MUL: case IR_OP_DIV:
        a = param(g, r, "a", 2, D(2, 3), 0.5, 1.5, op != IR_OP_DIV);
        b = op == IR_OP_SUB ? param(g, r, "b", 2, D(2, 1), 0.5, 1.5, 1)
                            : param(g, r, "b", 1, D(3), 0.5, 1.5, op != IR_OP_DIV);
        in[0] = a, in[1] = b;
        ys[0] = node(g, op, 2, in, IR_F32);
        return 1;
    case IR_OP_POW:
        in[0] = param(g, r, "a", 2, D(2, 3), 0.5, 1.5, 0);
        in[1] = ir_const_scalar_f32(g, NULL, 2.5f);
        ys[0] = node(g, op, 2, in, IR_F32);
        return 1;
    case IR_OP_WHERE: {
        uint8_t c[6] = {1, 0, 0, 1, 1, 0};
        IrShape cs = ir_shape_make(2, D(2, 3));
        in[0] = ir_const_new(g, NULL, IR_BOOL, &cs, c);
        in[1] = param(g, r, "a", 2, D(2, 3), 0.5, 1.5, 1);
        in[2] = param(g, r, "b", 1, D(3), 0.5, 1.5, 1);
        ys[0] = node(g, op, 3, in, IR_F32);
        return 1;
    }
    case IR_OP_NEG: case IR_OP_EXP: case IR_OP_TANH: case IR_OP_SIGMOID: case IR_OP_ERF:
    case IR_OP_RELU: case IR_OP_IDENTITY: case IR_OP_DROPOUT: case IR_OP_GELU:
    case IR_OP_SILU: case IR_OP_TP_ALL_REDUCE: case IR_OP_TP_COPY: /* one rank: identity */
    case IR_OP_SIN: case IR_OP_COS:
        in[0] = param(g, r, "x", 2, D(3, 4), 0.2, 1.5, 1);
        ys[0] = node(g, op, 1, in, IR_F32);
        return 1;
    case IR_OP_SQRT: case IR_OP_LOG: case IR_OP_RECIPROCAL:
        in[0] = param(g, r, "x", 2, D(3, 4), 0.5, 2.0, 0);
        ys[0] = node(g, op, 1, in, IR_F32);
        return 1;
    case IR_OP_CAST:
        in[0] = param(g, r, "x", 2, D(3, 4), 0.2, 1.5, 1);
        in[0] = node(g, op, 1, in, IR_F64);
        ir_node_set_int(last(g), "to", IR_F64);
        ys[0] = node(g, op, 1, in, IR_F32);
        ir_node_set_int(last(g), "to", IR_F32);
        return 1;
    case IR_OP_MATMUL:
        in[0] = param(g, r, "a", 3, D(2, 3, 4), 0.2, 1.0, 1);
        in[1] = param(g, r, "b", 2, D(4, 5), 0.2, 1.0, 1);
        ys[0] = node(g, op, 2, in, IR_F32);
        return 1;
    case IR_OP_REDUCE_MEAN: case IR_OP_REDUCE_SUM:
        in[0] = param(g, r, "x", 3, D(2, 3, 4), 0.2, 1.0, 1);
        in[1] = ci64(g, 1, op == IR_OP_REDUCE_MEAN ? D(1) : D(-1));
        ys[0] = node(g, op, 2, in, IR_F32);
        ir_node_set_int(last(g), "keepdims", op == IR_OP_REDUCE_SUM);
        return 1;
    case IR_OP_SOFTMAX: case IR_OP_LOG_SOFTMAX:
        in[0] = param(g, r, "x", 2, D(3, 5), 0.2, 1.5, 1);
        ys[0] = node(g, op, 1, in, IR_F32);
        ir_node_set_int(last(g), "axis", -1);
        return 1;
    case IR_OP_RESHAPE:
        in[0] = param(g, r, "x", 2, D(2, 6), 0.2, 1.0, 1);
        in[1] = ci64(g, 2, D(3, 4));
        ys[0] = node(g, op, 2, in, IR_F32);
        return 1;
    case IR_OP_TRANSPOSE:
        in[0] = param(g, r, "x", 3, D(2, 3, 4), 0.2, 1.0, 1);
        ys[0] = node(g, op, 1, in, IR_F32);
        ir_node_set_ints(last(g), "perm", 3, D(1, 2, 0));
        return 1;
    case IR_OP_SPLIT: {
        /* only the first output feeds the loss: the rule must fill zeros */
        in[0] = param(g, r, "x", 2, D(2, 6), 0.2, 1.0, 1);
        in[1] = ci64(g, 2, D(2, 4));
        IrValue *o[2] = {ir_value_new(g, NULL, IR_F32, NULL, IR_VK_ACT),
                         ir_value_new(g, NULL, IR_F32, NULL, IR_VK_ACT)};
        IrNode *n = ir_node_new(g, op, NULL, 2, in, 2, o);
        ir_node_set_int(n, "axis", 1);
        ys[0] = o[0];
        return 1;
    }
    case IR_OP_CONCAT:
        in[0] = param(g, r, "a", 2, D(2, 2), 0.2, 1.0, 1);
        in[1] = param(g, r, "b", 2, D(2, 3), 0.2, 1.0, 1);
        ys[0] = node(g, op, 2, in, IR_F32);
        ir_node_set_int(last(g), "axis", -1);
        return 1;
    case IR_OP_SLICE:
        in[0] = param(g, r, "x", 2, D(4, 6), 0.2, 1.0, 1);
        in[1] = ci64(g, 2, D(1, -5));
        in[2] = ci64(g, 2, D(3, 6));
        in[3] = ci64(g, 2, D(0, 1));
        in[4] = ci64(g, 2, D(1, 2));
        ys[0] = node(g, op, 5, in, IR_F32);
        return 1;
    case IR_OP_SQUEEZE: case IR_OP_UNSQUEEZE:
        in[0] = op == IR_OP_SQUEEZE ? param(g, r, "x", 3, D(2, 1, 3), 0.2, 1.0, 1)
                                    : param(g, r, "x", 2, D(2, 3), 0.2, 1.0, 1);
        in[1] = ci64(g, 1, D(op == IR_OP_SQUEEZE ? 1 : 0));
        ys[0] = node(g, op, 2, in, IR_F32);
        return 1;
    case IR_OP_EXPAND:
        in[0] = param(g, r, "x", 2, D(3, 1), 0.2, 1.0, 1);
        in[1] = ci64(g, 3, D(2, 3, 4));
        ys[0] = node(g, op, 2, in, IR_F32);
        return 1;
    case IR_OP_FLATTEN:
        in[0] = param(g, r, "x", 3, D(2, 3, 4), 0.2, 1.0, 1);
        ys[0] = node(g, op, 1, in, IR_F32);
        ir_node_set_int(last(g), "axis", 1);
        return 1;
    case IR_OP_GATHER: {
        /* the middle axis of a 3-D activation (a fused-QKV split by index) */
        in[0] = param(g, r, "x", 3, D(2, 5, 3), 0.2, 1.0, 1);
        int64_t ids[4] = {4, 1, -1, 0}; /* -1 is 4 again: repeated ids accumulate */
        IrShape s = ir_shape_make(2, D(2, 2));
        in[1] = ir_const_new(g, NULL, IR_I64, &s, ids);
        ys[0] = node(g, op, 2, in, IR_F32);
        ir_node_set_int(last(g), "axis", 1);
        return 1;
    }
    case IR_OP_GATHER_ND: {
        in[0] = param(g, r, "x", 3, D(2, 3, 4), 0.2, 1.0, 1);
        int64_t ids[4] = {2, 2, 0, -1}; /* per batch row; a repeated tuple accumulates */
        IrShape s = ir_shape_make(3, D(2, 2, 1));
        in[1] = ir_const_new(g, NULL, IR_I64, &s, ids);
        ys[0] = node(g, op, 2, in, IR_F32);
        ir_node_set_int(last(g), "batch_dims", 1);
        return 1;
    }
    case IR_OP_GATHER_ELEMENTS: {
        in[0] = param(g, r, "x", 2, D(3, 4), 0.2, 1.0, 1);
        int64_t ids[10] = {0, 3, 3, -1, 1, 2, 2, 0, 0, 1};
        IrShape s = ir_shape_make(2, D(2, 5));
        in[1] = ir_const_new(g, NULL, IR_I64, &s, ids);
        ys[0] = node(g, op, 2, in, IR_F32);
        ir_node_set_int(last(g), "axis", 1);
        return 1;
    }
    case IR_OP_TILE:
        in[0] = param(g, r, "x", 3, D(2, 1, 3), 0.2, 1.0, 1);
        in[1] = ci64(g, 3, D(2, 3, 1));
        ys[0] = node(g, op, 2, in, IR_F32);
        return 1;
    case IR_OP_SCATTER_ND: {
        /* rows 1 and 3 of data overwritten: their gradient is 0 */
        in[0] = param(g, r, "data", 2, D(4, 3), 0.2, 1.0, 1);
        int64_t ids[2] = {1, -1};
        IrShape s = ir_shape_make(2, D(2, 1));
        in[1] = ir_const_new(g, NULL, IR_I64, &s, ids);
        in[2] = param(g, r, "updates", 2, D(2, 3), 0.2, 1.0, 1);
        ys[0] = node(g, op, 3, in, IR_F32);
        return 1;
    }
    case IR_OP_EMBEDDING: {
        in[0] = param(g, r, "table", 2, D(5, 3), 0.2, 1.0, 1);
        int64_t ids[4] = {4, 1, 4, 0}; /* a repeated id accumulates */
        IrShape s = ir_shape_make(2, D(2, 2));
        in[1] = ir_const_new(g, NULL, IR_I64, &s, ids);
        ys[0] = node(g, op, 2, in, IR_F32);
        return 1;
    }
    case IR_OP_LINEAR:
        in[0] = param(g, r, "x", 3, D(2, 3, 4), 0.2, 1.0, 1);
        in[1] = param(g, r, "w", 2, D(4, 5), 0.2, 1.0, 1);
        in[2] = param(g, r, "bias", 1, D(5), 0.2, 1.0, 1);
        ys[0] = node(g, op, 3, in, IR_F32);
        return 1;
    case IR_OP_LAYER_NORM: case IR_OP_RMS_NORM:
        in[0] = param(g, r, "x", 3, D(2, 3, 6), 0.2, 1.5, 1);
        in[1] = param(g, r, "scale", 1, D(6), 0.5, 1.5, 1);
        if (op == IR_OP_LAYER_NORM) in[2] = param(g, r, "bias", 1, D(6), 0.2, 1.0, 1);
        ys[0] = node(g, op, op == IR_OP_LAYER_NORM ? 3 : 2, in, IR_F32);
        ir_node_set_int(last(g), "axis", -1);
        ir_node_set_float(last(g), "epsilon", 1e-5);
        return 1;
    case IR_OP_ATTENTION:
        in[0] = param(g, r, "q", 3, D(2, 4, 4), 0.2, 1.0, 1);
        in[1] = param(g, r, "k", 3, D(2, 4, 4), 0.2, 1.0, 1);
        in[2] = param(g, r, "v", 3, D(2, 4, 3), 0.2, 1.0, 1);
        ys[0] = node(g, op, 3, in, IR_F32);
        ir_node_set_int(last(g), "causal", 1);
        ir_node_set_float(last(g), "scale", 0.5);
        return 1;
    case IR_OP_CROSS_ENTROPY: {
        in[0] = param(g, r, "logits", 3, D(2, 3, 5), 0.2, 1.5, 1);
        int64_t t[6] = {1, 4, -100, 0, 2, 4}; /* one ignored row */
        IrShape s = ir_shape_make(2, D(2, 3));
        in[1] = ir_const_new(g, NULL, IR_I64, &s, t);
        ys[0] = node(g, op, 2, in, IR_F32);
        ir_node_set_int(last(g), "use_ignore", 1);
        ir_node_set_int(last(g), "ignore_index", -100);
        return 1;
    }
    case IR_OP_VOCAB_CROSS_ENTROPY: {
        /* one rank holding the whole vocabulary (tp_shard_vocab.c's
         * decomposition, tp 1): M and the stats are not differentiated */
        in[0] = param(g, r, "logits", 3, D(2, 3, 5), 0.2, 1.5, 1);
        int64_t t[6] = {1, 4, -100, 0, 2, 4}; /* one ignored row */
        IrShape s = ir_shape_make(2, D(2, 3));
        in[1] = ir_const_new(g, NULL, IR_I64, &s, t);
        IrValue *ax[2] = {in[0], ci64(g, 1, D(-1))};
        IrValue *m = node(g, IR_OP_REDUCE_MAX, 2, ax, IR_F32);
        ir_node_set_int(last(g), "keepdims", 0);
        in[2] = node(g, IR_OP_TP_ALL_REDUCE, 1, &m, IR_F32);
        ir_node_set_string(last(g), "op", "max");
        in[3] = node(g, IR_OP_VOCAB_CE_STATS, 3, in, IR_F32);
        ir_node_set_int(last(g), "use_ignore", 1);
        ir_node_set_int(last(g), "ignore_index", -100);
        ys[0] = node(g, op, 4, in, IR_F32);
        ir_node_set_int(last(g), "use_ignore", 1);
        ir_node_set_int(last(g), "ignore_index", -100);
        ir_node_set_int(last(g), "vocab_size", 5);
        return 1;
    }
    default:
        return -1; /* no case: fails the test */
    }
}

static double run_loss(IrGraph *g, int li, IrTensor ***outs, int *nout, IrError *err) {
    if (hexec_run(g, NULL, 0, outs, nout, err)) return NAN;
    return *(const float *)(*outs)[li]->data;
}
static void free_outs(IrTensor **o, int n) {
    for (int i = 0; i < n; i++) ir_tensor_free(o[i]);
    free(o);
}

/* One op: build, differentiate, compare.  Returns failures; *checks counts
 * the elements compared, *worst the largest relative error. */
static int check_op(IrOp op, int *checks, double *worst) {
    IrError err = {{0}};
    IrGraph *g = ir_graph_new(ir_op_name(op));
    Rng r = {0x9e3779b97f4a7c15ULL ^ (uint64_t)op};
    IrValue *ys[8];
    int ny = build(op, g, &r, ys), fails = 0;
    if (ny < 0) {
        fprintf(stderr, "FAIL %s: has a gradient rule but no finite-difference case\n",
                ir_op_name(op));
        ir_graph_free(g);
        return 1;
    }
    PassContext ctx;
    pass_context_default(&ctx);
    if (pass_run_pipeline(g, "shape-infer", &ctx, &err)) goto fail;
    IrValue *loss = NULL;
    for (int i = 0; i < ny; i++) {
        IrShape s = ys[i]->shape;
        int64_t n = ir_shape_numel(&s);
        float *rd = malloc((size_t)(n ? n : 1) * sizeof(float));
        for (int64_t j = 0; j < n; j++) rd[j] = (float)(urand(&r) * 2 - 1);
        IrValue *R = ir_const_new(g, NULL, IR_F32, &s, rd);
        free(rd);
        IrValue *m[2] = {ys[i], R};
        IrValue *t = node(g, IR_OP_MUL, 2, m, IR_F32);
        IrValue *t2 = i == 0 && ny == 1 ? ir_value_new(g, "loss", IR_F32, NULL, IR_VK_ACT)
                                         : ir_value_new(g, NULL, IR_F32, NULL, IR_VK_ACT);
        ir_node_new(g, IR_OP_REDUCE_SUM, NULL, 1, &t, 1, &t2);
        ir_node_set_int(last(g), "keepdims", 0);
        if (loss) {
            IrValue *a[2] = {loss, t2};
            t2 = node(g, IR_OP_ADD, 2, a, IR_F32);
        }
        loss = t2;
    }
    ir_graph_add_output(g, loss);
    if (pass_run_pipeline(g, "shape-infer,autodiff,shape-infer", &ctx, &err)) goto fail;
    ir_graph_compact(g);
    int li = -1;
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == loss) li = i;
    IrTensor **base = NULL;
    int nb = 0;
    if (isnan(run_loss(g, li, &base, &nb, &err))) goto fail;
    for (int vi = 0; vi < g->nvalues; vi++) {
        IrValue *p = g->values[vi];
        if (p->kind != IR_VK_PARAM) continue;
        IrValue *gv = ad_param_grad(g, p);
        int gi = -1;
        for (int i = 0; i < g->noutputs; i++)
            if (g->outputs[i] == gv) gi = i;
        if (gi < 0) {
            fprintf(stderr, "FAIL %s: parameter '%s' got no gradient\n", ir_op_name(op), p->name);
            fails++;
            continue;
        }
        float *pd = p->data;
        const float *ana = base[gi]->data;
        int64_t n = ir_shape_numel(&p->shape);
        /* every element of a small parameter (a gather's rule must get the
         * untouched ones right too: zero), 6 random ones of a larger one */
        int64_t nk = n <= 32 ? n : 6;
        for (int64_t k = 0; k < nk; k++) {
            int64_t j = n <= 32 ? k : (int64_t)(urand(&r) * (double)n) % n;
            float keep = pd[j], eps = 1e-2f;
            double lp, lm;
            IrTensor **o;
            int no;
            pd[j] = keep + eps;
            lp = run_loss(g, li, &o, &no, &err);
            free_outs(o, no);
            pd[j] = keep - eps;
            lm = run_loss(g, li, &o, &no, &err);
            free_outs(o, no);
            pd[j] = keep;
            double num = (lp - lm) / (2.0 * (double)eps), a = ana[j];
            double scale = fmax(fabs(num), fabs(a)), diff = fabs(num - a);
            double rel = diff / fmax(scale, 1e-3);
            (*checks)++;
            if (rel > *worst) *worst = rel;
            if (diff > 2e-2 * scale + 2e-3) {
                fprintf(stderr, "FAIL %s: d loss / d %s[%lld]: analytic %.6g, numeric %.6g\n",
                        ir_op_name(op), p->name, (long long)j, a, num);
                fails++;
            }
        }
    }
    free_outs(base, nb);
    ir_graph_free(g);
    return fails;
fail:
    fprintf(stderr, "FAIL %s: %s\n", ir_op_name(op), err.msg);
    ir_graph_free(g);
    return 1;
}

int main(void) {
    int fails = 0, nrules = 0, checks = 0;
    double worst = 0;
    for (int op = 0; op < IR_OP_COUNT; op++) {
        if (!grad_rule((IrOp)op)) continue;
        nrules++;
        int c0 = checks;
        double w = 0;
        int f = check_op((IrOp)op, &checks, &w);
        fails += f;
        if (w > worst) worst = w;
        printf("%-16s %2d checks, max rel err %.2e%s\n", ir_op_name((IrOp)op), checks - c0, w,
               f ? "  FAIL" : "");
    }
    printf("%d gradient rules, %d finite-difference checks, max rel err %.2e, %d failures\n",
           nrules, checks, worst, fails);
    return fails ? 1 : 0;
}
