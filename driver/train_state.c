/* Trainer state: parameters, gradients, optimizer steps, checkpoints. */
#include "train_state.h"
#include "input_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autodiff.h"
#include "cli.h"
#include "hk_train.h"
#include "hostexec.h"
#include "optimizer.h"

/* The update graph: each trained parameter (sharing the trainer's buffer)
 * and its gradient as an input, then the optimizer pass. */
static int build_update(TrainState *s, const OptimOpts *o, IrError *err) {
    IrGraph *u = s->upd = ir_graph_new("update");
    for (int i = 0; i < s->nparams; i++) {
        TrainParam *tp = &s->params[i];
        IrValue *p = ir_value_new(u, tp->value->name, IR_F32, &tp->value->shape, IR_VK_PARAM);
        p->data = tp->data; /* borrowed: data_owned stays 0 */
        p->nbytes = (size_t)tp->n * sizeof(float);
        char name[600];
        snprintf(name, sizeof name, "grad/%s", p->name);
        ir_graph_add_input(u, ir_value_new(u, name, IR_F32, &p->shape, IR_VK_INPUT));
    }
    if (pass_optimizer_with(u, o, err) || ir_verify(u, 1, err))
        return ir_error_prefix(err, "update graph");
    s->norm_out = -1;
    for (int j = 0; j < u->noutputs; j++)
        if (!strcmp(u->outputs[j]->name, "grad_norm")) s->norm_out = j;
    /* state carry by name (passes/optimizer.h): upd/P -> P, upd/m/P -> opt/m/P, ... */
    for (int i = 0; i < s->nparams; i++) {
        TrainParam *tp = &s->params[i];
        const char *pn = tp->value->name;
        const char *kinds[3] = {NULL, o->sgd ? "buf" : "m", o->sgd ? NULL : "v"};
        float **dst[3] = {NULL, &tp->m, &tp->v};
        for (int k = 0; k < 3; k++) {
            char on[600], sn[600];
            tp->upd_out[k] = -1;
            if (k && !kinds[k]) continue;
            if (k) snprintf(on, sizeof on, "upd/%s/%s", kinds[k], pn);
            else snprintf(on, sizeof on, "upd/%s", pn);
            for (int j = 0; j < u->noutputs; j++)
                if (!strcmp(u->outputs[j]->name, on)) tp->upd_out[k] = j;
            if (tp->upd_out[k] < 0) return ir_errorf(err, "update graph has no output '%s'", on);
            if (!k) continue;
            snprintf(sn, sizeof sn, "opt/%s/%s", kinds[k], pn);
            IrValue *sv = ir_graph_find_value(u, sn);
            if (!sv || !sv->data) return ir_errorf(err, "update graph has no state '%s'", sn);
            tp->state[k - 1] = sv;
            *dst[k] = sv->data;
        }
    }
    return s->norm_out < 0 ? ir_errorf(err, "update graph has no grad_norm output") : 0;
}

int train_state_init(TrainState *s, IrGraph *g, const OptimOpts *o, IrError *err) {
    memset(s, 0, sizeof *s);
    s->g = g;
    s->loss_index = -1;
    for (int i = 0; i < g->noutputs; i++)
        if (!strcmp(g->outputs[i]->name, "loss")) s->loss_index = i;
    if (s->loss_index < 0) return ir_errorf(err, "training graph has no 'loss' output");
    s->params = ir_xcalloc((size_t)g->nvalues + 1, sizeof *s->params);
    for (int i = 0; i < g->nvalues; i++) {
        IrValue *p = g->values[i];
        if (p->kind != IR_VK_PARAM) continue;
        IrValue *gv = ad_param_grad(g, p);
        if (!gv) continue; /* unused (e.g. an untied copy re-tied away) */
        if (p->dtype != IR_F32) return ir_errorf(err, "parameter '%s' is not f32", p->name);
        TrainParam *tp = &s->params[s->nparams++];
        tp->value = p;
        for (int j = 0; j < g->noutputs; j++)
            if (g->outputs[j] == gv) tp->out_index = j;
        tp->n = ir_shape_numel(&p->shape);
        const void *d = ir_value_data(p, err);
        if (!d) return ir_error_prefix(err, "parameter '%s'", p->name);
        size_t nb = (size_t)tp->n * sizeof(float);
        tp->data = ir_xmalloc(nb ? nb : 1);
        memcpy(tp->data, d, nb);
        ir_value_set_data(p, tp->data, nb); /* the executor now reads the trained copy */
        tp->grad = ir_xcalloc((size_t)tp->n + 1, sizeof(float));
        s->total += tp->n;
    }
    if (!s->nparams) return ir_errorf(err, "no parameter receives a gradient");
    return build_update(s, o, err);
}

void train_state_free(TrainState *s) {
    for (int i = 0; i < s->nparams; i++) free(s->params[i].grad);
    free(s->params);
    if (s->upd) ir_graph_free(s->upd);
    memset(s, 0, sizeof *s);
}

void train_state_zero_grads(TrainState *s) {
    for (int i = 0; i < s->nparams; i++)
        memset(s->params[i].grad, 0, (size_t)s->params[i].n * sizeof(float));
}

int train_state_forward_backward(TrainState *s, IrTensor *const *in, int nin, float scale,
                                 double *loss, IrError *err) {
    IrTensor **outs = NULL;
    int nout = 0;
    if (hexec_run(s->g, in, nin, &outs, &nout, err)) return -1;
    *loss = *(const float *)outs[s->loss_index]->data;
    for (int i = 0; i < s->nparams; i++)
        hk_axpy_f32(s->params[i].n, scale, outs[s->params[i].out_index]->data,
                    s->params[i].grad);
    for (int i = 0; i < nout; i++) ir_tensor_free(outs[i]);
    free(outs);
    return 0;
}

