/* partition_stage against the unpartitioned training graph.
 *
 * For each model (GPT-2 style with a tied head, Llama), import it, run the
 * forward pipeline, the layers pass, tie-weights and the loss, cut it into
 * stages and simulate the pipeline in this process with the host executor:
 * forward stage by stage (boundary activations split / joined by rows for
 * DP ranks), then backward in reverse with the boundary gradients; gradients
 * are summed over DP ranks and over the stages holding a shared parameter.
 * The oracle is the same model trained in one graph (loss, autodiff,
 * shape-infer) at the full microbatch: loss and every parameter gradient
 * must agree to 1e-5 relative (L2 per tensor), and one AdamW step of the
 * stages' update graphs (global grad norm fed in) must give the parameters
 * hetc train's update graph gives.
 * Plans: 3 stages at dp 1, and 2 stages at dp {2,1} (stage 0 imported at
 * half the batch; its layer ids are copied by node name, as the driver
 * maps the planner's layers onto each stage's import). */
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
#include "optimizer.h"
#include "memplan.h"
#include "partition.h"
#include "pass.h"

#define ROWS 4
#define TOL 1e-5

static int fails;
#define CHECK(c, ...)                                                                    \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                         \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            fails++;                                                                     \
        }                                                                                \
    } while (0)

static uint64_t rs = 0x9E3779B97F4A7C15ULL;
static int64_t irand(int64_t n) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (int64_t)(rs % (uint64_t)n);
}

static IrGraph *import_fwd(const char *path, int64_t batch, int64_t seq, IrError *err) {
    HetcImportOptions io;
    hetc_import_options_default(&io);
    io.batch = batch, io.seq = seq;
    IrGraph *g = hetc_import_onnx(path, &io, err);
    PassContext ctx;
    pass_context_default(&ctx);
    if (g && pass_run_pipeline(g, pass_default_pipeline(), &ctx, err)) {
        ir_graph_free(g);
        return NULL;
    }
    return g;
}

static int add_loss(IrGraph *g, IrError *err) {
    PassContext ctx;
    pass_context_default(&ctx);
    return pass_run_pipeline(g, "tie-weights", &ctx, err) || pass_loss(g, &ctx, err);
}

/* layer ids of `from` onto `to` by node name (-1 where absent) */
static void copy_layers(const IrGraph *from, IrGraph *to) {
    for (int i = 0; i < to->nnodes; i++) {
        to->nodes[i]->layer_id = -1;
        for (int j = 0; j < from->nnodes; j++)
            if (!strcmp(from->nodes[j]->name, to->nodes[i]->name) && to->nodes[i]->name[0]) {
                to->nodes[i]->layer_id = from->nodes[j]->layer_id;
                break;
            }
    }
}

static IrTensor *find_t(IrTensor **ts, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (ts[i]->name && !strcmp(ts[i]->name, name)) return ts[i];
    return NULL;
}

static double rel_l2(const float *a, const float *b, int64_t n) {
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d) / (sqrt(r) > 1e-30 ? sqrt(r) : 1e-30);
}

/* the oracle: one training graph at the full microbatch */
typedef struct Ref {
    IrGraph *g;
    double loss;
    int np;
    char **names;
    float **grad, **init, **upd;
    int64_t *n;
    IrValue **pv;
} Ref;

static int ref_index(const Ref *r, const char *name) {
    for (int i = 0; i < r->np; i++)
        if (!strcmp(r->names[i], name)) return i;
    return -1;
}

static IrTensor *tensor_of(const char *name, IrDType dt, const IrShape *s, const void *d) {
    IrTensor *t = ir_tensor_new(name, dt, s);
    memcpy(t->data, d, t->nbytes);
    return t;
}

static void free_outs(IrTensor **o, int n) {
    for (int i = 0; i < n; i++) ir_tensor_free(o[i]);
    free(o);
}

