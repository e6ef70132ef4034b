/* The optimizer pass in one training graph (fwd + bwd + upd): run it for
 * three steps with state carry (upd/P -> P, upd/m/P -> opt/m/P, ...) and
 * compare every parameter and state, each step, with the host kernels
 * hk_adamw_step_f32 / hk_sgd_step_f32 (checked against torch.optim in
 * tests/train_kernels) applied to the graph's own grad/P outputs after
 * clip_grad_norm_'s scaling (hk_global_grad_norm_f32, hk_clip_scale).
 * Tiny model: Embedding -> LayerNorm -> Linear(+bias) -> CrossEntropy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk_train.h"
#include "hostexec.h"
#include "loss.h"
#include "optimizer.h"
#include "pass.h"

static uint64_t rs = 0x2545F4914F6CDD1DULL;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((double)(rs >> 11) / (double)(1ULL << 53) * 2 - 1);
}
static IrValue *param(IrGraph *g, const char *name, int rank, const int64_t *dims, float base) {
    IrShape s = ir_shape_make(rank, dims);
    int64_t n = ir_shape_numel(&s);
    float *d = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) d[i] = base + 0.5f * frand();
    IrValue *v = ir_value_new(g, name, IR_F32, &s, IR_VK_PARAM);
    ir_value_set_data(v, d, (size_t)n * sizeof(float));
    return v;
}
static IrValue *act(IrGraph *g, const char *name) {
    return ir_value_new(g, name, IR_F32, NULL, IR_VK_ACT);
}
static int out_index(IrGraph *g, const char *name) {
    for (int i = 0; i < g->noutputs; i++)
        if (!strcmp(g->outputs[i]->name, name)) return i;
    return -1;
}

static int run(int sgd, double clip) {
    IrError err = {{0}};
    IrGraph *g = ir_graph_new("tiny");
    enum { V = 7, D = 6, B = 2, T = 3 };
    int64_t ids_d[2] = {B, T};
    IrShape is = ir_shape_make(2, ids_d);
    IrValue *ids = ir_value_new(g, "input_ids", IR_I64, &is, IR_VK_INPUT);
    ir_graph_add_input(g, ids);
    IrValue *emb = param(g, "emb", 2, (int64_t[]){V, D}, 0);
    IrValue *ln = param(g, "ln", 1, (int64_t[]){D}, 1);
    IrValue *w = param(g, "w", 2, (int64_t[]){D, V}, 0);
    IrValue *b = param(g, "b", 1, (int64_t[]){V}, 0);
    IrValue *h = act(g, "h"), *n = act(g, "n"), *lg = act(g, "logits");
    IrValue *in[3] = {emb, ids};
    ir_node_new(g, IR_OP_EMBEDDING, "e", 2, in, 1, &h);
    in[0] = h, in[1] = ln;
    ir_node_set_float(ir_node_new(g, IR_OP_LAYER_NORM, "l", 2, in, 1, &n), "epsilon", 1e-5);
    in[0] = n, in[1] = w, in[2] = b;
    ir_node_new(g, IR_OP_LINEAR, "fc", 3, in, 1, &lg);
    ir_graph_add_output(g, lg);
    PassContext ctx;
    pass_context_default(&ctx);
    LossOpts lo;
    loss_opts_default(&lo);
    OptimOpts oo;
    optim_opts_default(&oo);
    oo.sgd = sgd, oo.clip = clip, oo.weight_decay = 0.05, oo.momentum = 0.8;
    if (pass_run_pipeline(g, "shape-infer", &ctx, &err) || pass_loss_with(g, &lo, &err) ||
        pass_run_pipeline(g, "autodiff,shape-infer", &ctx, &err) ||
        pass_optimizer_with(g, &oo, &err) || pass_run_pipeline(g, "shape-infer,dce", &ctx, &err)) {
        fprintf(stderr, "FAIL building the graph: %s\n", err.msg);
        return 1;
    }
    int fails = 0;
    IrValue *ps[4] = {emb, ln, w, b};
    /* the oracle's own copies of parameters and states */
    float *op[4], *om[4], *ov[4];
    int64_t np[4];
    for (int i = 0; i < 4; i++) {
        np[i] = ir_shape_numel(&ps[i]->shape);
        op[i] = malloc((size_t)np[i] * 4);
        om[i] = calloc((size_t)np[i], 4);
        ov[i] = calloc((size_t)np[i], 4);
        memcpy(op[i], ps[i]->data, (size_t)np[i] * 4);
    }
    IrShape s0 = {0};
    IrTensor *tin[4] = {ir_tensor_new("input_ids", IR_I64, &is),
                        ir_tensor_new("targets", IR_I64, &is),
                        ir_tensor_new("lr", IR_F32, &s0), ir_tensor_new("step", IR_I64, &s0)};
    double worst = 0;
    for (int64_t step = 1; step <= 3; step++) {
        for (int i = 0; i < B * T; i++) {
            ((int64_t *)tin[0]->data)[i] = (i * 3 + step) % V;
            ((int64_t *)tin[1]->data)[i] = (i * 5 + 2 * step) % V;
        }
        double lr = 0.05 / (double)step;
        *(float *)tin[2]->data = (float)lr;
        *(int64_t *)tin[3]->data = step;
        IrTensor **out;
        int nout;
        if (hexec_run(g, tin, 4, &out, &nout, &err)) {
            fprintf(stderr, "FAIL run: %s\n", err.msg);
            return 1;
        }
        const float *gb[4];
        for (int i = 0; i < 4; i++) {
            char nm[64];
            snprintf(nm, sizeof nm, "grad/%s", ps[i]->name);
            gb[i] = out[out_index(g, nm)]->data;
        }
        double norm = hk_global_grad_norm_f32(4, gb, np);
        double cs = clip > 0 ? hk_clip_scale(norm, clip) : 1.0;
        double gn = *(const float *)out[out_index(g, "grad_norm")]->data;
        if (fabs(gn - norm) > 1e-5 * norm) {
            fprintf(stderr, "FAIL grad_norm %.9g, kernel %.9g\n", gn, norm);
            fails++;
        }
        for (int i = 0; i < 4; i++) {
            float *gs = malloc((size_t)np[i] * 4);
            memcpy(gs, gb[i], (size_t)np[i] * 4);
            hk_scale_f32(gs, np[i], (float)cs);
            double wd = ps[i]->shape.rank >= 2 ? oo.weight_decay : 0;
            if (sgd)
                hk_sgd_step_f32(op[i], gs, om[i], np[i], lr, oo.momentum, 0, wd, 0, step == 1,
                                NULL);
            else
                hk_adamw_step_f32(op[i], gs, om[i], ov[i], np[i], step, lr, oo.beta1, oo.beta2,
                                  oo.eps, wd, NULL);
            free(gs);
            const char *kinds[3] = {NULL, sgd ? "buf" : "m", sgd ? NULL : "v"};
            float *want[3] = {op[i], om[i], ov[i]};
            for (int k = 0; k < 3; k++) {
                if (k && !kinds[k]) continue;
                char on[64], sn[64];
                if (k) snprintf(on, sizeof on, "upd/%s/%s", kinds[k], ps[i]->name);
                else snprintf(on, sizeof on, "upd/%s", ps[i]->name);
                snprintf(sn, sizeof sn, "opt/%s/%s", kinds[k] ? kinds[k] : "", ps[i]->name);
                int oi = out_index(g, on);
                if (oi < 0) {
                    fprintf(stderr, "FAIL no output %s\n", on);
                    fails++;
                    continue;
                }
                const float *got = out[oi]->data;
                for (int64_t j = 0; j < np[i]; j++) {
                    double e = fabs(got[j] - want[k][j]) / fmax(fabs(want[k][j]), 1e-3);
                    if (e > worst) worst = e;
                    if (e > 1e-4) {
                        fprintf(stderr, "FAIL %s step %lld [%lld]: %.9g vs kernel %.9g\n", on,
                                (long long)step, (long long)j, got[j], want[k][j]);
                        fails++;
                        break;
                    }
                }
                /* state carry: next step reads what this one wrote */
                IrValue *dst = k ? ir_graph_find_value(g, sn) : ps[i];
                memcpy(dst->data, got, (size_t)np[i] * 4);
            }
        }
        for (int i = 0; i < nout; i++) ir_tensor_free(out[i]);
        free(out);
    }
    printf("%s clip %.2g: 3 steps, max rel diff vs kernels %.2e, %d failures\n",
           sgd ? "SGD" : "AdamW", clip, worst, fails);
    for (int i = 0; i < 4; i++) free(op[i]), free(om[i]), free(ov[i]);
    for (int i = 0; i < 4; i++) ir_tensor_free(tin[i]);
    ir_graph_free(g);
    return fails;
}

int main(void) {
    int f = run(0, 0.5) + run(0, 0) + run(1, 0.5);
    return f ? 1 : 0;
}
