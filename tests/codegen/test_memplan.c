/* memplan on stages built like partition builds them (stage_fixture.h):
 * gpt_tiny as one stage (AdamW and SGD) and a hand-built two-stage split.
 * Oracles, independent of memplan.c's own bookkeeping:
 *  1. regions: every buffer lies inside its region, the regions tile the
 *     arena in the documented order, slots fit the arena;
 *  2. brute force: live ranges recomputed here from the call order
 *     (written by the call that makes it, live to the last call that
 *     reads it); no two scratch buffers with intersecting ranges share a
 *     byte;
 *  3. dataflow: the stage's calls are replayed over a shadow arena for a
 *     1F1B-shaped schedule of 4 microbatches in 2 slots, an update and one
 *     more microbatch; every read must find the bytes last written by the
 *     value it reads (parameters, accumulators, state and scalars written
 *     by the "runtime" where stage_abi.h says it does).
 *  4. the call order has one node call per node of each phase, one accum
 *     and one zero per parameter, a copy per update output.
 * ZeRO (zero_slices): the same checks on a stage planned with zero 1 and
 * zero 2 (the replay knows the runtime's slice copies; under zero 2 the
 * accumulate call also overwrites its gradient - the in-place
 * reduce-scatter - so a later read of it would fail), the slice sizes
 * from part_zero_len, and zero 2's gradient bytes recomputed here:
 * the accumulators are the aligned zlen slices, 1/dp of zero 1's.
 * Fused (fuse.h, memplan_build_fused): the same checks on plans whose
 * elementwise groups run as one call (reading the group's external inputs,
 * writing its outputs; values kept in registers have no buffer and must
 * never be read by another call): gpt_tiny's update graph (its unfused
 * optimizer chains) and, when given, a second model's train graph.
 * Usage: test_memplan GPT_TINY.onnx [MODEL.onnx] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse.h"
#include "memplan.h"
#include "optimizer.h"
#include "stage_abi.h"
#include "stage_fixture.h"

static int fails;
#define CHECK(c, ...)                                                                    \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            fails++;                                                                     \
            if (fails < 20) {                                                            \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                     \
                fprintf(stderr, __VA_ARGS__);                                            \
                fputc('\n', stderr);                                                     \
            }                                                                            \
        }                                                                                \
    } while (0)

/* ------------------------------------------------------------ tags */
/* what a byte range holds: a value of a graph, or runtime-owned state */
enum { T_TRAIN = 1 << 24, T_UPD = 2 << 24, T_PARAM = 3 << 24, T_ACC = 4 << 24, T_M = 5 << 24,
       T_V = 6 << 24, T_LR = 7 << 24, T_STEP = 8 << 24, T_NORM = 9 << 24,
       /* after the update's copies / zeroing: a copy or zero run too early
        * shows up as the wrong tag under a later read */
       T_PNEW = 10 << 24, T_MNEW = 11 << 24, T_VNEW = 12 << 24, T_ZERO = 13 << 24,
       /* a gradient after ZeRO-2's in-place reduce-scatter */
       T_CLOBBER = 14 << 24, T_SKIP = -1 };
static int g_updated; /* 1 once the update ran: parameters / state carry T_*NEW */

static int param_index(const MemPlan *mp, const char *name) {
    for (int i = 0; i < mp->nparams; i++)
        if (!strcmp(mp->params[i].name, name)) return i;
    return -1;
}

/* the tag a read of v must find (graph 0 train, 1 update) */
static int read_tag(const MemPlan *mp, int graph, const IrValue *v) {
    if (v->kind == IR_VK_CONST) return T_SKIP;
    int p;
    if (v->kind == IR_VK_PARAM && (p = param_index(mp, v->name)) >= 0)
        return (g_updated ? T_PNEW : T_PARAM) + p;
    int m = g_updated ? T_MNEW : T_M, vv = g_updated ? T_VNEW : T_V;
    if (graph == 1 && !v->producer) {
        if (!strncmp(v->name, "grad/", 5) && (p = param_index(mp, v->name + 5)) >= 0)
            return T_ACC + p;
        if (!strncmp(v->name, "opt/v/", 6)) return vv + param_index(mp, v->name + 6);
        if (!strncmp(v->name, "opt/m/", 6)) return m + param_index(mp, v->name + 6);
        if (!strncmp(v->name, "opt/buf/", 8)) return m + param_index(mp, v->name + 8);
        if (!strcmp(v->name, "lr")) return T_LR;
        if (!strcmp(v->name, "step")) return T_STEP;
        if (!strcmp(v->name, "grad_norm")) return T_NORM;
    }
    return (graph ? T_UPD : T_TRAIN) + v->id;
}
static int write_tag(const MemPlan *mp, const PartStage *st, int graph, const IrValue *v);

typedef struct Rec {
    int64_t lo, hi;
    int tag;
} Rec;

typedef struct Shadow {
    Rec *r;
    int n, cap;
    int64_t arena;
    const char *where;
} Shadow;

static void sh_write(Shadow *s, int64_t lo, int64_t bytes, int tag) {
    CHECK(lo >= 0 && lo + bytes <= s->arena, "%s: write [%lld,+%lld) outside the arena of %lld",
          s->where, (long long)lo, (long long)bytes, (long long)s->arena);
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->r = realloc(s->r, sizeof *s->r * (size_t)s->cap);
    }
    s->r[s->n++] = (Rec){lo, lo + bytes, tag};
}

