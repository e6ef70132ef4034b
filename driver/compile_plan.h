/* The parts of plan.json (docs/PLAN_FORMAT.md) that stage compilation
 * needs, read back with cJSON: compiling from a file, not from the
 * planner's memory, is what lets a user read, edit or hand-write a plan
 * and compile exactly that (hetc compile --plan FILE). */
#ifndef HETC_COMPILE_PLAN_H
#define HETC_COMPILE_PLAN_H

#include <stdint.h>

#include "ir.h"

#define CP_MAX_PARTS 8 /* meshes one stage's DP group may span (planner.h PLAN_MAX_PARTS) */

typedef struct CpStage {
    int first_layer, last_layer; /* 1-based inclusive */
    int dp, tp;
    int zero;                    /* ZeRO stage 0|1|2 ("zero", default 0) */
    int offload;                 /* 1: parameters and optimizer state kept in a host store and
                                  * streamed through the arena every step ("offload", Zorse) */
    int recompute;               /* PartRecompute ("recompute": none|full|selective, default none) */
    int warmup;                  /* N_i: forward microbatches before the first backward */
    int pipe;                    /* its pipeline, 0-based (plan.json "pipe" - 1; 0 with one) */
    int group;                   /* plan.json "group" (0: its own devices): Zorse's ministages
                                  * sharing one GPU group's devices */
    int mate;                    /* the first stage of its group (itself without one): its
                                  * rank r runs on the device of stage mate's rank r */
    char mesh[64], device[64];
    double mem_pred;             /* predicted bytes per device (0: unknown) */
    double mem_arena_pred;       /* of which the arena ("mem_arena_pred_bytes"; -1: unknown) */
    double peak_flops;           /* the mesh's device peak FLOP/s (cluster.meshes; 0: unknown) */
    /* stages[].rows where it differs from rt_row_split's split: each DP
     * rank's rows of a microbatch (heterogeneous DP, a per-stage row
     * table); NULL: the runtime's split */
    int64_t *row_table;
    /* stages[].parts: a DP group over several meshes (Zorse's heterogeneous
     * DP): part j's mesh and DP ranks, in DP rank order (its rows are the
     * row table's next part_dp[j] entries).  nparts 0: every rank on `mesh`. */
    int nparts;
    char part_mesh[CP_MAX_PARTS][64];
    int part_dp[CP_MAX_PARTS];
} CpStage;

/* A cluster link of plan.json's "cluster.links" (every mesh pair is there:
 * the cluster loader expands default_link): how boundary tensors between
 * the two meshes travel (docs/CLUSTER.md `transport`). */
typedef struct CpLink {
    char a[64], b[64];           /* mesh names */
    int cpu_mediated;            /* 1: "cpu-mediated", 0: "device-direct" */
} CpLink;

typedef struct CompPlan {
    int nstages;
    CpStage *stages;
    CpLink *links;               /* optional in the file: NULL when absent */
    int nlinks;
    int microbatches;            /* B of the plan = microbatches per optimizer step */
    int64_t global_batch;        /* rows per step */
    int64_t rows;                /* rows per microbatch: global_batch / microbatches */
    /* Several pipelines whose stages do not line up (AutoHet's DP groups,
     * plan.json "pipe"; lined-up ones are one pipeline by now:
     * plan_pipes.h): npipes J >= 2, pipeline j's stages are
     * [pipe_first[j], pipe_first[j + 1]), each a whole copy of the model
     * running every microbatch's prows = rows / J rows (pipeline j rows
     * [j prows, (j + 1) prows) of it).  One pipeline: npipes 1,
     * prows = rows.  Row tables and rt_row_split's split are of prows. */
    int npipes;
    int *pipe_first;             /* [npipes + 1] */
    int64_t prows;
    int64_t seq;                 /* -1: not recorded */
    char schedule[16];
    char precision[16];          /* "precision" as read ("" when absent); hetc compile
                                    then sets it to the precision it compiles */
} CompPlan;

/* Read and check: stages cover layers 1..L contiguously, dp >= 1,
 * tp >= 1 (tensor parallelism: passes/tp_shard.h), zero 0, 1 or 2
 * (optimizer-state sharding in the DP group), recompute one of none|full|selective,
 * global_batch divisible by microbatches, warm-ups non-increasing along the
 * pipe.  Errors name the file and the JSON key. */
int comp_plan_read(const char *path, CompPlan *p, IrError *err);
/* The first and one past the last stage of stage s's pipeline. */
void comp_plan_pipe_range(const CompPlan *p, int s, int *first, int *end);
/* Rows of a microbatch on DP rank r of stage s: its row table, or
 * rt_row_split's count. */
int64_t comp_plan_rank_rows(const CompPlan *p, int s, int r);
/* The file-name suffix of the binary of stage s that runs `rows` rows per
 * microbatch: "" for DP rank 0's count (stage_S), "_lo" for the one row
 * less of rt_row_split's split (stage_S_lo), "_rN" for another count N of
 * a row table (stage_S_rN). */
void comp_plan_binary_suffix(const CompPlan *p, int s, int64_t rows, char *buf, size_t n);

/* The mesh of DP rank r of stage s: its part's (stages[].parts), else the
 * stage's. */
const char *comp_plan_rank_mesh(const CompPlan *p, int s, int r);
/* The plan's meshes in order of first use (stage by stage, a stage's parts
 * in DP rank order): mesh k is line k of the hostfile template, node k of a
 * Slurm job, hetc_mesh_names[k] of elastic.env.  Returns how many (at most
 * max); comp_plan_mesh_index gives a name's k (-1: not in the plan). */
int comp_plan_meshes(const CompPlan *p, const char **out, int max);
int comp_plan_mesh_index(const CompPlan *p, const char *mesh);

/* hetc compile --recompute MODE: every stage recomputes MODE, whatever the
 * plan says.  Error: MODE is none of none|full|selective. */
int comp_plan_set_recompute(CompPlan *p, const char *mode, IrError *err);
void comp_plan_free(CompPlan *p);

#endif
