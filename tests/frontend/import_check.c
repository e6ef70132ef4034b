/* import_check: test driver for the ONNX frontend.
 *
 *   import_check model.onnx [--batch N] [--seq N] [--bind name=N]...
 *                [--allow-unbound] [--bind-after name=N]... [--buffer] [--dump]
 *                [--load NAME]
 *   import_check --ops OPSET              supported ops at an opset, one a line
 *   import_check --op-supported DOMAIN OP OPSET   prints 1 or 0
 *   import_check --tensor FILE [--write OUT.npy]
 *
 * Imports (from the file, or with --buffer from memory via
 * hetc_import_onnx_buffer), runs ir_verify(require_shapes=0) and prints "ok"
 * with a summary, or "error: <message>" and exits 1.  --dump prints every
 * value and node in a line format the Python tests parse.  The last line is
 * always "maxrss_kb=N" so tests can assert that external data was not read.
 */
#include "onnx_import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Peak resident set of this program.  VmHWM belongs to the current address
 * space; getrusage's ru_maxrss would also count the parent that forked us. */
static void print_rss(void) {
    long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld", &kb) == 1) break;
    if (f) fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = ru.ru_maxrss;
    }
    printf("maxrss_kb=%ld\n", kb);
}

static int fail(const char *msg) {
    printf("error: %s\n", msg);
    print_rss();
    return 1;
}

static void print_shape(const IrValue *v) {
    if (!v->shape_known) {
        printf("?");
        return;
    }
    printf("[");
    for (int i = 0; i < v->shape.rank; i++) {
        if (i) printf(",");
        if (v->shape.dims[i] >= 0) printf("%lld", (long long)v->shape.dims[i]);
        else printf("%s", v->sym[i] ? v->sym[i] : "?");
    }
    printf("]");
}

static void dump_value(IrValue *v) {
    printf("value %s %s %s ", v->name, ir_value_kind_name(v->kind), ir_dtype_name(v->dtype));
    print_shape(v);
    if (v->has_ext)
        printf(" ext=%s@%lld+%lld", v->ext.path, (long long)v->ext.offset,
               (long long)v->ext.length);
    if (v->data && (v->dtype == IR_I64 || v->dtype == IR_F32 || v->dtype == IR_F16 ||
                    v->dtype == IR_BF16) && v->nbytes <= 64 * 8) {
        size_t n = v->nbytes / ir_dtype_size(v->dtype);
        printf(" data=");
        for (size_t i = 0; i < n; i++) {
            if (v->dtype == IR_I64) printf("%s%lld", i ? "," : "", (long long)((int64_t *)v->data)[i]);
            else if (v->dtype == IR_F32) printf("%s%.9g", i ? "," : "", (double)((float *)v->data)[i]);
            else printf("%s0x%04x", i ? "," : "", ((uint16_t *)v->data)[i]); /* f16/bf16 bits */
        }
    }
    printf("\n");
}

static void dump_node(const IrNode *n) {
    printf("node %s %s in=", ir_op_name(n->op), n->name);
    for (int i = 0; i < n->nin; i++) printf("%s%s", i ? "," : "", n->in[i] ? n->in[i]->name : "");
    printf(" out=");
    for (int i = 0; i < n->nout; i++) printf("%s%s", i ? "," : "", n->out[i]->name);
    printf(" attrs=");
    for (int i = 0; i < n->nattrs; i++) {
        const IrAttr *a = &n->attrs[i];
        printf("%s%s:", i ? ";" : "", a->name);
        switch (a->type) {
        case IR_ATTR_INT: printf("%lld", (long long)a->i); break;
        case IR_ATTR_FLOAT: printf("%.9g", a->f); break;
        case IR_ATTR_STRING: printf("'%s'", a->s); break;
        case IR_ATTR_INTS:
            for (int k = 0; k < a->n; k++) printf("%s%lld", k ? "," : "", (long long)a->ints[k]);
            break;
        case IR_ATTR_FLOATS:
            for (int k = 0; k < a->n; k++) printf("%s%.9g", k ? "," : "", a->floats[k]);
            break;
        }
    }
    printf("\n");
}

static int tensor_mode(const char *in, const char *out) {
    IrError err = {{0}};
    IrTensor *t;
    if (hetc_read_tensor(in, &t, &err)) return fail(err.msg);
    printf("tensor dtype=%s rank=%d shape=", ir_dtype_name(t->dtype), t->shape.rank);
    for (int i = 0; i < t->shape.rank; i++)
        printf("%s%lld", i ? "," : "", (long long)t->shape.dims[i]);
    printf(" nbytes=%zu\n", t->nbytes);
    int rc = 0;
    if (out && hetc_write_npy(out, t, &err)) rc = fail(err.msg);
    ir_tensor_free(t);
    if (!rc) printf("ok\n");
    return rc;
}

