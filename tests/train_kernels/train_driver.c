/* Test driver for the host training kernels and the runtime's data loader
 * and lr schedule.  test_train_kernels.py writes inputs as .npy into a
 * directory, runs `train_driver <case> <dir> [arg]`, and checks the
 * out_*.npy files against numpy oracles.  Scalars come in params.npy (f8).
 * Exit status: 0 ok, 2 usage/IO problem, 3 the kernel returned an error
 * (its message on stderr, which tests match). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_loader.h"
#include "hk_train.h"
#include "lr_schedule.h"
#include "npy.h"

typedef struct Ctx {
    const char *dir;
    Npy arrs[16];
    int narr;
    const double *p; /* params */
    int64_t np;
} Ctx;

static _Noreturn void die(const char *msg)
{
    fprintf(stderr, "train_driver: %s\n", msg);
    exit(2);
}

static _Noreturn void kfail(const char *err)
{
    fprintf(stderr, "error: %s\n", err);
    exit(3);
}

static Npy *load(Ctx *c, const char *name, NpyType want)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/%s.npy", c->dir, name);
    if (c->narr == 16)
        die("too many arrays");
    Npy *a = &c->arrs[c->narr];
    if (npy_read(path, a, err))
        die(err);
    if (a->type != want) {
        snprintf(err, sizeof err, "%s has the wrong dtype", path);
        die(err);
    }
    c->narr++;
    return a;
}

static float *F(Ctx *c, const char *name) { return load(c, name, NPY_F4)->data; }

static void save(Ctx *c, const char *name, NpyType t, int rank, const int64_t *dims,
                 const void *data)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/out_%s.npy", c->dir, name);
    if (npy_write(path, t, rank, dims, data, err))
        die(err);
}

static void save_f(Ctx *c, const char *name, int64_t n, const float *data)
{
    save(c, name, NPY_F4, 1, &n, data);
}

static double P(Ctx *c, int i)
{
    if (i >= c->np)
        die("params.npy too short");
    return c->p[i];
}

static float *zalloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* optional initial value for an accumulated output */
static float *init_or_zero(Ctx *c, const char *name, int64_t n, int accum)
{
    float *o = zalloc(n);
    if (accum)
        memcpy(o, F(c, name), sizeof(float) * (size_t)n);
    return o;
}

static HkDType id_type(const Npy *a)
{
    return a->type == NPY_I8 ? HK_I64 : a->type == NPY_I4 ? HK_I32 : HK_UNDEF;
}

