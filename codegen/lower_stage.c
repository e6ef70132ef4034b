/* Stage lowering: memory plan -> hetrt_* calls, IR texts, config text
 * (lower_stage.h, docs/STAGE_ABI.md). */
#include "lower_stage.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse.h"
#include "fused_llvm.h"
#include "lower_node.h"
#include "stage_abi.h"

/* The hetrt_* entries of runtime/abi/stage_abi.def, the rows stage_abi.h's
 * prototypes come from. */
const LeExtern lower_hetrt_externs[] = {
#define STAGE_ABI_IF_CORE STAGE_ABI_KEEP
#define STAGE_ABI_IF_TP STAGE_ABI_DROP
#define STAGE_ABI_IF_TP_KERNEL STAGE_ABI_DROP
#define STAGE_ABI_IF_CUDA STAGE_ABI_DROP
#include "stage_abi_externs.inc"
};
const int lower_hetrt_nexterns = (int)(sizeof lower_hetrt_externs / sizeof lower_hetrt_externs[0]);
/* a TP stage also calls the TP all-reduce (the .def's TP set); kept out of
 * the plain list so stage binaries without TP never reference it */
const LeExtern lower_hetrt_externs_tp[] = {
#define STAGE_ABI_IF_CORE STAGE_ABI_KEEP
#define STAGE_ABI_IF_TP STAGE_ABI_KEEP
#define STAGE_ABI_IF_TP_KERNEL STAGE_ABI_DROP
#define STAGE_ABI_IF_CUDA STAGE_ABI_DROP
#include "stage_abi_externs.inc"
};
const int lower_hetrt_nexterns_tp =
    (int)(sizeof lower_hetrt_externs_tp / sizeof lower_hetrt_externs_tp[0]);

enum { RT_DT_I32 = 3, RT_DT_I64 = 4 }; /* hetrt_tokens' dtype codes (stage_abi.h) */

/* ------------------------------------------------------------ text buffer */

typedef struct Sb {
    char *s;
    size_t n, cap;
} Sb;

static void sb_printf(Sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(Sb *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0) return;
    if (b->n + (size_t)need + 1 > b->cap) {
        b->cap = (b->n + (size_t)need + 1) * 2;
        b->s = ir_xrealloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += (size_t)need;
}

char *lower_config_name(const char *name) {
    size_t n = strlen(name);
    char *o = ir_xmalloc(3 * n + 1), *p = o;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        if (*c == '%' || *c == ' ' || *c < 0x20 || *c == 0x7f)
            p += sprintf(p, "%%%02X", *c);
        else
            *p++ = (char)*c;
    }
    *p = 0;
    return o;
}

/* ------------------------------------------------------------ options */

static int check_opts(const PartStage *st, const LowerOpts *o, IrError *err) {
    int s = st->stage;
    if (o->nstages < 1 || s < 0 || s >= o->nstages || !o->dp)
        return ir_errorf(err, "stage %d: bad stage count %d (or no dp list)", s, o->nstages);
    for (int i = 0; i < o->nstages; i++)
        if (o->dp[i] < 1) return ir_errorf(err, "stage %d: dp of stage %d is %d", s, i, o->dp[i]);
    if (o->dp[s] != st->dp)
        return ir_errorf(err, "stage %d: options say dp %d, the partition %d", s, o->dp[s], st->dp);
    if (o->rows < 1 || o->seq < 1 || o->accum < 1 || o->nslots < 1 || o->layers < 1)
        return ir_errorf(err, "stage %d: rows %lld, seq %lld, accum %d, slots %d, layers %d must "
                         "all be positive", s, (long long)o->rows, (long long)o->seq, o->accum,
                         o->nslots, o->layers);
    /* uneven DP: a binary per row count, the runtime's split (ceil or
     * floor) or a plan's row table (any count leaving the other DP ranks a
     * row each); one rank holds them all */
    if (st->dp == 1 ? st->local_rows != o->rows
                    : st->local_rows < 1 || st->local_rows > o->rows - (st->dp - 1))
        return ir_errorf(err, "stage %d: %lld rows over dp %d is not the partition's %lld local "
                         "rows", s, (long long)o->rows, st->dp, (long long)st->local_rows);
    if (!o->optimizer || (strcmp(o->optimizer, "adamw") && strcmp(o->optimizer, "sgd")))
        return ir_errorf(err, "stage %d: optimizer '%s' (adamw or sgd)", s,
                         o->optimizer ? o->optimizer : "(null)");
    if (!o->lr_schedule || (strcmp(o->lr_schedule, "constant") && strcmp(o->lr_schedule, "cosine")))
        return ir_errorf(err, "stage %d: lr schedule '%s' (constant or cosine)", s,
                         o->lr_schedule ? o->lr_schedule : "(null)");
    if (!(o->lr >= 0) || o->warmup < 0 || o->steps < 0)
        return ir_errorf(err, "stage %d: lr %g, warmup %lld, steps %lld", s, o->lr,
                         (long long)o->warmup, (long long)o->steps);
    if (o->token_dtype != IR_UNDEF && o->token_dtype != IR_I64 && o->token_dtype != IR_I32)
        return ir_errorf(err, "stage %d: token dtype %s (i64 or i32)", s,
                         ir_dtype_name(o->token_dtype));
    if (o->all_stages && o->nall_stages != o->nstages)
        return ir_errorf(err, "stage %d: %d stages in LowerOpts.all_stages, %d in the plan", s,
                         o->nall_stages, o->nstages);
    if (st->first_layer < 1 || st->last_layer > o->layers || st->first_layer > st->last_layer)
        return ir_errorf(err, "stage %d: layers %d..%d outside 1..%d", s, st->first_layer,
                         st->last_layer, o->layers);
    /* the schedule: every microbatch F then B once; in-flight ones in distinct slots */
    if (o->nsched != 2 * o->accum || !o->sched)
        return ir_errorf(err, "stage %d: schedule of %d entries for %d microbatches (want %d)", s,
                         o->nsched, o->accum, 2 * o->accum);
    int *state = ir_xcalloc((size_t)o->accum, sizeof *state); /* 0 none, 1 F done, 2 B done */
    int *owner = ir_xcalloc((size_t)o->nslots, sizeof *owner); /* microbatch + 1 */
    int rc = 0;
    for (int i = 0; i < o->nsched && !rc; i++) {
        LeSched e = o->sched[i];
        int m = e.microbatch;
        if ((e.kind != 'F' && e.kind != 'B') || m < 0 || m >= o->accum)
            rc = ir_errorf(err, "stage %d: schedule entry %d (%c%d): not F/B of a microbatch "
                           "in 0..%d", s, i, e.kind, m, o->accum - 1);
        else if (e.kind == 'F' && state[m] != 0)
            rc = ir_errorf(err, "stage %d: schedule entry %d: F%d twice", s, i, m);
        else if (e.kind == 'B' && state[m] != 1)
            rc = ir_errorf(err, "stage %d: schedule entry %d: B%d without its F (or twice)", s, i,
                           m);
        else if (e.kind == 'F' && owner[m % o->nslots])
            rc = ir_errorf(err, "stage %d: schedule entry %d: F%d needs slot %d, still held by "
                           "microbatch %d (more than %d in flight)", s, i, m, m % o->nslots,
                           owner[m % o->nslots] - 1, o->nslots);
        else {
            state[m]++;
            owner[m % o->nslots] = e.kind == 'F' ? m + 1 : 0;
        }
    }
    free(state);
    free(owner);
    return rc;
}

