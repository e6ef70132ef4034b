/* Simulated TP ranks for the tensor-parallel pattern tests (see
 * tp_sim.h): ranks' train graphs merged into one host-executor run. */
#include "tp_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"
#include "hostexec.h"
#include "pass.h"

int tp_sim_fails;

uint64_t tp_sim_rs = 0x243F6A8885A308D3ULL;
double tp_sim_urand(void) {
    tp_sim_rs ^= tp_sim_rs << 13, tp_sim_rs ^= tp_sim_rs >> 7, tp_sim_rs ^= tp_sim_rs << 17;
    return (double)(tp_sim_rs >> 11) / 9007199254740992.0;
}
int64_t tp_sim_irand(int64_t lo, int64_t hi) { return lo + (int64_t)(tp_sim_urand() * (double)(hi - lo + 1)); }

IrValue *tp_sim_param(IrGraph *g, const char *name, int rank, const int64_t *dims, double sc) {
    IrShape s = ir_shape_make(rank, dims);
    IrValue *v = ir_value_new(g, name, IR_F32, &s, IR_VK_PARAM);
    v->shape_known = 1;
    int64_t n = ir_shape_numel(&s);
    float *d = malloc((size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = (float)((tp_sim_urand() * 2 - 1) * sc);
    ir_value_set_data(v, d, (size_t)n * sizeof *d);
    return v;
}
IrValue *tp_sim_act(IrGraph *g, const char *name) {
    IrShape s = {0};
    IrValue *v = ir_value_new(g, name, IR_F32, &s, IR_VK_ACT);
    v->shape_known = 0; /* shape-infer decides */
    return v;
}
IrValue *tp_sim_op1(IrGraph *g, IrOp op, const char *name, int nin, IrValue **in) {
    IrValue *o = tp_sim_act(g, name);
    ir_node_new(g, op, name, nin, in, 1, &o);
    return o;
}
IrValue *tp_sim_shape_const(IrGraph *g, const char *name, int n, const int64_t *v) {
    return ir_const_i64s(g, name, n, v);
}

/* forward + seeded backward: outputs y, dx, grad/P */
int tp_sim_train(IrGraph *g, IrError *err) {
    PassContext ctx;
    pass_context_default(&ctx);
    if (pass_run_pipeline(g, "shape-infer", &ctx, err)) return -1;
    IrValue *y = ir_graph_find_value(g, "y"), *x = ir_graph_find_value(g, "x");
    IrValue *dy = ir_value_new(g, "dy", IR_F32, &y->shape, IR_VK_INPUT);
    dy->shape_known = 1;
    ir_graph_add_input(g, dy);
    AdSeed sd = {.value = y, .grad = dy};
    IrValue *dx = NULL;
    if (autodiff_seeded(g, &sd, 1, &x, 1, &dx, err)) return -1;
    IrValue *o = ir_value_new(g, "dx", IR_F32, &x->shape, IR_VK_GRAD);
    IrNode *n = ir_node_new(g, IR_OP_IDENTITY, "dx", 1, &dx, 1, &o);
    n->phase = IR_PHASE_BWD;
    ir_graph_add_output(g, o);
    return pass_run_pipeline(g, "shape-infer", &ctx, err) || ir_verify(g, 1, err) ? -1 : 0;
}

/* the ranks' train graphs as one graph: values prefixed "r<k>/" except the
 * shared inputs x, dy; the k-th TpAllReduce of all ranks is one sum */
IrGraph *tp_sim_merge_ranks(IrGraph **rg, int tp, IrError *err) {
    IrGraph *m = ir_graph_new("merged");
    int nn = rg[0]->nnodes;
    for (int r = 1; r < tp; r++)
        if (rg[r]->nnodes != nn) {
            ir_errorf(err, "rank %d has %d nodes, rank 0 %d", r, rg[r]->nnodes, nn);
            ir_graph_free(m);
            return NULL;
        }
    IrValue ***map = calloc((size_t)tp, sizeof *map);
    for (int r = 0; r < tp; r++) {
        map[r] = calloc((size_t)rg[r]->nvalues + 1, sizeof **map);
        for (int i = 0; i < rg[r]->nvalues; i++) {
            IrValue *v = rg[r]->values[i];
            int shared = v->kind == IR_VK_INPUT && !v->producer;
            if (shared && r > 0) {
                map[r][i] = ir_graph_find_value(m, v->name);
                continue;
            }
            char nm[1200];
            if (shared) snprintf(nm, sizeof nm, "%s", v->name);
            else snprintf(nm, sizeof nm, "r%d/%s", r, v->name);
            IrValue *c = map[r][i] = ir_value_new(m, nm, v->dtype, &v->shape, v->kind);
            c->shape_known = v->shape_known;
            if (shared) ir_graph_add_input(m, c);
            if ((v->kind == IR_VK_PARAM || v->kind == IR_VK_CONST) && ir_value_has_data(v)) {
                const void *d = ir_value_data(v, err);
                void *cp = malloc(v->nbytes ? v->nbytes : 1);
                memcpy(cp, d, v->nbytes);
                ir_value_set_data(c, cp, v->nbytes);
            }
        }
    }
    for (int i = 0; i < nn; i++) {
        if (rg[0]->nodes[i]->op == IR_OP_TP_ALL_REDUCE) {
            IrValue *acc = map[0][rg[0]->nodes[i]->in[0]->id];
            for (int r = 1; r < tp; r++) {
                IrValue *in[2] = {acc, map[r][rg[r]->nodes[i]->in[0]->id]};
                char nm[64];
                snprintf(nm, sizeof nm, "allreduce%d/+%d", i, r);
                IrValue *o = ir_value_new(m, nm, IR_F32, &acc->shape, IR_VK_ACT);
                o->shape_known = 1;
                ir_node_new(m, IR_OP_ADD, nm, 2, in, 1, &o);
                acc = o;
            }
            for (int r = 0; r < tp; r++) {
                IrValue *o = map[r][rg[r]->nodes[i]->out[0]->id];
                ir_node_new(m, IR_OP_IDENTITY, o->name, 1, &acc, 1, &o);
            }
            continue;
        }
        for (int r = 0; r < tp; r++) {
            IrNode *s = rg[r]->nodes[i];
            IrValue *in[16] = {0}, *out[16] = {0};
            for (int k = 0; k < s->nin; k++) in[k] = s->in[k] ? map[r][s->in[k]->id] : NULL;
            for (int k = 0; k < s->nout; k++) out[k] = s->out[k] ? map[r][s->out[k]->id] : NULL;
            IrNode *d = ir_node_new(m, s->op, s->name, s->nin, in, s->nout, out);
            for (int a = 0; a < s->nattrs; a++) {
                const IrAttr *at = &s->attrs[a];
                if (at->type == IR_ATTR_INT) ir_node_set_int(d, at->name, at->i);
                if (at->type == IR_ATTR_FLOAT) ir_node_set_float(d, at->name, at->f);
                if (at->type == IR_ATTR_STRING) ir_node_set_string(d, at->name, at->s);
                if (at->type == IR_ATTR_INTS) ir_node_set_ints(d, at->name, at->n, at->ints);
                if (at->type == IR_ATTR_FLOATS) ir_node_set_floats(d, at->name, at->n, at->floats);
            }
        }
    }
    for (int r = 0; r < tp; r++) {
        for (int i = 0; i < rg[r]->noutputs; i++) ir_graph_add_output(m, map[r][rg[r]->outputs[i]->id]);
        free(map[r]);
    }
    free(map);
    return m;
}

IrTensor *tp_sim_find(IrTensor **t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i]->name, name)) return t[i];
    return NULL;
}

