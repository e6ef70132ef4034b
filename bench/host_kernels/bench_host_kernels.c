/* Micro-benchmark of the f32 host kernels on GPT-2-124M training shapes
 * (B=4, T=256, hidden 768, ffn 3072, 12 heads).  Prints the median wall
 * wall time and process CPU time (all threads) of each kernel over REPS
 * runs; asserts nothing.  Threads come from
 * HETC_THREADS like everywhere else.  run.sh builds the same file against
 * an older kernels/host (a git revision) to compare before / after.
 *
 *   bench_host_kernels [REPS]        (default 15)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hk.h"
#include "hk_train.h"

static double clk(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static float *fvec(int64_t n, float lo, float hi) {
    float *p = malloc(sizeof(float) * (size_t)n);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
    }
    return p;
}

static int reps = 15;
#define BENCH(NAME, ELEMS, STMT)                                                   \
    do {                                                                           \
        double t_[256], c_[256];                                                   \
        STMT; /* warm: page faults, pool start */                                  \
        for (int r_ = 0; r_ < reps; r_++) {                                        \
            double t0_ = clk(CLOCK_MONOTONIC), c0_ = clk(CLOCK_PROCESS_CPUTIME_ID); \
            STMT;                                                                  \
            t_[r_] = clk(CLOCK_MONOTONIC) - t0_;                                   \
            c_[r_] = clk(CLOCK_PROCESS_CPUTIME_ID) - c0_;                          \
        }                                                                          \
        qsort(t_, (size_t)reps, sizeof(double), cmpd);                             \
        qsort(c_, (size_t)reps, sizeof(double), cmpd);                             \
        printf("%-40s wall %8.3f ms  cpu %8.3f ms  %8.1f Melem/s\n", NAME,          \
               1e3 * t_[reps / 2], 1e3 * c_[reps / 2], (double)(ELEMS) / t_[reps / 2] * 1e-6); \
    } while (0)

int main(int argc, char **argv) {
    if (argc > 1) reps = atoi(argv[1]);
    if (reps < 1 || reps > 256) reps = 15;
    const int64_t BT = 4 * 256, C = 768, F = 3072, H = 12, T = 256, V = 50257, NV = 64;
    char err[HK_ERRLEN];
    float *a = fvec(BT * F, -3, 3), *b = fvec(BT * F, -3, 3), *o = fvec(BT * F, 0, 1);
    float *bias = fvec(F, -1, 1), *sc = fvec(C, 0.5f, 1.5f), *mean = fvec(BT, 0, 1),
          *rstd = fvec(BT, 1, 2), *dsc = fvec(C, 0, 1), *dbi = fvec(C, 0, 1);
    int64_t dBF[] = {BT, F}, dF[] = {F};
    BENCH("add [1024,3072] same shape", BT * F,
          hk_binary(HK_ADD, HK_F32, a, 2, dBF, HK_F32, b, 2, dBF, o, 2, dBF, err));
    BENCH("add [1024,3072] + bias [3072]", BT * F,
          hk_binary(HK_ADD, HK_F32, a, 2, dBF, HK_F32, bias, 1, dF, o, 2, dBF, err));
    BENCH("mul [1024,3072] * scalar", BT * F,
          hk_binary(HK_MUL, HK_F32, a, 2, dBF, HK_F32, bias, 0, dF, o, 2, dBF, err));
    BENCH("gelu_tanh [1024,3072]", BT * F, hk_unary(HK_GELU_TANH, HK_F32, a, o, BT * F, err));
    BENCH("exp [1024,3072]", BT * F, hk_unary(HK_EXP, HK_F32, a, o, BT * F, err));
    BENCH("gelu_tanh backward [1024,3072]", BT * F,
          hk_unary_backward_f32(HK_UG_GELU_TANH, a, NULL, b, BT * F, o, err));
    int64_t dS[] = {4 * H * T, T};
    BENCH("softmax [12288,256]", 4 * H * T * T, hk_softmax(HK_F32, a, 2, dS, 1, 0, o, err));
    BENCH("softmax backward [12288,256]", 4 * H * T * T,
          hk_softmax_backward_f32(o, b, 2, dS, 1, 0, a, err));
    BENCH("layernorm fwd [1024,768]", BT * C, hk_layernorm_f32(a, sc, sc, BT, C, 1e-5, o));
    BENCH("layernorm bwd [1024,768]", BT * C,
          hk_layernorm_backward_f32(a, sc, b, NULL, NULL, BT, C, 1e-5, o, dsc, dbi, 1, err));
    int64_t dC[] = {F};
    BENCH("reduce_sum_to_shape [1024,3072]->[3072]", BT * F,
          hk_reduce_sum_to_shape_f32(a, 2, dBF, 1, dC, o, err));
    int red[] = {0, 1};
    BENCH("reduce_sum last axis [1024,3072]", BT * F, hk_reduce(HK_RSUM, HK_F32, a, 2, dBF, red, o, err));
    int64_t dq[] = {4, T, H, 64}, perm[] = {0, 2, 1, 3};
    BENCH("transpose [4,256,12,64] (0,2,1,3)", BT * C, hk_transpose(4, a, 4, dq, perm, o));
    int64_t dT[] = {BT, C}, pT[] = {1, 0};
    BENCH("transpose [1024,768] (1,0)", BT * C, hk_transpose(4, a, 2, dT, pT, o));
    /* cross entropy over NV rows of the vocabulary (a slice of B*T) */
    float *lg = fvec(NV * V, -5, 5), *lse = fvec(NV, 0, 1), *dl = fvec(NV * V, 0, 1), loss;
    int64_t *tg = malloc(sizeof(int64_t) * NV), cnt;
    for (int64_t i = 0; i < NV; i++) tg[i] = (i * 7919) % V;
    BENCH("cross_entropy fwd [64,50257]", NV * V,
          hk_cross_entropy_fwd_f32(lg, HK_I64, tg, NV, V, 0, -100, &loss, lse, &cnt, err));
    BENCH("cross_entropy bwd [64,50257]", NV * V,
          hk_cross_entropy_bwd_f32(lg, HK_I64, tg, lse, NV, V, 0, -100, 1.0f, dl, err));
    free(a), free(b), free(o), free(bias), free(sc), free(mean), free(rstd), free(dsc), free(dbi);
    free(lg), free(lse), free(dl), free(tg);
    return 0;
}
