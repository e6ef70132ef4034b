/* Checkpoints across plans, under mpirun -np 4: a 2-stage layout (DP 2, 2)
 * saves 6 layers (stage 0 owns layers 0-2, stage 1 layers 3-5) at steps 10
 * and 20, and writes step 30's layer files without a manifest (a crash
 * mid-checkpoint); then a 3-stage layout (DP 1, 2, 1; layers 0-1, 2-3,
 * 4-5) finds step 20 as the newest complete checkpoint and reads its own
 * layers back, every rank comparing with the generator both layouts share. */
#include "rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NLAYERS = 6 };
static int failures;
#define EXPECT(c)                                                                   \
    do {                                                                            \
        if (!(c)) {                                                                 \
            rt_log_error("%s:%d: expectation failed: %s", __FILE__, __LINE__, #c); \
            failures++;                                                             \
        }                                                                           \
    } while (0)

/* The parameters of layer l at a step: two tensors whose shapes depend on
 * the layer, so a reader under another layout must get them from the file. */
static int64_t rows_of(int l) { return 2 + l % 3; }
static float gen(int l, int k, int64_t i, int64_t step) {
    return (float)l * 100.0f + (float)k * 10.0f + (float)i * 0.125f + (float)step;
}

static void save(const RtContext *c, const char *dir, int64_t step, int first, int last,
                 int manifest) {
    RtCkptTensor t[2 * NLAYERS] = {{0}};
    float *data[2 * NLAYERS];
    int n = 0;
    for (int l = first; l <= last; l++)
        for (int k = 0; k < 2; k++) {
            int64_t cnt = rows_of(l) * (k ? 1 : 4);
            data[n] = malloc((size_t)cnt * sizeof(float));
            for (int64_t i = 0; i < cnt; i++) data[n][i] = gen(l, k, i, step);
            t[n] = (RtCkptTensor){.layer = l, .name = k ? "bias" : "weight", .dtype = RT_F32,
                                  .ndim = k ? 1 : 2, .shape = {rows_of(l), k ? 0 : 4},
                                  .data = data[n]};
            n++;
        }
    if (manifest) {
        rtCheck(rt_checkpoint_save(c, dir, step, NLAYERS, t, n));
    } else if (c->dp_rank == 0) {
        char err[512];
        for (int l = first; l <= last; l++)
            if (rt_ckpt_write_layer(dir, step, l, t, n, err, sizeof err)) {
                rt_log_error("%s", err);
                failures++;
            }
    }
    for (int i = 0; i < n; i++) free(data[i]);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    RtContext a, b;
    rtCheck(rt_init(&a, &argc, &argv, 2, (int[]){2, 2}));
    int first = a.stage == 0 ? 0 : 3, last = first + 2;
    save(&a, dir, 10, first, last, 1);
    save(&a, dir, 20, first, last, 1);
    save(&a, dir, 30, first, last, 0);
    rtCheck(rt_barrier(&a, "test: saves done"));

    /* Same job, another plan: the reader knows nothing of layout a. */
    rtCheck(rt_init(&b, &argc, &argv, 3, (int[]){1, 2, 1}));
    char ck[1024], err[1024];
    int64_t step = -1;
    EXPECT(rt_checkpoint_latest(dir, ck, sizeof ck, &step, err, sizeof err) == 0);
    EXPECT(step == 20);
    for (int l = 2 * b.stage; l <= 2 * b.stage + 1; l++) {
        RtCkptLayer lay;
        if (rt_ckpt_read_layer(ck, l, &lay, err, sizeof err)) {
            rt_log_error("%s", err);
            failures++;
            continue;
        }
        EXPECT(lay.ntensors == 2 && lay.step == 20);
        for (int k = 0; k < 2; k++) {
            int64_t shape[2] = {rows_of(l), 4};
            int64_t cnt = rows_of(l) * (k ? 1 : 4);
            float *x = malloc((size_t)cnt * sizeof *x);
            if (rt_ckpt_load_tensor(&lay, k ? "bias" : "weight", RT_F32, k ? 1 : 2, shape, x, err,
                                    sizeof err)) {
                rt_log_error("%s", err);
                failures++;
            } else {
                for (int64_t i = 0; i < cnt; i++) EXPECT(x[i] == gen(l, k, i, 20));
            }
            free(x);
        }
        rt_ckpt_layer_free(&lay);
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (a.world_rank == 0) printf(total ? "FAILED (%d)\n" : "ok\n", total);
    rtCheck(rt_finalize(&b));
    rtCheck(rt_finalize(&a));
    return total ? 1 : 0;
}
