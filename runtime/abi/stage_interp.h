/* What the stage runtime (runtime/stage) hands the node interpreter
 * library (interp/: hetrt_interp, hetrt_interp_cuda) of a stage binary whose
 * program still calls hetrt_node (docs/STAGE_ABI.md "Nodes": fallback nodes,
 * `hetc compile --interpret-nodes`, the CUDA backend).
 *
 * The runtime knows nothing of the IR: it does not parse the descriptor's
 * ir_train / ir_update texts and does not run nodes.  The interpreter
 * library does, and defines hetrt_node itself.  A binary without hetrt_node
 * calls is linked without that library (driver/compile_emit.c picks the link
 * list), so the runtime references the two entries below weakly: absent,
 * they are NULL and the runtime skips them.  (A static archive member is
 * pulled in by the program's strong reference to hetrt_node, which lives in
 * the same object file as these entries.) */
#ifndef HETC_STAGE_INTERP_H
#define HETC_STAGE_INTERP_H

#include <stddef.h>
#include <stdint.h>

#include "stage_abi.h"

typedef struct HetrtInterpEnv {
    const HetcStageDesc *desc; /* ir_train / ir_update: the graphs hetrt_node indexes */
    int stage;
    int tp_rank;               /* the texts are TP rank 0's: vocab_start is shifted by it */
    void *arena;               /* the rank's arena (device memory on a device backend) */
    size_t arena_bytes;
    /* The backend's kernel context: NULL on the host backend, the
     * kernels/cuda HkcCtx (stream, cuBLASLt) on the CUDA backend: the
     * interpreter's kernels run on the runtime's stream. */
    void *kernel_ctx;
} HetrtInterpEnv;

/* Parse the descriptor's graphs and make them TP rank env->tp_rank's; set up
 * the backend's executor.  0, or -1 with a message in err. */
int hetrt_interp_open(const HetrtInterpEnv *env, char *err, size_t errlen);
/* Free what hetrt_interp_open made (before the arena goes). */
void hetrt_interp_close(void);

#endif
