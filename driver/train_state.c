/* Trainer state: parameters, gradients, optimizer steps, checkpoints. */
#include "train_state.h"
#include "input_file.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
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
#include "data_loader.h"
#include "rt.h"

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

/* The executor runs, made once: the training graph's, and the update's
 * with its inputs' tensors (pointers set per step) and P, m, v donated --
 * and the gradients, which nothing reads after the step (the clipped
 * gradient may overwrite them instead of taking arena memory). */
static int make_runs(TrainState *s, IrError *err) {
    if (!(s->run = hexec_run_new(s->g, NULL, err))) return ir_error_prefix(err, "training graph");
    IrGraph *u = s->upd;
    int nin = s->nparams + 2;
    const char **don = ir_xcalloc((size_t)s->nparams * 4 + 1, sizeof *don);
    int nd = 0, shared = 0; /* two parameters' gradients one output: not to be overwritten */
    for (int i = 0; i < s->nparams; i++)
        for (int j = 0; j < i; j++) shared |= s->params[i].out_index == s->params[j].out_index;
    for (int i = 0; i < s->nparams; i++) {
        don[nd++] = s->params[i].value->name;
        if (!shared) don[nd++] = u->inputs[i]->name; /* grad/P: dead after the step */
        for (int k = 0; k < 2; k++)
            if (s->params[i].state[k]) don[nd++] = s->params[i].state[k]->name;
    }
    HxRunOpts o = {.donate = don, .ndonate = nd};
    s->urun = hexec_run_new(u, &o, err);
    free(don);
    if (!s->urun) return ir_error_prefix(err, "update graph");
    s->uin = ir_xcalloc((size_t)nin, sizeof *s->uin);
    s->uinp = ir_xcalloc((size_t)nin, sizeof *s->uinp);
    s->lr_buf = ir_xcalloc(1, sizeof *s->lr_buf);
    s->step_buf = ir_xcalloc(1, sizeof *s->step_buf);
    for (int i = 0; i < s->nparams; i++) {
        IrValue *gi = u->inputs[i];
        s->uin[i] = (IrTensor){.name = gi->name, .dtype = IR_F32, .shape = gi->shape,
                               .nbytes = (size_t)s->params[i].n * sizeof(float)};
    }
    IrShape s0 = {0};
    s->uin[nin - 2] = (IrTensor){.name = "lr", .dtype = IR_F32, .shape = s0, .data = s->lr_buf,
                                 .nbytes = sizeof *s->lr_buf};
    s->uin[nin - 1] = (IrTensor){.name = "step", .dtype = IR_I64, .shape = s0,
                                 .data = s->step_buf, .nbytes = sizeof *s->step_buf};
    for (int i = 0; i < nin; i++) s->uinp[i] = &s->uin[i];
    return 0;
}

int train_state_init(TrainState *s, IrGraph *g, const OptimOpts *o, IrError *err) {
    memset(s, 0, sizeof *s);
    s->g = g;
    s->loss_index = -1;
    s->grads_zero = 1;
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
        s->total += tp->n;
    }
    if (!s->nparams) return ir_errorf(err, "no parameter receives a gradient");
    if (build_update(s, o, err)) return -1;
    return make_runs(s, err);
}

void train_state_free(TrainState *s) {
    for (int i = 0; i < s->nparams; i++) free(s->params[i].grad);
    free(s->params);
    hexec_run_free(s->run);
    hexec_run_free(s->urun);
    free(s->uin);
    free(s->uinp);
    free(s->lr_buf);
    free(s->step_buf);
    if (s->upd) ir_graph_free(s->upd);
    memset(s, 0, sizeof *s);
}

void train_state_zero_grads(TrainState *s) {
    s->grads_zero = 1; /* the accumulators are cleared when next written */
    s->borrowed = 0;
}

/* Zeroed accumulators, set as this step's gradient. */
static void clear_accumulators(TrainState *s) {
    for (int i = 0; i < s->nparams; i++) {
        TrainParam *tp = &s->params[i];
        if (!tp->grad) tp->grad = ir_xmalloc((size_t)(tp->n ? tp->n : 1) * sizeof(float));
        memset(tp->grad, 0, (size_t)tp->n * sizeof(float));
        tp->gcur = tp->grad;
    }
    s->grads_zero = 0;
}

/* Bring borrowed gradients into the accumulators (before the next run
 * overwrites the outputs they point into): 0 + 1 * g, as an accumulation
 * from zero would have computed. */
