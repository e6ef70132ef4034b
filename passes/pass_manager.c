/* Pass manager: the table of passes, pipelines, verification after every
 * pass, and IR dumps (DESIGN §1).  Adding a pass is one line in pass_table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomic_file.h"
#include "pass.h"
#include "layers.h"   /* pass_layers (planner IR side) */
#include "modules.h"  /* pass_modules */
#include "autodiff.h" /* pass_autodiff (training) */
#include "loss.h"     /* pass_loss, pass_tie_weights (training) */
#include "optimizer.h" /* pass_optimizer (training) */
#include "mixed_precision.h" /* pass_mixed_precision (training, bf16-mixed) */

static const Pass pass_table[] = {
    {"shape-infer", "infer dtype and static shape of every value; fold shape computations",
     pass_shape_infer, 1},
    /* const-fold keeps whatever shapes it found (it may run before shape-infer) */
    {"const-fold", "evaluate nodes whose inputs are all constants (never parameters)",
     pass_const_fold, 0},
    {"dce", "remove nodes whose outputs are unused", pass_dce, 0},
    {"canonicalize", "rewrite exporter spellings into Linear, LayerNorm, RMSNorm, Gelu, SiLU, "
                     "Attention, Embedding", pass_canonicalize, 1},
    {"modules", "find repeated modules (transformer blocks) on the op-signature sequence, "
                "HAPT §5.1; sets module ids", pass_modules, 1},
    {"layers", "split modules into cost-balanced fine-grained layers (HAPT §5.1); sets layer ids",
     pass_layers, 1},
    /* training (docs/TRAINING.md) */
    {"tie-weights", "re-tie parameters an exporter untied (one equals another transposed, "
                    "bit-exact) as Transpose(original)", pass_tie_weights, 1},
    {"loss", "append next-token cross entropy on the logits against a new 'targets' input; "
             "output 'loss'", pass_loss, 1},
    {"mixed-precision", "bf16 autocast: Cast(to=bf16) on every f32 Linear's operands, the Linear "
                        "in bf16, Cast(to=f32) after it (--precision bf16-mixed)",
     pass_mixed_precision, 1},
    {"stochastic-rounding", "after mixed-precision: the bf16 copies of the weights rounded "
                            "stochastically (attribute sr; --bf16-rounding stochastic)",
     pass_stochastic_round, 1},
    {"autodiff", "reverse-mode gradients of 'loss' for every parameter (outputs grad/<param>)",
     pass_autodiff, 1},
    {"optimizer", "AdamW (default hyper-parameters) after global-norm clipping: optimizer "
                  "states, inputs lr/step, outputs upd/<param>", pass_optimizer, 1},
};
#define NPASSES ((int)(sizeof pass_table / sizeof pass_table[0]))

void pass_context_default(PassContext *ctx) {
    memset(ctx, 0, sizeof *ctx);
    ctx->dump_dir = ".";
    ctx->dump_index = 1;
}

const Pass *pass_find(const char *name) {
    for (int i = 0; i < NPASSES; i++)
        if (strcmp(pass_table[i].name, name) == 0) return &pass_table[i];
    return NULL;
}
int pass_count(void) { return NPASSES; }
const Pass *pass_at(int i) { return i >= 0 && i < NPASSES ? &pass_table[i] : NULL; }

void pass_list(FILE *f) {
    for (int i = 0; i < NPASSES; i++)
        fprintf(f, "  %-14s %s\n", pass_table[i].name, pass_table[i].summary);
}

const char *pass_default_pipeline(void) {
    return "shape-infer,const-fold,canonicalize,shape-infer,dce";
}

