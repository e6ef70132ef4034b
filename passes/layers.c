/* Fine-grained layers (HAPT §5.1); the rule and the per-layer figures are
 * documented in layers.h. */
#include "layers.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixed_precision.h"
#include "op_cost.h"

void layer_options_default(LayerOptions *o)
{
    o->target_layers = 0;
    o->min_per_module = 4;
    o->heavy_bound = 2;
    o->slack = 0.1;
    o->param_dtype_bytes = 2.0;
}

static uint64_t mix(uint64_t h, uint64_t x)
{
    h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 29);
}

/* Split nodes [0, m) (costs c, heavy flags h, cb[r] = live bytes at the cut
 * before relative node r) into k parts; writes the k-1 cut positions into
 * cuts (relative, ascending).  Returns the number of parts actually made
 * (k is clamped to m), or -1 on OOM. */
static int partition(const double *c, const unsigned char *h, const double *cb, int m, int k,
                     int bound, double slack, int *cuts)
{
    if (k > m)
        k = m;
    if (k <= 1)
        return 1;
    if (m > 3000) {
        /* Long runs outside modules (a model where nothing repeats): a cut
         * after every `bound` heavy ops, no DP (O(k m^2) would be slow). */
        int made = 1, seen = 0;
        for (int r = 0; r < m && made < k; r++) {
            seen += h[r];
            if (seen == bound && r + 1 < m) {
                cuts[made - 1] = r + 1;
                made++;
                seen = 0;
            }
        }
        return made;
    }
    size_t W = (size_t)m + 1;
    double *C = malloc(W * sizeof *C), *f = malloc((size_t)(k + 1) * W * sizeof *f);
    int *H = malloc(W * sizeof *H), *arg = malloc((size_t)(k + 1) * W * sizeof *arg);
    if (!C || !f || !H || !arg) {
        free(C), free(f), free(H), free(arg);
        return -1;
    }
    C[0] = 0;
    H[0] = 0;
    for (int r = 0; r < m; r++) {
        C[r + 1] = C[r] + c[r];
        H[r + 1] = H[r] + h[r];
    }
    int made = k;
    for (int relax = 0; relax < 2; relax++) {
        int B = relax ? m : bound;
        /* DP 1: the smallest achievable maximum part cost M*. */
        for (size_t q = 0; q < (size_t)(k + 1) * W; q++)
            f[q] = DBL_MAX;
        f[0] = 0;
        for (int p = 1; p <= k; p++)
            for (int i = p; i <= m; i++)
                for (int j = p - 1; j < i; j++) {
                    if (f[(size_t)(p - 1) * W + j] == DBL_MAX || H[i] - H[j] > B)
                        continue;
                    double v = C[i] - C[j];
                    if (f[(size_t)(p - 1) * W + j] > v)
                        v = f[(size_t)(p - 1) * W + j];
                    if (v < f[(size_t)p * W + i])
                        f[(size_t)p * W + i] = v;
                }
        double Mstar = f[(size_t)k * W + m];
        if (Mstar == DBL_MAX)
            continue;   /* the heavy bound cannot be met with k parts: drop it */
        double cap = Mstar * (1.0 + slack) * (1 + 1e-12) + 1e-9;
        /* DP 2: the cheapest cuts (live bytes) among splits within the cap. */
        for (size_t q = 0; q < (size_t)(k + 1) * W; q++)
            f[q] = DBL_MAX;
        f[0] = 0;
        for (int p = 1; p <= k; p++)
            for (int i = p; i <= m; i++)
                for (int j = p - 1; j < i; j++) {
                    double prev = f[(size_t)(p - 1) * W + j];
                    if (prev == DBL_MAX || H[i] - H[j] > B || C[i] - C[j] > cap)
                        continue;
                    double v = prev + (j > 0 ? cb[j] : 0);
                    if (v < f[(size_t)p * W + i]) {
                        f[(size_t)p * W + i] = v;
                        arg[(size_t)p * W + i] = j;
                    }
                }
        int i = m;
        for (int p = k; p >= 2; p--) {
            i = arg[(size_t)p * W + i];
            cuts[p - 2] = i;
        }
        break;
    }
    free(C), free(f), free(H), free(arg);
    return made;
}

typedef struct Seg {
    int start, len;     /* live positions [start, start+len) */
    int module;         /* module id, -1 outside */
    int heavy;
    uint64_t sig;       /* hash of node signatures (module kinds) */
} Seg;

typedef struct Kind {
    uint64_t sig;
    int len, parts;
    int *cuts;
} Kind;

