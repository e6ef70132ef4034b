/* LLVM codegen for stage programs (DESIGN §5).
 *
 * A stage program is already scheduled and memory-planned: each function
 * is an ordered list of calls whose arguments are constants or addresses
 * at fixed offsets in the arena (or in the current microbatch's
 * activation slot).  llvm_emit turns it into an LLVM module through the
 * LLVM C API - the stage functions, the schedule table, the HetcStageDesc
 * of stage_abi.h and a `main` calling the runtime entry point - verifies
 * it, writes an object file for the host and links the executable with
 * the system C compiler driver.
 *
 * Nothing here depends on the IR: partition / memplan lower the IR to
 * this description, so the codegen can be tested on hand-built programs.
 */
#ifndef HETC_LLVM_EMIT_H
#define HETC_LLVM_EMIT_H

#include <stdint.h>

#include "ir.h" /* IrError */

#define LE_MAX_ARGS 24 /* hetrt_cu_launch: 6 + FK_MAX_ARGS pointers */

/* C types of extern function parameters / results. */
typedef enum LeType { LE_VOID, LE_I32, LE_I64, LE_F32, LE_F64, LE_PTR } LeType;

/* A function the generated code may call (a hetrt or host-kernel entry).
 * Calls are checked against it; a result of LE_I32 is a status: nonzero
 * stops the stage function, which returns the call's 1-based index. */
typedef struct LeExtern {
    const char *name;
    LeType ret; /* LE_VOID or LE_I32 */
    int nparams;
    LeType params[LE_MAX_ARGS];
} LeExtern;

typedef enum LeArgKind {
    LE_ARG_I32,    /* i: int / enum constant */
    LE_ARG_I64,    /* i */
    LE_ARG_F32,    /* f */
    LE_ARG_F64,    /* f */
    LE_ARG_ARENA,  /* pointer: arena + off */
    LE_ARG_SLOT,   /* pointer: slot + off (current microbatch's activations) */
    LE_ARG_NULL,   /* null pointer */
    LE_ARG_I64S,   /* pointer to a constant i64 array (shapes): vals[0..n) */
    LE_ARG_BYTES,  /* pointer to constant raw bytes bytes[0..nbytes) (a constant
                      tensor's data: a private 64-byte aligned global) */
    LE_ARG_ERRBUF, /* pointer to the module's kernel error buffer hetc_kernel_err
                      (HETC_KERNEL_ERRLEN bytes, stage_abi.h): a failing kernel
                      writes its reason there, the runtime prints it */
} LeArgKind;

typedef struct LeArg {
    LeArgKind kind;
    int64_t i;
    double f;
    int64_t off;
    int n;
    const int64_t *vals;
    int64_t nbytes;     /* LE_ARG_BYTES */
    const void *bytes;  /* LE_ARG_BYTES */
} LeArg;

typedef struct LeCall {
    const char *fn;
    int nargs;
    LeArg args[LE_MAX_ARGS];
} LeCall;

typedef struct LeFunc {
    const char *name; /* emitted as stage_<name>, listed in HetcStageDesc */
    int ncalls;
    const LeCall *calls;
} LeFunc;

typedef struct LeSched {
    char kind; /* 'F' or 'B' */
    int32_t microbatch;
} LeSched;

typedef struct LeProgram {
    int stage;
    int64_t arena_bytes;
    int64_t slot_base, slot_bytes;
    int nslots;
    int nexterns;
    const LeExtern *externs;
    int nfuncs;
    const LeFunc *funcs;
    int nsched;
    const LeSched *sched;
    const char *entry; /* runtime entry point; NULL: "hetrt_stage_main" */
    /* ABI 2 (stage_abi.h): NUL-terminated texts stored in HetcStageDesc;
     * NULL is emitted as "". */
    const char *ir_train, *ir_update; /* canonical IR text of the stage's graphs */
    const char *config;               /* "hetc-stage 1" text, docs/STAGE_ABI.md */
    /* Generated kernels (codegen/fused_llvm.h): functions the module defines
     * itself, each also listed in externs so its calls are checked against
     * its signature; define(define_ctx, module, err) gives them bodies once
     * the stage functions are built, and the module then goes through
     * LLVM's O3 pipeline (loop vectorizer).  NULL: none. */
    int (*define)(const void *ctx, void *module, IrError *err);
    const void *define_ctx;
} LeProgram;

typedef struct LeOptions {
    const char *obj_path; /* required */
    const char *ll_path;  /* NULL: no .ll (--emit-llvm) */
    const char *exe_path; /* NULL: object only, no link */
    const char *cc;       /* NULL: "cc" (the driver may pass $CC) */
    int nlink_args;       /* libraries / flags after the object */
    const char *const *link_args;
    int opt_level;        /* 0..3 (codegen optimisation of the object) */
} LeOptions;

/* Emit (and if exe_path is set, link) the program.  0 on success; -1
 * with a message naming the function / call / argument at fault, the
 * LLVM verifier output, or the linker's stderr. */
int le_emit_program(const LeProgram *prog, const LeOptions *opt, IrError *err);

/* Run argv[0] (looked up in PATH) with argv, without a shell; collects
 * stderr into err on failure.  Exposed for the driver (link.c). */
int le_run_tool(const char *const *argv, IrError *err);

#endif
