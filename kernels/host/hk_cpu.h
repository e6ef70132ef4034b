/* Which vector ISA the generated (fused) kernels may use on this CPU
 * (kernels/host/hk_cpu.c).  The compiler emits each fused loop three times
 * (x86-64 baseline, AVX2, AVX-512F: codegen/fused_llvm.c) because a stage
 * binary is compiled for a generic CPU and may run on another node; the
 * kernel picks one per call with this, as the hand-written kernels do with
 * target_clones.  The three compute the same bits (no FMA contraction, the
 * same IEEE operations per element), so the choice changes only speed.
 *
 * 0: baseline, 1: AVX2, 2: AVX-512F.  Env HETC_VECTOR_ISA=N caps it (tests
 * run the baseline this way on any machine). */
#ifndef HETC_HK_CPU_H
#define HETC_HK_CPU_H

int hk_vector_isa(void);

#endif
