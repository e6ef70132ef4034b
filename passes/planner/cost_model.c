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
#include "cost_model_int.h"
#include "zero_memory.h"
#include "hapt_dp.h"   /* submesh_enumerate: the §5.2 shapes, shared with the DP;
                          stage_fits_memory: Eq. 24 */

#define GIB 1073741824.0
#ifndef DENSE_LIMIT
#define DENSE_LIMIT (32L << 20)   /* entries of the dense (k,i,mesh,sub) table */
#endif

void cost_options_default(CostOptions *o)
{
    o->efficiency = 0.5;
    o->bf16_gemm = 0;
    o->grad_reduce_bf16 = 0;
    o->tp_reduce_bf16 = 0;
    o->imbalance_threshold = 4.0;
    o->imbalance_lower = 0;
    o->pcie_bw = 12e9;
    o->runtime_reserve_bytes = 1.0 * GIB;
    o->zero_stage = 0;
    o->max_tp = 1;
    o->recompute = RECOMPUTE_NONE;
    o->inflight = 1;
    o->intra = NULL;
    o->prune_memory = 1;
    o->dp_divides = 0;
    o->dp_max_rows = 0;
    o->db = NULL;
    for (int b = 0; b < ARENA_TPB; b++)
        o->arena[b] = NULL;
    o->arena_maxdp = 0;
}

double device_peak_flops(const DeviceSpec *d, const char *dtype)
{
    if (dtype && strcmp(dtype, "bf16") == 0)
        return d->flops_bf16;
    if (dtype && strcmp(dtype, "fp16") == 0)
        return d->flops_fp16;
    return d->flops_fp32;
}

double cm_flops_time(const CostOptions *o, const DeviceSpec *d, double flops, double lp,
                     double peak)
{
    if (!o->bf16_gemm || !(lp > 0))
        return flops / peak;
    double p16 = (d->flops_bf16 > 0 ? d->flops_bf16 : d->flops_fp32) * o->efficiency;
    if (p16 == peak) /* no bf16 tensor cores: bit for bit the fp32 plan */
        return flops / peak;
    return (flops - lp) / peak + lp / p16;
}

double dtype_size_bytes(const char *dtype)
{
    return dtype && strcmp(dtype, "fp32") == 0 ? 4.0 : 2.0;
}

/* ---------------------------------------------------------------- model */

/* Key, Slot and struct CostModel: cost_model_int.h (shared with cost_report.c). */

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
void cm_layer_roofline(const CostModel *cm, const PlanLayer *p, const DeviceSpec *d, double peak,
                       double shards, int tp, double *tf, double *tb)
{
    /* Roofline per layer: a layer is compute- or memory-bound as a whole.
     * Forward reads the weights and streams activations in and out;
     * backward reads weights, writes gradients and re-reads the saved
     * activations while writing their gradients. */
    double ff = cm_flops_time(&cm->o, d, p->fwd_flops / shards, p->lp_fwd_flops / shards, peak);
    double fb = (p->param_bytes / tp + (p->act_bytes + p->out_bytes) / shards) / d->hbm_bw;
    double bf = cm_flops_time(&cm->o, d, p->bwd_flops / shards, p->lp_bwd_flops / shards, peak);
    double bb = (2 * p->param_bytes / tp + 2 * p->act_bytes / shards) / d->hbm_bw;
    *tf = ff > fb ? ff : fb;
    *tb = bf > bb ? bf : bb;
}

/* AdamW model states per parameter per device, ZeRO stage `zero` over the
 * DP group: zero_memory.h (the formula shared with the other planners). */
static double bytes_per_param_z(const CostModel *cm, int dp, int zero)
{
    return zero_state_bytes_per_param(cm->dtype_bytes, zero, dp);
}

double cm_bytes_per_param(const CostModel *cm, int dp)
{
    return bytes_per_param_z(cm, dp, cm->o.zero_stage > 0 ? cm->o.zero_stage : 0);
}

const char *recompute_name(int rc)
{
    return rc == RECOMPUTE_FULL ? "full" : rc == RECOMPUTE_SELECTIVE ? "selective" : "none";
}

int recompute_from_name(const char *s)
{
    if (!s)
        return -1;
    if (!strcmp(s, "none"))
        return RECOMPUTE_NONE;
    if (!strcmp(s, "selective") || !strcmp(s, "sel"))
        return RECOMPUTE_SELECTIVE;
    if (!strcmp(s, "full"))
        return RECOMPUTE_FULL;
    return -1;
}

