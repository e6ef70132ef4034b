/* Where the launcher put this rank, said once at start-up on stderr: on a
 * real cluster (several hosts, mpirun --hostfile or srun) a rank on the
 * wrong node or GPU is otherwise only visible as a slow or failing job.
 * The local rank is the rank among the processes the MPI library reports
 * on the same node (rt_node_rank, MPI_COMM_TYPE_SHARED: the launcher's
 * notion of a node, which is what the CUDA backend picks its GPU by: its
 * device slot, the local rank unless ministages share devices, % visible
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

/* launch.sh's device_of (HETRT_DEVICE_OF): Zorse's ministages sharing
 * devices put a group's later stages on its first stage's devices, rank for
 * rank.  Each rank's device slot on its node is its mate's (the world rank
 * whose device it uses, itself when it has its own): the mate's position
 * among the node's ranks that have their own device, in world-rank order.
 * Without HETRT_DEVICE_OF every rank is its own mate and the slot is the
 * local rank, the placement before groups ran. */
int stage_device_slot(const StageRt *rt, int *slot, int *mate) {
    int me = rt->ctx.world_rank, n = rt->ctx.world_size;
    *slot = rt->ctx.solo ? 0 : -1; /* rt.h: a one-rank world without MPI shares nothing */
    *mate = me;
    if (rt->ctx.solo)
        return 0;
    const char *env = getenv("HETRT_DEVICE_OF");
    int *of = NULL;
    if (env && *env) {
        of = malloc((size_t)n * sizeof *of);
        if (!of) return -1;
        const char *c = env;
        for (int i = 0; i <= n; i++) {
            char *end;
            long v = strtol(c, &end, 10);
            if (i == n ? end != c : end == c || v < 0 || v >= n) {
                rt_log_error("HETRT_DEVICE_OF (launch.sh's device_of): %s at entry %d: expected "
                             "one world rank in [0, %d) for each of the %d ranks",
                             i == n ? "more entries than ranks" : "no rank or one out of range",
                             i, n, n);
                free(of);
                return -1;
            }
            if (i < n) of[i] = (int)v;
            c = end;
        }
        *mate = of[me];
        if (of[*mate] != *mate) {
            rt_log_error("HETRT_DEVICE_OF: rank %d uses rank %d's device, which uses rank %d's: "
                         "a rank shares the device of one that has its own", me, *mate,
                         of[*mate]);
            free(of);
            return -1;
        }
    }
    MPI_Comm node;
    int nn = 0, rc = -1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node) !=
        MPI_SUCCESS) {
        rt_log_error("MPI_Comm_split_type (ranks of this node) failed");
        free(of);
        return -1;
    }
    MPI_Comm_size(node, &nn);
    int *w = malloc((size_t)nn * sizeof *w);
    if (w && MPI_Allgather(&me, 1, MPI_INT, w, 1, MPI_INT, node) == MPI_SUCCESS) {
        int k = 0;
        for (int i = 0; i < nn && rc; i++) {
            if (w[i] == *mate) {
                *slot = k;
                rc = 0;
            }
            k += !of || of[w[i]] == w[i];
        }
        if (rc)
            rt_log_error("rank %d shares the device of rank %d (ministages sharing devices), "
                         "which the launcher put on another node: launch.sh places a group's "
                         "ranks on its mesh's node", me, *mate);
    }
    MPI_Comm_free(&node);
    free(w);
    free(of);
    return rc;
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
    char device[200], shared[96] = "";
    int slot = -1, mate = rt->ctx.world_rank;
    stage_device_slot(rt, &slot, &mate);
    if (mate != rt->ctx.world_rank)
        snprintf(shared, sizeof shared, " (rank %d's device: ministages sharing devices)", mate);
    if (stage_be_is_host())
        snprintf(device, sizeof device, "host CPU, %s kernel threads; device slot %d%s",
                 env_or("HETC_THREADS", "all"), slot, shared);
    else
        snprintf(device, sizeof device, "GPU %d mod visible GPUs%s", slot, shared);
    fprintf(stderr,
            "[hetrt rank %d] stage %d dp %d/%d tp %d/%d on host %s: local rank %d of %d%s; "
            "CUDA_VISIBLE_DEVICES=%s; device %s\n",
            rt->ctx.world_rank, rt->cfg.stage, rt->ctx.dp_rank, rt->ctx.dp_size,
            rt->ctx.tp_rank, rt->ctx.tp_size, host, local, nlocal, launcher,
            env_or("CUDA_VISIBLE_DEVICES", "unset"), device);
    fflush(stderr);
}