int layers_build(IrGraph *g, const LayerOptions *o, PlanLayer **out, LayerSummary *sum,
                 IrError *err)
{
    LayerOptions dflt;
    if (!o) {
        layer_options_default(&dflt);
        o = &dflt;
    }
    if (o->heavy_bound < 1 || o->min_per_module < 1 || o->target_layers < 0 ||
        !(o->param_dtype_bytes > 0))
        return ir_errorf(err, "layers: bad options (heavy bound %d, per module %d, target %d)",
                         o->heavy_bound, o->min_per_module, o->target_layers);
    *out = NULL;
    int *order = NULL;
    int n = live_nodes(g, &order);
    if (n < 0)
        return ir_errorf(err, "layers: out of memory");
    if (n == 0) {
        free(order);
        return ir_errorf(err, "layers: the graph has no nodes");
    }
    /* HOOK (training issue): with @bwd nodes present, restrict `order` to
     * the forward nodes here and take bwd_flops / act_bytes from the
     * backward nodes carrying the same layer_id below. */
    int rc = -1, nseg = 0, nkinds = 0, L = 0;
    double *cost = malloc((size_t)n * sizeof *cost);
    unsigned char *heavy = malloc((size_t)n);
    uint64_t *nsig = malloc((size_t)n * sizeof *nsig);
    OpCost *oc = malloc((size_t)n * sizeof *oc);
    double *cut = cut_bytes(g, order, n);
    Seg *seg = malloc((size_t)n * sizeof *seg);
    Kind *kinds = calloc((size_t)n, sizeof *kinds);
    int *lstart = malloc(((size_t)n + 1) * sizeof *lstart);   /* layer start positions */
    int *tmpcuts = malloc(((size_t)n + 1) * sizeof *tmpcuts);
    PlanLayer *layers = NULL;
    unsigned char *seen = NULL;
    if (!cost || !heavy || !nsig || !oc || !cut || !seg || !kinds || !lstart || !tmpcuts) {
        ir_errorf(err, "layers: out of memory");
        goto done;
    }
    for (int j = 0; j < n; j++) {
        const IrNode *nd = g->nodes[order[j]];
        if (op_cost_node(nd, &oc[j], err)) {
            ir_error_prefix(err, "layers");
            goto done;
        }
        cost[j] = oc[j].fwd_flops + oc[j].bwd_flops;
        heavy[j] = (unsigned char)oc[j].heavy;
        nsig[j] = node_signature(nd);
    }
    /* segments: maximal runs of one module id (or of no module) */
    for (int j = 0; j < n;) {
        int mid = g->nodes[order[j]]->module_id, e = j;
        Seg *s = &seg[nseg++];
        s->start = j;
        s->module = mid < 0 ? -1 : mid;
        s->heavy = 0;
        s->sig = 0x6c6179ULL;
        while (e < n && (g->nodes[order[e]]->module_id < 0 ? -1 : g->nodes[order[e]]->module_id) == s->module) {
            s->heavy += heavy[e];
            s->sig = mix(s->sig, nsig[e]);
            e++;
        }
        s->len = e - j;
        j = e;
    }
    int nmod = 0, outside_layers = 0, maxheavy = 0;
    for (int q = 0; q < nseg; q++) {
        if (seg[q].module >= 0) {
            nmod++;
            if (seg[q].heavy > maxheavy)
                maxheavy = seg[q].heavy;
        } else {
            int k = (seg[q].heavy + o->heavy_bound - 1) / o->heavy_bound;
            outside_layers += k < 1 ? 1 : (k > seg[q].len ? seg[q].len : k);
        }
    }
    int k = 0, group = 1;
    if (nmod > 0) {
        if (o->target_layers > 0) {
            int rest = o->target_layers - outside_layers;
            k = rest <= nmod ? 1 : (rest + nmod - 1) / nmod;
            /* Fewer layers than modules (Alpa-style coarse granularity, e.g.
             * HAPT §2.2.2's L = 8): `group` consecutive whole modules per layer. */
            if (rest < nmod)
                group = (nmod + (rest > 1 ? rest : 1) - 1) / (rest > 1 ? rest : 1);
        } else {
            k = (maxheavy + o->heavy_bound - 1) / o->heavy_bound;
            if (k < o->min_per_module)
                k = o->min_per_module;
        }
    }
    int bound_used = o->heavy_bound;
    if (k > 0 && (maxheavy + k - 1) / k > bound_used)
        bound_used = (maxheavy + k - 1) / k;
    int run = 0;   /* modules since the last outside segment (for grouping) */
    for (int q = 0; q < nseg; q++) {
        Seg *s = &seg[q];
        int parts, *cuts;
        if (group > 1) {
            if (s->module >= 0 && run++ % group != 0)
                continue;   /* this module joins the layer of the module before it */
            if (s->module < 0)
                run = 0;
        }
        if (s->module >= 0) {
            Kind *kd = NULL;
            for (int t = 0; t < nkinds; t++)
                if (kinds[t].sig == s->sig && kinds[t].len == s->len)
                    kd = &kinds[t];
            if (!kd) {
                kd = &kinds[nkinds++];
                kd->sig = s->sig;
                kd->len = s->len;
                kd->cuts = malloc(((size_t)k + 1) * sizeof *kd->cuts);
                if (!kd->cuts) {
                    ir_errorf(err, "layers: out of memory");
                    goto done;
                }
                kd->parts = partition(cost + s->start, heavy + s->start, cut + s->start, s->len, k,
                                      bound_used, o->slack, kd->cuts);
                if (kd->parts < 0) {
                    ir_errorf(err, "layers: out of memory");
                    goto done;
                }
            }
            parts = kd->parts;
            cuts = kd->cuts;
        } else {
            int ko = (s->heavy + o->heavy_bound - 1) / o->heavy_bound;
            parts = partition(cost + s->start, heavy + s->start, cut + s->start, s->len,
                              ko < 1 ? 1 : ko, o->heavy_bound, o->slack, tmpcuts);
            if (parts < 0) {
                ir_errorf(err, "layers: out of memory");
                goto done;
            }
            cuts = tmpcuts;
        }
        lstart[L++] = s->start;
        for (int p = 0; p + 1 < parts; p++)
            lstart[L++] = s->start + cuts[p];
    }
    lstart[L] = n;
    layers = calloc((size_t)L, sizeof *layers);
    int maxv = 0;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i]->id > maxv)
            maxv = g->values[i]->id;
    seen = calloc((size_t)maxv + 1, 2);   /* [0..maxv]: param counted; [maxv+1..]: saved */
    if (!layers || !seen) {
        ir_errorf(err, "layers: out of memory");
        goto done;
    }
    LayerSummary sm;
    memset(&sm, 0, sizeof sm);
    for (int l = 0; l < L; l++) {
        PlanLayer *pl = &layers[l];
        pl->sig = 0x4c59ULL;
        pl->first_node = order[lstart[l]];
        pl->last_node = order[lstart[l + 1] - 1];
        for (int j = lstart[l]; j < lstart[l + 1]; j++) {
            IrNode *nd = g->nodes[order[j]];
            nd->layer_id = l + 1;
            pl->fwd_flops += oc[j].fwd_flops;
            pl->bwd_flops += oc[j].bwd_flops;
            if (mixed_precision_converts(nd)) {
                pl->lp_fwd_flops += oc[j].fwd_flops;
                pl->lp_bwd_flops += oc[j].bwd_flops;
            }
            pl->heavy_ops += oc[j].heavy;
            pl->sig = mix(pl->sig, nsig[j]);
            for (int i = 0; i < nd->nin; i++) {
                IrValue *v = nd->in[i];
                if (!v)
                    continue;
                if (v->kind == IR_VK_PARAM && !seen[v->id]) {
                    seen[v->id] = 1;
                    int64_t ne = ir_shape_numel(&v->shape);
                    pl->param_bytes += ne > 0 ? (double)ne * o->param_dtype_bytes : 0;
                }
                if (oc[j].saves_inputs && (v->kind == IR_VK_ACT || v->kind == IR_VK_INPUT) &&
                    !seen[maxv + 1 + v->id]) {
                    seen[maxv + 1 + v->id] = 1;
                    int64_t ne = ir_shape_numel(&v->shape);
                    pl->act_bytes += ne > 0 ? (double)ne * (double)ir_dtype_size(v->dtype) : 0;
                }
            }
            if (oc[j].saves_output)
                for (int i = 0; i < nd->nout; i++) {
                    IrValue *v = nd->out[i];
                    if (!v || seen[maxv + 1 + v->id])
                        continue;
                    seen[maxv + 1 + v->id] = 1;
                    int64_t ne = ir_shape_numel(&v->shape);
                    pl->act_bytes += ne > 0 ? (double)ne * (double)ir_dtype_size(v->dtype) : 0;
                }
        }
        pl->out_bytes = l + 1 < L ? cut[lstart[l + 1]] : 0;
        sm.total_param_bytes += pl->param_bytes;
        sm.total_fwd_flops += pl->fwd_flops;
        sm.total_bwd_flops += pl->bwd_flops;
    }
    sm.L = L;
    sm.per_module = group > 1 ? -group : k;
    sm.heavy_bound = nmod ? bound_used : o->heavy_bound;
    sm.outside_layers = outside_layers;
    sm.modules = nmod;
    if (sum)
        *sum = sm;
    *out = layers;
    layers = NULL;
    rc = 0;
done:
    free(cost);
    free(heavy);
    free(nsig);
    free(oc);
    free(cut);
    free(seg);
    if (kinds)
        for (int t = 0; t < nkinds; t++)
            free(kinds[t].cuts);
    free(kinds);
    free(lstart);
    free(tmpcuts);
    free(layers);
    free(seen);
    free(order);
    return rc;
}

int pass_layers(IrGraph *g, PassContext *ctx, IrError *err)
{
    PlanLayer *layers = NULL;
    LayerSummary s;
    if (layers_build(g, NULL, &layers, &s, err))
        return -1;
    if (ctx && ctx->verbose)
        fprintf(stderr, "layers: %d (%d per module x %d modules, %d outside)\n", s.L, s.per_module,
                s.modules, s.outside_layers);
    free(layers);
    return 0;
}
