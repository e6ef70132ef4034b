/* Analytic stage cost model and zero-redundant profiler (HAPT §5.1).
 *
 * Implements the CostOracle of planner.h from the device catalog: roofline
 * compute time per layer, DP gradient all-reduce per iteration, memory of
 * AdamW mixed-precision training, and boundary communication per link.
 * Formulas (cited in cost_model.c and docs/CLUSTER.md):
 *
 *   per layer, per microbatch, on a stage with dp x tp devices (tp = 1 shown;
 *   tp > 1, ZeRO auto and recompute: docs/PLANNER.md "Intra-op plans"):
 *     t_f = max(fwd_flops / dp / (peak * efficiency),
 *               (param_bytes + (act_bytes + out_bytes) / dp) / hbm_bw)
 *     t_b = max(bwd_flops / dp / (peak * efficiency),
 *               (2 * param_bytes + 2 * act_bytes / dp) / hbm_bw)
 *   per stage:
 *     P        = sum param_bytes / dtype_bytes            (parameter count)
 *     mem_static = P * (w + g + master + adam) + runtime_reserve_bytes
 *                  w = g = dtype_bytes; master = 4 unless fp32 without ZeRO;
 *                  adam = 8 (fp32 m and v).  ZeRO-1 divides master + adam by
 *                  dp, ZeRO-2 also g (zero_stage option, default 0);
 *                  zero_state_bytes_per_param (zero_memory.h), shared by
 *                  every planner
 *     mem_act  = sum act_bytes / dp
 *     t_sync   = ring all-reduce of the gradients, once per iteration:
 *                2 (dp-1)/dp * sum param_bytes / bw + 2 (dp-1) lat
 *                (bw, lat: intra-node if the submesh is one node, else inter)
 *   comm(i, a, b) = out_bytes_i / bw + lat (+ 2 out_bytes_i / pcie_bw for a
 *                cpu-mediated link); inside mesh a: intra-node link if the mesh
 *                has one node, inter-node otherwise.
 */
#ifndef HETC_COST_MODEL_H
#define HETC_COST_MODEL_H

#include <stddef.h>

#include "planner.h"
#include "profile_db.h"

/* Activation recompute of a stage (issue 9), in order of simplicity. */
enum { RECOMPUTE_NONE = 0, RECOMPUTE_SELECTIVE = 1, RECOMPUTE_FULL = 2 };
const char *recompute_name(int rc);          /* "none" | "selective" | "full" */
int recompute_from_name(const char *s);      /* -1 if unknown */

/* Tensor-parallel structure of one layer, read from the canonical IR by
 * layer_intra_from_ir (intra_ir.c; the reading is documented there and in
 * docs/PLANNER.md "Intra-op plans"): only the patterns tp_shard shards (so
 * what the stage binaries run), everything else replicated under TP.  Per
 * microbatch, before any DP split. */
typedef struct LayerIntra {
    double tp_flops;        /* forward FLOPs of TP-sharded ops (Linear, Attention, ...) */
    double tp_flops_frac;   /* tp_flops / fwd_flops, in [0, 1]: the part divided by tp */
    double tp_param_bytes;  /* (elements) of parameters split over the TP ranks */
    double tp_param_frac;   /* share of param_bytes split over the TP ranks, [0, 1] */
    double tp_act_frac;     /* share of the layer's activations inside column->row regions */
    int ar_fwd, ar_bwd;     /* TP all-reduces in forward / backward */
    double ar_fwd_bytes, ar_bwd_bytes; /* their bytes (summed over the all-reduces) */
    double attn_bytes;      /* saved attention internals (probabilities): what selective
                               recompute drops; 0 for a fused Attention op */
    double attn_flops;      /* forward FLOPs selective recompute runs again */
    int tp_patterns;        /* TP-shardable patterns (MLP, attention) in the layer */
    unsigned tp_divides;    /* bit b: tp = 2^b shards every one of them (bit 0 always) */
    int tp_span_before, tp_span_after; /* the patterns with a node in this layer reach this
                                   many layers before / after it: a stage that cuts one
                                   is not offered tp > 1 (tp_shard would not shard it) */
} LayerIntra;

