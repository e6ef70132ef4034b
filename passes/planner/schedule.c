/* Warm-up counts (HAPT Eq. 1-2, §2.3.1) and F/B action lists.  See schedule.h. */
#include "schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const kSchedNames[] = {
    [SCHED_H1F1B] = "h1f1b",
    [SCHED_1F1B] = "1f1b",
    [SCHED_EAGER1F1B] = "eager1f1b",
    [SCHED_GPIPE] = "gpipe",
};
enum { kNumSched = (int)(sizeof kSchedNames / sizeof kSchedNames[0]) };

const char *schedule_name(ScheduleKind k)
{
    if ((int)k < 0 || (int)k >= kNumSched)
        return "unknown";
    return kSchedNames[k];
}

void schedule_names(char *buf, size_t n, const char *quote)
{
    size_t o = 0;
    buf[0] = 0;
    for (int k = 0; k < kNumSched && o < n; k++) {
        const char *sep = k == 0 ? "" : k == kNumSched - 1 ? " or " : ", ";
        int w = snprintf(buf + o, n - o, "%s%s%s%s", sep, quote, kSchedNames[k], quote);
        if (w < 0)
            break;
        o += (size_t)w;
    }
}

int schedule_from_name(const char *s)
{
    if (!s)
        return -1;
    for (int k = 0; k < kNumSched; k++)
        if (strcasecmp(s, kSchedNames[k]) == 0)
            return k;
    /* Accept the spellings users type: "h-1f1b", "eager-1f1b". */
    if (strcasecmp(s, "h-1f1b") == 0)
        return SCHED_H1F1B;
    if (strcasecmp(s, "eager-1f1b") == 0)
        return SCHED_EAGER1F1B;
    return -1;
}

int h1f1b_delta(double c, double t_max, double eps, int *beyond_paper)
{
    if (beyond_paper)
        *beyond_paper = 0;
    /* Eq. 2.  The paper writes 0 < c <= eps t_max for δ = 1; c = 0 (two
     * stages in one mesh with a free boundary) needs no extra launch either,
     * so it joins that band. */
    if (c <= eps * t_max)
        return 1;
    if (c <= 0.5 * t_max)
        return 2;
    if (c <= t_max)
        return 3;
    /* c > t_max: outside Eq. 2 (the paper assumes it away).  Eq. 11's form
     * ceil(1 + 2c / t_max) is what the K-block argument of §4.2.2 requires
     * to hide the transfer; it continues Eq. 2 (it gives 3 at c = t_max). */
    if (beyond_paper)
        *beyond_paper = 1;
    if (!(t_max > 0))
        return 3;
    double d = ceil(1.0 + 2.0 * c / t_max);
    return d > 1e6 ? 1000000 : (int)d;
}

int schedule_warmup_step(ScheduleKind kind, int n_next, int s_suffix, double c, double t_max,
                         double eps, int B, int *delta, int *beyond_paper)
{
    int n, d = 0, beyond = 0;
    switch (kind) {
    case SCHED_H1F1B:
        /* Eq. 1 read from the last stage up: N_S = 1 (= 0 + δ with c_S = 0),
         * N_i = N_{i+1} + δ_i.  Eq. 23's K = ceil(2C(i)/t_max) + 1 + N(...)
         * is the same quantity with Eq. 11's δ; we use Eq. 2's δ so that the
         * memory the DP reserves is exactly what the emitted schedule keeps
         * in flight (see docs/PLANNER.md). */
        d = h1f1b_delta(n_next == 0 ? 0.0 : c, t_max, eps, &beyond);
        n = n_next + d;
        break;
    case SCHED_1F1B:
        n = s_suffix;
        d = n - n_next;
        break;
    case SCHED_EAGER1F1B:
        /* §2.3.1: stage i launches 2 (S - i) + 1 forwards. */
        n = 2 * s_suffix - 1;
        d = n - n_next;
        break;
    case SCHED_GPIPE:
    default:
        n = B;
        d = n - n_next;
        break;
    }
    if (n > B)
        n = B;
    if (n < 1)
        n = 1;
    if (delta)
        *delta = d;
    if (beyond_paper)
        *beyond_paper = beyond;
    return n;
}

