/* The planner's shared data model (HAPT, seed 004 §4–§5; DESIGN §4).
 *
 * The planner works on plain arrays: a cluster (meshes + links), a sequence
 * of fine-grained layers with their costs, and a stage-cost oracle.  The IR
 * passes (modules, layers) fill PlanLayer from the training graph; the
 * algorithms here never look at the IR, so they are tested on synthetic
 * instances against brute force.
 *
 * Units: seconds, bytes, FLOP, FLOP/s, bytes/s.
 * Layers are numbered 1..L as in the paper (index 0 unused in arrays that
 * follow the paper's indexing; see each function).
 */
#ifndef HETC_PLANNER_H
#define HETC_PLANNER_H

#include <stdint.h>
#include <stdio.h>

#include "ir.h"

/* ------------------------------------------------------------ cluster */
typedef struct DeviceSpec {
    char name[48];          /* catalog key, e.g. "A100-40GB" */
    double flops_fp32;      /* peak dense FLOP/s */
    double flops_fp16;      /* peak dense FP16 tensor FLOP/s */
    double flops_bf16;      /* peak dense BF16 tensor FLOP/s (0: unsupported) */
    double mem_bytes;       /* device memory */
    double hbm_bw;          /* memory bandwidth, bytes/s */
    const char *source;     /* datasheet citation (static string) */
} DeviceSpec;

typedef struct MeshSpec {
    char name[64];
    DeviceSpec dev;
    int nodes;              /* N */
    int per_node;           /* M devices per node */
    double intra_bw, intra_lat;   /* inside a node (NVLink/PCIe) */
    double inter_bw, inter_lat;   /* between nodes of this mesh */
} MeshSpec;

typedef struct LinkSpec {
    int a, b;               /* mesh indices; links are symmetric */
    double bw, lat;
    int cpu_mediated;       /* 1: device -> host -> network -> host -> device */
} LinkSpec;

typedef struct ClusterSpec {
    char name[64];
    MeshSpec *meshes;
    int nmeshes;
    LinkSpec *links;
    int nlinks;
    char dtype[8];          /* 16-bit peak key: "bf16", "fp16", "fp32"; without the
                             * file's dtype the best every device has (bf16 first) */
} ClusterSpec;

/* Built-in catalog (passes/planner/catalog.c). */
const DeviceSpec *catalog_find(const char *name);   /* case-insensitive; NULL if absent */
int catalog_count(void);
const DeviceSpec *catalog_at(int i);

/* Parse cluster.yaml (libyaml).  Errors name the file, line and key. */
int cluster_load_yaml(const char *path, ClusterSpec *c, IrError *err);
int cluster_load_yaml_string(const char *text, const char *name, ClusterSpec *c, IrError *err);
void cluster_free(ClusterSpec *c);
/* Link between two meshes (NULL if none declared). */
const LinkSpec *cluster_link(const ClusterSpec *c, int a, int b);
int cluster_total_devices(const ClusterSpec *c);

/* ------------------------------------------------------------ layers */
typedef struct PlanLayer {
    double fwd_flops;       /* per microbatch */
    double bwd_flops;
    /* of fwd_flops / bwd_flops: the GEMMs --precision bf16-mixed runs in
     * bf16 (mixed_precision_converts), timed at the bf16 peak then */
    double lp_fwd_flops, lp_bwd_flops;
    double param_bytes;     /* parameters (training dtype) */
    double act_bytes;       /* activations saved for backward, per microbatch */
    double out_bytes;       /* boundary tensor after this layer, per microbatch */
    int heavy_ops;          /* MatMul/Linear/Attention count */
    uint64_t sig;           /* structural signature: equal sigs cost the same */
    int first_node, last_node; /* IR node index range (-1 when synthetic) */
} PlanLayer;

/* ------------------------------------------------------------ stage costs */
typedef struct Submesh {
    int n, m;               /* n nodes x m devices each (n > 1 implies m = M) */
} Submesh;

