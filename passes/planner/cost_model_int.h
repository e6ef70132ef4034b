/* The cost model's internals, shared by cost_model.c (costing, the
 * candidate cache) and cost_report.c (its summaries and the profile
 * database it writes).  Not for other planners: they see cost_model.h. */
#ifndef HETC_COST_MODEL_INT_H
#define HETC_COST_MODEL_INT_H

#include <pthread.h>
#include <stdint.h>

#include "cost_model.h"

typedef struct Key {
    uint64_t h;     /* hash of sig[k..i] */
    int len, cls, n, m;
    /* what the intra-op choice reads beyond sig[k..i]: the K it sizes memory
     * for (depends on i) and the stage's boundary input (full recompute
     * keeps it; it is layer k-1's output) */
    int ksel;
    double in_bytes;
    /* the measured arena of layer k (issue 17): its slot and scratch depend
     * on what it receives from layer k-1, not only on sig[k..i] */
    double arena_slot, arena_scratch;
} Key;

typedef struct Slot {
    Key key;
    int entry;      /* index into entries, -1 empty */
} Slot;

struct CostModel {
    const ClusterSpec *c;
    const PlanLayer *layers;
    int L;
    CostOptions o;
    double dtype_bytes;
    double total_work;      /* sum of fwd+bwd FLOPs over all layers */
    double total_capacity;  /* sum over devices of peak FLOP/s */
    int *mesh_class;        /* meshes with equal device + links share a class */
    Submesh **subs;
    int *nsubs, *sub_off, totsubs;
    /* cache */
    Slot *slots;
    long nslots;
    StageCost *entries;
    long nentries, capentries;
    /* dense index of candidates: entry + 1, 0 = not yet seen */
    int32_t *dense;
    int frozen;             /* after profile_all: dense is complete, reads take no lock */
    int in_profile;         /* profile_all is running (counts without a dense index) */
    int profiled;           /* profile_all completed */
    CostCounters cnt;
    pthread_mutex_t mu;
};

/* Analytic per-layer roofline: forward and backward seconds of layer p on
 * device d at `peak` FLOP/s, its work split over `shards`, weights over tp. */
void cm_layer_roofline(const CostModel *cm, const PlanLayer *p, const DeviceSpec *d, double peak,
                       double shards, int tp, double *tf, double *tb);
/* AdamW model-state bytes per parameter per device at DP dp (zero_memory.h). */
double cm_bytes_per_param(const CostModel *cm, int dp);

#endif
