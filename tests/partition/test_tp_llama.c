/* Tensor-parallel LLaMA patterns (passes/tp_shard.h): the gated MLP
 * (SwiGLU) and attention with rotary embedding and GQA, against the
 * unsharded graph (tests/partition/tp_sim.h: forward output and every
 * gradient, all TP ranks simulated in one host-executor run).
 *
 * A LLaMA block (RMSNorm, q/k/v Linears without bias, rotary on q and k by
 * cos/sin constant tables, k/v heads repeated Hkv -> H by Unsqueeze/Expand/
 * Reshape, Attention, out Linear, RMSNorm, down(act(gate(x)) * up(x))) with
 * random shapes is sharded for TP in {2, 4}; pattern counts are checked per
 * rank.  Cases tp must leave replicated: Hkv not divisible by tp, and a
 * rotary table that differs per head (not head-agnostic).  Then the real
 * LLaMA exports (tests/models/llama_op14/op17.onnx): every layer's
 * attention and SwiGLU MLP are found (tp_shard_find) and sharded, and every
 * rank's logits equal the unsharded ones. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostexec.h"
#include "onnx_import.h"
#include "pass.h"
#include "tp_shard.h"
#include "tp_sim.h"

typedef struct Dims {
    int64_t B, T, H, Hkv, Dh, F;
    int act_first;   /* Mul(act(gate), up) or Mul(up, act(gate)) */
    IrOp act;        /* SiLU or Gelu */
    int cos_rank4;   /* cos/sin as [1, 1, T, Dh] instead of [T, Dh] */
    int per_head;    /* cos/sin as [H, T, Dh]: rotary differs per head (not shardable) */
    int merge_minus1; /* heads merge Reshape target [B, T, -1] */
} Dims;

static IrValue *f32_const(IrGraph *g, const char *name, int rank, const int64_t *dims,
                          const float *d) {
    IrShape s = ir_shape_make(rank, dims);
    IrValue *v = ir_value_new(g, name, IR_F32, &s, IR_VK_CONST);
    v->shape_known = 1;
    int64_t n = ir_shape_numel(&s);
    float *c = malloc((size_t)n * sizeof *c);
    memcpy(c, d, (size_t)n * sizeof *c);
    ir_value_set_data(v, c, (size_t)n * sizeof *c);
    return v;
}

static IrValue *rms(IrGraph *g, const char *nm, IrValue *x, int64_t D) {
    char pn[64];
    snprintf(pn, sizeof pn, "%s.g", nm);
    IrValue *in[2] = {x, tp_sim_param(g, pn, 1, &D, 1.0)};
    IrValue *o = tp_sim_op1(g, IR_OP_RMS_NORM, nm, 2, in);
    ir_node_set_int(o->producer, "axis", -1);
    ir_node_set_float(o->producer, "epsilon", 1e-6);
    return o;
}

static IrValue *transpose(IrGraph *g, const char *nm, IrValue *x, int n, const int64_t *perm) {
    IrValue *o = tp_sim_op1(g, IR_OP_TRANSPOSE, nm, 1, &x);
    ir_node_set_ints(o->producer, "perm", n, perm);
    return o;
}

static IrValue *reshape(IrGraph *g, const char *nm, IrValue *x, int n, const int64_t *dims) {
    char cn[64];
    snprintf(cn, sizeof cn, "%s.shape", nm);
    IrValue *in[2] = {x, tp_sim_shape_const(g, cn, n, dims)};
    return tp_sim_op1(g, IR_OP_RESHAPE, nm, 2, in);
}

/* x[..., lo:hi] on axis 3 */
static IrValue *slice_last(IrGraph *g, const char *nm, IrValue *x, int64_t lo, int64_t hi) {
    char a[64], b[64], c[64];
    snprintf(a, sizeof a, "%s.starts", nm);
    snprintf(b, sizeof b, "%s.ends", nm);
    snprintf(c, sizeof c, "%s.axes", nm);
    int64_t ax = 3;
    IrValue *in[4] = {x, ir_const_i64s(g, a, 1, &lo), ir_const_i64s(g, b, 1, &hi),
                      ir_const_i64s(g, c, 1, &ax)};
    return tp_sim_op1(g, IR_OP_SLICE, nm, 4, in);
}

