/* The training precision: an explicit, checked choice of hetc compile,
 * hetc plan and hetc train (issue 17; docs/TRAINING.md "Precision").
 *
 * fp32 is what every stage binary and hetc train run today, and the
 * default: the planner then sizes memory and time in fp32 (4-byte weights,
 * gradients, Adam m and v, activations; the devices' fp32 peak), so its
 * per-stage memory is the arena the stage binary allocates.  bf16-mixed is
 * mixed precision (passes/mixed_precision.c: the Linears in bf16,
 * everything else fp32) of hetc train and the host stage binaries; the
 * planner still sizes it as fp32 (the weights, gradients and moments are
 * fp32; the bf16 GEMM operands are not modelled).  cluster-dtype
 * (hetc plan only) plans in the cluster file's `dtype` as before issue 17:
 * 16-bit mixed precision with ZeRO's accounting when it says fp16 / bf16 --
 * a planning what-if (the paper's setting) that no stage binary runs. */
#ifndef HETC_PRECISION_H
#define HETC_PRECISION_H

typedef enum Precision {
    PRECISION_FP32 = 0,
    PRECISION_BF16_MIXED,
    PRECISION_CLUSTER_DTYPE,
} Precision;

/* "fp32" | "bf16-mixed" | "cluster-dtype" */
const char *precision_name(Precision p);

/* Parse --precision's value for command `cmd` ("hetc plan", ...).
 * allow_cluster: cluster-dtype is accepted (hetc plan).  An unknown word is
 * refused: -1 after saying why on stderr. */
int precision_parse(const char *cmd, const char *v, int allow_cluster, Precision *out);

/* The precision plan.txt and plan.json state for a plan made in cluster
 * dtype `dtype` under `p`: "fp32", or for cluster-dtype "fp16-mixed" /
 * "bf16-mixed" (16-bit weights and gradients, fp32 master and moments) or
 * "fp32"; bf16-mixed (fp32 model states, bf16 GEMM time) says "bf16-mixed"
 * with the cluster dtype fp32. */
const char *precision_planned(Precision p, const char *dtype);

#endif
