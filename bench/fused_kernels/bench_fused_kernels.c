/* Fused elementwise kernels vs the per-node kernel calls they replace.
 *
 * Four patterns the HF graphs contain, on large tensors: SwiGLU's
 * SiLU(gate) * up, RoPE's q * cos + r * sin (cos / sin [T, D] broadcast
 * over batch x heads), SiLU's backward dgate = UnaryGrad(silu)(gate,
 * dy * up) with dup = dy * SiLU(gate), and a scaled residual (x + y) * s + z.
 * Unfused: one host-kernel call per node through the executor
 * (hexec_call_node_into: the hk_* kernels the unfused stage binaries call),
 * every intermediate in memory.  Fused: the kernel fuse_graph + fk_emit_host
 * generate (O3 pipeline, MCJIT), intermediates in registers.  The two are
 * timed alternately (REPS rounds, median ms per call) and their outputs
 * compared bit for bit.  Threads: HETC_THREADS (default: the CPUs).
 *
 * usage: bench_fused_kernels [REPS] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <llvm-c/Core.h>
#include <llvm-c/ExecutionEngine.h>
#include <llvm-c/Support.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>

#include "fuse.h"
#include "fused_llvm.h"
#include "hk_cpu.h"
#include "hk_parallel.h"
#include "hostexec.h"

static IrValue *val(IrGraph *g, int rank, const int64_t *d, IrValueKind k) {
    IrShape s = {0};
    s.rank = rank;
    for (int i = 0; i < rank; i++) s.dims[i] = d[i];
    IrValue *v = ir_value_new(g, NULL, IR_F32, &s, k);
    v->shape_known = 1;
    if (k == IR_VK_INPUT) ir_graph_add_input(g, v);
    return v;
}
static IrValue *node(IrGraph *g, IrOp op, IrValue *a, IrValue *b, const IrShape *os) {
    IrValue *y = val(g, os->rank, os->dims, IR_VK_ACT);
    IrValue *in[2] = {a, b};
    ir_node_new(g, op, "", b ? 2 : 1, in, 1, &y);
    return y;
}

/* the patterns; outputs marked as graph outputs */
static IrGraph *pattern(int k, const char **name) {
    IrGraph *g = ir_graph_new("p");
    const int64_t N[1] = {1 << 22}, Q[3] = {64, 256, 128}, CS[2] = {256, 128};
    IrValue *out[2] = {0};
    if (k == 0) {
        *name = "SwiGLU  SiLU(gate) * up, 4M";
        IrValue *a = val(g, 1, N, IR_VK_INPUT), *b = val(g, 1, N, IR_VK_INPUT);
        out[0] = node(g, IR_OP_MUL, node(g, IR_OP_SILU, a, NULL, &a->shape), b, &a->shape);
    } else if (k == 1) {
        *name = "RoPE    q*cos + r*sin, [64,256,128]";
        IrValue *q = val(g, 3, Q, IR_VK_INPUT), *r = val(g, 3, Q, IR_VK_INPUT);
        IrValue *c = val(g, 2, CS, IR_VK_INPUT), *s = val(g, 2, CS, IR_VK_INPUT);
        out[0] = node(g, IR_OP_ADD, node(g, IR_OP_MUL, q, c, &q->shape),
                      node(g, IR_OP_MUL, r, s, &q->shape), &q->shape);
    } else if (k == 2) {
        *name = "SwiGLU backward (dgate, dup), 4M";
        IrValue *a = val(g, 1, N, IR_VK_INPUT), *b = val(g, 1, N, IR_VK_INPUT);
        IrValue *dy = val(g, 1, N, IR_VK_INPUT);
        IrValue *s = node(g, IR_OP_SILU, a, NULL, &a->shape);
        out[1] = node(g, IR_OP_MUL, dy, s, &a->shape);
        IrValue *dyb = node(g, IR_OP_MUL, dy, b, &a->shape);
        IrValue *dg = val(g, 1, N, IR_VK_ACT), *in[2] = {a, dyb};
        IrNode *n = ir_node_new(g, IR_OP_UNARY_GRAD, "", 2, in, 1, &dg);
        ir_node_set_string(n, "fn", "silu");
        out[0] = dg;
    } else {
        *name = "residual (x + y) * s + z, 4M";
        IrValue *x = val(g, 1, N, IR_VK_INPUT), *y = val(g, 1, N, IR_VK_INPUT);
        IrValue *z = val(g, 1, N, IR_VK_INPUT);
        IrValue *s = ir_const_scalar_f32(g, NULL, 0.70710678f);
        out[0] = node(g, IR_OP_ADD, node(g, IR_OP_MUL, node(g, IR_OP_ADD, x, y, &x->shape), s,
                                         &x->shape), z, &x->shape);
    }
    for (int i = 0; i < 2; i++)
        if (out[i]) ir_graph_add_output(g, out[i]), out[i]->is_graph_output = 1;
    return g;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef void (*K5)(void *, void *, void *, void *, void *, void *);

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 9;
    if (reps < 1 || reps > 1000) reps = 9;
    LLVMLinkInMCJIT();
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
    LLVMAddSymbol("hk_parallel_for", (void *)hk_parallel_for);
    LLVMAddSymbol("hk_vector_isa", (void *)hk_vector_isa);
    printf("threads %d, %d alternating rounds, median ms per call\n", hk_parallel_threads(), reps);
    printf("%-38s %10s %10s %8s %6s\n", "pattern", "unfused", "fused", "ratio", "bits");
    for (int p = 0; p < 4; p++) {
        const char *name;
        IrGraph *g = pattern(p, &name);
        void **ref = calloc((size_t)g->nvalues + 1, sizeof *ref);
        void **fus = calloc((size_t)g->nvalues + 1, sizeof *fus);
        uint64_t st = 12345;
        for (int v = 0; v < g->nvalues; v++) {
            IrValue *x = g->values[v];
            if (x->kind == IR_VK_CONST) continue;
            size_t nb = ir_value_bytes(x);
            ref[v] = malloc(nb);
            fus[v] = calloc(nb, 1);
            for (size_t i = 0; i < nb / 4; i++) {
                st = st * 6364136223846793005ULL + 1442695040888963407ULL;
                ((float *)ref[v])[i] = (float)((double)(st >> 40) / (1 << 24) * 8.0 - 4.0);
            }
            memcpy(fus[v], ref[v], nb);
        }
        FuseGraph fg;
        IrError err;
        if (fuse_graph(g, NULL, "bk", &fg, &err) || fg.ngroups < 1 || fg.ngroups > 4) {
            fprintf(stderr, "%s: expected 1-4 fused groups (%d)\n", name, fg.ngroups);
            return 1;
        }
        LLVMContextRef ctx = LLVMContextCreate();
        LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("bk", ctx);
        char *triple = LLVMGetDefaultTargetTriple();
        LLVMTargetRef t;
        char *msg = NULL;
        LLVMGetTargetFromTriple(triple, &t, &msg);
        /* CPU "generic", as the stage binaries (llvm_emit.c) */
        LLVMTargetMachineRef tm = LLVMCreateTargetMachine(t, triple, "generic", "",
                                                          LLVMCodeGenLevelLess, LLVMRelocDefault,
                                                          LLVMCodeModelJITDefault);
        LLVMSetTarget(mod, triple);
        LLVMDisposeMessage(triple);
        LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
        LLVMSetModuleDataLayout(mod, dl);
        LLVMDisposeTargetData(dl);
        for (int q = 0; q < fg.ngroups; q++) {
            if (fk_emit_host(mod, &fg.groups[q].k, &err)) {
                fprintf(stderr, "%s: %s\n", name, err.msg);
                return 1;
            }
            /* kept: the pipeline drops an unused internal function */
            LLVMSetLinkage(LLVMGetNamedFunction(mod, fg.groups[q].k.name), LLVMExternalLinkage);
        }
        if (getenv("BENCH_LL")) { /* the optimised module, to read what vectorized */
            char path[300];
            snprintf(path, sizeof path, "%s.%d.ll", getenv("BENCH_LL"), p);
            if (fk_optimize(mod, tm, 3, &err) == 0) LLVMPrintModuleToFile(mod, path, NULL);
        } else if (fk_optimize(mod, tm, 3, &err)) {
            fprintf(stderr, "%s: %s\n", name, err.msg);
            return 1;
        }
        LLVMDisposeTargetMachine(tm);
        LLVMExecutionEngineRef ee;
        struct LLVMMCJITCompilerOptions jo;
        LLVMInitializeMCJITCompilerOptions(&jo, sizeof jo);
        jo.OptLevel = 1;
        if (LLVMCreateMCJITCompilerForModule(&ee, mod, &jo, sizeof jo, &msg)) {
            fprintf(stderr, "MCJIT: %s\n", msg);
            return 1;
        }
        K5 fn[4];
        void *args[4][6] = {{0}};
        int nfused = 0, nreg = 0; /* groups in node order: each runs at its last node */
        for (int q = 0; q < fg.ngroups; q++) {
            const FuseGroup *gr = &fg.groups[q];
            fn[q] = (K5)(uintptr_t)LLVMGetFunctionAddress(ee, gr->k.name);
            int na = 0;
            for (int i = 0; i < gr->nins; i++) args[q][na++] = fus[gr->ins[i]->id];
            for (int i = 0; i < gr->nouts; i++) args[q][na++] = fus[gr->outs[i]->id];
            nfused += gr->nnodes, nreg += gr->nnodes - gr->nouts;
        }
        double *tu = calloc((size_t)reps, sizeof *tu), *tf = calloc((size_t)reps, sizeof *tf);
        for (int r = -1; r < reps; r++) { /* round -1: warm-up */
            double t0 = now();
            for (int i = 0; i < g->nnodes; i++) {
                IrNode *n = g->nodes[i];
                const void *in[3] = {0};
                void *o[1] = {ref[n->out[0]->id]};
                for (int j = 0; j < n->nin; j++)
                    in[j] = n->in[j]->kind == IR_VK_CONST ? ir_value_data(n->in[j], &err)
                                                          : ref[n->in[j]->id];
                if (hexec_call_node_into(n, in, o, &err)) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
            }
            double t1 = now();
            for (int q = 0; q < fg.ngroups; q++)
                fn[q](args[q][0], args[q][1], args[q][2], args[q][3], args[q][4], args[q][5]);
            double t2 = now();
            if (r >= 0) tu[r] = (t1 - t0) * 1e3, tf[r] = (t2 - t1) * 1e3;
        }
        int same = 1;
        for (int i = 0; i < g->noutputs; i++) {
            const IrValue *v = g->outputs[i];
            same &= memcmp(ref[v->id], fus[v->id], ir_value_bytes(v)) == 0;
        }
        qsort(tu, (size_t)reps, sizeof *tu, cmpd);
        qsort(tf, (size_t)reps, sizeof *tf, cmpd);
        printf("%-38s %10.3f %10.3f %8.2f %6s   (%d of %d nodes -> %d kernels, %d values in "
               "registers)\n",
               name, tu[reps / 2], tf[reps / 2], tu[reps / 2] / tf[reps / 2],
               same ? "equal" : "DIFFER", nfused, g->nnodes, fg.ngroups, nreg);
        LLVMDisposeExecutionEngine(ee);
        LLVMContextDispose(ctx);
        for (int v = 0; v < g->nvalues; v++) free(ref[v]), free(fus[v]);
        free(ref), free(fus), free(tu), free(tf);
        fuse_free(&fg);
        ir_graph_free(g);
    }
    return 0;
}
