/* Fused elementwise kernels (codegen/fuse.h, fused_llvm.h) against the
 * unfused reference, bit for bit.
 *
 * A seeded fuzz of random elementwise DAGs: random broadcast shapes (up to
 * rank 4, some large enough for several hk_parallel_for chunks), random ops
 * of the fusion table (binary with broadcasting and scalar constants, the
 * unary maps incl. exp / tanh / sigmoid / GELU / SiLU, UnaryGrad rules,
 * Where, bf16-mixed's Casts: f32 -> bf16 -> f32 round trips, bf16 graph
 * inputs widened and bf16 values as graph outputs), random graph outputs.  Reference: every node run by the host
 * executor (hexec_call_node_into: the kernels the unfused stage binary
 * calls).  Fused: fuse_graph groups the nodes, fk_emit_host generates the
 * kernels into one module, LLVM's O3 pipeline runs, MCJIT executes them;
 * nodes outside groups run through the executor, and the values a group
 * keeps in registers get no buffer at all (a reader outside would crash).
 * Every graph output and every group output must equal the reference's
 * bits (NaNs: both NaN).  Then every kernel is also lowered to NVPTX
 * (fk_ptx) and, when ptxas is installed, assembled for sm_80 and sm_90
 * (argv[2]: the ptxas path; "" skips with a message).
 *
 * Models given after PTXAS (ONNX files) are built as one training stage
 * (stage_fixture.c, as hetc train builds it), their train and update graphs
 * fused, and every kernel lowered to PTX and assembled the same way.
 *
 * usage: test_fused SEEDS [PTXAS [MODEL.onnx ...]] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <llvm-c/Core.h>
#include <llvm-c/ExecutionEngine.h>
#include <llvm-c/Support.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>

#include "fuse.h"
#include "fused_llvm.h"
#include "hk_bf16.h"
#include "hk_cpu.h"
#include "hk_parallel.h"
#include "hostexec.h"
#include "llvm_emit.h"
#include "memplan.h"
#include "stage_fixture.h"

static int fails;
#define CHECK(c, ...)                                                                     \
    do {                                                                                  \
        if (!(c)) {                                                                       \
            fails++;                                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                          \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
        }                                                                                 \
    } while (0)

static uint64_t rng_s;
static uint32_t rnd(void) {
    rng_s = rng_s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_s >> 33);
}
static int rint_(int n) { return (int)(rnd() % (uint32_t)n); }
static float rflt(void) { return ((float)rnd() / 4294967296.0f) * 6.0f - 3.0f; }

/* a shape that broadcasts to master: a suffix of its dims, some set to 1 */
static IrShape sub_shape(const IrShape *m) {
    IrShape s = {0};
    int drop = rint_(m->rank + 1);
    if (rint_(2)) drop = 0;
    s.rank = m->rank - drop;
    for (int d = 0; d < s.rank; d++) {
        s.dims[d] = m->dims[d + drop];
        if (rint_(4) == 0) s.dims[d] = 1;
    }
    return s;
}

static IrShape bcast(const IrShape *a, const IrShape *b) {
    IrShape o = {0};
    o.rank = a->rank > b->rank ? a->rank : b->rank;
    for (int d = 0; d < o.rank; d++) {
        int ia = d - (o.rank - a->rank), ib = d - (o.rank - b->rank);
        int64_t x = ia >= 0 ? a->dims[ia] : 1, y = ib >= 0 ? b->dims[ib] : 1;
        o.dims[d] = x > y ? x : y;
    }
    return o;
}

static IrValue *act(IrGraph *g, const IrShape *s) {
    IrValue *v = ir_value_new(g, NULL, IR_F32, s, IR_VK_ACT);
    v->shape_known = 1;
    return v;
}

static const IrOp bin_ops[] = {IR_OP_ADD, IR_OP_SUB, IR_OP_MUL, IR_OP_DIV, IR_OP_MAX, IR_OP_MIN};
static const IrOp un_ops[] = {IR_OP_NEG,  IR_OP_ABS,  IR_OP_SQRT, IR_OP_RECIPROCAL, IR_OP_EXP,
                              IR_OP_LOG,  IR_OP_TANH, IR_OP_SIGMOID, IR_OP_ERF,     IR_OP_RELU,
                              IR_OP_GELU, IR_OP_SILU};
