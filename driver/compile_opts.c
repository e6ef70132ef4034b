#include "compile_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "seq_limit.h"

void compile_opts_init(CompileOpts *o) {
    memset(o, 0, sizeof *o);
    o->batch = -1;
    o->seq = -1;
}

int compile_opts_parse_one(CompileOpts *o, int argc, char **argv, int *i) {
    const char *v = NULL;
    int r;
    if ((r = cli_opt(argc, argv, i, "--batch", &v)) != 0)
        return r < 0 ? -1 : (cli_parse_i64("--batch", v, &o->batch) ? -1 : 1);
    if ((r = cli_opt(argc, argv, i, "--seq", &v)) != 0)
        return r < 0 ? -1 : (cli_parse_i64("--seq", v, &o->seq) ? -1 : 1);
    if ((r = cli_opt(argc, argv, i, "--bind", &v)) != 0) {
        if (r < 0) return -1;
        const char *eq = strchr(v, '=');
        if (!eq || eq == v) {
            fprintf(stderr, "hetc: --bind expects NAME=VALUE, got '%s'\n", v);
            return -1;
        }
        if (o->nbinds >= CLI_MAX_BINDS) {
            fprintf(stderr, "hetc: at most %d --bind options\n", CLI_MAX_BINDS);
            return -1;
        }
        int64_t val;
        if (cli_parse_i64("--bind", eq + 1, &val)) return -1;
        /* a copy of the name: argv stays intact (hetc compile hands it on to hetc plan) */
        size_t len = (size_t)(eq - v);
        if (len >= sizeof o->bind_names[0]) {
            fprintf(stderr, "hetc: --bind: dim name '%.*s' is too long\n", (int)len, v);
            return -1;
        }
        memcpy(o->bind_names[o->nbinds], v, len);
        o->bind_names[o->nbinds][len] = '\0';
        o->bind_values[o->nbinds++] = val;
        return 1;
    }
    if ((r = cli_opt(argc, argv, i, "--bind-input", &v)) != 0) {
        if (r < 0) return -1;
        IrError err = {{0}};
        if (input_binds_parse(&o->ibinds, v, &err)) {
            fprintf(stderr, "hetc: %s\n", err.msg);
            return -1;
        }
        return 1;
    }
    int fr = 0;
    if ((r = cli_opt(argc, argv, i, "--trainable", &v)) != 0 ||
        (fr = 1, r = cli_opt(argc, argv, i, "--frozen", &v)) != 0) {
        if (r < 0) return -1;
        int *n = fr ? &o->nfrozen : &o->ntrainable;
        if (*n >= CLI_MAX_BINDS) {
            fprintf(stderr, "hetc: at most %d %s options\n", CLI_MAX_BINDS,
                    fr ? "--frozen" : "--trainable");
            return -1;
        }
        (fr ? o->frozen : o->trainable)[(*n)++] = v;
        return 1;
    }
    if ((r = cli_opt(argc, argv, i, "--passes", &v)) != 0) {
        o->passes = v;
        return r;
    }
    if ((r = cli_opt(argc, argv, i, "--dump-ir-after", &v)) != 0) {
        o->dump_after = v;
        return r;
    }
    if ((r = cli_opt(argc, argv, i, "-o", &v)) != 0 ||
        (r = cli_opt(argc, argv, i, "--output", &v)) != 0) {
        o->out_dir = v;
        return r;
    }
    if (strcmp(argv[*i], "-v") == 0 || strcmp(argv[*i], "--verbose") == 0) {
        o->verbose = 1;
        return 1;
    }
    if (strcmp(argv[*i], "--print-ir") == 0) {
        o->print_ir = 1;
        return 1;
    }
    return 0;
}

/* "(dim_params a, b, c)" from the importer's own list, wrapped at 88
 * columns; col is where the caller's text ended. */
static void dim_names(FILE *f, int col, const char *const *names) {
    col += fprintf(f, " (dim_params");
    for (int i = 0; names[i]; i++) {
        int len = (int)strlen(names[i]) + 2 + (names[i + 1] == NULL);
        if (col + len > 88) {
            fprintf(f, "%s\n                        ", i ? "," : "");
            col = 24;
        } else if (i) {
            col += fprintf(f, ",");
        }
        col += fprintf(f, " %s", names[i]);
    }
    fprintf(f, ")\n");
}

void compile_opts_bind_extra_inputs(CompileOpts *o, FILE *log) {
    o->ibinds.all_extra = 1;
    o->ibinds.log = log;
}

