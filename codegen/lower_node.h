/* Lowering of one IR node to direct kernel calls (DESIGN §5, issue 15 item 1).
 *
 * One table entry per IrOp (codegen/lower_node.c, training ops in
 * lower_node_train.c): the same knowledge as the host executor's adapter of
 * that op (codegen/hostexec_ops.c), applied at COMPILE time: static shapes,
 * normalized axes, attribute values and small constant operands (axes,
 * starts, repeats) become constant arguments of plain-C kernel entry points
 * (kernels/host hk.h, hk_train.h, hk_entry.h), so the generated code calls
 * e.g. hk_linear_f32(arena+A, arena+B, NULL, M, K, N, slot+C) instead of
 * asking the runtime to interpret the node.
 *
 * Every entry checks what the adapter checks; a node it cannot lower (an op
 * without an entry, a shape or operand it does not handle, a rank-dependent
 * attribute) is left to the caller's hetrt_node fallback, with the reason.
 * Every kernel called overwrites all of its outputs (the executor's adapters
 * get zeroed outputs; an entry that would rely on that zeroes first).
 */
#ifndef HETC_LOWER_NODE_H
#define HETC_LOWER_NODE_H

#include <stddef.h>

#include "ir.h"
#include "llvm_emit.h"

/* Growable list of calls. */
typedef struct LnOut {
    LeCall *calls;
    int n, cap;
} LnOut;

/* Where a value lives: 0 and *a set to a pointer argument (arena / slot
 * offset), 1 for a constant (its data becomes constant bytes in the
 * binary), -1 when it has no buffer. */
typedef int (*LnLocFn)(void *u, const IrValue *v, LeArg *a);

typedef struct LnCtx {
    IrNode *n;
    LnLocFn loc;
    void *u;
    int tp;     /* the stage's TP degree: > 1 leaves rank-dependent ops interpreted */
    LnOut *out; /* calls are appended here */
    int bad;    /* set by ln_ptr when a value has no buffer / unreadable data */
    char why[160]; /* lower_node returned 0: the reason */
} LnCtx;

/* 1: the node's calls were appended to c->out; 0: no lowering (c->why says
 * why; nothing appended): the caller emits hetrt_node. */
int lower_node(LnCtx *c);
/* 1 if op has a lowering entry (table completeness tests) */
int lower_node_has_op(IrOp op);

/* The kernel entry points lowered calls use (hk.h, hk_train.h, hk_entry.h,
 * plus hetrt_copy / hetrt_zero from stage_abi.h, which the caller's hetrt
 * externs declare). */
extern const LeExtern lower_node_externs[];
extern const int lower_node_nexterns;

/* The CUDA backend's table (lower_node_cuda.c): the same contract as
 * lower_node, calls of runtime/cuda's hetrt_cu_* entries (stage_abi.h). */
int lower_node_cuda(LnCtx *c);
int lower_node_cuda_has_op(IrOp op);
extern const LeExtern lower_node_cuda_externs[];
extern const int lower_node_cuda_nexterns;

/* What code generation knows of a stage backend (docs/CODEGEN.md "Adding a
 * backend"): one row per backend, defined beside its lowering table; the
 * driver's backend table (driver/backends.c) adds how its binaries link. */
typedef struct LowerBackend {
    const char *name;            /* hetc compile --backend=NAME */
    int (*lower_node)(LnCtx *c); /* direct calls for one node (lower_node's contract) */
    /* the runtime entries its lowering calls besides lower_node_externs and
     * the stage's hetrt list: its set of runtime/abi/stage_abi.def */
    const LeExtern *externs;
    int nexterns;
    int fuse; /* LOWER_FUSE_*: which generated kernels (codegen/fuse.h) may run on its arena */
} LowerBackend;
enum {
    LOWER_FUSE_NONE = 0,
    LOWER_FUSE_HOST = 1,   /* host loops, on unless --no-fuse */
    LOWER_FUSE_DEVICE = 2, /* NVPTX kernels (fused_llvm.h fk_ptx) launched by the runtime
                            * (hetrt_cu_launch), only with --fuse */
};
extern const LowerBackend lower_backend_host; /* lower_node.c */
extern const LowerBackend lower_backend_cuda; /* lower_node_cuda.c */

/* Free what a call owns (LE_ARG_I64S arrays, LE_ARG_BYTES copies). */
void lower_call_free(LeCall *c);

/* ---- shared by lower_node.c and lower_node_train.c */
typedef int (*LnFn)(LnCtx *c, int k);
LeCall *ln_push(LnCtx *c, const char *fn);
void ln_ptr(LnCtx *c, LeCall *k, const IrValue *v); /* value's buffer (NULL value: null) */
void ln_i32(LeCall *k, int64_t v);
void ln_i64(LeCall *k, int64_t v);
void ln_f32(LeCall *k, double v);
void ln_f64(LeCall *k, double v);
void ln_null(LeCall *k);
void ln_i64s(LeCall *k, int n, const int64_t *vals); /* n == 0: a one-element array {0} */
void ln_shape(LeCall *k, const IrValue *v);          /* i32 rank, i64[] dims */
int ln_fail(LnCtx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* a constant integer operand (axes, starts, ...) read at compile time:
 * count, or -1 (not a constant / not integers / more than max) */
int ln_const_ints(LnCtx *c, int i, int64_t *out, int max);
int ln_norm_axis(int64_t a, int rank, int *out); /* 0 or -1 */
int64_t ln_numel(const IrValue *v);
int ln_has_in(const LnCtx *c, int i);
int ln_has_out(const LnCtx *c, int i);
/* AdamW's checks and arguments (P m v G, n, lr, step, clip_scale, beta1,
 * beta2, eps, weight_decay, P' m' v'), the host and the device lowering
 * alike; f32_only also requires f32 tensors.  NULL after ln_fail. */
LeCall *ln_adamw_args(LnCtx *c, const char *fn, int f32_only);
/* A unary op's kernel enum: Gelu's `approximate` picks HK_GELU_TANH; 0
 * after ln_fail (an approximation the kernels lack), else 1. */
int ln_unary_op(LnCtx *c, int *op);
/* A Cast with `sr` (--bf16-rounding stochastic): hetrt_round_bf16_sr, host
 * and device alike (the runtime supplies the step). */
int lower_cast_sr(LnCtx *c);
/* 1 when x and y are planned at the same bytes (a view of the memory plan):
 * a copy of one into the other is left out */
int ln_same_buffer(LnCtx *c, const IrValue *x, const IrValue *y);
/* Slice's starts, ends, axes, steps (constant operands i0..i0+3) resolved
 * for data of shape xs by ONNX's clamping rules; 0, or -1 when not constant
 * or invalid */
int ln_resolve_slice(LnCtx *c, int i0, const IrShape *xs, int64_t *start, int64_t *step,
                     int64_t *yd);
LnFn lower_node_train_fn(IrOp op, int *k); /* lower_node_train.c's table */

#endif