int schedule_warmups(ScheduleKind kind, int S, int B, const double *c, double t_max, double eps,
                     int *N, int *delta, int *beyond)
{
    if (S <= 0 || B <= 0 || !N)
        return -1;
    int n_next = 0;
    for (int i = S - 1; i >= 0; i--) {
        int d = 0, bey = 0;
        double ci = (i == S - 1 || !c) ? 0.0 : c[i];
        N[i] = schedule_warmup_step(kind, n_next, S - i, ci, t_max, eps, B, &d, &bey);
        if (delta)
            delta[i] = (i == S - 1) ? 0 : d;
        if (beyond)
            beyond[i] = (i == S - 1) ? 0 : bey;
        n_next = N[i];
    }
    return 0;
}

void schedule_free(Schedule *s)
{
    if (!s)
        return;
    if (s->actions)
        for (int i = 0; i < s->S; i++)
            free(s->actions[i]);
    free(s->actions);
    free(s->warmup);
    memset(s, 0, sizeof *s);
}

int schedule_build(int S, int B, const int *warmup, Schedule *out, IrError *err)
{
    memset(out, 0, sizeof *out);
    if (S <= 0 || B <= 0 || !warmup) {
        ir_errorf(err, "schedule: bad sizes (S = %d stages, B = %d microbatches)", S, B);
        return -1;
    }
    for (int i = 0; i + 1 < S; i++) {
        /* Stage i+1 runs N_{i+1} forwards before its first backward; stage i
         * must have sent them before it blocks on that backward. */
        int a = warmup[i] < B ? warmup[i] : B, b = warmup[i + 1] < B ? warmup[i + 1] : B;
        if (a < b) {
            ir_errorf(err, "schedule: warm-up of stage %d (%d) is below stage %d's (%d): the pipe "
                      "would deadlock", i, warmup[i], i + 1, warmup[i + 1]);
            return -1;
        }
    }
    out->S = S;
    out->B = B;
    out->warmup = calloc((size_t)S, sizeof *out->warmup);
    out->actions = calloc((size_t)S, sizeof *out->actions);
    if (!out->warmup || !out->actions)
        goto oom;
    for (int i = 0; i < S; i++) {
        int n = warmup[i];
        if (n < 1)
            n = 1;
        if (n > B)
            n = B;
        out->warmup[i] = n;
        SchedAction *a = calloc((size_t)2 * B, sizeof *a);
        if (!a)
            goto oom;
        out->actions[i] = a;
        int k = 0, nf = 0;
        while (nf < n)
            a[k++] = (SchedAction){'F', nf++};
        for (int nb = 0; nb < B; nb++) {
            a[k++] = (SchedAction){'B', nb};
            if (nf < B)
                a[k++] = (SchedAction){'F', nf++};
        }
    }
    return 0;
oom:
    schedule_free(out);
    ir_errorf(err, "schedule: out of memory (S = %d, B = %d)", S, B);
    return -1;
}

int schedule_build_kind(ScheduleKind kind, int S, int B, const double *c, double t_max, double eps,
                        Schedule *out, IrError *err)
{
    memset(out, 0, sizeof *out);
    if (S <= 0 || B <= 0) {
        ir_errorf(err, "schedule: bad sizes (S = %d stages, B = %d microbatches)", S, B);
        return -1;
    }
    int *N = calloc((size_t)S, sizeof *N);
    if (!N) {
        ir_errorf(err, "schedule: out of memory");
        return -1;
    }
    schedule_warmups(kind, S, B, c, t_max, eps, N, NULL, NULL);
    int rc = schedule_build(S, B, N, out, err);
    free(N);
    return rc;
}
