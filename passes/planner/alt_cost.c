/* Stage and boundary costs shared by the alternative planners (alt_plan.h).
 * The formulas are cost_model.c's (docs/CLUSTER.md) with TP, recompute,
 * ZeRO over an explicit group and a microbatch fraction added; the tp = 1
 * case is checked against cost_model_stage in tests/planner_alt. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alt_plan.h"
#include "zero_memory.h"

double alt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void alt_context_default(AltContext *x, const ClusterSpec *c, const PlanLayer *layers, int L,
                         int samples)
{
    memset(x, 0, sizeof *x);
    x->c = c;
    x->layers = layers;
    x->L = L;
    x->samples = samples;
    cost_options_default(&x->co);
    x->co.imbalance_threshold = 0;
    x->co.db = NULL;
    x->eps = 0.1;
    x->coarse_layers = 8;
    x->threads = 1;
    x->host_mem_per_node = 1099511627776.0;
    /* The repeated block: the smallest period P at which at least 80 % of
     * the layer signatures repeat; its parameters are those of P
     * consecutive layers starting at the first repeating one. */
    x->tp_block_bytes = 0;
    for (int P = 1; P <= L / 2 && layers; P++) {
        int match = 0, first = -1;
        for (int l = 0; l + P < L; l++)
            if (layers[l].sig == layers[l + P].sig) {
                match++;
                if (first < 0)
                    first = l;
            }
        if (first >= 0 && match >= 0.8 * (L - P) - P) {
            for (int l = first; l < first + P; l++)
                x->tp_block_bytes += layers[l].param_bytes;
            /* blocks: P-layer windows from `first` while the signatures repeat */
            int n = 1;
            while (first + (n + 1) * P <= L) {
                int same = 1;
                for (int q = 0; q < P && same; q++)
                    same = layers[first + n * P + q].sig == layers[first + q].sig;
                if (!same)
                    break;
                n++;
            }
            if (P > 1 && n > 1) {
                x->block_first = first + 1;
                x->block_period = P;
                x->block_count = n;
            }
            break;
        }
    }
}

static double ring_allreduce(double bytes, int n, double bw, double lat)
{
    if (n <= 1)
        return 0;
    if (!(bw > 0))
        return INFINITY;
    return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat;
}

int alt_stage_cost(const AltContext *x, int k, int i, int mesh, int dp, int tp, int recompute,
                   int zero, int zero_dp, double frac, StageCost *out)
{
    memset(out, 0, sizeof *out);
    if (!x || !x->c || k < 1 || i > x->L || k > i || mesh < 0 || mesh >= x->c->nmeshes || dp < 1 ||
        tp < 1 || !(frac > 0))
        return -1;
    const MeshSpec *m = &x->c->meshes[mesh];
    const DeviceSpec *d = &m->dev;
    double peak = device_peak_flops(d, x->c->dtype) * x->co.efficiency;
    double dtb = dtype_size_bytes(x->c->dtype);
    double tf = 0, tb = 0, params = 0, act = 0;
    double ar = 0;   /* one TP all-reduce of a layer boundary */
    for (int l = k; l <= i; l++) {
        const PlanLayer *p = &x->layers[l - 1];
        double ff = cm_flops_time(&x->co, d, p->fwd_flops * frac / tp, p->lp_fwd_flops * frac / tp,
                                  peak);
        double fb = (p->param_bytes / tp + (p->act_bytes + p->out_bytes) * frac / tp) / d->hbm_bw;
        double bf = cm_flops_time(&x->co, d, p->bwd_flops * frac / tp, p->lp_bwd_flops * frac / tp,
                                  peak);
        double bb = (2 * p->param_bytes / tp + 2 * p->act_bytes * frac / tp) / d->hbm_bw;
        double lf = ff > fb ? ff : fb, lb = bf > bb ? bf : bb;
        if (tp > 1) {
            /* Megatron: one all-reduce after each row-parallel GEMM
             * (attention out, MLP down) in the forward, one per column
             * input in the backward: two per block each way. */
            ar = ring_allreduce(p->out_bytes * frac * (x->co.tp_reduce_bf16 ? 0.5 : 1.0), tp,
                                m->intra_bw, m->intra_lat);
            double n = p->heavy_ops / 2.0;
            if (x->tp_block_bytes > 0) {
                n = 2.0 * p->param_bytes / x->tp_block_bytes;
                if (n > 2)
                    n = 2;
            }
            lf += n * ar;
            lb += n * ar;
        }
        tf += lf;
        tb += lb + (recompute ? lf : 0);
        params += p->param_bytes;
        if (recompute) { /* only each block's input survives the forward */
            if (alt_segment_start(x, l))
                act += (l > 1 ? x->layers[l - 2].out_bytes : 0) * frac;
        }
        else
            act += p->act_bytes * frac / tp;
    }
    int zdp = zero_dp > 0 ? zero_dp : dp;
    out->t_f = tf;
    out->t_b = tb;
    out->mem_static = params / dtb / tp * zero_state_bytes_per_param(dtb, zero, zdp) + x->co.runtime_reserve_bytes;
    out->mem_act = act;
    out->dp = dp;
    out->tp = tp;
    int one_node = dp * tp <= m->per_node;
    /* the bf16 gradient wire (hetc compile --grad-reduce-dtype bf16): half the bytes */
    out->t_sync = ring_allreduce(params / tp * (x->co.grad_reduce_bf16 ? 0.5 : 1.0), dp,
                                 one_node ? m->intra_bw : m->inter_bw,
                                 one_node ? m->intra_lat : m->inter_lat);
    out->feasible = out->mem_static + out->mem_act <= d->mem_bytes;
    return 0;
}

