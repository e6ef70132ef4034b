/* Where the launcher put this rank, said once at start-up on stderr: on a
 * real cluster (several hosts, mpirun --hostfile or srun) a rank on the
 * wrong node or GPU is otherwise only visible as a slow or failing job.
 * The local rank is the rank among the processes the MPI library reports
 * on the same node (rt_node_rank, MPI_COMM_TYPE_SHARED: the launcher's notion of a node,
 * which is what the CUDA backend picks its GPU by: local rank % visible
 * GPUs, runtime/cuda/stage_backend_cuda.c); the launcher's own variables
 * are printed beside it so a mismatch shows. */
#include "stage_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *env_or(const char *name, const char *dflt) {
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

void stage_log_binding(const StageRt *rt) {
    int local, nlocal;
    rt_node_rank(&rt->ctx, &local, &nlocal); /* -1 of -1 when MPI cannot tell */
    char host[256] = "?";
    if (gethostname(host, sizeof host - 1)) strcpy(host, "?");
    char launcher[160] = "";
    const char *ompi = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const char *slurm = getenv("SLURM_LOCALID");
    if (rt->ctx.solo) /* rt.h: a one-rank world no launcher started */
        snprintf(launcher, sizeof launcher, ", no launcher: one process without MPI");
    else if (ompi)
        snprintf(launcher, sizeof launcher, ", mpirun local rank %s", ompi);
    else if (slurm)
        snprintf(launcher, sizeof launcher, ", slurm node %s local id %s",
                 env_or("SLURMD_NODENAME", "?"), slurm);
    char device[160];
    if (stage_be_is_host())
        snprintf(device, sizeof device, "host CPU, %s kernel threads",
                 env_or("HETC_THREADS", "all"));
    else
        snprintf(device, sizeof device, "GPU %d mod visible GPUs", local);
    fprintf(stderr,
            "[hetrt rank %d] stage %d dp %d/%d tp %d/%d on host %s: local rank %d of %d%s; "
            "CUDA_VISIBLE_DEVICES=%s; device %s\n",
            rt->ctx.world_rank, rt->cfg.stage, rt->ctx.dp_rank, rt->ctx.dp_size,
            rt->ctx.tp_rank, rt->ctx.tp_size, host, local, nlocal, launcher,
            env_or("CUDA_VISIBLE_DEVICES", "unset"), device);
    fflush(stderr);
}
