/* partition (passes/partition.h): cut the forward+loss graph into
 * per-stage train and update programs.
 *
 * The analysis (partition_ana.c) is a function of the whole forward graph
 * and the spec only, never of the stage being built, so every stage derives
 * the same boundary list and transfer ids.  Here: one stage's train graph
 * (its forward nodes, cloned data-free producers, autodiff seeded by the
 * boundary gradients) and its update graph (the optimizer pass with the
 * global norm as an input). */
#include "partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"
#include "partition_ana.h"
#include "pass.h"

/* A copy of a source value (param, const, or graph input) in graph t;
 * external data stays a reference (mapped lazily), inline data is copied. */
static IrValue *clone_source(IrGraph *t, IrValue *v, IrError *err) {
    IrValue *n = ir_value_new(t, v->name, v->dtype, &v->shape, v->kind);
    if (strcmp(n->name, v->name)) {
        ir_errorf(err, "value name '%s' is taken in the stage graph", v->name);
        return NULL;
    }
    if (v->kind == IR_VK_INPUT) return n;
    if (v->has_ext) {
        n->has_ext = 1;
        n->ext.path = ir_strdup(v->ext.path);
        n->ext.offset = v->ext.offset;
        n->ext.length = v->ext.length;
    } else if (v->data_elided) {
        n->data_elided = 1;
        n->elided_hash = v->elided_hash;
        n->nbytes = v->nbytes;
    } else if (v->data) {
        void *d = ir_xmalloc(v->nbytes ? v->nbytes : 1);
        memcpy(d, v->data, v->nbytes);
        ir_value_set_data(n, d, v->nbytes);
    }
    return n;
}

static void copy_attrs(IrNode *dst, const IrNode *src) {
    for (int i = 0; i < src->nattrs; i++) {
        const IrAttr *a = &src->attrs[i];
        switch (a->type) {
        case IR_ATTR_INT: ir_node_set_int(dst, a->name, a->i); break;
        case IR_ATTR_FLOAT: ir_node_set_float(dst, a->name, a->f); break;
        case IR_ATTR_STRING: ir_node_set_string(dst, a->name, a->s); break;
        case IR_ATTR_INTS: ir_node_set_ints(dst, a->name, a->n, a->ints); break;
        case IR_ATTR_FLOATS: ir_node_set_floats(dst, a->name, a->n, a->floats); break;
        }
    }
}

static IrValue *find_output(IrGraph *g, const char *name) {
    for (int i = 0; i < g->noutputs; i++)
        if (!strcmp(g->outputs[i]->name, name)) return g->outputs[i];
    return NULL;
}

static void add_output_once(IrGraph *g, IrValue *v) {
    if (!v->is_graph_output) ir_graph_add_output(g, v);
}

/* Output `name` = Identity(src), or of zeros when src is NULL (a gradient
 * nothing in this stage contributes to). */
static IrValue *grad_output(IrGraph *t, const char *name, IrValue *src, const IrValue *like) {
    if (!src) src = ir_const_new(t, "bwd/zeros", like->dtype, &like->shape, NULL);
    IrValue *o = ir_value_new(t, name, like->dtype, &like->shape, IR_VK_GRAD);
    IrNode *n = ir_node_new(t, IR_OP_IDENTITY, NULL, 1, &src, 1, &o);
    n->phase = IR_PHASE_BWD;
    ir_graph_add_output(t, o);
    return o;
}

static int64_t value_bytes(const IrValue *v) {
    return ir_shape_numel(&v->shape) * (int64_t)ir_dtype_size(v->dtype);
}

/* Row size of a boundary value: it must be batch-major (leading dim a
 * multiple of the local rows) for DP ranks to split and join it by rows. */
static int row_bytes(const IrValue *v, int64_t local_rows, int s, int64_t *out, IrError *err) {
    char sb[128];
    if (v->shape.rank < 1 || v->shape.dims[0] % local_rows != 0)
        return ir_errorf(err,
                         "stage %d: boundary value '%s' %s: its leading dim is not a multiple of "
                         "the %lld local batch rows (boundary values must be batch-major)",
                         s, v->name, ir_shape_str(&v->shape, sb, sizeof sb),
                         (long long)local_rows);
    *out = value_bytes(v) / local_rows;
    return 0;
}