static int parse_binding(const char *s, HetcDimBinding *b) {
    const char *eq = strchr(s, '=');
    if (!eq) return -1;
    b->name = strndup(s, (size_t)(eq - s));
    b->value = strtoll(eq + 1, NULL, 10);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: import_check model.onnx [options] | --ops N | --tensor F\n");
        return 2;
    }
    if (strcmp(argv[1], "--ops") == 0 && argc > 2) {
        const char *names[512];
        int n = hetc_import_supported_ops(strtoll(argv[2], NULL, 10), names, 512);
        for (int i = 0; i < n && i < 512; i++) printf("%s\n", names[i]);
        return 0;
    }
    if (strcmp(argv[1], "--op-supported") == 0 && argc > 4) {
        printf("%d\n", hetc_import_op_supported(argv[2], argv[3], strtoll(argv[4], NULL, 10)));
        return 0;
    }
    if (strcmp(argv[1], "--tensor") == 0 && argc > 2)
        return tensor_mode(argv[2], argc > 4 && strcmp(argv[3], "--write") == 0 ? argv[4] : NULL);

    HetcImportOptions opt;
    hetc_import_options_default(&opt);
    HetcDimBinding binds[16], after[16];
    int nb = 0, na = 0, use_buffer = 0, dump = 0;
    const char *load = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--batch") == 0 && v) opt.batch = strtoll(v, NULL, 10), i++;
        else if (strcmp(a, "--seq") == 0 && v) opt.seq = strtoll(v, NULL, 10), i++;
        else if (strcmp(a, "--bind") == 0 && v && nb < 16 && !parse_binding(v, &binds[nb])) nb++, i++;
        else if (strcmp(a, "--bind-after") == 0 && v && na < 16 && !parse_binding(v, &after[na])) na++, i++;
        else if (strcmp(a, "--allow-unbound") == 0) opt.allow_unbound = 1;
        else if (strcmp(a, "--buffer") == 0) use_buffer = 1;
        else if (strcmp(a, "--dump") == 0) dump = 1;
        else if (strcmp(a, "--load") == 0 && v) load = v, i++;
        else {
            fprintf(stderr, "import_check: bad option '%s'\n", a);
            return 2;
        }
    }
    opt.bindings = binds;
    opt.nbindings = nb;

    IrError err = {{0}};
    IrGraph *g = NULL;
    if (use_buffer) {
        FILE *f = fopen(argv[1], "rb");
        if (!f) return fail("cannot open model");
        char *buf = NULL;
        size_t len = 0, cap = 0, r;
        do {
            if (len == cap) buf = realloc(buf, cap = cap ? 2 * cap : 65536);
            r = fread(buf + len, 1, cap - len, f);
            len += r;
        } while (r > 0);
        fclose(f);
        char *dir = strdup(argv[1]);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else strcpy(dir, ".");
        g = hetc_import_onnx_buffer(buf, len, dir, &opt, &err);
        free(buf);
        free(dir);
    } else {
        g = hetc_import_onnx(argv[1], &opt, &err);
    }
    int rc = 0;
    if (!g) rc = fail(err.msg);
    if (!rc && na && hetc_bind_dims(g, after, na, &err)) rc = fail(err.msg);
    if (!rc && ir_verify(g, 0, &err)) rc = fail(err.msg);
    if (!rc && load) {
        IrValue *v = ir_graph_find_value(g, load);
        const void *d = v ? ir_value_data(v, &err) : NULL;
        if (!d) rc = fail(v ? err.msg : "no such value");
        else printf("loaded %s %zu bytes fnv=%016llx\n", load, v->nbytes,
                    (unsigned long long)ir_fnv1a(d, v->nbytes));
    }
    if (!rc) {
        int counts[IR_OP_COUNT] = {0}, params = 0, consts = 0, ext = 0;
        for (int i = 0; i < g->nnodes; i++) counts[g->nodes[i]->op]++;
        for (int i = 0; i < g->nvalues; i++) {
            params += g->values[i]->kind == IR_VK_PARAM;
            consts += g->values[i]->kind == IR_VK_CONST;
            ext += g->values[i]->has_ext;
        }
        printf("ok nodes=%d values=%d inputs=%d outputs=%d params=%d consts=%d ext=%d opset=%lld\n",
               g->nnodes, g->nvalues, g->ninputs, g->noutputs, params, consts, ext,
               (long long)g->opset);
        printf("ops:");
        for (int i = 0; i < IR_OP_COUNT; i++)
            if (counts[i]) printf(" %s=%d", ir_op_name((IrOp)i), counts[i]);
        printf("\n");
        for (int i = 0; i < g->ninputs; i++) {
            printf("input %s %s ", g->inputs[i]->name, ir_dtype_name(g->inputs[i]->dtype));
            print_shape(g->inputs[i]);
            printf("\n");
        }
        for (int i = 0; i < g->noutputs; i++) {
            printf("output %s %s ", g->outputs[i]->name, ir_dtype_name(g->outputs[i]->dtype));
            print_shape(g->outputs[i]);
            printf("\n");
        }
        if (dump) {
            for (int i = 0; i < g->nvalues; i++) dump_value(g->values[i]);
            for (int i = 0; i < g->nnodes; i++) dump_node(g->nodes[i]);
        }
        print_rss();
    }
    ir_graph_free(g);
    for (int i = 0; i < nb; i++) free((char *)binds[i].name);
    for (int i = 0; i < na; i++) free((char *)after[i].name);
    return rc;
}
