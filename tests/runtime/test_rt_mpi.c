/* hetrt transport under mpirun: `test_rt_mpi DP0 DP1 ...` runs a job whose
 * stages have those DP degrees (world size = their sum) and checks
 *  - a point-to-point round trip between neighbouring stages,
 *  - the DP all-reduce against the sum every rank computes itself from the
 *    deterministic inputs of all its group's ranks,
 *  - many-to-many redistribution forward and backward between every pair of
 *    neighbouring stages for several batch sizes (including ones the DP
 *    degrees do not divide and ones smaller than a DP degree): each
 *    receiving rank gets exactly its rows of the single-process batch. */
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

/* The input of world rank r for the all-reduce. */
static float ar_val(int r, size_t i) { return (float)((r + 1) * 7 + (int)(i % 13)) * 0.5f; }

static void test_p2p(const RtContext *c) {
    float buf[257];
    for (int s = 0; s + 1 < c->nstages; s++) {
        int a = rt_stage_rank(c, s, 0), b = rt_stage_rank(c, s + 1, 0);
        if (c->world_rank == a) {
            for (int i = 0; i < 257; i++) buf[i] = (float)(s * 1000 + i);
            rtCheck(rt_send_f32(c, buf, 257, b, 1, "p2p ping"));
            rtCheck(rt_recv_f32(c, buf, 257, b, 2, "p2p pong"));
            for (int i = 0; i < 257; i++) EXPECT(buf[i] == (float)(s * 1000 + i) * 2.0f);
        } else if (c->world_rank == b) {
            memset(buf, 0, sizeof buf);
            rtCheck(rt_recv_f32(c, buf, 257, a, 1, "p2p ping"));
            for (int i = 0; i < 257; i++) {
                EXPECT(buf[i] == (float)(s * 1000 + i));
                buf[i] *= 2.0f;
            }
            rtCheck(rt_send_f32(c, buf, 257, a, 2, "p2p pong"));
        }
    }
}

static void test_allreduce(const RtContext *c) {
    enum { N = 1031 };
    float *x = malloc(N * sizeof *x);
    for (int k = 0; k < 2; k++) {
        float scale = k == 0 ? 1.0f : 1.0f / (float)c->dp_size;
        for (size_t i = 0; i < N; i++) x[i] = ar_val(c->world_rank, i);
        rtCheck(rt_dp_allreduce_f32(c, x, N, scale, "test all-reduce"));
        for (size_t i = 0; i < N; i++) {
            /* Oracle: sum in dp-rank order (exact here: small halves). */
            float want = 0.0f;
            for (int d = 0; d < c->dp_size; d++) want += ar_val(rt_stage_rank(c, c->stage, d), i);
            want *= scale;
            EXPECT(x[i] == want);
            if (x[i] != want) break;
        }
    }
    free(x);
}

static void test_redistribute(const RtContext *c) {
    const int64_t Bs[] = {12, 7, 13, 1, 5};
    const int64_t W = 3; /* elements per row */
    int tag = 100;
    for (int s = 0; s + 1 < c->nstages; s++)
        for (int dir = 0; dir < 2; dir++) {
            int from = dir ? s + 1 : s, to = dir ? s : s + 1;
            for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++) {
                int64_t B = Bs[bi], st, cnt;
                float *src = NULL, *dst = NULL;
                if (c->stage == from) {
                    rt_row_split(B, c->dp_size, c->dp_rank, &st, &cnt);
                    src = malloc((size_t)(cnt * W + 1) * sizeof *src);
                    for (int64_t i = 0; i < cnt; i++)
                        for (int64_t j = 0; j < W; j++) src[i * W + j] = row_val(st + i, j, dir);
                }
                if (c->stage == to) {
                    rt_row_split(B, c->dp_size, c->dp_rank, &st, &cnt);
                    dst = malloc((size_t)(cnt * W + 1) * sizeof *dst);
                    for (int64_t i = 0; i < cnt * W; i++) dst[i] = -1.0f;
                }
                rtCheck(rt_redistribute_rows(c, from, src, to, dst, B, (size_t)W * sizeof(float),
                                             tag, "test redistribution"));
                if (c->stage == to)
                    for (int64_t i = 0; i < cnt; i++)
                        for (int64_t j = 0; j < W; j++)
                            EXPECT(dst[i * W + j] == row_val(st + i, j, dir));
                free(src);
                free(dst);
                tag++;
            }
        }
}

int main(int argc, char **argv) {
    int dp[RT_MAX_STAGES], n = 0;
    for (int i = 1; i < argc && n < RT_MAX_STAGES; i++) dp[n++] = atoi(argv[i]);
    RtContext c;
    rtCheck(rt_init(&c, &argc, &argv, n, dp));
    test_p2p(&c);
    test_allreduce(&c);
    test_redistribute(&c);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (c.world_rank == 0) printf(total ? "FAILED (%d)\n" : "ok\n", total);
    rtCheck(rt_finalize(&c));
    return total ? 1 : 0;
}
