/* Options every subcommand that imports a model shares, and the import +
 * pass pipeline they run. */
#ifndef HETC_COMPILE_OPTS_H
#define HETC_COMPILE_OPTS_H

#include "onnx_import.h"
#include "pass.h"

#define CLI_MAX_BINDS 32

typedef struct CompileOpts {
    const char *model;
    int64_t batch, seq;
    HetcDimBinding binds[CLI_MAX_BINDS];
    int nbinds;
    const char *passes;      /* NULL: the default pipeline */
    const char *dump_after;  /* NULL, "all" or pass names */
    const char *out_dir;     /* -o */
    int verbose;
    int print_ir;
    /* --trainable / --frozen globs (frontend/onnx_import.h) */
    const char *trainable[CLI_MAX_BINDS], *frozen[CLI_MAX_BINDS];
    int ntrainable, nfrozen;
    /* set by the subcommand: print the parameter-set line on stderr after
     * its import ("params: N trainable ..., M buffers kept constant ...") */
    int report_params;
} CompileOpts;

void compile_opts_init(CompileOpts *o);
/* Try to consume argv[*i] as a shared option: 1 consumed, 0 not ours, -1 bad. */
int compile_opts_parse_one(CompileOpts *o, int argc, char **argv, int *i);
/* Help text for the shared options. */
void compile_opts_help(FILE *f);

/* Import o->model (dumping 00-import.ir when asked) with extra bindings. */
IrGraph *compile_import(const CompileOpts *o, const HetcDimBinding *extra, int nextra,
                        int allow_unbound, PassContext *ctx, IrError *err);
/* Run o->passes (or the default pipeline). */
int compile_run_passes(IrGraph *g, const CompileOpts *o, PassContext *ctx, IrError *err);
/* Layer ids by node name, taken from the graph the planner saw (modules
 * and layers run on it): graphs imported again at another batch (a stage's
 * local rows, hetc profile's per-rank rows) get their nodes' layers by
 * name, as the importer names nodes alike at every batch. */
typedef struct LayerIndex {
    struct LayerIndexEntry *e; /* sorted by name */
    int n;
} LayerIndex;
/* The live, named nodes of lg with a layer; -1 with err on out of memory. */
int layer_index_build(LayerIndex *ix, const IrGraph *lg, IrError *err);
/* The layer of the node called node_name; -1 if lg had none. */
int layer_index_of(const LayerIndex *ix, const char *node_name);
void layer_index_free(LayerIndex *ix);

/* Op histogram summary line on f: "nodes 123: MatMul 12, Add 30, ..." */
void compile_print_summary(FILE *f, const IrGraph *g, const char *what);

#endif