static int run_ref(Ref *r, const int64_t *ids, const int64_t *tgt, IrError *err) {
    PassContext ctx;
    pass_context_default(&ctx);
    IrGraph *g = r->g;
    if (pass_run_pipeline(g, "autodiff,shape-infer", &ctx, err)) return -1;
    IrValue *iv = g->inputs[0], *tv = ir_graph_find_value(g, "targets");
    IrTensor *in[2] = {tensor_of(iv->name, IR_I64, &iv->shape, ids),
                       tensor_of("targets", IR_I64, &tv->shape, tgt)};
    IrTensor **outs = NULL;
    int nout = 0;
    if (hexec_run(g, in, 2, &outs, &nout, err)) return -1;
    ir_tensor_free(in[0]), ir_tensor_free(in[1]);
    r->loss = *(float *)find_t(outs, nout, "loss")->data;
    r->names = calloc((size_t)g->nvalues, sizeof *r->names);
    r->grad = calloc((size_t)g->nvalues, sizeof *r->grad);
    r->init = calloc((size_t)g->nvalues, sizeof *r->init);
    r->upd = calloc((size_t)g->nvalues, sizeof *r->upd);
    r->n = calloc((size_t)g->nvalues, sizeof *r->n);
    r->pv = calloc((size_t)g->nvalues, sizeof *r->pv);
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *p = g->values[i];
        IrValue *gv = p->kind == IR_VK_PARAM ? ad_param_grad(g, p) : NULL;
        if (!gv) continue;
        int k = r->np++;
        r->names[k] = p->name;
        r->pv[k] = p;
        r->n[k] = ir_shape_numel(&p->shape);
        size_t nb = (size_t)r->n[k] * sizeof(float);
        r->grad[k] = malloc(nb), r->init[k] = malloc(nb);
        memcpy(r->grad[k], find_t(outs, nout, gv->name)->data, nb);
        memcpy(r->init[k], ir_value_data(p, err), nb);
    }
    free_outs(outs, nout);
    return 0;
}

/* hetc train's update graph (driver/train_state.c build_update) applied to
 * the gradients `grads`: one AdamW step from the initial parameters into
 * r->upd.  Fed the pipeline's summed gradients, so the comparison isolates
 * the update graphs (AdamW's first step normalises the gradient, so the
 * rounding noise of gradients that are zero in exact arithmetic, such as a
 * key bias under softmax, would otherwise decide the sign of a step). */
static int ref_update(Ref *r, float **grads, const OptimOpts *oo, IrError *err) {
    IrGraph *u = ir_graph_new("update");
    IrTensor **uin = calloc((size_t)r->np + 2, sizeof *uin), **outs = NULL;
    int nout = 0;
    for (int k = 0; k < r->np; k++) {
        IrValue *p = ir_value_new(u, r->names[k], IR_F32, &r->pv[k]->shape, IR_VK_PARAM);
        p->data = r->init[k], p->nbytes = (size_t)r->n[k] * sizeof(float);
        char name[600];
        snprintf(name, sizeof name, "grad/%s", p->name);
        ir_graph_add_input(u, ir_value_new(u, name, IR_F32, &p->shape, IR_VK_INPUT));
        uin[k] = tensor_of(name, IR_F32, &p->shape, grads[k]);
    }
    IrShape s0 = {0};
    float lr = 1e-3f;
    int64_t step = 1;
    uin[r->np] = tensor_of("lr", IR_F32, &s0, &lr);
    uin[r->np + 1] = tensor_of("step", IR_I64, &s0, &step);
    int rc = pass_optimizer_with(u, oo, err) || ir_verify(u, 1, err) ||
             hexec_run(u, uin, r->np + 2, &outs, &nout, err);
    for (int k = 0; k < r->np + 2; k++) ir_tensor_free(uin[k]);
    free(uin);
    for (int k = 0; k < r->np && !rc; k++) {
        char name[600];
        snprintf(name, sizeof name, "upd/%s", r->names[k]);
        if (!r->upd[k]) r->upd[k] = malloc((size_t)r->n[k] * sizeof(float));
        memcpy(r->upd[k], find_t(outs, nout, name)->data, (size_t)r->n[k] * sizeof(float));
    }
    if (!rc) free_outs(outs, nout);
    for (int i = 0; i < u->nvalues; i++)
        if (u->values[i]->kind == IR_VK_PARAM) u->values[i]->data = NULL;
    ir_graph_free(u);
    return rc ? -1 : 0;
}

static void ref_free(Ref *r) {
    for (int k = 0; k < r->np; k++) free(r->grad[k]), free(r->init[k]), free(r->upd[k]);
    free(r->names), free(r->grad), free(r->init), free(r->upd), free(r->n), free(r->pv);
    if (r->g) ir_graph_free(r->g);
}