/* Sums over layers k..i for one (dp, tp): what every ZeRO / recompute
 * variant of that factorization is derived from. */
typedef struct IntraSums {
    double tf, tb;          /* per-microbatch times, TP collectives included */
    double t_tp_f, t_tp_b;  /* the TP collectives alone */
    double params;          /* parameter bytes per device (after TP) */
    double stat;            /* database form: static bytes per device for zero = 0/1/2 */
    double stat_z[3];
    double act;             /* saved activations per device per microbatch */
    double attn;            /* of which selective recompute drops */
    double t_attn;          /* forward time of the attention internals (selective) */
    int hits;
    int db_mem;             /* some layer's memory came from the database */
    double scratch;         /* the arena's scratch + scalars (0: not modelled) */
} IntraSums;

static const LayerArena *arena_at(const CostModel *cm, int dp, int tp)
{
    int b = 0;
    while (b < ARENA_TPB && (1 << b) < tp)
        b++;
    if (b >= ARENA_TPB || (1 << b) != tp || !cm->o.arena[b] || dp < 1 || dp > cm->o.arena_maxdp)
        return NULL;
    return cm->o.arena[b][dp];
}

/* (issue 17) Activation slot and scratch of layers k..i from the measured
 * one-layer arenas (cost_model.h LayerArena): the first layer's slot whole
 * (its received boundary, token ids), each later layer's without what the
 * stage keeps as the producer's forward value or not at all; scratch is
 * reused by every call, so the largest of the forward's and the update's
 * layer peaks and of the backward's, where each layer's peak has the
 * gradients of the layers after it beside it.  Returns 0 when no arena was
 * measured for this dp. */
static int arena_sums(const CostModel *cm, int k, int i, int dp, int tp, double *act,
                      double *scratch)
{
    const LayerArena *la = arena_at(cm, dp, tp);
    if (!la)
        return 0;
    /* the entries (layers, or TP units) k..i is made of */
    int last = k;
    for (int l = k; l <= i; l += la[l - 1].span) {
        if (la[l - 1].span < 1 || l + la[l - 1].span - 1 > i)
            return 0; /* cuts a TP unit: not a stage tp > 1 is offered for */
        last = l;
    }
    double a = la[k - 1].slot, fu = 0, b = 0, later = 0;
    for (int l = k + la[k - 1].span; l <= i; l += la[l - 1].span)
        a += la[l - 1].slot - la[l - 1].inner;
    for (int l = last; l >= k;) { /* the backward's order */
        const LayerArena *x = &la[l - 1];
        fu = x->fwd > fu ? x->fwd : fu;
        fu = x->upd > fu ? x->upd : fu;
        b = x->bwd + later > b ? x->bwd + later : b;
        later += x->grad;
        int p = l - 1; /* the entry before l */
        while (p >= k && la[p - 1].span < 1)
            p--;
        l = p;
    }
    *act = a;
    *scratch = la[k - 1].scalars + (b > fu ? b : fu);
    return 1;
}

/* Ring all-reduce of `bytes` over tp ranks inside a node, `count` times. */
static double tp_allreduce(const MeshSpec *m, int tp, int count, double bytes)
{
    if (tp <= 1 || count <= 0)
        return 0;
    if (!(m->intra_bw > 0))
        return INFINITY;
    return 2.0 * (tp - 1) / tp * bytes / m->intra_bw + 2.0 * (tp - 1) * count * m->intra_lat;
}

/* Cost of layers k..i (1-based) on `sub` of mesh a with dp x tp.
 * tp = 1 keeps the analytic model's exact arithmetic of before issue 9.
 * tp > 1 (Megatron): of each layer, the TP-sharded share of FLOPs (LayerIntra
 * .tp_flops_frac), parameters (.tp_param_frac) and activations
 * (.tp_act_frac) is divided by tp, the rest is replicated on every TP rank;
 * every layer pays its TP all-reduces (on this DP replica's rows) on the
 * intra-node link.  With a profile database, each layer's measured entry
 * for (dp, tp) replaces its roofline (and its memory, when it has one). */