/* ------------------------------------------------------------ IR text */

/* Canonical text with every constant inline; reparsed to make sure the
 * runtime sees the same nodes at the same indices (hetrt_node's numbering). */
static char *graph_text(const IrGraph *g, int stage, const char *which, IrError *err) {
    for (int i = 0; i < g->nvalues; i++) {
        const IrValue *v = g->values[i];
        if (v->kind != IR_VK_CONST) continue;
        if (v->has_ext || !v->data) {
            ir_errorf(err, "stage %d, %s graph: constant '%s' has %s data; the stage text must "
                      "carry every constant inline", stage, which, v->name,
                      v->has_ext ? "external" : "no");
            return NULL;
        }
    }
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->dead) {
            ir_errorf(err, "stage %d, %s graph: node %d ('%s') is dead (compact first)", stage,
                      which, i, g->nodes[i]->name);
            return NULL;
        }
    IrPrintOptions po;
    ir_print_options_default(&po);
    po.max_inline_elems = INT_MAX;
    char *text = ir_print_to_string(g, &po);
    if (!text) {
        ir_errorf(err, "stage %d: cannot print the %s graph", stage, which);
        return NULL;
    }
    IrGraph *back = ir_parse(text, which, err);
    if (!back) {
        free(text);
        ir_error_prefix(err, "stage %d: %s graph text does not parse back: ", stage, which);
        return NULL;
    }
    int ok = back->nnodes == g->nnodes;
    for (int i = 0; ok && i < g->nnodes; i++)
        ok = back->nodes[i]->op == g->nodes[i]->op && back->nodes[i]->nin == g->nodes[i]->nin &&
             back->nodes[i]->nout == g->nodes[i]->nout;
    ir_graph_free(back);
    if (!ok) {
        free(text);
        ir_errorf(err, "stage %d: %s graph text reparses to other nodes", stage, which);
        return NULL;
    }
    return text;
}

/* A TpAllReduce that --tp-reduce-dtype bf16 sends as bf16: every sum but the
 * vocab-parallel loss's statistics (its sum of exponentials and target
 * logit stay fp32, as the loss does). */
static int tp_sum_bf16(const IrNode *n) {
    const IrNode *p = n->in[0] ? n->in[0]->producer : NULL;
    return n->op == IR_OP_TP_ALL_REDUCE && !strcmp(ir_attr_string(n, "op", "sum"), "sum") &&
           !(p && p->op == IR_OP_VOCAB_CE_STATS);
}

/* ------------------------------------------------------------ config */

/* ABI 3: the parameter's shape as the stage's graphs declare it (the train
 * graph's, else the update graph's: under ZeRO the update graph holds the
 * slice), " shape D0xD1..." ("-" for a scalar), so that the runtime writes
 * checkpoint tensors with their shapes without the graphs.  No field when
 * neither graph has it with numel elements (the runtime then writes 1-D). */
static void config_shape(Sb *b, const PartStage *st, const MpParam *p) {
    const IrGraph *gs[2] = {st->train, st->update};
    for (int g = 0; g < 2; g++) {
        const IrValue *v = ir_graph_find_value(gs[g], p->name);
        /* 8: the runtime's RT_CKPT_MAX_DIMS (its parser refuses more) */
        if (!v || ir_shape_numel(&v->shape) != p->numel || v->shape.rank > 8) continue;
        sb_printf(b, " shape %s", v->shape.rank ? "" : "-");
        for (int d = 0; d < v->shape.rank; d++)
            sb_printf(b, "%s%lld", d ? "x" : "", (long long)v->shape.dims[d]);
        return;
    }
}