/* rows [r0, r0 + nr) of a row-major buffer of rb-byte rows */
static IrTensor *slice_rows(const IrValue *v, const void *full, int64_t r0, int64_t rb) {
    IrTensor *t = ir_tensor_new(v->name, v->dtype, &v->shape);
    memcpy(t->data, (const char *)full + r0 * rb, t->nbytes);
    return t;
}

/* One microbatch through the stages; grads summed into gsum (by ref index). */
static int simulate(const char *what, PartStage *st, int ns, const Ref *ref, const int64_t *ids,
                    const int64_t *tgt, int64_t seq, const OptimOpts *oo, IrError *err) {
    int maxid = 0;
    for (int s = 0; s < ns; s++)
        for (int k = 0; k < st[s].nxfers; k++)
            if (st[s].xfers[k].id > maxid) maxid = st[s].xfers[k].id;
    char **act = calloc((size_t)maxid + 1, sizeof *act), **grd = calloc((size_t)maxid + 1, sizeof *grd);
    float **gsum = calloc((size_t)ref->np, sizeof *gsum);
    int *seen = calloc((size_t)ref->np, sizeof *seen);
    for (int k = 0; k < ref->np; k++) gsum[k] = calloc((size_t)ref->n[k], sizeof(float));
    double loss = 0;
    int rc = 0;
    /* pass 0: forward (gradient inputs zero); pass 1: reverse, real gradients */
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int si = 0; si < ns && !rc; si++) {
            int s = pass ? ns - 1 - si : si;
            PartStage *S = &st[s];
            IrGraph *g = S->train;
            int64_t lr = S->local_rows;
            for (int r = 0; r < S->dp && !rc; r++) {
                IrTensor **in = calloc((size_t)g->ninputs + 1, sizeof *in);
                for (int i = 0; i < g->ninputs; i++) {
                    IrValue *v = g->inputs[i];
                    const void *full = NULL;
                    int64_t rb = 0;
                    if (S->data_input && !strcmp(v->name, S->data_input))
                        full = ids, rb = seq * 8;
                    else if (!strcmp(v->name, "targets"))
                        full = tgt, rb = seq * 8;
                    for (int k = 0; k < S->nxfers && !full; k++) {
                        PartXfer *x = &S->xfers[k];
                        if (x->send || strcmp(x->value, v->name)) continue;
                        char **tab = x->kind == PX_ACT ? act : grd;
                        if (!tab[x->id] && pass == 0 && x->kind == PX_GRAD)
                            tab[x->id] = calloc((size_t)(x->rows * x->row_bytes), 1);
                        full = tab[x->id], rb = x->row_bytes;
                        if (x->rows != ROWS) fprintf(stderr, "xfer rows %lld\n", (long long)x->rows);
                    }
                    if (!full) {
                        rc = ir_errorf(err, "%s stage %d: no data for input '%s'", what, s, v->name);
                        break;
                    }
                    in[i] = slice_rows(v, full, r * lr, rb);
                }
                IrTensor **outs = NULL;
                int nout = 0;
                if (!rc && hexec_run(g, in, g->ninputs, &outs, &nout, err))
                    rc = ir_error_prefix(err, "%s stage %d rank %d", what, s, r);
                for (int i = 0; i < g->ninputs; i++) ir_tensor_free(in[i]);
                free(in);
                if (rc) break;
                for (int k = 0; k < S->nxfers; k++) {
                    PartXfer *x = &S->xfers[k];
                    if (!x->send || (pass == 0) != (x->kind == PX_ACT)) continue;
                    char **tab = x->kind == PX_ACT ? act : grd;
                    if (!tab[x->id]) tab[x->id] = calloc((size_t)(x->rows * x->row_bytes), 1);
                    IrTensor *t = find_t(outs, nout, x->value);
                    CHECK(t && (int64_t)t->nbytes == lr * x->row_bytes, "%s stage %d: output '%s'",
                          what, s, x->value);
                    if (t) memcpy(tab[x->id] + r * lr * x->row_bytes, t->data, t->nbytes);
                }
                if (pass == 1) {
                    for (int i = 0; i < nout; i++) {
                        const char *nm = outs[i]->name;
                        if (!strcmp(nm, "loss")) loss += *(float *)outs[i]->data;
                        if (strncmp(nm, "grad/", 5)) continue;
                        int k = ref_index(ref, nm + 5);
                        CHECK(k >= 0, "%s stage %d: '%s' has no reference gradient", what, s, nm);
                        if (k < 0) continue;
                        seen[k]++;
                        const float *d = outs[i]->data;
                        for (int64_t e = 0; e < ref->n[k]; e++) gsum[k][e] += d[e];
                    }
                }
                free_outs(outs, nout);
            }
        }
    if (!rc) {
        double le = fabs(loss - ref->loss) / fabs(ref->loss);
        printf("%s: loss %.7f (reference %.7f, rel %.2e)\n", what, loss, ref->loss, le);
        CHECK(le <= TOL, "%s: loss %.9g vs %.9g", what, loss, ref->loss);
        double worst = 0;
        const char *wn = "";
        double sq = 0;
        for (int k = 0; k < ref->np; k++) {
            CHECK(seen[k] > 0, "%s: no stage gives a gradient of '%s'", what, ref->names[k]);
            double e = rel_l2(gsum[k], ref->grad[k], ref->n[k]);
            if (e > worst) worst = e, wn = ref->names[k];
            CHECK(e <= TOL, "%s: gradient of '%s': relative error %.3e", what, ref->names[k], e);
            for (int64_t i = 0; i < ref->n[k]; i++) sq += (double)gsum[k][i] * gsum[k][i];
        }
        printf("%s: %d parameter gradients, worst relative error %.2e ('%s')\n", what, ref->np,
               worst, wn);
        /* one optimizer step per stage, the global norm fed in */
        if (ref_update((Ref *)ref, gsum, oo, err)) rc = -1;
        float norm = (float)sqrt(sq), lrv = 1e-3f;
        int64_t step = 1;
        double uworst = 0;
        for (int s = 0; s < ns && !rc; s++) {
            IrGraph *u = st[s].update;
            IrTensor **in = calloc((size_t)u->ninputs + 1, sizeof *in);
            IrShape s0 = {0};
            for (int i = 0; i < u->ninputs; i++) {
                IrValue *v = u->inputs[i];
                if (!strcmp(v->name, "lr")) in[i] = tensor_of("lr", IR_F32, &s0, &lrv);
                else if (!strcmp(v->name, "step")) in[i] = tensor_of("step", IR_I64, &s0, &step);
                else if (!strcmp(v->name, "grad_norm"))
                    in[i] = tensor_of("grad_norm", IR_F32, &s0, &norm);
                else {
                    int k = ref_index(ref, v->name + 5);
                    in[i] = tensor_of(v->name, IR_F32, &v->shape, gsum[k]);
                }
            }
            for (int i = 0; i < u->nvalues; i++) { /* the runtime's storage: borrowed */
                IrValue *p = u->values[i];
                if (p->kind != IR_VK_PARAM) continue;
                int k = ref_index(ref, p->name);
                p->data = ref->init[k], p->nbytes = (size_t)ref->n[k] * sizeof(float);
            }
            IrTensor **outs = NULL;
            int nout = 0;
            if (hexec_run(u, in, u->ninputs, &outs, &nout, err))
                rc = ir_error_prefix(err, "%s stage %d update", what, s);
            for (int i = 0; i < u->ninputs; i++) ir_tensor_free(in[i]);
            free(in);
            for (int i = 0; i < u->nvalues; i++)
                if (u->values[i]->kind == IR_VK_PARAM) u->values[i]->data = NULL;
            if (rc) break;
            for (int i = 0; i < nout; i++) {
                const char *nm = outs[i]->name;
                if (strncmp(nm, "upd/", 4) || !strncmp(nm, "upd/m/", 6) ||
                    !strncmp(nm, "upd/v/", 6))
                    continue;
                int k = ref_index(ref, nm + 4);
                double e = rel_l2(outs[i]->data, ref->upd[k], ref->n[k]);
                if (e > uworst) uworst = e;
                CHECK(e <= TOL, "%s: updated '%s': relative error %.3e", what, nm + 4, e);
            }
            free_outs(outs, nout);
        }
        printf("%s: AdamW step, worst relative error of updated parameters %.2e\n", what, uworst);
    }
    for (int i = 0; i <= maxid; i++) free(act[i]), free(grd[i]);
    for (int k = 0; k < ref->np; k++) free(gsum[k]);
    free(act), free(grd), free(gsum), free(seen);
    return rc;
}

