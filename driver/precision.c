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
                "cluster file's dtype, which no stage binary runs); this command runs "
                "bf16-mixed (the default) or fp32: use --precision bf16-mixed or fp32\n", cmd);
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

Precision precision_compile_default(const char *planned, const char *backend,
                                    const char **why)
{
    if (planned && (!strcmp(planned, "fp32") || !strcmp(planned, "bf16-mixed"))) {
        *why = "the plan's \"precision\"";
        return !strcmp(planned, "fp32") ? PRECISION_FP32 : PRECISION_BF16_MIXED;
    }
    if (backend && !strcmp(backend, "cuda")) {
        /* the CUDA bf16 kernels are compiled (and ptxas-checked) but have
         * not run on a GPU yet; fp32 CUDA has (docs/CUDA.md) */
        *why = "--backend cuda's default";
        return PRECISION_FP32;
    }
    *why = "the default";
    return PRECISION_BF16_MIXED;
}

int precision_rounding_parse(const char *cmd, const char *v, int *stochastic) {
    if (!strcmp(v, "nearest") || !strcmp(v, "stochastic")) {
        *stochastic = !strcmp(v, "stochastic");
        return 0;
    }
    fprintf(stderr, "%s: --bf16-rounding expects nearest or stochastic, got '%s'\n", cmd, v);
    return -1;
}

int precision_rounding_check(const char *cmd, int stochastic, Precision p, const char *why) {
    if (!stochastic || p == PRECISION_BF16_MIXED) return 0;
    fprintf(stderr, "%s: --bf16-rounding stochastic needs --precision bf16-mixed (this run is "
            "%s, %s: it has no bf16 weight copies to round)\n", cmd, precision_name(p), why);
    return -1;
}