static void sh_read2(Shadow *s, int64_t lo, int64_t bytes, int tag, int alt, const char *name) {
    if (tag == T_SKIP) return;
    int64_t hi = lo + bytes;
    for (int i = s->n - 1; i >= 0; i--) {
        const Rec *r = &s->r[i];
        if (r->hi <= lo || r->lo >= hi) continue;
        CHECK((r->tag == tag || r->tag == alt) && r->lo == lo && r->hi == hi,
              "%s: read of '%s' [%lld,%lld) finds tag %x [%lld,%lld), want tag %x", s->where,
              name, (long long)lo, (long long)hi, r->tag, (long long)r->lo, (long long)r->hi,
              tag);
        return;
    }
    CHECK(0, "%s: read of '%s' [%lld,%lld) finds nothing written", s->where, name,
          (long long)lo, (long long)hi);
}

static void sh_read(Shadow *s, int64_t lo, int64_t bytes, int tag, const char *name) {
    sh_read2(s, lo, bytes, tag, tag, name);
}

/* absolute arena address of v while running microbatch slot `slot` */
static int64_t addr(const MemPlan *mp, const PartStage *st, int graph, const IrValue *v, int slot) {
    const MpLoc *l = memplan_loc(mp, st, graph, v);
    CHECK(l != NULL, "value '%s' has no location", v->name);
    if (!l) return 0;
    CHECK(l->region == HETC_BUF_ARENA || l->region == HETC_BUF_SLOT || l->region == HETC_BUF_CONST,
          "value '%s' used but region %d", v->name, l->region);
    return l->region == HETC_BUF_SLOT ? mp->slot_base + slot * mp->slot_bytes + l->off : l->off;
}

static IrValue *xval(const PartStage *st, int x) {
    return ir_graph_find_value(st->train, st->xfers[x].value);
}

static IrValue *upd_out(const PartStage *st, const char *pn, int sub) {
    static const char *const f[3][2] = {{"upd/%s", NULL}, {"upd/m/%s", "upd/buf/%s"},
                                        {"upd/v/%s", NULL}};
    char nm[600];
    for (int a = 0; a < 2 && f[sub][a]; a++) {
        snprintf(nm, sizeof nm, f[sub][a], pn);
        IrValue *v = ir_graph_find_value(st->update, nm);
        if (v) return v;
    }
    return NULL;
}

/* k if v is update output k of parameter *pi placed at the buffer it
 * carries into (P's zp_off, m_off, v_off: written in place, no copy), else -1 */
static int inplace_sub(const MemPlan *mp, const PartStage *st, const IrValue *v, int *pi) {
    for (int i = 0; i < mp->nparams; i++)
        for (int k = 0; k < 3; k++) {
            if (upd_out(st, mp->params[i].name, k) != v) continue;
            const MpLoc *l = memplan_loc(mp, st, 1, v);
            const MpParam *p = &mp->params[i];
            int64_t dst = k == 0 ? p->zp_off : k == 1 ? p->m_off : p->v_off;
            *pi = i;
            return l && l->region == HETC_BUF_ARENA && l->off == dst ? k : -1;
        }
    return -1;
}
static int new_tag(int k, int i) { return (k == 0 ? T_PNEW : k == 1 ? T_MNEW : T_VNEW) + i; }
/* what a node's write of v leaves: an in-place update output is the new
 * parameter / state itself (a later read of P must find it, and any reader
 * of the old P after it fails) */
static int write_tag(const MemPlan *mp, const PartStage *st, int graph, const IrValue *v) {
    int i, k = graph ? inplace_sub(mp, st, v, &i) : -1;
    return k >= 0 ? new_tag(k, i) : (graph ? T_UPD : T_TRAIN) + v->id;
}

/* Reads (r) and writes (w) of one call, as this test understands them. */
typedef struct Acc {
    const IrValue *v;
    int graph, write;
} Acc;

static int accesses(const MemPlan *mp, const PartStage *st, int fn, const MpAction *a, Acc *o) {
    int n = 0, graph = fn == MP_FN_UPDATE;
    IrGraph *g = graph ? st->update : st->train;
    char nm[600];
    switch (a->kind) {
    case MP_NODE: {
        IrNode *nd = g->nodes[a->index];
        const FuseGroup *gr = fuse_group_at(mp->fuse[graph], a->index);
        if (gr) { /* the group's kernel */
            for (int k = 0; k < gr->nins; k++) o[n++] = (Acc){gr->ins[k], graph, 0};
            for (int k = 0; k < gr->nouts; k++) o[n++] = (Acc){gr->outs[k], graph, 1};
            break;
        }
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k]) o[n++] = (Acc){nd->in[k], graph, 0};
        for (int k = 0; k < nd->nout; k++)
            if (nd->out[k]) o[n++] = (Acc){nd->out[k], graph, 1};
        break;
    }
    case MP_TOKENS:
        o[n++] = (Acc){ir_graph_find_value(g, a->index ? "targets" : st->data_input), 0, 1};
        break;
    case MP_RECV: o[n++] = (Acc){xval(st, a->index), 0, 1}; break;
    case MP_SEND: o[n++] = (Acc){xval(st, a->index), 0, 0}; break;
    case MP_LOSS: o[n++] = (Acc){ir_graph_find_value(g, "loss"), 0, 0}; break;
    case MP_ACCUM:
        snprintf(nm, sizeof nm, "grad/%s", st->params[a->index].name);
        o[n++] = (Acc){ir_graph_find_value(g, nm), 0, 0};
        break;
    case MP_COPY: o[n++] = (Acc){upd_out(st, st->params[a->index].name, a->sub), 1, 0}; break;
    case MP_ZERO: break;
    }
    return n;
}