/* 1 if one of stages[0..n) holds parameter `name` */
static int holds_param(const PartStage *stages, int n, const char *name) {
    for (int s = 0; s < n; s++)
        for (int k = 0; k < stages[s].nparams; k++)
            if (!strcmp(stages[s].params[k].name, name)) return 1;
    return 0;
}

static char *config_text(const PartStage *st, const LowerOpts *o, const MemPlan *mp,
                         IrDType tok) {
    Sb b = {0};
    sb_printf(&b, "hetc-stage 1\nstage %d\nstages %d\ndp", st->stage, o->nstages);
    for (int i = 0; i < o->nstages; i++) sb_printf(&b, " %d", o->dp[i]);
    sb_printf(&b, "\nrows %lld\nlocal_rows %lld\nseq %lld\naccum %d\nlayers %d\ntoken_dtype %s\n",
              (long long)o->rows, (long long)st->local_rows, (long long)o->seq, o->accum,
              o->layers, ir_dtype_name(tok));
    char lr[40];
    for (int prec = 6; prec <= 17; prec++) { /* shortest text that reads back exactly */
        snprintf(lr, sizeof lr, "%.*g", prec, o->lr);
        if (strtod(lr, NULL) == o->lr) break;
    }
    sb_printf(&b, "optimizer %s\nlr %s\nlr_schedule %s\nwarmup %lld\nsteps %lld\n",
              o->optimizer, lr, o->lr_schedule, (long long)o->warmup, (long long)o->steps);
    sb_printf(&b, "arena_off lr %lld\narena_off step %lld\narena_off grad_norm %lld\n",
              (long long)mp->lr_off, (long long)mp->step_off, (long long)mp->norm_off);
    for (int i = 0; i < mp->nparams; i++) {
        const MpParam *p = &mp->params[i];
        char *nm = lower_config_name(p->name);
        sb_printf(&b, "param %s layer %d shared %d numel %lld param %lld acc %lld m %lld v %lld",
                  nm, st->params[i].layer, st->params[i].shared ? 1 : 0, (long long)p->numel,
                  (long long)p->param_off, (long long)p->acc_off, (long long)p->m_off,
                  (long long)p->v_off);
        config_shape(&b, st, p);
        sb_printf(&b, "\n");
        free(nm);
    }
    /* --tp-reduce-dtype bf16: the largest TP sum sent as bf16 sizes the
     * runtime's wire buffer (allocated at start-up, not in the step loop) */
    int64_t tpmax = 0;
    for (int i = 0; o->tp_reduce_bf16 && i < st->train->nnodes; i++)
        if (tp_sum_bf16(st->train->nodes[i]) &&
            ir_shape_numel(&st->train->nodes[i]->in[0]->shape) > tpmax)
            tpmax = ir_shape_numel(&st->train->nodes[i]->in[0]->shape);
    if (tpmax > 0) sb_printf(&b, "tp_reduce bf16 %lld\n", (long long)tpmax);
    /* ZeRO: a record only when in effect (configs without it are unchanged);
     * each param's update slice buffer (docs/STAGE_ABI.md) */
    if (st->zero) {
        sb_printf(&b, "zero %d\n", st->zero);
        for (int i = 0; i < mp->nparams; i++) {
            char *nm = lower_config_name(mp->params[i].name);
            sb_printf(&b, "zslice %s len %lld off %lld\n", nm, (long long)mp->params[i].zlen,
                      (long long)mp->params[i].zp_off);
            free(nm);
        }
    }
    /* shared parameters of the whole plan (every config lists all of them:
     * the runtimes create their gradient groups collectively) */
    for (int s = 0; o->all_stages && s < o->nstages; s++)
        for (int i = 0; i < o->all_stages[s].nparams; i++) {
            const char *pn = o->all_stages[s].params[i].name;
            if (!o->all_stages[s].params[i].shared || holds_param(o->all_stages, s, pn)) continue;
            char *nm = lower_config_name(pn);
            sb_printf(&b, "shared %s stages", nm);
            free(nm);
            for (int q = 0; q < o->nstages; q++)
                if (holds_param(o->all_stages + q, 1, pn)) sb_printf(&b, " %d", q);
            sb_printf(&b, "\n");
        }
    /* tensor parallelism (only when the plan has it: configs without TP are
     * unchanged): every stage's degree, and this stage's sharded parameters
     * as TP rank 0's ranges of the unsharded dim (rank r: shifted by r x len) */
    int any_tp = st->tp > 1;
    for (int s = 0; o->all_stages && s < o->nstages; s++) any_tp |= o->all_stages[s].tp > 1;
    if (any_tp) {
        sb_printf(&b, "tp");
        for (int s = 0; s < o->nstages; s++)
            sb_printf(&b, " %d", o->all_stages ? (o->all_stages[s].tp > 1 ? o->all_stages[s].tp : 1)
                                               : (s == st->stage ? st->tp : 1));
        sb_printf(&b, "\n");
    }
    for (int i = 0; i < st->ntp_shards; i++) {
        const TpParamShard *t = &st->tp_shards[i];
        char *nm = lower_config_name(t->name);
        sb_printf(&b, "tpshard %s axis %d full %lld ranges", nm, t->axis, (long long)t->full_dim);
        for (int k = 0; k < t->nranges; k++)
            sb_printf(&b, " %lld %lld", (long long)(t->start[k] - (int64_t)st->tp_rank * t->len[k]),
                      (long long)t->len[k]);
        sb_printf(&b, "\n");
        free(nm);
    }
    for (int i = 0; i < st->nxfers; i++) {
        const PartXfer *x = &st->xfers[i];
        sb_printf(&b, "xfer %d %s %s peer %d rows %lld row_bytes %lld\n", x->id,
                  x->send ? "send" : "recv", x->kind == PX_ACT ? "act" : "grad", x->peer,
                  (long long)x->rows, (long long)x->row_bytes);
    }
    sb_printf(&b, "end\n");
    return b.s;
}

