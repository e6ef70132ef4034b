/* bf16 conversions and GEMM entries (kernels/host/hk_bf16.h) against
 * independent references:
 *  - hk_f32_to_bf16 against the nearest bf16 found by comparing the two
 *    bf16 neighbours of x in double arithmetic (ties to the even one), over
 *    a strided sweep of all f32 bit patterns plus specials; bf16 -> f32 back
 *    is exact;
 *  - hk_linear_bf16 / hk_linear_backward_bf16 against a brute-force double
 *    product of the same bf16 operands: y and dx rounded once, within one
 *    bf16 ulp (the f32 sum may land on the other side of a rounding
 *    boundary); dw and dbias (f32) within the f32 summation error;
 *  - stochastic rounding against its statistical promise (check_stochastic). */
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

/* Stochastic rounding (hk_f32_to_bf16_sr, hk_bf16_round_sr) against what
 * it promises, not against its own formula: every result is one of the two
 * bf16 neighbours of x (the truncation and the next one away from zero);
 * bf16 values, zeros and infinities stay, NaN stays NaN; the share of
 * elements rounded away from zero is d / 2^16 (d the dropped bits) within
 * 5 binomial sigmas, over the elements of one step and over the steps of
 * one element, so the mean rounding error vanishes; decisions of
 * neighbouring steps and of two keys are independent (the both-up share is
 * p^2); the pool-split tensor entry equals its element-wise definition. */
static uint16_t trunc_bf16(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return (uint16_t)(b >> 16);
}
static void within_sigma(const char *what, long ups, long n, double p) {
    double sd = sqrt(p * (1 - p) / (double)n), got = (double)ups / (double)n;
    if (fabs(got - p) > 5 * sd + 1e-12) {
        fails++;
        fprintf(stderr, "stochastic rounding, %s: %ld of %ld rounded up (%.6f), expected %.6f "
                        "+- %.6f\n", what, ups, n, got, p, 5 * sd);
    }
}
static void check_stochastic(void) {
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x);
    uint16_t *y = malloc(N * sizeof *y);
    /* neighbours, on random f32 values of every magnitude and sign */
    unsigned s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        uint32_t b = s;
        x[i] = bits_f(b);
    }
    hk_bf16_round_sr(x, y, N, 0x1234567, 7);
    long bad = 0;
    for (int i = 0; i < N; i++) {
        if (isnan(x[i])) {
            bad += !isnan(hk_bf16_to_f32(y[i]));
            continue;
        }
        uint16_t t = trunc_bf16(x[i]);
        if (y[i] != t && y[i] != (uint16_t)(t + 1)) bad++;
        /* what it means: |y| is |x| rounded down or up to a bf16 value */
        double ax = fabs((double)x[i]), ay = fabs((double)hk_bf16_to_f32(y[i]));
        if (y[i] == t && ay > ax) bad++;
        if (y[i] != t && ay < ax) bad++;
        /* the element-wise definition (and so no dependence on the threads) */
        if (y[i] != hk_f32_to_bf16_sr(x[i], hk_sr_threshold(hk_sr_seed(0x1234567, 7), i)))
            bad++;
    }
    const float fixed[] = {0.0f, -0.0f, 1.0f, -3.5f, INFINITY, -INFINITY, 0x1p-130f, 65536.0f};
    for (int k = 0; k < (int)(sizeof fixed / sizeof *fixed); k++)
        for (int step = 0; step < 64; step++) {
            uint16_t h = hk_f32_to_bf16_sr(fixed[k], hk_sr_threshold(hk_sr_seed(99, step), k));
            uint32_t b;
            memcpy(&b, &fixed[k], 4);
            if (h != (uint16_t)(b >> 16)) bad++;
        }
    if (!isnan(hk_bf16_to_f32(hk_f32_to_bf16_sr(NAN, 0)))) bad++;
    if (bad) fails++, fprintf(stderr, "stochastic rounding: %ld bad results\n", bad);
    /* the share rounded up: d / 2^16, over the elements of one step */
    const uint32_t ds[] = {1, 0x1000, 0x4000, 0x8000, 0xc000, 0xffff};
    for (int k = 0; k < (int)(sizeof ds / sizeof *ds); k++) {
        float v = bits_f(0x3f810000u | ds[k]); /* 1.0078125 plus d of the next ulp */
        for (int i = 0; i < N; i++) x[i] = v;
        hk_bf16_round_sr(x, y, N, 0x7654321, 3);
        long ups = 0;
        double err = 0;
        for (int i = 0; i < N; i++) {
            ups += y[i] != 0x3f81;
            err += (double)hk_bf16_to_f32(y[i]) - (double)v;
        }
        char what[64];
        snprintf(what, sizeof what, "d = 0x%04x over %d elements", (unsigned)ds[k], N);
        within_sigma(what, ups, N, ds[k] / 65536.0);
        /* the mean error, in units of the ulp (2^-7), is within the same bound */
        double ulp = 0x1p-7, p = ds[k] / 65536.0;
        if (fabs(err / N / ulp) > 5 * sqrt(p * (1 - p) / N) + 1e-12)
            fails++, fprintf(stderr, "stochastic rounding: mean error %g ulp\n", err / N / ulp);
        /* one element over 2^16 steps, and the both-up share of steps k, k+1
         * and of two keys at one step */
        long u1 = 0, both = 0, keys = 0;
        int prev = -1;
        for (int step = 0; step < 65536; step++) {
            int up = hk_f32_to_bf16_sr(v, hk_sr_threshold(hk_sr_seed(42, step), 5)) != 0x3f81;
            int up2 = hk_f32_to_bf16_sr(v, hk_sr_threshold(hk_sr_seed(43, step), 5)) != 0x3f81;
            u1 += up;
            both += prev == 1 && up;
            keys += up && up2;
            prev = up;
        }
        snprintf(what, sizeof what, "d = 0x%04x over 65536 steps", (unsigned)ds[k]);
        within_sigma(what, u1, 65536, p);
        snprintf(what, sizeof what, "d = 0x%04x, steps k and k+1 both up", (unsigned)ds[k]);
        within_sigma(what, both, 65535, p * p);
        snprintf(what, sizeof what, "d = 0x%04x, keys 42 and 43 both up", (unsigned)ds[k]);
        within_sigma(what, keys, 65536, p * p);
    }
    /* negative values: the magnitude rounds the same way */
    for (int i = 0; i < N; i++) x[i] = -bits_f(0x3f818000u);
    hk_bf16_round_sr(x, y, N, 5, 0);
    long ups = 0;
    for (int i = 0; i < N; i++) ups += y[i] == 0xbf82;
    within_sigma("-(1 + half an ulp)", ups, N, 0.5);
    free(x);
    free(y);
    printf("stochastic rounding: checked\n");
}

int main(void) {
    check_rounding();
    check_stochastic();
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
