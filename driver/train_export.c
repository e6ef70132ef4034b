/* --export: the trained weights written back into the original ONNX graph.
 * The model protobuf is copied as it is (nodes, opset, metadata), and each
 * initializer that is a trained parameter gets the new bytes as raw_data;
 * an initializer tie-weights re-tied (Transpose node with "tied_from")
 * gets the transposed trained weight, so onnxruntime computes the same
 * function hetc trained.  A parameter the importer untied from an exporter
 * dedup (frontend/param_untie.c) becomes an initializer of its own: one
 * that replaced an Identity (TorchScript) takes the Identity's place under
 * its output's name; one named "<initializer>@<node>" is read by that node
 * in place of the shared initializer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomic_file.h"
#include "input_file.h"
#include "onnx.pb-c.h"
#include "onnx_wire_scan.h"
#include "train_state.h"

static unsigned char *read_all(const char *path, size_t *n, IrError *err) {
    char ebuf[sizeof err->msg];
    FILE *f = input_fopen(path, ebuf, sizeof ebuf); /* a FIFO would block in fopen() */
    if (!f) {
        ir_errorf(err, "%s", ebuf);
        return NULL;
    }
    size_t cap = 1 << 20, len = 0;
    unsigned char *buf = ir_xmalloc(cap);
    size_t r;
    while ((r = fread(buf + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) buf = ir_xrealloc(buf, cap *= 2);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        ir_errorf(err, "cannot read '%s'", path);
        return NULL;
    }
    *n = len;
    return buf;
}

static const TrainParam *find_param(const TrainState *s, const char *name) {
    for (int i = 0; i < s->nparams; i++)
        if (!strcmp(s->params[i].value->name, name)) return &s->params[i];
    return NULL;
}

/* the parameter an untied copy named `name` was re-tied to, or NULL */
static const TrainParam *tied_to(const TrainState *s, const char *name) {
    for (int i = 0; i < s->g->nnodes; i++) {
        const IrNode *n = s->g->nodes[i];
        const char *tf = n->op == IR_OP_TRANSPOSE ? ir_attr_string(n, "tied_from", NULL) : NULL;
        if (tf && !strcmp(tf, name) && n->in[0]) return find_param(s, n->in[0]->name);
    }
    return NULL;
}

static void set_raw(Onnx__TensorProto *t, const void *data, size_t nb) {
    free(t->raw_data.data);
    t->raw_data.data = ir_xmalloc(nb ? nb : 1);
    if (nb) memcpy(t->raw_data.data, data, nb);
    t->raw_data.len = nb;
    t->has_raw_data = 1;
    free(t->float_data);
    t->float_data = NULL;
    t->n_float_data = 0;
    for (size_t i = 0; i < t->n_external_data; i++)
        protobuf_c_message_free_unpacked(&t->external_data[i]->base, NULL);
    free(t->external_data);
    t->external_data = NULL;
    t->n_external_data = 0;
    t->has_data_location = 0;
}

/* the packed model, written by atomic_write_file */
typedef struct Bytes {
    const unsigned char *p;
    size_t n;
} Bytes;

static int write_bytes(FILE *f, const void *ctx) {
    const Bytes *b = ctx;
    return fwrite(b->p, 1, b->n, f) != b->n;
}

static Onnx__TensorProto *find_init(Onnx__GraphProto *gp, const char *name) {
    for (size_t i = 0; i < gp->n_initializer; i++)
        if (gp->initializer[i]->name && !strcmp(gp->initializer[i]->name, name))
            return gp->initializer[i];
    return NULL;
}