static void run_fn(Shadow *s, const MemPlan *mp, const PartStage *st, int fn, int slot) {
    static const char *const names[3] = {"forward", "backward", "update"};
    static char where[64]; /* s->where outlives this call */
    snprintf(where, sizeof where, "stage %d %s (slot %d)", st->stage, names[fn], slot);
    s->where = where;
    Acc acc[64];
    for (int i = 0; i < mp->nacts[fn]; i++) {
        const MpAction *a = &mp->acts[fn][i];
        int n = a->kind == MP_NODE ? 0 : accesses(mp, st, fn, a, acc);
        if (a->kind == MP_NODE) { /* nodes can have many operands */
            IrNode *nd = (fn == MP_FN_UPDATE ? st->update : st->train)->nodes[a->index];
            const FuseGroup *gr = fuse_group_at(mp->fuse[fn == MP_FN_UPDATE], a->index);
            /* a fused group: its kernel reads the external inputs, writes the outputs */
            IrValue *const *ins = gr ? gr->ins : nd->in, *const *outs = gr ? gr->outs : nd->out;
            int nins = gr ? gr->nins : nd->nin, nouts = gr ? gr->nouts : nd->nout;
            for (int k = 0; k < nins; k++)
                if (ins[k]) {
                    const IrValue *v = ins[k];
                    const MpLoc *l = memplan_loc(mp, st, fn == MP_FN_UPDATE, v);
                    CHECK(l && l->region != HETC_BUF_NONE, "%s: '%s' read without a buffer",
                          where, v->name);
                    if (l && l->region != HETC_BUF_CONST && l->region != HETC_BUF_NONE)
                        sh_read(s, addr(mp, st, fn == MP_FN_UPDATE, v, slot), l->bytes,
                                v->producer ? write_tag(mp, st, fn == MP_FN_UPDATE, v)
                                            : read_tag(mp, fn == MP_FN_UPDATE, v),
                                v->name);
                }
            for (int k = 0; k < nouts; k++)
                if (outs[k]) {
                    const IrValue *v = outs[k];
                    const MpLoc *l = memplan_loc(mp, st, fn == MP_FN_UPDATE, v);
                    CHECK(l && l->region != HETC_BUF_CONST && l->region != HETC_BUF_NONE,
                          "output '%s' unplaced", v->name);
                    if (l)
                        sh_write(s, addr(mp, st, fn == MP_FN_UPDATE, v, slot), l->bytes,
                                 write_tag(mp, st, fn == MP_FN_UPDATE, v));
                }
            continue;
        }
        for (int k = 0; k < n; k++) {
            CHECK(acc[k].v != NULL, "%s: call %d reads/writes an unknown value", where, i);
            if (!acc[k].v) continue;
            const MpLoc *l = memplan_loc(mp, st, acc[k].graph, acc[k].v);
            int64_t ad = addr(mp, st, acc[k].graph, acc[k].v, slot);
            if (acc[k].write)
                sh_write(s, ad, l->bytes, (acc[k].graph ? T_UPD : T_TRAIN) + acc[k].v->id);
            else
                sh_read(s, ad, l->bytes,
                        acc[k].v->producer ? write_tag(mp, st, acc[k].graph, acc[k].v)
                                           : read_tag(mp, acc[k].graph, acc[k].v),
                        acc[k].v->name);
        }
        const MpParam *p = a->kind >= MP_ACCUM ? &mp->params[a->index] : NULL;
        if (a->kind == MP_ACCUM) {
            sh_read2(s, p->acc_off, p->acc_len * 4, T_ACC + a->index, T_ZERO + a->index,
                     "accumulator");
            sh_write(s, p->acc_off, p->acc_len * 4, T_ACC + a->index);
            if (mp->zero >= 2) /* hetrt_accum_scatter reduce-scatters the gradient in place */
                sh_write(s, addr(mp, st, 0, p->grad, slot), p->bytes, T_CLOBBER + a->index);
        } else if (a->kind == MP_ZERO) {
            sh_write(s, p->acc_off, p->acc_len * 4, T_ZERO + a->index);
        } else if (a->kind == MP_COPY) {
            /* the update's parameter: P itself, or under ZeRO its slice buffer */
            int64_t dst = a->sub == 0 ? p->zp_off : a->sub == 1 ? p->m_off : p->v_off;
            int tag = (a->sub == 0 ? T_PNEW : a->sub == 1 ? T_MNEW : T_VNEW) + a->index;
            CHECK(dst >= 0, "copy into a missing state");
            sh_write(s, dst, p->zlen * 4, tag);
        }
    }
}

static void runtime_scalars(Shadow *s, const MemPlan *mp) {
    s->where = "runtime";
    sh_write(s, mp->lr_off, 4, T_LR);
    sh_write(s, mp->step_off, 8, T_STEP);
    sh_write(s, mp->norm_off, 4, T_NORM);
}

