/* Fusion of elementwise nodes into generated kernels (fuse.h). */
#include "fuse.h"

#include <stdlib.h>
#include <string.h>

#include "hk.h"
#include "hk_train.h"

#define FUSE_MAX_NODES 64 /* per group: bounds the program and the checks */

/* How a node enters a kernel: one table entry per fusible op. */
typedef enum { FN_NO, FN_BIN, FN_UN, FN_UGRAD, FN_WHERE, FN_RBF16, FN_WIDEN } FnKind;

typedef struct NodeInfo {
    FnKind kind;
    int sub; /* FkOp for FN_BIN, HkUnOp for FN_UN, HkUnaryGrad for FN_UGRAD */
} NodeInfo;

static int unop_of(IrOp op) {
    switch (op) {
    case IR_OP_NEG: return HK_NEG;
    case IR_OP_ABS: return HK_ABS;
    case IR_OP_SQRT: return HK_SQRT;
    case IR_OP_RECIPROCAL: return HK_RECIP;
    case IR_OP_EXP: return HK_EXP;
    case IR_OP_LOG: return HK_LOG;
    case IR_OP_TANH: return HK_TANH;
    case IR_OP_SIGMOID: return HK_SIGMOID;
    case IR_OP_ERF: return HK_ERF;
    case IR_OP_RELU: return HK_RELU;
    case IR_OP_GELU: return HK_GELU;
    case IR_OP_SILU: return HK_SILU;
    default: return -1;
    }
}

static int is_f32(const IrValue *v) { return v && v->dtype == IR_F32 && v->shape_known; }

/* numpy broadcast strides (elements) of input shape s read over out shape o;
 * -1 if s does not broadcast to o */
static int bcast_strides(const IrShape *s, const IrShape *o, int64_t *st) {
    if (s->rank > o->rank) return -1;
    int64_t run = 1;
    for (int d = o->rank - 1; d >= 0; d--) {
        int a = d - (o->rank - s->rank);
        if (a < 0) {
            st[d] = 0;
            continue;
        }
        if (s->dims[a] == o->dims[d]) st[d] = o->dims[d] == 1 ? 0 : run;
        else if (s->dims[a] == 1) st[d] = 0;
        else return -1;
        run *= s->dims[a];
    }
    return 0;
}

static int is_bf16(const IrValue *v) { return v && v->dtype == IR_BF16 && v->shape_known; }