static const char *const ug_fns[] = {"exp",  "log",        "sqrt",       "tanh", "sigmoid", "erf",
                                     "relu", "neg",        "reciprocal", "gelu", "gelu_tanh", "silu"};

/* a random DAG; returns the graph (inputs have no data: the test fills them) */
static IrGraph *random_graph(int big) {
    IrGraph *g = ir_graph_new("fuzz");
    IrShape m = {0};
    m.rank = 1 + rint_(4);
    for (int d = 0; d < m.rank; d++) m.dims[d] = 1 + rint_(big ? 40 : 7);
    if (big) m.dims[m.rank - 1] = 64 + rint_(1024);
    IrValue *pool[64];
    int np = 0;
    int nin = 2 + rint_(3);
    for (int i = 0; i < nin; i++) {
        IrShape s = i == 0 ? m : sub_shape(&m);
        IrValue *v = ir_value_new(g, NULL, IR_F32, &s, IR_VK_INPUT);
        v->shape_known = 1;
        ir_graph_add_input(g, v);
        pool[np++] = v;
    }
    IrShape cs = sub_shape(&m);
    IrValue *cond = ir_value_new(g, "cond", IR_BOOL, &cs, IR_VK_INPUT);
    cond->shape_known = 1;
    ir_graph_add_input(g, cond);
    IrValue *bf_outs[16];
    int nbf = 0;
    if (rint_(2)) { /* a bf16 input (a Linear's output under bf16-mixed), widened */
        IrShape hs = rint_(2) ? m : sub_shape(&m);
        IrValue *h = ir_value_new(g, "h", IR_BF16, &hs, IR_VK_INPUT);
        h->shape_known = 1;
        ir_graph_add_input(g, h);
        IrValue *y = act(g, &hs);
        IrNode *c = ir_node_new(g, IR_OP_CAST, "", 1, &h, 1, &y);
        ir_node_set_int(c, "to", IR_F32);
        pool[np++] = y;
    }
    int nn = 2 + rint_(12);
    for (int k = 0; k < nn && np < 60; k++) {
        int kind = rint_(11);
        IrValue *a = pool[np - 1 - rint_(np < 4 ? np : 4)]; /* recent values: chains */
        IrValue *b = pool[rint_(np)];
        IrNode *n;
        if (kind < 4) {
            IrValue *ins[2] = {a, b};
            if (rint_(5) == 0) ins[rint_(2)] = ir_const_scalar_f32(g, NULL, rflt());
            IrShape os = bcast(&ins[0]->shape, &ins[1]->shape);
            IrValue *y = act(g, &os);
            n = ir_node_new(g, bin_ops[rint_(6)], "", 2, ins, 1, &y);
            pool[np++] = y;
        } else if (kind < 7) {
            IrValue *y = act(g, &a->shape);
            IrOp op = un_ops[rint_((int)(sizeof un_ops / sizeof un_ops[0]))];
            n = ir_node_new(g, op, "", 1, &a, 1, &y);
            if (op == IR_OP_GELU && rint_(2)) ir_node_set_string(n, "approximate", "tanh");
            pool[np++] = y;
        } else if (kind < 9) {
            IrValue *dy = NULL; /* an operand of a's shape */
            for (int t = 0; t < 8 && !dy; t++) {
                IrValue *c = pool[rint_(np)];
                if (c != a && ir_shape_equal(&c->shape, &a->shape)) dy = c;
            }
            if (!dy) dy = a;
            IrValue *ins[3] = {a, dy, NULL};
            int three = 0;
            if (rint_(2)) {
                for (int t = 0; t < 8 && !three; t++) {
                    IrValue *c = pool[rint_(np)];
                    if (ir_shape_equal(&c->shape, &a->shape)) ins[2] = c, three = 1;
                }
            }
            IrValue *y = act(g, &a->shape);
            n = ir_node_new(g, IR_OP_UNARY_GRAD, "", three ? 3 : 2, ins, 1, &y);
            ir_node_set_string(n, "fn", ug_fns[rint_((int)(sizeof ug_fns / sizeof ug_fns[0]))]);
            pool[np++] = y;
        } else if (kind == 10) { /* f32 -> bf16 (maybe a graph output) -> f32 */
            IrValue *h = ir_value_new(g, NULL, IR_BF16, &a->shape, IR_VK_ACT);
            h->shape_known = 1;
            n = ir_node_new(g, IR_OP_CAST, "", 1, &a, 1, &h);
            ir_node_set_int(n, "to", IR_BF16);
            if (rint_(3) == 0 && nbf < 16) bf_outs[nbf++] = h;
            IrValue *y = act(g, &a->shape);
            n = ir_node_new(g, IR_OP_CAST, "", 1, &h, 1, &y);
            ir_node_set_int(n, "to", IR_F32);
            pool[np++] = y;
        } else {
            IrValue *ins[3] = {cond, a, b};
            IrShape os = bcast(&cond->shape, &a->shape);
            os = bcast(&os, &b->shape);
            IrValue *y = act(g, &os);
            n = ir_node_new(g, IR_OP_WHERE, "", 3, ins, 1, &y);
            pool[np++] = y;
        }
        (void)n;
    }
    ir_graph_add_output(g, pool[np - 1]);
    pool[np - 1]->is_graph_output = 1;
    for (int i = 0; i < nbf; i++) {
        ir_graph_add_output(g, bf_outs[i]);
        bf_outs[i]->is_graph_output = 1;
    }
    for (int i = nin; i < np - 1; i++)
        if (pool[i]->producer && rint_(4) == 0 && !pool[i]->is_graph_output) {
            ir_graph_add_output(g, pool[i]);
            pool[i]->is_graph_output = 1;
        }
    return g;
}