typedef struct StageCost {
    double t_f, t_b;        /* per-microbatch forward / backward time */
    double mem_static;      /* params + grads + optimizer states per device */
    double mem_act;         /* saved activations per in-flight microbatch per device */
    int dp, tp;             /* the intra-op plan chosen for this candidate */
    int feasible;           /* 0 if it cannot fit even with K = 1 */
    /* (added by the cost-model owner, "cluster") DP gradient all-reduce
     * time, paid once per iteration, not per microbatch; 0 when dp = 1 or
     * the oracle does not model it.  Not part of Eq. 13. */
    double t_sync;
    /* (added by "intra-plan", issue 9) the rest of the intra-op plan:
     * ZeRO stage 0|1|2 inside the DP group, activation recompute
     * (0 none, 1 selective, 2 full: cost_model.h RECOMPUTE_*), and the TP
     * collectives' share of t_f + t_b (informative). */
    int zero, recompute;
    double t_tp;
    /* (issue 17) of mem_static, the stage's scratch region and scalars (the
     * liveness-packed temporaries of forward, backward and update: a
     * "buffer" of HAPT Eq. 24's mem_p); 0 when the oracle does not model it */
    double mem_scratch;
} StageCost;

/* The oracle the DP queries: cost of layers [k..i] (1-based, inclusive) on
 * submesh `sub` of mesh `mesh`.  Implementations: analytic roofline
 * (passes/planner/cost_model.c) or a measured profile database, or a table
 * in tests. */
typedef struct CostOracle {
    void *ctx;
    int (*stage)(void *ctx, int k, int i, int mesh, Submesh sub, StageCost *out);
    /* c_i: time to move the boundary after layer i between two meshes
     * (mesh_from == mesh_to: inside one mesh) for one microbatch. */
    double (*comm)(void *ctx, int i, int mesh_from, int mesh_to);
} CostOracle;

/* ------------------------------------------------------------ plan */
typedef enum ScheduleKind {
    SCHED_H1F1B = 0,
    SCHED_1F1B,
    SCHED_EAGER1F1B,
    SCHED_GPIPE,
} ScheduleKind;
const char *schedule_name(ScheduleKind k);
int schedule_from_name(const char *s); /* -1 if unknown */
/* "h1f1b, 1f1b, eager1f1b or gpipe" (each name between quote), for messages */
void schedule_names(char *buf, size_t n, const char *quote);

/* One mesh's part of a stage whose DP group spans meshes (issue 18): its
 * devices and the share of each microbatch's rows they take. */
#define PLAN_MAX_PARTS 8
typedef struct PlanPart {
    int mesh, devices;
    double share;
} PlanPart;

typedef struct PlanStage {
    int first_layer, last_layer;  /* 1-based inclusive */
    int mesh;                     /* mesh index in the cluster */
    Submesh sub;
    int dp, tp;
    double t_f, t_b;              /* per microbatch */
    double c_next;                /* c_i to the next stage (0 for the last) */
    int warmup;                   /* N_i: forward launches before the first backward */
    int delta;                    /* δ_i of Eq. 2 (0 for the last stage) */
    int delta_beyond_paper;       /* 1 when c_i > t_max and Eq. 11's form was used */
    double mem_pred;              /* predicted peak bytes per device */
    double mem_static, mem_act;   /* (issue 17) its parts: mem_pred = mem_static + warmup x
                                     mem_act (0, 0: not split, a seed planner's plan) */
    double mem_scratch;           /* of mem_static, the arena's scratch + scalars (0: not
                                     modelled) */
    int zero, recompute;          /* (issue 9) ZeRO stage, RECOMPUTE_* of cost_model.h */
    /* Issue 18: forms a seed planner (hetc plan --planner=NAME) chooses that plan.json
     * records for the compiler to refuse by name (docs/PLAN_FORMAT.md); HAPT sets none. */
    int nparts;                   /* > 1: one DP group over several meshes, parts[] */
    PlanPart parts[PLAN_MAX_PARTS];
    int group;                    /* > 0: ministages of one group share their devices (Zorse) */
    int pipe, npipes;             /* pipe > 0: pipeline `pipe` of npipes (AutoHet's DP groups) */
    int pipe_microbatches;        /* pipe > 0: the microbatches that pipeline runs */
    int offload;                  /* 1: parameters + optimizer state on the host (Zorse) */
} PlanStage;

typedef struct Plan {
    PlanStage *stages;
    int nstages;
    int *mesh_order;              /* the order of meshes the plan uses */
    int nmesh_order;
    int microbatches;             /* B */
    double t_max;
    double objective;             /* Eq. 13 value */
    ScheduleKind schedule;
    double eps;                   /* ε of Eq. 2 */
    /* (issue 16) how the search ended: 1 when DpOptions.time_limit stopped it
     * (the best plan found so far, not proven optimal); the number of meshes
     * searched in node groups (DpOptions.max_groups: a heuristic) */
    int time_limited;
    int coarse_meshes;
} Plan;
void plan_free(Plan *p);

#endif