static NodeInfo classify(const IrNode *n) {
    NodeInfo no = {FN_NO, 0};
    /* bf16-mixed's Casts (passes/mixed_precision.c): f32 -> bf16 rounds in a
     * register, bf16 -> f32 widens (no instruction); a bf16 value is read
     * inside a group only by such a widening Cast, so the other ops never see
     * one, and a bf16 kernel input or output is loaded / stored as bf16 */
    /* (a stochastically rounded weight copy, `sr`, stays its own call: it
     * draws bits by element index and step, passes/stochastic_round.c) */
    if (n->op == IR_OP_CAST && !n->dead && n->nout == 1 && n->nin == 1 &&
        !ir_attr_int(n, "sr", 0) &&
        n->out[0]->shape.rank <= FK_MAX_RANK && n->in[0] &&
        ir_shape_equal(&n->in[0]->shape, &n->out[0]->shape)) {
        if (is_f32(n->in[0]) && is_bf16(n->out[0])) return (NodeInfo){FN_RBF16, 0};
        if (is_bf16(n->in[0]) && is_f32(n->out[0])) return (NodeInfo){FN_WIDEN, 0};
        return no;
    }
    if (n->dead || n->nout != 1 || !is_f32(n->out[0]) || n->out[0]->shape.rank > FK_MAX_RANK)
        return no;
    const IrValue *y = n->out[0];
    int64_t st[FK_MAX_RANK];
    switch (n->op) {
    case IR_OP_ADD: case IR_OP_SUB: case IR_OP_MUL: case IR_OP_DIV: case IR_OP_MAX:
    case IR_OP_MIN: {
        if (n->nin != 2 || !is_f32(n->in[0]) || !is_f32(n->in[1])) return no;
        for (int i = 0; i < 2; i++)
            if (bcast_strides(&n->in[i]->shape, &y->shape, st)) return no;
        static const FkOp bops[] = {[IR_OP_ADD] = FK_ADD, [IR_OP_SUB] = FK_SUB,
                                    [IR_OP_MUL] = FK_MUL, [IR_OP_DIV] = FK_DIV,
                                    [IR_OP_MAX] = FK_MAX, [IR_OP_MIN] = FK_MIN};
        return (NodeInfo){FN_BIN, bops[n->op]};
    }
    case IR_OP_WHERE:
        if (n->nin != 3 || !n->in[0] || n->in[0]->dtype != IR_BOOL || !n->in[0]->shape_known ||
            !is_f32(n->in[1]) || !is_f32(n->in[2]))
            return no;
        for (int i = 0; i < 3; i++)
            if (bcast_strides(&n->in[i]->shape, &y->shape, st)) return no;
        return (NodeInfo){FN_WHERE, 0};
    case IR_OP_UNARY_GRAD: {
        HkUnaryGrad fn;
        if (hk_unary_grad_from_name(ir_attr_string(n, "fn", ""), &fn)) return no;
        for (int i = 0; i < n->nin; i++)
            if (i < 2 || n->in[i])
                if (!is_f32(n->in[i]) || !ir_shape_equal(&n->in[i]->shape, &y->shape)) return no;
        return (NodeInfo){FN_UGRAD, (int)fn};
    }
    default: break;
    }
    int u = unop_of(n->op);
    if (u < 0 || n->nin != 1 || !is_f32(n->in[0]) || !ir_shape_equal(&n->in[0]->shape, &y->shape))
        return no;
    if (n->op == IR_OP_GELU) {
        const char *ap = ir_attr_string(n, "approximate", "none");
        if (!strcmp(ap, "tanh")) u = HK_GELU_TANH;
        else if (strcmp(ap, "none")) return no;
    }
    return (NodeInfo){FN_UN, u};
}

/* a scalar f32 constant: an immediate, not an input */
static int const_scalar(const IrValue *v, float *out) {
    if (!v || v->kind != IR_VK_CONST || v->dtype != IR_F32 || ir_shape_numel(&v->shape) != 1)
        return 0;
    IrError err;
    const void *d = ir_value_data((IrValue *)v, &err);
    if (!d) return 0;
    memcpy(out, d, sizeof *out);
    return 1;
}

typedef struct Ctx {
    const IrGraph *g;
    const int *pos;
    int *rd_start, *rd; /* readers of value id: rd[rd_start[id] .. rd_start[id+1]) */
    int *mark, stamp;   /* mark[node] == stamp: in the candidate set */
    int *prod;          /* [value id]: producer's node index, or -1 */
} Ctx;

static int P(const Ctx *c, int i) { return c->pos ? c->pos[i] : i; }

/* external inputs / outputs of the set {nodes} (marked with c->stamp);
 * -1 if over the argument limits */
static int count_io(Ctx *c, const int *nodes, int nn, IrValue **ins, int *nins, IrValue **outs,
                    int *nouts) {
    int ni = 0, no = 0;
    for (int k = 0; k < nn; k++) {
        const IrNode *n = c->g->nodes[nodes[k]];
        for (int i = 0; i < n->nin; i++) {
            IrValue *v = n->in[i];
            float f;
            if (!v || const_scalar(v, &f)) continue;
            int p = c->prod[v->id];
            if (p >= 0 && c->mark[p] == c->stamp) continue;
            int dup = 0;
            for (int j = 0; j < ni && !dup; j++) dup = ins[j] == v;
            if (dup) continue;
            if (ni == FK_MAX_IN) return -1;
            ins[ni++] = v;
        }
        IrValue *y = n->out[0];
        int ext = y->is_graph_output;
        for (int r = c->rd_start[y->id]; r < c->rd_start[y->id + 1] && !ext; r++)
            ext = c->mark[c->rd[r]] != c->stamp;
        if (ext) {
            if (no == FK_MAX_OUT) return -1;
            outs[no++] = y;
        }
    }
    if (ni + no > FK_MAX_ARGS) return -1;
    *nins = ni, *nouts = no;
    return 0;
}