static void bgrad_in_name(char *buf, size_t n, const PartAna *A, const PartGx *x) {
    if (A->ngrad_readers[x->v] > 1) snprintf(buf, n, "bgrad/%s@%d", A->g->values[x->v]->name, x->to);
    else snprintf(buf, n, "bgrad/%s", A->g->values[x->v]->name);
}

static void push_xfer(PartStage *st, const char *value, int send, int peer, PartXferKind kind,
                      int id, int64_t rows, int64_t rb) {
    PartXfer *x = &st->xfers[st->nxfers++];
    *x = (PartXfer){.value = ir_strdup(value), .send = send, .peer = peer, .kind = kind,
                    .id = id, .rows = rows, .row_bytes = rb};
}

/* The train graph of stage s and its interface (xfers, params). */
static int build_train(const PartAna *A, int s, PartStage *st, IrError *err) {
    const IrGraph *g = A->g;
    const PartSpec *sp = A->sp;
    int last = s == sp->nstages - 1, rc = -1;
    char name[1024];
    snprintf(name, sizeof name, "%s/stage%d/train", g->name ? g->name : "model", s);
    IrGraph *t = st->train = ir_graph_new(name);
    IrValue **map = ir_xcalloc((size_t)A->nv + 1, sizeof *map);
    AdSeed *seeds = ir_xcalloc((size_t)A->ngx + 2, sizeof *seeds);
    IrValue **wrt = ir_xcalloc((size_t)A->ngx + 1, sizeof *wrt);
    IrValue **wrt_grad = ir_xcalloc((size_t)A->ngx + 1, sizeof *wrt_grad);
    int nseeds = 0, nwrt = 0;
    st->xfers = ir_xcalloc((size_t)2 * A->ngx + 1, sizeof *st->xfers);

    /* graph inputs: the model's data inputs this stage reads */
    for (int i = 0; i < g->ninputs; i++) {
        IrValue *v = g->inputs[i];
        int vi = part_vi(A, v);
        if (!A->cons[(size_t)vi * sp->nstages + s]) continue;
        if (v->shape.rank < 1 || v->shape.dims[0] != st->local_rows) {
            char sb[128];
            ir_errorf(err, "stage %d: data input '%s' %s: expected %lld leading rows (microbatch "
                      "%lld / dp %d); import the model at the stage's local batch",
                      s, v->name, ir_shape_str(&v->shape, sb, sizeof sb),
                      (long long)st->local_rows, (long long)sp->rows, sp->dp[s]);
            goto done;
        }
        if (!(map[vi] = clone_source(t, v, err))) goto done;
        ir_graph_add_input(t, map[vi]);
        if (!strcmp(v->name, "targets")) st->reads_targets = 1;
        else if (!st->data_input) st->data_input = ir_strdup(v->name);
    }
    /* received activations, then the gradients of sent ones */
    for (int k = 0; k < A->ngx; k++) {
        const PartGx *x = &A->gx[k];
        if (x->to != s) continue;
        IrValue *v = g->values[x->v];
        if (!(map[x->v] = clone_source(t, v, err))) goto done;
        map[x->v]->kind = IR_VK_INPUT;
        ir_graph_add_input(t, map[x->v]);
        if (x->grad) wrt[nwrt++] = map[x->v];
    }
    for (int k = 0; k < A->ngx; k++) {
        const PartGx *x = &A->gx[k];
        if (x->from != s || !x->grad) continue;
        IrValue *v = g->values[x->v];
        bgrad_in_name(name, sizeof name, A, x);
        IrValue *b = ir_value_new(t, name, v->dtype, &v->shape, IR_VK_INPUT);
        ir_graph_add_input(t, b);
        seeds[nseeds++] = (AdSeed){.value = NULL, .grad = b}; /* value set once cloned */
    }

    /* forward nodes: this stage's own, and the data-free producers it reads */
    double scale = (double)st->local_rows / (double)(sp->loss_rows > 0 ? sp->loss_rows : sp->rows);
    IrValue *loss_raw = NULL;
    for (int i = 0; i < A->nn; i++) {
        if (!A->incl[(size_t)s * A->nn + i]) continue;
        const IrNode *n = A->nodes[i];
        IrValue *in[64], *out[64];
        if (n->nin > 64 || n->nout > 64) {
            ir_errorf(err, "stage %d: node '%s' has too many inputs or outputs", s, n->name);
            goto done;
        }
        for (int j = 0; j < n->nin; j++) {
            in[j] = NULL;
            if (!n->in[j]) continue;
            int vi = part_vi(A, n->in[j]);
            if (!map[vi]) {
                IrValueKind k = n->in[j]->kind;
                if (n->in[j]->producer || (k != IR_VK_PARAM && k != IR_VK_CONST)) {
                    ir_errorf(err, "stage %d: node '%s' reads '%s', which this stage neither "
                              "computes nor receives", s, n->name, n->in[j]->name);
                    goto done;
                }
                if (!(map[vi] = clone_source(t, n->in[j], err))) goto done;
            }
            in[j] = map[vi];
        }
        for (int j = 0; j < n->nout; j++) {
            out[j] = NULL;
            IrValue *v = n->out[j];
            if (!v) continue;
            int is_loss = v == A->loss && scale != 1.0;
            out[j] = ir_value_new(t, is_loss ? "loss/local_mean" : v->name, v->dtype, &v->shape,
                                  v->kind);
            map[part_vi(A, v)] = out[j];
            if (is_loss) loss_raw = out[j];
        }
        IrNode *c = ir_node_new(t, n->op, n->name, n->nin, in, n->nout, out);
        copy_attrs(c, n);
        c->module_id = n->module_id;
        c->layer_id = A->layer[i];
        c->stage_id = s;
        c->phase = IR_PHASE_FWD;
    }
    IrValue *loss = NULL;
    if (last) {
        loss = map[part_vi(A, A->loss)];
        if (loss_raw) {
            /* local mean x local_rows / rows: the DP group's sum is the global mean */
            IrShape s0 = {0};
            IrValue *in[2] = {loss_raw, ir_const_scalar_f32(t, "loss/dp_scale", (float)scale)};
            loss = ir_value_new(t, "loss", IR_F32, &s0, IR_VK_ACT);
            IrNode *m = ir_node_new(t, IR_OP_MUL, "loss/dp_scale_mul", 2, in, 1, &loss);
            m->layer_id = A->layer[A->loss_node];
            m->stage_id = s;
        }
    }
    /* forward sends */
    int ns = 0;
    for (int k = 0; k < A->ngx; k++) {
        const PartGx *x = &A->gx[k];
        if (x->from != s) continue;
        add_output_once(t, map[x->v]);
        if (x->grad) seeds[ns++].value = map[x->v];
    }
    if (loss) seeds[nseeds++] = (AdSeed){.value = loss, .grad = NULL};
    if (nseeds && autodiff_seeded(t, seeds, nseeds, wrt, nwrt, wrt_grad, err)) {
        ir_error_prefix(err, "stage %d backward", s);
        goto done;
    }
    /* gradients of received activations, then zeros for held parameters
     * this stage's loss path does not reach (the runtime sums over stages) */
    int w = 0;
    for (int k = 0; k < A->ngx; k++) {
        const PartGx *x = &A->gx[k];
        if (x->to != s || !x->grad) continue;
        snprintf(name, sizeof name, "bgrad/%s", g->values[x->v]->name);
        grad_output(t, name, wrt_grad[w++], map[x->v]);
    }
    for (int i = 0; i < st->nparams; i++) {
        if (!st->params[i].trained) continue;
        snprintf(name, sizeof name, "grad/%s", st->params[i].name);
        if (!find_output(t, name))
            grad_output(t, name, NULL, ir_graph_find_value(t, st->params[i].name));
    }
    if (loss) ir_graph_add_output(t, loss);
    if (part_recompute(t, st->recompute, &st->nrecomputed, err)) {
        ir_error_prefix(err, "stage %d (recompute %s)", s, part_recompute_name(st->recompute));
        goto done;
    }
    PassContext ctx;
    pass_context_default(&ctx);
    if (pass_run_pipeline(t, "shape-infer,dce", &ctx, err) || ir_verify(t, 1, err)) {
        ir_error_prefix(err, "stage %d train graph", s);
        goto done;
    }

    /* the interface, in run order: fwd recvs, fwd sends, bwd recvs, bwd sends */
    for (int pass = 0; pass < 4; pass++)
        for (int k = 0; k < A->ngx; k++) {
            const PartGx *x = &A->gx[k];
            int mine = pass == 0 || pass == 3 ? x->to == s : x->from == s;
            if (!mine || (pass >= 2 && !x->grad)) continue;
            const IrValue *v = g->values[x->v];
            int64_t rb = 0;
            if (row_bytes(v, st->local_rows, s, &rb, err)) goto done;
            if (pass == 0) push_xfer(st, v->name, 0, x->from, PX_ACT, x->id_act, sp->rows, rb);
            if (pass == 1) push_xfer(st, v->name, 1, x->to, PX_ACT, x->id_act, sp->rows, rb);
            if (pass == 2) {
                bgrad_in_name(name, sizeof name, A, x);
                push_xfer(st, name, 0, x->to, PX_GRAD, x->id_grad, sp->rows, rb);
            }
            if (pass == 3) {
                snprintf(name, sizeof name, "bgrad/%s", v->name);
                push_xfer(st, name, 1, x->from, PX_GRAD, x->id_grad, sp->rows, rb);
            }
        }
    rc = 0;
done:
    free(map);
    free(seeds);
    free(wrt);
    free(wrt_grad);
    return rc;
}