/* a new initializer `name` shaped like tmpl, holding p's data */
static void add_init(Onnx__GraphProto *gp, const Onnx__TensorProto *tmpl, const char *name,
                     const TrainParam *p) {
    Onnx__TensorProto *t = ir_xmalloc(sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = ir_strdup(name);
    t->has_data_type = 1;
    t->data_type = tmpl->data_type;
    t->n_dims = tmpl->n_dims;
    t->dims = ir_xmalloc((tmpl->n_dims ? tmpl->n_dims : 1) * sizeof *t->dims);
    if (tmpl->n_dims) memcpy(t->dims, tmpl->dims, tmpl->n_dims * sizeof *t->dims);
    set_raw(t, p->data, (size_t)p->n * sizeof(float));
    gp->initializer = ir_xrealloc(gp->initializer, (gp->n_initializer + 1) * sizeof *t);
    gp->initializer[gp->n_initializer++] = t;
}

/* an untied copy: p is not an initializer of gp; give it one */
static int export_untied(Onnx__GraphProto *gp, const TrainParam *p, IrError *err) {
    const char *name = p->value->name;
    for (size_t i = 0; i < gp->n_node; i++) {
        Onnx__NodeProto *n = gp->node[i];
        if (!n->op_type || strcmp(n->op_type, "Identity") || n->n_output != 1 ||
            n->n_input != 1 || strcmp(n->output[0], name))
            continue;
        const Onnx__TensorProto *tmpl = find_init(gp, n->input[0]);
        if (!tmpl) break;
        add_init(gp, tmpl, name, p);
        protobuf_c_message_free_unpacked(&n->base, NULL);
        memmove(&gp->node[i], &gp->node[i + 1], (gp->n_node - i - 1) * sizeof *gp->node);
        gp->n_node--;
        return 0;
    }
    const char *at = strrchr(name, '@');
    if (at) {
        char *orig = ir_strdup(name);
        orig[at - name] = '\0';
        const Onnx__TensorProto *tmpl = find_init(gp, orig);
        int done = 0;
        for (size_t i = 0; tmpl && i < gp->n_node; i++) {
            Onnx__NodeProto *n = gp->node[i];
            if (!n->name || strcmp(n->name, at + 1)) continue;
            for (size_t j = 0; j < n->n_input; j++)
                if (!strcmp(n->input[j], orig)) {
                    free(n->input[j]);
                    n->input[j] = ir_strdup(name);
                    done = 1;
                }
        }
        if (done) add_init(gp, tmpl, name, p);
        free(orig);
        if (done) return 0;
    }
    return ir_errorf(err, "trained parameter '%s' is neither an initializer, an Identity's "
                     "output nor an untied copy '<initializer>@<node>' of the model", name);
}

int train_state_export_onnx(const TrainState *s, const char *model_path, const char *out_path,
                            IrError *err) {
    size_t n;
    unsigned char *buf = read_all(model_path, &n, err);
    if (!buf) return -1;
    /* the file may have changed since import: bound the nesting again */
    if (onnx_wire_check_nesting(buf, n, &onnx__model_proto__descriptor, model_path, err)) {
        free(buf);
        return -1;
    }
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, n, buf);
    free(buf);
    if (!m || !m->graph) {
        if (m) onnx__model_proto__free_unpacked(m, NULL);
        return ir_errorf(err, "'%s' is not a readable ONNX model", model_path);
    }
    int rc = 0, replaced = 0;
    for (size_t i = 0; i < m->graph->n_initializer && !rc; i++) {
        Onnx__TensorProto *t = m->graph->initializer[i];
        if (!t->name) continue;
        const TrainParam *p = find_param(s, t->name);
        if (p) {
            set_raw(t, p->data, (size_t)p->n * sizeof(float));
            replaced++;
            continue;
        }
        if (!(p = tied_to(s, t->name))) continue;
        if (p->value->shape.rank != 2) {
            rc = ir_errorf(err, "tied parameter '%s' is not 2-D", p->value->name);
            break;
        }
        int64_t r = p->value->shape.dims[0], c = p->value->shape.dims[1];
        float *tr = ir_xmalloc((size_t)((r * c) != 0 ? r * c : 1) * sizeof(float));
        for (int64_t a = 0; a < r; a++)
            for (int64_t b = 0; b < c; b++) tr[b * r + a] = p->data[a * c + b];
        set_raw(t, tr, (size_t)(r * c) * sizeof(float));
        free(tr);
        replaced++;
    }
    for (int i = 0; i < s->nparams && !rc; i++)
        if (!find_init(m->graph, s->params[i].value->name)) {
            rc = export_untied(m->graph, &s->params[i], err);
            replaced++;
        }
    if (!rc && replaced == 0) rc = ir_errorf(err, "no initializer of '%s' was trained", model_path);
    if (!rc) {
        size_t len = onnx__model_proto__get_packed_size(m);
        unsigned char *out = ir_xmalloc(len ? len : 1);
        onnx__model_proto__pack(m, out);
        Bytes b = {out, len};
        char msg[sizeof err->msg];
        if (atomic_write_file(out_path, 0644, write_bytes, &b, msg, sizeof msg))
            rc = ir_errorf(err, "%s", msg);
        free(out);
    }
    onnx__model_proto__free_unpacked(m, NULL);
    return rc;
}
