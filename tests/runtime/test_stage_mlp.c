/* A hand-compiled two-stage training program for hetrt_stage_main, without
 * the compiler: the graphs come from the IR API plus autodiff/optimizer,
 * and a tiny "code generator" here assigns arena/slot offsets and builds
 * the stage functions as tables of hetrt_* calls, the way llvm_emit does
 * with constants.  Only the HetcStageDesc construction is hand-written;
 * the compiler's generated objects replace it later.
 *
 * Model (tied embedding, like GPT-2's wte/lm_head):
 *   stage 0: h = Embedding(wte, ids); a = h @ w1                    -> send a
 *   stage 1: logits = (Relu(a) @ w2) @ wte^T; loss = CE(logits) * local/rows
 * wte is held by both stages (a `shared` parameter).
 *
 * Modes:
 *   gen DIR [bad]           DIR/data.bin (llm.c token file) and the
 *                           initial-parameter checkpoint DIR/init
 *   ref DATA STEPS          single-process reference: the unpartitioned
 *                           model through hexec_run (an independent
 *                           executor path), `hetc train`'s log lines
 *   stage S D0 D1 [hetrt options...]   stage S of the layout {D0, D1}
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"
#include "data_loader.h"
#include "hostexec.h"
#include "ir.h"
#include "lr_schedule.h"
#include "optimizer.h"
#include "pass.h"
#include "rt.h"
#include "stage_abi.h"

enum { V = 16, D = 64, T = 8, ROWS = 4, K = 2, NSTEPS = 6, LAYERS = 3, NTOK = ROWS * T * 20 + 1 };
static const double LR = 0.01, CLIP = 0.5;
static const int WARMUP = 2;

static void die(const char *what, const IrError *err) {
    fprintf(stderr, "test_stage_mlp: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

/* ------------------------------------------------------------ model */
typedef struct ParamInfo {
    const char *name;
    int layer;
    int rows, cols;
} ParamInfo;
static const ParamInfo PARAMS[3] = {{"wte", 1, V, D}, {"w1", 2, D, D}, {"w2", 3, D, D}};

static float *param_init(int p) {
    int n = PARAMS[p].rows * PARAMS[p].cols;
    float *x = malloc((size_t)n * sizeof *x);
    uint32_t s = 12345u + 977u * (uint32_t)p;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.8f;
    }
    return x;
}

static IrValue *param_value(IrGraph *g, int p) {
    IrShape s = ir_shape_make(2, (int64_t[]){PARAMS[p].rows, PARAMS[p].cols});
    IrValue *v = ir_value_new(g, PARAMS[p].name, IR_F32, &s, IR_VK_PARAM);
    ir_value_set_data(v, param_init(p), (size_t)ir_shape_numel(&s) * sizeof(float));
    return v;
}

static IrValue *node1(IrGraph *g, IrOp op, const char *name, int nin, IrValue **in,
                      IrDType dt, IrShape s) {
    IrValue *o = ir_value_new(g, name, dt, &s, IR_VK_ACT);
    ir_node_new(g, op, name, nin, in, 1, &o);
    return o;
}

enum { PART_FULL, PART_S0, PART_S1 };

/* The model (or one stage of it) at `b` rows; returns the graph after
 * shape-infer and autodiff. */
