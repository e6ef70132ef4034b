/* Builds a small stage program by hand - what partition + memplan will
 * produce - and compiles it with llvm_emit into an executable:
 *
 *   codegen_emit_demo good|bad OUTDIR CC [LINK_ARGS...]
 *
 * writes OUTDIR/stage.o, stage.ll, stage (linked with CC and LINK_ARGS:
 * the test runtime and the host kernels) and layout.txt (offsets and
 * sizes, for test_llvm_emit.py to build the arena image and its numpy
 * oracle).  "good" runs, per microbatch slot,
 *     forward:  h = 0.5 * x @ W + b  (hk_gemm_f32); y = relu(h) (hk_unary);
 *               z = y @ W2 (hk_linear_f32, void result)
 *     backward: acc += z              (hk_binary)
 * after init: acc = 0.25 (hk_fill, f64 argument).  "bad" calls hk_unary
 * with an undefined dtype, so the kernel's error status must stop the
 * stage function and the runtime must name the call.  The program also
 * carries ABI 2 texts (ir_update, config; ir_train NULL) whose lengths
 * the test runtime reports. */
#include <stdio.h>
#include <string.h>

#include "hk.h"
#include "llvm_emit.h"

enum { M = 6, K = 8, N = 5, NSLOTS = 2 };

static int64_t align64(int64_t x) { return (x + 63) & ~(int64_t)63; }

static const LeExtern externs[] = {
    {"hk_fill", LE_I32, 5, {LE_I32, LE_F64, LE_PTR, LE_I64, LE_PTR}},
    {"hk_gemm_f32", LE_I32, 14,
     {LE_PTR, LE_PTR, LE_PTR, LE_I32, LE_PTR, LE_I64, LE_I64, LE_I64, LE_I32, LE_I32, LE_F32,
      LE_F32, LE_PTR, LE_PTR}},
    {"hk_unary", LE_I32, 6, {LE_I32, LE_I32, LE_PTR, LE_PTR, LE_I64, LE_PTR}},
    {"hk_binary", LE_I32, 13,
     {LE_I32, LE_I32, LE_PTR, LE_I32, LE_PTR, LE_I32, LE_PTR, LE_I32, LE_PTR, LE_PTR, LE_I32,
      LE_PTR, LE_PTR}},
    {"hk_linear_f32", LE_VOID, 7, {LE_PTR, LE_PTR, LE_PTR, LE_I64, LE_I64, LE_I64, LE_PTR}},
};

#define I32(v) {.kind = LE_ARG_I32, .i = (v)}
#define I64(v) {.kind = LE_ARG_I64, .i = (v)}
#define F32(v) {.kind = LE_ARG_F32, .f = (v)}
#define F64(v) {.kind = LE_ARG_F64, .f = (v)}
#define AR(o) {.kind = LE_ARG_ARENA, .off = (o)}
#define SL(o) {.kind = LE_ARG_SLOT, .off = (o)}
#define NUL {.kind = LE_ARG_NULL}
#define ERRBUF {.kind = LE_ARG_ERRBUF} /* the module's hetc_kernel_err */
#define DIMS(cnt, arr) {.kind = LE_ARG_I64S, .n = (cnt), .vals = (arr)}

