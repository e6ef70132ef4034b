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
 * runtime only includes this header.  Any change here must be mirrored in
 * the struct types llvm_emit.c declares (le_abi_types) - both sides are
 * checked by tests/codegen, which links generated code against a C
 * runtime compiled from this header.
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
} HetcStageDesc;

#define HETC_STAGE_ABI_VERSION 1

/* Runtime entry point called by the generated main. */
int hetrt_stage_main(int argc, char **argv, const HetcStageDesc *stage);

#endif
