/* lower_stage on stages built like partition builds them (stage_fixture.h):
 *  - the IR texts: printed with every constant inline and parsed back,
 *    node i of the text is node i of the graph (op, name, phase, operand
 *    names) and constants carry their exact bytes (hetrt_node numbering);
 *  - the calls: each hetrt_node's bufs decode to the memory plan's
 *    location of the node's operands; call counts per function;
 *  - the config text: every record of docs/STAGE_ABI.md, offsets equal to
 *    the plan's; name escaping;
 *  - emission: gpt_tiny as one stage and both stages of a two-stage split
 *    emitted to objects (no link: the runtime is another library) and .ll
 *    files that llvm-as accepts, with one `call @hetrt_node` per node;
 *  - errors: bad schedules, optimizer / token dtype / rows mismatches.
 * Usage: test_lower_stage GPT_TINY.onnx WORKDIR LLVM_AS|- */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lower_stage.h"
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

/* ------------------------------------------------------------ IR text */

static void text_roundtrip(const IrGraph *g, const char *what) {
    IrPrintOptions po;
    ir_print_options_default(&po);
    po.max_inline_elems = 1 << 30;
    char *text = ir_print_to_string(g, &po);
    IrError err = {{0}};
    IrGraph *b = ir_parse(text, what, &err);
    CHECK(b != NULL, "%s: text does not parse: %s", what, err.msg);
    if (!b) {
        free(text);
        return;
    }
    CHECK(b->nnodes == g->nnodes, "%s: %d nodes, text %d", what, g->nnodes, b->nnodes);
    for (int i = 0; i < g->nnodes && i < b->nnodes; i++) {
        const IrNode *x = g->nodes[i], *y = b->nodes[i];
        int same = x->op == y->op && !strcmp(x->name, y->name) && x->phase == y->phase &&
                   x->nin == y->nin && x->nout == y->nout;
        for (int k = 0; same && k < x->nin; k++)
            same = (!x->in[k] && !y->in[k]) ||
                   (x->in[k] && y->in[k] && !strcmp(x->in[k]->name, y->in[k]->name));
        for (int k = 0; same && k < x->nout; k++)
            same = (!x->out[k] && !y->out[k]) ||
                   (x->out[k] && y->out[k] && !strcmp(x->out[k]->name, y->out[k]->name));
        CHECK(same, "%s: node %d is %s '%s' in the graph, %s '%s' in the text", what, i,
              ir_op_name(x->op), x->name, ir_op_name(y->op), y->name);
    }
    int consts = 0;
    for (int i = 0; i < g->nvalues; i++) {
        const IrValue *v = g->values[i];
        if (v->kind != IR_VK_CONST) continue;
        consts++;
        IrValue *w = ir_graph_find_value(b, v->name);
        CHECK(w && !w->data_elided && w->nbytes == v->nbytes &&
                  (!v->nbytes || !memcmp(w->data, v->data, v->nbytes)),
              "%s: constant '%s' not carried exactly by the text", what, v->name);
    }
    printf("%s: %d nodes, %d constants round-trip through %zu bytes of text\n", what, g->nnodes,
           consts, strlen(text));
    ir_graph_free(b);
    free(text);
}

/* ------------------------------------------------------------ calls */

static int count_fn(const LeFunc *f, const char *callee) {
    int n = 0;
    for (int i = 0; i < f->ncalls; i++) n += !strcmp(f->calls[i].fn, callee);
    return n;
}

static const LeFunc *func(const LeProgram *p, const char *name) {
    for (int i = 0; i < p->nfuncs; i++)
        if (!strcmp(p->funcs[i].name, name)) return &p->funcs[i];
    return NULL;
}