static void own_gradients(TrainState *s) {
    if (!s->borrowed) return;
    for (int i = 0; i < s->nparams; i++) {
        TrainParam *tp = &s->params[i];
        const float *b = tp->gcur;
        if (!tp->grad) tp->grad = ir_xmalloc((size_t)(tp->n ? tp->n : 1) * sizeof(float));
        memset(tp->grad, 0, (size_t)tp->n * sizeof(float));
        hk_axpy_f32(tp->n, 1.0f, b, tp->grad);
        tp->gcur = tp->grad;
    }
    s->borrowed = 0;
}

int train_state_forward_backward(TrainState *s, IrTensor *const *in, int nin, float scale,
                                 double *loss, IrError *err) {
    own_gradients(s);
    hexec_run_set_step(s->run, s->step); /* 0-based: the steps completed */
    if (hexec_run_step(s->run, in, nin, err)) return -1;
    *loss = *(const float *)hexec_run_output(s->run, s->loss_index, NULL);
    if (s->grads_zero && scale == 1.0f) { /* grad = 0 + 1 * g: read g where it is */
        for (int i = 0; i < s->nparams; i++)
            s->params[i].gcur = hexec_run_output(s->run, s->params[i].out_index, NULL);
        s->grads_zero = 0;
        s->borrowed = 1;
        return 0;
    }
    if (s->grads_zero) clear_accumulators(s);
    for (int i = 0; i < s->nparams; i++)
        hk_axpy_f32(s->params[i].n, scale, hexec_run_output(s->run, s->params[i].out_index, NULL),
                    s->params[i].grad);
    return 0;
}

const float *train_state_grad(TrainState *s, int i) {
    if (s->grads_zero) clear_accumulators(s);
    return s->params[i].gcur;
}

int64_t train_state_allocs(const TrainState *s) {
    HxRunStats a = {0}, b = {0};
    if (s->run) hexec_run_stats(s->run, &a);
    if (s->urun) hexec_run_stats(s->urun, &b);
    return a.allocs + b.allocs;
}

int train_state_step(TrainState *s, double lr, double *norm, IrError *err) {
    if (s->grads_zero) clear_accumulators(s);
    int nin = s->nparams + 2;
    for (int i = 0; i < s->nparams; i++) s->uin[i].data = (void *)s->params[i].gcur;
    *s->lr_buf = (float)lr;
    int64_t step = s->step + 1;
    *s->step_buf = step;
    if (hexec_run_step(s->urun, s->uinp, nin, err)) return -1;
    *norm = *(const float *)hexec_run_output(s->urun, s->norm_out, NULL);
    /* state carry: outputs not updated in place go back into their buffers */
    for (int i = 0; i < s->nparams; i++) {
        TrainParam *tp = &s->params[i];
        float *dst[3] = {tp->data, tp->m, tp->v};
        for (int k = 0; k < 3; k++) {
            if (tp->upd_out[k] < 0 || !dst[k]) continue;
            const void *o = hexec_run_output(s->urun, tp->upd_out[k], NULL);
            if (o != dst[k]) memcpy(dst[k], o, (size_t)tp->n * sizeof(float));
        }
    }
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

int train_state_newest(const char *dir, int64_t *step, char *path, size_t pathlen, IrError *err) {
    DIR *d = opendir(dir);
    if (!d) return ir_errorf(err, "cannot read the checkpoint directory '%s': %s", dir,
                             strerror(errno));
    int64_t best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long n;
        int used = 0;
        if (sscanf(e->d_name, "step-%lld%n", &n, &used) != 1 || e->d_name[used] || n < 0)
            continue; /* step-N.tmp and anything else */
        char man[4096];
        struct stat sb;
        snprintf(man, sizeof man, "%s/%s/MANIFEST", dir, e->d_name);
        if (stat(man, &sb) == 0 && S_ISREG(sb.st_mode) && n > best) best = n;
    }
    closedir(d);
    if (best < 0) return 1;
    *step = best;
    snprintf(path, pathlen, "%s/step-%06lld", dir, (long long)best);
    return 0;
}

static int read_exact(const char *path, void *dst, size_t nb, IrError *err) {
    FILE *f = input_fopen(path, NULL, 0);
    if (!f) return ir_errorf(err, "cannot open '%s': %s", path, strerror(errno));
    size_t got = nb ? fread(dst, 1, nb, f) : 0;
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != nb || extra)
        return ir_errorf(err, "'%s' does not hold %zu bytes (the MANIFEST's size)", path, nb);
    return 0;
}