void compile_opts_help(FILE *f) {
    dim_names(f, fprintf(f, "  --batch N              bind the batch dim"),
              hetc_batch_dim_names());
    dim_names(f, fprintf(f, "  --seq N                bind the sequence dim"),
              hetc_seq_dim_names());
    fprintf(f, "  --bind NAME=N          bind any other symbolic dim by its ONNX dim_param\n");
    input_binds_help(f);
    fprintf(f,
            "  --trainable GLOB       train the float initializers GLOB matches even if hetc\n"
            "                         takes them for buffers (repeatable)\n"
            "  --frozen GLOB          keep the parameters GLOB matches constant (repeatable;\n"
            "                         wins over --trainable)\n"
            "  --passes a,b,c         run these passes instead of the default pipeline\n"
            "                         (%s; see --list-passes)\n"
            "  --dump-ir-after=P|all  write the IR after pass P (or every pass) to\n"
            "                         OUT/ir/NN-<pass>.ir (00-import.ir is the import)\n"
            "  -o, --output DIR       output directory (default: build)\n"
            "  --print-ir             print the final IR on stdout\n"
            "  -v, --verbose          one line per pass on stderr\n",
            pass_default_pipeline());
}

void model_source_free(ModelSource *s) {
    hetc_onnx_close(s->file);
    s->file = NULL;
}

/* o->model lowered at io's bindings: from the decoded file when the caller
 * holds one (o->src), read on first use. */
static IrGraph *model_build(const CompileOpts *o, const HetcImportOptions *io, IrError *err) {
    if (!o->src) return hetc_import_onnx(o->model, io, err);
    if (!o->src->file) {
        if (!(o->src->file = hetc_onnx_open(o->model, err))) return NULL;
        o->src->reads++;
    }
    o->src->builds++;
    return hetc_onnx_import(o->src->file, io, err);
}

IrGraph *compile_import(const CompileOpts *o, const HetcDimBinding *extra, int nextra,
                        int allow_unbound, PassContext *ctx, IrError *err) {
    HetcImportOptions io;
    hetc_import_options_default(&io);
    io.batch = o->batch;
    io.seq = o->seq;
    HetcDimBinding all[2 * CLI_MAX_BINDS + 64];
    int n = 0;
    for (int i = 0; i < o->nbinds; i++)
        all[n++] = (HetcDimBinding){o->bind_names[i], o->bind_values[i]};
    for (int i = 0; i < nextra && n < (int)(sizeof all / sizeof all[0]); i++) all[n++] = extra[i];
    io.bindings = all;
    io.nbindings = n;
    io.allow_unbound = allow_unbound;
    io.trainable = o->trainable;
    io.ntrainable = o->ntrainable;
    io.frozen = o->frozen;
    io.nfrozen = o->nfrozen;
    HetcParamSet ps = {0};
    if (o->report_params) io.param_set = &ps;
    IrGraph *g = model_build(o, &io, err);
    if (!g) return NULL;
    if (o->report_params) hetc_param_set_print(stderr, "params", &ps);
    hetc_param_set_free(&ps);
    /* with dims left open (hetc run) the caller binds inputs once it has bound the dims */
    if (!allow_unbound && (o->ibinds.n || o->ibinds.all_extra) &&
        input_binds_apply(g, &o->ibinds, err)) {
        ir_graph_free(g);
        return NULL;
    }
    if (pass_maybe_dump(g, "import", ctx, err) != 0) {
        ir_graph_free(g);
        return NULL;
    }
    return g;
}

int compile_check_token_shape(const IrGraph *g, const CompileOpts *o, const char *batch_opt,
                              IrError *err) {
    const IrValue *ids = input_binds_token_input(g);
    if (!ids || ids->shape.rank != 2) return 0; /* the callers' own checks say more */
    const char *model = o->model ? o->model : "the model";
    char sb[96];
    ir_shape_str(&ids->shape, sb, sizeof sb);
    int64_t b = ids->shape.dims[0], t = ids->shape.dims[1];
    if (o->batch >= 0 && b >= 0 && b != o->batch)
        return ir_errorf(err,
                         "%s has a fixed batch of %lld (input '%s' %s%s has no symbolic batch "
                         "dim), not the %lld rows asked for: use %s %lld (when planning, with a "
                         "--global-batch that is a multiple of it), or " COMPILE_REEXPORT_HINT,
                         model, (long long)b, ids->name, ir_dtype_name(ids->dtype), sb,
                         (long long)o->batch, batch_opt, (long long)b);
    if (o->seq >= 0 && t >= 0 && t != o->seq)
        return ir_errorf(err,
                         "%s has a fixed sequence length of %lld (input '%s' %s%s has no "
                         "symbolic sequence dim), not the --seq %lld asked for: use --seq %lld, "
                         "or " COMPILE_REEXPORT_HINT,
                         model, (long long)t, ids->name, ir_dtype_name(ids->dtype), sb,
                         (long long)o->seq, (long long)t);
    return 0;
}

