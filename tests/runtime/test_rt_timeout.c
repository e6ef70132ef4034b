/* A rank that never sends: rank 1 waits for a message from rank 0 that
 * never comes.  Run under mpirun with a short HETRT_TIMEOUT_S; the job must
 * exit non-zero with rank 1 reporting whom it waited on
 * (test_rt_timeout.py asserts that). */
#include "rt.h"

#include <unistd.h>

int main(int argc, char **argv) {
    int dp[2] = {1, 1};
    RtContext c;
    rtCheck(rt_init(&c, &argc, &argv, 2, dp));
    if (c.world_rank == 1) {
        float x[16];
        rtCheck(rt_recv_f32(&c, x, 16, 0, 7, "activation of microbatch 3"));
    } else {
        /* Rank 0 is "stuck" outside MPI; the abort from rank 1 ends it. */
        for (int i = 0; i < 600; i++) sleep(1);
    }
    rtCheck(rt_finalize(&c));
    return 0;
}
