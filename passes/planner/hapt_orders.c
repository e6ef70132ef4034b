/* Mesh orders for HAPT's search: every permutation for few meshes, else a
 * heuristic set (by peak FLOP/s, by device memory); and each order's key,
 * the lower bound (B-1) bottleneck + LB the search visits them by. */
#include "hapt_dp_impl.h"

#include <pthread.h>

static double mesh_peak(const ClusterSpec *c, int a)
{
    const DeviceSpec *d = &c->meshes[a].dev;
    if (strcmp(c->dtype, "fp32") == 0)
        return d->flops_fp32;
    if (strcmp(c->dtype, "fp16") == 0 || d->flops_bf16 <= 0)
        return d->flops_fp16;
    return d->flops_bf16;
}

static int orders_add(OrderList *ol, const int *perm)
{
    for (int q = 0; q < ol->n; q++)
        if (memcmp(ol->v + (size_t)q * ol->P, perm, (size_t)ol->P * sizeof *perm) == 0)
            return 0;
    if (ol->n == ol->cap) {
        int nc = ol->cap ? 2 * ol->cap : 16;
        int *v = realloc(ol->v, (size_t)nc * ol->P * sizeof *v);
        if (!v)
            return -1;
        ol->v = v;
        ol->cap = nc;
    }
    memcpy(ol->v + (size_t)ol->n * ol->P, perm, (size_t)ol->P * sizeof *perm);
    ol->n++;
    return 0;
}

static int perms(OrderList *ol, int *a, int l)
{
    if (l == ol->P)
        return orders_add(ol, a);
    for (int q = l; q < ol->P; q++) {
        int t = a[l];
        a[l] = a[q];
        a[q] = t;
        if (perms(ol, a, l + 1))
            return -1;
        t = a[l];
        a[l] = a[q];
        a[q] = t;
    }
    return 0;
}

/* by: 0 peak FLOP/s descending, 1 ascending, 2 device memory descending, 3 ascending */
static void sort_by(const ClusterSpec *c, int *perm, int by)
{
    int P = c->nmeshes;
    for (int q = 1; q < P; q++) /* insertion sort: stable, P is small */
        for (int r = q; r > 0; r--) {
            int a = perm[r - 1], b = perm[r];
            double ka = by < 2 ? mesh_peak(c, a) : c->meshes[a].dev.mem_bytes;
            double kb = by < 2 ? mesh_peak(c, b) : c->meshes[b].dev.mem_bytes;
            int swap = (by % 2 == 0) ? (kb > ka) : (kb < ka);
            if (!swap)
                break;
            perm[r - 1] = b;
            perm[r] = a;
        }
}

/* Every permutation for few meshes; otherwise the cluster's order and the
 * meshes sorted by peak FLOP/s (descending, ascending) and by device memory
 * (descending, ascending). */
int orders_make(const ClusterSpec *c, const DpOptions *opt, OrderList *ol)
{
    int P = c->nmeshes;
    ol->P = P;
    int *a = malloc((size_t)P * sizeof *a);
    if (!a)
        return -1;
    for (int q = 0; q < P; q++)
        a[q] = q;
    int rc = 0;
    if (opt->fixed_order)
        rc = orders_add(ol, a);
    else if (P <= opt->max_perm_meshes)
        rc = perms(ol, a, 0);
    else {
        rc = orders_add(ol, a);
        for (int by = 0; by < 4 && !rc; by++) {
            for (int q = 0; q < P; q++)
                a[q] = q;
            sort_by(c, a, by);
            rc = orders_add(ol, a);
        }
    }
    free(a);
    return rc;
}

void order_set(Order *od, const Ctx *x, const int *perm)
{
    const ClusterSpec *c = x->c;
    od->off[0] = 0;
    for (int p = 0; p < od->P; p++) {
        od->mesh[p] = perm[p];
        od->Dp[p] = c->meshes[perm[p]].nodes * c->meshes[perm[p]].per_node / x->unit[perm[p]];
        od->off[p + 1] = od->off[p] + od->Dp[p];
    }
    od->rem_after[od->P - 1] = 0;
    for (int p = od->P - 2; p >= 0; p--)
        od->rem_after[p] = od->rem_after[p + 1] + od->Dp[p + 1];
}

typedef struct KeyJob {
    const Ctx *x;
    const ClusterSpec *c;
    const OrderList *ol;
    OrderKey *k;
    Work *w;
    atomic_int *next;
    int fail;
} KeyJob;

/* Keys of the orders a thread takes (each order's key is a function of the
 * order alone: the split between threads does not matter). */
static void *key_main(void *arg)
{
    KeyJob *j = arg;
    const Ctx *x = j->x;
    int P = x->P;
    Order od;
    int *buf = malloc((size_t)(4 * P + 1) * sizeof *buf);
    if (!buf) {
        j->fail = 1;
        return NULL;
    }
    od.P = P;
    od.mesh = buf;
    od.Dp = buf + P;
    od.rem_after = buf + 2 * P;
    od.off = buf + 3 * P;
    for (;;) {
        int oi = atomic_fetch_add(j->next, 1);
        if (oi >= j->ol->n)
            break;
        order_set(&od, x, j->ol->v + (size_t)oi * P);
        double t0 = cpu_s();
        double bn = dp_bottleneck(x, &od, j->w->G);
        double lb = dp_relaxed(x, &od, INF, 0, j->w->G);
        j->k[oi].lb = lb;
        j->k[oi].bn = bn;
        j->k[oi].key = bn < INF && lb < INF ? (double)(x->B - 1) * bn + lb : INF;
        j->w->t_keys += cpu_s() - t0;
        if (x->opt->progress)
            atomic_fetch_add(&x->opt->progress->keys_done, 1);
    }
    free(buf);
    return NULL;
}

int keys_compute(const Ctx *x, const ClusterSpec *c, const OrderList *ol, OrderKey *k,
                 Work *ws, int nthreads)
{
    atomic_int next;
    atomic_store(&next, 0);
    if (nthreads > 64)
        nthreads = 64;
    if (nthreads > ol->n)
        nthreads = ol->n;
    KeyJob jobs[64];
    pthread_t th[64];
    int started = 1;
    for (int t = 0; t < nthreads; t++)
        jobs[t] = (KeyJob){x, c, ol, k, &ws[t], &next, 0};
    for (int t = 1; t < nthreads; t++, started++)
        if (pthread_create(&th[t], NULL, key_main, &jobs[t]) != 0)
            break;
    key_main(&jobs[0]);
    int fail = jobs[0].fail;
    for (int t = 1; t < started; t++) {
        pthread_join(th[t], NULL);
        fail |= jobs[t].fail;
    }
    return fail ? -1 : 0;
}

int cmp_orderkey(const void *pa, const void *pb)
{
    const OrderKey *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return a->oi - b->oi;
}
