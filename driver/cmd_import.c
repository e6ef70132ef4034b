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
            "\n"
            "  --list-params DIR      write DIR/params.txt (what hetc trains, after the\n"
            "                         import and tie-weights: `trainable NAME FILE.npy DTYPE\n"
            "                         SHAPE`, `tied NAME DTYPE SHAPE OF`, `const NAME DTYPE\n"
            "                         SHAPE`) and one .npy per trainable tensor, and stop\n");
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

/* --list-params DIR: what hetc trains, after tie-weights (a tied head is
 * not a parameter of its own), for checks against torch's named_parameters
 * (tests/hf).  DIR/params.txt, one line per float tensor:
 *   trainable NAME FILE.npy DTYPE SHAPE   (FILE holds the values hetc starts from)
 *   tied NAME DTYPE SHAPE OF              (trained as Transpose(OF))
 *   const NAME DTYPE SHAPE                (buffers, Constant nodes: kept constant) */
static int list_params(IrGraph *g, const char *dir, PassContext *ctx, IrError *err) {
    if (cli_mkdirs(dir, err) || pass_run_pipeline(g, "shape-infer,tie-weights", ctx, err))
        return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/params.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) return ir_errorf(err, "cannot write '%s'", path);
    int rc = 0, k = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        const char *tf = n->op == IR_OP_TRANSPOSE ? ir_attr_string(n, "tied_from", NULL) : NULL;
        char sh[128];
        if (tf && n->in[0])
            fprintf(f, "tied %s %s %s %s\n", tf, ir_dtype_name(n->out[0]->dtype),
                    ir_shape_str(&n->out[0]->shape, sh, sizeof sh), n->in[0]->name);
    }
    for (int i = 0; i < g->nvalues && !rc; i++) {
        IrValue *v = g->values[i];
        int cst = v->kind == IR_VK_CONST && ir_dtype_is_float(v->dtype) && v->shape.rank >= 1 &&
                  !v->producer;
        /* a parameter tie-weights replaced is left without readers */
        if ((v->kind != IR_VK_PARAM && !cst) || !ir_value_num_uses(g, v)) continue;
        char sh[128];
        ir_shape_str(&v->shape, sh, sizeof sh);
        if (cst) {
            fprintf(f, "const %s %s %s\n", v->name, ir_dtype_name(v->dtype), sh);
            continue;
        }
        char file[64], fp[4200];
        snprintf(file, sizeof file, "p%04d.npy", k++);
        snprintf(fp, sizeof fp, "%s/%s", dir, file);
        const void *d = ir_value_data(v, err);
        if (!d) {
            rc = ir_error_prefix(err, "parameter '%s'", v->name);
            break;
        }
        IrTensor *t = ir_tensor_new(v->name, v->dtype, &v->shape);
        memcpy(t->data, d, t->nbytes < ir_value_bytes(v) ? t->nbytes : ir_value_bytes(v));
        rc = hetc_write_npy(fp, t, err);
        ir_tensor_free(t);
        fprintf(f, "trainable %s %s %s %s\n", v->name, file, ir_dtype_name(v->dtype), sh);
    }
    if (fclose(f) && !rc) rc = ir_errorf(err, "cannot write '%s'", path);
    return rc;
}

int cmd_import(int argc, char **argv) {
    CompileOpts o;
    compile_opts_init(&o);
    o.report_params = 1;
    const char *list = NULL;
    for (int i = 1; i < argc; i++) {
        int r = compile_opts_parse_one(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *lv;
        int lr = cli_opt(argc, argv, &i, "--list-params", &lv);
        if (lr < 0) return 2;
        if (lr > 0) {
            list = lv;
            continue;
        }
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
    if (list) {
        int rc = list_params(g, list, &ctx, &err);
        if (rc) fprintf(stderr, "hetc import: %s\n", err.msg);
        ir_graph_free(g);
        return rc ? 1 : 0;
    }
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
