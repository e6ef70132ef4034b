/* --precision (precision.h). */
#include "precision.h"

#include <stdio.h>
#include <string.h>

const char *precision_name(Precision p)
{
    return p == PRECISION_BF16_MIXED ? "bf16-mixed"
           : p == PRECISION_CLUSTER_DTYPE ? "cluster-dtype" : "fp32";
}

int precision_parse(const char *cmd, const char *v, int allow_cluster, Precision *out)
{
    if (!strcmp(v, "fp32")) {
        *out = PRECISION_FP32;
        return 0;
    }
    if (!strcmp(v, "bf16-mixed")) { /* passes/mixed_precision.c; host backend only */
        *out = PRECISION_BF16_MIXED;
        return 0;
    }
    if (!strcmp(v, "cluster-dtype")) {
        if (allow_cluster) {
            *out = PRECISION_CLUSTER_DTYPE;
            return 0;
        }
        fprintf(stderr, "%s: --precision cluster-dtype is for hetc plan only (a plan in the "
                "cluster file's dtype, which no stage binary runs); this command runs fp32: "
                "use --precision fp32 (the default)\n", cmd);
        return -1;
    }
    fprintf(stderr, "%s: --precision expects fp32 or bf16-mixed%s, got '%s'\n", cmd,
            allow_cluster ? " (or cluster-dtype)" : "", v);
    return -1;
}

const char *precision_planned(Precision p, const char *dtype)
{
    if (p == PRECISION_BF16_MIXED) /* fp32 states, bf16 GEMM time (docs/PLANNER.md) */
        return "bf16-mixed";
    if (p != PRECISION_CLUSTER_DTYPE || !dtype || !strcmp(dtype, "fp32"))
        return "fp32";
    return !strcmp(dtype, "fp16") ? "fp16-mixed" : "bf16-mixed";
}