int train_state_load(TrainState *s, const char *stepdir, IrError *err) {
    char path[4096], line[2400];
    snprintf(path, sizeof path, "%s/MANIFEST", stepdir);
    FILE *man = input_fopen(path, NULL, 0);
    if (!man) return ir_errorf(err, "cannot open '%s': %s", path, strerror(errno));
    const char *kinds[3] = {"param", "m", "v"};
    /* loaded[i*3 + k]: parameter i's buffer k came from the checkpoint */
    char *loaded = ir_xcalloc((size_t)s->nparams * 3 + 1, 1);
    int64_t step = -1;
    int rc = 0, ln = 0;
    while (!rc && fgets(line, sizeof line, man)) {
        ln++;
        char fname[1100], name[1100], kind[16];
        long long n, st;
        unsigned long long sum;
        if (sscanf(line, "step %lld", &st) == 1) {
            step = st;
            continue;
        }
        if (sscanf(line, "%1099s %1099s %15s %lld %llx", fname, name, kind, &n, &sum) != 5) {
            rc = ir_errorf(err, "%s line %d: expected 'FILE PARAM KIND ELEMENTS CHECKSUM'", path,
                           ln);
            break;
        }
        int i = 0, k = 0;
        while (i < s->nparams && strcmp(s->params[i].value->name, name)) i++;
        while (k < 3 && strcmp(kinds[k], kind)) k++;
        if (i == s->nparams) {
            rc = ir_errorf(err, "%s line %d: parameter '%s' is not a trained parameter of this "
                           "model (a checkpoint of another model?)", path, ln, name);
            break;
        }
        TrainParam *p = &s->params[i];
        float *dst[3] = {p->data, p->m, p->v};
        if (k == 3 || !dst[k]) {
            rc = ir_errorf(err, "%s line %d: '%s' has state '%s', which this optimizer does not "
                           "keep (a checkpoint of another --optimizer?)", path, ln, name, kind);
            break;
        }
        if (n != p->n) {
            rc = ir_errorf(err, "%s line %d: '%s' has %lld elements, the model %lld", path, ln,
                           name, n, (long long)p->n);
            break;
        }
        char fpath[4096];
        size_t nb = (size_t)p->n * sizeof(float);
        snprintf(fpath, sizeof fpath, "%s/%s", stepdir, fname);
        if (strchr(fname, '/') || read_exact(fpath, dst[k], nb, err)) {
            if (strchr(fname, '/')) ir_errorf(err, "%s line %d: bad file name '%s'", path, ln, fname);
            rc = -1;
            break;
        }
        if (ir_fnv1a(dst[k], nb) != (uint64_t)sum) {
            rc = ir_errorf(err, "'%s': checksum %016" PRIx64 ", the MANIFEST says %016llx (a "
                           "damaged checkpoint)", fpath, ir_fnv1a(dst[k], nb), sum);
            break;
        }
        loaded[i * 3 + k] = 1;
    }
    fclose(man);
    for (int i = 0; i < s->nparams && !rc; i++) {
        TrainParam *p = &s->params[i];
        const float *dst[3] = {p->data, p->m, p->v};
        for (int k = 0; k < 3 && !rc; k++)
            if (dst[k] && !loaded[i * 3 + k])
                rc = ir_errorf(err, "%s: no '%s' state of parameter '%s' (a checkpoint of "
                               "another model or optimizer?)", path, kinds[k],
                               p->value->name);
    }
    free(loaded);
    if (!rc && step < 0) rc = ir_errorf(err, "%s: no 'step N' line", path);
    if (!rc) s->step = step;
    return rc;
}

int train_state_load_weights_layers(TrainState *s, const char *stepdir, IrError *err) {
    char *seen = ir_xcalloc((size_t)s->nparams + 1, 1);
    char e[RT_ERRLEN], path[4200];
    int rc = 0;
    for (int layer = 0; !rc; layer++) {
        snprintf(path, sizeof path, "%s/layer_%05d.bin", stepdir, layer);
        if (access(path, F_OK)) break; /* the manifest lists 0..layers, every one a file */
        RtCkptLayer l;
        if (rt_ckpt_read_layer(stepdir, layer, &l, e, sizeof e)) {
            rc = ir_errorf(err, "%s", e);
            break;
        }
        for (int i = 0; i < s->nparams && !rc; i++) {
            TrainParam *p = &s->params[i];
            const RtCkptLoaded *x = rt_ckpt_find(&l, p->value->name);
            if (!x) continue;
            if (x->dtype != RT_F32 || x->nbytes != (size_t)p->n * sizeof(float))
                rc = ir_errorf(err, "%s: '%s' is %s of %zu bytes, the model's parameter f32 "
                               "of %lld elements", path, x->name, rt_dtype_name(x->dtype),
                               x->nbytes, (long long)p->n);
            else memcpy(p->data, x->data, x->nbytes);
            seen[i] = 1;
        }
        rt_ckpt_layer_free(&l);
    }
    for (int i = 0; i < s->nparams && !rc; i++)
        if (!seen[i])
            rc = ir_errorf(err, "%s: no layer file holds parameter '%s' (a checkpoint of "
                           "another model?)", stepdir, s->params[i].value->name);
    free(seen);
    return rc;
}