/* ------------------------------------------------------------ calls */

static LeArg ptr_arg(const MpLoc *l) {
    LeArg a = {.kind = l->region == HETC_BUF_SLOT ? LE_ARG_SLOT : LE_ARG_ARENA, .off = l->off};
    return a;
}
static LeArg i32_arg(int64_t v) { return (LeArg){.kind = LE_ARG_I32, .i = v}; }
static LeArg i64_arg(int64_t v) { return (LeArg){.kind = LE_ARG_I64, .i = v}; }
static LeArg arena_arg(int64_t off) { return (LeArg){.kind = LE_ARG_ARENA, .off = off}; }

/* the location of a value an action passes by pointer: arena or slot */
static int ptr_loc(const MemPlan *mp, const PartStage *st, int graph, const IrValue *v,
                   const char *what, LeArg *a, IrError *err) {
    const MpLoc *l = memplan_loc(mp, st, graph, v);
    if (!l || (l->region != HETC_BUF_ARENA && l->region != HETC_BUF_SLOT))
        return ir_errorf(err, "stage %d: %s '%s' has no buffer (a constant or unplaced value)",
                         st->stage, what, v ? v->name : "(null)");
    *a = ptr_arg(l);
    return 0;
}

/* lower_node's view of the plan (LnLocFn) */
typedef struct LocCtx {
    const MemPlan *mp;
    const PartStage *st;
    int graph;
} LocCtx;
static int value_loc(void *u, const IrValue *v, LeArg *a) {
    const LocCtx *lc = u;
    const MpLoc *l = memplan_loc(lc->mp, lc->st, lc->graph, v);
    if (!l) return -1;
    if (l->region == HETC_BUF_CONST) return 1;
    if (l->region != HETC_BUF_ARENA && (l->region != HETC_BUF_SLOT || lc->graph)) return -1;
    *a = ptr_arg(l);
    return 0;
}

static int node_call(const MemPlan *mp, const PartStage *st, int graph, int fn, int idx,
                     int tp_bf16, LeCall *c, IrError *err) {
    const IrGraph *g = graph ? st->update : st->train;
    const IrNode *n = g->nodes[idx];
    if (n->op == IR_OP_TP_ALL_REDUCE) { /* the sum over the stage's TP group, by the runtime */
        if (n->in[0]->dtype != IR_F32)
            return ir_errorf(err, "stage %d: TpAllReduce '%s' of %s (f32 only)", st->stage,
                             n->name, ir_dtype_name(n->in[0]->dtype));
        /* op "max": the vocab-parallel loss's row max (tp_shard_vocab.c) */
        const char *op = ir_attr_string(n, "op", "sum");
        if (strcmp(op, "sum") && strcmp(op, "max"))
            return ir_errorf(err, "stage %d: TpAllReduce '%s': op '%s' (sum or max)", st->stage,
                             n->name, op);
        c->fn = strcmp(op, "max") ? (tp_bf16 && tp_sum_bf16(n) ? "hetrt_tp_allreduce_bf16"
                                                               : "hetrt_tp_allreduce")
                                  : "hetrt_tp_allreduce_max";
        c->nargs = 3;
        c->args[2] = i64_arg(ir_shape_numel(&n->in[0]->shape));
        return ptr_loc(mp, st, graph, n->out[0], "TpAllReduce output", &c->args[0], err) ||
               ptr_loc(mp, st, graph, n->in[0], "TpAllReduce input", &c->args[1], err);
    }
    int nb = n->nin + n->nout;
    int64_t *bufs = ir_xcalloc((size_t)nb + 1, sizeof *bufs);
    for (int k = 0; k < nb; k++) {
        const IrValue *v = k < n->nin ? n->in[k] : n->out[k - n->nin];
        if (!v) continue; /* HETC_BUF_NONE */
        const MpLoc *l = memplan_loc(mp, st, graph, v);
        if (!l || l->region == HETC_BUF_NONE) {
            free(bufs);
            return ir_errorf(err, "stage %d, %s graph: node %d '%s' (%s): value '%s' unplaced",
                             st->stage, graph ? "update" : "train", idx, n->name,
                             ir_op_name(n->op), v->name);
        }
        bufs[k] = l->region == HETC_BUF_CONST ? HETC_BUF(HETC_BUF_CONST, 0)
                                              : HETC_BUF(l->region, l->off);
    }
    c->fn = "hetrt_node";
    c->nargs = 5;
    c->args[0] = i32_arg(graph ? HETC_GRAPH_UPDATE : HETC_GRAPH_TRAIN);
    c->args[1] = i32_arg(idx);
    c->args[2] = arena_arg(0);
    c->args[3] = fn == MP_FN_UPDATE ? (LeArg){.kind = LE_ARG_NULL}
                                    : (LeArg){.kind = LE_ARG_SLOT, .off = 0};
    c->args[4] = (LeArg){.kind = LE_ARG_I64S, .n = nb, .vals = bufs};
    return 0;
}