/* rotary (rotate-half form): x * cos + concat(-x2, x1) * sin */
static IrValue *rotary(IrGraph *g, const char *nm, IrValue *x, const Dims *d, IrValue *cs,
                       IrValue *sn) {
    char b[64];
    int64_t h = d->Dh / 2;
    IrValue *in[2] = {x, cs};
    snprintf(b, sizeof b, "%s.xcos", nm);
    IrValue *xc = tp_sim_op1(g, IR_OP_MUL, b, 2, in);
    snprintf(b, sizeof b, "%s.x1", nm);
    IrValue *x1 = slice_last(g, b, x, 0, h);
    snprintf(b, sizeof b, "%s.x2", nm);
    IrValue *x2 = slice_last(g, b, x, h, INT64_MAX);
    snprintf(b, sizeof b, "%s.neg", nm);
    IrValue *nx2 = tp_sim_op1(g, IR_OP_NEG, b, 1, &x2);
    in[0] = nx2, in[1] = x1;
    snprintf(b, sizeof b, "%s.rot", nm);
    IrValue *rot = tp_sim_op1(g, IR_OP_CONCAT, b, 2, in);
    ir_node_set_int(rot->producer, "axis", -1);
    in[0] = rot, in[1] = sn;
    snprintf(b, sizeof b, "%s.rsin", nm);
    IrValue *rs = tp_sim_op1(g, IR_OP_MUL, b, 2, in);
    in[0] = xc, in[1] = rs;
    return tp_sim_op1(g, IR_OP_ADD, nm, 2, in);
}

/* [B, Hkv, T, Dh] -> [B, H, T, Dh], each kv head repeated H / Hkv times */
static IrValue *repeat_kv(IrGraph *g, const char *nm, IrValue *x, const Dims *d) {
    char b[64];
    int64_t rep = d->H / d->Hkv, ax = 2, e[5] = {d->B, d->Hkv, rep, d->T, d->Dh};
    int64_t o[4] = {d->B, d->H, d->T, d->Dh};
    snprintf(b, sizeof b, "%s.axes", nm);
    IrValue *in[2] = {x, ir_const_i64s(g, b, 1, &ax)};
    snprintf(b, sizeof b, "%s.unsq", nm);
    IrValue *u = tp_sim_op1(g, IR_OP_UNSQUEEZE, b, 2, in);
    snprintf(b, sizeof b, "%s.expand_shape", nm);
    in[0] = u, in[1] = ir_const_i64s(g, b, 5, e);
    snprintf(b, sizeof b, "%s.expand", nm);
    IrValue *ex = tp_sim_op1(g, IR_OP_EXPAND, b, 2, in);
    return reshape(g, nm, ex, 4, o);
}