/* 1 if the comma list `list` contains `name` (exact item match). */
static int list_has(const char *list, const char *name) {
    size_t n = strlen(name);
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

static int wants_dump(const PassContext *ctx, const char *name) {
    if (!ctx || !ctx->dump_after || !*ctx->dump_after) return 0;
    return strcmp(ctx->dump_after, "all") == 0 || list_has(ctx->dump_after, name);
}

/* mkdir -p */
static int make_dirs(const char *path, IrError *err) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return ir_errorf(err, "dump directory path too long: '%s'", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return ir_errorf(err, "cannot create dump directory '%s': %s", buf,
                                 strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    return 0;
}

static int print_graph(FILE *f, const void *g) {
    IrPrintOptions po;
    ir_print_options_default(&po);
    return ir_print(g, f, &po);
}

/* atomic: a reader never sees a half-written dump */
static int write_dump(IrGraph *g, const char *dir, const char *file, IrError *err) {
    char path[4096], msg[sizeof err->msg];
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path)
        return ir_errorf(err, "IR dump '%s/%s': path too long", dir, file);
    if (atomic_write_file(path, 0644, print_graph, g, msg, sizeof msg))
        return ir_errorf(err, "cannot write IR dump: %s", msg);
    return 0;
}

int pass_maybe_dump(IrGraph *g, const char *name, PassContext *ctx, IrError *err) {
    if (!wants_dump(ctx, name)) return 0;
    const char *dir = ctx->dump_dir && *ctx->dump_dir ? ctx->dump_dir : ".";
    if (make_dirs(dir, err)) return -1;
    char file[512];
    /* the import is always 00; passes count from dump_index */
    int nn = strcmp(name, "import") == 0 ? 0 : ctx->dump_index;
    snprintf(file, sizeof file, "%02d-%s.ir", nn, name);
    return write_dump(g, dir, file, err);
}

static int count_live(const IrGraph *g) {
    int c = 0;
    for (int i = 0; i < g->nnodes; i++) c += !g->nodes[i]->dead;
    return c;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int unknown_pass(const char *name, IrError *err) {
    char known[1024];
    size_t o = 0;
    for (int i = 0; i < NPASSES; i++)
        o += (size_t)snprintf(known + o, o < sizeof known ? sizeof known - o : 0, "%s%s",
                              i ? ", " : "", pass_table[i].name);
    return ir_errorf(err, "unknown pass '%s' (known passes: %s)", name, known);
}

int pass_run_pipeline(IrGraph *g, const char *pipeline, PassContext *ctx, IrError *err) {
    PassContext dflt;
    if (!ctx) {
        pass_context_default(&dflt);
        ctx = &dflt;
    }
    /* Resolve every name first so a typo fails before any work is done. */
    const Pass *seq[256];
    int n = 0;
    const char *p = pipeline ? pipeline : "";
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char name[128];
        while (len && (*p == ' ')) p++, len--;
        while (len && p[len - 1] == ' ') len--;
        if (len) {
            if (len >= sizeof name) return unknown_pass(p, err);
            memcpy(name, p, len);
            name[len] = '\0';
            const Pass *ps = pass_find(name);
            if (!ps) return unknown_pass(name, err);
            if (n >= (int)(sizeof seq / sizeof seq[0]))
                return ir_errorf(err, "pipeline has more than %d passes", n);
            seq[n++] = ps;
        }
        if (!e) break;
        p = e + 1;
    }
    for (int i = 0; i < n; i++) {
        const Pass *ps = seq[i];
        int before = count_live(g);
        double t0 = now_ms();
        if (ps->run(g, ctx, err) != 0) return ir_error_prefix(err, "pass '%s'", ps->name);
        double t1 = now_ms();
        if (ctx->verbose)
            fprintf(stderr, "hetc: pass %-14s %6d -> %6d nodes  %8.2f ms\n", ps->name, before,
                    count_live(g), t1 - t0);
        if (ir_verify(g, ps->requires_shapes, err) != 0)
            return ir_error_prefix(err, "after pass '%s'", ps->name);
        if (pass_maybe_dump(g, ps->name, ctx, err) != 0) return -1;
        ctx->dump_index++;
    }
    return 0;
}