static void dataflow(const MemPlan *mp, const PartStage *st) {
    Shadow s = {0};
    g_updated = 0;
    s.arena = mp->arena_bytes;
    s.where = "runtime";
    for (int i = 0; i < mp->nparams; i++) { /* parameters loaded, accumulators and state zeroed */
        const MpParam *p = &mp->params[i];
        sh_write(&s, p->param_off, p->bytes, T_PARAM + i);
        sh_write(&s, p->acc_off, p->acc_len * 4, T_ZERO + i);
        if (p->m_off >= 0) sh_write(&s, p->m_off, p->zlen * 4, T_M + i);
        if (p->v_off >= 0) sh_write(&s, p->v_off, p->zlen * 4, T_V + i);
    }
    runtime_scalars(&s, mp);
    /* 1F1B-shaped, 2 slots: F0 F1 B0 F2 B1 F3 B2 B3, update, F0 B0 */
    static const struct { char k; int m; } sched[] = {{'F', 0}, {'F', 1}, {'B', 0}, {'F', 2},
                                                     {'B', 1}, {'F', 3}, {'B', 2}, {'B', 3}};
    for (int i = 0; i < 8; i++)
        run_fn(&s, mp, st, sched[i].k == 'F' ? MP_FN_FORWARD : MP_FN_BACKWARD, sched[i].m % 2);
    runtime_scalars(&s, mp);
    for (int i = 0; mp->zero && i < mp->nparams; i++) { /* stage_sync.c, stage_zero_pre_update */
        const MpParam *p = &mp->params[i];
        sh_write(&s, p->acc_off, p->zlen * 4, T_ACC + i); /* the DP-summed slice */
        sh_write(&s, p->zp_off, p->zlen * 4, T_PARAM + i);
    }
    run_fn(&s, mp, st, MP_FN_UPDATE, 0);
    g_updated = 1;
    s.where = "runtime";
    for (int i = 0; mp->zero && i < mp->nparams; i++) /* stage_zero_post_update's all-gather */
        sh_write(&s, mp->params[i].param_off, mp->params[i].bytes, T_PNEW + i);
    run_fn(&s, mp, st, MP_FN_FORWARD, 1);
    run_fn(&s, mp, st, MP_FN_BACKWARD, 1);
    free(s.r);
}

/* ------------------------------------------------------------ regions, intervals */

static void regions(const MemPlan *mp, const PartStage *st) {
    int64_t pe = mp->param_bytes, ge = pe + mp->grad_bytes, oe = ge + mp->opt_bytes;
    for (int i = 0; i < mp->nparams; i++) {
        const MpParam *p = &mp->params[i];
        CHECK(p->param_off >= 0 && p->param_off + p->bytes <= pe, "param '%s' outside", p->name);
        CHECK(p->acc_len == (mp->zero >= 2 ? p->zlen : p->numel), "acc '%s': %lld elements",
              p->name, (long long)p->acc_len);
        CHECK(p->acc_off >= pe && p->acc_off + p->acc_len * 4 <= ge, "acc '%s' outside", p->name);
        CHECK(p->m_off < 0 || (p->m_off >= ge && p->m_off + p->zlen * 4 <= oe), "m '%s'", p->name);
        CHECK(p->v_off < 0 || (p->v_off >= ge && p->v_off + p->zlen * 4 <= oe), "v '%s'", p->name);
        CHECK(p->param_off % MP_ALIGN == 0 && p->acc_off % MP_ALIGN == 0, "alignment");
    }
    CHECK(mp->lr_off >= oe && mp->norm_off + 4 <= mp->scratch_off, "scalars");
    CHECK(mp->scratch_off + mp->scratch_bytes <= mp->slot_base, "scratch overlaps the slots");
    CHECK(mp->arena_bytes == mp->slot_base + mp->nslots * mp->slot_bytes, "arena size");
    for (int g = 0; g < 2; g++) {
        IrGraph *gr = g ? st->update : st->train;
        for (int i = 0; i < gr->nvalues; i++) {
            const MpLoc *l = memplan_loc(mp, st, g, gr->values[i]);
            CHECK(l != NULL, "no loc");
            if (!l || l->region == HETC_BUF_NONE || l->region == HETC_BUF_CONST) continue;
            CHECK(l->off % MP_ALIGN == 0, "'%s' misaligned", gr->values[i]->name);
            if (l->region == HETC_BUF_SLOT)
                CHECK(l->off >= 0 && l->off + l->bytes <= mp->slot_bytes, "'%s' outside the slot",
                      gr->values[i]->name);
            else if (l->off >= mp->scratch_off)
                CHECK(l->off + l->bytes <= mp->scratch_off + mp->scratch_bytes,
                      "'%s' outside scratch", gr->values[i]->name);
        }
    }
}

static int64_t overlaps_checked, views_checked;

