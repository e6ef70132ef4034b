/* Options every subcommand that imports a model shares, and the import +
 * pass pipeline they run. */
#ifndef HETC_COMPILE_OPTS_H
#define HETC_COMPILE_OPTS_H

#include "input_binds.h"
#include "onnx_import.h"
#include "pass.h"

#define CLI_MAX_BINDS 32

/* The model file of one compile, read and decoded once (frontend's
 * HetcOnnxFile) and lowered to IR at every batch the compile needs; the
 * counts are what `hetc compile -v` reports (tests/driver counts them). */
typedef struct ModelSource {
    HetcOnnxFile *file; /* NULL until the first import */
    int reads;          /* times the file was read and decoded */
    int builds;         /* IR graphs lowered from it */
} ModelSource;
void model_source_free(ModelSource *s);

typedef struct CompileOpts {
    const char *model;
    int64_t batch, seq;
    /* --bind NAME=N: the names are held here, not as pointers, so a copy of
     * the options (hetc compile imports with copies) is self-contained */
    char bind_names[CLI_MAX_BINDS][128];
    int64_t bind_values[CLI_MAX_BINDS];
    int nbinds;
    const char *passes;      /* NULL: the default pipeline */
    const char *dump_after;  /* NULL, "all" or pass names */
    const char *out_dir;     /* -o */
    int verbose;
    int print_ir;
    /* --bind-input, and whether every input beside the token ids must be
     * bound (the training commands set ibinds.all_extra and ibinds.log). */
    InputBinds ibinds;
    /* --trainable / --frozen globs (frontend/onnx_import.h) */
    const char *trainable[CLI_MAX_BINDS], *frozen[CLI_MAX_BINDS];
    int ntrainable, nfrozen;
    /* set by the subcommand: print the parameter-set line on stderr after
     * its import ("params: N trainable ..., M buffers kept constant ...") */
    int report_params;
    /* NULL: every import reads o->model again (the single-import commands) */
    ModelSource *src;
} CompileOpts;

void compile_opts_init(CompileOpts *o);
/* Try to consume argv[*i] as a shared option: 1 consumed, 0 not ours, -1 bad. */
int compile_opts_parse_one(CompileOpts *o, int argc, char **argv, int *i);
/* The training commands (train, plan, profile, compile): every graph input
 * beside the token ids is bound to a constant (by name, or --bind-input),
 * one line per input on `log` (NULL: silent). */
void compile_opts_bind_extra_inputs(CompileOpts *o, FILE *log);
/* Help text for the shared options. */
void compile_opts_help(FILE *f);

/* Import o->model with extra dim bindings, bind extra graph inputs to
 * constants (o->ibinds), and dump 00-import.ir when asked. */
IrGraph *compile_import(const CompileOpts *o, const HetcDimBinding *extra, int nextra,
                        int allow_unbound, PassContext *ctx, IrError *err);
/* A model exported with fixed shapes (no symbolic batch / sequence dim on
 * the token ids) imports at its own extents whatever --batch / --seq say.
 * After an import at o->batch / o->seq: fails, saying what the user can do
 * (the option values that fit, or a re-export with symbolic dims), when the
 * token input's extents are not those asked for.  batch_opt names the
 * command's batch option ("--microbatch", "--batch"). */
int compile_check_token_shape(const IrGraph *g, const CompileOpts *o, const char *batch_opt,
                              IrError *err);
/* Whether the token input's batch dim is fixed in the ONNX file (a probe
 * import with every dim left open): *fixed = its extent, or -1. */
int compile_fixed_batch(const CompileOpts *o, int64_t *fixed, IrError *err);
/* What to say about re-exporting with symbolic dims. */
#define COMPILE_REEXPORT_HINT                                                               \
    "re-export it with symbolic batch and sequence dims (tools/export_hf.py does; "         \
    "torch.onnx.export: dynamic_axes={'input_ids': {0: 'batch', 1: 'seq'}}, or "            \
    "dynamic_shapes with dynamo=True)"
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