static IrGraph *block(const Dims *d) {
    IrGraph *g = ir_graph_new("llama_block");
    int64_t D = d->H * d->Dh;
    IrValue *x = tp_sim_input_x(g, d->B, d->T, D);
    /* rotary tables: angle t * theta^(-2i/Dh), the halves repeated */
    int64_t nh = d->per_head ? d->H : 1, ntab = nh * d->T * d->Dh;
    float *c = malloc((size_t)ntab * sizeof *c), *s = malloc((size_t)ntab * sizeof *s);
    for (int64_t h = 0; h < nh; h++)
        for (int64_t t = 0; t < d->T; t++)
            for (int64_t i = 0; i < d->Dh; i++) {
                double f = pow(10000.0, -2.0 * (double)(i % (d->Dh / 2)) / (double)d->Dh);
                double a = (double)t * f * (1.0 + 0.5 * (double)h);
                c[(h * d->T + t) * d->Dh + i] = (float)cos(a);
                s[(h * d->T + t) * d->Dh + i] = (float)sin(a);
            }
    int64_t t2[2] = {d->T, d->Dh}, t4[4] = {1, 1, d->T, d->Dh}, th[3] = {d->H, d->T, d->Dh};
    int tr = d->per_head ? 3 : d->cos_rank4 ? 4 : 2;
    const int64_t *td = d->per_head ? th : d->cos_rank4 ? t4 : t2;
    IrValue *cs = f32_const(g, "rope.cos", tr, td, c), *sn = f32_const(g, "rope.sin", tr, td, s);
    free(c), free(s);

    IrValue *ln1 = rms(g, "attn_norm", x, D), *in[3];
    int64_t wq[2] = {D, D}, wkv[2] = {D, d->Hkv * d->Dh}, perm[4] = {0, 2, 1, 3};
    in[0] = ln1, in[1] = tp_sim_param(g, "wq", 2, wq, 0.3);
    IrValue *q = tp_sim_op1(g, IR_OP_LINEAR, "q", 2, in);
    in[1] = tp_sim_param(g, "wk", 2, wkv, 0.3);
    IrValue *k = tp_sim_op1(g, IR_OP_LINEAR, "k", 2, in);
    in[1] = tp_sim_param(g, "wv", 2, wkv, 0.3);
    IrValue *v = tp_sim_op1(g, IR_OP_LINEAR, "v", 2, in);
    int64_t qh[4] = {d->B, d->T, d->H, d->Dh}, kh[4] = {d->B, d->T, d->Hkv, d->Dh};
    q = transpose(g, "q.t", reshape(g, "q.heads", q, 4, qh), 4, perm);
    k = transpose(g, "k.t", reshape(g, "k.heads", k, 4, kh), 4, perm);
    v = transpose(g, "v.t", reshape(g, "v.heads", v, 4, kh), 4, perm);
    q = rotary(g, "q.rope", q, d, cs, sn);
    k = rotary(g, "k.rope", k, d, cs, sn);
    if (d->H != d->Hkv) {
        k = repeat_kv(g, "k.rep", k, d);
        v = repeat_kv(g, "v.rep", v, d);
    }
    in[0] = q, in[1] = k, in[2] = v;
    IrValue *at = tp_sim_op1(g, IR_OP_ATTENTION, "attn.core", 3, in);
    ir_node_set_int(at->producer, "causal", 1);
    ir_node_set_float(at->producer, "scale", 1.0 / sqrt((double)d->Dh));
    int64_t m3[3] = {d->B, d->T, d->merge_minus1 ? -1 : D};
    IrValue *am = reshape(g, "attn.merge", transpose(g, "attn.merge_t", at, 4, perm), 3, m3);
    in[0] = am, in[1] = tp_sim_param(g, "wo", 2, wq, 0.3);
    IrValue *o = tp_sim_op1(g, IR_OP_LINEAR, "attn.out", 2, in);
    in[0] = x, in[1] = o;
    IrValue *r1 = tp_sim_op1(g, IR_OP_ADD, "res1", 2, in);
    IrValue *ln2 = rms(g, "ffn_norm", r1, D);
    int64_t w1[2] = {D, d->F}, w2[2] = {d->F, D};
    in[0] = ln2, in[1] = tp_sim_param(g, "w_gate", 2, w1, 0.3);
    IrValue *gt = tp_sim_op1(g, IR_OP_LINEAR, "mlp.gate", 2, in);
    in[1] = tp_sim_param(g, "w_up", 2, w1, 0.3);
    IrValue *up = tp_sim_op1(g, IR_OP_LINEAR, "mlp.up", 2, in);
    IrValue *ac = tp_sim_op1(g, d->act, "mlp.act", 1, &gt);
    in[0] = d->act_first ? ac : up, in[1] = d->act_first ? up : ac;
    IrValue *h = tp_sim_op1(g, IR_OP_MUL, "mlp.mul", 2, in);
    in[0] = h, in[1] = tp_sim_param(g, "w_down", 2, w2, 0.3);
    IrValue *dn = tp_sim_op1(g, IR_OP_LINEAR, "mlp.down", 2, in);
    in[0] = r1, in[1] = dn;
    IrValue *y = tp_sim_op1(g, IR_OP_ADD, "y", 2, in);
    return tp_sim_output(g, y, "llama block");
}