/* structural checks of a plan: ids agree on both sides, params */
static void check_plan(const char *what, PartStage *st, int ns) {
    for (int s = 0; s < ns; s++) {
        int phase = 0; /* xfers in order: fwd recv, fwd send, bwd recv, bwd send */
        for (int k = 0; k < st[s].nxfers; k++) {
            PartXfer *x = &st[s].xfers[k];
            int ph = x->kind == PX_ACT ? (x->send ? 1 : 0) : (x->send ? 3 : 2);
            CHECK(ph >= phase, "%s stage %d: xfer %d out of order", what, s, k);
            phase = ph;
            int match = 0;
            PartStage *p = &st[x->peer];
            for (int j = 0; j < p->nxfers; j++) {
                PartXfer *y = &p->xfers[j];
                if (y->id == x->id && y->peer == s && y->send != x->send && y->kind == x->kind &&
                    y->rows == x->rows && y->row_bytes == x->row_bytes)
                    match++;
            }
            CHECK(match == 1, "%s stage %d: xfer '%s' id %d has %d peers", what, s, x->value,
                  x->id, match);
        }
        for (int k = 0; k < st[s].nparams; k++) {
            PartParam *pp = &st[s].params[k];
            int held = 0;
            for (int t = 0; t < ns; t++)
                for (int j = 0; j < st[t].nparams; j++)
                    held += !strcmp(st[t].params[j].name, pp->name);
            CHECK(pp->shared == (held > 1), "%s stage %d: '%s' shared flag", what, s, pp->name);
            CHECK(pp->layer >= 1 && pp->layer <= st[ns - 1].last_layer, "%s: '%s' layer %d", what,
                  pp->name, pp->layer);
        }
    }
}