static void intra_sums(const CostModel *cm, int k, int i, int a, Submesh sub, int dp, int tp,
                       IntraSums *r)
{
    const MeshSpec *m = &cm->c->meshes[a];
    const DeviceSpec *d = &m->dev;
    double peak = device_peak_flops(d, cm->c->dtype) * cm->o.efficiency;
    double shards = (double)dp * tp;
    const ProfileDb *db = cm->o.db;
    memset(r, 0, sizeof *r);
    double act_raw = 0;
    for (int l = k; l <= i; l++) {
        const PlanLayer *p = &cm->layers[l - 1];
        const LayerIntra *li = cm->o.intra ? &cm->o.intra[l - 1] : NULL;
        const ProfileEntry *e = db ? profile_db_find(db, d->name, p->sig, sub.n, sub.m, dp, tp) : NULL;
        /* per-device shares of this layer */
        double fsh = 1.0 / dp, psh = 1.0, ash = 1.0 / shards;
        if (tp > 1) {
            double ff = li ? li->tp_flops_frac : 0, pf = li ? li->tp_param_frac : 0;
            double af = li ? li->tp_act_frac : 0;
            fsh = (ff / tp + (1 - ff)) / dp;
            psh = pf / tp + (1 - pf);
            ash = (af / tp + (1 - af)) / dp;
        }
        /* a bf16 TP wire (--tp-reduce-dtype bf16) moves half the bytes */
        double tw = cm->o.tp_reduce_bf16 ? 0.5 : 1.0;
        double ctf = li ? tp_allreduce(m, tp, li->ar_fwd, tw * li->ar_fwd_bytes / dp) : 0;
        double ctb = li ? tp_allreduce(m, tp, li->ar_bwd, tw * li->ar_bwd_bytes / dp) : 0;
        double lparams = p->param_bytes * psh;
        r->params += tp > 1 ? lparams : p->param_bytes;
        if (li && li->attn_bytes > 0) {
            double at = tp > 1 ? li->attn_bytes / shards : li->attn_bytes / dp;
            r->attn += at;
            r->t_attn += li->attn_flops * (tp > 1 ? 1.0 / shards : 1.0 / dp) / peak;
        }
        if (e) {
            r->hits++;
            r->tf += e->t_f;
            r->tb += e->t_b;
            if (e->has_mem) {
                r->db_mem = 1;
                for (int z = 0; z < 3; z++)
                    r->stat_z[z] += e->mem_static;  /* measured: as run */
                r->act += e->mem_act;
                continue;
            }
        } else {
            double lf, lb;
            if (tp == 1) {
                cm_layer_roofline(cm, p, d, peak, shards, tp, &lf, &lb);
            } else {
                double ff = cm_flops_time(&cm->o, d, p->fwd_flops * fsh, p->lp_fwd_flops * fsh,
                                          peak);
                double fb = (lparams + p->act_bytes * ash + p->out_bytes / dp) / d->hbm_bw;
                double bf = cm_flops_time(&cm->o, d, p->bwd_flops * fsh, p->lp_bwd_flops * fsh,
                                          peak);
                double bb = (2 * lparams + 2 * p->act_bytes * ash) / d->hbm_bw;
                lf = (ff > fb ? ff : fb) + ctf;
                lb = (bf > bb ? bf : bb) + ctb;
            }
            r->tf += lf;
            r->tb += lb;
        }
        r->t_tp_f += ctf;
        r->t_tp_b += ctb;
        if (db || tp > 1) { /* per layer, so measured and analytic layers add up */
            for (int z = 0; z < 3; z++)
                r->stat_z[z] += lparams / cm->dtype_bytes * bytes_per_param_z(cm, dp, z);
            r->act += p->act_bytes * ash;
        } else {
            act_raw += p->act_bytes; /* divided once below, as the analytic model always did */
        }
    }
    if (!db && tp == 1) { /* the analytic model's own form (bit for bit as before databases) */
        for (int z = 0; z < 3; z++)
            r->stat_z[z] = r->params / cm->dtype_bytes / tp * bytes_per_param_z(cm, dp, z);
        r->act = act_raw / shards;
    }
    double aa, asc;
    if (!r->db_mem && arena_sums(cm, k, i, dp, tp, &aa, &asc)) {
        r->act = aa; /* the measured arena replaces the per-op rules */
        r->scratch = asc;
    } else if (!r->db_mem && tp > 1 && arena_sums(cm, k, i, dp, 1, &aa, &asc)) {
        /* no TP arena: the tp = 1 one scaled by the per-op rules' TP shares */
        double dense = 0;
        for (int l = k; l <= i; l++)
            dense += cm->layers[l - 1].act_bytes / dp;
        double f = dense > 0 ? r->act / dense : 1.0;
        r->act = aa * f;
        r->scratch = asc * f;
    }
    if (r->attn > r->act)
        r->attn = r->act;
}

