/* conformance: run the ONNX backend node tests (Debian's libonnx-testdata)
 * through import -> shape-infer -> host executor and compare with the
 * shipped expected outputs, which are the oracle.
 *
 *   conformance [--data DIR] [--must-pass FILE] [--write-pass FILE]
 *               [--no-fork] [-v] [TEST_NAME...]
 *
 * Each test is a directory DIR/<name>/ with model.onnx and
 * test_data_set_N/{input,output}_K.pb.  A test is "unsupported" when the
 * importer lacks one of its ops or the executor lacks a kernel for its
 * dtypes; otherwise it passes or fails (one line per failure with the
 * reason).  Each test runs in a forked child so one crash cannot hide the
 * rest.  With --must-pass, exit status 1 if any listed test did not pass.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostexec.h"
#include "onnx.pb-c.h"
#include "onnx_import.h"
#include "pass.h"

#define MAXT 64

typedef enum { R_PASS, R_FAIL, R_UNSUP } Result;

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(n > 0 ? (size_t)n : 1);
    if (n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return b;
}

/* Unsupported ops are decided from the model itself, before importing. */
static Result check_ops(const char *model, char *why, size_t wl) {
    size_t len;
    char *buf = read_file(model, &len);
    if (!buf) {
        snprintf(why, wl, "cannot read %s", model);
        return R_FAIL;
    }
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, (const uint8_t *)buf);
    free(buf);
    if (!m || !m->graph) {
        snprintf(why, wl, "cannot parse %s", model);
        if (m) onnx__model_proto__free_unpacked(m, NULL);
        return R_FAIL;
    }
    int64_t opset = 1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const char *d = m->opset_import[i]->domain;
        if (!d || !*d || !strcmp(d, "ai.onnx")) opset = m->opset_import[i]->version;
    }
    Result r = R_PASS;
    /* string, sequence and optional values have no IR dtype */
    for (int io = 0; io < 2 && r == R_PASS; io++) {
        size_t cnt = io ? m->graph->n_output : m->graph->n_input;
        Onnx__ValueInfoProto **vi = io ? m->graph->output : m->graph->input;
        for (size_t i = 0; i < cnt && r == R_PASS; i++) {
            const Onnx__TypeProto *t = vi[i]->type;
            if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
                snprintf(why, wl, "%s '%s' is not a tensor", io ? "output" : "input", vi[i]->name);
                r = R_UNSUP;
            } else if (t->tensor_type->elem_type == IR_STRING) {
                snprintf(why, wl, "%s '%s' is a string tensor", io ? "output" : "input",
                         vi[i]->name);
                r = R_UNSUP;
            }
        }
    }
    for (size_t i = 0; i < m->graph->n_node && r == R_PASS; i++) {
        const Onnx__NodeProto *n = m->graph->node[i];
        const char *d = n->domain ? n->domain : "";
        if (!hetc_import_op_supported(d, n->op_type, opset)) {
            snprintf(why, wl, "op %s%s%s (opset %lld) not supported by the importer", d,
                     *d ? "." : "", n->op_type, (long long)opset);
            r = R_UNSUP;
        }
    }
    onnx__model_proto__free_unpacked(m, NULL);
    return r;
}

static int load_set(const char *dir, const char *prefix, IrTensor **ts, int *n, char *why,
                    size_t wl) {
    *n = 0;
    for (int k = 0; k < MAXT; k++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s_%d.pb", dir, prefix, k);
        if (access(p, R_OK) != 0) break;
        IrError err = {{0}};
        if (hetc_read_tensor_pb(p, &ts[k], &err)) {
            snprintf(why, wl, "reading %s: %s", p, err.msg);
            return -1;
        }
        (*n)++;
    }
    return 0;
}

