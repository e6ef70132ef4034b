/* kernel_check: run one-node graphs through the host executor and compare
 * with expected outputs computed by an oracle (numpy / onnxruntime, see
 * test_kernels.py, which writes the cases).
 *
 *   kernel_check CASE_FILE...
 *
 * A case file is line based:
 *   op NAME                    IR op name (ir/ops.def)
 *   attr_i NAME V | attr_f NAME V | attr_s NAME S | attr_ints NAME V...
 *   attr_floats NAME V...
 *   in FILE.npy                a graph input fed at run time
 *   const FILE.npy             a constant input (data in the graph)
 *   none                       an omitted optional input
 *   out FILE.npy               an output; dtype and shape are taken from the
 *                              expected file (shape-infer is not involved)
 *   tol RTOL ATOL              float tolerance (default 1e-5 1e-6)
 *   error SUBSTRING            the run must fail with a message containing it
 *   eval                       also evaluate through hexec_eval_node (all
 *                              inputs become constants) and compare again
 * Paths are relative to the case file.  Prints one line per failing case and
 * exits 1 if any failed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostexec.h"
#include "onnx_import.h"

#define MAXIO 16

typedef struct Case {
    IrGraph *g;
    IrNode *n;
    IrTensor *feed[MAXIO];
    int nfeed;
    IrTensor *want[MAXIO];
    int nwant;
    double rtol, atol;
    char error[256];
    int eval;
} Case;

static int load(const char *dir, const char *file, IrTensor **t, char *msg, size_t ml) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    IrError err = {{0}};
    if (hetc_read_npy(p, t, &err)) {
        snprintf(msg, ml, "%s", err.msg);
        return -1;
    }
    return 0;
}

static double as_d(IrDType t, const void *p, int64_t i) {
    switch (t) {
    case IR_F32: return ((const float *)p)[i];
    case IR_F64: return ((const double *)p)[i];
    default: return 0;
    }
}

static int compare(const IrTensor *got, const IrTensor *want, double rtol, double atol,
                   char *msg, size_t ml) {
    char a[96], b[96];
    if (got->dtype != want->dtype || !ir_shape_equal(&got->shape, &want->shape)) {
        snprintf(msg, ml, "got %s%s, expected %s%s", ir_dtype_name(got->dtype),
                 ir_shape_str(&got->shape, a, sizeof a), ir_dtype_name(want->dtype),
                 ir_shape_str(&want->shape, b, sizeof b));
        return -1;
    }
    int64_t n = ir_shape_numel(&want->shape);
    size_t es = ir_dtype_size(want->dtype);
    for (int64_t i = 0; i < n; i++) {
        if (want->dtype == IR_F32 || want->dtype == IR_F64) {
            double x = as_d(got->dtype, got->data, i), y = as_d(want->dtype, want->data, i);
            if ((isnan(x) && isnan(y)) || x == y) continue;
            if (fabs(x - y) <= atol + rtol * fabs(y)) continue;
            snprintf(msg, ml, "element %lld: got %.9g, expected %.9g", (long long)i, x, y);
            return -1;
        }
        if (memcmp((const char *)got->data + i * es, (const char *)want->data + i * es, es)) {
            snprintf(msg, ml, "element %lld differs (%s)", (long long)i, ir_dtype_name(want->dtype));
            return -1;
        }
    }
    return 0;
}

static int parse_case(const char *path, Case *c, char *msg, size_t ml) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(msg, ml, "cannot open");
        return -1;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");
    c->rtol = 1e-5;
    c->atol = 1e-6;
    c->g = ir_graph_new("kernel_case");
    IrValue *in[MAXIO], *out[MAXIO];
    int nin = 0, nout = 0, op = -1, rc = 0;
    /* attributes are applied once the node exists */
    char attrs[64][512];
    int nattrs = 0;
    char line[4096];
    while (fgets(line, sizeof line, f) && !rc) {
        line[strcspn(line, "\r\n")] = 0;
        char kw[64], arg[4000] = "";
        if (sscanf(line, "%63s %3999[^\n]", kw, arg) < 1) continue;
        IrTensor *t = NULL;
        if (!strcmp(kw, "op")) {
            if ((op = ir_op_from_name(arg)) < 0) {
                snprintf(msg, ml, "unknown op %s", arg);
                rc = -1;
            }
        } else if (!strncmp(kw, "attr_", 5)) {
            if (nattrs < 64) snprintf(attrs[nattrs++], sizeof attrs[0], "%s", line);
        } else if (!strcmp(kw, "in") || !strcmp(kw, "const")) {
            if (nin >= MAXIO || load(dir, arg, &t, msg, ml)) {
                rc = -1;
                break;
            }
            char name[32];
            snprintf(name, sizeof name, "x%d", nin);
            if (!strcmp(kw, "in")) {
                in[nin] = ir_value_new(c->g, name, t->dtype, &t->shape, IR_VK_INPUT);
                in[nin]->shape_known = 1;
                ir_graph_add_input(c->g, in[nin]);
                free(t->name);
                t->name = ir_strdup(name);
                c->feed[c->nfeed++] = t;
            } else {
                in[nin] = ir_const_new(c->g, name, t->dtype, &t->shape, t->data);
                in[nin]->shape_known = 1;
                ir_tensor_free(t);
            }
            nin++;
        } else if (!strcmp(kw, "none")) {
            if (nin < MAXIO) in[nin++] = NULL;
        } else if (!strcmp(kw, "out")) {
            if (nout >= MAXIO || load(dir, arg, &t, msg, ml)) {
                rc = -1;
                break;
            }
            char name[32];
            snprintf(name, sizeof name, "y%d", nout);
            out[nout] = ir_value_new(c->g, name, t->dtype, &t->shape, IR_VK_ACT);
            out[nout]->shape_known = 1;
            c->want[c->nwant++] = t;
            nout++;
        } else if (!strcmp(kw, "tol")) {
            sscanf(arg, "%lf %lf", &c->rtol, &c->atol);
        } else if (!strcmp(kw, "error")) {
            snprintf(c->error, sizeof c->error, "%s", arg);
        } else if (!strcmp(kw, "eval")) {
            c->eval = 1;
        }
    }
    fclose(f);
    if (rc) return -1;
    if (op < 0 || nout == 0) {
        snprintf(msg, ml, "case needs an op and an output");
        return -1;
    }
    c->n = ir_node_new(c->g, (IrOp)op, "node", nin, in, nout, out);
    for (int i = 0; i < nout; i++) ir_graph_add_output(c->g, out[i]);
    for (int a = 0; a < nattrs; a++) {
        char kw[64], name[128];
        int used = 0;
        if (sscanf(attrs[a], "%63s %127s %n", kw, name, &used) < 2) continue;
        const char *rest = attrs[a] + used;
        if (!strcmp(kw, "attr_i")) ir_node_set_int(c->n, name, strtoll(rest, NULL, 10));
        else if (!strcmp(kw, "attr_f")) ir_node_set_float(c->n, name, strtod(rest, NULL));
        else if (!strcmp(kw, "attr_s")) ir_node_set_string(c->n, name, rest);
        else if (!strcmp(kw, "attr_ints") || !strcmp(kw, "attr_floats")) {
            int64_t iv[64];
            double fv[64];
            int k = 0;
            char *end;
            for (const char *p = rest; k < 64; p = end) {
                double d = strtod(p, &end);
                if (end == p) break;
                fv[k] = d;
                iv[k++] = strtoll(p, NULL, 10);
            }
            if (kw[5] == 'i') ir_node_set_ints(c->n, name, k, iv);
            else ir_node_set_floats(c->n, name, k, fv);
        }
    }
    return 0;
}