static IrGraph *build(int part, int64_t b) {
    IrGraph *g = ir_graph_new(part == PART_FULL ? "mlp" : part == PART_S0 ? "stage0" : "stage1");
    IrShape sbt = ir_shape_make(2, (int64_t[]){b, T});
    IrShape sbtd = ir_shape_make(3, (int64_t[]){b, T, D});
    IrShape s0 = {0};
    IrValue *a = NULL;
    if (part != PART_S1) {
        IrValue *ids = ir_value_new(g, "ids", IR_I64, &sbt, IR_VK_INPUT);
        ir_graph_add_input(g, ids);
        IrValue *wte = param_value(g, 0), *w1 = param_value(g, 1);
        IrValue *h = node1(g, IR_OP_EMBEDDING, "h", 2, (IrValue *[]){wte, ids}, IR_F32, sbtd);
        a = node1(g, IR_OP_MATMUL, "a", 2, (IrValue *[]){h, w1}, IR_F32, sbtd);
    } else {
        /* the received activation: a parameter while autodiff runs, so that
         * its gradient (what stage 0 needs back) is computed */
        a = ir_value_new(g, "a", IR_F32, &sbtd, IR_VK_PARAM);
        ir_value_set_data(a, calloc((size_t)ir_shape_numel(&sbtd), sizeof(float)),
                          (size_t)ir_shape_numel(&sbtd) * sizeof(float));
    }
    if (part == PART_S0) {
        /* backward seed: loss = sum(a * bgrad/a), so d loss / d a = bgrad/a */
        IrValue *bg = ir_value_new(g, "bgrad/a", IR_F32, &sbtd, IR_VK_INPUT);
        ir_graph_add_input(g, bg);
        IrValue *m = node1(g, IR_OP_MUL, "seed", 2, (IrValue *[]){a, bg}, IR_F32, sbtd);
        IrValue *l = node1(g, IR_OP_REDUCE_SUM, "loss", 1, &m, IR_F32, s0);
        ir_node_set_int(l->producer, "keepdims", 0);
        ir_graph_add_output(g, a);
        ir_graph_add_output(g, l);
    } else {
        IrValue *wte = part == PART_S1 ? param_value(g, 0) : ir_graph_find_value(g, "wte");
        IrValue *w2 = param_value(g, 2);
        IrValue *r = node1(g, IR_OP_RELU, "r", 1, &a, IR_F32, sbtd);
        IrValue *z = node1(g, IR_OP_MATMUL, "z", 2, (IrValue *[]){r, w2}, IR_F32, sbtd);
        IrValue *et = node1(g, IR_OP_TRANSPOSE, "wte_t", 1, &wte, IR_F32,
                            ir_shape_make(2, (int64_t[]){D, V}));
        ir_node_set_ints(et->producer, "perm", 2, (int64_t[]){1, 0});
        IrValue *lg = node1(g, IR_OP_MATMUL, "logits", 2, (IrValue *[]){z, et}, IR_F32,
                            ir_shape_make(3, (int64_t[]){b, T, V}));
        IrValue *tg = ir_value_new(g, "targets", IR_I64, &sbt, IR_VK_INPUT);
        ir_graph_add_input(g, tg);
        IrValue *ce = node1(g, IR_OP_CROSS_ENTROPY, part == PART_FULL ? "loss" : "ce", 2,
                            (IrValue *[]){lg, tg}, IR_F32, s0);
        ir_node_set_int(ce->producer, "use_ignore", 0);
        ir_node_set_int(ce->producer, "ignore_index", -100);
        IrValue *loss = ce;
        if (part == PART_S1) { /* scaled so the DP group's sum is the batch mean */
            IrValue *sc = ir_const_scalar_f32(g, "loss_scale", (float)b / (float)ROWS);
            loss = node1(g, IR_OP_MUL, "loss", 2, (IrValue *[]){ce, sc}, IR_F32, s0);
        }
        ir_graph_add_output(g, loss);
    }
    PassContext ctx;
    pass_context_default(&ctx);
    IrError err = {{0}};
    if (pass_run_pipeline(g, "shape-infer,autodiff,shape-infer", &ctx, &err))
        die("building the graph", &err);
    if (part == PART_S1) { /* back to a received input */
        a->kind = IR_VK_INPUT;
        ir_value_set_data(a, NULL, 0);
        ir_graph_add_input(g, a);
    }
    if (ir_verify(g, 1, &err)) die("verify", &err);
    return g;
}

/* The update graph of params[0..n): hetc train's, except for the global
 * norm, which becomes the input "grad_norm" (for stages) when global_norm. */
