/* The training precision: an explicit, checked choice of hetc compile,
 * hetc plan and hetc train (issue 17; docs/TRAINING.md "Precision").
 *
 * bf16-mixed is the default: mixed precision (passes/mixed_precision.c:
 * the Linears on bf16 operands with fp32 accumulation, everything else
 * fp32) of hetc train and the stage binaries; the planner sizes its memory
 * from the stage arena and times its Linears at the bf16 peak.  fp32 is
 * every tensor and every kernel in fp32 (the reference tests pin it):
 * 4-byte weights, gradients, Adam m and v, activations at the devices'
 * fp32 peak.  hetc compile --backend cuda defaults to fp32 (the CUDA bf16
 * kernels have not yet run on a GPU), and hetc compile --plan FILE to the
 * plan's "precision": precision_compile_default.  cluster-dtype (hetc plan
 * only) plans in the cluster file's `dtype` as before issue 17: 16-bit
 * mixed precision with ZeRO's accounting when it says fp16 / bf16 -- a
 * planning what-if (the paper's setting) that no stage binary runs. */
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

/* hetc compile's precision when no --precision is given, one rule:
 * `planned` (a --plan FILE's "precision", NULL when there is none or no
 * --plan) when it is fp32 or bf16-mixed; else fp32 for backend "cuda";
 * else bf16-mixed.  *why: which of the three decided, for messages. */
Precision precision_compile_default(const char *planned, const char *backend,
                                    const char **why);

/* --bf16-rounding nearest|stochastic (bf16-mixed): how the bf16 copies of
 * the fp32 master weights are rounded; *stochastic 0 or 1 (passes/
 * stochastic_round.c).  -1 after saying why on stderr. */
int precision_rounding_parse(const char *cmd, const char *v, int *stochastic);
/* The check both commands make once the precision is known: 0, or -1
 * after saying why (stochastic rounding of an fp32 run's weights). */
int precision_rounding_check(const char *cmd, int stochastic, Precision p, const char *why);

#endif