static void *value_buf(IrValue *v) {
    size_t nb = ir_value_bytes(v);
    return calloc(nb ? nb : 1, 1);
}

/* run node n of g on bufs (value id -> data) */
static int run_node(IrNode *n, void **bufs) {
    const void *in[8] = {0};
    void *out[2] = {0};
    IrError err;
    for (int i = 0; i < n->nin; i++) {
        if (!n->in[i]) continue;
        in[i] = n->in[i]->kind == IR_VK_CONST ? ir_value_data(n->in[i], &err) : bufs[n->in[i]->id];
        if (!in[i]) return -1;
    }
    if (!bufs[n->out[0]->id]) bufs[n->out[0]->id] = value_buf(n->out[0]);
    out[0] = bufs[n->out[0]->id];
    memset(out[0], 0, ir_value_bytes(n->out[0]));
    if (hexec_call_node_into(n, in, out, &err)) {
        fprintf(stderr, "executor: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int bf16_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

static int same_bits(const IrValue *v, const void *pa, const void *pb, int64_t n, int64_t *at) {
    if (v->dtype == IR_BF16) {
        const uint16_t *a = pa, *b = pb;
        for (int64_t i = 0; i < n; i++)
            if (a[i] != b[i] && !(bf16_nan(a[i]) && bf16_nan(b[i]))) {
                *at = i;
                return 0;
            }
        return 1;
    }
    const float *a = pa, *b = pb;
    for (int64_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, &a[i], 4);
        memcpy(&y, &b[i], 4);
        if (x != y && !(isnan(a[i]) && isnan(b[i]))) {
            *at = i;
            return 0;
        }
    }
    return 1;
}

typedef void (*KernFn)(void *, void *, void *, void *, void *, void *, void *, void *, void *,
                       void *, void *, void *, void *, void *, void *, void *);

static LLVMTargetMachineRef host_tm(void) {
    char *triple = LLVMGetDefaultTargetTriple();
    LLVMTargetRef t;
    char *msg = NULL;
    LLVMTargetMachineRef tm = NULL;
    if (!LLVMGetTargetFromTriple(triple, &t, &msg))
        tm = LLVMCreateTargetMachine(t, triple, "generic", "", LLVMCodeGenLevelDefault,
                                     LLVMRelocDefault, LLVMCodeModelJITDefault);
    LLVMDisposeMessage(msg);
    LLVMDisposeMessage(triple);
    return tm;
}

static int nptx_checked, nptx_modules;
static char ptx_dir[256];

/* every kernel of fg through the NVPTX backend, assembled by ptxas */
static void check_ptx(const FuseGraph *fg, const char *ptxas, int seed) {
    const FkKernel *ks[256];
    int n = 0;
    for (int i = 0; i < fg->ngroups && n < 256; i++)
        if (!fk_needs_libm(&fg->groups[i].k)) ks[n++] = &fg->groups[i].k;
    if (!n) return;
    char *ptx = NULL;
    IrError err;
    int rc = fk_ptx(ks, n, "sm_80", &ptx, NULL, &err);
    CHECK(rc == 0, "seed %d: fk_ptx: %s", seed, rc ? err.msg : "");
    if (rc) return;
    CHECK(strstr(ptx, ".entry") && strstr(ptx, ".target sm_80"), "seed %d: no PTX entry", seed);
    nptx_modules++;
    nptx_checked += n;
    if (ptxas && *ptxas) {
        char path[400], cmd[1400];
        snprintf(path, sizeof path, "%s/fuzz_%d.ptx", ptx_dir, seed);
        FILE *f = fopen(path, "w");
        if (f) {
            fputs(ptx, f);
            fclose(f);
        }
        for (int a = 0; a < 2; a++) {
            snprintf(cmd, sizeof cmd, "'%s' --gpu-name %s -o %s.cubin %s", ptxas,
                     a ? "sm_90" : "sm_80", path, path);
            CHECK(system(cmd) == 0, "seed %d: %s failed", seed, cmd);
        }
    }
    free(ptx);
}

int main(int argc, char **argv) {
    int seeds = argc > 1 ? atoi(argv[1]) : 40;
    const char *ptxas = argc > 2 ? argv[2] : "";
    if (ptxas[0] && access(ptxas, X_OK) != 0) {
        printf("SKIP ptxas: %s not found, PTX is generated but not assembled\n", ptxas);
        ptxas = "";
    }
    snprintf(ptx_dir, sizeof ptx_dir, "/tmp/test_fused_%d", (int)getpid());
    if (ptxas[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "mkdir -p %s", ptx_dir);
        if (system(cmd)) ptxas = "";
    }
    LLVMLinkInMCJIT();
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
    LLVMAddSymbol("hk_parallel_for", (void *)hk_parallel_for);
    LLVMAddSymbol("hk_vector_isa", (void *)hk_vector_isa);
    LLVMAddSymbol("erf", (void *)erf);
    LLVMAddSymbol("log", (void *)log);
    int total_fused = 0, total_groups = 0, internal = 0, nround = 0, nbf_in = 0, nbf_out = 0;
    for (int seed = 0; seed < seeds; seed++) {
        rng_s = 0x9E3779B97F4A7C15ULL * (uint64_t)(seed + 1);
        IrGraph *g = random_graph(seed % 8 == 7);
        /* input data */
        void **ref = calloc((size_t)g->nvalues + 1, sizeof *ref);
        void **fus = calloc((size_t)g->nvalues + 1, sizeof *fus);
        for (int i = 0; i < g->ninputs; i++) {
            IrValue *v = g->inputs[i];
            int64_t n = ir_shape_numel(&v->shape);
            ref[v->id] = value_buf(v);
            fus[v->id] = value_buf(v);
            for (int64_t j = 0; j < n; j++) {
                if (v->dtype == IR_BOOL) ((uint8_t *)ref[v->id])[j] = (uint8_t)rint_(2);
                else if (v->dtype == IR_BF16)
                    ((uint16_t *)ref[v->id])[j] = hk_f32_to_bf16(rint_(50) == 0 ? 0.0f : rflt());
                else ((float *)ref[v->id])[j] = rint_(50) == 0 ? 0.0f : rflt();
            }
            memcpy(fus[v->id], ref[v->id], ir_value_bytes(v));
        }
        int ok = 1;
        for (int i = 0; i < g->nnodes && ok; i++) ok = run_node(g->nodes[i], ref) == 0;
        CHECK(ok, "seed %d: reference run failed", seed);

        FuseGraph fg;
        IrError err;
        CHECK(fuse_graph(g, NULL, "fz", &fg, &err) == 0, "seed %d: fuse_graph", seed);
        total_fused += fg.nfused;
        total_groups += fg.ngroups;
        for (int v = 0; v < g->nvalues; v++) internal += fg.internal[v];
        for (int k = 0; k < fg.ngroups; k++) { /* the bf16 casts the kernels took */
            const FkKernel *fk = &fg.groups[k].k;
            for (int i = 0; i < fk->ninst; i++) nround += fk->inst[i].op == FK_RBF16;
            for (int i = 0; i < fk->nin; i++) nbf_in += fk->in[i].is_bf16;
            for (int i = 0; i < fk->nout; i++) nbf_out += fk->out_bf16[i];
        }

        /* generated kernels, JIT-compiled */
        LLVMContextRef ctx = LLVMContextCreate();
        LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("fz", ctx);
        LLVMTargetMachineRef tm = host_tm();
        char *triple = LLVMGetTargetMachineTriple(tm);
        LLVMSetTarget(mod, triple);
        LLVMDisposeMessage(triple);
        LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
        LLVMSetModuleDataLayout(mod, dl);
        LLVMDisposeTargetData(dl);
        for (int k = 0; k < fg.ngroups; k++) {
            CHECK(fk_emit_host(mod, &fg.groups[k].k, &err) == 0, "seed %d: emit: %s", seed, err.msg);
            LLVMSetLinkage(LLVMGetNamedFunction(mod, fg.groups[k].k.name), LLVMExternalLinkage);
        }
        CHECK(fk_optimize(mod, tm, 3, &err) == 0, "seed %d: optimize", seed);
        LLVMDisposeTargetMachine(tm);
        LLVMExecutionEngineRef ee = NULL;
        char *msg = NULL;
        struct LLVMMCJITCompilerOptions jo;
        LLVMInitializeMCJITCompilerOptions(&jo, sizeof jo);
        jo.OptLevel = 2;
        if (LLVMCreateMCJITCompilerForModule(&ee, mod, &jo, sizeof jo, &msg)) {
            CHECK(0, "seed %d: MCJIT: %s", seed, msg ? msg : "");
            LLVMDisposeMessage(msg);
            LLVMContextDispose(ctx);
            fuse_free(&fg);
            ir_graph_free(g);
            continue;
        }
        for (int i = 0; i < g->nnodes && ok; i++) {
            if (fuse_skipped(&fg, i)) continue;
            const FuseGroup *gr = fuse_group_at(&fg, i);
            if (!gr) {
                ok = run_node(g->nodes[i], fus) == 0;
                CHECK(ok, "seed %d: node %d (%s) reads a value the fusion left without a buffer",
                      seed, i, ir_op_name(g->nodes[i]->op));
                continue;
            }
            void *args[16] = {0};
            int na = 0;
            for (int j = 0; j < gr->nins; j++) {
                IrValue *v = gr->ins[j];
                args[na++] = v->kind == IR_VK_CONST ? (void *)ir_value_data(v, &err) : fus[v->id];
                CHECK(args[na - 1], "seed %d: kernel input %s has no data", seed, v->name);
            }
            for (int j = 0; j < gr->nouts; j++) {
                IrValue *v = gr->outs[j];
                if (!fus[v->id]) fus[v->id] = value_buf(v);
                memset(fus[v->id], 0xff, ir_value_bytes(v)); /* garbage: all must be written */
                args[na++] = fus[v->id];
            }
            KernFn fn = (KernFn)(uintptr_t)LLVMGetFunctionAddress(ee, gr->k.name);
            CHECK(fn, "seed %d: no JIT address for %s", seed, gr->k.name);
            if (fn)
                fn(args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8],
                   args[9], args[10], args[11], args[12], args[13], args[14], args[15]);
        }
        /* compare: graph outputs and every materialised group output */
        for (int v = 0; v < g->nvalues; v++) {
            IrValue *val = g->values[v];
            if (!val->producer || fg.internal[v]) continue;
            int64_t at = -1;
            if (!fus[v] || !ref[v]) {
                CHECK(!val->is_graph_output, "seed %d: output %s not computed", seed, val->name);
                continue;
            }
            if (!same_bits(val, ref[v], fus[v], ir_shape_numel(&val->shape), &at)) {
                double x = val->dtype == IR_BF16 ? hk_bf16_to_f32(((uint16_t *)ref[v])[at])
                                                 : ((float *)ref[v])[at];
                double y = val->dtype == IR_BF16 ? hk_bf16_to_f32(((uint16_t *)fus[v])[at])
                                                 : ((float *)fus[v])[at];
                CHECK(0, "seed %d: %s differs at %lld: %a vs %a", seed, val->name, (long long)at, x,
                      y);
                for (int k = 0; k < fg.ngroups; k++) fk_print(&fg.groups[k].k, stderr);
            }
        }
        check_ptx(&fg, ptxas, seed);
        LLVMDisposeExecutionEngine(ee); /* owns the module */
        LLVMContextDispose(ctx);
        for (int v = 0; v < g->nvalues; v++) free(ref[v]), free(fus[v]);
        free(ref);
        free(fus);
        fuse_free(&fg);
        ir_graph_free(g);
    }
    for (int mi = 3; mi < argc; mi++) { /* real graphs: all their kernels through ptxas */
        PartStage st;
        IrError err;
        if (fixture_one_stage(&st, argv[mi], 2, 16, 0, &err)) {
            CHECK(0, "%s: %s", argv[mi], err.msg);
            continue;
        }
        int *ord = memplan_update_order(st.update), *pos = calloc((size_t)st.update->nnodes + 1, sizeof *pos);
        for (int i = 0; i < st.update->nnodes; i++) pos[ord[i]] = i;
        FuseGraph fg[2];
        CHECK(fuse_graph(st.train, NULL, "m_t", &fg[0], &err) == 0, "%s: fuse", argv[mi]);
        CHECK(fuse_graph(st.update, pos, "m_u", &fg[1], &err) == 0, "%s: fuse", argv[mi]);
        int before = nptx_checked;
        for (int k = 0; k < 2; k++) check_ptx(&fg[k], ptxas, 1000 * mi + k);
        printf("%s: %d + %d nodes fused into %d + %d kernels (train + update), %d lowered to PTX\n",
               argv[mi], fg[0].nfused, fg[1].nfused, fg[0].ngroups, fg[1].ngroups,
               nptx_checked - before);
        CHECK(fg[1].ngroups > 0, "%s: no fused kernel in the update graph", argv[mi]);
        fuse_free(&fg[0]);
        fuse_free(&fg[1]);
        free(ord), free(pos);
        fixture_free(&st);
    }
    printf("%d seeds: %d nodes fused into %d kernels, %d values kept in registers; "
           "%d kernels lowered to PTX in %d modules%s\n",
           seeds, total_fused, total_groups, internal, nptx_checked, nptx_modules,
           ptxas[0] ? ", assembled by ptxas for sm_80 and sm_90" : "");
    CHECK(total_groups > seeds / 4, "too few fused groups (%d): the fuzz tests nothing", total_groups);
    CHECK(internal > 0, "no register-only values");
    printf("bf16 in the kernels: %d roundings, %d bf16 inputs, %d bf16 outputs\n", nround, nbf_in,
           nbf_out);
    CHECK(nround > 0 && nbf_in > 0 && nbf_out > 0, "the fuzz fused no bf16 Cast");
    if (ptxas[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", ptx_dir);
        if (system(cmd)) fprintf(stderr, "cannot remove %s\n", ptx_dir);
    }
    if (fails) {
        printf("%d failures\n", fails);
        return 1;
    }
    printf("ok\n");
    return 0;
}