static void check_calls(const LeProgram *p, const PartStage *st, const MemPlan *mp) {
    int nf = 0, nb = 0;
    for (int i = 0; i < st->train->nnodes; i++)
        st->train->nodes[i]->phase == IR_PHASE_FWD ? nf++ : nb++;
    const LeFunc *fw = func(p, "forward"), *bw = func(p, "backward"), *up = func(p, "update");
    CHECK(func(p, "init") && fw && bw && up, "stage %d: missing functions", st->stage);
    if (!fw || !bw || !up) return;
    CHECK(count_fn(fw, "hetrt_node") == nf && count_fn(bw, "hetrt_node") == nb &&
              count_fn(up, "hetrt_node") == st->update->nnodes,
          "stage %d: node calls %d/%d/%d for %d/%d/%d nodes", st->stage,
          count_fn(fw, "hetrt_node"), count_fn(bw, "hetrt_node"), count_fn(up, "hetrt_node"), nf,
          nb, st->update->nnodes);
    CHECK(count_fn(bw, "hetrt_accum") == st->nparams && count_fn(up, "hetrt_zero") == st->nparams,
          "stage %d: accum / zero per parameter", st->stage);
    CHECK(count_fn(fw, "hetrt_loss") == (ir_graph_find_value(st->train, "loss") != NULL),
          "stage %d: loss calls", st->stage);
    int sends[2] = {0}, recvs[2] = {0};
    for (int i = 0; i < st->nxfers; i++)
        (st->xfers[i].send ? sends : recvs)[st->xfers[i].kind]++;
    CHECK(count_fn(fw, "hetrt_send") == sends[PX_ACT] && count_fn(fw, "hetrt_recv") == recvs[PX_ACT] &&
              count_fn(bw, "hetrt_send") == sends[PX_GRAD] &&
              count_fn(bw, "hetrt_recv") == recvs[PX_GRAD],
          "stage %d: transfer calls", st->stage);
    /* every hetrt_node's bufs are the plan's locations of its operands */
    const LeFunc *fns[3] = {fw, bw, up};
    for (int f = 0; f < 3; f++)
        for (int c = 0; c < fns[f]->ncalls; c++) {
            const LeCall *call = &fns[f]->calls[c];
            if (strcmp(call->fn, "hetrt_node")) continue;
            int graph = (int)call->args[0].i, idx = (int)call->args[1].i;
            CHECK(graph == (f == 2 ? HETC_GRAPH_UPDATE : HETC_GRAPH_TRAIN), "graph id");
            const IrNode *n = (graph ? st->update : st->train)->nodes[idx];
            CHECK(call->args[4].kind == LE_ARG_I64S && call->args[4].n == n->nin + n->nout,
                  "node %d bufs", idx);
            for (int k = 0; k < n->nin + n->nout && k < call->args[4].n; k++) {
                const IrValue *v = k < n->nin ? n->in[k] : n->out[k - n->nin];
                int64_t b = call->args[4].vals[k];
                if (!v) {
                    CHECK(b == 0, "omitted operand not NONE");
                    continue;
                }
                const MpLoc *l = memplan_loc(mp, st, graph, v);
                int region = (int)(b >> 56);
                int64_t off = b & (((int64_t)1 << 56) - 1);
                CHECK(region == l->region && (region == HETC_BUF_CONST || off == l->off),
                      "stage %d node %d operand %d ('%s'): buf %d/%lld, plan %d/%lld", st->stage,
                      idx, k, v->name, region, (long long)off, l->region, (long long)l->off);
            }
        }
}

/* ------------------------------------------------------------ config */

