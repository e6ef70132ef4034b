/* The solo transport (runtime/rt.h): a process no launcher started whose
 * world is one rank runs without MPI.  Run directly, never under mpirun:
 *   - rt_launched() reads the launcher variables (set and cleared here);
 *   - rt_init of a one-rank world is solo and leaves MPI uninitialised;
 *     every collective is a no-op on one rank's data or a copy (gathers,
 *     the ZeRO all-gather), checked against the data itself; a send, a
 *     receive or a redistribution is an error, not a hang or a crash;
 *   - rt_init of a two-rank world (DP 2, or two stages, or TP 2) fails
 *     naming launch.sh, and MPI is still not initialised after it. */
#define _POSIX_C_SOURCE 200809L
#include "rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fails;
#define CHECK(c)                                                   \
    do {                                                           \
        if (!(c)) {                                                \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c); \
            fails++;                                               \
        }                                                          \
    } while (0)

static const char *LAUNCHER_VARS[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                                      "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS"};

static void clear_launcher(void) {
    for (size_t i = 0; i < sizeof LAUNCHER_VARS / sizeof *LAUNCHER_VARS; i++)
        unsetenv(LAUNCHER_VARS[i]);
}

static int mpi_up(void) {
    int init = 0;
    MPI_Initialized(&init);
    return init;
}

static void launched(void) {
    clear_launcher();
    CHECK(!rt_launched());
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1); /* mpirun -np 1: a launcher all the same */
    CHECK(rt_launched());
    clear_launcher();
    setenv("PMIX_RANK", "0", 1);
    CHECK(rt_launched());
    clear_launcher();
    setenv("PMI_RANK", "0", 1);
    CHECK(rt_launched());
    clear_launcher();
    setenv("SLURM_PROCID", "0", 1); /* a batch script's shell: one task */
    setenv("SLURM_NTASKS", "1", 1);
    CHECK(!rt_launched());
    setenv("SLURM_NTASKS", "3", 1);
    CHECK(rt_launched());
    setenv("SLURM_STEP_NUM_TASKS", "1", 1); /* the step's count wins over the job's */
    CHECK(!rt_launched());
    clear_launcher();
}

static void collectives(RtContext *c) {
    float f[5] = {1, -2, 3.5f, 4, 1e-3f}, want[5];
    memcpy(want, f, sizeof f);
    CHECK(rt_allreduce(c, MPI_COMM_WORLD, f, 5, MPI_FLOAT, MPI_SUM, "sum") == 0);
    CHECK(memcmp(f, want, sizeof f) == 0);
    CHECK(rt_dp_allreduce_f32(c, f, 5, 0.5f, "mean") == 0); /* the scale still applies */
    for (int i = 0; i < 5; i++) CHECK(f[i] == want[i] * 0.5f);
    memcpy(f, want, sizeof f);
    CHECK(rt_bcast(c, MPI_COMM_WORLD, f, sizeof f, 0, "bcast") == 0);
    CHECK(memcmp(f, want, sizeof f) == 0);
    CHECK(rt_barrier(c, "barrier") == 0);
    CHECK(rt_dp_reduce_scatter_f32(c, f, 5, "rs") == 0);
    CHECK(memcmp(f, want, sizeof f) == 0);
    float full[5] = {0};
    CHECK(rt_dp_allgather_f32(c, f, full, 5, "ag") == 0);
    CHECK(memcmp(full, want, sizeof f) == 0);
    double d[3] = {1.5, 2.5, -3}, dall[3] = {0};
    CHECK(rt_gather(c, d, 3, MPI_DOUBLE, dall, 0, "gather") == 0);
    CHECK(memcmp(d, dall, sizeof d) == 0);
    long long l[2] = {7, -9}, lall[2] = {0};
    CHECK(rt_gather(c, l, 2, MPI_LONG_LONG, lall, 0, "gather ll") == 0);
    CHECK(lall[0] == 7 && lall[1] == -9);
    unsigned char b[4] = {1, 2, 3, 4}, ball[6] = {0};
    int counts[1] = {4}, displs[1] = {2};
    CHECK(rt_gatherv(c, b, 4, MPI_BYTE, ball, counts, displs, 0, "gatherv") == 0);
    CHECK(ball[0] == 0 && ball[1] == 0 && memcmp(ball + 2, b, 4) == 0);
    MPI_Comm comm = MPI_COMM_WORLD;
    CHECK(rt_comm_split(c, 0, 0, &comm, "split") == 0 && comm == MPI_COMM_NULL);
    int local = -5, nlocal = -5;
    CHECK(rt_node_rank(c, &local, &nlocal) == 0 && local == 0 && nlocal == 1);
    /* no peer: errors (the messages go to stderr) */
    CHECK(rt_send(c, f, 4, 0, 1, "send") != 0);
    CHECK(rt_recv(c, f, 4, 0, 1, "recv") != 0);
    CHECK(rt_redistribute_rows(c, 0, f, 0, full, 1, 4, 1, "rows") != 0);
    RtSendQueue q = {0};
    CHECK(rt_redistribute_rows_isend(c, 0, f, 0, 1, 4, 1, "rows", &q) != 0);
    rt_send_queue_free(&q);
}

int main(int argc, char **argv) {
    launched();
    clear_launcher();

    RtContext c;
    CHECK(rt_init(&c, &argc, &argv, 1, (int[]){1}) == 0);
    CHECK(c.solo == 1 && !mpi_up());
    CHECK(c.world_rank == 0 && c.world_size == 1 && c.nstages == 1 && c.stage == 0);
    CHECK(c.dp_rank == 0 && c.dp_size == 1 && c.tp_rank == 0 && c.tp_size == 1);
    CHECK(c.dp_comm == MPI_COMM_NULL && c.tp_comm == MPI_COMM_NULL);
    CHECK(rt_stage_rank(&c, 0, 0) == 0);
    collectives(&c);
    CHECK(!mpi_up());
    CHECK(rt_finalize(&c) == 0);
    CHECK(rt_init_tp(&c, &argc, &argv, 1, (int[]){1}, 0, 1) == 0 && c.solo);
    CHECK(rt_finalize(&c) == 0);

    /* more than one rank without a launcher: refused, the message (stderr,
     * captured in a file) naming launch.sh and the ranks the world needs */
    const char *cases[3] = {"1 stage: DP degrees 2", "2 stages: DP degrees 1 + 1",
                            "1 stage: DP degrees 1x2 TP"};
    for (int k = 0; k < 3; k++) {
        fflush(stderr);
        int saved = dup(2);
        FILE *cap = tmpfile();
        CHECK(saved >= 0 && cap);
        if (saved < 0 || !cap) break;
        dup2(fileno(cap), 2);
        int rc = k == 0   ? rt_init(&c, &argc, &argv, 1, (int[]){2})
                 : k == 1 ? rt_init(&c, &argc, &argv, 2, (int[]){1, 1})
                          : rt_init_tp(&c, &argc, &argv, 1, (int[]){1}, 0, 2);
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        char msg[2048] = "";
        rewind(cap);
        size_t n = fread(msg, 1, sizeof msg - 1, cap);
        msg[n] = 0;
        fclose(cap);
        fprintf(stderr, "refused: %s", msg);
        CHECK(rc != 0 && !c.solo && !mpi_up());
        CHECK(strstr(msg, "without a launcher") && strstr(msg, "launch.sh"));
        CHECK(strstr(msg, cases[k]) != NULL);
    }

    printf("%s: %d failures\n", fails ? "FAILED" : "OK", fails);
    return fails ? 1 : 0;
}