static IrGraph *build_update(const int *params, int n, int global_norm, float **data) {
    IrGraph *u = ir_graph_new("update");
    for (int i = 0; i < n; i++) {
        int p = params[i];
        IrShape s = ir_shape_make(2, (int64_t[]){PARAMS[p].rows, PARAMS[p].cols});
        IrValue *v = ir_value_new(u, PARAMS[p].name, IR_F32, &s, IR_VK_PARAM);
        if (data) { /* borrowed: the reference's own buffers */
            v->data = data[p];
            v->nbytes = (size_t)ir_shape_numel(&s) * sizeof(float);
        } else {
            ir_value_set_data(v, param_init(p), (size_t)ir_shape_numel(&s) * sizeof(float));
        }
        char gn[64];
        snprintf(gn, sizeof gn, "grad/%s", PARAMS[p].name);
        ir_graph_add_input(u, ir_value_new(u, gn, IR_F32, &s, IR_VK_INPUT));
    }
    OptimOpts o;
    optim_opts_default(&o);
    o.clip = CLIP;
    IrError err = {{0}};
    if (pass_optimizer_with(u, &o, &err)) die("optimizer", &err);
    if (global_norm) {
        IrValue *local = ir_graph_find_value(u, "grad_norm");
        IrShape s0 = {0};
        IrValue *gin = ir_value_new(u, "global_grad_norm", IR_F32, &s0, IR_VK_INPUT);
        ir_graph_add_input(u, gin);
        ir_replace_uses(u, local, gin);
        int w = 0;
        for (int i = 0; i < u->noutputs; i++)
            if (u->outputs[i] != gin) u->outputs[w++] = u->outputs[i];
        u->noutputs = w;
        PassContext ctx;
        pass_context_default(&ctx);
        if (pass_dce(u, &ctx, &err)) die("dce", &err);
    }
    if (ir_verify(u, 1, &err)) die("verify update", &err);
    return u;
}

/* ------------------------------------------------------------ gen */
/* bad: the initial checkpoint (DIR/init_bad) stores w1 with a wrong shape
 * ([D/2, 2D] for [D, D]). */
