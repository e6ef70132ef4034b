/* ckpt_tool: the runtime's checkpoint reader from the command line, for the
 * reliability tests (a FIFO where a MANIFEST or layer file should be).
 *
 *   ckpt_tool write DIR STEP      one layer (layer 0, tensor "w") and MANIFEST
 *   ckpt_tool layer DIR STEP      layer 0 alone, other values (a rewrite killed before
 *                                 its MANIFEST)
 *   ckpt_tool latest DIR          prints "step N", "none", or "error: ..."
 *   ckpt_tool read STEPDIR LAYER  prints "ok" or "error: ..." (exit 1)
 *   ckpt_tool lock DIR            locks DIR like a stage's rank 0, prints "locked" (or
 *                                 "error: ...", exit 1) and holds it until stdin closes
 */
#include "rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    char err[1024] = "";
    if (argc == 4 && (!strcmp(argv[1], "write") || !strcmp(argv[1], "layer"))) {
        int whole = !strcmp(argv[1], "write");
        float w[4] = {1, 2, 3, whole ? 4 : 5};
        RtCkptTensor t = {.layer = 0, .name = "w", .dtype = RT_F32, .ndim = 1, .shape = {4},
                          .data = w};
        int64_t step = atoll(argv[3]);
        if (rt_ckpt_write_layer(argv[2], step, 0, &t, 1, err, sizeof err) ||
            (whole && rt_ckpt_write_manifest(argv[2], step, 1, err, sizeof err))) {
            printf("error: %s\n", err);
            return 1;
        }
        printf("ok\n");
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "latest")) {
        char path[4200];
        int64_t step;
        int rc = rt_checkpoint_latest(argv[2], path, sizeof path, &step, err, sizeof err);
        if (rc < 0)
            printf("error: %s\n", err);
        else if (rc == 1)
            printf("none\n");
        else
            printf("step %lld\n", (long long)step);
        return rc < 0;
    }
    if (argc == 4 && !strcmp(argv[1], "read")) {
        RtCkptLayer l;
        if (rt_ckpt_read_layer(argv[2], atoi(argv[3]), &l, err, sizeof err)) {
            printf("error: %s\n", err);
            return 1;
        }
        rt_ckpt_layer_free(&l);
        printf("ok\n");
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "lock")) {
        int fd;
        if (rt_ckpt_lock(argv[2], &fd, err, sizeof err)) {
            printf("error: %s\n", err);
            return 1;
        }
        printf("locked\n");
        fflush(stdout);
        while (getchar() != EOF) {
        }
        return 0;
    }
    fprintf(stderr, "usage: ckpt_tool write|layer DIR STEP | latest DIR | read STEPDIR LAYER | "
            "lock DIR\n");
    return 2;
}