static void check_config(const char *cfg, const PartStage *st, const MemPlan *mp,
                         const LowerOpts *o) {
    char *copy = ir_strdup(cfg), *save = NULL;
    int line = 0, params = 0, xfers = 0, ended = 0;
    const char *keys[] = {"stage", "stages", "dp", "rows", "local_rows", "seq", "accum", "layers",
                          "token_dtype", "optimizer", "lr", "lr_schedule", "warmup", "steps"};
    int seen[14] = {0};
    for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save), line++) {
        CHECK(!ended, "config: text after end");
        if (line == 0) {
            CHECK(!strcmp(l, "hetc-stage 1"), "config: first line '%s'", l);
            continue;
        }
        char key[64] = "";
        sscanf(l, "%63s", key);
        if (!strcmp(key, "end")) {
            ended = 1;
        } else if (!strcmp(key, "param")) {
            char name[512];
            int layer, shared;
            long long numel, po, ao, mo, vo;
            int n = sscanf(l, "param %511s layer %d shared %d numel %lld param %lld acc %lld m %lld v %lld",
                           name, &layer, &shared, &numel, &po, &ao, &mo, &vo);
            CHECK(n == 8, "config: bad param line '%s'", l);
            const MpParam *p = &mp->params[params];
            CHECK(n == 8 && params < mp->nparams && po == p->param_off && ao == p->acc_off &&
                      mo == p->m_off && vo == p->v_off && numel == p->numel,
                  "config: param line '%s' vs plan", l);
            /* ABI 3: the shape the train graph declares, dims joined by 'x' */
            const IrValue *gv = ir_graph_find_value(st->train, p->name);
            char want[256] = " shape ";
            for (int d = 0; gv && d < gv->shape.rank; d++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "x" : "",
                         (long long)gv->shape.dims[d]);
            const char *sh = strstr(l, " shape ");
            CHECK(gv && sh && !strcmp(sh, want), "config: param line '%s': want '%s'", l, want);
            params++;
        } else if (!strcmp(key, "xfer")) {
            int id, peer;
            char dir[8], kind[8];
            long long rows, rb;
            int n = sscanf(l, "xfer %d %7s %7s peer %d rows %lld row_bytes %lld", &id, dir, kind,
                           &peer, &rows, &rb);
            const PartXfer *x = &st->xfers[xfers];
            CHECK(n == 6 && xfers < st->nxfers && id == x->id && peer == x->peer &&
                      !strcmp(dir, x->send ? "send" : "recv") &&
                      !strcmp(kind, x->kind == PX_ACT ? "act" : "grad"),
                  "config: xfer line '%s'", l);
            xfers++;
        } else if (!strcmp(key, "shared")) {
            char name[512];
            CHECK(sscanf(l, "shared %511s stages", name) == 1, "config: '%s'", l);
        } else if (!strcmp(key, "arena_off")) {
            char what[32];
            long long off;
            CHECK(sscanf(l, "arena_off %31s %lld", what, &off) == 2, "config: '%s'", l);
            CHECK((!strcmp(what, "lr") && off == mp->lr_off) ||
                      (!strcmp(what, "step") && off == mp->step_off) ||
                      (!strcmp(what, "grad_norm") && off == mp->norm_off),
                  "config: '%s' vs plan", l);
        } else {
            int k = 0;
            while (k < 14 && strcmp(keys[k], key)) k++;
            CHECK(k < 14, "config: unknown record '%s'", l);
            if (k < 14) seen[k]++;
        }
    }
    for (int k = 0; k < 14; k++) CHECK(seen[k] == 1, "config: record %s %d times", keys[k], seen[k]);
    CHECK(ended && params == mp->nparams && xfers == st->nxfers, "config: %d params %d xfers",
          params, xfers);
    char want[64];
    snprintf(want, sizeof want, "\naccum %d\n", o->accum);
    CHECK(strstr(cfg, want) != NULL, "config: accum");
    free(copy);
}

/* ------------------------------------------------------------ emission */

