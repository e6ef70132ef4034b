/* hetc plan's search machinery (plan_search.h), moved out of cmd_plan.c. */
#include "plan_search.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/zero_memory.h"
#include "simulate.h"

#define GIB 1073741824.0

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void plan_progress_profile(void *arg, long done, long total)
{
    if (*(int *)arg)
        fprintf(stderr, "\rprofile: %ld / %ld candidates", done, total);
}


int plan_keep_shape(void *arg, int mesh, Submesh sub)
{
    const ShapeKeep *k = arg;
    return hapt_dp_searches_shape(k->c, k->max_groups, mesh, sub);
}


static void *dp_worker(void *arg)
{
    DpJob *j = arg;
    j->rc = j->search(j->c, j->L, &j->o, &j->opt, &j->plan, &j->stats, &j->err);
    atomic_store(&j->done, 1);
    return NULL;
}

/* Progress (issue 16): mode 1 is the live line (a terminal, or --progress);
 * mode 2 (stderr is a log file: Slurm, CI, nohup) prints nothing for the
 * first 5 s, then one newline-terminated "progress:" line every 10 s, as
 * training frameworks log; mode 0 (--no-progress) nothing.  stdout (the
 * plan.txt copy) is never written to. */
int plan_run_dp(DpJob *j, int tty)
{
    pthread_t th;
    double t0 = now_s(), last = 0;
    atomic_store(&j->done, 0);
    DpProgress *pg = &j->progress;
    j->opt.progress = pg;
    if (pthread_create(&th, NULL, dp_worker, j) != 0) {
        dp_worker(j);
    } else {
        while (!atomic_load(&j->done)) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            double el = now_s() - t0;
            /* mode 2: the first line at 5 s (last starts at 0), then every 10 s */
            if (!tty || el - last < (tty == 1 ? 0.2 : last > 0 ? 10.0 : 5.0))
                continue;
            last = el;
            long ot = atomic_load(&pg->orders_total), od = atomic_load(&pg->orders_done);
            long kd = atomic_load(&pg->keys_done);
            if (ot == 0 || (od == 0 && kd < ot && j->opt.prune_tmax)) {
                /* tabulating, or the first phase: a lower bound per mesh order */
                fprintf(stderr, "%ssearch: %d layers, %d meshes, B = %d: %s %ld/%ld, %.1f s%s",
                        tty == 1 ? "\r" : "progress: ", j->L, j->c->nmeshes,
                        j->opt.microbatches, ot == 0 ? "tabulating" : "bounding mesh orders",
                        kd, ot, el, tty == 1 ? "   " : "\n");
                continue;
            }
            long tt = atomic_load(&pg->tmax_total), td = atomic_load(&pg->tmax_done);
            /* ETA from finished orders: their cost is alike (same tables,
             * same candidates), while t_max candidates are cut in bulk by
             * the bounds and say little about the time left. */
            char eta[48] = "";
            if (od > 0 && od < ot)
                snprintf(eta, sizeof eta, ", ETA %.0f s", el / (double)od * (double)(ot - od));
            fprintf(stderr, "%ssearch: %d layers, %d meshes, B = %d: order %ld/%ld, t_max %ld/%ld "
                    "(%ld full DPs), %.1f s%s%s", tty == 1 ? "\r" : "progress: ", j->L,
                    j->c->nmeshes, j->opt.microbatches, od < ot ? od + 1 : od, ot, td, tt,
                    atomic_load(&pg->full_dps), el, eta, tty == 1 ? "   " : "\n");
        }
        pthread_join(th, NULL);
    }
    if (tty == 1)
        fputc('\n', stderr);
    return j->rc;
}