/* live ranges from the call order, then every pair of scratch buffers */
static void intervals(const MemPlan *mp, const PartStage *st, int fn, int64_t *sum) {
    int graph = fn == MP_FN_UPDATE;
    IrGraph *g = graph ? st->update : st->train;
    int *first = malloc(sizeof *first * (size_t)g->nvalues), *last = malloc(sizeof *last * (size_t)g->nvalues);
    for (int i = 0; i < g->nvalues; i++) first[i] = last[i] = -1;
    /* a view (memplan's view_of: a Reshape / Squeeze / Unsqueeze / Flatten /
     * Identity output sharing its input's bytes) is one buffer with its
     * root: it must be such an op's output, of the root's bytes and at the
     * root's place, and the buffer lives from the first write of either to
     * the last access of either */
    int *root = malloc(sizeof *root * (size_t)g->nvalues);
    for (int i = 0; i < g->nvalues; i++) {
        root[i] = i;
        while (!graph && mp->view_of && mp->view_of[root[i]] >= 0) root[i] = mp->view_of[root[i]];
        if (root[i] == i) continue;
        const IrValue *v = g->values[i];
        const IrNode *p = v->producer;
        IrOp op = p ? p->op : IR_OP_IDENTITY;
        CHECK(p && (op == IR_OP_RESHAPE || op == IR_OP_SQUEEZE || op == IR_OP_UNSQUEEZE ||
                    op == IR_OP_FLATTEN || op == IR_OP_IDENTITY) && p->in[0],
              "view '%s' is not the output of a view op", v->name);
        const MpLoc *lv = memplan_loc(mp, st, graph, v);
        const MpLoc *lr = memplan_loc(mp, st, graph, g->values[root[i]]);
        CHECK(lv->region == lr->region && lv->off == lr->off && lv->bytes == lr->bytes,
              "view '%s' is not at its root '%s''s bytes", v->name, g->values[root[i]]->name);
        views_checked++;
    }
    Acc acc[4096];
    for (int pos = 0; pos < mp->nacts[fn]; pos++) {
        int n = accesses(mp, st, fn, &mp->acts[fn][pos], acc);
        for (int k = 0; k < n; k++) {
            if (!acc[k].v) continue;
            int id = root[acc[k].v->id];
            if (acc[k].write && first[id] < 0) first[id] = pos;
            if (last[id] < pos) last[id] = pos;
        }
    }
    int *sc = malloc(sizeof *sc * (size_t)g->nvalues), n = 0;
    for (int i = 0; i < g->nvalues; i++) {
        const MpLoc *l = memplan_loc(mp, st, graph, g->values[i]);
        if (l->region == HETC_BUF_ARENA && l->off >= mp->scratch_off && l->off < mp->slot_base) {
            /* train scratch belongs to the forward (forward temporaries) or
             * the backward (its values, received gradients) */
            const IrValue *v = g->values[i];
            int owner = graph ? MP_FN_UPDATE
                        : v->producer && v->producer->phase == IR_PHASE_FWD ? MP_FN_FORWARD
                                                                             : MP_FN_BACKWARD;
            if (owner != fn || root[i] != i) continue;
            CHECK(first[i] >= 0, "scratch value '%s' never written in its function",
                  g->values[i]->name);
            sc[n++] = i;
            *sum += l->bytes;
        }
    }
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            int x = sc[a], y = sc[b];
            if (first[x] > last[y] || first[y] > last[x]) continue;
            const MpLoc *lx = memplan_loc(mp, st, graph, g->values[x]);
            const MpLoc *ly = memplan_loc(mp, st, graph, g->values[y]);
            overlaps_checked++;
            CHECK(lx->off + lx->bytes <= ly->off || ly->off + ly->bytes <= lx->off,
                  "stage %d fn %d: '%s' [%d,%d] and '%s' [%d,%d] live together and overlap",
                  st->stage, fn, g->values[x]->name, first[x], last[x], g->values[y]->name,
                  first[y], last[y]);
        }
    free(sc);
    free(first);
    free(last);
    free(root);
}

static void counts(const MemPlan *mp, const PartStage *st) {
    int want[3] = {0, 0, st->update->nnodes}, got[3] = {0}, accum = 0, zero = 0, copy = 0,
        ncopy = 0;
    for (int i = 0; i < st->train->nnodes; i++)
        want[st->train->nodes[i]->phase == IR_PHASE_BWD] += !fuse_skipped(mp->fuse[0], i);
    for (int i = 0; i < st->update->nnodes; i++) want[2] -= fuse_skipped(mp->fuse[1], i);
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < mp->nacts[f]; i++) {
            MpActKind k = mp->acts[f][i].kind;
            got[f] += k == MP_NODE;
            accum += k == MP_ACCUM, zero += k == MP_ZERO, copy += k == MP_COPY;
        }
    int ninplace = 0, adamw = 0;
    for (int i = 0; i < st->update->nnodes; i++) adamw |= st->update->nodes[i]->op == IR_OP_ADAMW;
    for (int i = 0; i < mp->nparams; i++)
        for (int k = 0; k < 3; k++) {
            const IrValue *v = upd_out(st, mp->params[i].name, k);
            int pi, in = v && inplace_sub(mp, st, v, &pi) == k;
            ncopy += v && !in, ninplace += in;
            /* the fused AdamW writes P, m and v in place; an elementwise op
             * whose table entry allows it (SGD's last Sub of a parameter read
             * nowhere else) may too -- the liveness checks above cover both */
            CHECK(!v || !adamw || in, "update output '%s' not written in place", v ? v->name : "");
        }
    for (int f = 0; f < 3; f++) CHECK(got[f] == want[f], "fn %d: %d node calls, %d nodes", f, got[f], want[f]);
    CHECK(accum == mp->nparams && zero == mp->nparams && copy == ncopy,
          "accum %d zero %d copy %d for %d params / %d update outputs not in place (%d in "
          "place)", accum, zero, copy, mp->nparams, ncopy, ninplace);
}

/* fused: plan with the stage's fused groups (as lower_stage builds them);
 * returns the nodes fused */