int train_state_step(TrainState *s, double lr, double *norm, IrError *err) {
    IrGraph *u = s->upd;
    int nin = s->nparams + 2;
    IrTensor *ts = ir_xcalloc((size_t)nin, sizeof *ts);
    IrTensor **in = ir_xcalloc((size_t)nin, sizeof *in);
    float lrf = (float)lr;
    int64_t step = s->step + 1;
    for (int i = 0; i < s->nparams; i++) { /* borrowed buffers: never freed here */
        TrainParam *tp = &s->params[i];
        IrValue *gi = u->inputs[i];
        ts[i] = (IrTensor){.name = gi->name, .dtype = IR_F32, .shape = gi->shape,
                           .data = tp->grad, .nbytes = (size_t)tp->n * sizeof(float)};
    }
    IrShape s0 = {0};
    ts[nin - 2] = (IrTensor){.name = "lr", .dtype = IR_F32, .shape = s0, .data = &lrf,
                             .nbytes = sizeof lrf};
    ts[nin - 1] = (IrTensor){.name = "step", .dtype = IR_I64, .shape = s0, .data = &step,
                             .nbytes = sizeof step};
    for (int i = 0; i < nin; i++) in[i] = &ts[i];
    IrTensor **outs = NULL;
    int nout = 0, rc = hexec_run(u, in, nin, &outs, &nout, err);
    free(in);
    free(ts);
    if (rc) return -1;
    *norm = *(const float *)outs[s->norm_out]->data;
    /* state carry: outputs back into the buffers they update */
    for (int i = 0; i < s->nparams; i++) {
        TrainParam *tp = &s->params[i];
        float *dst[3] = {tp->data, tp->m, tp->v};
        for (int k = 0; k < 3; k++)
            if (tp->upd_out[k] >= 0 && dst[k])
                memcpy(dst[k], outs[tp->upd_out[k]]->data, (size_t)tp->n * sizeof(float));
    }
    for (int i = 0; i < nout; i++) ir_tensor_free(outs[i]);
    free(outs);
    s->step = step;
    return 0;
}

/* ------------------------------------------------------------ checkpoints */
static int write_file(const char *path, const void *a, size_t na, IrError *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return ir_errorf(err, "cannot create '%s': %s", path, strerror(errno));
    int ok = (na == 0 || fwrite(a, 1, na, f) == na);
    if (fclose(f) != 0) ok = 0;
    return ok ? 0 : ir_errorf(err, "cannot write '%s': %s", path, strerror(errno));
}

static void file_name(char *dst, size_t n, const char *src) {
    snprintf(dst, n, "%s", src);
    for (char *c = dst; *c; c++)
        if (*c == '/' || *c == ':') *c = '_';
}

static int rm_tree_flat(const char *dir) {
    /* a checkpoint directory holds only files: remove them, then it */
    char cmdless[4096];
    FILE *m;
    snprintf(cmdless, sizeof cmdless, "%s/MANIFEST", dir);
    if ((m = input_fopen(cmdless, NULL, 0))) { /* a FIFO would block in fopen() */
        char line[2048];
        while (fgets(line, sizeof line, m)) {
            char fname[1024];
            if (sscanf(line, "%1023s", fname) == 1) {
                char p[4096];
                snprintf(p, sizeof p, "%s/%s", dir, fname);
                unlink(p);
            }
        }
        fclose(m);
        unlink(cmdless);
    }
    return rmdir(dir);
}

int train_state_save(const TrainState *s, const char *dir, int64_t step, IrError *err) {
    char tmp[4096], fin[4096], path[4096], nm[1024];
    if (cli_mkdirs(dir, err)) return -1;
    snprintf(fin, sizeof fin, "%s/step-%06lld", dir, (long long)step);
    snprintf(tmp, sizeof tmp, "%s.tmp", fin);
    rm_tree_flat(tmp);
    if (mkdir(tmp, 0777)) return ir_errorf(err, "cannot create '%s': %s", tmp, strerror(errno));
    snprintf(path, sizeof path, "%s/MANIFEST", tmp);
    FILE *man = fopen(path, "w");
    if (!man) return ir_errorf(err, "cannot create '%s': %s", path, strerror(errno));
    int rc = 0;
    for (int i = 0; i < s->nparams && !rc; i++) {
        const TrainParam *p = &s->params[i];
        const char *kinds[3] = {"param", "m", "v"};
        const float *bufs[3] = {p->data, p->m, p->v};
        file_name(nm, sizeof nm, p->value->name);
        for (int k = 0; k < 3 && !rc; k++) {
            if (!bufs[k]) continue; /* SGD keeps one state buffer */
            char fname[1100];
            size_t nb = (size_t)p->n * sizeof(float);
            snprintf(fname, sizeof fname, "%s.%s.bin", nm, kinds[k]);
            snprintf(path, sizeof path, "%s/%s", tmp, fname);
            rc = write_file(path, bufs[k], nb, err);
            fprintf(man, "%s %s %s %lld %016llx\n", fname, p->value->name, kinds[k],
                    (long long)p->n, (unsigned long long)ir_fnv1a(bufs[k], nb));
        }
    }
    fprintf(man, "step %lld\n", (long long)s->step);
    if (fclose(man) != 0 && !rc) rc = ir_errorf(err, "cannot write the checkpoint manifest");
    if (rc) return rc;
    rm_tree_flat(fin);
    if (rename(tmp, fin))
        return ir_errorf(err, "cannot rename '%s' to '%s': %s", tmp, fin, strerror(errno));
    return 0;
}