/* One intra-op plan: (dp, tp) sums + ZeRO stage + recompute -> StageCost. */
static void intra_plan(const CostModel *cm, int k, int a, Submesh sub, int dp, int tp,
                       const IntraSums *r, int zero, int rc, StageCost *out)
{
    const MeshSpec *m = &cm->c->meshes[a];
    memset(out, 0, sizeof *out);
    out->t_f = r->tf;
    out->t_b = r->tb;
    out->t_tp = r->t_tp_f + r->t_tp_b;
    /* HAPT Eq. 24's mem_p: model states, the runtime's reserve and the
     * arena's scratch (a buffer every microbatch's calls reuse) */
    out->mem_static = r->stat_z[zero] + cm->o.runtime_reserve_bytes + r->scratch;
    out->mem_scratch = r->scratch;
    out->mem_act = r->act;
    if (rc == RECOMPUTE_SELECTIVE) {
        /* the attention probabilities are recomputed per layer in backward:
         * one layer's worth is live at a time (static), the rest is kept */
        out->t_b += r->t_attn;
        out->mem_act = r->act - r->attn;
    } else if (rc == RECOMPUTE_FULL) {
        /* keep only the stage's boundary input per microbatch; backward runs
         * the stage's forward again (its TP collectives too), holding one
         * microbatch's activations while it does */
        double in = k > 1 ? cm->layers[k - 2].out_bytes / dp : 0;
        out->t_b += r->tf;
        out->t_tp += r->t_tp_f;
        out->mem_static += r->act;
        out->mem_act = in < r->act ? in : r->act;
    }
    out->dp = dp;
    out->tp = tp;
    out->zero = zero;
    out->recompute = rc;
    /* Gradient sync inside the DP group.  ZeRO 0: ring all-reduce once per
     * iteration, 2 (dp-1)/dp of the bytes; ZeRO-1: reduce-scatter of the
     * gradients + all-gather of the updated parameters, (dp-1)/dp each with
     * (dp-1) latency steps each: the same volume, so ZeRO-1 is chosen only
     * when memory binds.  ZeRO-2 keeps only its gradient shard between
     * microbatches, so the stage binaries reduce-scatter each microbatch's
     * gradients in its backward (hetrt_accum_scatter, blocking): that
     * reduce-scatter is part of every microbatch's t_b (Eq. 13 sees it), and
     * only the all-gather is left for t_sync. */
    out->t_sync = 0;
    if (dp > 1) {
        double bw = sub.n == 1 ? m->intra_bw : m->inter_bw;
        double lat = sub.n == 1 ? m->intra_lat : m->inter_lat;
        double g = tp > 1 ? r->params : r->params / tp;
        double one = bw > 0 ? (double)(dp - 1) / dp * g / bw + (dp - 1) * lat : INFINITY;
        /* the gradients' reduce-scatter (ZeRO-0's all-reduce is two of them)
         * over a bf16 wire moves half the bytes; ZeRO's all-gather of the
         * updated fp32 parameters does not */
        double rs = cm->o.grad_reduce_bf16 && bw > 0
                        ? (double)(dp - 1) / dp * g * 0.5 / bw + (dp - 1) * lat
                        : one;
        if (zero >= 2) {
            out->t_b += rs;
            out->t_sync = one;
        } else if (zero == 1) {
            out->t_sync = rs + one;
        } else {
            out->t_sync = 2.0 * rs; /* ZeRO 0's ring all-reduce: the same sum */
        }
    }
    out->feasible = out->mem_static + out->mem_act <= m->dev.mem_bytes;
}

/* May layers k..i run at this tp > 1?  Only where tp_shard shards
 * something: a stage with no shardable pattern does not compile under TP
 * (partition refuses it), and one whose patterns tp does not all divide,
 * or that holds part of a pattern, would run them partly replicated, which
 * the per-layer figures do not describe: not offered either. */
static int tp_offered(const CostModel *cm, int k, int i, int tp)
{
    if (!cm->o.intra)
        return 0;
    int b = 0;
    while (b < 31 && (1 << b) < tp)
        b++;
    int any = 0;
    for (int l = k; l <= i; l++) {
        const LayerIntra *li = &cm->o.intra[l - 1];
        if (l - li->tp_span_before < k || l + li->tp_span_after > i)
            return 0; /* cuts a pattern: it would run replicated, which the
                         per-layer figures do not describe */
        if (li->tp_patterns <= 0)
            continue;
        if (!((li->tp_divides >> b) & 1u))
            return 0;
        any = 1;
    }
    return any;
}

