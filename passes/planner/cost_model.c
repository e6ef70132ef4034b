/* Analytic stage cost model + zero-redundant profiler (HAPT §5.1, §5.2.1).
 * Formulas: cost_model.h and docs/CLUSTER.md §"Cost model".
 *
 * Zero-redundant profiling: a candidate is (layers k..i, mesh, submesh).
 * Its cost depends only on the sequence of layer signatures in k..i (equal
 * PlanLayer.sig => equal costs, planner.h), on the mesh's device class (the
 * device spec and the mesh's own link figures), and on the submesh shape.
 * So candidates are keyed by (hash of sig[k..i], length, class, n, m) and a
 * repeated module's candidates point at the first module's entry, as §5.1's
 * Figure 6(b) does.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cost_model.h"
#include "hapt_dp.h"   /* submesh_enumerate: the §5.2 shapes, shared with the DP */

#define GIB 1073741824.0
#ifndef DENSE_LIMIT
#define DENSE_LIMIT (32L << 20)   /* entries of the dense (k,i,mesh,sub) table */
#endif

void cost_options_default(CostOptions *o)
{
    o->efficiency = 0.5;
    o->imbalance_threshold = 4.0;
    o->imbalance_lower = 0;
    o->pcie_bw = 12e9;
    o->runtime_reserve_bytes = 1.0 * GIB;
    o->zero_stage = 0;
    o->prune_memory = 1;
    o->dp_divides = 0;
    o->db = NULL;
}

double device_peak_flops(const DeviceSpec *d, const char *dtype)
{
    if (dtype && strcmp(dtype, "bf16") == 0)
        return d->flops_bf16;
    if (dtype && strcmp(dtype, "fp16") == 0)
        return d->flops_fp16;
    return d->flops_fp32;
}

double dtype_size_bytes(const char *dtype)
{
    return dtype && strcmp(dtype, "fp32") == 0 ? 4.0 : 2.0;
}

/* ---------------------------------------------------------------- model */