/* L2 relative error.  A gradient that is zero in exact arithmetic (the key
 * bias: softmax ignores a per-row shift of the scores) is rounding noise on
 * both sides (rms ~1e-7 against O(1) gradients): there both must be below
 * 1e-4 rms, and 0 is returned. */
double tp_sim_rel(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0, aa = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (double)(a[i] - b[i]);
        den += (double)b[i] * b[i], aa += (double)a[i] * a[i];
    }
    if (n && sqrt(den / (double)n) < 1e-5) return sqrt(aa / (double)n) < 1e-4 ? 0 : 1;
    return sqrt(num / (den > 1e-30 ? den : 1e-30));
}

IrTensor *tp_sim_tensor(const char *name, const IrShape *s, const float *d) {
    IrTensor *t = ir_tensor_new(name, IR_F32, s);
    memcpy(t->data, d, (size_t)ir_shape_numel(s) * sizeof(float));
    return t;
}

/* every output of the unsharded run against each rank's (r<k>/NAME) in the
 * merged run; gradients of sharded parameters against the rank's slice */
double tp_sim_compare(const char *what, IrTensor **ro, int nro, IrTensor **mo, int nmo, int tp,
                      TpParamShard *const *shards, const int *nshards, int *checked) {
    double worst = 0;
    for (int r = 0; r < tp; r++) {
        char nm[1200];
        for (int i = 0; i < nro; i++) {
            const char *name = ro[i]->name;
            int64_t n = 1;
            for (int k = 0; k < ro[i]->shape.rank; k++) n *= ro[i]->shape.dims[k];
            if (ro[i]->dtype != IR_F32) continue;
            const TpParamShard *sh = NULL;
            for (int s = 0; s < nshards[r] && !strncmp(name, "grad/", 5); s++)
                if (!strcmp(shards[r][s].name, name + 5)) sh = &shards[r][s];
            snprintf(nm, sizeof nm, "r%d/%s", r, name);
            IrTensor *got = tp_sim_find(mo, nmo, nm);
            if (!got) {
                CHECK(0, "%s: rank %d has no output '%s'", what, r, name);
                continue;
            }
            const float *want = ro[i]->data;
            float *slice = NULL;
            if (sh) { /* the rank's slice of the unsharded gradient */
                int64_t rows = ro[i]->shape.dims[0];
                int64_t cols = ro[i]->shape.rank == 2 ? ro[i]->shape.dims[1] : 1, keep = 0;
                for (int k = 0; k < sh->nranges; k++) keep += sh->len[k];
                slice = malloc(sizeof *slice * (size_t)(sh->axis ? rows * keep : keep * cols) + 1);
                float *w = slice;
                if (sh->axis == 0)
                    for (int k = 0; k < sh->nranges; k++)
                        for (int64_t a = 0; a < sh->len[k] * cols; a++) *w++ = want[sh->start[k] * cols + a];
                else
                    for (int64_t a = 0; a < rows; a++)
                        for (int k = 0; k < sh->nranges; k++)
                            for (int64_t b = 0; b < sh->len[k]; b++) *w++ = want[a * cols + sh->start[k] + b];
                n = w - slice;
                want = slice;
            }
            int64_t gn = 1;
            for (int k = 0; k < got->shape.rank; k++) gn *= got->shape.dims[k];
            if (gn != n) {
                CHECK(0, "%s: rank %d '%s': %lld elements, want %lld", what, r, name,
                      (long long)gn, (long long)n);
            } else {
                double e = tp_sim_rel(got->data, want, n);
                if (e > worst) worst = e;
                CHECK(e <= 1e-5, "%s: rank %d '%s'%s: relative error %.3g", what, r, name,
                      sh ? " (shard)" : "", e);
                (*checked)++;
            }
            free(slice);
        }
    }
    return worst;
}

