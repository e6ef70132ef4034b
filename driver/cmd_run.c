/* hetc run: import, run the passes, execute on the host backend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "compile_opts.h"
#include "hostexec.h"

#define MAX_IO 64

static void usage(FILE *f) {
    fprintf(f,
            "usage: hetc run MODEL.onnx --input NAME=FILE ... [options]\n"
            "\n"
            "Execute a model on the host backend (fp32 reference kernels, OpenBLAS GEMM).\n"
            "Inputs are .npy or ONNX TensorProto .pb files; symbolic dims are bound from\n"
            "the shapes of the inputs given.  Each graph output is written as\n"
            "OUT/<output name>.npy.\n"
            "\n"
            "  --input NAME=FILE      a graph input (repeat for each); FILE alone binds the\n"
            "                         graph inputs in order\n"
            "  --output-dir DIR       where outputs go (default: out)\n"
            "  --expect NAME=FILE     compare output NAME with a reference and report the\n"
            "                         largest absolute and relative differences\n"
            "  --rtol X               relative tolerance for --expect (default 1e-4); the\n"
            "                         exit status is 3 when an --expect comparison fails\n");
    compile_opts_help(f);
}

typedef struct NamedFile {
    const char *name; /* NULL: positional */
    const char *file;
} NamedFile;

static int split_named(const char *opt, char *arg, NamedFile *nf) {
    char *eq = strchr(arg, '=');
    if (eq && eq != arg) {
        *eq = '\0';
        nf->name = arg;
        nf->file = eq + 1;
    } else {
        nf->name = NULL;
        nf->file = arg;
    }
    if (!*nf->file) {
        fprintf(stderr, "hetc run: %s needs a file\n", opt);
        return -1;
    }
    return 0;
}

/* Largest abs/rel difference between an output and a reference (floats as
 * double; integers and bools compared exactly through the same path). */
static double elem(const IrTensor *t, int64_t i) {
    switch (t->dtype) {
    case IR_F32: return ((const float *)t->data)[i];
    case IR_F64: return ((const double *)t->data)[i];
    case IR_I64: return (double)((const int64_t *)t->data)[i];
    case IR_I32: return ((const int32_t *)t->data)[i];
    case IR_BOOL:
    case IR_U8: return ((const uint8_t *)t->data)[i];
    case IR_I8: return ((const int8_t *)t->data)[i];
    default: return NAN;
    }
}

static int compare(const IrTensor *got, const IrTensor *ref, double rtol) {
    char a[128], b[128];
    if (!ir_shape_equal(&got->shape, &ref->shape)) {
        printf("  %s: shape %s, reference %s: MISMATCH\n", got->name,
               ir_shape_str(&got->shape, a, sizeof a), ir_shape_str(&ref->shape, b, sizeof b));
        return 1;
    }
    int64_t n = ir_shape_numel(&got->shape);
    double maxabs = 0, maxrel = 0, refmax = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = elem(got, i), y = elem(ref, i);
        if (isnan(x) && isnan(y)) continue;
        double d = fabs(x - y);
        double r = d / fmax(fabs(y), 1e-30);
        if (!(d <= maxabs)) maxabs = d;
        if (fabs(y) > refmax) refmax = fabs(y);
        if (fabs(y) > 1e-6 && !(r <= maxrel)) maxrel = r;
        /* relative to the element, with an absolute floor scaled to the
         * tensor's magnitude so values near zero do not dominate */
        if (!(d <= rtol * fabs(y) + rtol * 1e-2 * refmax + 1e-7)) bad++;
    }
    printf("  %s %s: max |diff| %.3g, max rel diff %.3g (|ref| > 1e-6), %lld of %lld outside "
           "rtol %.0e: %s\n",
           got->name, ir_shape_str(&got->shape, a, sizeof a), maxabs, maxrel, (long long)bad,
           (long long)n, rtol, bad ? "MISMATCH" : "ok");
    return bad ? 1 : 0;
}

