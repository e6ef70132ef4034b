/* Warm-up rules and action lists (passes/planner/schedule.c).
 * Oracles: Eq. 11's closed form for δ outside Eq. 2's ε band, the warm-up
 * counts the paper reports for its §2.3.2 case study, the definitions of
 * 1F1B / Eager-1F1B / GPipe, and invariants any valid action list obeys. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "schedule.h"

static int fails;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fails++;                                                                               \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static unsigned long long rng = 88172645463325252ULL;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void test_delta(void)
{
    const double eps = 0.1;
    for (int r = 0; r < 2000; r++) {
        double t = 0.01 + urand();
        double c = urand() * 3.0 * t;
        int beyond = -1;
        int d = h1f1b_delta(c, t, eps, &beyond);
        if (c <= eps * t) {
            CHECK(d == 1, "c=%g t=%g: δ=%d, want 1 (ε band)", c, t, d);
        } else {
            /* Outside the ε band Eq. 2 coincides with Eq. 11's
             * ceil(1 + 2c/t) (3 at most while c <= t). */
            int want = (int)ceil(1.0 + 2.0 * c / t);
            CHECK(d == want, "c=%g t=%g: δ=%d, Eq. 11 gives %d", c, t, d, want);
        }
        CHECK(beyond == (c > t), "c=%g t=%g: beyond=%d", c, t, beyond);
    }
    CHECK(h1f1b_delta(0.0, 1.0, 0.1, NULL) == 1, "c = 0");
    CHECK(h1f1b_delta(0.5, 1.0, 0.1, NULL) == 2, "c = t/2");
    CHECK(h1f1b_delta(1.0, 1.0, 0.1, NULL) == 3, "c = t");
}

static void test_case_study(void)
{
    /* §2.3.2: three stages, t_i = t, c_12 in (t/2, t], c_23 <= ε t. */
    for (int r = 0; r < 200; r++) {
        double t = 0.1 + urand();
        double c[3] = {t * (0.5 + 1e-9 + 0.5 * urand()), 0.1 * t * urand(), 0};
        int N[3], E[3], dl[3];
        CHECK(schedule_warmups(SCHED_H1F1B, 3, 16, c, t, 0.1, N, dl, NULL) == 0, "h1f1b");
        CHECK(N[0] == 5 && N[1] == 2 && N[2] == 1, "H-1F1B {%d,%d,%d}, paper {5,2,1}", N[0], N[1],
              N[2]);
        CHECK(dl[0] == 3 && dl[1] == 1 && dl[2] == 0, "δ {%d,%d,%d}", dl[0], dl[1], dl[2]);
        CHECK(schedule_warmups(SCHED_EAGER1F1B, 3, 16, c, t, 0.1, E, NULL, NULL) == 0, "eager");
        CHECK(E[0] == 5 && E[1] == 3 && E[2] == 1, "Eager {%d,%d,%d}, paper {5,3,1}", E[0], E[1],
              E[2]);
    }
}

static void test_kinds(void)
{
    for (int S = 1; S <= 9; S++)
        for (int B = 1; B <= 12; B++) {
            double c[9] = {0};
            for (int i = 0; i < S; i++)
                c[i] = urand();
            int N[9], G[9], E[9], H[9];
            schedule_warmups(SCHED_1F1B, S, B, c, 1.0, 0.1, N, NULL, NULL);
            schedule_warmups(SCHED_GPIPE, S, B, c, 1.0, 0.1, G, NULL, NULL);
            schedule_warmups(SCHED_EAGER1F1B, S, B, c, 1.0, 0.1, E, NULL, NULL);
            schedule_warmups(SCHED_H1F1B, S, B, c, 1.0, 0.1, H, NULL, NULL);
            int h = 0;
            for (int i = S - 1; i >= 0; i--) {
                int s1 = i + 1; /* 1-based stage */
                int want = S - s1 + 1 < B ? S - s1 + 1 : B;
                CHECK(N[i] == want, "1F1B S=%d B=%d stage %d: %d want %d", S, B, s1, N[i], want);
                CHECK(G[i] == B, "GPipe: %d", G[i]);
                int ew = 2 * (S - s1) + 1 < B ? 2 * (S - s1) + 1 : B;
                CHECK(E[i] == ew, "Eager stage %d: %d want %d", s1, E[i], ew);
                /* Eq. 1 summed directly: N_i = 1 + Σ_{k=i}^{S-1} δ_k */
                if (i < S - 1)
                    h += h1f1b_delta(c[i], 1.0, 0.1, NULL);
                int hw = 1 + h < B ? 1 + h : B;
                CHECK(H[i] == hw, "H-1F1B stage %d: %d want %d (Eq. 1)", s1, H[i], hw);
            }
        }
}

static void test_actions(void)
{
    IrError err;
    for (int r = 0; r < 300; r++) {
        int S = 1 + (int)(urand() * 6), B = 1 + (int)(urand() * 10);
        int N[8];
        N[S - 1] = 1 + (int)(urand() * 2);
        for (int i = S - 2; i >= 0; i--)
            N[i] = N[i + 1] + (int)(urand() * 3);
        Schedule sc;
        int rc = schedule_build(S, B, N, &sc, &err);
        CHECK(rc == 0, "build: %s", err.msg);
        if (rc)
            continue;
        for (int i = 0; i < S; i++) {
            int nf = 0, nb = 0, infl = 0, peak = 0, lead = 0;
            int *fpos = calloc((size_t)B, sizeof *fpos), *bpos = calloc((size_t)B, sizeof *bpos);
            for (int k = 0; k < 2 * B; k++) {
                SchedAction a = sc.actions[i][k];
                if (a.kind == 'F') {
                    CHECK(a.mb == nf, "forwards in order");
                    fpos[a.mb] = k;
                    nf++;
                    infl++;
                } else {
                    CHECK(a.kind == 'B' && a.mb == nb, "backwards in order");
                    if (nb == 0)
                        lead = nf;
                    bpos[a.mb] = k;
                    nb++;
                    infl--;
                }
                if (infl > peak)
                    peak = infl;
            }
            int want = N[i] < B ? N[i] : B;
            CHECK(nf == B && nb == B, "each microbatch once");
            CHECK(lead == want, "stage %d: %d forwards before the first backward, want %d", i,
                  lead, want);
            CHECK(peak == want, "stage %d: peak in flight %d, want %d", i, peak, want);
            for (int m = 0; m < B; m++)
                CHECK(fpos[m] < bpos[m], "F before B");
            free(fpos);
            free(bpos);
        }
        schedule_free(&sc);
    }
    /* A warm-up that grows along the pipe deadlocks: rejected. */
    int bad[2] = {1, 2};
    Schedule sc;
    CHECK(schedule_build(2, 4, bad, &sc, &err) != 0, "increasing warm-ups must be rejected");
}

static void test_names(void)
{
    for (int k = SCHED_H1F1B; k <= SCHED_GPIPE; k++)
        CHECK(schedule_from_name(schedule_name((ScheduleKind)k)) == k, "name round trip %d", k);
    CHECK(schedule_from_name("nope") == -1, "unknown name");
}

int main(void)
{
    test_delta();
    test_case_study();
    test_kinds();
    test_actions();
    test_names();
    if (fails) {
        fprintf(stderr, "test_schedule: %d failures\n", fails);
        return 1;
    }
    printf("test_schedule: ok\n");
    return 0;
}
