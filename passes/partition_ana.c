/* Whole-graph analysis for partition (partition_ana.h): layers and stages
 * of nodes, data dependence, which nodes each stage computes, boundary
 * activations with plan-wide transfer ids, parameters per stage. */
#include "partition_ana.h"

#include <stdlib.h>
#include <string.h>

#include "autodiff.h"

int part_vi(const PartAna *A, const IrValue *v) {
    int i = -1;
    irpm_get(&A->vix, v, &i);
    return i;
}

void part_ana_free(PartAna *A) {
    irpm_free(&A->vix);
    free(A->nodes);
    free(A->layer);
    free(A->stage);
    free(A->dep);
    free(A->needs);
    free(A->reach);
    free(A->incl);
    free(A->cons);
    free(A->ngrad_readers);
    free(A->gx);
    memset(A, 0, sizeof *A);
}

static int check_spec(const PartSpec *sp, IrError *err) {
    if (sp->nstages < 1 || !sp->first_layer || !sp->last_layer || !sp->dp)
        return ir_errorf(err, "the plan has no stages");
    if (sp->rows < 1) return ir_errorf(err, "microbatch rows %lld < 1", (long long)sp->rows);
    for (int s = 0; s < sp->nstages; s++) {
        if (sp->first_layer[s] < 1 || sp->last_layer[s] < sp->first_layer[s])
            return ir_errorf(err, "stage %d: layers [%d, %d] are not a range of 1-based layers",
                             s, sp->first_layer[s], sp->last_layer[s]);
        if (s && sp->first_layer[s] != sp->last_layer[s - 1] + 1)
            return ir_errorf(err, "stage %d starts at layer %d, not after stage %d's last (%d)",
                             s, sp->first_layer[s], s - 1, sp->last_layer[s - 1]);
        /* dp need not divide the rows (uneven DP: PartSpec.dp_rank), but
         * every DP rank needs one */
        if (sp->dp[s] < 1 || sp->rows < sp->dp[s])
            return ir_errorf(err, "stage %d: dp %d exceeds the %lld microbatch rows (a DP rank "
                             "would hold none)", s, sp->dp[s], (long long)sp->rows);
    }
    return 0;
}

/* diff-slot test of autodiff: input j can carry a gradient through n */
static int diff_slot(const IrNode *n, int j) {
    const GradRule *r = grad_rule(n->op);
    return !r || j >= 32 || ((r->diff >> j) & 1);
}

/* Layer of each node: its own id, else the smallest layer among its
 * consumers (it runs where first needed), else the largest among its
 * producers (a sink such as the loss follows its input), else the last. */
static void resolve_layers(PartAna *A, const int *ustart, const int *uses, const int *prod) {
    int nn = A->nn;
    for (int i = 0; i < nn; i++) A->layer[i] = A->nodes[i]->layer_id >= 1 ? A->nodes[i]->layer_id : -1;
    for (int i = nn - 1; i >= 0; i--) {
        if (A->layer[i] >= 1) continue;
        const IrNode *n = A->nodes[i];
        int best = -1;
        for (int j = 0; j < n->nout; j++) {
            int vi = n->out[j] ? part_vi(A, n->out[j]) : -1;
            if (vi < 0) continue;
            for (int u = ustart[vi]; u < ustart[vi + 1]; u++) {
                int l = A->layer[uses[u]];
                if (l >= 1 && (best < 0 || l < best)) best = l;
            }
        }
        A->layer[i] = best;
    }
    for (int i = 0; i < nn; i++) {
        if (A->layer[i] >= 1) continue;
        const IrNode *n = A->nodes[i];
        int best = -1;
        for (int j = 0; j < n->nin; j++) {
            int vi = n->in[j] ? part_vi(A, n->in[j]) : -1;
            if (vi >= 0 && prod[vi] >= 0 && A->layer[prod[vi]] > best) best = A->layer[prod[vi]];
        }
        A->layer[i] = best >= 1 ? best : A->sp->last_layer[A->sp->nstages - 1];
    }
}

static int node_dep(const PartAna *A, const IrNode *n) {
    for (int j = 0; j < n->nin; j++)
        if (n->in[j] && A->dep[part_vi(A, n->in[j])]) return 1;
    return 0;
}

