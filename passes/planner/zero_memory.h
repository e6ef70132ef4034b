/* Model-state memory per parameter under ZeRO: the one formula every
 * planner (cost_model.c for HAPT, alt_cost.c for the alternatives) uses for
 * the static part of a stage's memory, mem_p of HAPT Eq. 24
 * (mem_p + K mem_a <= mem_device) and M_params + M_grads + M_optim of
 * Zorse's memory model (seed 000 §4.3.5, Eq. 2).
 *
 * The seeds cite ZeRO (Rajbhandari et al., SC20; seed 000 ref. [38], seed
 * 002 ref. [30]) for the sharding; its §3.1 counts mixed-precision AdamW as
 * 2Ψ (fp16 weights) + 2Ψ (fp16 gradients) + KΨ optimizer states, K = 12
 * (fp32 master weights, momentum, variance), and its §5 / Figure 1 shards
 * over N_d data-parallel ranks:
 *   baseline   (2 + 2 + K) Ψ
 *   P_os       2Ψ + 2Ψ + KΨ / N_d        ZeRO-1
 *   P_os+g     2Ψ + (2 + K) Ψ / N_d      ZeRO-2
 *   P_os+g+p   (2 + 2 + K) Ψ / N_d       ZeRO-3
 * The fp32 master copy is part of the optimizer states, so every ZeRO stage
 * shards it.  hetc generalises the weight and gradient bytes to the
 * training dtype's size (w = g = dtype_bytes) and K to master + 8, where
 * the master copy is 4 bytes whenever the stage binaries keep one: in any
 * dtype narrower than fp32, and under ZeRO at fp32 too, because the update
 * then works on an fp32 slice of the parameters (codegen/memplan.h: one
 * zlen slice per parameter after m and v, runtime/stage/stage_sync.c
 * all-gathers it back).  Without ZeRO at fp32 the update writes the
 * weights in place and there is no master copy (K = 8).
 *
 * The planners search ZeRO 0..2 (the stage binaries run those); ZeRO-3 is
 * the paper's last line, for completeness. */
#ifndef HETC_ZERO_MEMORY_H
#define HETC_ZERO_MEMORY_H

/* Bytes per parameter on one device for weights + gradients + fp32 master
 * + fp32 Adam m and v, with training dtype of dtype_bytes, ZeRO stage `zero`
 * (0..3; outside that range clamped) over dp ranks (dp < 1 counts as 1).
 * Examples: bf16, zero 0: 16; bf16, zero 1, dp 4: 2 + 2 + 12/4 = 7;
 * fp32, zero 0: 16; fp32, zero 2, dp 4: 4 + (4 + 12)/4 = 8. */
double zero_state_bytes_per_param(double dtype_bytes, int zero, int dp);

#endif
