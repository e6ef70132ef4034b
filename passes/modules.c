/* Repeated-module detection (HAPT §5.1); see modules.h for the rule.
 *
 * Algorithm, on the token sequence tok[0..n) (node signatures of the live
 * nodes in order) with heavy positions H[0..h):
 *   1. seeds: the windows [H[t], H[t+z-1]] (exactly z heavy ops), keyed by a
 *      polynomial rolling hash of their tokens (verified token by token);
 *      any subsequence with >= z heavy ops contains one, so the most
 *      frequent candidate's count is the best seed count c*;
 *   2. each distinct seed with c* non-overlapping occurrences p_1 < ... < p_c
 *      is extended right and left while every occurrence agrees on the next
 *      token, up to the smallest gap between occurrences (no overlap): the
 *      longest candidate of that seed has length l = min(left + right, gap);
 *      every shift of a window of length l inside the agreeing span is
 *      valid; the shift with the fewest live bytes at its cuts wins;
 *   3. the best candidate over seeds (longest, then fewest cut bytes, then
 *      earliest) is marked, its nodes leave the sequence, and the search
 *      repeats.
 * Cost: O(h log h) for the seed sort, O(seeds x c* x period) for the
 * extensions; a 96-block model (~10k nodes) takes milliseconds.
 */
#include "modules.h"

#include <stdlib.h>
#include <string.h>

#include "op_cost.h"

void module_options_default(ModuleOptions *o)
{
    o->min_heavy = 2;
    o->max_kinds = 8;
}

void module_report_free(ModuleReport *r)
{
    if (!r)
        return;
    free(r->mods);
    memset(r, 0, sizeof *r);
}

static uint64_t mix(uint64_t h, uint64_t x)
{
    h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 31);
}

static uint64_t shape_hash(uint64_t h, const IrValue *v)
{
    if (!v)
        return mix(h, 0xdeadULL);
    h = mix(h, (uint64_t)v->dtype);
    h = mix(h, (uint64_t)(v->kind == IR_VK_ACT || v->kind == IR_VK_INPUT ? 1 : v->kind + 10));
    h = mix(h, (uint64_t)v->shape.rank);
    for (int i = 0; i < v->shape.rank; i++)
        h = mix(h, (uint64_t)v->shape.dims[i]);
    return h;
}

uint64_t node_signature(const IrNode *n)
{
    uint64_t h = mix(0x6d6f64ULL, (uint64_t)n->op);
    h = mix(h, (uint64_t)n->nin * 131 + (uint64_t)n->nout);
    for (int a = 0; a < n->nattrs; a++) {
        const IrAttr *at = &n->attrs[a];
        h = mix(h, ir_fnv1a(at->name, strlen(at->name)));
        h = mix(h, (uint64_t)at->type);
        switch (at->type) {
        case IR_ATTR_INT:
            h = mix(h, (uint64_t)at->i);
            break;
        case IR_ATTR_FLOAT: {
            uint64_t b;
            memcpy(&b, &at->f, sizeof b);
            h = mix(h, b);
            break;
        }
        case IR_ATTR_STRING:
            h = mix(h, at->s ? ir_fnv1a(at->s, strlen(at->s)) : 0);
            break;
        case IR_ATTR_INTS:
            for (int i = 0; i < at->n; i++)
                h = mix(h, (uint64_t)at->ints[i]);
            break;
        case IR_ATTR_FLOATS:
            for (int i = 0; i < at->n; i++) {
                uint64_t b;
                memcpy(&b, &at->floats[i], sizeof b);
                h = mix(h, b);
            }
            break;
        }
    }
    for (int i = 0; i < n->nin; i++)
        h = shape_hash(h, n->in[i]);
    for (int i = 0; i < n->nout; i++)
        h = shape_hash(h, n->out[i]);
    return h;
}

int live_nodes(const IrGraph *g, int **pos)
{
    int *p = malloc(((size_t)g->nnodes + 1) * sizeof *p);
    if (!p)
        return -1;
    int n = 0;
    /* Forward nodes only: in a training graph the backward and update nodes
     * are not part of the op-signature sequence (layers.c costs the backward
     * from the op table; see the hook there). */
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->phase == IR_PHASE_FWD)
            p[n++] = i;
    *pos = p;
    return n;
}

static double value_bytes(const IrValue *v)
{
    if (!v->shape_known || !ir_shape_is_static(&v->shape))
        return 0;
    return (double)ir_shape_numel(&v->shape) * (double)ir_dtype_size(v->dtype);
}

