/* passes_check: import an ONNX model, run a pass pipeline, and report what
 * the passes did as JSON on stdout (op histograms before/after, every
 * graph output's dtype and shape, optionally every value's), optionally
 * running the result on the host executor and writing outputs as .npy.
 * The Python tests in this folder drive it and compare with onnxruntime.
 *
 *   passes_check MODEL.onnx [--passes a,b,c] [--bind NAME=N]... [-v]
 *       [--dump-after P|all --dump-dir DIR] [--print-ir] [--values] [--nodes]
 *       [--input FILE.npy]... [--out-dir DIR]
 *
 * With --input (graph inputs in order) the graph runs after the passes and
 * output i is written to DIR/out<i>.npy.  Exit status: 0 ok, 1 a pass or the
 * run failed (message on stderr), 2 usage.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostexec.h"
#include "onnx_import.h"
#include "pass.h"

#define MAXN 64

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static void print_hist(const IrGraph *g) {
    int count[IR_OP_COUNT] = {0};
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead) count[g->nodes[i]->op]++;
    printf("{");
    int first = 1;
    for (int op = 0; op < IR_OP_COUNT; op++)
        if (count[op]) {
            printf("%s", first ? "" : ", ");
            json_str(ir_op_name((IrOp)op));
            printf(": %d", count[op]);
            first = 0;
        }
    printf("}");
}

static void print_value(const IrValue *v) {
    printf("{\"name\": ");
    json_str(v->name);
    printf(", \"dtype\": \"%s\", \"kind\": \"%s\", \"shape\": ", ir_dtype_name(v->dtype),
           ir_value_kind_name(v->kind));
    if (!v->shape_known) {
        printf("null");
    } else {
        printf("[");
        for (int d = 0; d < v->shape.rank; d++)
            printf("%s%lld", d ? ", " : "", (long long)v->shape.dims[d]);
        printf("]");
    }
    printf("}");
}

static void print_nodes(const IrGraph *g) {
    printf("[");
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        printf("%s{\"op\": \"%s\", \"name\": ", i ? ", " : "", ir_op_name(n->op));
        json_str(n->name);
        printf(", \"attrs\": {");
        for (int a = 0, k = 0; a < n->nattrs; a++) {
            const IrAttr *at = &n->attrs[a];
            if (at->type == IR_ATTR_INT) printf("%s\"%s\": %lld", k++ ? ", " : "", at->name,
                                                (long long)at->i);
            else if (at->type == IR_ATTR_FLOAT && isfinite(at->f))
                printf("%s\"%s\": %.17g", k++ ? ", " : "", at->name, at->f);
            else if (at->type == IR_ATTR_STRING) {
                printf("%s\"%s\": ", k++ ? ", " : "", at->name);
                json_str(at->s);
            }
        }
        printf("}}");
    }
    printf("]");
}

static int usage(void) {
    fprintf(stderr, "usage: passes_check MODEL.onnx [--passes P] [--bind NAME=N]... [-v] "
                    "[--dump-after P --dump-dir DIR] [--print-ir] [--values] "
                    "[--input FILE]... [--out-dir DIR]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *model = NULL, *passes = NULL, *outdir = ".";
    const char *inputs[MAXN];
    HetcDimBinding binds[MAXN];
    char *owned[MAXN];
    int nowned = 0;
    int nin = 0, nb = 0, print_ir = 0, values = 0, nodes = 0;
    PassContext ctx;
    pass_context_default(&ctx);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--passes") && more) passes = argv[++i];
        else if (!strcmp(a, "--dump-after") && more) ctx.dump_after = argv[++i];
        else if (!strcmp(a, "--dump-dir") && more) ctx.dump_dir = argv[++i];
        else if (!strcmp(a, "--out-dir") && more) outdir = argv[++i];
        else if (!strcmp(a, "--input") && more && nin < MAXN) inputs[nin++] = argv[++i];
        else if (!strcmp(a, "--bind") && more && nb < MAXN) {
            char *s = argv[++i], *eq = strchr(s, '=');
            if (!eq) return usage();
            *eq = '\0';
            binds[nb].name = s;
            binds[nb].value = strtoll(eq + 1, NULL, 10);
            nb++;
        } else if (!strcmp(a, "-v")) ctx.verbose = 1;
        else if (!strcmp(a, "--print-ir")) print_ir = 1;
        else if (!strcmp(a, "--values")) values = 1;
        else if (!strcmp(a, "--nodes")) nodes = 1;
        else if (a[0] == '-' || model) return usage();
        else model = a;
    }
    if (!model) return usage();

    IrError err = {{0}};
    int rc = 1;
    IrTensor *in[MAXN] = {0};
    IrTensor **outs = NULL;
    int nout = 0;
    HetcImportOptions io;
    hetc_import_options_default(&io);
    io.allow_unbound = 1;
    IrGraph *g = hetc_import_onnx(model, &io, &err);
    if (!g) goto fail;
    if (pass_maybe_dump(g, "import", &ctx, &err)) goto fail;
    /* symbolic dims: explicit bindings, then the shapes of the inputs given */
    for (int i = 0; i < nin; i++) {
        if (hetc_read_tensor(inputs[i], &in[i], &err)) goto fail;
        if (i >= g->ninputs) {
            ir_errorf(&err, "%d inputs given, the model has %d", nin, g->ninputs);
            goto fail;
        }
        IrValue *v = g->inputs[i];
        free(in[i]->name);
        in[i]->name = ir_strdup(v->name);
        for (int d = 0; d < v->shape.rank && d < in[i]->shape.rank; d++)
            if (v->sym[d] && v->shape.dims[d] < 0 && nb < MAXN) {
                /* a copy: hetc_bind_dims frees v->sym[d] while binding */
                char *nm = ir_strdup(v->sym[d]);
                owned[nowned++] = nm;
                binds[nb].name = nm;
                binds[nb].value = in[i]->shape.dims[d];
                nb++;
            }
    }
    if (hetc_bind_dims(g, binds, nb, &err)) goto fail;

    printf("{\"before\": ");
    print_hist(g);
    fflush(stdout);
    if (pass_run_pipeline(g, passes ? passes : pass_default_pipeline(), &ctx, &err)) {
        printf("}\n");
        goto fail;
    }
    printf(", \"after\": ");
    print_hist(g);
    printf(", \"outputs\": [");
    for (int i = 0; i < g->noutputs; i++) {
        printf("%s", i ? ", " : "");
        print_value(g->outputs[i]);
    }
    printf("]");
    if (values) {
        printf(", \"values\": [");
        for (int i = 0; i < g->nvalues; i++) {
            printf("%s", i ? ", " : "");
            print_value(g->values[i]);
        }
        printf("]");
    }
    if (nodes) {
        printf(", \"nodes\": ");
        print_nodes(g);
    }
    if (nin > 0) {
        if (hexec_run(g, in, nin, &outs, &nout, &err)) {
            printf("}\n");
            goto fail;
        }
        printf(", \"files\": [");
        for (int i = 0; i < nout; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/out%d.npy", outdir, i);
            if (hetc_write_npy(path, outs[i], &err)) {
                printf("]}\n");
                goto fail;
            }
            printf("%s", i ? ", " : "");
            json_str(path);
        }
        printf("]");
    }
    printf("}\n");
    if (print_ir) {
        IrPrintOptions po;
        ir_print_options_default(&po);
        ir_print(g, stdout, &po);
    }
    rc = 0;
    goto done;
fail:
    fflush(stdout);
    fprintf(stderr, "passes_check: %s\n", err.msg);
done:
    for (int i = 0; i < nin; i++) ir_tensor_free(in[i]);
    for (int i = 0; i < nout; i++) ir_tensor_free(outs[i]);
    free(outs);
    ir_graph_free(g);
    for (int i = 0; i < nowned; i++) free(owned[i]);
    return rc;
}