static int gen(const char *dir, int bad) {
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/data.bin", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return perror(path), 1;
    /* llm.c layout: the loader requires the header's magic by default */
    int32_t hdr[RT_LLMC_HEADER_INTS] = {RT_LLMC_MAGIC, RT_LLMC_VERSION, NTOK};
    fwrite(hdr, sizeof hdr, 1, f);
    uint32_t s = 99u;
    uint16_t tok = 3;
    for (int i = 0; i < NTOK; i++) { /* mostly a fixed successor, some noise */
        fwrite(&tok, 2, 1, f);
        s = s * 1664525u + 1013904223u;
        tok = (s >> 24) < 200 ? (uint16_t)((tok * 5 + 3) % V) : (uint16_t)((s >> 12) % V);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/%s", dir, bad ? "init_bad" : "init");
    RtCkptTensor t[3];
    float *x[3];
    for (int p = 0; p < 3; p++) {
        x[p] = param_init(p);
        t[p] = (RtCkptTensor){.layer = PARAMS[p].layer, .name = PARAMS[p].name, .dtype = RT_F32,
                              .ndim = 2, .shape = {PARAMS[p].rows, PARAMS[p].cols},
                              .data = x[p]};
    }
    if (bad) { /* the same element count, another shape: only the config's `shape` tells */
        t[1].shape[0] = D / 2;
        t[1].shape[1] = 2 * D;
    }
    for (int L = 0; L <= LAYERS; L++)
        if (rt_ckpt_write_layer(path, 0, L, t, 3, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    if (rt_ckpt_write_manifest(path, 0, LAYERS + 1, err, sizeof err))
        return fprintf(stderr, "%s\n", err), 1;
    for (int p = 0; p < 3; p++) free(x[p]);
    return 0;
}

/* ------------------------------------------------------------ reference */
static int ref(const char *data, int64_t steps) {
    IrGraph *g = build(PART_FULL, ROWS);
    float *w[3], *acc[3];
    int idx[3] = {0, 1, 2}, gout[3];
    for (int p = 0; p < 3; p++) {
        IrValue *v = ir_graph_find_value(g, PARAMS[p].name);
        int n = PARAMS[p].rows * PARAMS[p].cols;
        w[p] = (float *)v->data; /* the executor reads the trained weights in place */
        acc[p] = calloc((size_t)n, sizeof(float));
        char gn[64];
        snprintf(gn, sizeof gn, "grad/%s", PARAMS[p].name);
        gout[p] = -1;
        for (int j = 0; j < g->noutputs; j++)
            if (!strcmp(g->outputs[j]->name, gn)) gout[p] = j;
        if (gout[p] < 0) die("reference: no gradient output", NULL);
    }
    int lout = -1;
    for (int j = 0; j < g->noutputs; j++)
        if (!strcmp(g->outputs[j]->name, "loss")) lout = j;
    IrGraph *u = build_update(idx, 3, 0, w);
    RtDataLoader dl;
    char derr[RT_ERRLEN];
    if (rt_data_open(&dl, data, ROWS, T, 0, 1, derr)) return fprintf(stderr, "%s\n", derr), 1;
    IrShape sbt = ir_shape_make(2, (int64_t[]){ROWS, T}), s0 = {0};
    IrTensor *in[2] = {ir_tensor_new("ids", IR_I64, &sbt), ir_tensor_new("targets", IR_I64, &sbt)};
    RtLrSchedule sched = {.kind = RT_LR_COSINE, .max_lr = LR, .warmup_steps = WARMUP,
                          .decay_steps = NSTEPS, .min_lr_ratio = 0.1};
    IrError err = {{0}};
    for (int64_t k = 0; k < steps; k++) {
        double loss = 0;
        for (int p = 0; p < 3; p++)
            memset(acc[p], 0, (size_t)PARAMS[p].rows * PARAMS[p].cols * sizeof(float));
        for (int m = 0; m < K; m++) {
            if (rt_data_batch(&dl, (k * K + m) % dl.nbatches, in[0]->data, in[1]->data, derr))
                return fprintf(stderr, "%s\n", derr), 1;
            IrTensor **outs;
            int nout;
            if (hexec_run(g, in, 2, &outs, &nout, &err)) die("reference run", &err);
            loss += *(float *)outs[lout]->data / (double)K;
            for (int p = 0; p < 3; p++) {
                const float *gp = outs[gout[p]]->data;
                for (int i = 0; i < PARAMS[p].rows * PARAMS[p].cols; i++)
                    acc[p][i] += gp[i] * (1.0f / (float)K);
            }
            for (int j = 0; j < nout; j++) ir_tensor_free(outs[j]);
            free(outs);
        }
        float lr = (float)rt_lr_at(&sched, k);
        int64_t step = k + 1;
        IrTensor ts[5];
        IrTensor *uin[5];
        for (int p = 0; p < 3; p++) {
            char *gn = u->inputs[p]->name;
            ts[p] = (IrTensor){.name = gn, .dtype = IR_F32, .shape = u->inputs[p]->shape,
                               .data = acc[p], .nbytes = (size_t)PARAMS[p].rows * PARAMS[p].cols * 4};
        }
        ts[3] = (IrTensor){.name = "lr", .dtype = IR_F32, .shape = s0, .data = &lr, .nbytes = 4};
        ts[4] = (IrTensor){.name = "step", .dtype = IR_I64, .shape = s0, .data = &step, .nbytes = 8};
        for (int i = 0; i < 5; i++) uin[i] = &ts[i];
        IrTensor **outs;
        int nout;
        if (hexec_run(u, uin, 5, &outs, &nout, &err)) die("reference update", &err);
        double norm = 0;
        for (int j = 0; j < nout; j++) {
            const char *on = outs[j]->name;
            if (!strcmp(on, "grad_norm")) norm = *(float *)outs[j]->data;
            if (strncmp(on, "upd/", 4)) continue;
            /* state carry by name: upd/P -> P, upd/m/P -> opt/m/P */
            char sn[128];
            if (strchr(on + 4, '/')) snprintf(sn, sizeof sn, "opt/%s", on + 4);
            else snprintf(sn, sizeof sn, "%s", on + 4);
            IrValue *dst = ir_graph_find_value(u, sn);
            if (!dst || !dst->data) die("reference: no state for an update output", NULL);
            memcpy(dst->data, outs[j]->data, outs[j]->nbytes);
        }
        for (int j = 0; j < nout; j++) ir_tensor_free(outs[j]);
        free(outs);
        printf("step %5lld/%lld | loss %.9g | grad norm %.6g | lr %.4e | 0 tok/s | ETA 0.0s\n",
               (long long)k + 1, (long long)steps, loss, norm, (double)lr);
    }
    ir_tensor_free(in[0]);
    ir_tensor_free(in[1]);
    rt_data_close(&dl);
    for (int p = 0; p < 3; p++) free(acc[p]);
    ir_graph_free(u);
    ir_graph_free(g);
    return 0;
}

/* ------------------------------------------------------------ the "compiler" */
enum { C_NODE, C_TOKENS, C_RECV, C_SEND, C_ACCUM, C_LOSS, C_COPY, C_ZERO };
typedef struct Call {
    int kind;
    int graph, node;
    int64_t *bufs;
    int a;              /* xfer / which */
    int64_t x, y, n;    /* offsets (slot or arena), count / bytes */
} Call;
typedef struct Fn {
    Call *calls;
    int n;
    const char **names;
} Fn;

/* What generated code would hold as constants (one stage per process). */
static struct Prog {
    Fn fn[4]; /* forward, backward, update, (unused) */
    int64_t arena_bytes, slot_base, slot_bytes;
} prog;

static int32_t run_calls(const Fn *f, void *arena, void *slot) {
    unsigned char *A = arena, *S = slot;
    for (int i = 0; i < f->n; i++) {
        const Call *c = &f->calls[i];
        int32_t st = 0;
        switch (c->kind) {
        case C_NODE: st = hetrt_node(c->graph, c->node, arena, slot, c->bufs); break;
        case C_TOKENS: st = hetrt_tokens(c->a, S + c->x, RT_I64); break;
        case C_RECV: st = hetrt_recv(c->a, S + c->x); break;
        case C_SEND: st = hetrt_send(c->a, S + c->x); break;
        case C_ACCUM: st = hetrt_accum(A + c->x, S + c->y, c->n); break;
        case C_LOSS: st = hetrt_loss(S + c->x); break;
        case C_COPY: st = hetrt_copy(A + c->x, A + c->y, c->n); break;
        case C_ZERO: st = hetrt_zero(A + c->x, c->n); break;
        }
        if (st) return i + 1;
    }
    return 0;
}
static int32_t fn_forward(void *a, void *s) { return run_calls(&prog.fn[0], a, s); }
static int32_t fn_backward(void *a, void *s) { return run_calls(&prog.fn[1], a, s); }
static int32_t fn_update(void *a, void *s) { return run_calls(&prog.fn[2], a, s); }

static Call *add(Fn *f, Call c, const char *name) {
    f->calls = realloc(f->calls, ((size_t)f->n + 1) * sizeof *f->calls);
    f->names = realloc(f->names, ((size_t)f->n + 1) * sizeof *f->names);
    f->calls[f->n] = c;
    f->names[f->n] = strdup(name);
    return &f->calls[f->n++];
}

typedef struct Layout {
    const char *name[64];
    int64_t off[64];
    int n;
    int64_t top;
} Layout;

static int64_t place(Layout *l, const char *name, int64_t bytes) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->name[i], name)) return l->off[i];
    l->name[l->n] = name;
    l->off[l->n++] = l->top;
    int64_t o = l->top;
    l->top += (bytes + 63) / 64 * 64;
    return o;
}
static int64_t vbytes(const IrValue *v) {
    return ir_shape_numel(&v->shape) * (int64_t)ir_dtype_size(v->dtype);
}