static int run_model(const char *path, int64_t seq) {
    IrError err = {{0}};
    printf("== %s\n", path);
    IrGraph *full = import_fwd(path, ROWS, seq, &err), *half = NULL;
    ModuleOptions mo;
    LayerOptions lo;
    module_options_default(&mo);
    layer_options_default(&lo);
    PlanLayer *layers = NULL;
    LayerSummary sum;
    if (!full || modules_detect(full, &mo, NULL, &err) ||
        layers_build(full, &lo, &layers, &sum, &err) || add_loss(full, &err) ||
        !(half = import_fwd(path, ROWS / 2, seq, &err)) || add_loss(half, &err)) {
        fprintf(stderr, "FAIL %s: %s\n", path, err.msg);
        return 1;
    }
    free(layers);
    copy_layers(full, half);
    int L = sum.L;
    printf("%d layers\n", L);
    int64_t vocab = 0;
    for (int i = 0; i < full->noutputs; i++)
        if (!strcmp(full->outputs[i]->name, "logits"))
            vocab = full->outputs[i]->shape.dims[full->outputs[i]->shape.rank - 1];
    int64_t *ids = malloc(ROWS * seq * sizeof *ids), *tgt = malloc(ROWS * seq * sizeof *tgt);
    for (int64_t i = 0; i < ROWS * seq; i++) ids[i] = irand(vocab), tgt[i] = irand(vocab);
    OptimOpts oo;
    optim_opts_default(&oo);

    PartStage a[3], b[2];
    int fa[3] = {1, L / 3 + 1, 2 * L / 3 + 1}, la[3] = {L / 3, 2 * L / 3, L}, da[3] = {1, 1, 1};
    int fb[2] = {1, L / 2 + 1}, lb[2] = {L / 2, L}, db[2] = {2, 1};
    PartSpec sa = {.nstages = 3, .first_layer = fa, .last_layer = la, .dp = da, .rows = ROWS,
                   .optim = oo};
    PartSpec sb = {.nstages = 2, .first_layer = fb, .last_layer = lb, .dp = db, .rows = ROWS,
                   .optim = oo};
    int na = 0, nb = 0, rc = 0;
    for (; na < 3 && !rc; na++)
        if (partition_stage(full, &sa, na, &a[na], &err)) rc = 1, na--;
    for (; nb < 2 && !rc; nb++)
        if (partition_stage(nb == 0 ? half : full, &sb, nb, &b[nb], &err)) rc = 1, nb--;
    if (rc) fprintf(stderr, "FAIL %s: partition: %s\n", path, err.msg);
    for (int s = 0; s < na && !rc; s++) {
        int nin = 0, ngrad = 0;
        for (int k = 0; k < a[s].nxfers; k++) nin += !a[s].xfers[k].send;
        for (int k = 0; k < a[s].nparams; k++) ngrad += a[s].params[k].shared;
        printf("3 stages: stage %d layers [%d,%d]: %d nodes, %d xfers (%d recv), %d params "
               "(%d shared), update %d nodes\n",
               s, a[s].first_layer, a[s].last_layer, a[s].train->nnodes, a[s].nxfers, nin,
               a[s].nparams, ngrad, a[s].update->nnodes);
        for (int k = 0; k < a[s].nxfers; k++)
            printf("  %s %s '%s' %s stage %d (id %d, %lld x %lld B)\n",
                   a[s].xfers[k].send ? "send" : "recv",
                   a[s].xfers[k].kind == PX_ACT ? "act" : "grad", a[s].xfers[k].value,
                   a[s].xfers[k].send ? "to" : "from", a[s].xfers[k].peer, a[s].xfers[k].id,
                   (long long)a[s].xfers[k].rows, (long long)a[s].xfers[k].row_bytes);
    }
    /* the same plans with recompute (partition_recompute.c), mixed modes
     * along the pipe: cut before the reference adds its backward to `full` */
    static const PartRecompute modes[2][3] = {{PART_RC_FULL, PART_RC_SELECTIVE, PART_RC_FULL},
                                              {PART_RC_SELECTIVE, PART_RC_FULL, PART_RC_SELECTIVE}};
    PartStage rca[2][3], rcb[2][2];
    int nra[2] = {0}, nrb[2] = {0};
    for (int v = 0; v < 2 && !rc; v++) {
        PartSpec xa = sa, xb = sb;
        xa.recompute = modes[v];
        xb.recompute = modes[v];
        for (; nra[v] < 3 && !rc; nra[v]++)
            if (partition_stage(full, &xa, nra[v], &rca[v][nra[v]], &err)) rc = 1, nra[v]--;
        for (; nrb[v] < 2 && !rc; nrb[v]++)
            if (partition_stage(nrb[v] == 0 ? half : full, &xb, nrb[v], &rcb[v][nrb[v]], &err))
                rc = 1, nrb[v]--;
        if (rc) fprintf(stderr, "FAIL %s: partition with recompute: %s\n", path, err.msg);
    }
    Ref ref = {.g = full};
    full = NULL;
    if (!rc && run_ref(&ref, ids, tgt, &err)) {
        fprintf(stderr, "FAIL %s: reference: %s\n", path, err.msg);
        rc = 1;
    }
    if (!rc) {
        check_plan("3 stages", a, 3);
        check_plan("2 stages dp {2,1}", b, 2);
        if (simulate("3 stages", a, 3, &ref, ids, tgt, seq, &oo, &err) ||
            simulate("2 stages dp {2,1}", b, 2, &ref, ids, tgt, seq, &oo, &err)) {
            fprintf(stderr, "FAIL %s: %s\n", path, err.msg);
            rc = 1;
        }
    }
    /* recompute (partition_recompute.c): the same plans with every stage
     * recomputing (mixed modes along the pipe); gradients must not change,
     * and the slots (memplan) must shrink */
    for (int v = 0; v < 2 && !rc; v++) {
        PartStage *ra = rca[v], *rb = rcb[v];
        int ma = nra[v];
        char what[2][64];
        snprintf(what[0], sizeof what[0], "3 stages recompute %s/%s/%s",
                 part_recompute_name(modes[v][0]), part_recompute_name(modes[v][1]),
                 part_recompute_name(modes[v][2]));
        snprintf(what[1], sizeof what[1], "2 stages dp {2,1} recompute %s/%s",
                 part_recompute_name(modes[v][0]), part_recompute_name(modes[v][1]));
        for (int s = 0; s < ma && !rc; s++) {
            MemPlan m0, m1;
            if (memplan_build(&a[s], 2, &m0, &err) || memplan_build(&ra[s], 2, &m1, &err)) {
                CHECK(0, "%s stage %d memplan: %s", what[0], s, err.msg);
                continue;
            }
            printf("%s: stage %d: %d nodes recomputed, slot %lld -> %lld bytes, scratch %lld -> "
                   "%lld\n", what[0], s, ra[s].nrecomputed, (long long)m0.slot_bytes,
                   (long long)m1.slot_bytes, (long long)m0.scratch_bytes,
                   (long long)m1.scratch_bytes);
            /* a stage without an attention core recomputes nothing selectively */
            CHECK(ra[s].nrecomputed > 0 ? m1.slot_bytes < m0.slot_bytes
                                        : m1.slot_bytes == m0.slot_bytes,
                  "%s stage %d: %d recomputed, slot %lld -> %lld", what[0], s,
                  ra[s].nrecomputed, (long long)m0.slot_bytes, (long long)m1.slot_bytes);
            CHECK(ra[s].nrecomputed > 0 || modes[v][s] == PART_RC_SELECTIVE,
                  "%s stage %d: full recompute recomputed nothing", what[0], s);
            memplan_free(&m0);
            memplan_free(&m1);
        }
        if (!rc && (simulate(what[0], ra, 3, &ref, ids, tgt, seq, &oo, &err) ||
                    simulate(what[1], rb, 2, &ref, ids, tgt, seq, &oo, &err))) {
            fprintf(stderr, "FAIL %s: %s\n", path, err.msg);
            rc = 1;
        }
    }
    for (int v = 0; v < 2; v++) {
        for (int s = 0; s < nra[v]; s++) partition_stage_free(&rca[v][s]);
        for (int s = 0; s < nrb[v]; s++) partition_stage_free(&rcb[v][s]);
    }
    for (int s = 0; s < na; s++) partition_stage_free(&a[s]);
    for (int s = 0; s < nb; s++) partition_stage_free(&b[s]);
    ref_free(&ref);
    if (half) ir_graph_free(half);
    free(ids), free(tgt);
    return rc;
}