static int action_call(const MemPlan *mp, const PartStage *st, int fn, const MpAction *a,
                       IrDType tok, int tp_bf16, LeCall *c, IrError *err) {
    int graph = fn == MP_FN_UPDATE;
    const MpParam *p = a->kind >= MP_ACCUM ? &mp->params[a->index] : NULL;
    memset(c, 0, sizeof *c);
    switch (a->kind) {
    case MP_NODE: return node_call(mp, st, graph, fn, a->index, tp_bf16, c, err);
    case MP_TOKENS: {
        const IrValue *v = st->train->values[a->index ? mp->targets_index : mp->data_index];
        IrDType dt = a->index ? v->dtype : tok;
        c->fn = "hetrt_tokens", c->nargs = 3;
        c->args[0] = i32_arg(a->index);
        c->args[2] = i32_arg(dt == IR_I32 ? RT_DT_I32 : RT_DT_I64);
        return ptr_loc(mp, st, 0, v, "token input", &c->args[1], err);
    }
    case MP_RECV:
    case MP_SEND: {
        const IrValue *v = ir_graph_find_value(st->train, st->xfers[a->index].value);
        c->fn = a->kind == MP_RECV ? "hetrt_recv" : "hetrt_send", c->nargs = 2;
        c->args[0] = i32_arg(a->index);
        return ptr_loc(mp, st, 0, v, "transferred value", &c->args[1], err);
    }
    case MP_LOSS:
        c->fn = "hetrt_loss", c->nargs = 1;
        return ptr_loc(mp, st, 0, mp->loss, "loss", &c->args[0], err);
    case MP_ACCUM:
        if (mp->zero >= 2) { /* ZeRO-2: reduce-scatter into this rank's gradient shard */
            c->fn = "hetrt_accum_scatter", c->nargs = 4;
            c->args[0] = i32_arg(a->index); /* the param record's index */
            c->args[1] = arena_arg(p->acc_off);
            c->args[3] = i64_arg(p->numel);
            return ptr_loc(mp, st, 0, p->grad, "gradient", &c->args[2], err);
        }
        c->fn = "hetrt_accum", c->nargs = 3;
        c->args[0] = arena_arg(p->acc_off);
        c->args[2] = i64_arg(p->numel);
        return ptr_loc(mp, st, 0, p->grad, "gradient", &c->args[1], err);
    case MP_COPY: {
        int64_t dst = a->sub == 0 ? p->zp_off : a->sub == 1 ? p->m_off : p->v_off;
        if (dst < 0)
            return ir_errorf(err, "stage %d: update output '%s' has no state buffer to carry into",
                             st->stage, p->upd[a->sub]->name);
        c->fn = "hetrt_copy", c->nargs = 3;
        c->args[0] = arena_arg(dst);
        c->args[2] = i64_arg(p->zlen * 4); /* the whole tensor, or the ZeRO slice */
        return ptr_loc(mp, st, 1, p->upd[a->sub], "update output", &c->args[1], err);
    }
    case MP_ZERO:
        c->fn = "hetrt_zero", c->nargs = 2;
        c->args[0] = arena_arg(p->acc_off);
        c->args[1] = i64_arg(p->acc_len * 4); /* the whole tensor, or the ZeRO-2 shard */
        return 0;
    }
    return ir_errorf(err, "stage %d: internal: action kind %d", st->stage, (int)a->kind);
}

/* ------------------------------------------------------------ fused kernels */

/* The fused groups of the train and update graphs: they outlive lower_stage
 * (the program's define hook emits their kernels), freed by lower_stage_free. */
typedef struct FuseSet {
    FuseGraph g[2];
} FuseSet;

static int define_fused(const void *ctx, void *mod, IrError *err) {
    const FuseSet *fs = ctx;
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < fs->g[g].ngroups; i++)
            if (fk_emit_host(mod, &fs->g[g].groups[i].k, err)) return -1;
    return 0;
}

static FuseSet *fuse_stage(const PartStage *st, IrError *err) {
    FuseSet *fs = ir_xcalloc(1, sizeof *fs);
    char pre[48];
    snprintf(pre, sizeof pre, "fused_s%d_t", st->stage);
    int *ord = memplan_update_order(st->update), n = st->update->nnodes;
    int *pos = ir_xcalloc((size_t)n + 1, sizeof *pos);
    for (int i = 0; i < n; i++) pos[ord[i]] = i;
    int rc = fuse_graph(st->train, NULL, pre, &fs->g[0], err);
    snprintf(pre, sizeof pre, "fused_s%d_u", st->stage);
    if (!rc) rc = fuse_graph(st->update, pos, pre, &fs->g[1], err);
    free(ord);
    free(pos);
    if (rc) {
        fuse_free(&fs->g[0]);
        fuse_free(&fs->g[1]);
        free(fs);
        return NULL;
    }
    return fs;
}

/* A device backend's fused kernels are not host code: nothing to define in
 * the stage module (their PTX travels in the launch calls). */