typedef struct StParam {
    int p;
    int64_t off_param, off_acc, off_m, off_v, n;
} StParam;

static StParam *find_sp(StParam *sp, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(PARAMS[sp[i].p].name, name)) return &sp[i];
    return NULL;
}

static void add_node_call(Fn *f, IrGraph *g, int gi, int ni, StParam *sp, int nsp, Layout *slot,
                          Layout *arena, int64_t off_lr, int64_t off_step, int64_t off_gn) {
    IrNode *n = g->nodes[ni];
    int64_t *b = calloc((size_t)(n->nin + n->nout), sizeof *b);
    for (int k = 0; k < n->nin + n->nout; k++) {
        IrValue *v = k < n->nin ? n->in[k] : n->out[k - n->nin];
        if (!v) continue;
        StParam *p;
        const char *nm = v->name;
        if (v->kind == IR_VK_CONST) {
            b[k] = HETC_BUF(HETC_BUF_CONST, 0);
        } else if (v->kind == IR_VK_PARAM && (p = find_sp(sp, nsp, nm))) {
            b[k] = HETC_BUF(HETC_BUF_ARENA, p->off_param);
        } else if (gi == HETC_GRAPH_UPDATE) {
            if (!strncmp(nm, "grad/", 5) && (p = find_sp(sp, nsp, nm + 5)))
                b[k] = HETC_BUF(HETC_BUF_ARENA, p->off_acc);
            else if (!strncmp(nm, "opt/m/", 6) && (p = find_sp(sp, nsp, nm + 6)))
                b[k] = HETC_BUF(HETC_BUF_ARENA, p->off_m);
            else if (!strncmp(nm, "opt/v/", 6) && (p = find_sp(sp, nsp, nm + 6)))
                b[k] = HETC_BUF(HETC_BUF_ARENA, p->off_v);
            else if (!strcmp(nm, "lr")) b[k] = HETC_BUF(HETC_BUF_ARENA, off_lr);
            else if (!strcmp(nm, "step")) b[k] = HETC_BUF(HETC_BUF_ARENA, off_step);
            else if (!strcmp(nm, "global_grad_norm")) b[k] = HETC_BUF(HETC_BUF_ARENA, off_gn);
            else b[k] = HETC_BUF(HETC_BUF_ARENA, place(arena, nm, vbytes(v)));
        } else {
            b[k] = HETC_BUF(HETC_BUF_SLOT, place(slot, nm, vbytes(v)));
        }
    }
    char name[160];
    snprintf(name, sizeof name, "hetrt_node(%s %d: %s)", gi ? "update" : "train", ni,
             ir_op_name(n->op));
    add(f, (Call){.kind = C_NODE, .graph = gi, .node = ni, .bufs = b}, name);
}