static void print_preview(const IrTensor *t) {
    char s[128];
    int64_t n = ir_shape_numel(&t->shape);
    printf("  %s: %s %s [", t->name, ir_dtype_name(t->dtype), ir_shape_str(&t->shape, s, sizeof s));
    for (int64_t i = 0; i < n && i < 6; i++) printf("%s%.6g", i ? ", " : "", elem(t, i));
    printf("%s]\n", n > 6 ? ", ..." : "");
}

/* Name the inputs as the graph does and bind its open dims from their
 * shapes; 1 after saying what does not fit. */
static int bind_inputs(IrGraph *g, const NamedFile *ins, int nins, IrTensor **inputs,
                       const CompileOpts *o, IrError *err) {
    HetcDimBinding binds[MAX_IO * IR_MAX_RANK];
    int nb = 0;
    for (int i = 0; i < nins; i++) {
        IrValue *v = ins[i].name ? ir_graph_find_value(g, ins[i].name) : g->inputs[i];
        if (!v || v->kind != IR_VK_INPUT) {
            fprintf(stderr, "hetc run: '%s' is not an input of '%s' (inputs:", ins[i].name,
                    o->model);
            for (int k = 0; k < g->ninputs; k++) fprintf(stderr, " %s", g->inputs[k]->name);
            fprintf(stderr, ")\n");
            return 1;
        }
        free(inputs[i]->name);
        inputs[i]->name = ir_strdup(v->name);
        if (inputs[i]->shape.rank != v->shape.rank) {
            fprintf(stderr, "hetc run: input '%s' from '%s' has rank %d, the model expects %d\n",
                    v->name, ins[i].file, inputs[i]->shape.rank, v->shape.rank);
            return 1;
        }
        for (int d = 0; d < v->shape.rank; d++)
            if (v->sym[d] && v->shape.dims[d] < 0) {
                /* a copy: binding frees the graph's own sym names */
                binds[nb].name = ir_strdup(v->sym[d]);
                binds[nb].value = inputs[i]->shape.dims[d];
                nb++;
            }
    }
    int bound = hetc_bind_dims(g, binds, nb, err);
    for (int i = 0; i < nb; i++) free((char *)binds[i].name);
    if (bound != 0 || (o->ibinds.n && input_binds_apply(g, &o->ibinds, err))) {
        fprintf(stderr, "hetc run: %s\n", err->msg);
        return 1;
    }
    return 0;
}