/* Is the candidate set (marked, last member `last`) a valid group? */
static int valid_set(Ctx *c, const int *nodes, int nn, int last) {
    for (int k = 0; k < nn; k++) {
        const IrValue *y = c->g->nodes[nodes[k]]->out[0];
        for (int r = c->rd_start[y->id]; r < c->rd_start[y->id + 1]; r++) {
            int x = c->rd[r];
            if (c->mark[x] != c->stamp && P(c, x) <= P(c, last)) return 0;
        }
    }
    IrValue *ins[FK_MAX_IN], *outs[FK_MAX_OUT];
    int ni, no;
    return count_io(c, nodes, nn, ins, &ni, outs, &no) == 0;
}

static void build_kernel(Ctx *c, FuseGroup *gr, const NodeInfo *info, const char *prefix, int gi) {
    FkKernel *k = &gr->k;
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s_%d", prefix, gi);
    const IrShape *os = &c->g->nodes[gr->last]->out[0]->shape;
    k->rank = os->rank;
    for (int d = 0; d < os->rank; d++) k->dims[d] = os->dims[d];
    k->nin = gr->nins;
    for (int i = 0; i < gr->nins; i++) {
        k->in[i].is_bool = gr->ins[i]->dtype == IR_BOOL;
        k->in[i].is_bf16 = gr->ins[i]->dtype == IR_BF16;
        bcast_strides(&gr->ins[i]->shape, os, k->in[i].strides);
    }
    int *reg = calloc((size_t)c->g->nvalues + 1, sizeof *reg); /* value id -> register + 1 */
    for (int m = 0; m < gr->nnodes; m++) {
        const IrNode *n = c->g->nodes[gr->nodes[m]];
        int a[3] = {-1, -1, -1};
        for (int i = 0; i < n->nin && i < 3; i++) {
            const IrValue *v = n->in[i];
            float f;
            if (!v) continue;
            if (reg[v->id]) {
                a[i] = reg[v->id] - 1;
                continue;
            }
            if (const_scalar(v, &f)) {
                a[i] = fk_push(k, FK_CONST, 0, -1, -1, -1, f);
            } else {
                int j = 0;
                while (j < gr->nins && gr->ins[j] != v) j++;
                a[i] = fk_push(k, FK_LOAD, 0, j, -1, -1, 0);
            }
            reg[v->id] = a[i] + 1;
        }
        const NodeInfo *ni = &info[gr->nodes[m]];
        int r;
        switch (ni->kind) {
        case FN_BIN: r = fk_push(k, (FkOp)ni->sub, 0, a[0], a[1], -1, 0); break;
        case FN_UN: r = fk_push(k, FK_UNARY, ni->sub, a[0], -1, -1, 0); break;
        case FN_UGRAD: r = fk_push(k, FK_UGRAD, ni->sub, a[0], a[1], a[2], 0); break;
        case FN_RBF16: r = fk_push(k, FK_RBF16, 0, a[0], -1, -1, 0); break;
        case FN_WIDEN: r = a[0]; break; /* exact: the bf16 register already holds the f32 */
        default: r = fk_push(k, FK_WHERE, 0, a[0], a[1], a[2], 0); break;
        }
        reg[n->out[0]->id] = r + 1;
    }
    k->nout = gr->nouts;
    for (int o = 0; o < gr->nouts; o++) {
        k->out[o] = reg[gr->outs[o]->id] - 1;
        k->out_bf16[o] = gr->outs[o]->dtype == IR_BF16;
    }
    free(reg);
    fk_collapse(k);
}