double alt_comm(const AltContext *x, int i, int a, int b, double mb)
{
    const ClusterSpec *c = x->c;
    if (i < 1 || i > x->L || a < 0 || b < 0 || a >= c->nmeshes || b >= c->nmeshes)
        return INFINITY;
    if (i == x->L)
        return 0;
    double bytes = x->layers[i - 1].out_bytes * mb;
    if (a == b) {
        const MeshSpec *m = &c->meshes[a];
        double bw = m->nodes > 1 ? m->inter_bw : m->intra_bw;
        double lat = m->nodes > 1 ? m->inter_lat : m->intra_lat;
        if (!(bw > 0))
            return 0;
        return bytes / bw + lat;
    }
    const LinkSpec *l = cluster_link(c, a, b);
    if (!l || !(l->bw > 0))
        return INFINITY;
    double t = bytes / l->bw + l->lat;
    if (l->cpu_mediated)
        t += 2.0 * bytes / x->co.pcie_bw;
    return t;
}

int alt_segment_start(const AltContext *x, int l)
{
    if (x->block_period <= 0 || l < x->block_first ||
        l >= x->block_first + x->block_count * x->block_period)
        return 1;
    return (l - x->block_first) % x->block_period == 0;
}

int alt_block_view(const AltContext *x, AltContext *bx, PlanLayer **merged, int **first)
{
    *merged = NULL;
    *first = NULL;
    if (x->block_period <= 1 || x->block_count < 1)
        return -1;
    int nb = 0;
    for (int l = 1; l <= x->L; l++)
        nb += alt_segment_start(x, l);
    PlanLayer *m = calloc((size_t)nb, sizeof *m);
    int *f = calloc((size_t)nb + 1, sizeof *f);
    if (!m || !f) {
        free(m);
        free(f);
        return -1;
    }
    int q = -1;
    for (int l = 1; l <= x->L; l++) {
        const PlanLayer *p = &x->layers[l - 1];
        if (alt_segment_start(x, l)) {
            q++;
            f[q] = l;
            m[q].sig = 1469598103934665603ull;
            m[q].first_node = p->first_node;
        }
        m[q].fwd_flops += p->fwd_flops;
        m[q].bwd_flops += p->bwd_flops;
        m[q].lp_fwd_flops += p->lp_fwd_flops;
        m[q].lp_bwd_flops += p->lp_bwd_flops;
        m[q].param_bytes += p->param_bytes;
        m[q].act_bytes += p->act_bytes;
        m[q].heavy_ops += p->heavy_ops;
        m[q].out_bytes = p->out_bytes;
        m[q].last_node = p->last_node;
        m[q].sig = (m[q].sig ^ p->sig) * 1099511628211ull;
    }
    f[nb] = x->L + 1;
    *bx = *x;
    bx->layers = m;
    bx->L = nb;
    /* every merged layer is its own segment; a block keeps its parameters */
    bx->block_first = bx->block_period = bx->block_count = 0;
    *merged = m;
    *first = f;
    return 0;
}
