/* The AdamW update of GPT-2-124M's parameters (or its first L layers) run
 * through the host executor, as `hetc train` runs its update graph:
 *   bench_adamw_update [layers (default 12)] [steps (default 5)]
 * Prints the graph's node count and the mean seconds per step (after one
 * untimed step).  No assertion on time: a figure for docs/PERF.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hk_train.h"
#include "hostexec.h"
#include "ir.h"
#include "optimizer.h"

static void param(IrGraph *g, const char *name, int rank, int64_t d0, int64_t d1) {
    int64_t d[2] = {d0, d1};
    IrShape s = ir_shape_make(rank, d);
    IrValue *p = ir_value_new(g, name, IR_F32, &s, IR_VK_PARAM);
    size_t nb = (size_t)ir_shape_numel(&s) * 4;
    float *x = malloc(nb);
    for (size_t i = 0; i < nb / 4; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-4f - 0.05f;
    ir_value_set_data(p, x, nb);
    char gn[300];
    snprintf(gn, sizeof gn, "grad/%s", name);
    ir_graph_add_input(g, ir_value_new(g, gn, IR_F32, &s, IR_VK_INPUT));
}

static double clk(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
/* wall time, and the process's CPU time (user + system: page faults count),
 * which other jobs on a shared machine disturb less */
static double now(void) { return clk(CLOCK_MONOTONIC); }
static double cpu(void) { return clk(CLOCK_PROCESS_CPUTIME_ID); }

int main(int argc, char **argv) {
    int layers = argc > 1 ? atoi(argv[1]) : 12, steps = argc > 2 ? atoi(argv[2]) : 5;
    const int64_t C = 768, V = 50257, T = 1024;
    IrGraph *g = ir_graph_new("gpt2_update");
    char nm[256];
    param(g, "wte", 2, V, C), param(g, "wpe", 2, T, C);
    for (int l = 0; l < layers; l++) {
        static const struct { const char *n; int r; int64_t a, b; } P[] = {
            {"ln1.w", 1, 768, 0}, {"ln1.b", 1, 768, 0}, {"attn.w", 2, 768, 2304},
            {"attn.b", 1, 2304, 0}, {"proj.w", 2, 768, 768}, {"proj.b", 1, 768, 0},
            {"ln2.w", 1, 768, 0}, {"ln2.b", 1, 768, 0}, {"fc.w", 2, 768, 3072},
            {"fc.b", 1, 3072, 0}, {"fcp.w", 2, 3072, 768}, {"fcp.b", 1, 768, 0}};
        for (size_t k = 0; k < sizeof P / sizeof *P; k++) {
            snprintf(nm, sizeof nm, "h%d.%s", l, P[k].n);
            param(g, nm, P[k].r, P[k].a, P[k].b);
        }
    }
    param(g, "lnf.w", 1, C, 0), param(g, "lnf.b", 1, C, 0);
    OptimOpts o;
    optim_opts_default(&o);
    IrError err = {{0}};
    if (pass_optimizer_with(g, &o, &err)) {
        fprintf(stderr, "bench_adamw_update: %s\n", err.msg);
        return 1;
    }
    int nin = g->ninputs;
    IrTensor **in = calloc((size_t)nin, sizeof *in);
    int64_t numel = 0;
    for (int i = 0; i < nin; i++) {
        IrValue *v = g->inputs[i];
        in[i] = ir_tensor_new(v->name, v->dtype, &v->shape);
        if (!strcmp(v->name, "lr")) *(float *)in[i]->data = 6e-4f;
        else if (v->dtype == IR_F32) {
            float *x = in[i]->data;
            numel += ir_shape_numel(&v->shape);
            for (int64_t j = 0; j < ir_shape_numel(&v->shape); j++)
                x[j] = (float)((j * 40503u) % 997) * 1e-5f - 0.005f;
        }
    }
    double t0 = 0, c0 = 0;
    for (int s = 0; s <= steps; s++) {
        for (int i = 0; i < nin; i++)
            if (!strcmp(g->inputs[i]->name, "step")) *(int64_t *)in[i]->data = s + 1;
        if (s == 1) t0 = now(), c0 = cpu();
        IrTensor **out = NULL;
        int nout = 0;
        if (hexec_run(g, in, nin, &out, &nout, &err)) {
            fprintf(stderr, "bench_adamw_update: %s\n", err.msg);
            return 1;
        }
        for (int i = 0; i < nout; i++) ir_tensor_free(out[i]);
        free(out);
    }
    double dt = steps ? (now() - t0) / steps : 0, dc = steps ? (cpu() - c0) / steps : 0;
    printf("params %lld in %d tensors, update graph %d nodes: hexec_run %.3f s/step "
           "(cpu %.3f s/step)\n",
           (long long)numel, nin - 2, g->nnodes, dt, dc);
    /* the fused kernel alone, in place over P m v (what a stage binary's
     * update call does): no allocation, no copies, no grad norm */
    double kt = 0, kc = 0;
    char e[HK_ERRLEN];
    for (int s = 0; s <= steps; s++) {
        if (s == 1) kt = now(), kc = cpu();
        float lr = 6e-4f, cs = 0.5f;
        for (int i = 0; i < nin; i++) {
            IrValue *gv = g->inputs[i];
            if (strncmp(gv->name, "grad/", 5)) continue;
            IrValue *p = ir_graph_find_value(g, gv->name + 5);
            char nm2[300];
            snprintf(nm2, sizeof nm2, "opt/m/%s", p->name);
            float *m = (float *)ir_graph_find_value(g, nm2)->data;
            snprintf(nm2, sizeof nm2, "opt/v/%s", p->name);
            float *v = (float *)ir_graph_find_value(g, nm2)->data;
            float *pd = (float *)p->data;
            if (hk_adamw_fused_f32(pd, m, v, in[i]->data, ir_shape_numel(&p->shape), lr, s + 1,
                                   &cs, 0.9, 0.95, 1e-8, p->shape.rank >= 2 ? 0.1 : 0, pd, m, v,
                                   e)) {
                fprintf(stderr, "bench_adamw_update: %s\n", e);
                return 1;
            }
        }
    }
    printf("fused AdamW kernel alone, in place: %.3f s/step (cpu %.3f s/step)\n",
           steps ? (now() - kt) / steps : 0, steps ? (cpu() - kc) / steps : 0);
    for (int i = 0; i < nin; i++) ir_tensor_free(in[i]);
    free(in);
    ir_graph_free(g);
    return 0;
}
