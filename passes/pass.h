/* Pass manager (DESIGN §1): every pass takes the IR and returns it annotated
 * further; the verifier runs after each one; the IR can be dumped after any
 * pass (--dump-ir-after=PASS|all) as DIR/NN-<pass>.ir, where 00-import.ir is
 * the imported graph and NN counts the passes run. */
#ifndef HETC_PASS_H
#define HETC_PASS_H

#include "ir.h"

typedef struct PassContext {
    const char *dump_after;   /* NULL, "all", or a comma list of pass names */
    const char *dump_dir;     /* where dumps go (created if missing) */
    int verbose;              /* print one line per pass to stderr */
    int dump_index;           /* next NN; starts at 1 (00 is the import) */
} PassContext;

typedef int (*PassFn)(IrGraph *g, PassContext *ctx, IrError *err);

typedef struct Pass {
    const char *name;         /* "shape-infer", "const-fold", "dce", "canonicalize", ... */
    const char *summary;      /* one line for --list-passes */
    PassFn run;
    int requires_shapes;      /* verifier demands static shapes after it */
} Pass;

void pass_context_default(PassContext *ctx);
const Pass *pass_find(const char *name);
int pass_count(void);
const Pass *pass_at(int i);
void pass_list(FILE *f);
/* The default forward pipeline: shape-infer, const-fold, canonicalize,
 * shape-infer, dce. */
const char *pass_default_pipeline(void);

/* Run a comma-separated pipeline; verify after each pass; dump as asked.
 * Errors name the pass. */
int pass_run_pipeline(IrGraph *g, const char *pipeline, PassContext *ctx, IrError *err);
/* Dump g as DIR/NN-<name>.ir (atomically) if ctx asks for it. */
int pass_maybe_dump(IrGraph *g, const char *name, PassContext *ctx, IrError *err);

/* individual passes */
int pass_shape_infer(IrGraph *g, PassContext *ctx, IrError *err);
int pass_const_fold(IrGraph *g, PassContext *ctx, IrError *err);
int pass_dce(IrGraph *g, PassContext *ctx, IrError *err);
int pass_canonicalize(IrGraph *g, PassContext *ctx, IrError *err);

#endif