/* The optimizer step of the stage's trained parameters; the runtime owns
 * their storage, so the PARAM values carry no data. */
static int build_update(const PartAna *A, int s, PartStage *st, IrError *err) {
    char name[1024];
    snprintf(name, sizeof name, "%s/stage%d/update", A->g->name ? A->g->name : "model", s);
    IrGraph *u = st->update = ir_graph_new(name);
    int n = 0;
    for (int i = 0; i < st->nparams; i++) {
        if (!st->params[i].trained) continue;
        const IrValue *src = ir_graph_find_value(A->g, st->params[i].name);
        if (src->dtype != IR_F32)
            return ir_errorf(err, "stage %d: parameter '%s' is not f32", s, src->name);
        IrShape sh = src->shape;
        if (st->zero) { /* one DP rank's flat slice; [1, L] keeps the decay rule's rank */
            int64_t len = part_zero_len(ir_shape_numel(&src->shape), st->dp);
            int64_t d2[2] = {1, len};
            sh = src->shape.rank >= 2 ? ir_shape_make(2, d2) : ir_shape_make(1, &len);
        }
        IrValue *p = ir_value_new(u, src->name, IR_F32, &sh, IR_VK_PARAM);
        snprintf(name, sizeof name, "grad/%s", p->name);
        ir_graph_add_input(u, ir_value_new(u, name, IR_F32, &p->shape, IR_VK_INPUT));
        n++;
    }
    OptimOpts o = A->sp->optim;
    o.norm_input = 1;
    if ((n && pass_optimizer_with(u, &o, err)) || ir_verify(u, 1, err))
        return ir_error_prefix(err, "stage %d update graph", s);
    return 0;
}

