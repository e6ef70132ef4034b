/* LLVM lowering of fused elementwise kernels (fused_kernel.h).
 *
 * Host: fk_emit_host defines, in an existing module,
 *     void @NAME(i8* in0, ..., i8* out0, ...)
 * which packs its pointers and calls hk_parallel_for(numel, grain,
 * @NAME.rows, ctx) (kernels/host/hk_parallel.h); @NAME.rows(ctx, lo, hi)
 * walks elements [lo, hi) row by row with an inner loop over the last
 * iteration dim (stride 0 / 1 / constant per input) that LLVM's loop
 * vectorizer turns into vector code.  Chunks depend only on numel and the
 * grain, and each element is computed by the same scalar program, so the
 * results do not depend on the thread count or the vector width.
 *
 * NVPTX: fk_ptx builds a module for nvptx64-nvidia-cuda (sm_80, PTX 7.0)
 * with one kernel per description,
 *     void @NAME(i8* in0, ..., i8* out0, ...)   (nvvm.annotations "kernel")
 * a grid-stride loop over the elements (thread index from
 * llvm.nvvm.read.ptx.sreg.*), the same scalar program (exp / tanh /
 * sigmoid as the same double-precision IEEE operations: no libdevice), and
 * returns the PTX text.  Kernels that need libm (erf, log, ...) are refused.
 */
#ifndef HETC_FUSED_LLVM_H
#define HETC_FUSED_LLVM_H

#include "fused_kernel.h"
#include "ir.h"

/* mod: an LLVMModuleRef (void * so callers need no LLVM headers).  If the
 * module already declares @NAME (the stage program's extern list does),
 * that declaration gets the body. */
int fk_emit_host(void *mod, const FkKernel *k, IrError *err);
/* PTX text (malloc'd) of n kernels in one module; ll: if non-NULL, the
 * LLVM IR text too (malloc'd). */
int fk_ptx(const FkKernel *const *ks, int n, const char *cpu, char **ptx, char **ll,
           IrError *err);
/* Run LLVM's default<O{level}> pipeline (loop vectorizer on) on mod for
 * target machine tm (LLVMTargetMachineRef). */
int fk_optimize(void *mod, void *tm, int level, IrError *err);

#endif
