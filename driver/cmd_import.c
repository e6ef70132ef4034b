/* hetc import: ONNX -> IR, run the passes, dump the IR. */
#include <stdio.h>
#include <string.h>
#include <time.h>

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
    if (!g || compile_check_token_shape(g, &o, "--batch", &err)) {
        fprintf(stderr, "hetc import: %s\n", err.msg);
        ir_graph_free(g);
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