static int define_fused_device(const void *ctx, void *mod, IrError *err) {
    (void)ctx, (void)mod, (void)err;
    return 0;
}

static int fused_prog(const LeProgram *prog) {
    return prog->define == define_fused || prog->define == define_fused_device;
}

/* NVPTX lowers every kernel but those that need libm (fused_llvm.h) */
static int ptx_lowerable(const FkKernel *k) { return !fk_needs_libm(k); }

/* the call running group gr: its kernel on (inputs..., outputs...) */
static void fused_call(LnCtx *c, const FuseGroup *gr) {
    LeCall *k = ln_push(c, gr->k.name);
    for (int i = 0; i < gr->nins; i++) ln_ptr(c, k, gr->ins[i]);
    for (int i = 0; i < gr->nouts; i++) ln_ptr(c, k, gr->outs[i]);
}

static LeArg text_arg(const char *s) {
    size_t n = strlen(s) + 1; /* the runtime reads it as a C string */
    char *b = ir_xmalloc(n);
    memcpy(b, s, n);
    return (LeArg){.kind = LE_ARG_BYTES, .bytes = b, .nbytes = (int64_t)n};
}

/* The device backend's call (--backend=cuda --fuse): hetrt_cu_launch of the
 * group's kernel, its PTX module and name as constants of the binary, its
 * pointers padded with NULL to the entry's 16; constant inputs flagged. */
static int fused_call_device(LnCtx *c, const FuseGroup *gr, IrError *err) {
    const FkKernel *kp = &gr->k;
    char *ptx = NULL;
    if (fk_ptx(&kp, 1, "sm_80", &ptx, NULL, err)) return -1;
    LeCall *k = ln_push(c, "hetrt_cu_launch");
    k->args[k->nargs++] = text_arg(ptx);
    free(ptx);
    k->args[k->nargs++] = text_arg(kp->name);
    int na = gr->nins + gr->nouts, mask_at;
    ln_i64(k, fk_numel(kp));
    ln_i32(k, na);
    mask_at = k->nargs;
    ln_i32(k, 0);
    int64_t cb[FK_MAX_ARGS];
    for (int i = 0; i < na; i++) {
        const IrValue *v = i < gr->nins ? gr->ins[i] : gr->outs[i - gr->nins];
        cb[i] = (int64_t)ir_value_bytes(v);
    }
    ln_i64s(k, na, cb);
    int64_t mask = 0;
    for (int i = 0; i < na; i++) {
        ln_ptr(c, k, i < gr->nins ? gr->ins[i] : gr->outs[i - gr->nins]);
        if (k->args[k->nargs - 1].kind == LE_ARG_BYTES) mask |= (int64_t)1 << i;
    }
    for (int i = na; i < FK_MAX_ARGS; i++) ln_null(k);
    k->args[mask_at].i = mask;
    return 0;
}

int lower_stage_write_ptx(const LeProgram *prog, const char *path, IrError *err) {
    if (prog->define != define_fused_device) return 0;
    const FuseSet *fs = prog->define_ctx;
    int n = fs->g[0].ngroups + fs->g[1].ngroups, j = 0;
    if (!n) return 0;
    const FkKernel **ks = ir_xcalloc((size_t)n, sizeof *ks);
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < fs->g[g].ngroups; i++) ks[j++] = &fs->g[g].groups[i].k;
    char *ptx = NULL;
    int rc = fk_ptx(ks, n, "sm_80", &ptx, NULL, err);
    free(ks);
    if (rc) return -1;
    FILE *f = fopen(path, "w");
    if (!f) rc = ir_errorf(err, "cannot write %s: %s", path, strerror(errno));
    else {
        fputs(ptx, f);
        if (fclose(f)) rc = ir_errorf(err, "cannot write %s", path);
    }
    free(ptx);
    return rc;
}

void lower_stage_print_fused(const LeProgram *prog, const PartStage *st, FILE *f) {
    if (!fused_prog(prog)) return;
    const FuseSet *fs = prog->define_ctx;
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < fs->g[g].ngroups; i++) {
            const FuseGroup *gr = &fs->g[g].groups[i];
            const IrGraph *gg = g ? st->update : st->train;
            fprintf(f, "# %s graph nodes:", g ? "update" : "train");
            for (int j = 0; j < gr->nnodes; j++)
                fprintf(f, " %d %s '%s'", gr->nodes[j], ir_op_name(gg->nodes[gr->nodes[j]]->op),
                        gg->nodes[gr->nodes[j]]->name);
            fprintf(f, "\n# in:");
            for (int j = 0; j < gr->nins; j++) fprintf(f, " %s", gr->ins[j]->name);
            fprintf(f, "\n# out:");
            for (int j = 0; j < gr->nouts; j++) fprintf(f, " %s", gr->outs[j]->name);
            fprintf(f, "\n");
            fk_print(&gr->k, f);
        }
}

/* ------------------------------------------------------------ entry */

int lower_stage_memplan(const PartStage *st, int nslots, int fuse, MemPlan *mp, IrError *err) {
    memset(mp, 0, sizeof *mp);
    FuseSet *fs = NULL;
    if (fuse && !(fs = fuse_stage(st, err))) return -1;
    int rc = memplan_build_fused(st, nslots, fs ? &fs->g[0] : NULL, fs ? &fs->g[1] : NULL, mp, err);
    if (fs) {
        fuse_free(&fs->g[0]);
        fuse_free(&fs->g[1]);
        free(fs);
    }
    mp->fuse[0] = mp->fuse[1] = NULL;
    return rc;
}

