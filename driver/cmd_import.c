/* hetc import: ONNX -> IR, run the passes, dump the IR. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "autodiff.h"
#include "cli.h"
#include "compile_opts.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: hetc import MODEL.onnx [options]\n"
            "\n"
            "Import an ONNX model into hetc's IR and run the forward pipeline on it.\n"
            "Parameters stay where they are (external data is mapped, never read).\n"
            "\n");
    compile_opts_help(f);
}

/* A graph that runs but cannot train says so now, naming the nodes,
 * rather than at step 1 of hetc train (exit status unchanged). */
static void warn_untrainable(IrGraph *g) {
    AdBlocker bl[16];
    int nb = autodiff_blockers(g, bl, 16);
    if (nb <= 0) return;
    fprintf(stderr, "hetc import: warning: the graph runs but cannot train: %d node%s on a "
            "parameter's gradient path %s no gradient:\n", nb, nb > 1 ? "s" : "",
            nb > 1 ? "have" : "has");
    for (int i = 0; i < nb && i < 16; i++)
        fprintf(stderr, "  node '%s' (%s): %s\n", bl[i].node->name, ir_op_name(bl[i].node->op),
                bl[i].why);
    if (nb > 16) fprintf(stderr, "  ... and %d more\n", nb - 16);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cmd_import(int argc, char **argv) {
    CompileOpts o;
    compile_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        int r = compile_opts_parse_one(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (cli_take_model("import", argv[i], &o.model)) return 2;
    }
    if (!o.model) {
        usage(stderr);
        return 2;
    }
    const char *out = o.out_dir ? o.out_dir : "build";
    char irdir[4096];
    snprintf(irdir, sizeof irdir, "%s/ir", out);
    IrError err = {{0}};
    PassContext ctx;
    pass_context_default(&ctx);
    ctx.dump_after = o.dump_after;
    ctx.dump_dir = irdir;
    ctx.verbose = o.verbose;
    if (o.dump_after && cli_mkdirs(irdir, &err) != 0) {
        fprintf(stderr, "hetc import: %s\n", err.msg);
        return 1;
    }
    double t0 = now_s();
    IrGraph *g = compile_import(&o, NULL, 0, 0, &ctx, &err);
    if (!g) {
        fprintf(stderr, "hetc import: %s\n", err.msg);
        return 1;
    }
    double t1 = now_s();
    compile_print_summary(stderr, g, "imported");
    if (compile_run_passes(g, &o, &ctx, &err) != 0) {
        fprintf(stderr, "hetc import: %s\n", err.msg);
        ir_graph_free(g);
        return 1;
    }
    double t2 = now_s();
    compile_print_summary(stderr, g, "after passes");
    warn_untrainable(g);
    fprintf(stderr, "import %.3f s, passes %.3f s\n", t1 - t0, t2 - t1);
    if (o.dump_after) fprintf(stderr, "IR dumps in %s/\n", irdir);
    if (o.print_ir) {
        IrPrintOptions po;
        ir_print_options_default(&po);
        ir_print(g, stdout, &po);
    }
    ir_graph_free(g);
    return 0;
}