/* The arena of one layer (issue 17), read from the memory plan of the stage
 * a stage binary holding only that layer runs (driver/plan_arena.c: the
 * training graph at one DP rank's rows, partition_stage, the host lowering's
 * fused groups, memplan), so in the IR dtype of every value
 * (ir_value_nbytes: bf16 values are half).  A stage k..i is modelled as
 *   slot    = slot[k] + sum_{l=k+1..i} (slot[l] - inner[l])
 *   scratch = scalars + max(max_l fwd[l], max_l upd[l],
 *                           max_l (bwd[l] + sum_{j=l+1..i} grad[j]))
 * the backward runs layers i..k and every parameter gradient it makes stays
 * in scratch until the accumulations at its end, so while layer l's
 * backward runs, the gradients of layers l+1..i are live beside its own
 * peak (docs/PLANNER.md "Precision and the arena"). */
typedef struct LayerArena {
    double slot;        /* bytes of one activation slot of the one-layer stage: the forward
                           values its backward reads, its received activations, token ids
                           and targets (memplan's rule), each 64-byte aligned */
    double inner;       /* of slot, received activations that are no longer slot values
                           when the producing layer is in the same stage: those no backward
                           node of this layer reads, and those the producer's own one-layer
                           stage already keeps in its slot (counted there) */
    double fwd, bwd, upd; /* first-fit peaks of its forward, backward and update scratch */
    double grad;        /* its trained parameters' gradients (64-byte aligned): live in
                           backward scratch from their producer to the backward's end */
    double scalars;     /* the scalars region (lr, step, grad norm) */
    int span;           /* layers this entry covers from its layer on: 1 at tp = 1; at tp > 1
                           the TP unit starting here (the layers TP patterns tie together,
                           LayerIntra.tp_span_*), 0 where no unit starts */
} LayerArena;

/* tp = 2^b, b < ARENA_TPB, has its own arenas (CostOptions.arena) */
#define ARENA_TPB 4

/* Fill out[0..L-1] from the graph whose nodes carry layer_id 1..L (the
 * layers pass).  Returns 0 or -1 with err set. */
int layer_intra_from_ir(const IrGraph *g, const PlanLayer *layers, int L, LayerIntra *out,
                        IrError *err);
/* The same; vocab_parallel = 0 leaves out the vocabulary-parallel
 * Embedding and LM head + loss (tp_shard_vocab.c) that the stage binaries
 * shard (for comparisons).  layer_intra_from_ir is vocab_parallel = 1
 * (intra_ir.c says when they are costed). */
int layer_intra_from_ir_opts(const IrGraph *g, const PlanLayer *layers, int L, int vocab_parallel,
                             LayerIntra *out, IrError *err);