/* Enumerate the intra-op plans of a candidate (see cost_model.h).  Returns
 * the count written (at most cap), with *hits of the tp = 1 factorization. */
static int intra_enumerate(const CostModel *cm, int k, int i, int a, Submesh sub, StageCost *outs,
                           int cap, int *hits)
{
    int devices = sub.n * sub.m, n = 0;
    int max_tp = cm->o.max_tp > 0 ? cm->o.max_tp : 1;
    int z_lo = cm->o.zero_stage < 0 ? 0 : cm->o.zero_stage, z_hi = cm->o.zero_stage < 0 ? 2 : cm->o.zero_stage;
    int r_lo = cm->o.recompute < 0 ? 0 : cm->o.recompute, r_hi = cm->o.recompute < 0 ? 2 : cm->o.recompute;
    if (hits)
        *hits = 0;
    for (int tp = 1; tp <= max_tp && tp <= sub.m; tp *= 2) {
        if (devices % tp || sub.m % tp)
            continue;
        if (tp > 1 && !tp_offered(cm, k, i, tp))
            continue;
        int dp = devices / tp;
        if (cm->o.dp_divides > 0 && cm->o.dp_divides % dp)
            continue; /* the rows of a microbatch cannot be split evenly */
        if (cm->o.dp_max_rows > 0 && dp > cm->o.dp_max_rows)
            continue; /* a DP rank would get no row of the microbatch */
        IntraSums r;
        intra_sums(cm, k, i, a, sub, dp, tp, &r);
        if (tp == 1 && hits)
            *hits = r.hits;
        for (int z = z_lo; z <= z_hi; z++) {
            if (z > 0 && dp == 1 && cm->o.zero_stage < 0)
                continue; /* nothing to shard over: the same as ZeRO 0 */
            for (int rc = r_lo; rc <= r_hi; rc++) {
                if (rc == RECOMPUTE_SELECTIVE && !(r.attn > 0) && cm->o.recompute < 0)
                    continue; /* drops nothing: never better than none */
                if (n < cap)
                    intra_plan(cm, k, a, sub, dp, tp, &r, z, rc, &outs[n]);
                n++;
            }
        }
    }
    return n;
}

static int k_select(const CostModel *cm, int i)
{
    int k = cm->o.inflight > 1 ? cm->o.inflight : 1;
    return k < cm->L - i + 1 ? k : cm->L - i + 1;
}

/* Simplicity order for ties: ZeRO stage, then recompute, then tp. */
static int simpler(const StageCost *x, const StageCost *y)
{
    if (x->zero != y->zero)
        return x->zero < y->zero;
    if (x->recompute != y->recompute)
        return x->recompute < y->recompute;
    return x->tp < y->tp;
}

static int fits(const StageCost *c, int K, double mem)
{
    return stage_fits_memory(c->mem_static, c->mem_act, K, mem);
}

/* Largest K <= cap that fits (0 if none). */
static int kfit(const StageCost *c, int cap, double mem)
{
    if (!fits(c, 1, mem))
        return 0;
    if (!(c->mem_act > 0) || fits(c, cap, mem))
        return cap;
    int lo = 1, hi = cap; /* fits(lo), !fits(hi) */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (fits(c, mid, mem))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The choice rule (docs/PLANNER.md "Intra-op plans"): among plans whose
 * memory fits K = k_select microbatches, the fastest t_f + t_b, then the
 * smallest t_sync, then the simpler; if none fits K, those that fit the
 * most microbatches (>= 1), fastest first; if none fits one, the fastest
 * (reported infeasible). */
static int intra_better(const StageCost *c, const StageCost *b, int K, double mem)
{
    int kc = kfit(c, K, mem), kb = kfit(b, K, mem);
    if (kc != kb)
        return kc > kb;
    double tc = c->t_f + c->t_b, tb = b->t_f + b->t_b;
    if (tc != tb)
        return tc < tb;
    if (c->t_sync != b->t_sync)
        return c->t_sync < b->t_sync;
    return simpler(c, b);
}

/* Compute a unique candidate's cost; returns 1 if imbalance-pruned, 2 if
 * no dp x tp factorization splits a microbatch's rows (infeasible). */
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
    /* Intra-op plans: every dp x tp = devices, ZeRO stage and recompute
     * allowed by the options; keep the best by intra_better. */
    StageCost opts[64];
    int hits_tp1 = 0;
    int n = intra_enumerate(cm, k, i, a, sub, opts, 64, &hits_tp1);
    if (n > 64)
        n = 64;
    if (n == 0) {
        /* no factorization splits a microbatch's rows (every dp above them
         * or, with dp_divides, not dividing them): no plan, whatever
         * prune_memory says */
        out->t_f = out->t_b = INFINITY;
        out->mem_static = out->mem_act = INFINITY; /* not costed: no memory figure */
        out->dp = devices;
        out->tp = 1;
        out->feasible = 0;
        return 2;
    } else {
        int K = k_select(cm, i), best = 0;
        for (int q = 1; q < n; q++)
            if (intra_better(&opts[q], &opts[best], K, m->dev.mem_bytes))
                best = q;
        *out = opts[best];
        if (hits)
            *hits = hits_tp1;
    }
    if (!cm->o.prune_memory)
        out->feasible = 1;
    return 0;
}