static int check_stage_fused(const PartStage *st, const char *what, int fused) {
    MemPlan mp;
    IrError err = {{0}};
    FuseGraph fg[2];
    memset(fg, 0, sizeof fg);
    if (fused) {
        int *ord = memplan_update_order(st->update);
        int *pos = calloc((size_t)st->update->nnodes + 1, sizeof *pos);
        for (int i = 0; i < st->update->nnodes; i++) pos[ord[i]] = i;
        CHECK(fuse_graph(st->train, NULL, "t", &fg[0], &err) == 0, "%s: fuse", what);
        CHECK(fuse_graph(st->update, pos, "u", &fg[1], &err) == 0, "%s: fuse", what);
        free(ord), free(pos);
    }
    if (memplan_build_fused(st, 2, fused ? &fg[0] : NULL, fused ? &fg[1] : NULL, &mp, &err)) {
        CHECK(0, "%s: memplan: %s", what, err.msg);
        fuse_free(&fg[0]), fuse_free(&fg[1]);
        return 0;
    }
    int nf = fg[0].nfused + fg[1].nfused, reg = 0;
    for (int g = 0; g < 2; g++) /* register-only values: no buffer */
        for (int v = 0; v < fg[g].nvalues_graph; v++)
            if (fg[g].internal[v]) {
                reg++;
                const MpLoc *l = memplan_loc(&mp, st, g, (g ? st->update : st->train)->values[v]);
                CHECK(l && l->region == HETC_BUF_NONE, "%s: register value placed", what);
            }
    if (fused) printf("%s: %d nodes fused, %d values without a buffer\n", what, nf, reg);
    regions(&mp, st);
    int64_t bsum = 0, usum = 0, fsum = 0;
    intervals(&mp, st, MP_FN_FORWARD, &fsum);
    intervals(&mp, st, MP_FN_BACKWARD, &bsum);
    intervals(&mp, st, MP_FN_UPDATE, &usum);
    counts(&mp, st);
    dataflow(&mp, st);
    printf("%s: ", what);
    memplan_report(&mp, stdout);
    printf("  scratch reuse: forward %lld of %lld bytes, backward %lld of %lld, update %lld of "
           "%lld\n",
           (long long)mp.fwd_scratch_bytes, (long long)fsum, (long long)mp.bwd_scratch_bytes,
           (long long)bsum, (long long)mp.upd_scratch_bytes, (long long)usum);
    memplan_free(&mp);
    fuse_free(&fg[0]), fuse_free(&fg[1]);
    return nf;
}

static void check_stage(const PartStage *st, const char *what) { check_stage_fused(st, what, 0); }

/* error paths: a message naming the value / stage */
static void errors(void) {
    PartStage two[2];
    IrError err = {{0}};
    MemPlan mp;
    if (fixture_two_stage(two, 2, 3, 0, &err) < 0) {
        CHECK(0, "fixture: %s", err.msg);
        return;
    }
    PartStage st = two[0];
    CHECK(memplan_build(&st, 0, &mp, &err) == -1 && strstr(err.msg, "activation slots"), "%s",
          err.msg);
    /* a value without a static shape */
    IrValue *h = ir_graph_find_value(st.train, "h");
    h->shape.dims[0] = -1;
    CHECK(memplan_build(&st, 2, &mp, &err) == -1 && strstr(err.msg, "'h' has no static shape"),
          "%s", err.msg);
    h->shape.dims[0] = 2;
    h->dtype = IR_STRING;
    CHECK(memplan_build(&st, 2, &mp, &err) == -1 && strstr(err.msg, "'h' has dtype string"),
          "%s", err.msg);
    h->dtype = IR_F32;
    /* an input nobody provides */
    free(st.data_input);
    st.data_input = ir_strdup("tokens");
    CHECK(memplan_build(&st, 2, &mp, &err) == -1 &&
              strstr(err.msg, "input 'ids' is neither the token input"),
          "%s", err.msg);
    free(st.data_input);
    st.data_input = ir_strdup("ids");
    /* a parameter missing from the list */
    char *p0 = st.params[0].name;
    st.params[0].name = ir_strdup("nope");
    CHECK(memplan_build(&st, 2, &mp, &err) == -1 && strstr(err.msg, "'nope'"), "%s", err.msg);
    free(st.params[0].name);
    st.params[0].name = p0;
    CHECK(memplan_build(&st, 2, &mp, &err) == 0, "restored fixture: %s", err.msg);
    memplan_free(&mp);
    fixture_free(&st);
    fixture_free(&two[1]);
}

/* ZeRO (memplan.h): the two-stage fixture's stage 1 (w [8, 11]: 88
 * elements, b [11]: 11, both odd splits over dp 3) with the update graph
 * partition builds under ZeRO: each parameter a flat slice of
 * ceil(numel / 3) elements ([1, L] for w, so weight decay still applies).
 * m / v and the update's parameter are zlen-element buffers of their own,
 * grad/P the accumulator's first zlen elements, upd/P copied into the
 * slice buffer; the optimizer state shrinks against zero 0. */