typedef struct Expect {
    int attention, mlp, skipped;
} Expect;

static void check_counts(const TpShardResult *r, int rank, const char *what, void *arg) {
    const Expect *e = arg;
    /* one TpAllReduce per row-parallel Linear; one TpCopy per distinct
     * column input (q/k/v share theirs, gate/up theirs) */
    int pats = e->attention + e->mlp;
    CHECK(r->attention == e->attention && r->mlp == e->mlp && r->skipped == e->skipped &&
              r->allreduce == pats && r->copies == pats,
          "%s: rank %d: %d attention %d mlp %d skipped %d all-reduces %d copies (want %d %d %d)",
          what, rank, r->attention, r->mlp, r->skipped, r->allreduce, r->copies, e->attention,
          e->mlp, e->skipped);
}

static double worst_all;

static void run_case(const Dims *d, int tp, const Expect *e) {
    char what[240];
    snprintf(what, sizeof what,
             "llama block B=%lld T=%lld H=%lld Hkv=%lld Dh=%lld F=%lld %s%s%s%s%s tp=%d",
             (long long)d->B, (long long)d->T, (long long)d->H, (long long)d->Hkv,
             (long long)d->Dh, (long long)d->F, d->act == IR_OP_SILU ? "SwiGLU" : "GeGLU",
             d->act_first ? "" : " (up first)", d->cos_rank4 ? " cos[1,1,T,Dh]" : "",
             d->per_head ? " per-head rotary" : "", d->merge_minus1 ? " merge[-1]" : "", tp);
    IrGraph *ref = block(d);
    /* the planner's view agrees with what tp_shard does */
    TpPattern *pat = NULL;
    int np = 0, sk = 0, na = 0, nm = 0;
    IrError err = {{0}};
    CHECK(!tp_shard_find(ref, tp, 0, 0, &pat, &np, &sk, &err), "%s: find: %s", what, err.msg);
    for (int i = 0; i < np; i++) {
        na += pat[i].kind == TP_PATTERN_ATTENTION;
        nm += pat[i].kind == TP_PATTERN_GATED_MLP;
        if (pat[i].kind == TP_PATTERN_GATED_MLP)
            CHECK(pat[i].ncolumn == 2 && pat[i].ninner == 2, "%s: gated MLP %d columns %d inner",
                  what, pat[i].ncolumn, pat[i].ninner);
    }
    CHECK(na == e->attention && nm == e->mlp && sk == e->skipped,
          "%s: tp_shard_find: %d attention %d gated MLP %d skipped", what, na, nm, sk);
    free(pat);
    double worst = tp_sim_run(ref, tp, what, check_counts, (void *)e);
    CHECK(worst >= 0 && worst <= 1e-4, "%s: worst relative error %.3g", what, worst);
    if (worst > worst_all) worst_all = worst;
    ir_graph_free(ref);
}

/* the LLaMA exports: every layer's attention and SwiGLU MLP found and
 * sharded (attention only where tp divides n_kv_head); every rank's logits
 * == unsharded */
static void llama_counts(const TpShardResult *r, int rank, const char *what, void *arg) {
    const Expect *e = arg;
    CHECK(r->attention == e->attention && r->mlp == e->mlp && r->skipped == e->skipped,
          "%s rank %d: %d attention, %d mlp, %d skipped of %d blocks", what, rank, r->attention,
          r->mlp, r->skipped, e->mlp);
}