/* Errors name what is at fault: a stage range that misses layers. */
static void check_errors(const char *path) {
    IrError err = {{0}};
    IrGraph *g = import_fwd(path, 2, 8, &err);
    ModuleOptions mo;
    LayerOptions lo;
    module_options_default(&mo);
    layer_options_default(&lo);
    PlanLayer *layers = NULL;
    LayerSummary sum;
    if (!g || modules_detect(g, &mo, NULL, &err) || layers_build(g, &lo, &layers, &sum, &err) ||
        add_loss(g, &err)) {
        CHECK(0, "%s", err.msg);
        if (g) ir_graph_free(g);
        return;
    }
    free(layers);
    int f[2] = {1, 2}, l[2] = {1, sum.L - 1}, d[2] = {1, 1};
    PartSpec sp = {.nstages = 2, .first_layer = f, .last_layer = l, .dp = d, .rows = 2};
    optim_opts_default(&sp.optim);
    PartStage st;
    CHECK(partition_stage(g, &sp, 1, &st, &err) && strstr(err.msg, "outside the plan"),
          "missing layer: '%s'", err.msg);
    l[1] = sum.L, sp.rows = 4; /* the graph is at batch 2: rows / dp must match */
    CHECK(partition_stage(g, &sp, 0, &st, &err) && strstr(err.msg, "input_ids"),
          "wrong batch: '%s'", err.msg);
    ir_graph_free(g);
}

int main(int argc, char **argv) {
    const char *src = argc > 1 ? argv[1] : ".";
    char p1[4096], p2[4096];
    snprintf(p1, sizeof p1, "%s/examples/gpt_tiny.onnx", src);
    snprintf(p2, sizeof p2, "%s/tests/models/llama_op17.onnx", src);
    int rc = run_model(p1, 16);
    rc |= run_model(p2, 16);
    check_errors(p1);
    if (rc || fails) {
        fprintf(stderr, "%d failure(s)\n", fails + rc);
        return 1;
    }
    printf("ok\n");
    return 0;
}