static double elem_d(IrDType t, const void *p, int64_t i) {
    switch (t) {
    case IR_F32: return ((const float *)p)[i];
    case IR_F64: return ((const double *)p)[i];
    default: return 0;
    }
}
static float half_d(IrDType t, uint16_t h) {
    uint32_t bits;
    if (t == IR_BF16) bits = (uint32_t)h << 16;
    else { /* f16 -> f32 */
        uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
        if (e == 0) {
            float f = ldexpf((float)m, -24);
            return s ? -f : f;
        }
        bits = s | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* rtol 1e-4, atol 1e-5, NaN == NaN; everything else bit-exact. */
static int compare(const IrTensor *got, const IrTensor *want, char *why, size_t wl) {
    char a[96], b[96];
    if (got->dtype != want->dtype) {
        snprintf(why, wl, "output '%s': dtype %s, expected %s", want->name ? want->name : "?",
                 ir_dtype_name(got->dtype), ir_dtype_name(want->dtype));
        return -1;
    }
    if (!ir_shape_equal(&got->shape, &want->shape)) {
        snprintf(why, wl, "output '%s': shape %s, expected %s", want->name ? want->name : "?",
                 ir_shape_str(&got->shape, a, sizeof a), ir_shape_str(&want->shape, b, sizeof b));
        return -1;
    }
    int64_t n = ir_shape_numel(&want->shape);
    IrDType t = want->dtype;
    for (int64_t i = 0; i < n; i++) {
        double x, y;
        if (t == IR_F32 || t == IR_F64) {
            x = elem_d(t, got->data, i);
            y = elem_d(t, want->data, i);
        } else if (t == IR_F16 || t == IR_BF16) {
            x = half_d(t, ((const uint16_t *)got->data)[i]);
            y = half_d(t, ((const uint16_t *)want->data)[i]);
        } else {
            size_t es = ir_dtype_size(t);
            if (memcmp((const char *)got->data + i * es, (const char *)want->data + i * es, es)) {
                snprintf(why, wl, "output '%s': element %lld differs (exact compare, %s)",
                         want->name ? want->name : "?", (long long)i, ir_dtype_name(t));
                return -1;
            }
            continue;
        }
        if (isnan(x) && isnan(y)) continue;
        if (x == y) continue;
        if (!(fabs(x - y) <= 1e-5 + 1e-4 * fabs(y))) {
            snprintf(why, wl, "output '%s': element %lld is %.9g, expected %.9g",
                     want->name ? want->name : "?", (long long)i, x, y);
            return -1;
        }
    }
    return 0;
}

/* Shape operands must be constants for shape-infer: integer inputs (and
 * the scalars Range reads) are turned into constants with the test data. */
static int wants_const(IrGraph *g, IrValue *v) {
    if (v->dtype == IR_I64 || v->dtype == IR_I32) return 1;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == IR_OP_RANGE)
            for (int j = 0; j < g->nodes[i]->nin; j++)
                if (g->nodes[i]->in[j] == v) return 1;
    return 0;
}

static Result run_set(const char *tdir, const char *sdir, char *why, size_t wl) {
    char model[4096];
    snprintf(model, sizeof model, "%s/model.onnx", tdir);
    IrTensor *ins[MAXT] = {0}, *want[MAXT] = {0}, **got = NULL;
    int nin = 0, nwant = 0, ngot = 0;
    Result r = R_FAIL;
    IrGraph *g = NULL;
    IrError err = {{0}};
    if (load_set(sdir, "input", ins, &nin, why, wl) || load_set(sdir, "output", want, &nwant, why, wl))
        goto done;
    HetcImportOptions opt;
    hetc_import_options_default(&opt);
    opt.allow_unbound = 1;
    if (!(g = hetc_import_onnx(model, &opt, &err))) {
        snprintf(why, wl, "import: %s", err.msg);
        goto done;
    }
    if (nin != g->ninputs) {
        snprintf(why, wl, "%d input files for %d graph inputs", nin, g->ninputs);
        goto done;
    }
    /* inputs in declaration order; fix their shapes from the data */
    HetcDimBinding bind[MAXT * IR_MAX_RANK];
    int nb = 0;
    IrValue *vins[MAXT];
    for (int k = 0; k < nin; k++) {
        IrValue *v = vins[k] = g->inputs[k];
        /* the ONNX test data stores bfloat16 tensors as uint16 */
        if (ins[k]->dtype == IR_U16 && v->dtype == IR_BF16) ins[k]->dtype = IR_BF16;
        free(ins[k]->name);
        ins[k]->name = ir_strdup(v->name);
        if (!v->shape_known || v->shape.rank != ins[k]->shape.rank) {
            if (v->shape_known) {
                snprintf(why, wl, "input '%s': data rank %d, model rank %d", v->name,
                         ins[k]->shape.rank, v->shape.rank);
                goto done;
            }
            v->shape = ins[k]->shape;
            v->shape_known = 1;
        }
        for (int d = 0; d < v->shape.rank; d++) {
            if (v->shape.dims[d] >= 0) continue;
            if (v->sym[d] && nb < MAXT * IR_MAX_RANK)
                bind[nb++] = (HetcDimBinding){v->sym[d], ins[k]->shape.dims[d]};
            else v->shape.dims[d] = ins[k]->shape.dims[d];
        }
    }
    if (nb && hetc_bind_dims(g, bind, nb, &err)) {
        snprintf(why, wl, "bind: %s", err.msg);
        goto done;
    }
    IrTensor *feed[MAXT];
    int nfeed = 0, kept = 0;
    for (int k = 0; k < nin; k++) {
        IrValue *v = vins[k];
        if (ins[k]->dtype == v->dtype && wants_const(g, v)) {
            ir_value_set_data(v, ins[k]->data, ins[k]->nbytes);
            ins[k]->data = NULL;
            v->kind = IR_VK_CONST;
        } else {
            feed[nfeed++] = ins[k];
            g->inputs[kept++] = v;
        }
    }
    g->ninputs = kept;
    PassContext ctx;
    pass_context_default(&ctx);
    if (pass_run_pipeline(g, "shape-infer", &ctx, &err)) {
        snprintf(why, wl, "shape-infer: %s", err.msg);
        goto done;
    }
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead && !hexec_node_supported(g->nodes[i], why, wl)) {
            r = R_UNSUP;
            goto done;
        }
    if (hexec_run(g, feed, nfeed, &got, &ngot, &err)) {
        snprintf(why, wl, "run: %s", err.msg);
        goto done;
    }
    if (ngot != nwant) {
        snprintf(why, wl, "%d outputs, expected %d", ngot, nwant);
        goto done;
    }
    for (int k = 0; k < nwant; k++) {
        if (want[k]->dtype == IR_U16 && got[k]->dtype == IR_BF16) want[k]->dtype = IR_BF16;
        if (compare(got[k], want[k], why, wl)) goto done;
    }
    r = R_PASS;
done:
    for (int k = 0; k < MAXT; k++) {
        if (ins[k]) ir_tensor_free(ins[k]);
        if (want[k]) ir_tensor_free(want[k]);
    }
    for (int k = 0; k < ngot; k++) ir_tensor_free(got[k]);
    free(got);
    if (g) ir_graph_free(g);
    return r;
}

