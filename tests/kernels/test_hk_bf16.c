/* bf16 conversions and GEMM entries (kernels/host/hk_bf16.h) against
 * independent references:
 *  - hk_f32_to_bf16 against the nearest bf16 found by comparing the two
 *    bf16 neighbours of x in double arithmetic (ties to the even one), over
 *    a strided sweep of all f32 bit patterns plus specials; bf16 -> f32 back
 *    is exact;
 *  - hk_linear_bf16 / hk_linear_backward_bf16 against a brute-force double
 *    product of the same bf16 operands: y and dx rounded once, within one
 *    bf16 ulp (the f32 sum may land on the other side of a rounding
 *    boundary); dw and dbias (f32) within the f32 summation error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hk.h"
#include "hk_bf16.h"

static int fails;

static float bits_f(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint16_t nearest_bf16(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    uint16_t lo = (uint16_t)(b >> 16), hi = (uint16_t)(lo + 1); /* hi: next in magnitude */
    double dx = x, dl = bits_f((uint32_t)lo << 16), dh = bits_f((uint32_t)hi << 16);
    if (isinf(dh)) dh = copysign(ldexp(1.0, 128), dx); /* rounding past FLT_MAX: inf */
    double el = fabs(dx - dl), eh = fabs(dh - dx);
    if (el < eh) return lo;
    if (eh < el) return hi;
    return (lo & 1) ? hi : lo;
}

static void check_rounding(void) {
    long n = 0;
    for (uint64_t b = 0; b <= 0xffffffffu; b += 9973) {
        float x = bits_f((uint32_t)b);
        if (isnan(x)) {
            if (!isnan(hk_bf16_to_f32(hk_f32_to_bf16(x)))) fails++;
            continue;
        }
        uint16_t got = hk_f32_to_bf16(x), want = nearest_bf16(x);
        if (got != want && fails++ < 5)
            fprintf(stderr, "f32 %08x -> bf16 %04x, nearest-even %04x\n", (unsigned)b, got, want);
        n++;
    }
    /* ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1) */
    if (hk_f32_to_bf16(1.0f + 0x1p-8f) != 0x3f80) fails++, fprintf(stderr, "tie to even\n");
    if (hk_f32_to_bf16(1.0f + 3 * 0x1p-8f) != 0x3f82) fails++, fprintf(stderr, "tie up\n");
    if (hk_bf16_to_f32(hk_f32_to_bf16(INFINITY)) != INFINITY) fails++;
    if (hk_f32_to_bf16(3.5f) != 0x4060 || hk_bf16_to_f32(0x4060) != 3.5f) fails++;
    /* Cast's fast path (hk_cast f32 <-> bf16) against the same oracle */
    float xs[4096], back[4096];
    uint16_t hs[4096];
    for (int i = 0; i < 4096; i++) xs[i] = bits_f(0x3f800000u + (uint32_t)i * 4099u * 7u);
    if (hk_cast(HK_F32, xs, HK_BF16, hs, 4096, NULL) || hk_cast(HK_BF16, hs, HK_F32, back, 4096, NULL))
        fails++;
    for (int i = 0; i < 4096; i++)
        if (hs[i] != nearest_bf16(xs[i]) || back[i] != hk_bf16_to_f32(hs[i])) {
            if (fails++ < 5) fprintf(stderr, "hk_cast of %g: %04x\n", xs[i], hs[i]);
        }
    printf("rounding: %ld f32 values checked\n", n);
}

static float rnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f) * 4.0f;
}

/* |got - want| within one bf16 ulp of want (plus a tiny absolute floor) */
static void near(const char *what, const uint16_t *got, const double *want, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double g = hk_bf16_to_f32(got[i]), w = hk_bf16_to_f32(hk_f32_to_bf16((float)want[i]));
        double ulp = fabs(w) * 0x1p-7 + 1e-30;
        if (fabs(g - w) > ulp * 1.01) {
            if (fails++ < 5) fprintf(stderr, "%s[%lld] = %g, want %g\n", what, (long long)i, g, w);
        }
    }
}

/* f32 results (the parameter gradients): a sum of n products of bf16
 * values, within n f32 roundings of the double sum of magnitudes */
static void nearf(const char *what, const float *got, const double *want, int64_t n, int64_t terms) {
    for (int64_t i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > (double)terms * 0x1p-23 * 4.0 * (fabs(want[i]) + 4.0)) {
            if (fails++ < 5) fprintf(stderr, "%s[%lld] = %g, want %g\n", what, (long long)i, got[i], want[i]);
        }
}

static void check_linear(int64_t M, int64_t K, int64_t N) {
    unsigned s = 7u + (unsigned)(M * 31 + K * 7 + N);
    uint16_t *x = malloc(2 * M * K), *w = malloc(2 * K * N), *b = malloc(2 * N),
             *dy = malloc(2 * M * N), *y = malloc(2 * M * N), *dx = malloc(2 * M * K);
    float *dw = malloc(4 * K * N), *db = malloc(4 * N);
    double *ry = calloc(M * N, 8), *rdx = calloc(M * K, 8), *rdw = calloc(K * N, 8),
           *rdb = calloc(N, 8);
    for (int64_t i = 0; i < M * K; i++) x[i] = hk_f32_to_bf16(rnd(&s));
    for (int64_t i = 0; i < K * N; i++) w[i] = hk_f32_to_bf16(rnd(&s));
    for (int64_t i = 0; i < N; i++) b[i] = hk_f32_to_bf16(rnd(&s));
    for (int64_t i = 0; i < M * N; i++) dy[i] = hk_f32_to_bf16(rnd(&s));
#define F(a, i) ((double)hk_bf16_to_f32((a)[i]))
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = F(b, n);
            for (int64_t k = 0; k < K; k++) acc += F(x, m * K + k) * F(w, k * N + n);
            ry[m * N + n] = acc;
            rdb[n] += F(dy, m * N + n);
            for (int64_t k = 0; k < K; k++) {
                rdx[m * K + k] += F(dy, m * N + n) * F(w, k * N + n);
                rdw[k * N + n] += F(x, m * K + k) * F(dy, m * N + n);
            }
        }
    char err[256];
    hk_linear_bf16(x, w, b, M, K, N, y);
    near("y", y, ry, M * N);
    if (hk_linear_backward_bf16(x, w, dy, M, K, N, dx, dw, db, 0, err))
        fails++, fprintf(stderr, "%s\n", err);
    near("dx", dx, rdx, M * K);
    nearf("dw", dw, rdw, K * N, K);
    nearf("db", db, rdb, N, M);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
    free(ry), free(rdx), free(rdw), free(rdb);
}

int main(void) {
    check_rounding();
    check_linear(1, 1, 1);
    check_linear(5, 17, 3);
    check_linear(33, 64, 70);
    if (fails) {
        fprintf(stderr, "%d failures\n", fails);
        return 1;
    }
    printf("OK\n");
    return 0;
}
