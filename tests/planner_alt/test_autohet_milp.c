/* AutoHet's grouping MILP (GLPK) against exhaustive search: the same optimal
 * z on small instances (random and the example clusters' shapes), and the
 * same verdict when no grouping meets the memory bound (3b). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "alt_autohet.h"
#include "alt_plan.h"

static unsigned long long rng = 88172645463325252ull;
static int rnd(int n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (unsigned long long)n);
}

/* The example clusters' shapes (TP 1 and 2 where nodes allow), every J
 * the brute force can afford, three memory bounds. */
static int cluster_cases(const char *src, int *ncases)
{
    static const char *names[] = {"tiny_hetero", "tiny_pair", "case_study", "three_mesh", NULL};
    int fails = 0;
    for (int ci = 0; names[ci]; ci++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/examples/clusters/%s.yaml", src, names[ci]);
        ClusterSpec c;
        IrError err = {{0}};
        if (cluster_load_yaml(path, &c, &err)) {
            fprintf(stderr, "FAIL: %s\n", err.msg);
            fails++;
            continue;
        }
        for (int tp = 1; tp <= 2; tp *= 2) {
            AhTypes ty = {0};
            ty.time_limit_ms = -1;   /* no wall-clock limit in a test */
            ty.T = c.nmeshes;
            int total = 0, ok = 1;
            for (int a = 0; a < c.nmeshes; a++) {
                ok &= c.meshes[a].per_node % tp == 0;
                ty.count[a] = c.meshes[a].nodes * c.meshes[a].per_node / tp;
                ty.g[a] = tp * device_peak_flops(&c.meshes[a].dev, c.dtype);
                ty.m[a] = tp * c.meshes[a].dev.mem_bytes;
                total += ty.count[a];
            }
            if (!ok)
                continue;
            for (int J = 1; J <= total && J <= 5; J++)
                for (int K = 1; K <= 16; K *= 4)
                    for (double mm = 20e9; mm < 200e9; mm *= 3) {
                        int n1[256], n2[256], opt = 0;
                        double zm = autohet_group_milp(&ty, J, K, mm, n1, &opt);
                        double zb = autohet_group_brute(&ty, J, K, mm, n2);
                        (*ncases)++;
                        if ((zm < 0) != (zb < 0) || (zb >= 0 && (fabs(zm - zb) > 1e-9 * zb || !opt))) {
                            fprintf(stderr, "FAIL %s tp %d J %d K %d mem %g: MILP %g, brute %g\n",
                                    c.name, tp, J, K, mm, zm, zb);
                            fails++;
                        }
                    }
        }
        cluster_free(&c);
    }
    return fails;
}

int main(int argc, char **argv)
{
    int fails = 0, cases = 0, infeasible = 0;
    if (argc > 1) {
        int nc = 0;
        fails += cluster_cases(argv[1], &nc);
        printf("example clusters: %d groupings, MILP == brute force in all but %d\n", nc, fails);
    }
    printf("GLPK: %s\n", autohet_have_glpk() ? "yes" : "no (MILP falls back to brute force)");
    for (int it = 0; it < 300; it++) {
        AhTypes ty = {0};
        ty.time_limit_ms = -1;
        ty.T = 1 + rnd(3);
        int total = 0;
        for (int t = 0; t < ty.T; t++) {
            ty.count[t] = 1 + rnd(4);
            ty.g[t] = (1 + rnd(8)) * 1e14;     /* 100..800 TFLOP/s */
            ty.m[t] = (16 + 16 * rnd(5)) * 1e9; /* 16..80 GB */
            total += ty.count[t];
        }
        ty.max_stages = rnd(2) ? 0 : 2 + rnd(4);
        int J = 1 + rnd(total < 4 ? total : 4);
        int K = 1 << rnd(4);
        double min_mem = (rnd(4) * 40 + 10) * 1e9;
        int n1[64], n2[64];
        int opt = 0;
        double zm = autohet_group_milp(&ty, J, K, min_mem, n1, &opt);
        double zb = autohet_group_brute(&ty, J, K, min_mem, n2);
        cases++;
        if (zb < 0)
            infeasible++;
        if ((zm < 0) != (zb < 0) || (zb >= 0 && fabs(zm - zb) > 1e-9 * zb) || (zb >= 0 && !opt)) {
            fprintf(stderr, "FAIL case %d: T %d J %d K %d min_mem %g: MILP %g (optimal %d), brute %g\n",
                    it, ty.T, J, K, min_mem, zm, opt, zb);
            fails++;
        }
    }
    printf("%d random instances (%d infeasible); failures in all: %d\n", cases, infeasible, fails);
    return fails ? 1 : 0;
}