double *cut_bytes(const IrGraph *g, const int *order, int n)
{
    int maxv = 0, maxn = 0;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i]->id > maxv)
            maxv = g->values[i]->id;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->id > maxn)
            maxn = g->nodes[i]->id;
    int *npos = malloc(((size_t)maxn + 1) * sizeof *npos);
    int *last = malloc(((size_t)maxv + 1) * sizeof *last);
    double *diff = calloc((size_t)n + 2, sizeof *diff);
    if (!npos || !last || !diff) {
        free(npos);
        free(last);
        free(diff);
        return NULL;
    }
    for (int i = 0; i <= maxn; i++)
        npos[i] = -1;
    for (int i = 0; i <= maxv; i++)
        last[i] = -1;
    for (int j = 0; j < n; j++) {
        const IrNode *nd = g->nodes[order[j]];
        npos[nd->id] = j;
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k])
                last[nd->in[k]->id] = j;
    }
    for (int i = 0; i < g->nvalues; i++) {
        const IrValue *v = g->values[i];
        int u = last[v->id];
        if (u < 0)
            continue;
        int p;
        if (v->kind == IR_VK_INPUT)
            p = -1;
        else if (v->producer && !v->producer->dead && v->kind != IR_VK_PARAM && v->kind != IR_VK_CONST)
            p = npos[v->producer->id];
        else
            continue;   /* parameters live on their stage, constants everywhere */
        if (p >= u)
            continue;
        /* live across the cuts before nodes p+1 .. u */
        double b = value_bytes(v);
        diff[p + 1] += b;
        diff[u + 1] -= b;
    }
    double *cut = malloc(((size_t)n + 1) * sizeof *cut);
    if (cut) {
        double run = 0;
        for (int j = 0; j <= n; j++) {
            run += diff[j];
            cut[j] = run;
        }
    }
    free(npos);
    free(last);
    free(diff);
    return cut;
}

/* ---------------------------------------------------------------- search */

typedef struct Seed {
    uint64_t h;
    int len, start;
} Seed;

static int cmp_seed(const void *a, const void *b)
{
    const Seed *x = a, *y = b;
    if (x->h != y->h)
        return x->h < y->h ? -1 : 1;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return (x->start > y->start) - (x->start < y->start);
}

typedef struct Cand {
    int count, len;
    double cost;
    int *starts;    /* count entries */
} Cand;

/* 1 if candidate a beats b: more occurrences, then longer, then fewer cut
 * bytes, then earlier. */
static int better(const Cand *a, const Cand *b)
{
    if (!b->starts)
        return 1;
    if (a->count != b->count)
        return a->count > b->count;
    if (a->len != b->len)
        return a->len > b->len;
    if (a->cost != b->cost)
        return a->cost < b->cost;
    return a->starts[0] < b->starts[0];
}

typedef struct Seq {
    int n;
    uint64_t *tok;
    unsigned char *heavy, *marked;
    double *cut;
} Seq;

/* Extend the seed occurrences occ[0..c) (length w) into the best window;
 * fills *out (starts malloc'd) or leaves it empty when nothing fits. */
static int extend_seed(const Seq *s, const int *occ, int c, int w, int z, Cand *out)
{
    int gap = s->n;
    for (int j = 0; j + 1 < c; j++)
        if (occ[j + 1] - occ[j] < gap)
            gap = occ[j + 1] - occ[j];
    if (gap < w)
        return 0;
    int R = w;
    while (R < gap) {
        int ok = 1;
        for (int j = 0; j < c && ok; j++) {
            int q = occ[j] + R;
            ok = q < s->n && !s->marked[q] && s->tok[q] == s->tok[occ[0] + R];
        }
        if (!ok)
            break;
        R++;
    }
    int Lx = 0;
    while (Lx < gap - w) {   /* a window holding the seed starts at most gap - w before it */
        int ok = 1, o = Lx + 1;
        for (int j = 0; j < c && ok; j++) {
            int q = occ[j] - o;
            ok = q >= 0 && !s->marked[q] && s->tok[q] == s->tok[occ[0] - o];
        }
        if (!ok)
            break;
        Lx++;
    }
    int len = Lx + R < gap ? Lx + R : gap;
    int amin = len - R > 0 ? len - R : 0, amax = Lx;
    double bestc = -1;
    int besta = -1;
    for (int a = amin; a <= amax; a++) {
        int st0 = occ[0] - a, hv = 0;
        for (int q = st0; q < st0 + len; q++)
            hv += s->heavy[q];
        if (hv < z)
            continue;
        double cost = 0;
        for (int j = 0; j < c; j++)
            cost += s->cut[occ[j] - a] + s->cut[occ[j] - a + len];
        /* ties: the earliest start (largest shift) */
        if (besta < 0 || cost <= bestc) {
            bestc = cost;
            besta = a;
        }
    }
    if (besta < 0)
        return 0;
    out->starts = malloc((size_t)c * sizeof *out->starts);
    if (!out->starts)
        return -1;
    out->count = c;
    out->len = len;
    out->cost = bestc;
    for (int j = 0; j < c; j++)
        out->starts[j] = occ[j] - besta;
    return 0;
}

