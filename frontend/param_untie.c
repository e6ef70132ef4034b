/* Exporter dedups untied, --trainable / --frozen, and the parameter-set
 * report.
 *
 * torch's exporters merge initializers with bit-identical values.  In a
 * freshly initialised model every LayerNorm weight (ones) and every zero
 * bias are equal, so the export holds one tensor read by the norms of all
 * blocks (dynamo: the nodes read it directly; TorchScript: through one
 * Identity per extra reader, whose output carries torch's parameter name).
 * Trained as one parameter it gets the sum of its readers' gradients, and
 * the gradient norm and the trajectory differ from torch's.
 *
 * Rule: a float parameter (after param_kinds.c) read by several nodes is an
 * exporter dedup, and every reader but one gets its own copy:
 *  - a reader that is an Identity: its output becomes the parameter (named
 *    as the exporter named it, torch's name under TorchScript) and the
 *    Identity goes;
 *  - any other reader gets a new parameter "<initializer>@<node name>", the
 *    node reading it in place of the shared one (train_export.c writes it
 *    back as an initializer of that name read by that node).
 * The first reader in node order that is not an Identity keeps the
 * original.  The exception is a genuine tie, which torch trains as one
 * parameter: a 2-D tensor read by exactly two nodes, one of them a Gather
 * with it as the table (embedding) and the other a MatMul, Gemm or
 * Transpose (the head).  The exporters in tests/hf write tied heads as a
 * separate transposed initializer instead (passes/tie_weights.c re-ties
 * those).  Values that are computed from a parameter and then read by
 * several blocks are tables (param_kinds.c), not dedups.  hetc assumes one
 * reader per torch parameter per forward, true of the HF decoder LMs;
 * --frozen / --trainable cannot re-share a tensor.
 */
#include "onnx_internal.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

static int is_tie(const IrGraph *g, const IrValue *w, IrNode *const *rd, int n) {
    (void)g;
    if (n != 2 || w->shape.rank != 2) return 0;
    for (int a = 0; a < 2; a++) {
        const IrNode *t = rd[a], *h = rd[1 - a];
        if (t->op == IR_OP_GATHER && t->in[0] == w && t->in[1] != w &&
            (h->op == IR_OP_MATMUL || h->op == IR_OP_GEMM || h->op == IR_OP_TRANSPOSE))
            return 1;
    }
    return 0;
}

static int copy_data(IrValue *dst, IrValue *w, IrError *err) {
    const void *d = ir_value_data(w, err);
    if (!d) return ir_error_prefix(err, "untying initializer '%s'", w->name);
    size_t nb = ir_value_bytes(w);
    void *c = malloc(nb ? nb : 1);
    if (!c) return ir_errorf(err, "out of memory untying initializer '%s'", w->name);
    memcpy(c, d, nb);
    dst->dtype = w->dtype;
    dst->shape = w->shape;
    dst->shape_known = 1;
    dst->kind = IR_VK_PARAM;
    ir_value_set_data(dst, c, nb);
    return 0;
}

int imp_untie_dedups(IrGraph *g, int *nuntied, IrError *err) {
    *nuntied = 0;
    ImpUses u;
    if (imp_uses_build(g, &u)) return ir_errorf(err, "out of memory");
    int nv = g->nvalues, rc = 0, dead = 0;
    IrNode **rd = malloc(((size_t)g->nnodes + 1) * sizeof *rd);
    if (!rd) rc = ir_errorf(err, "out of memory");
    for (int i = 0; !rc && i < nv; i++) {
        IrValue *w = g->values[i];
        if (w->kind != IR_VK_PARAM || !ir_dtype_is_float(w->dtype)) continue;
        int n = 0;
        for (int k = u.start[i]; k < u.start[i + 1]; k++) {
            IrNode *r = g->nodes[u.refs[k] / 32];
            if (!n || rd[n - 1] != r) rd[n++] = r; /* a node reading w twice is one reader */
        }
        if (n < 2 || is_tie(g, w, rd, n)) continue;
        int keep = 0;
        while (keep < n && rd[keep]->op == IR_OP_IDENTITY) keep++;
        if (keep == n) keep = 0;
        for (int j = 0; !rc && j < n; j++) {
            IrNode *r = rd[j];
            if (j == keep) continue;
            if (r->op == IR_OP_IDENTITY && r->out[0] && !r->out[0]->is_graph_output) {
                IrValue *o = r->out[0];
                if ((rc = copy_data(o, w, err))) break;
                o->producer = NULL;
                r->dead = 1;
                dead = 1;
            } else {
                char name[1024];
                snprintf(name, sizeof name, "%s@%s", w->name, r->name);
                IrValue *c = ir_value_new(g, name, w->dtype, &w->shape, IR_VK_PARAM);
                if ((rc = copy_data(c, w, err))) break;
                for (int s = 0; s < r->nin; s++)
                    if (r->in[s] == w) r->in[s] = c;
            }
            ++*nuntied;
        }
    }
    free(rd);
    imp_uses_free(&u);
    if (!rc && dead) ir_graph_compact(g);
    return rc;
}