int partition_stage(const IrGraph *fwd, const PartSpec *spec, int s, PartStage *out,
                    IrError *err) {
    memset(out, 0, sizeof *out);
    if (!spec || s < 0 || s >= spec->nstages)
        return ir_errorf(err, "partition: stage %d is not in the plan's %d stages", s,
                         spec ? spec->nstages : 0);
    int tp = spec->tp ? spec->tp[s] : 1;
    if (tp < 1 || spec->tp_rank < 0 || spec->tp_rank >= tp)
        return ir_errorf(err, "partition stage %d: TP rank %d of tp %d", s, spec->tp_rank, tp);
    TpShardResult tr = {0};
    if (tp > 1) {
        if (tp_shard_layers(fwd, tp, spec->tp_rank, spec->first_layer[s], spec->last_layer[s],
                            &tr, err))
            return ir_error_prefix(err, "partition stage %d (tp %d)", s, tp); /* tp_shard: no stage */
        /* A stage with no pattern tp divides (a tied embedding or head alone, a
         * final norm) runs replicated: every TP rank computes the whole stage,
         * as TP stages do with their LayerNorms (issue 18, item 5). */
        fwd = tr.graph;
    }
    PartAna A;
    if (part_analyse(fwd, spec, &A, err)) {
        tp_shard_free(&tr);
        return ir_error_prefix_stage(err, "partition", s);
    }
    out->stage = s;
    out->first_layer = spec->first_layer[s];
    out->last_layer = spec->last_layer[s];
    out->dp = spec->dp[s];
    if (spec->dp_rank < 0 || spec->dp_rank >= spec->dp[s] || spec->rows < spec->dp[s])
        return ir_errorf(err, "partition stage %d: DP rank %d of dp %d over %lld rows (every DP "
                         "rank needs a row)", s, spec->dp_rank, spec->dp[s], (long long)spec->rows);
    if (spec->local_rows > spec->rows)
        return ir_errorf(err, "partition stage %d: %lld local rows exceed the %lld microbatch "
                         "rows", s, (long long)spec->local_rows, (long long)spec->rows);
    out->local_rows = spec->local_rows > 0 ? spec->local_rows
                                           : part_local_rows(spec->rows, spec->dp[s], spec->dp_rank);
    out->recompute = spec->recompute ? spec->recompute[s] : PART_RC_NONE;
    out->tp = tp;
    out->tp_rank = spec->tp_rank;
    out->zero = spec->zero && out->dp > 1 ? spec->zero[s] : 0;
    if (out->zero < 0 || out->zero > 2) {
        part_ana_free(&A);
        tp_shard_free(&tr);
        return ir_errorf(err, "partition stage %d: zero %d (0, 1 or 2)", s, out->zero);
    }
    /* the stage's share of the shards: parameters it holds */
    for (int i = 0; i < tr.nshards; i++) {
        if (!ir_graph_find_value(fwd, tr.shards[i].name)) continue;
        out->tp_shards = ir_xrealloc(out->tp_shards, sizeof *out->tp_shards *
                                                         (size_t)(out->ntp_shards + 1));
        out->tp_shards[out->ntp_shards] = tr.shards[i];
        out->tp_shards[out->ntp_shards++].name = ir_strdup(tr.shards[i].name);
    }
    part_stage_params(&A, s, &out->params, &out->nparams);
    int rc = build_train(&A, s, out, err);
    if (!rc) rc = build_update(&A, s, out, err);
    part_ana_free(&A);
    tp_shard_free(&tr);
    if (!rc) { /* keep only shards of parameters the stage holds */
        int k = 0;
        for (int i = 0; i < out->ntp_shards; i++) {
            int held = 0;
            for (int p = 0; p < out->nparams && !held; p++)
                held = !strcmp(out->params[p].name, out->tp_shards[i].name);
            if (held) out->tp_shards[k++] = out->tp_shards[i];
            else free(out->tp_shards[i].name);
        }
        out->ntp_shards = k;
    }
    if (rc) {
        ir_error_prefix(err, "partition");
        partition_stage_free(out);
    }
    return rc;
}

void partition_stage_free(PartStage *st) {
    if (!st) return;
    if (st->train) ir_graph_free(st->train);
    if (st->update) ir_graph_free(st->update);
    for (int i = 0; i < st->nxfers; i++) free(st->xfers[i].value);
    for (int i = 0; i < st->nparams; i++) free(st->params[i].name);
    for (int i = 0; i < st->ntp_shards; i++) free(st->tp_shards[i].name);
    free(st->tp_shards);
    free(st->xfers);
    free(st->params);
    free(st->data_input);
    memset(st, 0, sizeof *st);
}