static int count_str(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void emit(const LeProgram *p, const PartStage *st, const char *dir, const char *tag,
                 const char *llvm_as) {
    char obj[4096], ll[4096];
    snprintf(obj, sizeof obj, "%s/%s.o", dir, tag);
    snprintf(ll, sizeof ll, "%s/%s.ll", dir, tag);
    LeOptions opt = {.obj_path = obj, .ll_path = ll, .opt_level = 0};
    IrError err = {{0}};
    CHECK(le_emit_program(p, &opt, &err) == 0, "%s: emit: %s", tag, err.msg);
    FILE *f = fopen(obj, "rb");
    unsigned char mag[4] = {0};
    CHECK(f && fread(mag, 1, 4, f) == 4 && !memcmp(mag, "\177ELF", 4), "%s: no ELF object", tag);
    if (f) fclose(f);
    f = fopen(ll, "rb");
    CHECK(f != NULL, "%s: no .ll", tag);
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    text[fread(text, 1, (size_t)n, f)] = 0;
    fclose(f);
    int nodes = st->train->nnodes + st->update->nnodes;
    CHECK(count_str(text, "call i32 @hetrt_node(") == nodes, "%s: %d hetrt_node calls for %d nodes",
          tag, count_str(text, "call i32 @hetrt_node("), nodes);
    CHECK(count_str(text, "call i32 @hetrt_accum(") == st->nparams, "%s: accum calls", tag);
    CHECK(strstr(text, "@hetc_config = private") && strstr(text, "@hetc_ir_train = private"),
          "%s: texts missing", tag);
    printf("%s: %ld bytes of LLVM IR, %d hetrt_node calls\n", tag, n, nodes);
    free(text);
    if (strcmp(llvm_as, "-")) {
        const char *argv[] = {llvm_as, ll, "-o", "/dev/null", NULL};
        CHECK(le_run_tool(argv, &err) == 0, "%s: llvm-as rejects the .ll: %s", tag, err.msg);
    }
}

/* ------------------------------------------------------------ driver */

static LowerOpts opts(int nstages, const int *dp, int accum, int nslots, const LeSched *sc,
                      const char *optim) {
    LowerOpts o = {.nstages = nstages, .dp = dp, .rows = 2, .seq = 16, .accum = accum,
                   .nslots = nslots, .sched = sc, .nsched = 2 * accum, .optimizer = optim,
                   .lr = 3e-4, .lr_schedule = "cosine", .warmup = 2, .steps = 10, .layers = 4};
    return o;
}

static const LeSched sched_1f1b[] = {{'F', 0}, {'F', 1}, {'B', 0}, {'F', 2},
                                     {'B', 1}, {'F', 3}, {'B', 2}, {'B', 3}};
static const LeSched sched_seq[] = {{'F', 0}, {'B', 0}, {'F', 1}, {'B', 1},
                                    {'F', 2}, {'B', 2}, {'F', 3}, {'B', 3}};

static void lower_check(const PartStage *st, const LowerOpts *o, const char *dir,
                        const char *tag, const char *llvm_as) {
    LeProgram p;
    char *cfg;
    MemPlan mp;
    IrError err = {{0}};
    if (lower_stage(st, o, &p, &cfg, &mp, &err)) {
        CHECK(0, "%s: lower_stage: %s", tag, err.msg);
        return;
    }
    CHECK(p.arena_bytes == mp.arena_bytes && p.nslots == o->nslots && p.config == cfg &&
              p.nsched == o->nsched && p.ir_train && p.ir_update && lower_stage_interprets(&p),
          "%s: program fields", tag);
    {   /* the same stage as direct kernel calls: no hetrt_node, so no IR text
         * (the binary links no interpreter: docs/STAGE_ABI.md, ABI 3) */
        LowerOpts od = *o;
        od.direct = 1;
        LeProgram pd;
        char *cd;
        MemPlan md;
        if (lower_stage(st, &od, &pd, &cd, &md, &err)) {
            CHECK(0, "%s: lower_stage (direct): %s", tag, err.msg);
        } else {
            CHECK(!pd.ir_train && !pd.ir_update && !lower_stage_interprets(&pd) &&
                      !strcmp(cd, cfg),
                  "%s: direct program: IR texts %p %p, calls hetrt_node %d, same config %d", tag,
                  (const void *)pd.ir_train, (const void *)pd.ir_update,
                  lower_stage_interprets(&pd), !strcmp(cd, cfg));
            lower_stage_free(&pd);
            free(cd);
            memplan_free(&md);
        }
    }
    check_calls(&p, st, &mp);
    check_config(cfg, st, &mp, o);
    emit(&p, st, dir, tag, llvm_as);
    printf("%s: ", tag);
    memplan_report(&mp, stdout);
    lower_stage_free(&p);
    free(cfg);
    memplan_free(&mp);
}

static void expect_error(const PartStage *st, const LowerOpts *o, const char *needle) {
    LeProgram p;
    char *cfg;
    MemPlan mp;
    IrError err = {{0}};
    int rc = lower_stage(st, o, &p, &cfg, &mp, &err);
    CHECK(rc == -1 && strstr(err.msg, needle), "want an error with '%s', got %d: %s", needle, rc,
          err.msg);
    if (!rc) {
        lower_stage_free(&p);
        free(cfg);
        memplan_free(&mp);
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s GPT_TINY.onnx WORKDIR LLVM_AS|-\n", argv[0]);
        return 2;
    }
    const char *dir = argv[2], *llvm_as = argv[3];
    mkdir(dir, 0777);
    IrError err = {{0}};

    char *esc = lower_config_name("a b%c\n\x7f/x");
    CHECK(!strcmp(esc, "a%20b%25c%0A%7F/x"), "escape: '%s'", esc);
    free(esc);

    PartStage one;
    if (fixture_one_stage(&one, argv[1], 2, 16, 0, &err)) {
        fprintf(stderr, "FAIL fixture: %s\n", err.msg);
        return 1;
    }
    text_roundtrip(one.train, "gpt_tiny train");
    text_roundtrip(one.update, "gpt_tiny update");
    int dp1[1] = {1};
    LowerOpts o = opts(1, dp1, 4, 2, sched_1f1b, "adamw");
    lower_check(&one, &o, dir, "gpt_tiny_stage0", llvm_as);

    /* errors, each naming what is wrong */
    LowerOpts e = o;
    static const LeSched clash[] = {{'F', 0}, {'F', 1}, {'F', 2}, {'B', 0},
                                    {'B', 1}, {'B', 2}, {'F', 3}, {'B', 3}};
    e.sched = clash;
    expect_error(&one, &e, "F2 needs slot 0, still held by microbatch 0");
    static const LeSched early[] = {{'B', 0}, {'F', 0}, {'F', 1}, {'B', 1},
                                    {'F', 2}, {'B', 2}, {'F', 3}, {'B', 3}};
    e.sched = early;
    expect_error(&one, &e, "B0 without its F");
    e = o;
    e.nsched = 6;
    expect_error(&one, &e, "schedule of 6 entries for 4 microbatches");
    e = o;
    e.optimizer = "sgd";
    expect_error(&one, &e, "optimizer sgd, but the update graph keeps second moments");
    e = o;
    e.token_dtype = IR_I32;
    expect_error(&one, &e, "token dtype i32 requested");
    e = o;
    e.rows = 4;
    expect_error(&one, &e, "4 rows over dp 1 is not the partition's 2 local rows");
    e = o;
    e.lr_schedule = "linear";
    expect_error(&one, &e, "lr schedule 'linear'");
    fixture_free(&one);

    PartStage two[2];
    if (fixture_two_stage(two, 2, 16, 0, &err)) {
        fprintf(stderr, "FAIL fixture: %s\n", err.msg);
        return 1;
    }
    text_roundtrip(two[1].train, "split stage 1 train");
    int dp2[2] = {1, 1};
    LowerOpts o0 = opts(2, dp2, 4, 2, sched_1f1b, "adamw"), o1 = opts(2, dp2, 4, 1, sched_seq, "adamw");
    lower_check(&two[0], &o0, dir, "split_stage0", llvm_as);
    lower_check(&two[1], &o1, dir, "split_stage1", llvm_as);
    /* a shared parameter: the config lists every stage holding it (stage 1
     * is made to hold stage 0's "ln" too, by name) */
    two[0].params[1].shared = 1;
    o0.all_stages = two;
    o0.nall_stages = 1;
    expect_error(&two[0], &o0, "1 stages in LowerOpts.all_stages, 2 in the plan");
    char *keep = two[1].params[0].name;
    two[1].params[0].name = ir_strdup("ln");
    o0.all_stages = two;
    o0.nall_stages = 2;
    LeProgram p;
    char *cfg = NULL;
    MemPlan mp;
    CHECK(lower_stage(&two[0], &o0, &p, &cfg, &mp, &err) == 0, "shared: %s", err.msg);
    if (cfg) {
        CHECK(strstr(cfg, "\nparam ln layer 1 shared 1 ") && strstr(cfg, "\nshared ln stages 0 1\n"),
              "shared record missing:\n%s", cfg);
        check_config(cfg, &two[0], &mp, &o0);
        lower_stage_free(&p);
        free(cfg);
        memplan_free(&mp);
    }
    free(two[1].params[0].name);
    two[1].params[0].name = keep;
    /* plan-wide: stage 1's config carries the record too, holding it or not */
    o1.all_stages = two;
    o1.nall_stages = 2;
    cfg = NULL;
    CHECK(lower_stage(&two[1], &o1, &p, &cfg, &mp, &err) == 0, "shared: %s", err.msg);
    if (cfg) {
        CHECK(strstr(cfg, "\nshared ln stages 0\n") != NULL, "stage 1: shared record missing:\n%s",
              cfg);
        lower_stage_free(&p);
        free(cfg);
        memplan_free(&mp);
    }
    fixture_free(&two[0]);
    fixture_free(&two[1]);
    if (fails) {
        fprintf(stderr, "%d failures\n", fails);
        return 1;
    }
    printf("ok\n");
    return 0;
}
