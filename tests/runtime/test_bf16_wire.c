/* The bf16 gradient wire (`grad_reduce bf16`, runtime/stage/stage_bf16_wire.c)
 * under mpirun with P ranks in one DP group.  Every rank builds every rank's
 * input itself (a deterministic hash), so it checks against its own oracle:
 *  - the result is bf16 (low 16 bits zero) and the same bits on every rank;
 *  - with 2 ranks it is exactly bf16(bf16(a) + bf16(b)) (one pairwise sum,
 *    round to nearest even: the kernels_bf16 oracle's rounding, recomputed
 *    here with integer arithmetic, not hk_f32_to_bf16);
 *  - with more ranks it lies within the bound of P-1 roundings of partial
 *    sums (|err| <= (P-1) * 2^-8 * sum|x_r| + P * 2^-8 * |x_r| rounding of
 *    the inputs) of the exact double sum, and differs from the fp32 sum
 *    somewhere (the wire did round);
 *  - the reduce-scatter gives each rank its rt_row_split slice of the same
 *    kind of sum, and a tensor over the wire buffer's capacity is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_internal.h"

static int failures;
#define EXPECT(c)                                                                        \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            rt_log_error("%s:%d: expectation failed: %s", __FILE__, __LINE__, #c);      \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

/* Rank r's element i: signed, a spread of magnitudes, most not bf16-exact. */
static float in_val(int r, int64_t i) {
    uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(i * 40503u + 977u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    float m = (float)(h & 0xffffff) / 16777216.0f + 0.5f;
    int e = (int)((h >> 24) & 7) - 4;
    return ((h >> 27) & 1 ? -m : m) * ldexpf(1.0f, e);
}

/* Round to nearest even by integer arithmetic on the bits (no NaN/Inf here). */
static float rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lsb = (u >> 16) & 1;
    u = (u + 0x7fffu + lsb) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

static int is_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0xffffu) == 0;
}

static void check_sum(const float *got, int64_t off, int64_t n, int P, int *rounded) {
    for (int64_t j = 0; j < n; j++) {
        int64_t i = off + j;
        EXPECT(is_bf16(got[j]));
        double exact = 0, mag = 0;
        float f32 = 0;
        for (int r = 0; r < P; r++) {
            exact += in_val(r, i);
            mag += fabs(in_val(r, i));
            f32 += in_val(r, i);
        }
        if (P == 2) {
            EXPECT(got[j] == rne(rne(in_val(0, i)) + rne(in_val(1, i))));
        } else {
            double bound = (2.0 * P - 1) * ldexp(1.0, -8) * mag;
            EXPECT(fabs(got[j] - exact) <= bound);
        }
        if (got[j] != f32) *rounded = 1;
    }
}

int main(int argc, char **argv) {
    enum { N = 4099 };
    StageRt rt;
    memset(&rt, 0, sizeof rt);
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int dp[1] = {size};
    rtCheck(rt_init(&rt.ctx, &argc, &argv, 1, dp));
    StageParam prm;
    memset(&prm, 0, sizeof prm);
    prm.numel = N;
    rt.cfg.params = &prm;
    rt.cfg.nparams = 1;
    rt.cfg.grad_reduce_bf16 = 1;
    StageBf16Wire w;
    rtCheck(stage_bf16_wire_setup(&rt, &w, N, "grad_reduce bf16"));
    EXPECT(w.cap == N && w.op != MPI_OP_NULL);

    float *x = malloc(N * sizeof *x), *all = malloc((size_t)N * size * sizeof *all);
    int me = rt.ctx.dp_rank, rounded = 0;
    for (int64_t i = 0; i < N; i++) x[i] = in_val(me, i);
    rtCheck(stage_bf16_allreduce(&rt, &w, rt.ctx.dp_comm, x, N, "test bf16 all-reduce"));
    check_sum(x, 0, N, size, &rounded);
    EXPECT(rounded);
    /* the same bits everywhere: DP ranks must keep identical parameters */
    MPI_Allgather(x, N, MPI_FLOAT, all, N, MPI_FLOAT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++) EXPECT(!memcmp(all + (size_t)r * N, x, N * sizeof *x));

    for (int64_t i = 0; i < N; i++) x[i] = in_val(me, i);
    rtCheck(stage_bf16_reduce_scatter(&rt, &w, x, N, "test bf16 reduce-scatter"));
    int64_t start, count;
    rt_row_split(N, size, me, &start, &count);
    rounded = 0;
    check_sum(x, start, count, size, &rounded);
    EXPECT(rounded);

    /* one element more than the largest parameter: refused, not overrun */
    float *big = calloc(N + 1, sizeof *big);
    EXPECT(stage_bf16_allreduce(&rt, &w, rt.ctx.dp_comm, big, N + 1, "oversized") != 0);
    free(big);

    stage_bf16_wire_teardown(&w);
    free(x);
    free(all);
    int bad = failures, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rt.ctx.world_rank == 0) printf("bf16 wire on %d ranks: %s\n", size, any ? "FAIL" : "ok");
    rt_finalize(&rt.ctx);
    MPI_Finalize();
    return any ? 1 : 0;
}
