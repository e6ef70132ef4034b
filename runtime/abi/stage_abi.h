/* The contract between a generated stage binary and the runtime (hetrt).
 *
 * llvm_emit.c builds these structs as constant globals inside each stage
 * object, and the generated `main` hands them to the runtime:
 *
 *     int main(int argc, char **argv) {
 *         return hetrt_stage_main(argc, argv, &hetc_stage);
 *     }
 *
 * The layout is plain C (no pointers into the compiler, no IR), so the
 * runtime only includes this header (it lives in runtime/abi/: the compiler's
 * codegen/ includes it from there, never the other way round).  Any change
 * here must be mirrored in the struct types llvm_emit.c declares
 * (le_abi_types) - both sides are checked by tests/codegen, which links
 * generated code against a C runtime compiled from this header.  The
 * entries the generated code calls are rows of stage_abi.def, from which
 * both this header's prototypes and the compiler's declarations come.
 */
#ifndef HETC_STAGE_ABI_H
#define HETC_STAGE_ABI_H

#include <stdint.h>

/* A generated stage function: straight-line calls on `arena` (parameters,
 * gradients, optimizer state: fixed offsets) and `slot` (the activation
 * slot of the microbatch being run: fixed offsets inside the slot).
 * Returns 0, or the 1-based index of the first call that returned nonzero
 * (so the runtime can name the failing call from HetcStageFn.calls). */
typedef int32_t (*HetcStageFnPtr)(void *arena, void *slot);

typedef struct HetcStageFn {
    const char *name;        /* "forward", "backward", "update", ... */
    HetcStageFnPtr fn;
    int32_t ncalls;
    const char *const *calls; /* callee name of each call, for error reports */
} HetcStageFn;

/* One action of the stage's pipeline schedule. */
enum { HETC_SCHED_F = 'F', HETC_SCHED_B = 'B' };
typedef struct HetcSchedEntry {
    int32_t kind;       /* HETC_SCHED_F or HETC_SCHED_B */
    int32_t microbatch; /* index within the step; slot = microbatch % nslots */
} HetcSchedEntry;

typedef struct HetcStageDesc {
    int32_t abi_version; /* HETC_STAGE_ABI_VERSION */
    int32_t stage;       /* stage index in the plan */
    int64_t arena_bytes; /* total bytes, slots included */
    int64_t slot_base;   /* offset of activation slot 0 in the arena */
    int64_t slot_bytes;  /* bytes per activation slot */
    int32_t nslots;      /* K_i: the schedule's in-flight bound */
    int32_t nfuncs;
    const HetcStageFn *funcs;
    int32_t nsched;
    const HetcSchedEntry *sched;
    /* ABI 2: what the runtime needs besides the calls (NUL-terminated).
     * ABI 3: the IR texts are "" unless a hetrt_node call runs a node of
     * that graph; the runtime never reads them (the node interpreter,
     * interp/, does: runtime/abi/stage_interp.h). */
    const char *ir_train;  /* the stage's train graph, canonical IR text (all const data inline) */
    const char *ir_update; /* the stage's update graph, canonical IR text */
    const char *config;    /* the stage config, "hetc-stage 1" text (docs/STAGE_ABI.md) */
} HetcStageDesc;

/* 3: IR texts only for interpreted graphs, hetrt_node defined by the
 * interpreter library, `shape` in param records (docs/STAGE_ABI.md). */
#define HETC_STAGE_ABI_VERSION 4

/* ---- the hetrt entries generated stage functions call (runtime/stage/stage_exec.c).
 * Every one returns 0 or nonzero (status: the generated function stops and
 * returns the call's 1-based index; the runtime names the call).
 *
 * Buffer references inside `bufs` of hetrt_node: one int64 per node input
 * then per node output, (region << 56) | offset, with region
 *   HETC_BUF_NONE  (0): omitted optional input / unused output
 *   HETC_BUF_ARENA (1): arena + offset (parameters, gradients, optimizer
 *                       state, scratch)
 *   HETC_BUF_SLOT  (2): slot + offset (this microbatch's activation slot)
 *   HETC_BUF_CONST (3): the IR value's own constant data (offset unused)
 */
enum { HETC_BUF_NONE = 0, HETC_BUF_ARENA = 1, HETC_BUF_SLOT = 2, HETC_BUF_CONST = 3 };
#define HETC_BUF(region, off) (((int64_t)(region) << 56) | (int64_t)(off))
enum { HETC_GRAPH_TRAIN = 0, HETC_GRAPH_UPDATE = 1 };

/* The entries themselves, one row each in stage_abi.def (their comments
 * are there): the compiler declares the same rows (codegen/stage_externs.c),
 * so the two sides cannot drift apart. */
#define ABI_I32(name) int32_t name
#define ABI_I64(name) int64_t name
#define ABI_F64(name) double name
#define ABI_PTR(type, name) type *name
#define HETC_ABI_RET_I32 int32_t
#define HETC_ABI_RET_VOID void
#define HETC_ABI_ENTRY(set, ret, name, params) HETC_ABI_RET_##ret name params;
#include "stage_abi.def"
#undef ABI_I32
#undef ABI_I64
#undef ABI_F64
#undef ABI_PTR
#undef HETC_ABI_RET_I32
#undef HETC_ABI_RET_VOID

/* Direct kernel calls (codegen/lower_node.c) pass this buffer, defined by
 * the generated module when some call uses it, as the kernels' `err`: a
 * kernel that returns nonzero has written its reason here (the runtime
 * prints it with the failing call; declare it weak). */
#define HETC_KERNEL_ERRLEN 256
extern char hetc_kernel_err[HETC_KERNEL_ERRLEN];

/* Runtime entry point called by the generated main. */
int hetrt_stage_main(int argc, char **argv, const HetcStageDesc *stage);

#endif
