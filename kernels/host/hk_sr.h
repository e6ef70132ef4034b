/* Stochastic rounding f32 -> bf16 (hetc compile / train --bf16-rounding
 * stochastic; docs/TRAINING.md), one definition for the host kernels
 * (hk_bf16.h hk_bf16_round_sr) and the CUDA kernel (kernels/cuda/cast.cu
 * hkc_round_bf16_sr): both draw the same bits for the same (key, step, i). */
#ifndef HETC_HK_SR_H
#define HETC_HK_SR_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define HK_SR_FN __host__ __device__ static inline
#else
#define HK_SR_FN static inline
#endif

/* f rounds away from zero with probability d / 2^16,
 * d its dropped 16 bits, else toward zero -- llm.c's rule (round up iff
 * d > a uniform 16-bit threshold r), so E[bf16(f)] = f exactly and a bf16
 * value stays itself (d = 0).  NaN stays a quiet NaN; inf stays inf; the
 * largest finite values may round up to inf, as in llm.c. */
HK_SR_FN uint16_t hk_f32_to_bf16_sr(float f, uint32_t r16) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    uint32_t up = (x & 0xffffu) > r16; /* adding 0x10000 to the bits grows the magnitude */
    return (uint16_t)((x >> 16) + up);
}

/* The threshold of element i: a counter-based hash of (key, step, i), so
 * every rank, engine and resumed run draws the same bits with no state:
 * key names the tensor (passes/stochastic_round.c: a hash of a
 * parameter's name, 1 .. 2^31 - 1), step is the
 * 0-based optimizer step being run (a step's forward and backward copies
 * of a weight are the same bits; the next step draws new ones).  Chris
 * Wellons' lowbias32 finalizer mixes; i's multiplier is odd, so for one
 * (key, step) the first 2^32 indices get distinct hash inputs. */
HK_SR_FN uint32_t hk_sr_mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
HK_SR_FN uint32_t hk_sr_seed(int64_t key, int64_t step) {
    return hk_sr_mix32((uint32_t)key ^ hk_sr_mix32((uint32_t)step ^ 0x5bd1e995u) ^
                       hk_sr_mix32((uint32_t)((uint64_t)step >> 32) + 0x68e31da4u));
}
HK_SR_FN uint32_t hk_sr_threshold(uint32_t seed, int64_t i) {
    uint32_t lo = (uint32_t)i, hi = (uint32_t)((uint64_t)i >> 32);
    return hk_sr_mix32((lo * 0x9e3779b9u) ^ seed ^ (hi * 0x85ebca6bu)) >> 16;
}

#endif