/* OUTDIR/NAME.npy for every output, with a preview line each. */
static int write_outputs(const char *outdir, IrTensor **outputs, int nout, IrError *err) {
    printf("outputs (%s/):\n", outdir);
    for (int i = 0; i < nout; i++) {
        char path[4096];
        /* output names may contain '/', as ONNX exporters name them */
        char safe[1024];
        snprintf(safe, sizeof safe, "%s", outputs[i]->name);
        for (char *c = safe; *c; c++)
            if (*c == '/') *c = '_';
        snprintf(path, sizeof path, "%s/%s.npy", outdir, safe);
        if (hetc_write_npy(path, outputs[i], err) != 0) {
            fprintf(stderr, "hetc run: %s\n", err->msg);
            return 1;
        }
        print_preview(outputs[i]);
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    CompileOpts o;
    compile_opts_init(&o);
    NamedFile ins[MAX_IO], exps[MAX_IO];
    int nins = 0, nexps = 0;
    const char *outdir = "out";
    double rtol = 1e-4;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = cli_opt(argc, argv, &i, "--input", &v)) != 0) {
            if (r < 0 || nins >= MAX_IO) return 2;
            if (split_named("--input", argv[i] + (v - argv[i]), &ins[nins++])) return 2;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--expect", &v)) != 0) {
            if (r < 0 || nexps >= MAX_IO) return 2;
            if (split_named("--expect", argv[i] + (v - argv[i]), &exps[nexps])) return 2;
            if (!exps[nexps].name) {
                fprintf(stderr, "hetc run: --expect needs NAME=FILE\n");
                return 2;
            }
            nexps++;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--output-dir", &v)) != 0) {
            if (r < 0) return 2;
            outdir = v;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--rtol", &v)) != 0) {
            if (r < 0) return 2;
            char *end;
            rtol = strtod(v, &end);
            if (*end || !(rtol > 0)) {
                fprintf(stderr, "hetc run: --rtol expects a positive number, got '%s'\n", v);
                return 2;
            }
            continue;
        }
        r = compile_opts_parse_one(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (cli_take_model("run", argv[i], &o.model)) return 2;
    }
    if (!o.model) {
        usage(stderr);
        return 2;
    }

    IrError err = {{0}};
    int rc = 1;
    IrTensor *inputs[MAX_IO] = {0};
    IrTensor **outputs = NULL;
    int nout = 0;
    IrGraph *g = NULL;
    for (int i = 0; i < nins; i++)
        if (hetc_read_tensor(ins[i].file, &inputs[i], &err) != 0) {
            fprintf(stderr, "hetc run: %s\n", err.msg);
            goto done;
        }

    PassContext ctx;
    pass_context_default(&ctx);
    char irdir[4096];
    snprintf(irdir, sizeof irdir, "%s/ir", o.out_dir ? o.out_dir : outdir);
    ctx.dump_after = o.dump_after;
    ctx.dump_dir = irdir;
    ctx.verbose = o.verbose;
    if (o.dump_after && cli_mkdirs(irdir, &err) != 0) {
        fprintf(stderr, "hetc run: %s\n", err.msg);
        goto done;
    }
    /* Import leaving symbolic dims open, then bind them from the inputs. */
    o.report_params = o.verbose;
    g = compile_import(&o, NULL, 0, 1, &ctx, &err);
    if (!g) {
        fprintf(stderr, "hetc run: %s\n", err.msg);
        goto done;
    }
    if (nins > g->ninputs) {
        fprintf(stderr, "hetc run: %d inputs given but '%s' has %d graph inputs\n", nins, o.model,
                g->ninputs);
        goto done;
    }
    if (bind_inputs(g, ins, nins, inputs, &o, &err))
        goto done;
    if (compile_run_passes(g, &o, &ctx, &err) != 0) {
        fprintf(stderr, "hetc run: %s\n", err.msg);
        goto done;
    }
    if (o.verbose) compile_print_summary(stderr, g, "after passes");
    if (hexec_run(g, inputs, nins, &outputs, &nout, &err) != 0) {
        fprintf(stderr, "hetc run: %s\n", err.msg);
        goto done;
    }
    if (cli_mkdirs(outdir, &err) != 0) {
        fprintf(stderr, "hetc run: %s\n", err.msg);
        goto done;
    }
    if (write_outputs(outdir, outputs, nout, &err))
        goto done;
    rc = 0;
    if (nexps) printf("agreement with reference (rtol %.0e):\n", rtol);
    for (int e = 0; e < nexps; e++) {
        IrTensor *ref = NULL;
        int found = 0;
        if (hetc_read_tensor(exps[e].file, &ref, &err) != 0) {
            fprintf(stderr, "hetc run: %s\n", err.msg);
            rc = 1;
            goto done;
        }
        for (int i = 0; i < nout; i++)
            if (!strcmp(outputs[i]->name, exps[e].name)) {
                found = 1;
                if (compare(outputs[i], ref, rtol)) rc = 3;
            }
        ir_tensor_free(ref);
        if (!found) {
            fprintf(stderr, "hetc run: --expect names '%s', which is not a graph output\n",
                    exps[e].name);
            rc = 1;
        }
    }
done:
    for (int i = 0; i < nins; i++) ir_tensor_free(inputs[i]);
    for (int i = 0; i < nout; i++) ir_tensor_free(outputs[i]);
    free(outputs);
    ir_graph_free(g);
    return rc;
}
