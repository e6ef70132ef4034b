/* Per-layer tensor-parallel structure read from the canonical IR (issue 9).
 *
 * Megatron sharding, found on the op structure rather than assumed per
 * block: walking the graph in topological order, a value is "sharded" when
 * it lies inside a column->row region.  A Linear with a parameter weight
 * whose input is replicated is column-parallel (its output is sharded over
 * the TP ranks); one whose input is sharded is row-parallel (its output is a
 * partial sum: one all-reduce in forward).  Every other op propagates
 * sharding from its inputs (Attention over sharded q/k/v is head-parallel,
 * GELU/SiLU/Mul of sharded values stay sharded, reshapes too).  In backward
 * each distinct input of a column-parallel group (Q, K, V share one) needs
 * one all-reduce of its gradient (Megatron's f operator).  An Embedding with
 * a parameter table is vocabulary-parallel (one forward all-reduce of its
 * output); a CrossEntropy over sharded logits is vocabulary-parallel (two
 * small all-reduces of per-row scalars: max and sum).  So a GPT block reads
 * as 2 forward + 2 backward all-reduces, a LLaMA block (gate and up share an
 * input) too, without either being written down here.
 */
#include <stdlib.h>
#include <string.h>

#include "cost_model.h"

static double numel_bytes(const IrValue *v)
{
    int64_t ne = v ? ir_shape_numel(&v->shape) : -1;
    size_t sz = v ? ir_dtype_size(v->dtype) : 0;
    return ne > 0 ? (double)ne * (double)(sz ? sz : 4) : 0;
}

static double numel(const IrValue *v)
{
    int64_t ne = v ? ir_shape_numel(&v->shape) : -1;
    return ne > 0 ? (double)ne : 0;
}

static int is_act(const IrValue *v)
{
    return v && (v->kind == IR_VK_ACT || v->kind == IR_VK_INPUT);
}