typedef struct CostOptions {
    double efficiency;          /* fraction of peak FLOP/s dense GEMMs reach (default 0.5) */
    int bf16_gemm;              /* --precision bf16-mixed (issue 17): the FLOPs of the GEMMs
                                   the mixed-precision pass runs in bf16 (PlanLayer.lp_*)
                                   are timed at the device's bf16 peak (cm_flops_time);
                                   0 (default): every FLOP at the cluster dtype's peak */
    int tp_reduce_bf16;         /* hetc compile --tp-reduce-dtype bf16: the TP all-reduces
                                   of activations and their gradients send half the bytes */
    int grad_reduce_bf16;       /* hetc compile --grad-reduce-dtype bf16: the DP gradient
                                   reductions (not ZeRO's parameter all-gather) move bf16,
                                   half the bytes of the fp32 gradients (0: fp32) */
    double imbalance_threshold; /* T: prune when a stage's work share / its submesh's
                                   capacity share is > T; 0 = off (default 4) */
    int imbalance_lower;        /* 1: also prune shares < 1/T (default 0: comm-bound
                                   optima use whole meshes as light relay stages) */
    double pcie_bw;             /* device<->host copy for cpu-mediated links, bytes/s
                                   (default 12e9: PCIe 3.0 x16 achievable) */
    double runtime_reserve_bytes; /* per device: CUDA context, cuBLAS/NCCL workspaces
                                   (default 1 GiB) */
    int zero_stage;             /* 0: replicated optimizer (default), 1: ZeRO-1, 2: ZeRO-2,
                                   -1: chosen per candidate (auto) */
    int max_tp;                 /* largest TP degree tried (power of two, inside a node);
                                   default 1 = no tensor parallelism; hetc plan: 8 */
    int recompute;              /* RECOMPUTE_*, or -1: chosen per candidate (auto);
                                   default RECOMPUTE_NONE */
    int inflight;               /* K the intra-op choice sizes memory for: a candidate
                                   k..i takes the cheapest plan whose memory fits
                                   min(inflight, L - i + 1) microbatches (default 1) */
    const LayerIntra *intra;    /* L entries (layers 1..L) or NULL: without it no layer is
                                   TP-sharded (tp > 1 is not offered) and selective
                                   recompute drops nothing; must outlive the model.
                                   tp > 1 is offered for layers k..i only when one of them
                                   has a pattern (tp_patterns) and tp divides every
                                   pattern of every one of them (tp_divides) */
    int prune_memory;           /* 1 (default): candidates that do not fit with K = 1 are
                                   reported infeasible and counted as pruned */
    int64_t dp_divides;         /* > 0: only intra-op plans whose dp divides this many rows
                                   (a microbatch's rows, split evenly over the DP ranks: what
                                   the stage binaries run; hetc compile sets it); 0: any dp */
    int64_t dp_max_rows;        /* > 0: only intra-op plans whose dp is at most this many rows
                                   (the rows of the pipeline microbatch a stage gets: a DP rank
                                   needs at least one, the stage binaries refuse a dp above
                                   them; issue 18); a candidate with no such dp x tp is
                                   infeasible.  hetc plan sets it to --microbatch; 0: any dp */
    /* (issue 17) measured arenas by TP and DP degree: arena[b][dp] (tp = 2^b,
     * dp = 1 .. arena_maxdp) is L entries at DP rank 0's rows of a dp split
     * (NULL: not measured); at tp = 1 one per layer, at tp > 1 one per TP
     * unit (LayerArena.span), TP rank 0's.  When present, a candidate takes
     * its activation slot and scratch from them instead of the per-op rules
     * (PlanLayer.act_bytes).  Must outlive the model. */
    const LayerArena *const *arena[ARENA_TPB];
    int arena_maxdp;
    const ProfileDb *db;        /* measured per-layer costs (docs/PROFILE_DB.md); NULL
                                   (default): analytic only.  Layers the database lacks
                                   for a candidate's (device, submesh, dp, tp) are costed
                                   analytically; it must outlive the model. */
} CostOptions;

void cost_options_default(CostOptions *o);

typedef struct CostCounters {
    long total;            /* distinct (k, i, mesh, submesh) candidates queried/enumerated */
    long duplicates;       /* of those, answered from the cache (structural duplicates) */
    long unique;           /* distinct (layer-range signature, device class, submesh) */
    long pruned_imbalance; /* unique candidates rejected before costing */
    long costed;           /* unique candidates whose cost was computed */
    long pruned_memory;    /* costed candidates that do not fit with K = 1 */
    long pruned_rows;      /* costed candidates with no dp x tp whose dp splits a
                              microbatch's rows (dp_max_rows, dp_divides): infeasible,
                              not counted in pruned_memory */
    /* With a profile database: costed candidates whose every layer came from
     * it, from it in part, or not at all (db_full + db_mixed + db_none = costed);
     * layer lookups that hit and missed; boundary costs from a database link. */
    long db_full, db_mixed, db_none;
    long db_layer_hits, db_layer_misses;
} CostCounters;
/* Invariants: total = duplicates + unique; unique = pruned_imbalance + costed;
 * pruned_memory + pruned_rows <= costed.  Exact per distinct candidate whenever the dense
 * candidate index exists (L(L+1)/2 x submeshes <= 32M entries); beyond that
 * only cost_model_profile_all counts (lazy queries are not tracked). */