/* One round: the best candidate on the unmarked nodes, or none (starts NULL). */
static int find_best(const Seq *s, int z, Cand *best)
{
    memset(best, 0, sizeof *best);
    int h = 0;
    int *H = malloc((size_t)s->n * sizeof *H + 1);
    uint64_t *P = malloc(((size_t)s->n + 1) * sizeof *P), *PW = malloc(((size_t)s->n + 1) * sizeof *PW);
    int *mk = malloc(((size_t)s->n + 1) * sizeof *mk);   /* prefix count of marked */
    Seed *seeds = malloc((size_t)s->n * sizeof *seeds + 1);
    int *occ = malloc((size_t)s->n * sizeof *occ + 1);
    int rc = -1;
    if (!H || !P || !PW || !mk || !seeds || !occ)
        goto done;
    const uint64_t BASE = 0x100000001b3ULL;
    P[0] = 0;
    PW[0] = 1;
    mk[0] = 0;
    for (int i = 0; i < s->n; i++) {
        P[i + 1] = P[i] * BASE + s->tok[i];
        PW[i + 1] = PW[i] * BASE;
        mk[i + 1] = mk[i] + s->marked[i];
        if (s->heavy[i] && !s->marked[i])
            H[h++] = i;
    }
    int ns = 0;
    for (int t = 0; t + z - 1 < h; t++) {
        int a = H[t], b = H[t + z - 1];
        if (mk[b + 1] - mk[a])
            continue;   /* crosses a module already found */
        seeds[ns].h = P[b + 1] - P[a] * PW[b + 1 - a];
        seeds[ns].len = b + 1 - a;
        seeds[ns].start = a;
        ns++;
    }
    qsort(seeds, (size_t)ns, sizeof *seeds, cmp_seed);
    /* group, verify, count non-overlapping occurrences */
    int cstar = 1;
    for (int pass = 0; pass < 2; pass++) {
        for (int g0 = 0; g0 < ns;) {
            int g1 = g0;
            while (g1 < ns && seeds[g1].h == seeds[g0].h && seeds[g1].len == seeds[g0].len)
                g1++;
            int w = seeds[g0].len, c = 0, end = -1;
            for (int q = g0; q < g1; q++) {
                int st = seeds[q].start;
                if (memcmp(&s->tok[st], &s->tok[seeds[g0].start], (size_t)w * sizeof(uint64_t)))
                    continue;   /* hash collision */
                if (st >= end) {
                    occ[c++] = st;
                    end = st + w;
                }
            }
            if (pass == 0 && c > cstar)
                cstar = c;
            if (pass == 1 && c == cstar && c >= 2) {
                Cand cd = {0};
                if (extend_seed(s, occ, c, w, z, &cd))
                    goto done;
                if (cd.starts && better(&cd, best)) {
                    free(best->starts);
                    *best = cd;
                } else {
                    free(cd.starts);
                }
            }
            g0 = g1;
        }
        if (cstar < 2)
            break;
    }
    rc = 0;
done:
    free(H);
    free(P);
    free(PW);
    free(mk);
    free(seeds);
    free(occ);
    return rc;
}