void lower_stage_free(LeProgram *prog) {
    if (!prog) return;
    for (int f = 0; f < prog->nfuncs; f++) {
        const LeFunc *fn = &prog->funcs[f];
        for (int c = 0; c < fn->ncalls; c++) lower_call_free((LeCall *)&fn->calls[c]);
        free((void *)fn->calls);
    }
    free((void *)prog->funcs);
    if (prog->externs && prog->externs != lower_hetrt_externs &&
        prog->externs != lower_hetrt_externs_tp) /* direct: the combined list */
        free((void *)prog->externs);
    free((void *)prog->sched);
    free((void *)prog->ir_train);
    free((void *)prog->ir_update);
    if (fused_prog(prog)) {
        FuseSet *fs = (FuseSet *)prog->define_ctx;
        fuse_free(&fs->g[0]);
        fuse_free(&fs->g[1]);
        free(fs);
    }
    memset(prog, 0, sizeof *prog);
}

int lower_stage_interprets(const LeProgram *prog) {
    for (int f = 0; f < prog->nfuncs; f++)
        for (int i = 0; i < prog->funcs[f].ncalls; i++)
            if (prog->funcs[f].calls[i].fn && !strcmp(prog->funcs[f].calls[i].fn, "hetrt_node"))
                return 1;
    return 0;
}

int lower_stage(const PartStage *st, const LowerOpts *o, LeProgram *prog, char **config,
                MemPlan *mp, IrError *err) {
    return lower_stage_stats(st, o, prog, config, mp, NULL, err);
}

void lower_stats_free(LowerStats *s) {
    if (!s) return;
    free(s->interp_ops);
    free(s->why);
    memset(s, 0, sizeof *s);
}