static void zero_slices(void) {
    PartStage two[2];
    IrError err = {{0}};
    if (fixture_two_stage(two, 2, 3, 0, &err) < 0) {
        CHECK(0, "fixture: %s", err.msg);
        return;
    }
    PartStage *st = &two[1];
    MemPlan mp0;
    CHECK(memplan_build(st, 2, &mp0, &err) == 0, "zero 0: %s", err.msg);
    int64_t opt0 = mp0.opt_bytes;
    memplan_free(&mp0);
    ir_graph_free(st->update);
    st->dp = 3;
    st->zero = 1;
    IrGraph *u = st->update = ir_graph_new("update");
    for (int i = 0; i < st->nparams; i++) {
        IrValue *tp = ir_graph_find_value(st->train, st->params[i].name);
        int64_t len = part_zero_len(ir_shape_numel(&tp->shape), 3), d2[2] = {1, len};
        IrShape sh = tp->shape.rank >= 2 ? ir_shape_make(2, d2) : ir_shape_make(1, &len);
        ir_value_new(u, tp->name, IR_F32, &sh, IR_VK_PARAM);
        char nm[600];
        snprintf(nm, sizeof nm, "grad/%s", tp->name);
        ir_graph_add_input(u, ir_value_new(u, nm, IR_F32, &sh, IR_VK_INPUT));
    }
    OptimOpts o;
    optim_opts_default(&o);
    o.norm_input = 1;
    CHECK(pass_optimizer_with(u, &o, &err) == 0, "zero update graph: %s", err.msg);
    MemPlan mp;
    if (memplan_build(st, 2, &mp, &err)) {
        CHECK(0, "zero 1: memplan: %s", err.msg);
    } else {
        CHECK(mp.zero == 1, "mp.zero %d", mp.zero);
        int64_t zend = mp.param_bytes + mp.grad_bytes + mp.opt_bytes;
        for (int i = 0; i < mp.nparams; i++) {
            const MpParam *p = &mp.params[i];
            int64_t want = p->numel == 88 ? 30 : p->numel == 11 ? 4 : -1;
            CHECK(p->zlen == want, "'%s': zlen %lld (numel %lld)", p->name, (long long)p->zlen,
                  (long long)p->numel);
            CHECK(p->zp_off != p->param_off && p->zp_off % MP_ALIGN == 0 &&
                      p->zp_off + p->zlen * 4 <= zend && p->zp_off >= p->v_off + p->zlen * 4,
                  "'%s': slice buffer at %lld", p->name, (long long)p->zp_off);
            for (int j = 0; j < mp.nparams; j++) /* no two buffers of the state region meet */
                if (j != i)
                    CHECK(p->zp_off + p->zlen * 4 <= mp.params[j].zp_off ||
                              mp.params[j].zp_off + mp.params[j].zlen * 4 <= p->zp_off,
                          "slice buffers of '%s' and '%s' overlap", p->name, mp.params[j].name);
            const MpLoc *pl = memplan_loc(&mp, st, 1, ir_graph_find_value(u, p->name));
            char nm[600];
            snprintf(nm, sizeof nm, "grad/%s", p->name);
            const MpLoc *gl = memplan_loc(&mp, st, 1, ir_graph_find_value(u, nm));
            snprintf(nm, sizeof nm, "opt/m/%s", p->name);
            const MpLoc *ml = memplan_loc(&mp, st, 1, ir_graph_find_value(u, nm));
            CHECK(pl && pl->off == p->zp_off && pl->bytes == p->zlen * 4, "'%s' update param",
                  p->name);
            CHECK(gl && gl->off == p->acc_off && gl->bytes == p->zlen * 4, "'%s' update grad",
                  p->name);
            CHECK(ml && ml->off == p->m_off && ml->bytes == p->zlen * 4, "'%s' m", p->name);
        }
        /* weight decay (the AdamW node's weight_decay) on w's [1, zlen] slice,
         * whose rank keeps the decay rule, not on b's */
        int decayed[2] = {0, 0};
        for (int i = 0; i < u->nnodes; i++) {
            IrNode *n = u->nodes[i];
            for (int q = 0; q < 2; q++)
                if (n->op == IR_OP_ADAMW && !strcmp(n->in[0]->name, q ? "b" : "w"))
                    decayed[q] = ir_attr_float(n, "weight_decay", 0) != 0;
        }
        CHECK(decayed[0] && !decayed[1], "weight decay: w %d b %d", decayed[0], decayed[1]);
        CHECK(mp.opt_bytes < opt0, "optimizer state %lld not below zero 0's %lld",
              (long long)mp.opt_bytes, (long long)opt0);
        printf("zero 1, dp 3: optstate %lld bytes (zero 0: %lld)\n", (long long)mp.opt_bytes,
               (long long)opt0);
        check_stage(st, "zero 1, dp 3");
        /* ZeRO-2: the same layout but the accumulators are the zlen shards
         * (sizes recomputed here from part_zero_len, aligned like every
         * buffer); the whole gradient lives only in backward scratch, up to
         * its accumulate call, which is its last use */
        st->zero = 2;
        MemPlan m2;
        if (memplan_build(st, 2, &m2, &err)) {
            CHECK(0, "zero 2: memplan: %s", err.msg);
        } else {
            int64_t want_g = 0, want_g1 = 0;
            for (int i = 0; i < m2.nparams; i++) {
                const MpParam *p = &m2.params[i];
                int64_t zl = part_zero_len(p->numel, 3);
                want_g += (zl * 4 + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN;
                want_g1 += (p->numel * 4 + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN;
                CHECK(p->acc_len == zl && p->zlen == zl, "zero 2 '%s': acc %lld zlen %lld",
                      p->name, (long long)p->acc_len, (long long)p->zlen);
                const MpLoc *gl = memplan_loc(&m2, st, 0, p->grad);
                int at = -1;
                for (int k = 0; k < m2.nacts[MP_FN_BACKWARD]; k++)
                    if (m2.acts[MP_FN_BACKWARD][k].kind == MP_ACCUM &&
                        m2.acts[MP_FN_BACKWARD][k].index == i)
                        at = k;
                CHECK(gl && gl->region == HETC_BUF_ARENA && gl->off >= m2.scratch_off &&
                          gl->off + gl->bytes <= m2.scratch_off + m2.scratch_bytes &&
                          gl->last == at && at >= 0,
                      "zero 2 '%s': gradient not backward scratch dying at its accumulate "
                      "(last %d, accum at %d)", p->grad->name, gl ? gl->last : -2, at);
            }
            CHECK(m2.grad_bytes == want_g && mp.grad_bytes == want_g1,
                  "gradient bytes: zero 2 %lld (want %lld), zero 1 %lld (want %lld)",
                  (long long)m2.grad_bytes, (long long)want_g, (long long)mp.grad_bytes,
                  (long long)want_g1);
            CHECK(m2.grad_bytes < mp.grad_bytes && m2.opt_bytes == mp.opt_bytes &&
                      m2.param_bytes == mp.param_bytes,
                  "zero 2 vs zero 1: params %lld/%lld grads %lld/%lld optstate %lld/%lld",
                  (long long)m2.param_bytes, (long long)mp.param_bytes, (long long)m2.grad_bytes,
                  (long long)mp.grad_bytes, (long long)m2.opt_bytes, (long long)mp.opt_bytes);
            printf("zero 2, dp 3: grads %lld bytes (zero 1: %lld)\n", (long long)m2.grad_bytes,
                   (long long)mp.grad_bytes);
            memplan_free(&m2);
            check_stage(st, "zero 2, dp 3");
        }
        memplan_free(&mp);
    }
    fixture_free(&two[0]);
    fixture_free(&two[1]);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s GPT_TINY.onnx [MODEL.onnx]\n", argv[0]);
        return 2;
    }
    IrError err = {{0}};
    for (int sgd = 0; sgd < 2; sgd++) {
        PartStage st;
        if (fixture_one_stage(&st, argv[1], 2, 16, sgd, &err)) {
            fprintf(stderr, "FAIL fixture: %s\n", err.msg);
            return 1;
        }
        check_stage(&st, sgd ? "gpt_tiny 1 stage sgd" : "gpt_tiny 1 stage adamw");
        int nf = check_stage_fused(&st, sgd ? "gpt_tiny 1 stage sgd, fused" : "gpt_tiny 1 stage adamw, fused", 1);
        CHECK(nf > 0, "gpt_tiny (%s): nothing fused", sgd ? "sgd" : "adamw");
        fixture_free(&st);
    }
    /* recompute: the backward re-runs forward nodes (partition_recompute.c);
     * the same checks hold and the slot holds only the saved values */
    int64_t slot_of[3] = {0};
    for (int mode = 0; mode < 3; mode++) {
        PartStage st;
        if (fixture_one_stage(&st, argv[1], 2, 16, 0, &err)) {
            fprintf(stderr, "FAIL fixture: %s\n", err.msg);
            return 1;
        }
        int nrc = 0;
        CHECK(part_recompute(st.train, (PartRecompute)mode, &nrc, &err) == 0, "recompute: %s",
              err.msg);
        CHECK(ir_verify(st.train, 1, &err) == 0, "recompute %s: %s",
              part_recompute_name((PartRecompute)mode), err.msg);
        CHECK((mode == 0) == (nrc == 0), "recompute %s: %d clones",
              part_recompute_name((PartRecompute)mode), nrc);
        char what[96];
        snprintf(what, sizeof what, "gpt_tiny 1 stage, recompute %s (%d nodes recomputed)",
                 part_recompute_name((PartRecompute)mode), nrc);
        check_stage(&st, what);
        MemPlan mp;
        if (memplan_build(&st, 2, &mp, &err) == 0) slot_of[mode] = mp.slot_bytes;
        memplan_free(&mp);
        fixture_free(&st);
    }
    CHECK(slot_of[PART_RC_FULL] < slot_of[PART_RC_SELECTIVE] &&
              slot_of[PART_RC_SELECTIVE] < slot_of[PART_RC_NONE],
          "slot bytes: none %lld selective %lld full %lld", (long long)slot_of[0],
          (long long)slot_of[2], (long long)slot_of[1]);
    PartStage two[2];
    if (fixture_two_stage(two, 2, 3, 0, &err)) {
        fprintf(stderr, "FAIL fixture: %s\n", err.msg);
        return 1;
    }
    check_stage(&two[0], "two-stage split, stage 0");
    check_stage(&two[1], "two-stage split, stage 1");
    fixture_free(&two[0]);
    fixture_free(&two[1]);
    if (argc == 3) { /* a model with elementwise chains in its train graph */
        PartStage st;
        if (fixture_one_stage(&st, argv[2], 2, 16, 0, &err)) {
            fprintf(stderr, "FAIL fixture %s: %s\n", argv[2], err.msg);
            return 1;
        }
        check_stage(&st, argv[2]);
        char what[600];
        snprintf(what, sizeof what, "%s, fused", argv[2]);
        CHECK(check_stage_fused(&st, what, 1) > 0, "%s: nothing fused", argv[2]);
        fixture_free(&st);
    }
    errors();
    zero_slices();
    printf("%lld live scratch pairs checked\n", (long long)overlaps_checked);
    printf("%lld views (values sharing their input's bytes) checked\n", (long long)views_checked);
    CHECK(views_checked > 0, "no view planned (gpt_tiny's attention Reshapes should be)");
    if (fails) {
        fprintf(stderr, "%d failures\n", fails);
        return 1;
    }
    printf("ok\n");
    return 0;
}