int layer_intra_from_ir(const IrGraph *g, const PlanLayer *layers, int L, LayerIntra *out,
                        IrError *err)
{
    if (!g || !layers || !out || L <= 0)
        return ir_errorf(err, "intra-op: need a graph and %d layers", L);
    memset(out, 0, (size_t)L * sizeof *out);
    int maxv = 0;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i] && g->values[i]->id > maxv)
            maxv = g->values[i]->id;
    /* sh[id]: 1 sharded; cg[id]: counted as a column group's input already */
    unsigned char *sh = calloc((size_t)maxv + 1, 2);
    double *tot_out = calloc((size_t)L, sizeof *tot_out);
    double *sh_out = calloc((size_t)L, sizeof *sh_out);
    double *tot_f = calloc((size_t)L, sizeof *tot_f);
    if (!sh || !tot_out || !sh_out || !tot_f) {
        free(sh), free(tot_out), free(sh_out), free(tot_f);
        return ir_errorf(err, "intra-op: out of memory");
    }
    unsigned char *cg = sh + maxv + 1;
    int any_mm = 0;
    for (int q = 0; q < g->nnodes; q++) {
        const IrNode *n = g->nodes[q];
        if (!n || n->dead)
            continue;
        int l = n->layer_id - 1;
        LayerIntra *li = (l >= 0 && l < L) ? &out[l] : NULL;
        int in_sh = 0;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] && n->in[j]->id <= maxv && sh[n->in[j]->id])
                in_sh = 1;
        int out_sh = in_sh;
        const IrValue *x = n->nin > 0 ? n->in[0] : NULL;
        const IrValue *y = n->nout > 0 ? n->out[0] : NULL;
        double yb = numel_bytes(y);
        if (n->op == IR_OP_LINEAR && n->nin >= 2 && n->in[1] && n->in[1]->kind == IR_VK_PARAM) {
            const IrValue *w = n->in[1];
            double kdim = x && x->shape.rank > 0 ? (double)x->shape.dims[x->shape.rank - 1] : 0;
            double f = 2.0 * numel(y) * (kdim > 0 ? kdim : 0);
            if (li) {
                li->tp_flops += f;
                li->tp_param_bytes += numel(w);
                if (n->nin > 2 && n->in[2] && n->in[2]->kind == IR_VK_PARAM && !in_sh)
                    li->tp_param_bytes += numel(n->in[2]); /* column bias is split too */
            }
            if (in_sh) { /* row-parallel: partial sums, all-reduced */
                out_sh = 0;
                if (li) {
                    li->ar_fwd++;
                    li->ar_fwd_bytes += yb;
                }
            } else {
                out_sh = 1;
                if (li && x && x->id <= maxv && !cg[x->id] && is_act(x)) {
                    cg[x->id] = 1;
                    li->ar_bwd++;
                    li->ar_bwd_bytes += numel_bytes(x);
                }
            }
        } else if (n->op == IR_OP_EMBEDDING && x && x->kind == IR_VK_PARAM) {
            out_sh = 0;
            if (li) {
                li->tp_param_bytes += numel(x);
                li->ar_fwd++;
                li->ar_fwd_bytes += yb;
            }
        } else if (n->op == IR_OP_CROSS_ENTROPY && in_sh) {
            out_sh = 0;
            if (li && x && x->shape.rank > 0) {
                double rows = numel(x) / (double)(x->shape.dims[x->shape.rank - 1] > 0
                                                      ? x->shape.dims[x->shape.rank - 1] : 1);
                li->ar_fwd += 2;
                li->ar_fwd_bytes += 2 * rows * 4;
            }
        } else if (n->op == IR_OP_ATTENTION && in_sh) {
            const IrValue *k = n->nin > 1 ? n->in[1] : NULL;
            double s = k && k->shape.rank >= 2 ? (double)k->shape.dims[k->shape.rank - 2] : 0;
            double d = x && x->shape.rank >= 1 ? (double)x->shape.dims[x->shape.rank - 1] : 0;
            if (li && d > 0)
                li->tp_flops += 2.0 * numel(x) * s + 2.0 * numel(y) * s;
        } else if (n->op == IR_OP_MATMUL && is_act(x) && n->nin > 1 && is_act(n->in[1])) {
            /* an activation x activation MatMul: attention written out */
            any_mm = 1;
            double kdim = x->shape.rank > 0 ? (double)x->shape.dims[x->shape.rank - 1] : 0;
            double f = 2.0 * numel(y) * kdim;
            if (li) {
                li->attn_flops += f;
                if (in_sh)
                    li->tp_flops += f;
            }
        } else if (n->op == IR_OP_SOFTMAX && li) {
            /* attention probabilities: saved for backward, what selective
             * recompute drops (checked below: only beside an act x act MatMul) */
            li->attn_bytes += yb;
            li->attn_flops += 5.0 * numel(y);
            if (in_sh)
                li->tp_flops += 5.0 * numel(y);
        }
        for (int j = 0; j < n->nout; j++) {
            IrValue *v = n->out[j];
            if (!v)
                continue;
            if (v->id <= maxv)
                sh[v->id] = (unsigned char)out_sh;
            if (li) {
                tot_out[l] += numel_bytes(v);
                if (out_sh)
                    sh_out[l] += numel_bytes(v);
            }
        }
    }
    (void)tot_f;
    for (int l = 0; l < L; l++) {
        LayerIntra *li = &out[l];
        const PlanLayer *p = &layers[l];
        /* fractions of the layer's own figures (layers.c's op costs) */
        li->tp_flops_frac = p->fwd_flops > 0 ? li->tp_flops / p->fwd_flops : 0;
        if (li->tp_flops_frac > 1)
            li->tp_flops_frac = 1;
        double pe = p->param_bytes > 0 ? li->tp_param_bytes : 0;
        /* tp_param_bytes counted elements; param_bytes is in the training dtype */
        li->tp_param_frac = 0;
        if (p->param_bytes > 0 && pe > 0) {
            double tot_el = 0;
            for (int q = 0; q < g->nnodes; q++) {
                const IrNode *n = g->nodes[q];
                if (!n || n->dead || n->layer_id != l + 1)
                    continue;
                for (int j = 0; j < n->nin; j++)
                    if (n->in[j] && n->in[j]->kind == IR_VK_PARAM)
                        tot_el += numel(n->in[j]);
            }
            li->tp_param_frac = tot_el > 0 ? pe / tot_el : 0;
            if (li->tp_param_frac > 1)
                li->tp_param_frac = 1;
        }
        li->tp_act_frac = tot_out[l] > 0 ? sh_out[l] / tot_out[l] : 0;
        if (!any_mm) { /* fused Attention keeps only q, k, v: nothing for selective to drop */
            li->attn_bytes = 0;
            li->attn_flops = 0;
        }
        if (li->attn_bytes > p->act_bytes)
            li->attn_bytes = p->act_bytes;
    }
    free(sh), free(tot_out), free(sh_out), free(tot_f);
    return 0;
}