/* fwd-phase nodes that read the backward seed (stage 0's surrogate loss)
 * belong to the backward function. */
static int *tainted_nodes(IrGraph *g) {
    int *t = calloc((size_t)g->nnodes + 1, sizeof *t);
    char *tv = calloc((size_t)g->nvalues + 1, 1);
    for (int i = 0; i < g->nvalues; i++) tv[i] = !strncmp(g->values[i]->name, "bgrad/", 6);
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] && tv[n->in[j]->id]) t[i] = 1;
        if (t[i])
            for (int j = 0; j < n->nout; j++)
                if (n->out[j]) tv[n->out[j]->id] = 1;
    }
    free(tv);
    return t;
}

static char *print_graph(IrGraph *g) {
    IrPrintOptions o;
    ir_print_options_default(&o);
    o.max_inline_elems = 1 << 30;
    return ir_print_to_string(g, &o);
}

static int run_stage(int stage, int d0, int d1, int argc, char **argv) {
    int dp = stage ? d1 : d0;
    int64_t local = ROWS / dp;
    IrGraph *built = build(stage ? PART_S1 : PART_S0, local);
    int sp_idx[2] = {stage ? 2 : 0, stage ? 0 : 1}; /* stage 1: w2 (layer 3), wte (shared) */
    IrGraph *ubuilt = build_update(sp_idx, 2, 1, NULL);
    char *train_txt = print_graph(built), *upd_txt = print_graph(ubuilt);
    ir_graph_free(built);
    ir_graph_free(ubuilt);
    IrError err = {{0}};
    /* compile against the parsed text: node indices as the runtime sees them */
    IrGraph *g = ir_parse(train_txt, "train", &err), *u = g ? ir_parse(upd_txt, "update", &err) : NULL;
    if (!g || !u) die("re-parsing the stage graphs", &err);

    Layout arena = {.n = 0}, slot = {.n = 0};
    StParam sp[2];
    for (int i = 0; i < 2; i++) {
        int p = sp_idx[i];
        int64_t n = PARAMS[p].rows * PARAMS[p].cols;
        char tag[4][64];
        const char *k[4] = {"param", "acc", "m", "v"};
        int64_t off[4];
        for (int j = 0; j < 4; j++) {
            snprintf(tag[j], sizeof tag[j], "%s:%s", k[j], PARAMS[p].name);
            off[j] = place(&arena, strdup(tag[j]), n * 4);
        }
        sp[i] = (StParam){p, off[0], off[1], off[2], off[3], n};
    }
    int64_t off_lr = place(&arena, "$lr", 4), off_step = place(&arena, "$step", 8),
            off_gn = place(&arena, "$grad_norm", 4);

    Fn *F = &prog.fn[0], *B = &prog.fn[1], *U = &prog.fn[2];
    int *taint = tainted_nodes(g);
    IrValue *a = ir_graph_find_value(g, "a"), *bg = ir_graph_find_value(g, stage ? "grad/a" : "bgrad/a");
    int64_t a_off = place(&slot, "a", vbytes(a)), bg_off = place(&slot, bg->name, vbytes(bg));
    if (stage == 0) {
        add(F, (Call){.kind = C_TOKENS, .a = 0, .x = place(&slot, "ids", local * T * 8)},
            "hetrt_tokens(ids)");
    } else {
        add(F, (Call){.kind = C_RECV, .a = 0, .x = a_off}, "hetrt_recv(a)");
        add(F, (Call){.kind = C_TOKENS, .a = 1, .x = place(&slot, "targets", local * T * 8)},
            "hetrt_tokens(targets)");
    }
    if (stage == 0) add(B, (Call){.kind = C_RECV, .a = 1, .x = bg_off}, "hetrt_recv(bgrad/a)");
    for (int i = 0; i < g->nnodes; i++) {
        Fn *f = g->nodes[i]->phase == IR_PHASE_FWD && !taint[i] ? F : B;
        add_node_call(f, g, HETC_GRAPH_TRAIN, i, sp, 2, &slot, &arena, off_lr, off_step, off_gn);
    }
    free(taint);
    if (stage == 0) add(F, (Call){.kind = C_SEND, .a = 0, .x = a_off}, "hetrt_send(a)");
    else add(F, (Call){.kind = C_LOSS, .x = place(&slot, "loss", 4)}, "hetrt_loss");
    for (int i = 0; i < 2; i++) {
        char gn[64];
        snprintf(gn, sizeof gn, "grad/%s", PARAMS[sp[i].p].name);
        add(B, (Call){.kind = C_ACCUM, .x = sp[i].off_acc, .y = place(&slot, ir_graph_find_value(g, gn)->name, sp[i].n * 4), .n = sp[i].n},
            "hetrt_accum");
    }
    if (stage == 1) add(B, (Call){.kind = C_SEND, .a = 1, .x = bg_off}, "hetrt_send(grad/a)");
    for (int i = 0; i < u->nnodes; i++)
        add_node_call(U, u, HETC_GRAPH_UPDATE, i, sp, 2, &slot, &arena, off_lr, off_step, off_gn);
    for (int i = 0; i < 2; i++) {
        const char *pn = PARAMS[sp[i].p].name;
        const char *kinds[3] = {"", "m/", "v/"};
        int64_t dst[3] = {sp[i].off_param, sp[i].off_m, sp[i].off_v};
        for (int k = 0; k < 3; k++) {
            char on[64];
            snprintf(on, sizeof on, "upd/%s%s", kinds[k], pn);
            IrValue *v = ir_graph_find_value(u, on);
            if (!v) die("update graph output missing", NULL);
            add(U, (Call){.kind = C_COPY, .x = dst[k], .y = place(&arena, v->name, vbytes(v)), .n = sp[i].n * 4},
                "hetrt_copy");
        }
        add(U, (Call){.kind = C_ZERO, .x = sp[i].off_acc, .n = sp[i].n * 4}, "hetrt_zero");
    }

    int nslots = K;
    int64_t slot_base = arena.top, slot_bytes = slot.top;
    /* the config text, as the compiler writes it */
    char cfg[8192];
    int o = snprintf(cfg, sizeof cfg,
                     "hetc-stage 1\nstage %d\nstages 2\ndp %d %d\nrows %d\nlocal_rows %lld\n"
                     "seq %d\naccum %d\nlayers %d\ntoken_dtype i64\noptimizer adamw\nlr %.17g\n"
                     "lr_schedule cosine\nwarmup %d\nsteps %d\narena_off lr %lld\n"
                     "arena_off step %lld\narena_off grad_norm %lld\n"
                     "some_future_record 1 2 3\n",
                     stage, d0, d1, ROWS, (long long)local, T, K, LAYERS, LR, WARMUP, NSTEPS,
                     (long long)off_lr, (long long)off_step, (long long)off_gn);
    for (int i = 0; i < 2; i++)
        o += snprintf(cfg + o, sizeof cfg - (size_t)o,
                      "param %s layer %d shared %d numel %lld param %lld acc %lld m %lld v %lld "
                      "shape %dx%d\n",
                      PARAMS[sp[i].p].name, PARAMS[sp[i].p].layer, sp[i].p == 0,
                      (long long)sp[i].n, (long long)sp[i].off_param, (long long)sp[i].off_acc,
                      (long long)sp[i].off_m, (long long)sp[i].off_v, PARAMS[sp[i].p].rows,
                      PARAMS[sp[i].p].cols);
    const char *dir0[2] = {"send", "recv"}, *dir1[2] = {"recv", "send"};
    for (int x = 0; x < 2; x++)
        o += snprintf(cfg + o, sizeof cfg - (size_t)o,
                      "xfer %d %s %s peer %d rows %d row_bytes %d\n", x,
                      (stage ? dir1 : dir0)[x], x ? "grad" : "act", 1 - stage, ROWS, T * D * 4);
    snprintf(cfg + o, sizeof cfg - (size_t)o, "shared wte stages 0 1\nend\n");

    HetcStageFn funcs[3] = {{"forward", fn_forward, F->n, F->names},
                            {"backward", fn_backward, B->n, B->names},
                            {"update", fn_update, U->n, U->names}};
    /* stage 0 runs both forwards first; stage 1 alternates (1F1B) */
    HetcSchedEntry sched0[4] = {{'F', 0}, {'F', 1}, {'B', 0}, {'B', 1}};
    HetcSchedEntry sched1[4] = {{'F', 0}, {'B', 0}, {'F', 1}, {'B', 1}};
    HetcStageDesc desc = {.abi_version = HETC_STAGE_ABI_VERSION,
                          .stage = stage,
                          .arena_bytes = slot_base + nslots * slot_bytes,
                          .slot_base = slot_base,
                          .slot_bytes = slot_bytes,
                          .nslots = nslots,
                          .nfuncs = 3,
                          .funcs = funcs,
                          .nsched = 4,
                          .sched = stage ? sched1 : sched0,
                          .ir_train = train_txt,
                          .ir_update = upd_txt,
                          .config = cfg};
    if (getenv("TEST_STAGE_ABI")) desc.abi_version = atoi(getenv("TEST_STAGE_ABI"));
    int rc = hetrt_stage_main(argc, argv, &desc);
    for (int f = 0; f < 3; f++) {
        for (int i = 0; i < prog.fn[f].n; i++) {
            free(prog.fn[f].calls[i].bufs);
            free((void *)prog.fn[f].names[i]);
        }
        free(prog.fn[f].calls);
        free(prog.fn[f].names);
    }
    for (int i = 0; i < arena.n; i++)
        if (arena.name[i][0] != '$' && strchr(arena.name[i], ':')) free((void *)arena.name[i]);
    ir_graph_free(g);
    ir_graph_free(u);
    free(train_txt);
    free(upd_txt);
    return rc;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "gen")) return gen(argv[2], argc > 3 && !strcmp(argv[3], "bad"));
    if (argc >= 4 && !strcmp(argv[1], "ref")) return ref(argv[2], atoll(argv[3]));
    if (argc >= 5 && !strcmp(argv[1], "stage")) {
        int st = atoi(argv[2]), d0 = atoi(argv[3]), d1 = atoi(argv[4]);
        if (st < 0 || st > 1 || d0 < 1 || d1 < 1 || ROWS % d0 || ROWS % d1) {
            fprintf(stderr, "test_stage_mlp: bad layout %s %s %s\n", argv[2], argv[3], argv[4]);
            return 2;
        }
        argv[4] = argv[0]; /* hetrt_stage_main sees the program name and its options */
        return run_stage(st, d0, d1, argc - 4, argv + 4);
    }
    fprintf(stderr, "usage: %s gen DIR | ref DATA STEPS | stage S D0 D1 [options]\n", argv[0]);
    return 2;
}