static void run_case(Ctx *c, const char *kase, const char *arg)
{
    char err[HK_ERRLEN] = "";
    if (!strcmp(kase, "matmul")) {
        int64_t batch = P(c, 0), M = P(c, 1), N = P(c, 2), K = P(c, 3);
        int ta = P(c, 4), tb = P(c, 5), as = P(c, 6), bs = P(c, 7), acc = P(c, 8);
        int64_t na = (as ? 1 : batch) * M * K, nb = (bs ? 1 : batch) * K * N;
        float *a = F(c, "a"), *b = F(c, "b"), *dc = F(c, "dc");
        float *da = init_or_zero(c, "da_in", na, acc), *db = init_or_zero(c, "db_in", nb, acc);
        if (hk_matmul_backward_f32(a, b, dc, batch, M, N, K, ta, tb, as, bs, da, db, acc, err))
            kfail(err);
        save_f(c, "da", na, da);
        save_f(c, "db", nb, db);
        free(da);
        free(db);
    } else if (!strcmp(kase, "linear")) {
        int64_t M = P(c, 0), K = P(c, 1), N = P(c, 2);
        int acc = P(c, 3);
        float *x = F(c, "x"), *w = F(c, "w"), *dy = F(c, "dy");
        float *dx = zalloc(M * K), *dw = init_or_zero(c, "dw_in", K * N, acc),
              *db = init_or_zero(c, "db_in", N, acc);
        if (hk_linear_backward_f32(x, w, dy, M, K, N, dx, dw, db, acc, err))
            kfail(err);
        save_f(c, "dx", M * K, dx);
        save_f(c, "dw", K * N, dw);
        save_f(c, "db", N, db);
        free(dx), free(dw), free(db);
    } else if (!strcmp(kase, "layernorm") || !strcmp(kase, "rmsnorm")) {
        int64_t outer = P(c, 0), n = P(c, 1);
        double eps = P(c, 2);
        int saved = P(c, 3);
        float *x = F(c, "x"), *s = F(c, "scale"), *dy = F(c, "dy");
        float *dx = zalloc(outer * n), *ds = zalloc(n), *db = zalloc(n);
        float *mean = zalloc(outer), *rstd = zalloc(outer);
        int rc;
        if (!strcmp(kase, "layernorm")) {
            if (saved)
                hk_layernorm_stats_f32(x, outer, n, eps, mean, rstd);
            rc = hk_layernorm_backward_f32(x, s, dy, saved ? mean : NULL, saved ? rstd : NULL,
                                           outer, n, eps, dx, ds, db, 0, err);
        } else {
            if (saved) /* rstd from its definition, via the f64 row sum */
                for (int64_t r = 0; r < outer; r++) {
                    double ss = 0;
                    for (int64_t j = 0; j < n; j++)
                        ss += (double)x[r * n + j] * x[r * n + j];
                    rstd[r] = (float)(1.0 / __builtin_sqrt(ss / (double)n + eps));
                }
            rc = hk_rmsnorm_backward_f32(x, s, dy, saved ? rstd : NULL, outer, n, eps, dx, ds,
                                         0, err);
        }
        if (rc)
            kfail(err);
        save_f(c, "dx", outer * n, dx);
        save_f(c, "dscale", n, ds);
        save_f(c, "dbias", n, db);
        save_f(c, "mean", outer, mean);
        save_f(c, "rstd", outer, rstd);
        free(dx), free(ds), free(db), free(mean), free(rstd);
    } else if (!strcmp(kase, "softmax")) {
        Npy *y = load(c, "y", NPY_F4);
        float *dy = F(c, "dy"), *dx = zalloc(y->numel);
        if (hk_softmax_backward_f32(y->data, dy, y->rank, y->dims, (int)P(c, 0), (int)P(c, 1),
                                    dx, err))
            kfail(err);
        save(c, "dx", NPY_F4, y->rank, y->dims, dx);
        free(dx);
    } else if (!strcmp(kase, "unary")) {
        HkUnaryGrad op;
        if (!arg || hk_unary_grad_from_name(arg, &op))
            die("unknown unary rule");
        Npy *x = load(c, "x", NPY_F4);
        float *y = P(c, 0) ? F(c, "y") : NULL, *dy = F(c, "dy"), *dx = zalloc(x->numel);
        if (hk_unary_backward_f32(op, x->data, y, dy, x->numel, dx, err))
            kfail(err);
        save_f(c, "dx", x->numel, dx);
        free(dx);
    } else if (!strcmp(kase, "binary")) {
        HkBinaryGrad op;
        if (!arg || hk_binary_grad_from_name(arg, &op))
            die("unknown binary rule");
        Npy *a = load(c, "a", NPY_F4);
        float *b = F(c, "b"), *dy = F(c, "dy"), *da = zalloc(a->numel), *db = zalloc(a->numel);
        if (hk_binary_backward_f32(op, a->data, b, dy, a->numel, da, db, err))
            kfail(err);
        save_f(c, "da", a->numel, da);
        save_f(c, "db", a->numel, db);
        free(da), free(db);
    } else if (!strcmp(kase, "sum_to_shape")) {
        Npy *g = load(c, "g", NPY_F4);
        int rank = (int)P(c, 0);
        int64_t dims[HK_MAX_RANK], n = 1;
        for (int i = 0; i < rank && i < HK_MAX_RANK; i++)
            n *= dims[i] = (int64_t)P(c, 1 + i);
        float *out = zalloc(n);
        if (hk_reduce_sum_to_shape_f32(g->data, g->rank, g->dims, rank, dims, out, err))
            kfail(err);
        save(c, "out", NPY_F4, rank, dims, out);
        free(out);
    } else if (!strcmp(kase, "attention")) {
        Npy *q = load(c, "q", NPY_F4), *k = load(c, "k", NPY_F4), *v = load(c, "v", NPY_F4);
        float *dout = F(c, "dout");
        int64_t B = q->dims[0], T = q->dims[1], D = q->dims[2], S = k->dims[1], Dv = v->dims[2];
        float *dq = zalloc(B * T * D), *dk = zalloc(B * S * D), *dv = zalloc(B * S * Dv);
        if (hk_attention_backward_f32(q->data, k->data, v->data, dout, B, T, S, D, Dv,
                                      (int)P(c, 0), (float)P(c, 1), dq, dk, dv, err))
            kfail(err);
        save(c, "dq", NPY_F4, 3, q->dims, dq);
        save(c, "dk", NPY_F4, 3, k->dims, dk);
        save(c, "dv", NPY_F4, 3, v->dims, dv);
        free(dq), free(dk), free(dv);
    } else if (!strcmp(kase, "embedding")) {
        Npy *ids, *dy;
        ids = load(c, "ids", P(c, 2) ? NPY_I4 : NPY_I8);
        dy = load(c, "dy", NPY_F4);
        int64_t V = P(c, 0), D = dy->dims[dy->rank - 1];
        int acc = P(c, 1);
        float *dt = init_or_zero(c, "dtable_in", V * D, acc);
        int rc = hk_embedding_backward_f32(id_type(ids), ids->data, ids->numel, dy->data, V, D,
                                           dt, acc, err);
        save_f(c, "dtable", V * D, dt); /* also on error: must be unchanged */
        free(dt);
        if (rc)
            kfail(err);
    } else if (!strcmp(kase, "ce")) {
        Npy *lg = load(c, "logits", NPY_F4);
        Npy *t = load(c, "targets", P(c, 4) ? NPY_I4 : NPY_I8);
        int64_t N = lg->dims[0], V = lg->dims[1], count = -1;
        int ui = P(c, 0), use_lse = P(c, 3);
        int64_t ii = (int64_t)P(c, 1);
        float loss, *lse = zalloc(N), *dl = zalloc(N * V);
        if (hk_cross_entropy_fwd_f32(lg->data, id_type(t), t->data, N, V, ui, ii, &loss, lse,
                                     &count, err))
            kfail(err);
        if (hk_cross_entropy_bwd_f32(lg->data, id_type(t), t->data, use_lse ? lse : NULL, N, V,
                                     ui, ii, (float)P(c, 2), dl, err))
            kfail(err);
        int64_t one = 1;
        save(c, "loss", NPY_F4, 0, &one, &loss);
        save(c, "count", NPY_I8, 0, &one, &count);
        save_f(c, "lse", N, lse);
        save(c, "dlogits", NPY_F4, 2, lg->dims, dl);
        free(lse), free(dl);
    } else if (!strcmp(kase, "adamw") || !strcmp(kase, "sgd")) {
        Npy *p = load(c, "p", NPY_F4), *g = load(c, "g", NPY_F4);
        int64_t n = p->numel, steps = g->dims[0];
        if (steps * n != g->numel)
            die("g must be [steps, n]");
        float *pp = p->data, *m = zalloc(n), *v = zalloc(n);
        for (int64_t s = 0; s < steps; s++) {
            float *gs = (float *)g->data + s * n;
            int rc = !strcmp(kase, "adamw")
                         ? hk_adamw_step_f32(pp, gs, m, v, n, s + 1 + (int64_t)P(c, 5), P(c, 0),
                                             P(c, 1), P(c, 2), P(c, 3), P(c, 4), err)
                         : hk_sgd_step_f32(pp, gs, P(c, 1) != 0 ? m : NULL, n, P(c, 0), P(c, 1),
                                           P(c, 2), P(c, 3), (int)P(c, 4), s == 0, err);
            if (rc)
                kfail(err);
        }
        save_f(c, "p", n, pp);
        save_f(c, "m", n, m);
        save_f(c, "v", n, v);
        free(m), free(v);
    } else if (!strcmp(kase, "adamw_fused")) {
        /* params: lr b1 b2 eps wd mode clip_scale(<0: none) first_step;
         * mode 0: separate output buffers, 1: all in place, 2: P in place
         * and m, v not.  Output buffers start as garbage (the kernel must not
         * rely on zeroed outputs). */
        Npy *p = load(c, "p", NPY_F4), *g = load(c, "g", NPY_F4);
        Npy *m0 = load(c, "m", NPY_F4), *v0 = load(c, "v", NPY_F4);
        int64_t n = p->numel, steps = g->dims[0];
        if (steps * n != g->numel || m0->numel != n || v0->numel != n)
            die("g must be [steps, n], m and v [n]");
        int mode = (int)P(c, 5);
        float cs = (float)P(c, 6), *csp = P(c, 6) < 0 ? NULL : &cs;
        float *cur[3] = {p->data, m0->data, v0->data}, *nxt[3], *own[3];
        for (int k = 0; k < 3; k++) {
            own[k] = nxt[k] = zalloc(n); /* swapped with cur below: freed through own */
            for (int64_t i = 0; i < n; i++) nxt[k][i] = (float)(i % 7) - 1e30f; /* garbage */
        }
        for (int64_t s = 0; s < steps; s++) {
            float *o[3];
            for (int k = 0; k < 3; k++)
                o[k] = mode == 1 || (mode == 2 && k == 0) ? cur[k] : nxt[k];
            if (hk_adamw_fused_f32(cur[0], cur[1], cur[2], (float *)g->data + s * n, n,
                                   (float)P(c, 0), (int64_t)P(c, 7) + s, csp, P(c, 1), P(c, 2),
                                   P(c, 3), P(c, 4), o[0], o[1], o[2], err))
                kfail(err);
            for (int k = 0; k < 3; k++)
                if (o[k] != cur[k]) nxt[k] = cur[k], cur[k] = o[k];
        }
        save_f(c, "p", n, cur[0]);
        save_f(c, "m", n, cur[1]);
        save_f(c, "v", n, cur[2]);
        for (int k = 0; k < 3; k++) free(own[k]);
    } else if (!strcmp(kase, "clip")) {
        int nb = (int)P(c, 0);
        if (nb < 1 || nb > 8)
            die("1..8 buffers");
        const float *bufs[8];
        int64_t lens[8];
        for (int i = 0; i < nb; i++) {
            char name[16];
            snprintf(name, sizeof name, "g%d", i);
            Npy *a = load(c, name, NPY_F4);
            bufs[i] = a->data;
            lens[i] = a->numel;
        }
        double norm = hk_global_grad_norm_f32(nb, bufs, lens);
        double s = hk_clip_scale(norm, P(c, 1));
        for (int i = 0; i < nb; i++) {
            char name[16];
            snprintf(name, sizeof name, "g%d", i);
            hk_scale_f32((float *)bufs[i], lens[i], (float)s);
            save_f(c, name, lens[i], bufs[i]);
        }
        int64_t one = 1;
        save(c, "norm", NPY_F8, 0, &one, &norm);
        save(c, "scale", NPY_F8, 0, &one, &s);
    } else if (!strcmp(kase, "axpy")) {
        Npy *x = load(c, "x", NPY_F4);
        float *y = F(c, "y");
        hk_axpy_f32(x->numel, (float)P(c, 0), x->data, y);
        save_f(c, "y", x->numel, y);
    } else if (!strcmp(kase, "lr")) {
        RtLrSchedule s = {(int)P(c, 0) ? RT_LR_COSINE : RT_LR_CONSTANT, P(c, 1),
                          (int64_t)P(c, 2), (int64_t)P(c, 3), P(c, 4)};
        int64_t n = (int64_t)P(c, 5);
        double *lr = calloc((size_t)n + 1, sizeof(double));
        for (int64_t i = 0; i < n; i++)
            lr[i] = rt_lr_at(&s, i);
        save(c, "lr", NPY_F8, 1, &n, lr);
        free(lr);
    } else if (!strcmp(kase, "data")) {
        RtDataLoader dl;
        char rerr[RT_ERRLEN];
        if (!arg)
            die("data needs a token file");
        /* param 6 (optional): 1 reads raw uint16 tokens (--data-format raw-u16) */
        RtTokenFormat fmt = c->np > 6 && P(c, 6) ? RT_TOKENS_NANOGPT : RT_TOKENS_LLMC;
        if (rt_data_open_format(&dl, arg, fmt, (int64_t)P(c, 0), (int64_t)P(c, 1), (int)P(c, 2),
                                (int)P(c, 3), rerr))
            kfail(rerr);
        int64_t steps = (int64_t)P(c, 4), n = dl.rows * dl.T, dims[2] = {steps, n};
        int i32 = (int)P(c, 5);
        size_t es = i32 ? 4 : 8;
        char *in = calloc((size_t)(steps * n) + 1, es), *tg = calloc((size_t)(steps * n) + 1, es);
        for (int64_t s = 0; s < steps; s++) {
            int rc = i32 ? rt_data_batch_i32(&dl, s, (int32_t *)in + s * n,
                                             (int32_t *)tg + s * n, rerr)
                         : rt_data_batch(&dl, s, (int64_t *)in + s * n, (int64_t *)tg + s * n,
                                         rerr);
            if (rc)
                kfail(rerr);
        }
        save(c, "inputs", i32 ? NPY_I4 : NPY_I8, 2, dims, in);
        save(c, "targets", i32 ? NPY_I4 : NPY_I8, 2, dims, tg);
        int64_t one = 1, info[3] = {dl.format == RT_TOKENS_LLMC, dl.ntok, dl.nbatches};
        (void)one;
        int64_t three = 3;
        save(c, "info", NPY_I8, 1, &three, info);
        free(in), free(tg);
        rt_data_close(&dl);
    } else {
        die("unknown case");
    }
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "list_unary")) {
        for (int i = 0; i < HK_UG_COUNT; i++)
            printf("%s\n", hk_unary_grad_name((HkUnaryGrad)i));
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "list_binary")) {
        for (int i = 0; i < HK_BG_COUNT; i++)
            printf("%s\n", hk_binary_grad_name((HkBinaryGrad)i));
        return 0;
    }
    if (argc < 3)
        die("usage: train_driver <case> <dir> [arg] | list_unary | list_binary");
    Ctx c = {.dir = argv[2]};
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/params.npy", c.dir);
    Npy params = {0};
    if (npy_read(path, &params, err) == 0) {
        if (params.type != NPY_F8)
            die("params.npy must be float64");
        c.p = params.data;
        c.np = params.numel;
    }
    run_case(&c, argv[1], argc > 3 ? argv[3] : NULL);
    for (int i = 0; i < c.narr; i++)
        npy_free(&c.arrs[i]);
    npy_free(&params);
    return 0;
}