/* Why nothing fits: the largest single-layer need vs the largest device. */
void plan_explain_memory(CostModel *cm, const ClusterSpec *c, const PlanLayer *layers, int L)
{
    double need = 0, maxmem = 0;
    int worst = 1;
    const char *bigdev = "";
    for (int a = 0; a < c->nmeshes; a++)
        if (c->meshes[a].dev.mem_bytes > maxmem) {
            maxmem = c->meshes[a].dev.mem_bytes;
            bigdev = c->meshes[a].dev.name;
        }
    for (int l = 1; l <= L; l++) {
        double best = INFINITY;
        for (int a = 0; a < c->nmeshes; a++) {
            const MeshSpec *m = &c->meshes[a];
            /* a mesh of N nodes has N + log2(per_node) shapes: no fixed cap */
            int ns = submesh_enumerate(m->nodes, m->per_node, NULL, 0);
            Submesh *subs = malloc((size_t)(ns > 0 ? ns : 1) * sizeof *subs);
            if (!subs)
                return;
            ns = submesh_enumerate(m->nodes, m->per_node, subs, ns);
            for (int s = 0; s < ns; s++) {
                StageCost sc;
                if (cost_model_stage(cm, l, l, a, subs[s], &sc) == 0 && isfinite(sc.mem_static)) {
                    double v = sc.mem_static + sc.mem_act;
                    if (v < best)
                        best = v;
                }
            }
            free(subs);
        }
        if (best > need) {
            need = best;
            worst = l;
        }
    }
    (void)layers;
    /* model states without ZeRO in the cluster's dtype (zero_memory.h): no
     * fp32 master copy at fp32 */
    double db = dtype_size_bytes(c->dtype);
    if (need > maxmem)
        fprintf(stderr, "hetc plan: the model fits nowhere: layer %d alone needs at least %.2f GiB "
                "per device (%g bytes per parameter for weights, gradients, %sAdam states, the "
                "runtime reserve and one microbatch of activations) but the largest device (%s) "
                "has %.2f GiB\n", worst, need / GIB, zero_state_bytes_per_param(db, 0, 1),
                db < 4 ? "fp32 master and " : "", bigdev, maxmem / GIB);
}

/* The equal-layers-per-stage baseline: the plan's stages, meshes and
 * submeshes with layers split as evenly as counts allow, costed by the same
 * oracle and simulated under the same schedule.  Returns its iteration time
 * (INFINITY when it cannot be built); *fits: every stage within memory. */
double plan_baseline_equal(const Plan *hp, CostModel *cm, const ClusterSpec *cl, int L,
                             int *fits, double *objective, IrError *err)
{
    Plan b = *hp;
    int S = hp->nstages;
    b.stages = calloc((size_t)S, sizeof *b.stages);
    b.mesh_order = NULL;
    b.nmesh_order = 0;
    double *sync = calloc((size_t)S, sizeof *sync);
    double t = INFINITY;
    *fits = 0;
    if (!b.stages || !sync || S > L)
        goto out;
    CostOracle o = cost_model_oracle(cm);
    double tmax = 0;
    for (int s = 0; s < S; s++) {
        PlanStage *ps = &b.stages[s];
        *ps = hp->stages[s];
        ps->first_layer = (int)((long)s * L / S) + 1;
        ps->last_layer = (int)((long)(s + 1) * L / S);
        StageCost sc;
        if (cost_model_stage(cm, ps->first_layer, ps->last_layer, ps->mesh, ps->sub, &sc))
            goto out;
        if (sc.t_f + sc.t_b > tmax)
            tmax = sc.t_f + sc.t_b;
        sync[s] = isfinite(sc.t_sync) ? sc.t_sync : 0;
    }
    for (int s = 0; s + 1 < S; s++) {
        double c = cost_model_comm(cm, b.stages[s].last_layer, b.stages[s].mesh, b.stages[s + 1].mesh);
        if (c > tmax)
            tmax = c;   /* the comm bound (ii), as the DP applies it */
    }
    b.t_max = tmax;
    if (!isfinite(tmax) || plan_fill_schedule(&b, &o, err))
        goto out;
    *fits = 1;
    double sum = 0;
    for (int s = 0; s < S; s++)
        sum += b.stages[s].t_f + b.stages[s].t_b + 2 * b.stages[s].c_next;
    *objective = sum + (double)(b.microbatches - 1) * tmax;   /* Eq. 13 */
    for (int s = 0; s < S; s++)
        if (b.stages[s].mem_pred > cl->meshes[b.stages[s].mesh].dev.mem_bytes)
            *fits = 0;
    SimResult r;
    if (simulate_plan(&b, sync, &r, err) == 0) {
        t = r.iter_time;
        sim_result_free(&r);
    }
out:
    free(b.stages);
    free(sync);
    return t;
}