static Result run_test(const char *tdir, char *why, size_t wl) {
    char model[4096];
    snprintf(model, sizeof model, "%s/model.onnx", tdir);
    Result r = check_ops(model, why, wl);
    if (r != R_PASS) return r;
    int sets = 0;
    for (int s = 0; s < 100; s++) {
        char sdir[4096];
        snprintf(sdir, sizeof sdir, "%s/test_data_set_%d", tdir, s);
        if (access(sdir, R_OK) != 0) break;
        sets++;
        if ((r = run_set(tdir, sdir, why, wl)) != R_PASS) {
            if (r == R_FAIL) {
                char tmp[2048];
                snprintf(tmp, sizeof tmp, "test_data_set_%d: %s", s, why);
                snprintf(why, wl, "%s", tmp);
            }
            return r;
        }
    }
    if (!sets) {
        snprintf(why, wl, "no test_data_set_N directories");
        return R_FAIL;
    }
    return R_PASS;
}

/* Fork so that a crash in one test is reported as that test's failure. */
static Result run_isolated(const char *tdir, int nofork, char *why, size_t wl) {
    if (nofork) return run_test(tdir, why, wl);
    int fd[2];
    if (pipe(fd)) return run_test(tdir, why, wl);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return run_test(tdir, why, wl);
    }
    if (pid == 0) {
        close(fd[0]);
        char w[2048] = "";
        Result r = run_test(tdir, w, sizeof w);
        char msg[2100];
        int len = snprintf(msg, sizeof msg, "%d%s", (int)r, w);
        if (len > (int)sizeof msg - 1) len = (int)sizeof msg - 1;
        if (write(fd[1], msg, (size_t)len) < 0) _exit(3);
        _exit(0);
    }
    close(fd[1]);
    char msg[2100];
    size_t got = 0;
    ssize_t k;
    while (got < sizeof msg - 1 && (k = read(fd[0], msg + got, sizeof msg - 1 - got)) > 0)
        got += (size_t)k;
    msg[got] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (got == 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(why, wl, "crashed (%s %d)", WIFSIGNALED(st) ? "signal" : "exit status",
                 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        return R_FAIL;
    }
    snprintf(why, wl, "%s", msg + 1);
    return (Result)(msg[0] - '0');
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    const char *data = "/usr/share/libonnx-testdata/data/node";
    const char *must = NULL, *write_pass = NULL;
    int nofork = 0, verbose = 0;
    char **only = calloc((size_t)argc + 1, sizeof *only);
    int nonly = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else if (!strcmp(argv[i], "--must-pass") && i + 1 < argc) must = argv[++i];
        else if (!strcmp(argv[i], "--write-pass") && i + 1 < argc) write_pass = argv[++i];
        else if (!strcmp(argv[i], "--no-fork")) nofork = 1;
        else if (!strcmp(argv[i], "-v")) verbose = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: conformance [--data DIR] [--must-pass FILE] "
                            "[--write-pass FILE] [--no-fork] [-v] [TEST...]\n");
            return 2;
        } else only[nonly++] = argv[i];
    }
    DIR *d = opendir(data);
    if (!d) {
        fprintf(stderr, "conformance: cannot open %s\n", data);
        return 2;
    }
    char **names = NULL;
    int nn = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "test_", 5)) continue;
        if (nonly) {
            int hit = 0;
            for (int i = 0; i < nonly && !hit; i++) hit = !strcmp(only[i], e->d_name);
            if (!hit) continue;
        }
        if (nn == cap) names = realloc(names, (size_t)(cap = cap ? 2 * cap : 256) * sizeof *names);
        names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof *names, cmp_str);
    Result *res = calloc((size_t)nn + 1, sizeof *res);
    int np = 0, nf = 0, nu = 0;
    for (int i = 0; i < nn; i++) {
        char tdir[4096], why[2048] = "";
        snprintf(tdir, sizeof tdir, "%s/%s", data, names[i]);
        res[i] = run_isolated(tdir, nofork, why, sizeof why);
        if (res[i] == R_PASS) np++;
        else if (res[i] == R_FAIL) nf++;
        else nu++;
        if (res[i] == R_FAIL) printf("FAIL %s: %s\n", names[i], why);
        else if (verbose) printf("%s %s%s%s\n", res[i] == R_PASS ? "pass" : "unsupported",
                                 names[i], res[i] == R_UNSUP ? ": " : "",
                                 res[i] == R_UNSUP ? why : "");
    }
    printf("conformance: %d passed, %d failed, %d unsupported (of %d)\n", np, nf, nu, nn);
    int rc = 0;
    if (write_pass) {
        FILE *f = fopen(write_pass, "w");
        if (!f) {
            fprintf(stderr, "conformance: cannot write %s\n", write_pass);
            rc = 2;
        } else {
            fprintf(f, "# Regression list for the conformance ctest: ONNX node tests that pass through\n"
                       "# import -> shape-infer -> host executor.  Regenerate after a verified run with\n"
                       "#   conformance --write-pass tests/conformance/must_pass.txt\n"
                       "# The oracle is the expected output shipped with libonnx-testdata; this file\n"
                       "# only records which tests are known to pass.\n");
            for (int i = 0; i < nn; i++)
                if (res[i] == R_PASS) fprintf(f, "%s\n", names[i]);
            fclose(f);
        }
    }
    if (must) {
        FILE *f = fopen(must, "r");
        if (!f) {
            fprintf(stderr, "conformance: cannot read %s\n", must);
            rc = 2;
        } else {
            char line[512];
            int missing = 0;
            while (fgets(line, sizeof line, f)) {
                line[strcspn(line, "\r\n")] = 0;
                if (!line[0] || line[0] == '#') continue;
                int found = -1;
                for (int i = 0; i < nn && found < 0; i++)
                    if (!strcmp(names[i], line)) found = i;
                if (found < 0 || res[found] != R_PASS) {
                    printf("REGRESSION %s: listed in %s but %s\n", line, must,
                           found < 0 ? "not found" : res[found] == R_FAIL ? "failed" : "unsupported");
                    missing++;
                }
            }
            fclose(f);
            if (missing) {
                printf("conformance: %d must-pass tests did not pass\n", missing);
                rc = 1;
            }
        }
    }
    for (int i = 0; i < nn; i++) free(names[i]);
    free(names);
    free(res);
    free(only);
    return rc;
}