int main(int argc, char **argv) {
    if (argc < 4 || (strcmp(argv[1], "good") && strcmp(argv[1], "bad"))) {
        fprintf(stderr, "usage: %s good|bad OUTDIR CC [LINK_ARGS...]\n", argv[0]);
        return 2;
    }
    int bad = strcmp(argv[1], "bad") == 0;
    const char *dir = argv[2];

    /* Arena: parameters first, then NSLOTS activation slots. */
    const int64_t fs = 4;
    int64_t w = 0, b = align64(w + K * N * fs), w2 = align64(b + N * fs);
    int64_t acc = align64(w2 + N * N * fs), slot_base = align64(acc + M * N * fs);
    int64_t x = 0, h = align64(x + M * K * fs), y = align64(h + M * N * fs);
    int64_t z = align64(y + M * N * fs), slot_bytes = align64(z + M * N * fs);
    int64_t arena = slot_base + NSLOTS * slot_bytes;

    static const int64_t dims_n[1] = {N}, dims_mn[2] = {M, N};
    const LeCall init[] = {{"hk_fill", 5, {I32(HK_F32), F64(0.25), AR(acc), I64(M * N), NUL}}};
    const LeCall fwd[] = {
        {"hk_gemm_f32", 14,
         {SL(x), AR(w), AR(b), I32(1), DIMS(1, dims_n), I64(M), I64(N), I64(K), I32(0), I32(0),
          F32(0.5), F32(1.0), SL(h), NUL}},
        {"hk_unary", 6, {I32(HK_RELU), I32(bad ? HK_UNDEF : HK_F32), SL(h), SL(y), I64(M * N), ERRBUF}},
        {"hk_linear_f32", 7, {SL(y), AR(w2), NUL, I64(M), I64(N), I64(N), SL(z)}},
    };
    const LeCall bwd[] = {
        {"hk_binary", 13,
         {I32(HK_ADD), I32(HK_F32), AR(acc), I32(2), DIMS(2, dims_mn), I32(HK_F32), SL(z),
          I32(2), DIMS(2, dims_mn), AR(acc), I32(2), DIMS(2, dims_mn), NUL}},
    };
    const LeFunc funcs[] = {{"init", 1, init}, {"forward", 3, fwd}, {"backward", 1, bwd}};
    /* 1F1B-shaped: microbatch 2 reuses slot 0 after B0 freed it. */
    const LeSched sched[] = {{'F', 0}, {'F', 1}, {'B', 0}, {'F', 2}, {'B', 1}, {'B', 2}};
    const int nsched = (int)(sizeof sched / sizeof sched[0]);
    LeProgram prog = {
        .stage = 0, .arena_bytes = arena, .slot_base = slot_base, .slot_bytes = slot_bytes,
        .nslots = NSLOTS, .nexterns = 5, .externs = externs, .nfuncs = 3, .funcs = funcs,
        .nsched = nsched, .sched = sched,
        /* ABI 2 texts: ir_train left NULL (emitted as ""). */
        .ir_update = "graph update {\n}\n", .config = "hetc-stage 1\nstage 0\nend\n",
    };

    char obj[4096], ll[4096], exe[4096], lay[4096];
    snprintf(obj, sizeof obj, "%s/stage.o", dir);
    snprintf(ll, sizeof ll, "%s/stage.ll", dir);
    snprintf(exe, sizeof exe, "%s/stage", dir);
    snprintf(lay, sizeof lay, "%s/layout.txt", dir);
    LeOptions opt = {.obj_path = obj, .ll_path = ll, .exe_path = exe, .cc = argv[3],
                     .nlink_args = argc - 4, .link_args = (const char *const *)argv + 4,
                     .opt_level = 2};
    IrError err = {{0}};
    if (le_emit_program(&prog, &opt, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }

    FILE *f = fopen(lay, "w");
    if (!f) {
        perror(lay);
        return 1;
    }
    fprintf(f, "M %d\nK %d\nN %d\nnslots %d\narena_bytes %lld\nslot_base %lld\n"
               "slot_bytes %lld\nW %lld\nb %lld\nW2 %lld\nacc %lld\nx %lld\nh %lld\n"
               "y %lld\nz %lld\nir_update_len %zu\nconfig_len %zu\nschedule",
            M, K, N, NSLOTS, (long long)arena, (long long)slot_base, (long long)slot_bytes,
            (long long)w, (long long)b, (long long)w2, (long long)acc, (long long)x,
            (long long)h, (long long)y, (long long)z, strlen(prog.ir_update),
            strlen(prog.config));
    for (int i = 0; i < nsched; i++) fprintf(f, " %c%d", sched[i].kind, sched[i].microbatch);
    fprintf(f, "\n");
    return fclose(f) ? 1 : 0;
}