int modules_detect(IrGraph *g, const ModuleOptions *o, ModuleReport *rep, IrError *err)
{
    ModuleOptions dflt;
    if (!o) {
        module_options_default(&dflt);
        o = &dflt;
    }
    if (o->min_heavy < 1)
        return ir_errorf(err, "modules: z (heavy ops per module) must be >= 1, got %d", o->min_heavy);
    if (rep)
        memset(rep, 0, sizeof *rep);
    int *order = NULL;
    int n = live_nodes(g, &order);
    if (n < 0)
        return ir_errorf(err, "modules: out of memory");
    Seq s = {n, malloc(((size_t)n + 1) * sizeof(uint64_t)), calloc((size_t)n + 1, 1),
             calloc((size_t)n + 1, 1), cut_bytes(g, order, n)};
    int *mod_of = malloc(((size_t)n + 1) * sizeof *mod_of);
    ModuleInfo *mods = NULL;
    int nmods = 0, nkinds = 0, rc = -1;
    if (!s.tok || !s.heavy || !s.marked || !s.cut || !mod_of) {
        ir_errorf(err, "modules: out of memory");
        goto done;
    }
    for (int j = 0; j < n; j++) {
        const IrNode *nd = g->nodes[order[j]];
        s.tok[j] = node_signature(nd);
        s.heavy[j] = (unsigned char)op_is_heavy(nd->op);
        mod_of[j] = -1;
    }
    for (int round = 0; round < o->max_kinds; round++) {
        Cand c;
        if (find_best(&s, o->min_heavy, &c)) {
            ir_errorf(err, "modules: out of memory");
            goto done;
        }
        if (!c.starts)
            break;
        for (int j = 0; j < c.count; j++) {
            for (int q = c.starts[j]; q < c.starts[j] + c.len; q++) {
                s.marked[q] = 1;
                mod_of[q] = nmods + j;
            }
        }
        ModuleInfo *nm = realloc(mods, (size_t)(nmods + c.count) * sizeof *mods);
        if (!nm) {
            free(c.starts);
            ir_errorf(err, "modules: out of memory");
            goto done;
        }
        mods = nm;
        for (int j = 0; j < c.count; j++) {
            ModuleInfo *m = &mods[nmods + j];
            m->kind = nkinds;
            m->first_node = order[c.starts[j]];
            m->last_node = order[c.starts[j] + c.len - 1];
            m->nnodes = c.len;
            m->heavy = 0;
            for (int q = c.starts[j]; q < c.starts[j] + c.len; q++)
                m->heavy += s.heavy[q];
        }
        nmods += c.count;
        nkinds++;
        free(c.starts);
    }
    /* Number modules in graph order (later rounds may sit earlier). */
    for (int a = 1; a < nmods; a++)
        for (int b = a; b > 0 && mods[b].first_node < mods[b - 1].first_node; b--) {
            ModuleInfo t = mods[b];
            mods[b] = mods[b - 1];
            mods[b - 1] = t;
        }
    int outside = 0;
    for (int j = 0; j < n; j++) {
        IrNode *nd = g->nodes[order[j]];
        nd->module_id = -1;
        if (mod_of[j] < 0) {
            outside++;
            continue;
        }
        for (int k = 0; k < nmods; k++)
            if (order[j] >= mods[k].first_node && order[j] <= mods[k].last_node) {
                nd->module_id = k;
                break;
            }
    }
    if (rep) {
        rep->mods = mods;
        rep->nmodules = nmods;
        rep->nkinds = nkinds;
        rep->outside_nodes = outside;
        rep->live_nodes = n;
        mods = NULL;
    }
    rc = 0;
done:
    free(order);
    free(s.tok);
    free(s.heavy);
    free(s.marked);
    free(s.cut);
    free(mod_of);
    free(mods);
    return rc;
}

void module_report_print(FILE *f, const ModuleReport *r, const IrGraph *g)
{
    fprintf(f, "modules: %d found", r->nmodules);
    for (int k = 0; k < r->nkinds; k++) {
        int cnt = 0, first = -1;
        for (int m = 0; m < r->nmodules; m++)
            if (r->mods[m].kind == k) {
                if (first < 0)
                    first = m;
                cnt++;
            }
        if (first < 0)
            continue;
        fprintf(f, "%s %d x %d nodes (%d heavy ops) starting at node", k ? ";" : ":", cnt,
                r->mods[first].nnodes, r->mods[first].heavy);
        int shown = 0;
        for (int m = 0; m < r->nmodules; m++)
            if (r->mods[m].kind == k) {
                if (shown < 6)
                    fprintf(f, "%s %d", shown ? "," : "", r->mods[m].first_node);
                else if (shown == 6)
                    fprintf(f, ", ...");
                shown++;
            }
        const IrNode *fn = g->nodes[r->mods[first].first_node];
        fprintf(f, " (first op %s '%s')", ir_op_name(fn->op), fn->name);
    }
    fprintf(f, "; %d of %d nodes outside modules\n", r->outside_nodes, r->live_nodes);
}

int pass_modules(IrGraph *g, PassContext *ctx, IrError *err)
{
    ModuleReport rep;
    if (modules_detect(g, NULL, &rep, err))
        return -1;
    if (ctx && ctx->verbose)
        module_report_print(stderr, &rep, g);
    module_report_free(&rep);
    return 0;
}