double tp_sim_run(IrGraph *ref, int tp, const char *what, TpSimCheck check, void *arg) {
    IrError err = {{0}};
    uint64_t seed = tp_sim_rs;
    double worst = -1;
    IrGraph **rg = calloc((size_t)tp, sizeof *rg);
    TpShardResult *res = calloc((size_t)tp, sizeof *res);
    IrGraph *m = NULL;
    IrTensor **ro = NULL, **mo = NULL;
    int nro = 0, nmo = 0;
    for (int r = 0; r < tp; r++) {
        if (tp_shard(ref, tp, r, &res[r], &err)) {
            CHECK(0, "%s: tp_shard: %s", what, err.msg);
            goto done;
        }
        if (check) check(&res[r], r, what, arg);
        rg[r] = res[r].graph;
        if (tp_sim_train(rg[r], &err)) {
            CHECK(0, "%s: rank %d train graph: %s", what, r, err.msg);
            goto done;
        }
    }
    if (tp_sim_train(ref, &err) || !(m = tp_sim_merge_ranks(rg, tp, &err))) {
        CHECK(0, "%s: %s", what, err.msg);
        goto done;
    }
    {
        PassContext ctx;
        pass_context_default(&ctx);
        if (pass_run_pipeline(m, "shape-infer", &ctx, &err)) {
            CHECK(0, "%s: merged graph: %s", what, err.msg);
            goto done;
        }
        IrValue *xv = ir_graph_find_value(ref, "x");
        int64_t n = ir_shape_numel(&xv->shape);
        float *x = malloc((size_t)n * sizeof *x), *dy = malloc((size_t)n * sizeof *dy);
        for (int64_t i = 0; i < n; i++) x[i] = (float)(tp_sim_urand() * 2 - 1), dy[i] = (float)(tp_sim_urand() * 2 - 1);
        IrTensor *in[2] = {tp_sim_tensor("x", &xv->shape, x), tp_sim_tensor("dy", &xv->shape, dy)};
        int ok = !hexec_run(ref, in, 2, &ro, &nro, &err) && !hexec_run(m, in, 2, &mo, &nmo, &err);
        ir_tensor_free(in[0]), ir_tensor_free(in[1]);
        free(x), free(dy);
        if (!ok) {
            CHECK(0, "%s: run: %s", what, err.msg);
            goto done;
        }
    }
    int checked = 0;
    TpParamShard *sh[TP_SIM_MAX_TP];
    int nsh[TP_SIM_MAX_TP];
    for (int r = 0; r < tp; r++) sh[r] = res[r].shards, nsh[r] = res[r].nshards;
    worst = tp_sim_compare(what, ro, nro, mo, nmo, tp, sh, nsh, &checked);
    printf("%s: %d tensors (y, dx, %d parameter gradients) x %d ranks, worst relative error %.2e "
           "(seed %llx)\n", what, checked / tp, nro - 2, tp, worst, (unsigned long long)seed);
done:
    for (int i = 0; i < nro; i++) ir_tensor_free(ro[i]);
    for (int i = 0; i < nmo; i++) ir_tensor_free(mo[i]);
    free(ro), free(mo);
    for (int r = 0; r < tp; r++) tp_shard_free(&res[r]);
    free(res), free(rg);
    if (m) ir_graph_free(m);
    return worst;
}