/* insertion sort by execution position (a group has at most FUSE_MAX_NODES) */
static void sort_by_pos(const Ctx *c, int *a, int n) {
    for (int i = 1; i < n; i++) {
        int x = a[i], j = i;
        while (j > 0 && P(c, a[j - 1]) > P(c, x)) a[j] = a[j - 1], j--;
        a[j] = x;
    }
}

int fuse_graph(const IrGraph *g, const int *pos, const char *prefix, FuseGraph *fg,
               IrError *err) {
    (void)err;
    memset(fg, 0, sizeof *fg);
    int nn = g->nnodes, nv = g->nvalues;
    fg->nnodes_graph = nn, fg->nvalues_graph = nv;
    fg->group_of = malloc(sizeof *fg->group_of * (size_t)(nn + 1));
    fg->internal = calloc((size_t)nv + 1, 1);
    for (int i = 0; i < nn; i++) fg->group_of[i] = -1;
    Ctx c = {g, pos, NULL, NULL, NULL, 0, NULL};
    c.prod = malloc(sizeof *c.prod * (size_t)(nv + 1));
    for (int v = 0; v < nv; v++) c.prod[v] = -1;
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i]->nout; k++)
            if (g->nodes[i]->out[k]) c.prod[g->nodes[i]->out[k]->id] = i;
    c.rd_start = calloc((size_t)nv + 2, sizeof *c.rd_start);
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i]->nin; k++)
            if (g->nodes[i]->in[k]) c.rd_start[g->nodes[i]->in[k]->id + 1]++;
    for (int v = 0; v < nv; v++) c.rd_start[v + 1] += c.rd_start[v];
    int *fill = calloc((size_t)nv + 1, sizeof *fill);
    c.rd = calloc((size_t)c.rd_start[nv] + 1, sizeof *c.rd);
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i]->nin; k++) {
            const IrValue *v = g->nodes[i]->in[k];
            if (!v) continue;
            int dup = 0; /* a node reading a value twice is one reader */
            for (int j = c.rd_start[v->id]; j < c.rd_start[v->id] + fill[v->id] && !dup; j++)
                dup = c.rd[j] == i;
            if (!dup) c.rd[c.rd_start[v->id] + fill[v->id]++] = i;
        }
    /* compact: readers of v are rd[rd_start[v] .. rd_start[v] + fill[v]) */
    {
        int w = 0;
        for (int v = 0; v < nv; v++) {
            int s = c.rd_start[v];
            c.rd_start[v] = w;
            for (int j = 0; j < fill[v]; j++) c.rd[w++] = c.rd[s + j];
        }
        c.rd_start[nv] = w;
    }
    free(fill);
    c.mark = calloc((size_t)nn + 1, sizeof *c.mark);

    NodeInfo *info = calloc((size_t)nn + 1, sizeof *info);
    for (int i = 0; i < nn; i++) info[i] = classify(g->nodes[i]);
    /* pos is a permutation of the node indices (the execution order) */
    int *order = malloc(sizeof *order * (size_t)(nn + 1));
    for (int i = 0; i < nn; i++) order[P(&c, i)] = i;

    /* groups under construction: member lists (execution order) */
    int ng = 0, capg = 16;
    int **mem = malloc(sizeof *mem * (size_t)capg), *nmem = malloc(sizeof *nmem * (size_t)capg);
    int *grp = fg->group_of;
    int cand[FUSE_MAX_NODES + 1];
    for (int oi = 0; oi < nn; oi++) {
        int n = order[oi];
        if (info[n].kind == FN_NO) continue;
        const IrNode *nd = g->nodes[n];
        /* the groups of n's fusible producers: same phase, same output shape */
        int src[8], ns = 0;
        for (int k = 0; k < nd->nin && ns < 8; k++) {
            const IrValue *v = nd->in[k];
            int p = v ? c.prod[v->id] : -1;
            if (p < 0 || grp[p] < 0) continue;
            const IrNode *pn = g->nodes[p];
            if (pn->phase != nd->phase || !ir_shape_equal(&pn->out[0]->shape, &nd->out[0]->shape))
                continue;
            int dup = 0;
            for (int j = 0; j < ns && !dup; j++) dup = src[j] == grp[p];
            if (!dup) src[ns++] = grp[p];
        }
        int joined = -1;
        /* try all source groups together, then each alone */
        for (int attempt = 0; attempt <= ns && joined < 0; attempt++) {
            int lo = attempt == 0 ? 0 : attempt - 1, hi = attempt == 0 ? ns : attempt;
            if (attempt == 1 && ns == 1) break; /* same as attempt 0 */
            int cn = 0, ok = 1;
            c.stamp++;
            for (int s = lo; s < hi && ok; s++) {
                if (cn + nmem[src[s]] + 1 > FUSE_MAX_NODES) ok = 0;
                for (int j = 0; j < nmem[src[s]] && ok; j++) cand[cn++] = mem[src[s]][j];
            }
            if (!ok || cn == 0) continue;
            cand[cn++] = n;
            for (int j = 0; j < cn; j++) c.mark[cand[j]] = c.stamp;
            if (!valid_set(&c, cand, cn, n)) continue;
            /* merge into the first source group (members in execution order) */
            int gid = src[lo];
            sort_by_pos(&c, cand, cn);
            mem[gid] = realloc(mem[gid], sizeof **mem * (size_t)cn);
            memcpy(mem[gid], cand, sizeof *cand * (size_t)cn);
            nmem[gid] = cn;
            for (int s = lo + 1; s < hi; s++) nmem[src[s]] = 0;
            for (int j = 0; j < cn; j++) grp[cand[j]] = gid;
            joined = gid;
        }
        if (joined >= 0) continue;
        if (ng == capg) {
            capg *= 2;
            mem = realloc(mem, sizeof *mem * (size_t)capg);
            nmem = realloc(nmem, sizeof *nmem * (size_t)capg);
        }
        mem[ng] = malloc(sizeof **mem);
        mem[ng][0] = n;
        nmem[ng] = 1;
        grp[n] = ng++;
    }

    /* siblings: two groups (or single nodes) reading a common input, one
     * pass over the shared data (SwiGLU's backward: dy * SiLU(gate) and
     * dy * up); after the producer-consumer grouping, which it must not
     * pre-empt */
    for (int ga = 0; ga < ng; ga++) {
        int merged = 1;
        while (merged && nmem[ga]) {
            merged = 0;
            for (int m = 0; m < nmem[ga] && !merged; m++) {
                const IrNode *an = g->nodes[mem[ga][m]];
                for (int k = 0; k < an->nin && !merged; k++) {
                    const IrValue *v = an->in[k];
                    float f;
                    if (!v || const_scalar(v, &f)) continue;
                    for (int r = c.rd_start[v->id]; r < c.rd_start[v->id + 1] && !merged; r++) {
                        int gb = grp[c.rd[r]];
                        if (gb < 0 || gb == ga || !nmem[gb] || nmem[ga] + nmem[gb] > FUSE_MAX_NODES)
                            continue;
                        const IrNode *bn = g->nodes[c.rd[r]];
                        if (bn->phase != an->phase ||
                            !ir_shape_equal(&bn->out[0]->shape, &an->out[0]->shape))
                            continue;
                        int cn = 0;
                        c.stamp++;
                        for (int j = 0; j < nmem[ga]; j++) cand[cn++] = mem[ga][j];
                        for (int j = 0; j < nmem[gb]; j++) cand[cn++] = mem[gb][j];
                        for (int j = 0; j < cn; j++) c.mark[cand[j]] = c.stamp;
                        sort_by_pos(&c, cand, cn);
                        if (!valid_set(&c, cand, cn, cand[cn - 1])) continue;
                        mem[ga] = realloc(mem[ga], sizeof **mem * (size_t)cn);
                        memcpy(mem[ga], cand, sizeof *cand * (size_t)cn);
                        nmem[ga] = cn, nmem[gb] = 0;
                        for (int j = 0; j < cn; j++) grp[cand[j]] = ga;
                        merged = 1;
                    }
                }
            }
        }
    }

    /* groups of two or more nodes become kernels */
    for (int i = 0; i < nn; i++) grp[i] = -1;
    fg->groups = calloc((size_t)ng + 1, sizeof *fg->groups);
    for (int gi = 0; gi < ng; gi++) {
        if (nmem[gi] < 2) continue;
        FuseGroup *gr = &fg->groups[fg->ngroups];
        gr->nnodes = nmem[gi];
        gr->nodes = mem[gi];
        mem[gi] = NULL;
        gr->last = gr->nodes[gr->nnodes - 1];
        c.stamp++;
        for (int j = 0; j < gr->nnodes; j++) c.mark[gr->nodes[j]] = c.stamp;
        count_io(&c, gr->nodes, gr->nnodes, gr->ins, &gr->nins, gr->outs, &gr->nouts);
        if (gr->nouts == 0) { /* nothing reads it: left to the per-node calls */
            mem[gi] = gr->nodes;
            memset(gr, 0, sizeof *gr);
            continue;
        }
        for (int j = 0; j < gr->nnodes; j++) {
            grp[gr->nodes[j]] = fg->ngroups;
            const IrValue *y = g->nodes[gr->nodes[j]]->out[0];
            int is_out = 0;
            for (int o = 0; o < gr->nouts; o++) is_out |= gr->outs[o] == y;
            if (!is_out) fg->internal[y->id] = 1;
        }
        build_kernel(&c, gr, info, prefix, fg->ngroups);
        fg->nfused += gr->nnodes;
        fg->ngroups++;
    }
    for (int gi = 0; gi < ng; gi++) free(mem[gi]);
    free(mem), free(nmem), free(info), free(order);
    free(c.rd_start), free(c.rd), free(c.mark), free(c.prod);
    return 0;
}