static long slot_of(const CostModel *cm, const Key *key)
{
    uint64_t ib;
    memcpy(&ib, &key->in_bytes, sizeof ib);
    uint64_t h = key->h ^ mix64(((uint64_t)key->len << 40) ^ ((uint64_t)key->cls << 32) ^
                                ((uint64_t)key->n << 16) ^ (uint64_t)key->m) ^
                 mix64(ib ^ ((uint64_t)key->ksel << 48));
    long s = (long)(h & (uint64_t)(cm->nslots - 1));
    while (cm->slots[s].entry >= 0) {
        const Key *q = &cm->slots[s].key;
        if (q->h == key->h && q->len == key->len && q->cls == key->cls && q->n == key->n &&
            q->m == key->m && q->ksel == key->ksel && q->in_bytes == key->in_bytes &&
            q->arena_slot == key->arena_slot && q->arena_scratch == key->arena_scratch)
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
    const LayerArena *la = arena_at(cm, 1, 1);
    Key key = {h, i - k + 1, cm->mesh_class[a], sub.n, sub.m, k_select(cm, i),
               k > 1 && cm->o.recompute != RECOMPUTE_NONE ? cm->layers[k - 2].out_bytes : 0,
               la ? la[k - 1].slot : 0, la ? la[k - 1].bwd + la[k - 1].fwd : 0};
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
        int why = cost_unique(cm, k, i, a, sub, &c, &hits);
        if (why == 1)
            cm->cnt.pruned_imbalance++;
        else if (why == 2) {
            cm->cnt.costed++;
            cm->cnt.pruned_rows++;
        } else {
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

int cost_model_intra_options(CostModel *cm, int k, int i, int mesh, Submesh sub, StageCost *out,
                             int cap, int *k_sel)
{
    if (!cm || k < 1 || i < k || i > cm->L || mesh < 0 || mesh >= cm->c->nmeshes ||
        sub_index(cm, mesh, sub) < 0 || cap < 0 || (cap > 0 && !out))
        return -1;
    if (k_sel)
        *k_sel = k_select(cm, i);
    return intra_enumerate(cm, k, i, mesh, sub, out, cap, NULL);
}

int cost_model_profile_all(CostModel *cm, void (*progress)(void *arg, long done, long total),
                           void *arg)
{
    return cost_model_profile_shapes(cm, NULL, NULL, progress, arg);
}

int cost_model_profile_shapes(CostModel *cm, int (*keep)(void *karg, int mesh, Submesh sub),
                              void *karg, void (*progress)(void *arg, long done, long total),
                              void *arg)
{
    long nkeep = 0;
    for (int a = 0; a < cm->c->nmeshes; a++)
        for (int s = 0; s < cm->nsubs[a]; s++)
            nkeep += !keep || keep(karg, a, cm->subs[a][s]);
    long total = (long)cm->L * (cm->L + 1) / 2 * nkeep, done = 0, step = total / 100 + 1;
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
                    if (keep && !keep(karg, a, cm->subs[a][s]))
                        continue;
                    rc = lookup_locked(cm, k, i, a, s, h, &tmp);
                    if (progress && ++done % step == 0)
                        progress(arg, done, total);
                }
        }
    }
    cm->in_profile = 0;
    if (!rc && !keep) { /* a subset leaves the other shapes to lazy queries (locked) */
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