typedef struct Key {
    uint64_t h;     /* hash of sig[k..i] */
    int len, cls, n, m;
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

static uint64_t mix64(uint64_t x)
{
    /* splitmix64 finaliser: good avalanche for sequential combining */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t hash_step(uint64_t h, uint64_t sig)
{
    return mix64(h ^ mix64(sig));
}

#define HASH_SEED 0x68657463ULL   /* "hetc" */

static int same_device_class(const MeshSpec *a, const MeshSpec *b)
{
    const DeviceSpec *x = &a->dev, *y = &b->dev;
    return strcmp(x->name, y->name) == 0 && x->flops_fp32 == y->flops_fp32 &&
           x->flops_fp16 == y->flops_fp16 && x->flops_bf16 == y->flops_bf16 &&
           x->mem_bytes == y->mem_bytes && x->hbm_bw == y->hbm_bw &&
           a->intra_bw == b->intra_bw && a->intra_lat == b->intra_lat &&
           a->inter_bw == b->inter_bw && a->inter_lat == b->inter_lat;
}

void cost_model_free(CostModel *cm)
{
    if (!cm)
        return;
    if (cm->subs)
        for (int i = 0; i < cm->c->nmeshes; i++)
            free(cm->subs[i]);
    free(cm->subs);
    free(cm->nsubs);
    free(cm->sub_off);
    free(cm->mesh_class);
    free(cm->slots);
    free(cm->entries);
    free(cm->dense);
    pthread_mutex_destroy(&cm->mu);
    free(cm);
}

CostModel *cost_model_new(const ClusterSpec *c, const PlanLayer *layers, int L,
                          const CostOptions *o, IrError *err)
{
    if (!c || c->nmeshes <= 0 || !layers || L <= 0) {
        ir_errorf(err, "cost model: need a cluster with meshes and at least one layer (got %d layers)", L);
        return NULL;
    }
    CostModel *cm = calloc(1, sizeof *cm);
    if (!cm) {
        ir_errorf(err, "cost model: out of memory");
        return NULL;
    }
    pthread_mutex_init(&cm->mu, NULL);
    cm->c = c;
    cm->layers = layers;
    cm->L = L;
    if (o)
        cm->o = *o;
    else
        cost_options_default(&cm->o);
    if (!(cm->o.efficiency > 0 && cm->o.efficiency <= 1)) {
        ir_errorf(err, "cost model: efficiency must be in (0, 1], got %g", cm->o.efficiency);
        cost_model_free(cm);
        return NULL;
    }
    cm->dtype_bytes = dtype_size_bytes(c->dtype);
    for (int l = 0; l < L; l++)
        cm->total_work += layers[l].fwd_flops + layers[l].bwd_flops;
    int nm = c->nmeshes;
    cm->mesh_class = calloc((size_t)nm, sizeof *cm->mesh_class);
    cm->subs = calloc((size_t)nm, sizeof *cm->subs);
    cm->nsubs = calloc((size_t)nm, sizeof *cm->nsubs);
    cm->sub_off = calloc((size_t)nm, sizeof *cm->sub_off);
    if (!cm->mesh_class || !cm->subs || !cm->nsubs || !cm->sub_off)
        goto oom;
    for (int a = 0; a < nm; a++) {
        const MeshSpec *m = &c->meshes[a];
        double peak = device_peak_flops(&m->dev, c->dtype);
        if (!(peak > 0) || !(m->dev.hbm_bw > 0) || m->nodes <= 0 || m->per_node <= 0) {
            ir_errorf(err, "cost model: mesh '%s' (device %s) has no %s peak, HBM bandwidth or devices",
                      m->name, m->dev.name, c->dtype);
            cost_model_free(cm);
            return NULL;
        }
        cm->total_capacity += peak * m->nodes * m->per_node;
        cm->mesh_class[a] = a;
        for (int b = 0; b < a; b++)
            if (same_device_class(&c->meshes[b], m)) {
                cm->mesh_class[a] = cm->mesh_class[b];
                break;
            }
        int ns = submesh_enumerate(m->nodes, m->per_node, NULL, 0);
        cm->subs[a] = malloc((size_t)ns * sizeof(Submesh));
        if (!cm->subs[a])
            goto oom;
        cm->nsubs[a] = submesh_enumerate(m->nodes, m->per_node, cm->subs[a], ns);
        cm->sub_off[a] = cm->totsubs;
        cm->totsubs += ns;
    }
    long pairs = (long)L * (L + 1) / 2;
    if (pairs * cm->totsubs <= DENSE_LIMIT) {
        cm->dense = calloc((size_t)(pairs * cm->totsubs), sizeof *cm->dense);
        if (!cm->dense)
            goto oom;
    }
    cm->nslots = 1024;
    cm->slots = malloc((size_t)cm->nslots * sizeof *cm->slots);
    if (!cm->slots)
        goto oom;
    for (long s = 0; s < cm->nslots; s++)
        cm->slots[s].entry = -1;
    return cm;
oom:
    ir_errorf(err, "cost model: out of memory");
    cost_model_free(cm);
    return NULL;
}

/* ---------------------------------------------------------------- costing */

/* Analytic per-layer roofline (summed per stage by cost_intra). */
static void layer_roofline(const CostModel *cm, const PlanLayer *p, const DeviceSpec *d, double peak,
                           double shards, int tp, double *tf, double *tb)
{
    /* Roofline per layer: a layer is compute- or memory-bound as a whole.
     * Forward reads the weights and streams activations in and out;
     * backward reads weights, writes gradients and re-reads the saved
     * activations while writing their gradients. */
    double ff = p->fwd_flops / shards / peak;
    double fb = (p->param_bytes / tp + (p->act_bytes + p->out_bytes) / shards) / d->hbm_bw;
    double bf = p->bwd_flops / shards / peak;
    double bb = (2 * p->param_bytes / tp + 2 * p->act_bytes / shards) / d->hbm_bw;
    (void)cm;
    *tf = ff > fb ? ff : fb;
    *tb = bf > bb ? bf : bb;
}

/* AdamW mixed precision (documented in docs/CLUSTER.md): bytes per
 * parameter per device: weights + grads in the training dtype, an fp32
 * master copy unless the dtype already is fp32, and fp32 Adam m and v. */
static double bytes_per_param(const CostModel *cm, int dp)
{
    double w = cm->dtype_bytes, g = cm->dtype_bytes;
    double master = cm->dtype_bytes < 4 ? 4.0 : 0.0, adam = 8.0;
    if (cm->o.zero_stage >= 1) {
        master /= dp;
        adam /= dp;
    }
    if (cm->o.zero_stage >= 2)
        g /= dp;
    return w + g + master + adam;
}

/* Cost of layers k..i (1-based) on `sub` of mesh a with intra-op plan dp x tp.
 * tp > 1 (Megatron column/row pairs) is a later issue: the roofline below
 * divides per-device work by dp * tp and would add TP collectives here.
 * With a profile database, each layer's measured entry replaces its
 * roofline (and its memory, when the entry has memory); *hits counts them. */
static void cost_intra(const CostModel *cm, int k, int i, int a, Submesh sub, int dp, int tp,
                       StageCost *out, int *hits)
{
    const MeshSpec *m = &cm->c->meshes[a];
    const DeviceSpec *d = &m->dev;
    double peak = device_peak_flops(d, cm->c->dtype) * cm->o.efficiency;
    double shards = (double)dp * tp;
    double tf = 0, tb = 0, params = 0, act = 0, stat = 0;
    const ProfileDb *db = cm->o.db;
    *hits = 0;
    for (int l = k; l <= i; l++) {
        const PlanLayer *p = &cm->layers[l - 1];
        const ProfileEntry *e = db ? profile_db_find(db, d->name, p->sig, sub.n, sub.m, dp, tp) : NULL;
        params += p->param_bytes;
        if (e) {
            (*hits)++;
            tf += e->t_f;
            tb += e->t_b;
            if (e->has_mem) {
                stat += e->mem_static;
                act += e->mem_act;
                continue;
            }
        } else {
            double lf, lb;
            layer_roofline(cm, p, d, peak, shards, tp, &lf, &lb);
            tf += lf;
            tb += lb;
        }
        if (db) { /* per layer, so measured and analytic layers add up */
            stat += p->param_bytes / cm->dtype_bytes / tp * bytes_per_param(cm, dp);
            act += p->act_bytes / shards;
        } else {
            act += p->act_bytes; /* divided once below, as the analytic model always did */
        }
    }
    out->t_f = tf;
    out->t_b = tb;
    if (db)
        out->mem_static = stat + cm->o.runtime_reserve_bytes;
    else /* the analytic model's own form (bit for bit as before databases) */
        out->mem_static = params / cm->dtype_bytes / tp * bytes_per_param(cm, dp) +
                          cm->o.runtime_reserve_bytes;
    out->mem_act = db ? act : act / shards;
    out->dp = dp;
    out->tp = tp;
    /* Ring all-reduce of the gradients inside the DP group (once per
     * iteration): 2 (dp-1)/dp of the bytes cross each device's link. */
    out->t_sync = 0;
    if (dp > 1) {
        double bw = sub.n == 1 ? m->intra_bw : m->inter_bw;
        double lat = sub.n == 1 ? m->intra_lat : m->inter_lat;
        out->t_sync = bw > 0 ? 2.0 * (dp - 1) / dp * (params / tp) / bw + 2.0 * (dp - 1) * lat : INFINITY;
    }
    out->feasible = out->mem_static + out->mem_act <= d->mem_bytes;
}

/* Compute a unique candidate's cost; returns 1 if imbalance-pruned. */
static int cost_unique(const CostModel *cm, int k, int i, int a, Submesh sub, StageCost *out,
                       int *hits)
{
    if (hits)
        *hits = 0;
    const MeshSpec *m = &cm->c->meshes[a];
    int devices = sub.n * sub.m;
    memset(out, 0, sizeof *out);
    if (cm->o.imbalance_threshold > 0 && cm->total_work > 0) {
        /* §5.1: "workloads severely imbalanced relative to the compute
         * capacity of the submesh": the stage's share of the model's FLOPs
         * over the submesh's share of the cluster's peak FLOP/s. */
        double work = 0;
        for (int l = k; l <= i; l++)
            work += cm->layers[l - 1].fwd_flops + cm->layers[l - 1].bwd_flops;
        double cap = device_peak_flops(&m->dev, cm->c->dtype) * devices / cm->total_capacity;
        double r = (work / cm->total_work) / cap;
        /* Over-loaded: the stage alone takes more than T times its fair
         * share of an iteration.  Under-loaded stages are kept unless asked:
         * where a slow link bounds t_max (C(i) <= t_max) and every device
         * must be allocated (Eq. 22), the optimum may give a whole mesh a
         * sliver of the model. */
        double T = cm->o.imbalance_threshold;
        if (r > T || (cm->o.imbalance_lower && r < 1.0 / T)) {
            out->t_f = out->t_b = INFINITY;
            out->dp = devices;
            out->tp = 1;
            out->feasible = 0;
            return 1;
        }
    }
    /* Intra-op plans: dp x tp = devices.  Only tp = 1 for now; the loop
     * keeps the cheapest feasible plan once tp > 1 exists. */
    int have = 0;
    for (int tp = 1; tp <= 1; tp *= 2) {
        if (devices % tp)
            continue;
        if (cm->o.dp_divides > 0 && cm->o.dp_divides % (devices / tp)) {
            /* the rows of a microbatch cannot be split evenly: no plan */
            if (!have) {
                memset(out, 0, sizeof *out);
                out->t_f = out->t_b = INFINITY;
                out->dp = devices / tp;
                out->tp = tp;
            }
            have = 1;
            continue;
        }
        StageCost c;
        int h;
        cost_intra(cm, k, i, a, sub, devices / tp, tp, &c, &h);
        int better = !have || (c.feasible && !out->feasible) ||
                     (c.feasible == out->feasible && c.t_f + c.t_b < out->t_f + out->t_b);
        if (better) {
            *out = c;
            if (hits)
                *hits = h;
        }
        have = 1;
    }
    if (!cm->o.prune_memory)
        out->feasible = 1;
    return 0;
}

static long slot_of(const CostModel *cm, const Key *key)
{
    uint64_t h = key->h ^ mix64(((uint64_t)key->len << 40) ^ ((uint64_t)key->cls << 32) ^
                                ((uint64_t)key->n << 16) ^ (uint64_t)key->m);
    long s = (long)(h & (uint64_t)(cm->nslots - 1));
    while (cm->slots[s].entry >= 0) {
        const Key *q = &cm->slots[s].key;
        if (q->h == key->h && q->len == key->len && q->cls == key->cls && q->n == key->n && q->m == key->m)
            return s;
        s = (s + 1) & (cm->nslots - 1);
    }
    return s;
}

static int grow(CostModel *cm)
{
    long ns = cm->nslots * 2;
    Slot *old = cm->slots;
    long olds = cm->nslots;
    cm->slots = malloc((size_t)ns * sizeof *cm->slots);
    if (!cm->slots) {
        cm->slots = old;
        return -1;
    }
    cm->nslots = ns;
    for (long s = 0; s < ns; s++)
        cm->slots[s].entry = -1;
    for (long s = 0; s < olds; s++)
        if (old[s].entry >= 0)
            cm->slots[slot_of(cm, &old[s].key)] = old[s];
    free(old);
    return 0;
}

static int sub_index(const CostModel *cm, int a, Submesh sub)
{
    for (int s = 0; s < cm->nsubs[a]; s++)
        if (cm->subs[a][s].n == sub.n && cm->subs[a][s].m == sub.m)
            return s;
    return -1;
}

static long dense_at(const CostModel *cm, int k, int i, int a, int s)
{
    /* triangular index of (k, i), 1 <= k <= i <= L */
    long row = (long)(k - 1) * (2L * cm->L - k + 2) / 2;
    long pair = row + (i - k);
    return pair * cm->totsubs + cm->sub_off[a] + s;
}

/* Look up or cost a candidate; caller holds the lock. h: hash of sig[k..i]. */
static int lookup_locked(CostModel *cm, int k, int i, int a, int s, uint64_t h, StageCost *out)
{
    Submesh sub = cm->subs[a][s];
    long di = cm->dense ? dense_at(cm, k, i, a, s) : -1;
    if (di >= 0 && cm->dense[di]) {
        *out = cm->entries[cm->dense[di] - 1];
        return 0;
    }
    Key key = {h, i - k + 1, cm->mesh_class[a], sub.n, sub.m};
    long slot = slot_of(cm, &key);
    int entry = cm->slots[slot].entry;
    /* Counting a candidate needs "first time seen" per (k,i,a,s): the dense
     * index gives it.  Without one (huge instances) only profile_all's single
     * pass over every candidate counts. */
    int count = cm->dense != NULL || cm->in_profile;
    if (count)
        cm->cnt.total++;
    if (entry >= 0) {
        if (count)
            cm->cnt.duplicates++;
    } else {
        if (cm->nentries == cm->capentries) {
            long nc = cm->capentries ? cm->capentries * 2 : 1024;
            StageCost *ne = realloc(cm->entries, (size_t)nc * sizeof *ne);
            if (!ne)
                return -1;
            cm->entries = ne;
            cm->capentries = nc;
        }
        StageCost c;
        int hits = 0;
        if (cost_unique(cm, k, i, a, sub, &c, &hits))
            cm->cnt.pruned_imbalance++;
        else {
            cm->cnt.costed++;
            if (cm->o.db) {
                int len = i - k + 1;
                cm->cnt.db_layer_hits += hits;
                cm->cnt.db_layer_misses += len - hits;
                if (hits == len)
                    cm->cnt.db_full++;
                else if (hits > 0)
                    cm->cnt.db_mixed++;
                else
                    cm->cnt.db_none++;
            }
            if (!c.feasible)
                cm->cnt.pruned_memory++;
        }
        cm->cnt.unique++;
        entry = (int)cm->nentries;
        cm->entries[cm->nentries++] = c;
        cm->slots[slot].key = key;
        cm->slots[slot].entry = entry;
        if (cm->nentries * 2 > cm->nslots && grow(cm))
            return -1;
    }
    if (di >= 0)
        cm->dense[di] = entry + 1;
    *out = cm->entries[entry];
    return 0;
}

int cost_model_stage(CostModel *cm, int k, int i, int mesh, Submesh sub, StageCost *out)
{
    if (!cm || !out || k < 1 || i < k || i > cm->L || mesh < 0 || mesh >= cm->c->nmeshes)
        return -1;
    int s = sub_index(cm, mesh, sub);
    if (s < 0)
        return -1;
    if (cm->frozen && cm->dense) {
        int32_t e = cm->dense[dense_at(cm, k, i, mesh, s)];
        if (e) {
            *out = cm->entries[e - 1];
            return 0;
        }
    }
    uint64_t h = HASH_SEED;
    for (int l = k; l <= i; l++)
        h = hash_step(h, cm->layers[l - 1].sig);
    pthread_mutex_lock(&cm->mu);
    int rc = lookup_locked(cm, k, i, mesh, s, h, out);
    pthread_mutex_unlock(&cm->mu);
    return rc;
}

int cost_model_profile_all(CostModel *cm, void (*progress)(void *arg, long done, long total),
                           void *arg)
{
    long total = (long)cm->L * (cm->L + 1) / 2 * cm->totsubs, done = 0, step = total / 100 + 1;
    int rc = 0;
    pthread_mutex_lock(&cm->mu);
    if (cm->profiled) {   /* already done: every candidate is counted */
        pthread_mutex_unlock(&cm->mu);
        return 0;
    }
    cm->in_profile = !cm->dense;
    for (int k = 1; k <= cm->L && !rc; k++) {
        uint64_t h = HASH_SEED;
        for (int i = k; i <= cm->L && !rc; i++) {
            h = hash_step(h, cm->layers[i - 1].sig);   /* incremental: hash of sig[k..i] */
            for (int a = 0; a < cm->c->nmeshes && !rc; a++)
                for (int s = 0; s < cm->nsubs[a] && !rc; s++) {
                    StageCost tmp;
                    rc = lookup_locked(cm, k, i, a, s, h, &tmp);
                    if (progress && ++done % step == 0)
                        progress(arg, done, total);
                }
        }
    }
    cm->in_profile = 0;
    if (!rc) {
        cm->profiled = 1;
        cm->frozen = cm->dense != NULL;
    }
    pthread_mutex_unlock(&cm->mu);
    if (progress && !rc)
        progress(arg, total, total);
    return rc;
}

CostCounters cost_model_counters(const CostModel *cm)
{
    CostCounters c;
    pthread_mutex_lock((pthread_mutex_t *)&cm->mu);
    c = cm->cnt;
    pthread_mutex_unlock((pthread_mutex_t *)&cm->mu);
    return c;
}

double cost_model_comm(CostModel *cm, int i, int a, int b)
{
    if (!cm || i < 1 || i > cm->L || a < 0 || b < 0 || a >= cm->c->nmeshes || b >= cm->c->nmeshes)
        return INFINITY;
    if (i == cm->L)
        return 0;   /* nothing follows the last layer */
    /* The whole microbatch boundary crosses: a DP stage's ranks each send
     * their rows, concurrently, over a link whose bandwidth they share, so
     * the time is the full boundary over the link bandwidth. */
    double bytes = cm->layers[i - 1].out_bytes;
    const ProfileLink *pl = cm->o.db ? profile_db_link(cm->o.db, cm->c->meshes[a].name,
                                                       cm->c->meshes[b].name) : NULL;
    if (pl && a == b) /* measured: replaces the mesh's own figure */
        return bytes / pl->bw + pl->lat;
    if (a == b) {
        /* Stage boundaries inside a multi-node mesh mostly fall between
         * nodes (a submesh of several devices fills a node), so use the
         * inter-node link there; a one-node mesh uses the intra-node one. */
        const MeshSpec *m = &cm->c->meshes[a];
        double bw = m->nodes > 1 ? m->inter_bw : m->intra_bw;
        double lat = m->nodes > 1 ? m->inter_lat : m->intra_lat;
        if (!(bw > 0))
            return 0;   /* a one-device mesh holds at most one stage: no boundary inside it */
        return bytes / bw + lat;
    }
    const LinkSpec *l = cluster_link(cm->c, a, b);
    if (!l || !(l->bw > 0))
        return INFINITY;
    double t = pl ? bytes / pl->bw + pl->lat : bytes / l->bw + l->lat;
    if (l->cpu_mediated)
        t += 2.0 * bytes / cm->o.pcie_bw;   /* device->host on one side, host->device on the other */
    return t;
}

void cost_counters_summary(const CostCounters *k, char *buf, size_t cap)
{
    snprintf(buf, cap, "profile: %ld candidates, %ld structural duplicates, %ld unique; "
             "%ld pruned (imbalance), %ld costed, %ld infeasible (memory)",
             k->total, k->duplicates, k->unique, k->pruned_imbalance, k->costed, k->pruned_memory);
}

void cost_counters_db_summary(const CostCounters *k, const ProfileDb *db, char *buf, size_t cap)
{
    snprintf(buf, cap, "profile db %s: %d entries (%d of another microbatch/seq/dtype skipped), "
             "%d links; costed candidates: %ld from the database, %ld mixed, %ld analytic; layer "
             "lookups: %ld from the database, %ld analytic", db ? db->path : "-", db ? db->ne : 0,
             db ? db->skipped : 0, db ? db->nlinks : 0, k->db_full, k->db_mixed, k->db_none,
             k->db_layer_hits, k->db_layer_misses);
}

int cost_model_write_profile_db(const CostModel *cm, const char *path, int microbatch, int seq,
                                IrError *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return ir_errorf(err, "%s: cannot write", path);
    fprintf(f, "{\n  \"format\": \"hetc-profile-db\",\n  \"version\": 1,\n"
            "  \"comment\": \"analytic model figures written by hetc plan --write-profile-db\",\n"
            "  \"layers\": [");
    for (int l = 0; l < cm->L; l++)
        fprintf(f, "%s\"0x%016llx\"", l ? ", " : "", (unsigned long long)cm->layers[l].sig);
    fprintf(f, "],\n  \"entries\": [");
    int first = 1;
    const ClusterSpec *c = cm->c;
    for (int a = 0; a < c->nmeshes; a++) {
        const DeviceSpec *d = &c->meshes[a].dev;
        double peak = device_peak_flops(d, c->dtype) * cm->o.efficiency;
        for (int s = 0; s < cm->nsubs[a]; s++) {
            Submesh sub = cm->subs[a][s];
            /* one entry per (device, submesh): skip what an earlier mesh wrote */
            int seen = 0;
            for (int b = 0; b < a && !seen; b++)
                if (strcasecmp(c->meshes[b].dev.name, d->name) == 0)
                    for (int t = 0; t < cm->nsubs[b] && !seen; t++)
                        seen = cm->subs[b][t].n == sub.n && cm->subs[b][t].m == sub.m;
            if (seen)
                continue;
            int dp = sub.n * sub.m, tp = 1;
            for (int l = 0; l < cm->L; l++) {
                const PlanLayer *p = &cm->layers[l];
                int dup = 0;
                for (int q = 0; q < l && !dup; q++)
                    dup = cm->layers[q].sig == p->sig;
                if (dup)
                    continue;
                double tf, tb;
                layer_roofline(cm, p, d, peak, (double)dp * tp, tp, &tf, &tb);
                double stat = p->param_bytes / cm->dtype_bytes / tp * bytes_per_param(cm, dp);
                char seqs[32] = ""; /* no --seq: the model's own, any on reading */
                if (seq > 0)
                    snprintf(seqs, sizeof seqs, "\"seq\": %d, ", seq);
                fprintf(f, "%s\n    {\"device\": \"%s\", \"layer_sig\": \"0x%016llx\", "
                        "\"submesh\": [%d, %d], \"dp\": %d, \"tp\": %d, \"microbatch\": %d, "
                        "%s\"dtype\": \"%s\", \"t_f\": %.17g, \"t_b\": %.17g, "
                        "\"mem_static\": %.17g, \"mem_act\": %.17g}",
                        first ? "" : ",", d->name, (unsigned long long)p->sig, sub.n, sub.m, dp, tp,
                        microbatch, seqs, c->dtype, tf, tb, stat, p->act_bytes / ((double)dp * tp));
                first = 0;
            }
        }
    }
    fprintf(f, "\n  ]\n}\n");
    if (fclose(f) != 0)
        return ir_errorf(err, "%s: write error", path);
    return 0;
}

static int oracle_stage(void *ctx, int k, int i, int mesh, Submesh sub, StageCost *out)
{
    return cost_model_stage(ctx, k, i, mesh, sub, out);
}

static double oracle_comm(void *ctx, int i, int a, int b)
{
    return cost_model_comm(ctx, i, a, b);
}

CostOracle cost_model_oracle(CostModel *cm)
{
    CostOracle o = {cm, oracle_stage, oracle_comm};
    return o;
}