void fuse_free(FuseGraph *fg) {
    if (!fg) return;
    for (int i = 0; i < fg->ngroups; i++) {
        free(fg->groups[i].nodes);
        fk_free(&fg->groups[i].k);
    }
    free(fg->groups);
    free(fg->group_of);
    free(fg->internal);
    memset(fg, 0, sizeof *fg);
}

void fuse_keep(const IrGraph *g, FuseGraph *fg, int (*keep)(const FkKernel *k)) {
    int w = 0;
    for (int i = 0; i < fg->ngroups; i++) {
        FuseGroup *gr = &fg->groups[i];
        if (keep(&gr->k)) {
            if (w != i) {
                fg->groups[w] = *gr;
                for (int j = 0; j < gr->nnodes; j++) fg->group_of[gr->nodes[j]] = w;
            }
            w++;
            continue;
        }
        /* back to one call per node: every member's output gets a buffer */
        for (int j = 0; j < gr->nnodes; j++) {
            fg->group_of[gr->nodes[j]] = -1;
            fg->internal[g->nodes[gr->nodes[j]]->out[0]->id] = 0;
        }
        fg->nfused -= gr->nnodes;
        free(gr->nodes);
        fk_free(&gr->k);
    }
    for (int i = w; i < fg->ngroups; i++) memset(&fg->groups[i], 0, sizeof fg->groups[i]);
    fg->ngroups = w;
}

const FuseGroup *fuse_group_at(const FuseGraph *fg, int node) {
    if (!fg || node < 0 || node >= fg->nnodes_graph || fg->group_of[node] < 0) return NULL;
    const FuseGroup *gr = &fg->groups[fg->group_of[node]];
    return gr->last == node ? gr : NULL;
}

int fuse_skipped(const FuseGraph *fg, int node) {
    if (!fg || node < 0 || node >= fg->nnodes_graph || fg->group_of[node] < 0) return 0;
    return fg->groups[fg->group_of[node]].last != node;
}

int fuse_internal(const FuseGraph *fg, const IrValue *v) {
    return fg && v && v->id >= 0 && v->id < fg->nvalues_graph && fg->internal[v->id];
}
