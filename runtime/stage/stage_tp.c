/* hetrt_tp_allreduce (issue 9; docs/STAGE_ABI.md): the sum over the
 * stage's TP group that lower_stage emits for every TpAllReduce node.
 *
 * One stage binary serves every TP rank of its stage: the graphs of all TP
 * ranks have the same structure (passes/tp_shard.h), only the parameter
 * slices differ, and those the runtime picks by ctx.tp_rank when it loads
 * parameters (stage_ckpt.c).  The `tp` / `tpshard` records are parsed in
 * stage_config.c.  This file is linked only into the host runtime
 * (hetrt_stage): a CUDA stage binary with TP does not link until the CUDA
 * backend gains its own (docs/CUDA.md). */
#include <stdio.h>
#include <string.h>

#include "stage_internal.h"

/* ------------------------------------------------------------ all-reduce */

int32_t hetrt_tp_allreduce(void *dst, const void *src, int64_t n) {
    StageRt *rt = hetrt_stage_rt;
    if (!rt) {
        rt_log_error("hetrt_tp_allreduce called outside hetrt_stage_main");
        return 1;
    }
    if (n < 0) return 1;
    size_t nb = (size_t)n * sizeof(float);
    char what[160];
    snprintf(what, sizeof what, "TP all-reduce of %lld floats (stage %d, tp rank %d, step %lld, "
             "microbatch %d)", (long long)n, rt->cfg.stage, rt->ctx.tp_rank,
             (long long)rt->step + 1, rt->micro);
    if (dst != src && stage_be_copy(rt, dst, src, nb)) return 1;
    if (rt->ctx.tp_size <= 1) return 0;
    if (stage_be_is_host())
        return rt_allreduce(&rt->ctx, rt->ctx.tp_comm, dst, (size_t)n, MPI_FLOAT, MPI_SUM, what);
    /* A device arena goes through host memory (the CPU-mediated path the
     * boundary transfers take too); a device collective would be faster. */
    float *h = stage_host_buf(rt, nb ? nb : 1);
    if (!h || stage_be_get(rt, h, dst, nb) ||
        rt_allreduce(&rt->ctx, rt->ctx.tp_comm, h, (size_t)n, MPI_FLOAT, MPI_SUM, what))
        return 1;
    return stage_be_put(rt, dst, h, nb);
}