int lower_stage_stats(const PartStage *st, const LowerOpts *o, LeProgram *prog, char **config,
                      MemPlan *mp, LowerStats *stats, IrError *err) {
    memset(prog, 0, sizeof *prog);
    *config = NULL;
    memset(mp, 0, sizeof *mp);
    if (!st || !o || !st->train || !st->update)
        return ir_errorf(err, "lower_stage: no stage, options or graphs");
    if (check_opts(st, o, err)) return -1;
    FuseSet *fs = NULL;
    /* generated kernels: host loops where the backend runs host code (on
     * unless --no-fuse), NVPTX kernels launched by a device backend (only
     * with --fuse: not yet run on a GPU, docs/CUDA.md) */
    const LowerBackend *be = o->backend ? o->backend : &lower_backend_host;
    int device = be->fuse == LOWER_FUSE_DEVICE;
    int want = be->fuse == LOWER_FUSE_HOST ? o->fuse >= 1 : device ? o->fuse == 2 : 0;
    if (o->direct && want && !(fs = fuse_stage(st, err))) return -1;
    if (fs && device) {
        fuse_keep(st->train, &fs->g[0], ptx_lowerable);
        fuse_keep(st->update, &fs->g[1], ptx_lowerable);
    }
    if (fs) /* freed with prog */
        prog->define = device ? define_fused_device : define_fused, prog->define_ctx = fs;
    if (memplan_build_fused(st, o->nslots, fs ? &fs->g[0] : NULL, fs ? &fs->g[1] : NULL, mp,
                            err)) {
        lower_stage_free(prog);
        return -1;
    }
    IrDType tok = o->token_dtype != IR_UNDEF ? o->token_dtype : IR_I64;
    if (mp->data_index >= 0) {
        IrDType gd = st->train->values[mp->data_index]->dtype;
        if (o->token_dtype != IR_UNDEF && o->token_dtype != gd) {
            memplan_free(mp);
            lower_stage_free(prog);
            return ir_errorf(err, "stage %d: token dtype %s requested, the graph's '%s' is %s",
                             st->stage, ir_dtype_name(o->token_dtype), st->data_input,
                             ir_dtype_name(gd));
        }
        tok = gd;
    }
    int want_sgd = !strcmp(o->optimizer, "sgd"), has_v = 0;
    for (int i = 0; i < mp->nparams; i++) has_v |= mp->params[i].v_off >= 0;
    if (mp->nparams && want_sgd == has_v) {
        memplan_free(mp);
        lower_stage_free(prog);
        return ir_errorf(err, "stage %d: optimizer %s, but the update graph %s second moments",
                         st->stage, o->optimizer, has_v ? "keeps" : "has no");
    }

    static const char *const fnames[MP_NFN + 1] = {"init", "forward", "backward", "update"};
    LeFunc *funcs = ir_xcalloc(MP_NFN + 1, sizeof *funcs);
    prog->funcs = funcs;
    prog->nfuncs = MP_NFN + 1;
    funcs[0].name = fnames[0];
    int rc = 0;
    int hist[IR_OP_COUNT] = {0};
    int interp_graph[2] = {0, 0}; /* some hetrt_node call runs a node of graph g */
    char why[200] = "";
    if (stats) memset(stats, 0, sizeof *stats);
    for (int f = 0; f < MP_NFN && !rc; f++) {
        LnOut out = {0};
        funcs[f + 1].name = fnames[f + 1];
        for (int i = 0; i < mp->nacts[f] && !rc; i++) {
            const MpAction *a = &mp->acts[f][i];
            int graph = f == MP_FN_UPDATE;
            const IrNode *n = a->kind == MP_NODE ? (graph ? st->update : st->train)->nodes[a->index]
                                                 : NULL;
            const FuseGroup *gr = n && fs ? fuse_group_at(&fs->g[graph], a->index) : NULL;
            if (gr) { /* a generated kernel runs the whole group */
                LocCtx lc = {mp, st, graph};
                LnCtx c = {.n = (IrNode *)n, .loc = value_loc, .u = &lc, .tp = st->tp,
                           .out = &out};
                if (device) {
                    if (fused_call_device(&c, gr, err)) {
                        rc = -1;
                        break;
                    }
                } else {
                    fused_call(&c, gr);
                }
                if (c.bad) {
                    rc = ir_errorf(err, "stage %d: fused kernel %s: a value has no buffer",
                                   st->stage, gr->k.name);
                    break;
                }
                if (stats) stats->direct += gr->nnodes, stats->fused += gr->nnodes, stats->kernels++;
                continue;
            }
            if (n && o->direct && n->op != IR_OP_TP_ALL_REDUCE) {
                LocCtx lc = {mp, st, graph};
                LnCtx c = {.n = (IrNode *)n, .loc = value_loc, .u = &lc, .tp = st->tp,
                           .out = &out};
                if (be->lower_node(&c)) {
                    if (stats) stats->direct++;
                    continue;
                }
                if (!why[0])
                    snprintf(why, sizeof why, "%s node %d '%s' (%s): %s",
                             graph ? "update" : "train", a->index, n->name, ir_op_name(n->op),
                             c.why);
            }
            if (n && stats) {
                if (n->op == IR_OP_TP_ALL_REDUCE) stats->direct++;
                else stats->interp++, hist[n->op]++;
            }
            LeCall *k = ln_push(&(LnCtx){.out = &out}, NULL);
            rc = action_call(mp, st, f, a, tok, o->tp_reduce_bf16, k, err);
            if (!rc && k->fn && !strcmp(k->fn, "hetrt_node")) interp_graph[graph] = 1;
        }
        funcs[f + 1].calls = out.calls; /* freed by lower_stage_free even when failing */
        funcs[f + 1].ncalls = out.n;
    }
    if (stats) {
        Sb b = {0};
        sb_printf(&b, "%s", "");
        for (int op = 0; op < IR_OP_COUNT; op++)
            if (hist[op]) sb_printf(&b, "%s%s x%d", b.n ? ", " : "", ir_op_name((IrOp)op), hist[op]);
        stats->interp_ops = b.s;
        stats->why = ir_xmalloc(strlen(why) + 1);
        strcpy(stats->why, why);
    }
    if (!rc) {
        LeSched *sc = ir_xcalloc((size_t)o->nsched, sizeof *sc);
        memcpy(sc, o->sched, sizeof *sc * (size_t)o->nsched);
        prog->sched = sc;
        prog->nsched = o->nsched;
        prog->stage = st->stage;
        prog->arena_bytes = mp->arena_bytes;
        prog->slot_base = mp->slot_base;
        prog->slot_bytes = mp->slot_bytes;
        prog->nslots = mp->nslots;
        prog->externs = st->tp > 1 ? lower_hetrt_externs_tp : lower_hetrt_externs;
        prog->nexterns = st->tp > 1 ? lower_hetrt_nexterns_tp : lower_hetrt_nexterns;
        if (o->direct) { /* the runtime's entries, the kernels', the backend's own
                          * (CUDA: hetrt_cu_*), the generated kernels' */
            int ngen = fs && !device ? fs->g[0].ngroups + fs->g[1].ngroups : 0;
            int ncu = be->nexterns;
            LeExtern *ex = ir_xcalloc((size_t)(prog->nexterns + lower_node_nexterns + ncu + ngen),
                                      sizeof *ex);
            memcpy(ex, prog->externs, sizeof *ex * (size_t)prog->nexterns);
            memcpy(ex + prog->nexterns, lower_node_externs,
                   sizeof *ex * (size_t)lower_node_nexterns);
            int nx = prog->nexterns + lower_node_nexterns;
            if (ncu) memcpy(ex + nx, be->externs, sizeof *ex * (size_t)ncu);
            nx += ncu;
            for (int g = 0; ngen && g < 2; g++)
                for (int i = 0; i < fs->g[g].ngroups; i++) {
                    const FkKernel *k = &fs->g[g].groups[i].k;
                    LeExtern *x = &ex[nx++];
                    x->name = k->name;
                    x->ret = LE_VOID;
                    x->nparams = k->nin + k->nout;
                    for (int a = 0; a < x->nparams; a++) x->params[a] = LE_PTR;
                }
            prog->externs = ex;
            prog->nexterns = nx;
        }
        /* the IR texts only for graphs some hetrt_node call runs a node of:
         * a program of direct calls carries none (docs/STAGE_ABI.md, ABI 3) */
        if ((interp_graph[HETC_GRAPH_TRAIN] &&
             !(prog->ir_train = graph_text(st->train, st->stage, "train", err))) ||
            (interp_graph[HETC_GRAPH_UPDATE] &&
             !(prog->ir_update = graph_text(st->update, st->stage, "update", err))))
            rc = -1;
    }
    if (rc) {
        lower_stage_free(prog);
        memplan_free(mp);
        lower_stats_free(stats);
        return -1;
    }
    *config = config_text(st, o, mp, tok);
    prog->config = *config;
    return 0;
}
