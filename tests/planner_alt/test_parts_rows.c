/* plan.json's rows for a DP group over several meshes (plan_stage_rows,
 * issue 18): every rank gets at least one row, the rows sum to the
 * microbatch, a part's rows are split evenly over its ranks, and the split
 * between parts is as close to the shares as those rules allow: its largest
 * shortfall below a part's share (share x R - rows) equals the smallest any
 * split with a row per rank can reach, found by brute force over every
 * split.  Before, largest remainder gave a part with a small share 0 rows
 * (a rank that runs nothing).  A stage on one mesh keeps rt_row_split's
 * split (the first R mod dp ranks one row more).
 * usage: test_parts_rows */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan_output.h"

static int fails;
#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
            fails++;                                                            \
        }                                                                       \
    } while (0)

/* The smallest largest shortfall over every split of R rows over the parts
 * with at least k[j] rows on part j (brute force, depth-first). */
static double best_short(const double *share, const int *k, int np, int j, long left, long R,
                         double worst)
{
    if (j == np - 1) {
        if (left < k[j])
            return INFINITY;
        double d = share[j] * (double)R - (double)left;
        return d > worst ? d : worst;
    }
    double best = INFINITY;
    for (long g = k[j]; g <= left; g++) {
        double d = share[j] * (double)R - (double)g;
        double w = best_short(share, k, np, j + 1, left - g, R, d > worst ? d : worst);
        best = w < best ? w : best;
    }
    return best;
}

static void one(const int *dev, const double *share, int np, long R)
{
    PlanStage st;
    memset(&st, 0, sizeof st);
    st.tp = 1;
    st.nparts = np;
    for (int j = 0; j < np; j++) {
        st.parts[j].mesh = j;
        st.parts[j].devices = dev[j];
        st.parts[j].share = share[j];
        st.dp += dev[j];
    }
    long out[64], sum = 0;
    plan_stage_rows(&st, R, out);
    double worst = -INFINITY;
    for (int j = 0, r = 0; j < np; r += dev[j], j++) {
        long part = 0, lo = out[r], hi = out[r];
        for (int i = r; i < r + dev[j]; i++) {
            CHECK(out[i] >= 1, "R %ld part %d (share %.3f): rank %d has %ld rows", R, j,
                  share[j], i, out[i]);
            part += out[i];
            lo = out[i] < lo ? out[i] : lo;
            hi = out[i] > hi ? out[i] : hi;
        }
        CHECK(hi - lo <= 1, "R %ld part %d: its ranks' rows differ by %ld", R, j, hi - lo);
        double d = share[j] * (double)R - (double)part;
        worst = d > worst ? d : worst;
        sum += part;
    }
    CHECK(sum == R, "R %ld: rows sum to %ld", R, sum);
    double best = best_short(share, dev, np, 0, R, R, -INFINITY);
    CHECK(fabs(worst - best) <= 1e-9, "R %ld over %d parts: largest shortfall %.3f, best %.3f",
          R, np, worst, best);
}

int main(void)
{
    /* the bug: a 3 % share of 4 rows, one device */
    int d2[] = {3, 1};
    double s2[] = {0.97, 0.03};
    one(d2, s2, 2, 4);
    /* every small case: 2-3 parts of 1-3 devices, shares from a grid, R from dp to 12 */
    const double grid[] = {0.02, 0.1, 0.25, 0.4, 0.6, 0.9};
    int ng = (int)(sizeof grid / sizeof *grid), cases = 0;
    for (int np = 2; np <= 3; np++)
        for (int code = 0; code < 27; code++) {
            int dev[3] = {1 + code % 3, 1 + code / 3 % 3, 1 + code / 9 % 3}, dp = 0;
            if (np == 2 && code >= 9)
                continue;
            for (int j = 0; j < np; j++)
                dp += dev[j];
            for (int a = 0; a < ng; a++)
                for (int b = 0; b < ng; b++) {
                    double sh[3] = {grid[a], grid[b], 0}, tot = 0;
                    if (np == 3)
                        sh[2] = 1;
                    for (int j = 0; j < np; j++)
                        tot += sh[j];
                    for (int j = 0; j < np; j++)
                        sh[j] /= tot;
                    for (long R = dp; R <= 12; R++, cases++)
                        one(dev, sh, np, R);
                }
        }
    /* a stage on one mesh: rt_row_split's split */
    PlanStage st;
    memset(&st, 0, sizeof st);
    st.dp = 3;
    st.tp = 1;
    long out[3];
    plan_stage_rows(&st, 8, out);
    CHECK(out[0] == 3 && out[1] == 3 && out[2] == 2, "dp 3 over 8 rows: %ld %ld %ld", out[0],
          out[1], out[2]);
    printf("%d splits: every rank >= 1 row, sums right, shortfall minimal\n", cases);
    if (fails)
        fprintf(stderr, "%d failures\n", fails);
    return fails ? 1 : 0;
}