/* ------------------------------------------------------------ overrides */

static int is_initializer(const Onnx__GraphProto *gp, const char *name) {
    for (size_t i = 0; i < gp->n_initializer; i++)
        if (gp->initializer[i]->name && !strcmp(gp->initializer[i]->name, name)) return 1;
    return 0;
}

static int apply_globs(IrGraph *g, const Onnx__GraphProto *gp, const char *const *pat, int npat,
                       int to_param, const char *opt, const char *file, int *changed,
                       IrError *err) {
    for (int p = 0; p < npat; p++) {
        int hits = 0;
        for (int i = 0; i < g->nvalues; i++) {
            IrValue *v = g->values[i];
            if (fnmatch(pat[p], v->name, 0)) continue;
            if (to_param && v->kind == IR_VK_CONST && ir_dtype_is_float(v->dtype) &&
                v->shape.rank >= 1 && is_initializer(gp, v->name)) {
                v->kind = IR_VK_PARAM;
                hits++, ++*changed;
            } else if (v->kind == IR_VK_PARAM) {
                if (!to_param) v->kind = IR_VK_CONST, ++*changed;
                hits++;
            }
        }
        if (!hits)
            return ir_errorf(err, "%s: %s '%s' matches no float initializer of rank >= 1", file,
                             opt, pat[p]);
    }
    return 0;
}

int imp_param_overrides(IrGraph *g, const Onnx__GraphProto *gp, const HetcImportOptions *o,
                        const char *file, int *ntrainable, int *nfrozen, IrError *err) {
    *ntrainable = *nfrozen = 0;
    if (apply_globs(g, gp, o->trainable, o->ntrainable, 1, "--trainable", file, ntrainable, err))
        return -1;
    return apply_globs(g, gp, o->frozen, o->nfrozen, 0, "--frozen", file, nfrozen, err);
}

/* --------------------------------------------------------------- report */

void imp_param_report(const IrGraph *g, const Onnx__GraphProto *gp, int nuntied,
                      HetcParamSet *out) {
    memset(out, 0, sizeof *out);
    out->nuntied = nuntied;
    for (int i = 0; i < g->nvalues; i++) {
        const IrValue *v = g->values[i];
        if (v->kind != IR_VK_PARAM) continue;
        out->ntrainable++;
        out->trainable_elems += ir_shape_numel(&v->shape);
        out->trainable_bytes += (int64_t)ir_value_bytes(v);
    }
    out->buffer_names = calloc(gp->n_initializer + 1, sizeof *out->buffer_names);
    for (size_t i = 0; out->buffer_names && i < gp->n_initializer; i++) {
        const char *nm = gp->initializer[i]->name;
        const IrValue *v = nm ? ir_graph_find_value(g, nm) : NULL;
        if (!v || v->kind != IR_VK_CONST || !ir_dtype_is_float(v->dtype) || v->shape.rank < 1)
            continue;
        out->buffer_names[out->nbuffers++] = ir_strdup(nm);
        out->buffer_bytes += (int64_t)ir_value_bytes(v);
    }
}

void hetc_param_set_free(HetcParamSet *p) {
    if (!p) return;
    for (int i = 0; p->buffer_names && i < p->nbuffers; i++) free(p->buffer_names[i]);
    free(p->buffer_names);
    memset(p, 0, sizeof *p);
}

static void human(char *b, size_t n, int64_t bytes) {
    if (bytes < 1024) snprintf(b, n, "%lld B", (long long)bytes);
    else if (bytes < 1024 * 1024) snprintf(b, n, "%.1f KiB", bytes / 1024.0);
    else if (bytes < 1024LL * 1024 * 1024) snprintf(b, n, "%.1f MiB", bytes / 1048576.0);
    else snprintf(b, n, "%.2f GiB", bytes / 1073741824.0);
}

void hetc_param_set_print(FILE *f, const char *what, const HetcParamSet *p) {
    char tb[32], bb[32];
    human(tb, sizeof tb, p->trainable_bytes);
    human(bb, sizeof bb, p->buffer_bytes);
    fprintf(f, "%s: %d trainable (%lld elements, %s), %d buffer%s kept constant (%s", what,
            p->ntrainable, (long long)p->trainable_elems, tb, p->nbuffers,
            p->nbuffers == 1 ? "" : "s", bb);
    if (p->nbuffers && p->nbuffers <= 4) {
        for (int i = 0; i < p->nbuffers; i++)
            fprintf(f, "%s%s", i ? ", " : ": ", p->buffer_names[i]);
    }
    fprintf(f, "), %d untied cop%s", p->nuntied, p->nuntied == 1 ? "y" : "ies");
    if (p->nforced_trainable || p->nforced_frozen)
        fprintf(f, ", --trainable %d / --frozen %d", p->nforced_trainable, p->nforced_frozen);
    fputc('\n', f);
}
