/* Device timing of one layer's training graph for `hetc profile`
 * (driver/cmd_profile.c, docs/CUDA.md "hetc profile").
 *
 * The graph is a one-layer stage of partition_stage: forward nodes (phase
 * fwd) then backward nodes (phase bwd) of one microbatch.  Every value gets
 * its own device buffer (no arena: the layer is timed, not its memory
 * plan); graph inputs, parameters and optimizer states are filled with a
 * deterministic pattern (token ids and targets 0, floats small), CONSTs are
 * the executor's cached copies.  Each node runs through cudaexec_call_node
 * exactly as a stage binary runs it (outputs zeroed first, as hetrt_node
 * does); cudaEvents on the executor's stream bracket the forward and the
 * backward nodes.  Plain C header: no CUDA types, so the driver includes it
 * only in a build with the CUDA backend (HETC_PROFILE_CUDA). */
#ifndef HETC_CUDAPROF_H
#define HETC_CUDAPROF_H

#include <stddef.h>
#include <stdint.h>

#include "ir.h"

typedef struct CudaProfResult {
    double t_f, t_b;       /* seconds, median over the timed repetitions */
    double t_f_min, t_b_min;
    double dev_bytes;      /* device bytes of the layer's buffers (every value) */
    int64_t fallbacks;     /* nodes that ran on the host executor, per repetition */
    int reps;
} CudaProfResult;

/* Number of CUDA devices (>= 1) and the name of device `ordinal` in
 * name[cap]; 0 with err = "no CUDA device (REASON)" when there is none. */
int cudaprof_probe(int ordinal, char *name, size_t cap, IrError *err);

/* Time g's fwd and bwd nodes on device `ordinal`: `warmup` untimed runs,
 * then `reps` timed ones.  Errors name the node. */
int cudaprof_layer(IrGraph *g, int ordinal, int warmup, int reps, CudaProfResult *out,
                   IrError *err);

#endif
