/* hetrt tensor-parallel layout under mpirun: `test_rt_tp DP0:TP0 DP1:TP1 ...`
 * runs a job whose stage s has DP_s x TP_s ranks (each rank passes only its
 * own stage's TP degree, as a stage binary does) and checks against the
 * layout computed independently here (local index i: tp_rank i % tp,
 * dp_rank i / tp):
 *  - every rank's stage, dp/tp rank and sizes, rt_stage_rank;
 *  - the DP communicator joins exactly the ranks of the stage with the same
 *    tp_rank, the TP communicator those with the same dp_rank (an
 *    all-reduce of a per-rank bit mask must give the expected member set);
 *  - rt_bcast over the TP group delivers TP rank 0's bytes;
 *  - boundary redistribution between neighbouring stages, both directions,
 *    blocking and deferred sends, several batch sizes (some smaller than
 *    DP x TP): every rank of the receiving stage (every TP rank) gets its
 *    DP shard's rows of the single-process batch.  Each sending rank
 *    poisons the rows outside its own TP piece (rt_row_piece), so the
 *    result is right only if every row came from the one rank whose piece
 *    holds it: the tensor crosses between the stages once, not once per TP
 *    rank (seed 002). */
#include "rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define EXPECT(c)                                                                        \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            rt_log_error("%s:%d: expectation failed: %s", __FILE__, __LINE__, #c);      \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

/* Element j of global row i of the batch for a given direction. */
static float row_val(int64_t i, int64_t j, int dir) {
    return (float)(i * 1000 + j) + (dir ? 0.25f : 0.5f);
}

static void test_redistribute(const RtContext *c) {
    const int64_t Bs[] = {12, 7, 13, 1, 5, 3};
    const int64_t W = 3; /* elements per row */
    int tag = 200;
    for (int s = 0; s + 1 < c->nstages; s++)
        for (int dir = 0; dir < 4; dir++) { /* dir & 1: backward; dir & 2: deferred sends */
            int bwd = dir & 1, from = bwd ? s + 1 : s, to = bwd ? s : s + 1;
            for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++) {
                int64_t B = Bs[bi], st = 0, cnt = 0, ps, pc;
                float *src = NULL, *dst = NULL;
                if (c->stage == from) {
                    rt_row_split(B, c->dp_size, c->dp_rank, &st, &cnt);
                    rt_row_piece(B, c->dp_size, c->tp_size, c->dp_rank * c->tp_size + c->tp_rank,
                                 &ps, &pc);
                    src = malloc((size_t)(cnt * W + 1) * sizeof *src);
                    for (int64_t i = 0; i < cnt; i++)
                        for (int64_t j = 0; j < W; j++)
                            src[i * W + j] = st + i >= ps && st + i < ps + pc
                                                 ? row_val(st + i, j, bwd)
                                                 : -7.0f; /* not this rank's piece */
                }
                if (c->stage == to) {
                    rt_row_split(B, c->dp_size, c->dp_rank, &st, &cnt);
                    dst = malloc((size_t)(cnt * W + 1) * sizeof *dst);
                    for (int64_t i = 0; i < cnt * W; i++) dst[i] = -1.0f;
                }
                size_t rb = (size_t)W * sizeof(float);
                if ((dir & 2) && c->stage == from) {
                    RtSendQueue q = {0};
                    rtCheck(rt_redistribute_rows_isend(c, from, src, to, B, rb, tag, "test isend", &q));
                    rtCheck(rt_send_queue_wait(c, &q, "test isend"));
                    rt_send_queue_free(&q);
                } else {
                    rtCheck(rt_redistribute_rows(c, from, src, to, dst, B, rb, tag,
                                                 "test redistribution"));
                }
                if (c->stage == to) {
                    int ok = 1;
                    for (int64_t i = 0; i < cnt; i++)
                        for (int64_t j = 0; j < W; j++) ok &= dst[i * W + j] == row_val(st + i, j, bwd);
                    EXPECT(ok);
                }
                free(src);
                free(dst);
                tag++;
            }
        }
}

int main(int argc, char **argv) {
    int n = argc - 1, dp[RT_MAX_STAGES], tp[RT_MAX_STAGES], first[RT_MAX_STAGES];
    if (n < 1 || n > 60) {
        fprintf(stderr, "usage: test_rt_tp DP0:TP0 DP1:TP1 ...\n");
        return 2;
    }
    int total = 0;
    for (int s = 0; s < n; s++) {
        if (sscanf(argv[1 + s], "%d:%d", &dp[s], &tp[s]) != 2 || dp[s] < 1 || tp[s] < 1) {
            fprintf(stderr, "test_rt_tp: bad stage '%s'\n", argv[1 + s]);
            return 2;
        }
        first[s] = total;
        total += dp[s] * tp[s];
    }
    /* This rank's stage from the launch layout (the binary's "own config"). */
    int wr = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    int my = 0;
    for (int s = 0; s < n; s++)
        if (wr >= first[s]) my = s;
    RtContext c;
    rtCheck(rt_init_tp(&c, &argc, &argv, n, dp, my, tp[my]));
    int i = wr - first[my];
    EXPECT(c.world_size == total);
    EXPECT(c.stage == my);
    EXPECT(c.tp_rank == i % tp[my] && c.dp_rank == i / tp[my]);
    EXPECT(c.tp_size == tp[my] && c.dp_size == dp[my]);
    for (int s = 0; s < n; s++) {
        EXPECT(c.stage_tp[s] == tp[s] && c.stage_first[s] == first[s]);
        for (int d = 0; d < dp[s]; d++) EXPECT(rt_stage_rank(&c, s, d) == first[s] + d * tp[s]);
    }
    /* Group membership: OR (as a sum of distinct bits) of world-rank bits. */
    long long bit = 1LL << wr, got_dp = bit, got_tp = bit, want_dp = 0, want_tp = 0;
    for (int j = 0; j < dp[my] * tp[my]; j++) {
        long long b = 1LL << (first[my] + j);
        if (j % tp[my] == c.tp_rank) want_dp |= b;
        if (j / tp[my] == c.dp_rank) want_tp |= b;
    }
    rtCheck(rt_allreduce(&c, c.dp_comm, &got_dp, 1, MPI_LONG_LONG, MPI_SUM, "dp group bits"));
    if (tp[my] > 1 || c.tp_comm != MPI_COMM_NULL)
        rtCheck(rt_allreduce(&c, c.tp_comm, &got_tp, 1, MPI_LONG_LONG, MPI_SUM, "tp group bits"));
    EXPECT(got_dp == want_dp);
    EXPECT(got_tp == want_tp);
    /* Broadcast from TP rank 0. */
    char buf[300];
    for (int k = 0; k < (int)sizeof buf; k++) buf[k] = (char)(c.tp_rank == 0 ? (wr + k) % 127 : 0);
    rtCheck(rt_bcast(&c, c.tp_comm, buf, sizeof buf, 0, "tp broadcast"));
    int root = wr - c.tp_rank, ok = 1;
    for (int k = 0; k < (int)sizeof buf; k++) ok &= buf[k] == (char)((root + k) % 127);
    EXPECT(ok);
    test_redistribute(&c);
    int bad = failures;
    rtCheck(rt_allreduce(&c, MPI_COMM_WORLD, &bad, 1, MPI_INT, MPI_MAX, "failures"));
    if (wr == 0) printf("%s: %d stages, %d ranks\n", bad ? "FAILED" : "OK", n, total);
    rt_finalize(&c);
    MPI_Finalize();
    return bad ? 1 : 0;
}
