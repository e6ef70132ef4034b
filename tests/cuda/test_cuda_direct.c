/* The CUDA backend's direct-call entries (runtime/cuda/stage_kernels_cuda.c,
 * the hetrt_cu_* calls codegen/lower_node_cuda.c emits) against their host
 * twins (kernels/host), which the host backend's direct calls use:
 *   binary with broadcast strides (the lowering's marshalling) vs hk_binary
 *   (which broadcasts from the shapes itself); unary and UnaryGrad through
 *   the host numbering (HK_*, HK_UG_*) the lowering passes, vs hk_unary /
 *   hk_unary_backward_f32 (a numbering mismatch between kernels/host and
 *   kernels/cuda shows here); Linear with and without bias vs hk_linear_f32;
 *   LinearGrad with all and with some outputs vs hk_linear_backward_f32;
 *   LayerNorm (with / without bias) / RMSNorm forward and backward vs
 *   hk_layernorm_f32 / hk_rmsnorm_f32 and their backward kernels;
 *   AdamW in place (device scalars) vs hk_entry_adamw_f32 (1e-6 relative:
 *   the kernels do the same fp32 operations, docs/CUDA.md);
 *   bf16-mixed (issue 17): the f32 <-> bf16 Cast bit for bit against
 *   hk_f32_to_bf16 (random bits, ties, NaN, inf, subnormals), the bf16
 *   Linear / LinearGrad (cuBLASLt tensor cores) vs hk_linear_bf16 /
 *   hk_linear_backward_bf16: bf16 outputs within one bf16 rounding (2^-7
 *   relative) of the host's, f32 dw and db within the fp32 GEMM tolerance.
 * |dev - host| <= atol + rtol |host| (elementwise 1e-5/1e-6, GEMMs 1e-4/2e-5,
 * as test_cuda_kernels).  Needs a GPU: without one it prints why and exits
 * 77 (ctest SKIP). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "hk.h"
#include "hk_bf16.h"
#include "hk_entry.h"
#include "hk_train.h"
#include "stage_kernels_cuda.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static float urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.f - 1.f;
}
static float *host_rand(int64_t n, int pos) {
    float *p = malloc(sizeof *p * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = pos ? 0.1f + fabsf(urand()) : urand();
    return p;
}
static float *dev_of(const float *h, int64_t n) {
    float *d = NULL;
    cudaMalloc((void **)&d, sizeof *d * (size_t)(n ? n : 1));
    if (h) cudaMemcpy(d, h, sizeof *d * (size_t)n, cudaMemcpyHostToDevice);
    else cudaMemset(d, 0, sizeof *d * (size_t)(n ? n : 1));
    return d;
}
static int failures = 0;
static void compare(const char *what, const float *d, const float *host, int64_t n, double rtol,
                    double atol) {
    float *got = malloc(sizeof *got * (size_t)(n ? n : 1));
    cudaDeviceSynchronize();
    cudaMemcpy(got, d, sizeof *got * (size_t)n, cudaMemcpyDeviceToHost);
    double worst = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - host[i]), lim = atol + rtol * fabs(host[i]);
        if (!(e <= lim) && bad < 0) bad = i;
        if (e > worst) worst = e;
    }
    if (bad >= 0) {
        printf("FAIL %s: element %lld: device %.9g host %.9g (max abs err %.3g)\n", what,
               (long long)bad, got[bad], host[bad], worst);
        failures++;
    } else {
        printf("ok   %s (%lld elements, max abs err %.3g)\n", what, (long long)n, worst);
    }
    free(got);
}
static void bstrides(int r, const int64_t *d, int R, const int64_t *od, int64_t *st) {
    int off = R - r;
    int64_t acc = 1;
    for (int i = 0; i < R; i++) st[i] = 0;
    for (int i = r - 1; i >= 0; i--) {
        st[i + off] = d[i] == 1 && od[i + off] != 1 ? 0 : acc;
        acc *= d[i];
    }
}

int main(void) {
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device (%s): the direct-call entries are compared with their host "
               "twins only on a machine with a GPU\n",
               ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        return 77;
    }
    HkcCtx k;
    char err[HKC_ERRLEN] = "";
    if (hkc_ctx_init(&k, err)) {
        printf("FAIL: hkc_ctx_init: %s\n", err);
        return 1;
    }
    /* binary ops with broadcast: a[4,1,16] op b[8,1] -> y[4,8,16] */
    {
        const int64_t da[] = {4, 1, 16}, db[] = {8, 1}, dy[] = {4, 8, 16};
        int64_t na = 64, nb = 8, ny = 512, sa[3], sb[3];
        bstrides(3, da, 3, dy, sa);
        bstrides(2, db, 3, dy, sb);
        const struct { int op; const char *name; } ops[] = {
            {HK_ADD, "Add"}, {HK_SUB, "Sub"}, {HK_MUL, "Mul"}, {HK_DIV, "Div"},
            {HK_POW, "Pow"}, {HK_MAX, "Max"}, {HK_MIN, "Min"}};
        for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
            int pos = ops[i].op == HK_POW || ops[i].op == HK_DIV;
            float *a = host_rand(na, pos), *b = host_rand(nb, pos), *want = calloc(ny, 4);
            float *dA = dev_of(a, na), *dB = dev_of(b, nb), *dY = dev_of(NULL, ny);
            char what[64];
            snprintf(what, sizeof what, "binary %s [4,1,16] x [8,1]", ops[i].name);
            if (hk_binary(ops[i].op, HK_F32, a, 3, da, HK_F32, b, 2, db, want, 3, dy, err) ||
                cu_direct_binary(&k, ops[i].op, 3, dy, dA, sa, dB, sb, dY, err)) {
                printf("FAIL %s: %s\n", what, err);
                failures++;
            } else {
                compare(what, dY, want, ny, 1e-5, 1e-6);
            }
            free(a), free(b), free(want), cudaFree(dA), cudaFree(dB), cudaFree(dY);
        }
    }
    /* unary ops through the host numbering */
    {
        const struct { int op; const char *name; int pos; } ops[] = {
            {HK_NEG, "Neg", 0}, {HK_SQRT, "Sqrt", 1}, {HK_EXP, "Exp", 0}, {HK_LOG, "Log", 1},
            {HK_TANH, "Tanh", 0}, {HK_SIGMOID, "Sigmoid", 0}, {HK_ERF, "Erf", 0},
            {HK_RELU, "Relu", 0}, {HK_GELU, "Gelu", 0}, {HK_GELU_TANH, "Gelu tanh", 0},
            {HK_SILU, "Silu", 0}, {HK_RECIP, "Reciprocal", 1}};
        int64_t n = 1000;
        for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
            float *x = host_rand(n, ops[i].pos), *want = calloc(n, 4);
            float *dX = dev_of(x, n), *dY = dev_of(NULL, n);
            char what[64];
            snprintf(what, sizeof what, "unary %s", ops[i].name);
            if (hk_unary(ops[i].op, HK_F32, x, want, n, err) ||
                hkc_unary_f32(&k, ops[i].op, dX, dY, n, err)) {
                printf("FAIL %s: %s\n", what, err);
                failures++;
            } else {
                compare(what, dY, want, n, 1e-5, 1e-6);
            }
            free(x), free(want), cudaFree(dX), cudaFree(dY);
        }
    }
    /* UnaryGrad through HkUnaryGrad's numbering, y given (NULL: recomputed) */
    {
        const char *names[] = {"exp", "tanh", "sigmoid", "gelu", "gelu_tanh", "silu", "sqrt"};
        int64_t n = 1000;
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            HkUnaryGrad fn;
            if (hk_unary_grad_from_name(names[i], &fn)) {
                printf("FAIL unary grad %s: no host rule\n", names[i]);
                failures++;
                continue;
            }
            int pos = !strcmp(names[i], "sqrt");
            float *x = host_rand(n, pos), *dy = host_rand(n, 0), *want = calloc(n, 4);
            float *dX = dev_of(x, n), *dDy = dev_of(dy, n), *dDx = dev_of(NULL, n);
            char what[64];
            snprintf(what, sizeof what, "unary grad %s", names[i]);
            if (hk_unary_backward_f32(fn, x, NULL, dy, n, want, err) ||
                hkc_unary_grad_f32(&k, fn, dX, NULL, dDy, dDx, n, err)) {
                printf("FAIL %s: %s\n", what, err);
                failures++;
            } else {
                compare(what, dDx, want, n, 1e-5, 1e-6);
            }
            free(x), free(dy), free(want), cudaFree(dX), cudaFree(dDy), cudaFree(dDx);
        }
    }
    /* Linear [M,K] x [K,N] (+ b) and LinearGrad */
    {
        const int64_t M = 37, K = 64, N = 48;
        float *x = host_rand(M * K, 0), *w = host_rand(K * N, 0), *b = host_rand(N, 0);
        float *dy = host_rand(M * N, 0);
        float *dX = dev_of(x, M * K), *dW = dev_of(w, K * N), *dB = dev_of(b, N);
        float *dDy = dev_of(dy, M * N), *dY = dev_of(NULL, M * N);
        for (int hb = 0; hb < 2; hb++) {
            float *want = calloc((size_t)(M * N), 4);
            hk_linear_f32(x, w, hb ? b : NULL, M, K, N, want);
            if (cu_direct_linear(&k, dX, dW, hb ? dB : NULL, M, K, N, dY, err)) {
                printf("FAIL linear: %s\n", err);
                failures++;
            } else {
                compare(hb ? "linear with bias [37,64]x[64,48]" : "linear [37,64]x[64,48]", dY,
                        want, M * N, 1e-4, 2e-5);
            }
            free(want);
        }
        float *gx = calloc((size_t)(M * K), 4), *gw = calloc((size_t)(K * N), 4),
              *gb = calloc((size_t)N, 4);
        float *dGx = dev_of(NULL, M * K), *dGw = dev_of(NULL, K * N), *dGb = dev_of(NULL, N);
        if (hk_linear_backward_f32(x, w, dy, M, K, N, gx, gw, gb, 0, err) ||
            cu_direct_linear_grad(&k, dX, dW, dDy, M, K, N, dGx, dGw, dGb, err)) {
            printf("FAIL linear grad: %s\n", err);
            failures++;
        } else {
            compare("linear grad dx", dGx, gx, M * K, 1e-4, 2e-5);
            compare("linear grad dw", dGw, gw, K * N, 1e-4, 2e-5);
            compare("linear grad db", dGb, gb, N, 1e-4, 2e-5);
        }
        /* dw only (a frozen input's dx unused): the other outputs untouched */
        cudaMemset(dGx, 0, sizeof(float) * (size_t)(M * K));
        cudaMemset(dGw, 0, sizeof(float) * (size_t)(K * N));
        float *zeros = calloc((size_t)(M * K), 4);
        if (cu_direct_linear_grad(&k, dX, dW, dDy, M, K, N, NULL, dGw, NULL, err)) {
            printf("FAIL linear grad (dw only): %s\n", err);
            failures++;
        } else {
            compare("linear grad dw only: dw", dGw, gw, K * N, 1e-4, 2e-5);
            compare("linear grad dw only: dx untouched", dGx, zeros, M * K, 0, 0);
        }
        free(zeros), free(x), free(w), free(b), free(dy), free(gx), free(gw), free(gb);
        cudaFree(dX), cudaFree(dW), cudaFree(dB), cudaFree(dDy), cudaFree(dY);
        cudaFree(dGx), cudaFree(dGw), cudaFree(dGb);
    }
    /* bf16-mixed: Cast both ways, bit for bit */
    {
        const int64_t n = 1 << 16;
        uint32_t *bits = malloc(sizeof *bits * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            bits[i] = (uint32_t)(rng >> 17);
        }
        const uint32_t special[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u,
                                    0xff800000u, 0x7f7fffffu, 0x00000001u, 0x80008000u,
                                    0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x00000000u};
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) bits[i] = special[i];
        uint16_t *want = malloc(2 * (size_t)n), *got = malloc(2 * (size_t)n);
        float *back = malloc(4 * (size_t)n), *wback = malloc(4 * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, &bits[i], 4);
            want[i] = hk_f32_to_bf16(f);
            wback[i] = hk_bf16_to_f32(want[i]);
        }
        void *dF = NULL, *dH = NULL, *dB2 = NULL;
        cudaMalloc(&dF, 4 * (size_t)n), cudaMalloc(&dH, 2 * (size_t)n), cudaMalloc(&dB2, 4 * (size_t)n);
        cudaMemcpy(dF, bits, 4 * (size_t)n, cudaMemcpyHostToDevice);
        if (hkc_cast(&k, 1, dF, 16, dH, n, err) || hkc_cast(&k, 16, dH, 1, dB2, n, err)) {
            printf("FAIL bf16 cast: %s\n", err);
            failures++;
        } else {
            cudaDeviceSynchronize();
            cudaMemcpy(got, dH, 2 * (size_t)n, cudaMemcpyDeviceToHost);
            cudaMemcpy(back, dB2, 4 * (size_t)n, cudaMemcpyDeviceToHost);
            int64_t bad = -1;
            for (int64_t i = 0; i < n && bad < 0; i++)
                if (got[i] != want[i] || memcmp(&back[i], &wback[i], 4)) bad = i;
            if (bad >= 0) {
                printf("FAIL bf16 cast: f32 bits %08x -> device %04x host %04x\n",
                       bits[bad], got[bad], want[bad]);
                failures++;
            } else {
                printf("ok   bf16 cast f32 -> bf16 -> f32 (%lld patterns, bit for bit)\n",
                       (long long)n);
            }
        }
        /* --bf16-rounding stochastic: the device draws the host's bits */
        const int64_t key = 0x2468ace, step = 11;
        hk_bf16_round_sr((const float *)bits, want, n, key, step);
        if (hkc_round_bf16_sr(&k, dF, dH, n, key, step, err)) {
            printf("FAIL bf16 stochastic rounding: %s\n", err);
            failures++;
        } else {
            cudaDeviceSynchronize();
            cudaMemcpy(got, dH, 2 * (size_t)n, cudaMemcpyDeviceToHost);
            int64_t bad = -1;
            for (int64_t i = 0; i < n && bad < 0; i++)
                if (got[i] != want[i]) bad = i;
            if (bad >= 0) {
                printf("FAIL bf16 stochastic rounding: element %lld, f32 bits %08x -> device "
                       "%04x host %04x\n", (long long)bad, bits[bad], got[bad], want[bad]);
                failures++;
            } else {
                printf("ok   bf16 stochastic rounding (%lld elements, bit for bit)\n",
                       (long long)n);
            }
        }
        free(bits), free(want), free(got), free(back), free(wback);
        cudaFree(dF), cudaFree(dH), cudaFree(dB2);
    }
    /* bf16 Linear / LinearGrad vs the host's converted-sgemm twins */
    {
        const int64_t M = 37, K = 64, N = 48;
        float *xf = host_rand(M * K, 0), *wf = host_rand(K * N, 0), *bf = host_rand(N, 0);
        float *dyf = host_rand(M * N, 0);
        uint16_t *x = malloc(2 * (size_t)(M * K)), *w = malloc(2 * (size_t)(K * N)),
                 *b = malloc(2 * (size_t)N), *dy = malloc(2 * (size_t)(M * N));
        hk_bf16_round(xf, x, M * K), hk_bf16_round(wf, w, K * N), hk_bf16_round(bf, b, N);
        hk_bf16_round(dyf, dy, M * N);
        void *dX, *dW, *dB, *dDy, *dY, *dGx;
        float *dGw = dev_of(NULL, K * N), *dGb = dev_of(NULL, N);
        cudaMalloc(&dX, 2 * (size_t)(M * K)), cudaMalloc(&dW, 2 * (size_t)(K * N));
        cudaMalloc(&dB, 2 * (size_t)N), cudaMalloc(&dDy, 2 * (size_t)(M * N));
        cudaMalloc(&dY, 2 * (size_t)(M * N)), cudaMalloc(&dGx, 2 * (size_t)(M * K));
        cudaMemcpy(dX, x, 2 * (size_t)(M * K), cudaMemcpyHostToDevice);
        cudaMemcpy(dW, w, 2 * (size_t)(K * N), cudaMemcpyHostToDevice);
        cudaMemcpy(dB, b, 2 * (size_t)N, cudaMemcpyHostToDevice);
        cudaMemcpy(dDy, dy, 2 * (size_t)(M * N), cudaMemcpyHostToDevice);
        /* a device bf16 result as f32 (exact), beside the host's */
        float *gotf = malloc(4 * (size_t)(M * (K > N ? K : N)));
        uint16_t *goth = malloc(2 * (size_t)(M * (K > N ? K : N)));
        float *wantf = malloc(4 * (size_t)(M * (K > N ? K : N)));
        uint16_t *wanth = malloc(2 * (size_t)(M * (K > N ? K : N)));
        for (int hb = 0; hb < 2; hb++) {
            hk_linear_bf16(x, w, hb ? b : NULL, M, K, N, wanth);
            if (hkc_linear_bf16(&k, M, N, K, dX, dW, hb ? dB : NULL, dY, err)) {
                printf("FAIL bf16 linear: %s\n", err);
                failures++;
                continue;
            }
            cudaDeviceSynchronize();
            cudaMemcpy(goth, dY, 2 * (size_t)(M * N), cudaMemcpyDeviceToHost);
            hk_bf16_expand(goth, gotf, M * N);
            hk_bf16_expand(wanth, wantf, M * N);
            float *dtmp = dev_of(gotf, M * N);
            compare(hb ? "bf16 linear with bias [37,64]x[64,48]" : "bf16 linear [37,64]x[64,48]",
                    dtmp, wantf, M * N, 0x1p-7, 1e-4);
            cudaFree(dtmp);
        }
        float *gw = calloc((size_t)(K * N), 4), *gb = calloc((size_t)N, 4);
        if (hk_linear_backward_bf16(x, w, dy, M, K, N, wanth, gw, gb, 0, err) ||
            hkc_linear_backward_bf16(&k, dX, dW, dDy, M, K, N, dGx, dGw, dGb, err)) {
            printf("FAIL bf16 linear grad: %s\n", err);
            failures++;
        } else {
            cudaDeviceSynchronize();
            cudaMemcpy(goth, dGx, 2 * (size_t)(M * K), cudaMemcpyDeviceToHost);
            hk_bf16_expand(goth, gotf, M * K);
            hk_bf16_expand(wanth, wantf, M * K);
            float *dtmp = dev_of(gotf, M * K);
            compare("bf16 linear grad dx (bf16)", dtmp, wantf, M * K, 0x1p-7, 1e-4);
            cudaFree(dtmp);
            compare("bf16 linear grad dw (f32)", dGw, gw, K * N, 1e-4, 2e-5);
            compare("bf16 linear grad db (f32)", dGb, gb, N, 1e-5, 1e-6);
        }
        free(xf), free(wf), free(bf), free(dyf), free(x), free(w), free(b), free(dy);
        free(gotf), free(goth), free(wantf), free(wanth), free(gw), free(gb);
        cudaFree(dX), cudaFree(dW), cudaFree(dB), cudaFree(dDy), cudaFree(dY), cudaFree(dGx);
        cudaFree(dGw), cudaFree(dGb);
    }
    /* LayerNorm (with / without bias) and RMSNorm over rows of n, forward
     * and backward, vs the host kernels (tolerances as test_cuda_kernels) */
    for (int rms = 0; rms < 2; rms++)
        for (int hb = 0; hb < 2 - rms; hb++) {
            const int64_t rows = 32, n = 48;
            const double eps = rms ? 1e-6 : 1e-5;
            float *x = host_rand(rows * n, 0), *sc = host_rand(n, 0), *bi = host_rand(n, 0);
            float *dy = host_rand(rows * n, 0), *y = calloc((size_t)(rows * n), 4);
            float *gx = calloc((size_t)(rows * n), 4), *gs = calloc((size_t)n, 4),
                  *gb = calloc((size_t)n, 4);
            float *dX = dev_of(x, rows * n), *dS = dev_of(sc, n), *dB = dev_of(bi, n);
            float *dDy = dev_of(dy, rows * n), *dY = dev_of(NULL, rows * n);
            float *dGx = dev_of(NULL, rows * n), *dGs = dev_of(NULL, n), *dGb = dev_of(NULL, n);
            float *stats = dev_of(NULL, 2 * rows + 1);
            const char *name = rms ? "rmsnorm" : hb ? "layernorm with bias" : "layernorm";
            char what[80];
            if (rms) hk_rmsnorm_f32(x, sc, rows, n, eps, y);
            else hk_layernorm_f32(x, sc, hb ? bi : NULL, rows, n, eps, y);
            int hrc = rms ? hk_rmsnorm_backward_f32(x, sc, dy, NULL, rows, n, eps, gx, gs, 0, err)
                          : hk_layernorm_backward_f32(x, sc, dy, NULL, NULL, rows, n, eps, gx, gs,
                                                      gb, 0, err);
            if (hrc || cu_direct_norm(&k, rms, dX, dS, hb ? dB : NULL, rows, n, eps, dY, err) ||
                cu_direct_norm_grad(&k, rms, dX, dS, dDy, rows, n, eps, stats, dGx, dGs,
                                    rms ? NULL : dGb, err)) {
                printf("FAIL %s: %s\n", name, err);
                failures++;
            } else {
                snprintf(what, sizeof what, "%s [32,48]", name);
                compare(what, dY, y, rows * n, 1e-5, 1e-6);
                snprintf(what, sizeof what, "%s grad dx", name);
                compare(what, dGx, gx, rows * n, 1e-4, 1e-5);
                snprintf(what, sizeof what, "%s grad dscale", name);
                compare(what, dGs, gs, n, 1e-4, 1e-5);
                if (!rms) compare("layernorm grad dbias", dGb, gb, n, 1e-4, 1e-5);
            }
            free(x), free(sc), free(bi), free(dy), free(y), free(gx), free(gs), free(gb);
            cudaFree(dX), cudaFree(dS), cudaFree(dB), cudaFree(dDy), cudaFree(dY);
            cudaFree(dGx), cudaFree(dGs), cudaFree(dGb), cudaFree(stats);
        }
    /* AdamW in place, with and without a clip scale, vs hk_entry_adamw_f32 */
    for (int clip = 0; clip < 2; clip++) {
        const int64_t n = 3001;
        float *p = host_rand(n, 0), *m = host_rand(n, 0), *v = host_rand(n, 1), *g = host_rand(n, 0);
        float lr = 3e-3f, cs = 0.7f;
        int64_t step = 5;
        float *wp = malloc(4 * n), *wm = malloc(4 * n), *wv = malloc(4 * n);
        float *dP = dev_of(p, n), *dM = dev_of(m, n), *dV = dev_of(v, n), *dG = dev_of(g, n);
        float *dLr = dev_of(&lr, 1), *dCs = dev_of(&cs, 1);
        int64_t *dStep = NULL;
        cudaMalloc((void **)&dStep, sizeof step);
        cudaMemcpy(dStep, &step, sizeof step, cudaMemcpyHostToDevice);
        const char *what = clip ? "adamw in place, clip scale" : "adamw in place";
        if (hk_entry_adamw_f32(p, m, v, g, n, &lr, &step, clip ? &cs : NULL, 0.9, 0.95, 1e-8, 0.1,
                               wp, wm, wv, err) ||
            cu_direct_adamw(&k, dP, dM, dV, dG, n, dLr, dStep, clip ? dCs : NULL, 0.9, 0.95, 1e-8,
                            0.1, dP, dM, dV, err)) {
            printf("FAIL %s: %s\n", what, err);
            failures++;
        } else {
            compare(what, dP, wp, n, 1e-6, 1e-7);
            compare(what, dM, wm, n, 1e-6, 1e-7);
            compare(what, dV, wv, n, 1e-6, 1e-7);
        }
        free(p), free(m), free(v), free(g), free(wp), free(wm), free(wv);
        cudaFree(dP), cudaFree(dM), cudaFree(dV), cudaFree(dG), cudaFree(dLr), cudaFree(dCs);
        cudaFree(dStep);
    }
    hkc_ctx_free(&k);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