int part_analyse(const IrGraph *g, const PartSpec *sp, PartAna *A, IrError *err) {
    memset(A, 0, sizeof *A);
    A->g = g, A->sp = sp;
    if (check_spec(sp, err)) return -1;
    int ns = sp->nstages, nv = A->nv = g->nvalues, rc = -1;
    irpm_init(&A->vix, (size_t)nv);
    for (int i = 0; i < nv; i++) irpm_put(&A->vix, g->values[i], i);
    A->nodes = ir_xcalloc((size_t)g->nnodes + 1, sizeof *A->nodes);
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead) A->nodes[A->nn++] = g->nodes[i];
    int nn = A->nn;
    int *prod = ir_xmalloc(((size_t)nv + 1) * sizeof *prod);
    int *ustart = ir_xcalloc((size_t)nv + 2, sizeof *ustart), *uses = NULL;
    for (int i = 0; i < nv; i++) prod[i] = -1;
    for (int i = 0; i < nn; i++) {
        const IrNode *n = A->nodes[i];
        for (int j = 0; j < n->nout; j++)
            if (n->out[j]) prod[part_vi(A, n->out[j])] = i;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j]) ustart[part_vi(A, n->in[j]) + 1]++;
    }
    for (int i = 0; i < nv; i++) ustart[i + 1] += ustart[i];
    uses = ir_xcalloc((size_t)ustart[nv] + 1, sizeof *uses);
    {
        int *fill = ir_xcalloc((size_t)nv + 1, sizeof *fill);
        for (int i = 0; i < nn; i++)
            for (int j = 0; j < A->nodes[i]->nin; j++)
                if (A->nodes[i]->in[j]) {
                    int vi = part_vi(A, A->nodes[i]->in[j]);
                    uses[ustart[vi] + fill[vi]++] = i;
                }
        free(fill);
    }
    for (int i = 0; i < g->noutputs; i++)
        if (!strcmp(g->outputs[i]->name, "loss")) A->loss = g->outputs[i];
    if (!A->loss || prod[part_vi(A, A->loss)] < 0) {
        ir_errorf(err, "graph '%s' has no computed output 'loss' (run the loss pass first)",
                  g->name);
        goto done;
    }
    A->loss_node = prod[part_vi(A, A->loss)];

    /* layers and stages */
    A->layer = ir_xcalloc((size_t)nn + 1, sizeof *A->layer);
    A->stage = ir_xcalloc((size_t)nn + 1, sizeof *A->stage);
    resolve_layers(A, ustart, uses, prod);
    for (int i = 0; i < nn; i++) {
        int l = A->layer[i], s = 0;
        while (s < ns && !(l >= sp->first_layer[s] && l <= sp->last_layer[s])) s++;
        if (s == ns) {
            ir_errorf(err, "node '%s' (%s) is in layer %d, outside the plan's layers [%d, %d]",
                      A->nodes[i]->name, ir_op_name(A->nodes[i]->op), l, sp->first_layer[0],
                      sp->last_layer[ns - 1]);
            goto done;
        }
        A->stage[i] = s;
    }
    if (A->stage[A->loss_node] != ns - 1) {
        ir_errorf(err, "the loss node '%s' is on stage %d, not the last stage %d",
                  A->nodes[A->loss_node]->name, A->stage[A->loss_node], ns - 1);
        goto done;
    }

    /* data dependence and autodiff's "needs" */
    A->dep = ir_xcalloc((size_t)nv + 1, 1);
    A->needs = ir_xcalloc((size_t)nv + 1, 1);
    for (int i = 0; i < nv; i++) {
        const IrValue *v = g->values[i];
        if (v->kind == IR_VK_INPUT) A->dep[i] = 1;
        if (v->kind == IR_VK_PARAM && ir_dtype_is_float(v->dtype)) A->needs[i] = 1;
    }
    for (int i = 0; i < nn; i++) {
        const IrNode *n = A->nodes[i];
        int d = node_dep(A, n), nd = 0;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] && A->needs[part_vi(A, n->in[j])] && diff_slot(n, j)) nd = 1;
        for (int j = 0; j < n->nout; j++) {
            if (!n->out[j]) continue;
            int vi = part_vi(A, n->out[j]);
            A->dep[vi] = (unsigned char)d;
            if (nd && ir_dtype_is_float(n->out[j]->dtype)) A->needs[vi] = 1;
        }
    }

    /* what each stage computes: its data-dependent nodes, and (cloned) the
     * data-free producers of whatever they read */
    A->incl = ir_xcalloc((size_t)ns * nn + 1, 1);
    A->cons = ir_xcalloc((size_t)nv * ns + 1, 1);
    for (int s = 0; s < ns; s++) {
        unsigned char *in = A->incl + (size_t)s * nn;
        for (int i = 0; i < nn; i++) in[i] = A->stage[i] == s && node_dep(A, A->nodes[i]);
        in[A->loss_node] |= s == ns - 1;
        for (int i = nn - 1; i >= 0; i--) {
            if (!in[i]) continue;
            const IrNode *n = A->nodes[i];
            for (int j = 0; j < n->nin; j++) {
                if (!n->in[j]) continue;
                int vi = part_vi(A, n->in[j]), p = prod[vi];
                A->cons[(size_t)vi * ns + s] = 1;
                if (p < 0) continue;
                if (!A->dep[vi]) {
                    in[p] = 1;
                } else if (A->stage[p] > s) {
                    ir_errorf(err, "value '%s' made by node '%s' on stage %d is read by node '%s' "
                              "on the earlier stage %d (layer order breaks the graph order)",
                              n->in[j]->name, A->nodes[p]->name, A->stage[p], n->name, s);
                    goto done;
                }
            }
        }
    }

    /* boundary activations: ids by producer node, slot, reader stage */
    A->gx = ir_xcalloc((size_t)nv * ns + 1, sizeof *A->gx);
    A->ngrad_readers = ir_xcalloc((size_t)nv + 1, sizeof *A->ngrad_readers);
    int id = 0;
    for (int i = 0; i < nn; i++) {
        const IrNode *n = A->nodes[i];
        if (!node_dep(A, n)) continue;
        for (int j = 0; j < n->nout; j++) {
            if (!n->out[j]) continue;
            int vi = part_vi(A, n->out[j]);
            for (int t = A->stage[i] + 1; t < ns; t++) {
                if (!A->cons[(size_t)vi * ns + t]) continue;
                PartGx *x = &A->gx[A->ngx++];
                *x = (PartGx){.v = vi, .from = A->stage[i], .to = t, .grad = A->needs[vi],
                              .id_act = id++, .id_grad = -1};
                if (x->grad) x->id_grad = id++, A->ngrad_readers[vi]++;
            }
        }
    }

    /* parameters with a gradient: reached backwards from the loss or from a
     * boundary gradient through differentiable slots (autodiff's paths) */
    A->reach = ir_xcalloc((size_t)nv + 1, 1);
    A->reach[part_vi(A, A->loss)] = 1;
    for (int k = 0; k < A->ngx; k++)
        if (A->gx[k].grad) A->reach[A->gx[k].v] = 1;
    for (int i = nn - 1; i >= 0; i--) {
        const IrNode *n = A->nodes[i];
        int any = 0;
        for (int j = 0; j < n->nout; j++)
            if (n->out[j] && A->reach[part_vi(A, n->out[j])]) any = 1;
        if (!any) continue;
        for (int j = 0; j < n->nin; j++) {
            if (!n->in[j]) continue;
            int vi = part_vi(A, n->in[j]);
            if (A->needs[vi] && diff_slot(n, j)) A->reach[vi] = 1;
        }
    }
    rc = 0;
done:
    free(prod);
    free(ustart);
    free(uses);
    if (rc) part_ana_free(A);
    return rc;
}

void part_stage_params(const PartAna *A, int s, PartParam **out, int *n) {
    const IrGraph *g = A->g;
    int ns = A->sp->nstages;
    *out = ir_xcalloc((size_t)A->nv + 1, sizeof **out);
    *n = 0;
    for (int vi = 0; vi < A->nv; vi++) {
        const IrValue *v = g->values[vi];
        if (v->kind != IR_VK_PARAM || !A->cons[(size_t)vi * ns + s]) continue;
        PartParam *p = &(*out)[(*n)++];
        p->name = ir_strdup(v->name);
        p->trained = A->reach[vi] && A->needs[vi];
        for (int t = 0; t < ns; t++)
            if (t != s && A->cons[(size_t)vi * ns + t]) p->shared = 1;
        p->layer = -1;
        for (int i = 0; i < A->nn; i++)
            for (int j = 0; j < A->nodes[i]->nin; j++)
                if (A->nodes[i]->in[j] == v && (p->layer < 0 || A->layer[i] < p->layer))
                    p->layer = A->layer[i];
    }
}