static void free_case(Case *c) {
    for (int i = 0; i < c->nfeed; i++) ir_tensor_free(c->feed[i]);
    for (int i = 0; i < c->nwant; i++) ir_tensor_free(c->want[i]);
    if (c->g) ir_graph_free(c->g);
}

static int run_case(Case *c, char *msg, size_t ml) {
    IrError err = {{0}};
    IrTensor **got = NULL;
    int ngot = 0;
    int rc = hexec_run(c->g, c->feed, c->nfeed, &got, &ngot, &err);
    if (c->error[0]) {
        if (rc == 0) {
            snprintf(msg, ml, "expected an error containing '%s', the run succeeded", c->error);
            rc = -1;
        } else if (!strstr(err.msg, c->error)) {
            snprintf(msg, ml, "error '%s' lacks '%s'", err.msg, c->error);
            rc = -1;
        } else rc = 0;
    } else if (rc) {
        snprintf(msg, ml, "run failed: %s", err.msg);
    } else {
        for (int i = 0; i < c->nwant && !rc; i++)
            if (compare(got[i], c->want[i], c->rtol, c->atol, msg, ml)) rc = -1;
    }
    for (int i = 0; i < ngot; i++) ir_tensor_free(got[i]);
    free(got);
    if (rc || !c->eval || c->error[0]) return rc;
    /* the const-fold path: the same node with its inputs as constants */
    for (int i = 0; i < c->nfeed; i++) {
        IrValue *v = ir_graph_find_value(c->g, c->feed[i]->name);
        void *copy = malloc(c->feed[i]->nbytes ? c->feed[i]->nbytes : 1);
        memcpy(copy, c->feed[i]->data, c->feed[i]->nbytes);
        ir_value_set_data(v, copy, c->feed[i]->nbytes);
        v->kind = IR_VK_CONST;
    }
    if (hexec_eval_node(c->g, c->n, &err)) {
        snprintf(msg, ml, "eval_node failed: %s", err.msg);
        return -1;
    }
    for (int i = 0; i < c->nwant; i++) {
        IrValue *v = c->n->out[i];
        IrTensor t = {.dtype = v->dtype, .shape = v->shape, .data = v->data, .nbytes = v->nbytes};
        if (compare(&t, c->want[i], c->rtol, c->atol, msg, ml)) return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        Case c = {0};
        char msg[2048] = "";
        if (parse_case(argv[i], &c, msg, sizeof msg) || run_case(&c, msg, sizeof msg)) {
            printf("FAIL %s: %s\n", argv[i], msg);
            failed++;
        }
        free_case(&c);
    }
    printf("kernel_check: %d of %d cases passed\n", argc - 1 - failed, argc - 1);
    return failed ? 1 : 0;
}