/* One line for `hetc plan` and plan.txt:
 * "profile: 150234 candidates, 138180 structural duplicates, 12054 unique; ..." */
void cost_counters_summary(const CostCounters *k, char *buf, size_t cap);
/* "profile db FILE: E entries (S of another context), X links; costed candidates:
 *  F from the database, M mixed, A analytic; layer lookups: H hit, H' missed" */
void cost_counters_db_summary(const CostCounters *k, const ProfileDb *db, char *buf, size_t cap);

typedef struct CostModel CostModel;

/* layers: L entries, layers[0] is layer 1 (the oracle's k, i are 1-based).
 * The model keeps pointers to cluster and layers: they must outlive it. */
CostModel *cost_model_new(const ClusterSpec *c, const PlanLayer *layers, int L,
                          const CostOptions *o, IrError *err);
void cost_model_free(CostModel *cm);

/* The oracle the DP consumes (ctx = cm).  stage() returns 0 and fills *out
 * (feasible = 0 for memory- or imbalance-pruned candidates, with the times
 * still filled for memory-pruned ones), -1 on bad arguments.  Thread-safe. */
CostOracle cost_model_oracle(CostModel *cm);
int cost_model_stage(CostModel *cm, int k, int i, int mesh, Submesh sub, StageCost *out);
/* Every intra-op plan enumerated for a candidate (what stage() chooses among;
 * tests compare against it): writes at most cap into out, returns the count
 * (-1 on bad arguments).  *k_sel (may be NULL) gets the K the choice sizes
 * memory for. */
int cost_model_intra_options(CostModel *cm, int k, int i, int mesh, Submesh sub, StageCost *out,
                             int cap, int *k_sel);
double cost_model_comm(CostModel *cm, int i, int mesh_from, int mesh_to);

/* Enumerate and cost every candidate (all k <= i, every mesh, every submesh
 * shape of §5.2) up front, so later stage() calls are lock-free lookups.
 * progress (may be NULL) is called now and then with done/total, with the
 * model's lock held: it must not call back into the model.  Call this before
 * sharing the oracle between threads. */
int cost_model_profile_all(CostModel *cm, void (*progress)(void *arg, long done, long total),
                           void *arg);
/* (issue 16) The same for the shapes keep(karg, mesh, sub) accepts (keep NULL:
 * every shape, = profile_all): the planner's node-group heuristic searches
 * a few shapes of a large mesh, and profiling the others (1,024 x 8: 1,027
 * shapes per mesh) took most of the planning time.  The counters then count
 * those shapes; queries of other shapes still work, lazily, under the lock. */
int cost_model_profile_shapes(CostModel *cm, int (*keep)(void *karg, int mesh, Submesh sub),
                              void *karg, void (*progress)(void *arg, long done, long total),
                              void *arg);
CostCounters cost_model_counters(const CostModel *cm);

/* Write the analytic model's own per-layer figures as a profile database
 * (docs/PROFILE_DB.md): one entry per device type, distinct layer signature
 * and submesh shape of the cluster, with the context (microbatch, seq, the
 * cluster dtype) given.  A template for `hetc profile` and, read back, the
 * same plan as the analytic model.  Returns 0 or -1 with err set. */
int cost_model_write_profile_db(const CostModel *cm, const char *path, int microbatch, int seq,
                                IrError *err);

/* Peak FLOP/s of a device for the training dtype ("bf16", "fp16", "fp32"). */
double device_peak_flops(const DeviceSpec *d, const char *dtype);
/* Seconds for `flops` FLOPs on device d, `lp` of them bf16 GEMMs: with
 * o->bf16_gemm, (flops - lp) / peak + lp / (d's bf16 peak x o->efficiency),
 * the bf16 peak being the fp32 one on a device without bf16 tensor cores
 * (V100, T4: bf16 then runs no faster); otherwise flops / peak.  peak: the
 * caller's achievable peak (the cluster dtype's x efficiency). */
double cm_flops_time(const CostOptions *o, const DeviceSpec *d, double flops, double lp,
                     double peak);
/* Bytes per element of the training dtype. */
double dtype_size_bytes(const char *dtype);

#endif
