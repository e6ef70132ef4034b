/* A fused elementwise kernel: the description the fusion pass builds
 * (codegen/fuse.c) and the code generators lower (fused_llvm.c: a host loop
 * nest split over hk_parallel_for, or an NVPTX kernel).  DESIGN §5, issue 15
 * item 2; docs/CODEGEN.md "Fused kernels".
 *
 * Iteration space: `dims` (the shape every output has, adjacent dims merged
 * where every input allows it).  Inputs are read with per-dim element
 * strides (0 where the input is broadcast), outputs are written contiguous.
 * The program is a list of instructions; register i is instruction i's
 * result (f32, or a bool for a loaded condition).
 *
 * Numerics are those of the unfused host kernels, instruction by instruction:
 * FK_ADD..FK_MIN round in float like hk_binary's f32 path; FK_UNARY computes
 * in double and rounds once like hk_unary (apply_f32, with hk_vmath.h's
 * exp / tanh / sigmoid algorithms emitted as the same IEEE operations in the
 * same order); FK_UGRAD is hk_unary_backward_f32's (float)(dy * f'(x, y)).
 * FK_RBF16 is hk_cast's f32 -> bf16 rounding (bf16-mixed's Casts, issue 17).
 * So a fused kernel's outputs equal the unfused chain's bit for bit (no
 * fast-math, no FMA contraction), for any thread count. */
#ifndef HETC_FUSED_KERNEL_H
#define HETC_FUSED_KERNEL_H

#include <stdint.h>
#include <stdio.h>

#define FK_MAX_RANK 8
#define FK_MAX_IN 12
#define FK_MAX_OUT 8
#define FK_MAX_ARGS 16 /* inputs + outputs: one call's arguments (LE_MAX_ARGS) */

typedef enum FkOp {
    FK_LOAD,  /* a: input index; f32, or bool for a condition */
    FK_CONST, /* imm */
    FK_ADD,   /* float a op b (hk_binary f32) */
    FK_SUB,
    FK_MUL,
    FK_DIV,
    FK_MAX, /* NaN-propagating, a first (hk_binary FMAX) */
    FK_MIN,
    FK_UNARY, /* sub: HkUnOp; (float) f((double)a) (hk_unary f32) */
    FK_UGRAD, /* sub: HkUnaryGrad; x = a, dy = b, y = c or -1 (hk_unary_backward_f32) */
    FK_WHERE, /* a (bool) ? b : c */
    FK_RBF16, /* a rounded to bf16 (hk_f32_to_bf16: nearest even, NaN quiet), kept as the f32
               * it widens to: Cast f32 -> bf16; Cast bf16 -> f32 is no instruction (the
               * register is reused) */
    FK_NOPS
} FkOp;

typedef struct FkInst {
    FkOp op;
    int sub;
    int a, b, c;
    float imm;
} FkInst;

typedef struct FkInput {
    int is_bool;                   /* 1: u8 bool data (Where's condition); else f32 */
    int is_bf16;                   /* 1: bf16 data, loaded widened to f32 (exact) */
    int64_t strides[FK_MAX_RANK];  /* elements per step of each iteration dim */
} FkInput;

typedef struct FkKernel {
    char name[48];                 /* the generated function's symbol */
    int rank;
    int64_t dims[FK_MAX_RANK];
    int nin, nout;
    FkInput in[FK_MAX_IN];
    int out[FK_MAX_OUT];           /* output k = register out[k], contiguous */
    unsigned char out_bf16[FK_MAX_OUT]; /* 1: stored as bf16 (its register is bf16-exact:
                                         * an FK_RBF16 or a bf16 load) */
    int ninst, cap;
    FkInst *inst;
} FkKernel;

/* Append an instruction; returns its register. */
int fk_push(FkKernel *k, FkOp op, int sub, int a, int b, int c, float imm);
int64_t fk_numel(const FkKernel *k);
/* Merge adjacent iteration dims that every input walks contiguously
 * (stride[d] == stride[d+1] * dims[d+1]); size-1 dims are dropped. */
void fk_collapse(FkKernel *k);
/* 1 if an instruction needs libm (erf, log, ...): host only */
int fk_needs_libm(const FkKernel *k);
/* 1 if an instruction is transcendental (smaller parallel grain) */
int fk_is_math(const FkKernel *k);
/* Human-readable listing:
 *   fused k: dims [4,64] in0 f32 strides [64,1] ... r2 = add r0 r1 ... out0 = r4 */
void fk_print(const FkKernel *k, FILE *f);
/* One-line check of the description (register references, input indices,
 * ops): 0, or -1 with the reason in why. */
int fk_check(const FkKernel *k, char *why, size_t n);
void fk_free(FkKernel *k);
const char *fk_op_name(FkOp op);

#endif