static void check_llama(const char *path, int tp) {
    IrGraph *g = tp_sim_import(path, 16, 0, NULL);
    if (!g) return;
    IrError err = {{0}};
    int blocks = 0, kvh = 0;
    for (int i = 0; i < g->nnodes; i++) blocks += g->nodes[i]->op == IR_OP_ATTENTION;
    /* n_kv_head: the k Linear's width over the head dim */
    for (int i = 0; i < g->nnodes && !kvh; i++)
        if (g->nodes[i]->op == IR_OP_ATTENTION) {
            const IrNode *a = g->nodes[i];
            int64_t dh = a->in[0]->shape.dims[a->in[0]->shape.rank - 1];
            for (int j = 0; j < g->nnodes; j++)
                if (strstr(g->nodes[j]->name, "/layers.0/attention/wk/") &&
                    g->nodes[j]->op == IR_OP_LINEAR)
                    kvh = (int)(g->nodes[j]->out[0]->shape.dims[2] / dh);
        }
    int want_att = kvh % tp ? 0 : blocks, want_skip = blocks - want_att;
    TpPattern *pat = NULL;
    int np = 0, sk = 0, na = 0, nm = 0;
    CHECK(!tp_shard_find(g, tp, 0, 0, &pat, &np, &sk, &err), "%s: find: %s", path, err.msg);
    for (int i = 0; i < np; i++) {
        na += pat[i].kind == TP_PATTERN_ATTENTION;
        nm += pat[i].kind == TP_PATTERN_GATED_MLP;
    }
    free(pat);
    CHECK(blocks == 2 && kvh == 2 && na == want_att && nm == blocks && sk == want_skip,
          "%s tp %d: find: %d attention, %d gated MLP, %d skipped of %d blocks (n_kv_head %d)",
          path, tp, na, nm, sk, blocks, kvh);
    char what[4200];
    snprintf(what, sizeof what, "%s tp %d", path, tp);
    Expect e = {.attention = want_att, .mlp = blocks, .skipped = want_skip};
    TpShardResult r0;
    double worst = tp_sim_run_logits(g, tp, 255, what, llama_counts, &e, &r0);
    if (worst >= 0)
        printf("%s tp=%d: %d layers, %d attention + %d SwiGLU MLP sharded per rank (%d skipped; "
               "%d TpAllReduce, %d TpCopy), logits of every rank == unsharded to %.2e\n",
               strrchr(path, '/') + 1, tp, blocks, r0.attention, r0.mlp, r0.skipped,
               r0.allreduce, r0.copies, worst);
    if (worst > worst_all) worst_all = worst;
    ir_graph_free(g);
}

int main(int argc, char **argv) {
    for (int tpi = 0; tpi < 2; tpi++) {
        int tp = tpi ? 4 : 2;
        for (int c = 0; c < 4; c++) {
            Dims d = {.B = tp_sim_irand(1, 2), .T = tp_sim_irand(2, 6),
                      .Hkv = tp * tp_sim_irand(1, 2), .Dh = 2 * tp_sim_irand(1, 3),
                      .F = tp * tp_sim_irand(2, 5), .act_first = c != 1,
                      .act = c == 2 ? IR_OP_GELU : IR_OP_SILU, .cos_rank4 = c == 3,
                      .merge_minus1 = c & 1};
            d.H = d.Hkv * (c == 0 ? 1 : tp_sim_irand(2, 3)); /* c == 0: plain MHA */
            Expect e = {.attention = 1, .mlp = 1};
            run_case(&d, tp, &e);
        }
    }
    /* left replicated (the MLP is still sharded, and the result exact):
     * Hkv = 2 under tp = 4, and a per-head rotary table */
    Dims d1 = {.B = 2, .T = 4, .H = 4, .Hkv = 2, .Dh = 4, .F = 8, .act_first = 1,
               .act = IR_OP_SILU};
    Expect e1 = {.attention = 0, .mlp = 1, .skipped = 1};
    run_case(&d1, 4, &e1);
    Dims d2 = d1;
    d2.per_head = 1, d2.Hkv = 4;
    run_case(&d2, 2, &e1);
    if (argc > 1) {
        char p[4096];
        for (int op = 0; op < 2; op++) {
            snprintf(p, sizeof p, "%s/tests/models/llama_op%d.onnx", argv[1], op ? 14 : 17);
            check_llama(p, 2);
        }
        snprintf(p, sizeof p, "%s/tests/models/llama_op17.onnx", argv[1]);
        check_llama(p, 4);
    }
    return tp_sim_finish(worst_all);
}
