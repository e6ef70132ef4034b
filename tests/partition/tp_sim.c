/* Simulated TP ranks for the tensor-parallel pattern tests (see
 * tp_sim.h): ranks' train graphs merged into one host-executor run. */
#include "tp_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"
#include "hostexec.h"
#include "layers.h"
#include "loss.h"
#include "modules.h"
#include "onnx_import.h"
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

IrValue *tp_sim_input_x(IrGraph *g, int64_t B, int64_t T, int64_t D) {
    int64_t dims[3] = {B, T, D};
    IrShape s = ir_shape_make(3, dims);
    IrValue *x = ir_value_new(g, "x", IR_F32, &s, IR_VK_INPUT);
    x->shape_known = 1;
    ir_graph_add_input(g, x);
    return x;
}

IrGraph *tp_sim_output(IrGraph *g, IrValue *y, const char *what) {
    ir_graph_add_output(g, y);
    PassContext ctx;
    IrError err = {{0}};
    pass_context_default(&ctx);
    if (pass_run_pipeline(g, "shape-infer", &ctx, &err)) {
        fprintf(stderr, "FAIL %s: %s\n", what, err.msg);
        exit(1);
    }
    return g;
}

void tp_sim_model(int argc, char **argv, const char *rel, void (*fn)(const char *path)) {
    if (argc < 2) return;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", argv[1], rel);
    fn(p);
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
            /* the vocab-parallel loss's row max: op "max" */
            int mx = !strcmp(ir_attr_string(rg[0]->nodes[i], "op", "sum"), "max");
            for (int r = 1; r < tp; r++) {
                IrValue *in[2] = {acc, map[r][rg[r]->nodes[i]->in[0]->id]};
                char nm[64];
                snprintf(nm, sizeof nm, "allreduce%d/%s%d", i, mx ? "max" : "+", r);
                IrValue *o = ir_value_new(m, nm, IR_F32, &acc->shape, IR_VK_ACT);
                o->shape_known = 1;
                ir_node_new(m, mx ? IR_OP_MAX : IR_OP_ADD, nm, 2, in, 1, &o);
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

/* ref sharded for every rank into res[r] (rg[r]: its graph), the pattern
 * check per rank, then train(rg[r]) where given; -1 after a CHECK failure */
static int shard_ranks(IrGraph *ref, int tp, const char *what, TpSimCheck check, void *arg,
                       int (*train)(IrGraph *, IrError *), TpShardResult *res, IrGraph **rg) {
    IrError err = {{0}};
    for (int r = 0; r < tp; r++) {
        if (tp_shard(ref, tp, r, &res[r], &err)) {
            CHECK(0, "%s: rank %d: tp_shard: %s", what, r, err.msg);
            return -1;
        }
        if (check) check(&res[r], r, what, arg);
        rg[r] = res[r].graph;
        if (train && train(rg[r], &err)) {
            CHECK(0, "%s: rank %d train graph: %s", what, r, err.msg);
            return -1;
        }
    }
    return 0;
}

static void sim_free_outs(IrTensor **t, int n) {
    for (int i = 0; i < n; i++) ir_tensor_free(t[i]);
    free(t);
}

/* what a simulation holds: the ranks' shard results, the merged graph and
 * both runs' outputs */
static void sim_free(TpShardResult *res, IrGraph **rg, int tp, IrGraph *m, IrTensor **ro, int nro,
                     IrTensor **mo, int nmo) {
    sim_free_outs(ro, nro), sim_free_outs(mo, nmo);
    for (int r = 0; r < tp; r++) tp_shard_free(&res[r]);
    free(res), free(rg);
    if (m) ir_graph_free(m);
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
    if (shard_ranks(ref, tp, what, check, arg, tp_sim_train, res, rg)) goto done;
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
    sim_free(res, rg, tp, m, ro, nro, mo, nmo);
    return worst;
}


/* ------------------------------------------------------------ loss graphs */

#define LOSS_TRAIN "shape-infer,autodiff,shape-infer"

/* a loss graph's train graph: autodiff from its "loss" output */
static int loss_train(IrGraph *g, IrError *err) {
    PassContext ctx;
    pass_context_default(&ctx);
    return pass_run_pipeline(g, LOSS_TRAIN, &ctx, err) || ir_verify(g, 1, err) ? -1 : 0;
}

double tp_sim_run_loss(IrGraph *ref, int tp, int64_t id_hi, int64_t ignore_index,
                       const char *what, TpSimCheck check, void *arg) {
    IrError err = {{0}};
    double worst = -1;
    IrGraph **rg = calloc((size_t)tp, sizeof *rg);
    TpShardResult *res = calloc((size_t)tp, sizeof *res);
    IrGraph *m = NULL;
    IrTensor **ro = NULL, **mo = NULL, *in[16] = {0};
    int nro = 0, nmo = 0, nin = 0;
    PassContext ctx;
    pass_context_default(&ctx);
    if (shard_ranks(ref, tp, what, check, arg, loss_train, res, rg)) goto done;
    if (pass_run_pipeline(ref, LOSS_TRAIN, &ctx, &err) || !(m = tp_sim_merge_ranks(rg, tp, &err)) ||
        pass_run_pipeline(m, "shape-infer", &ctx, &err)) {
        CHECK(0, "%s: %s", what, err.msg);
        goto done;
    }
    /* integer inputs (token ids, targets): uniform in [0, id_hi), a few
     * targets ignore_index when the loss ignores one; float inputs U(-1, 1) */
    nin = ref->ninputs < 16 ? ref->ninputs : 16;
    for (int i = 0; i < nin; i++) {
        IrValue *v = ref->inputs[i];
        in[i] = ir_tensor_new(v->name, v->dtype, &v->shape);
        int64_t n = ir_shape_numel(&v->shape);
        int tg = !strcmp(v->name, "targets");
        for (int64_t k = 0; k < n; k++) {
            int64_t id = tp_sim_irand(0, id_hi - 1);
            if (tg && ignore_index != INT64_MIN && tp_sim_urand() < 0.2) id = ignore_index;
            if (v->dtype == IR_F32) ((float *)in[i]->data)[k] = (float)(tp_sim_urand() * 2 - 1);
            else if (v->dtype == IR_I64) ((int64_t *)in[i]->data)[k] = id;
            else if (v->dtype == IR_I32) ((int32_t *)in[i]->data)[k] = (int32_t)id;
        }
    }
    if (hexec_run(ref, in, nin, &ro, &nro, &err) || hexec_run(m, in, nin, &mo, &nmo, &err)) {
        CHECK(0, "%s: run: %s", what, err.msg);
        goto done;
    }
    {
        TpParamShard **sh = calloc((size_t)tp, sizeof *sh);
        int *nsh = calloc((size_t)tp, sizeof *nsh), checked = 0;
        for (int r = 0; r < tp; r++) sh[r] = res[r].shards, nsh[r] = res[r].nshards;
        worst = tp_sim_compare(what, ro, nro, mo, nmo, tp, sh, nsh, &checked);
        CHECK(checked >= tp * 2, "%s: only %d tensors compared", what, checked);
        free(sh), free(nsh);
    }
done:
    for (int i = 0; i < nin; i++) ir_tensor_free(in[i]);
    sim_free(res, rg, tp, m, ro, nro, mo, nmo);
    return worst;
}

/* -------------------------------------------------------- imported models */

IrGraph *tp_sim_import(const char *path, int64_t seq, int flags, int *nlayers) {
    IrError err = {{0}};
    HetcImportOptions io;
    hetc_import_options_default(&io);
    io.batch = 2, io.seq = seq;
    IrGraph *g = hetc_import_onnx(path, &io, &err);
    PassContext ctx;
    pass_context_default(&ctx);
    int ok = g && !pass_run_pipeline(g, pass_default_pipeline(), &ctx, &err);
    if (ok && (flags & TP_SIM_LAYERS)) {
        ModuleOptions mo;
        LayerOptions lo;
        PlanLayer *layers = NULL;
        LayerSummary sum;
        module_options_default(&mo), layer_options_default(&lo);
        ok = !modules_detect(g, &mo, NULL, &err) && !layers_build(g, &lo, &layers, &sum, &err);
        free(layers);
        if (ok) *nlayers = sum.L;
    }
    if (ok && (flags & TP_SIM_LOSS))
        ok = !pass_run_pipeline(g, "tie-weights", &ctx, &err) && !pass_loss(g, &ctx, &err);
    if (ok && (flags & TP_SIM_SHAPES)) ok = !pass_run_pipeline(g, "shape-infer", &ctx, &err);
    if (!ok) {
        CHECK(0, "%s: %s", path, err.msg);
        if (g) ir_graph_free(g);
        return NULL;
    }
    return g;
}

double tp_sim_run_logits(IrGraph *g, int tp, int64_t tok_hi, const char *what, TpSimCheck check,
                         void *arg, TpShardResult *rank0) {
    IrError err = {{0}};
    double worst = -1;
    IrGraph **rg = calloc((size_t)tp, sizeof *rg), *m = NULL;
    TpShardResult *res = calloc((size_t)tp, sizeof *res);
    IrTensor **ro = NULL, **mo = NULL;
    int nro = 0, nmo = 0;
    PassContext ctx;
    pass_context_default(&ctx);
    if (shard_ranks(g, tp, what, check, arg, NULL, res, rg)) goto done;
    if (!(m = tp_sim_merge_ranks(rg, tp, &err)) ||
        pass_run_pipeline(m, "shape-infer", &ctx, &err)) {
        CHECK(0, "%s: merged graph: %s", what, err.msg);
        goto done;
    }
    {
        IrValue *iv = g->inputs[0];
        int64_t n = ir_shape_numel(&iv->shape);
        IrTensor *in = ir_tensor_new(iv->name, iv->dtype, &iv->shape);
        for (int64_t i = 0; i < n; i++) {
            int64_t tok = tp_sim_irand(0, tok_hi);
            if (iv->dtype == IR_I64) ((int64_t *)in->data)[i] = tok;
            else ((int32_t *)in->data)[i] = (int32_t)tok;
        }
        int ok = !hexec_run(g, &in, 1, &ro, &nro, &err) && !hexec_run(m, &in, 1, &mo, &nmo, &err);
        ir_tensor_free(in);
        if (!ok) {
            CHECK(0, "%s: run: %s", what, err.msg);
            goto done;
        }
    }
    worst = 0;
    int compared = 0;
    for (int i = 0; i < nro; i++)
        for (int r = 0; r < tp; r++) {
            char nm[1200];
            snprintf(nm, sizeof nm, "r%d/%s", r, ro[i]->name);
            IrTensor *t = tp_sim_find(mo, nmo, nm);
            CHECK(t && ro[i]->dtype == IR_F32, "%s: rank %d lacks output '%s'", what, r,
                  ro[i]->name);
            if (!t || ro[i]->dtype != IR_F32) continue;
            double e = tp_sim_rel(t->data, ro[i]->data, ir_shape_numel(&ro[i]->shape));
            if (e > worst) worst = e;
            compared++;
            CHECK(e <= 1e-5, "%s rank %d output '%s': %.3g", what, r, ro[i]->name, e);
        }
    CHECK(compared == tp * nro, "%s: compared %d outputs", what, compared);
    if (rank0) {
        *rank0 = res[0];
        rank0->graph = NULL, rank0->shards = NULL;
    }
done:
    sim_free(res, rg, tp, m, ro, nro, mo, nmo);
    return worst;
}

int tp_sim_lower(const PartStage *st, const PartStage *all, int nall, const int *dp, int layers,
                 LeProgram *p, char **cfg, MemPlan *mp, IrError *err) {
    static const LeSched sc[] = {{'F', 0}, {'B', 0}};
    LowerOpts lo = {.nstages = nall, .dp = dp, .rows = 2, .seq = 8, .accum = 1, .nslots = 1,
                    .sched = sc, .nsched = 2, .optimizer = "adamw", .lr = 1e-3,
                    .lr_schedule = "constant", .steps = 1, .layers = layers,
                    .all_stages = all, .nall_stages = nall};
    return lower_stage(st, &lo, p, cfg, mp, err);
}

int tp_sim_finish(double worst) {
    printf("worst relative error %.2e\n", worst);
    if (tp_sim_fails) {
        fprintf(stderr, "%d failures\n", tp_sim_fails);
        return 1;
    }
    printf("ok\n");
    return 0;
}