int compile_fixed_batch(const CompileOpts *o, int64_t *fixed, IrError *err) {
    HetcImportOptions io;
    hetc_import_options_default(&io);
    io.allow_unbound = 1;
    *fixed = -1;
    IrGraph *g = model_build(o, &io, err);
    if (!g) return -1;
    const IrValue *ids = input_binds_token_input(g);
    if (ids && ids->shape.rank >= 1 && ids->shape.dims[0] >= 0) *fixed = ids->shape.dims[0];
    ir_graph_free(g);
    return 0;
}

int compile_run_passes(IrGraph *g, const CompileOpts *o, PassContext *ctx, IrError *err) {
    const char *pipe = o->passes ? o->passes : pass_default_pipeline();
    if (!*pipe) return 0;
    /* --seq past the model's positions fails far from the cause (a Where
     * that does not broadcast, an index out of range at step 1): name the
     * limit (seq_limit.h) */
    if (pass_run_pipeline(g, pipe, ctx, err)) {
        seq_limit_explain(g, o->seq, err);
        return 1;
    }
    return seq_limit_check(g, o->seq, err);
}

void compile_print_summary(FILE *f, const IrGraph *g, const char *what) {
    int count[IR_OP_COUNT] = {0};
    for (int i = 0; i < g->nnodes; i++) count[g->nodes[i]->op]++;
    int64_t params = 0, nparam = 0, nconst = 0;
    for (int i = 0; i < g->nvalues; i++) {
        const IrValue *v = g->values[i];
        if (v->kind == IR_VK_PARAM) {
            nparam++;
            int64_t ne = ir_shape_numel(&v->shape);
            if (ne > 0) params += ne;
        } else if (v->kind == IR_VK_CONST) {
            nconst++;
        }
    }
    fprintf(f, "%s: %d nodes, %lld parameter tensors (%lld elements), %lld constants\n", what,
            g->nnodes, (long long)nparam, (long long)params, (long long)nconst);
    fprintf(f, "  ops:");
    int col = 6;
    for (int op = 0; op < IR_OP_COUNT; op++) {
        if (!count[op]) continue;
        char item[64];
        int len = snprintf(item, sizeof item, " %s %d,", ir_op_name((IrOp)op), count[op]);
        if (col + len > 96) {
            fprintf(f, "\n      ");
            col = 6;
        }
        fputs(item, f);
        col += len;
    }
    fputc('\n', f);
}

/* ------------------------------------------------------------ layer index */

struct LayerIndexEntry {
    const char *name; /* lg's node name: lg must outlive the index */
    int layer;
};

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const struct LayerIndexEntry *)a)->name,
                  ((const struct LayerIndexEntry *)b)->name);
}

int layer_index_build(LayerIndex *ix, const IrGraph *lg, IrError *err) {
    ix->n = 0;
    if (!(ix->e = calloc((size_t)lg->nnodes + 1, sizeof *ix->e)))
        return ir_errorf(err, "out of memory");
    for (int i = 0; i < lg->nnodes; i++) {
        const IrNode *n = lg->nodes[i];
        if (!n->dead && n->layer_id > 0 && n->name[0])
            ix->e[ix->n++] = (struct LayerIndexEntry){n->name, n->layer_id};
    }
    qsort(ix->e, (size_t)ix->n, sizeof *ix->e, cmp_entry);
    return 0;
}

int layer_index_of(const LayerIndex *ix, const char *node_name) {
    struct LayerIndexEntry key = {node_name, 0};
    const struct LayerIndexEntry *hit =
        ix->n ? bsearch(&key, ix->e, (size_t)ix->n, sizeof *ix->e, cmp_entry) : NULL;
    return hit ? hit->layer : -1;
}

void layer_index_free(LayerIndex *ix) {
    free(ix->e);
    ix->e = NULL;
    ix->n = 0;
}
