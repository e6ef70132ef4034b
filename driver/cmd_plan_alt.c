/* hetc plan --planner=NAME (see cmd_plan_alt.h). */
#include "cmd_plan_alt.h"
#include "alt_autohet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alt_plan.h"
#include "plan_output.h"
#include "simulate.h"

int cmd_plan_alt(const PlanAltArgs *a, const ClusterSpec *cl, const PlanLayer *layers, int L)
{
    AltContext x;
    alt_context_default(&x, cl, layers, L, a->microbatches);
    x.rows = a->microbatches > 0 ? (int)(a->global_batch / a->microbatches) : 0;
    x.co.efficiency = a->efficiency;
    /* bf16-mixed: the bf16 GEMMs at the bf16 peak, as hapt times them */
    x.co.bf16_gemm = a->precision && !strcmp(a->precision, "bf16-mixed");
    x.co.grad_reduce_bf16 = a->grad_reduce_bf16;
    x.co.tp_reduce_bf16 = a->tp_reduce_bf16;
    x.threads = a->threads > 0 ? a->threads : 1;
    if (a->coarse_layers > 0)
        x.coarse_layers = a->coarse_layers;
    AltPlan p;
    IrError err = {{0}};
    int prc;
    if (a->autohet_profile && !strcmp(a->planner, "autohet")) {
        long pts = 0, exh = 0;
        prc = alt_plan_autohet_mode(&x, AH_PROFILE_BINARY, &p, &pts, &exh, &err);
        if (!prc)
            fprintf(stderr, "autohet: Eq. 5 binary profile: %ld points (exhaustive %ld)\n", pts,
                    exh);
    } else {
        prc = alt_plan_run(a->planner, &x, &p, &err);
    }
    if (prc) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        return 1;
    }
    alt_plan_print(stdout, &x, &p);
    int rc = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/plan_%s.txt", a->out_dir, a->planner);
    FILE *f = fopen(path, "w");
    if (f) {
        alt_plan_print(f, &x, &p);
        fclose(f);
    }
    /* plan.json for every plan: one the stage binaries cannot run yet records
     * its forms (parts, ministage groups, pipelines, offload) so that hetc
     * compile --plan refuses it naming the stage and the form (issue 18); its
     * timeline is the planner's own simulation, not simulate.h's */
    Plan hp;
    SimResult sim;
    memset(&sim, 0, sizeof sim);
    double *sync = calloc((size_t)p.nstages, sizeof *sync);
    if (!sync || alt_plan_to_plan(&x, &p, &hp, &err)) {
        fprintf(stderr, "hetc plan: %s: no plan.json: %s; wrote %s\n", a->planner,
                sync ? err.msg : "out of memory", path);
        free(sync);
        alt_plan_free(&p);
        return sync ? 0 : 1;
    }
    for (int s = 0; s < p.nstages; s++)
        sync[s] = isfinite(p.stages[s].t_sync) ? p.stages[s].t_sync : 0;
    PlanOutputInfo info;
    memset(&info, 0, sizeof info);
    info.model = a->model;
    info.global_batch = a->global_batch;
    info.seq = a->seq;
    info.planner = a->planner;
    info.precision = a->precision;
    info.cluster_dtype = a->cluster_dtype;
    info.grad_reduce_bf16 = a->grad_reduce_bf16;
    info.tp_reduce_bf16 = a->tp_reduce_bf16;
    /* simulate.h runs one pipeline: several (AutoHet's, which run when their
     * stages line up: driver/plan_pipes.c) keep the planner's own simulation */
    int pipes = 0;
    for (int s = 0; s < p.nstages; s++)
        pipes |= p.stages[s].pipe > 1 || hp.stages[s].group > 0;
    /* nor does it share devices among stages: ministages (plan.json
     * "group") keep the planner's own simulation too (alt_sim_grouped) */
    int sim_ok = p.runnable && !pipes;
    if (!sim_ok)
        info.iteration_time = p.sim_time;
    if ((sim_ok && simulate_plan(&hp, sync, &sim, &err)) ||
        plan_write_outputs(a->out_dir, &hp, cl, &info, sim.events, sim.nevents, &err)) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        rc = 1;
    } else if (p.mb_samples != 1)
        fprintf(stderr, "hetc plan: %s plans a pipeline microbatch of %g x --microbatch rows: "
                "compile plan.json with --microbatch %g x the rows given here\n", a->planner,
                p.mb_samples, p.mb_samples);
    int hp_grouped = 0;
    for (int s = 0; s < hp.nstages; s++)
        hp_grouped |= hp.stages[s].group > 0;
    sim_result_free(&sim);
    plan_free(&hp);
    free(sync);
    if (!rc && sim_ok)
        fprintf(stderr, "wrote %s/plan.json, plan.txt, timeline.json, timeline.svg, plan_%s.txt\n",
                a->out_dir, a->planner);
    else if (!rc) {
        /* no simulate.h timeline for it: an earlier plan's must not pass for this one's */
        char tl[4200];
        snprintf(tl, sizeof tl, "%s/timeline.json", a->out_dir);
        remove(tl);
        snprintf(tl, sizeof tl, "%s/timeline.svg", a->out_dir);
        remove(tl);
        if (p.runnable)
            fprintf(stderr, "hetc plan: %s: wrote %s/plan.json, plan.txt, plan_%s.txt (%s; "
                    "the iteration time is the planner's own simulation, no timeline files)\n",
                    a->planner, a->out_dir, a->planner,
                    hp_grouped ? "its ministages sharing devices run under hetc compile --plan, "
                    "each as its own ranks on its group's devices"
                    : "its pipelines run under hetc compile --plan: as one pipeline where their "
                    "stages line up, else each pipeline on its own with every layer's gradients "
                    "summed over the stages holding it");
        else
            fprintf(stderr, "hetc plan: %s: wrote %s/plan.json, plan.txt, plan_%s.txt; the stage "
                    "binaries cannot run it yet (%s): hetc compile --plan refuses it naming the "
                    "stage and the form\n", a->planner, a->out_dir, a->planner, p.needs);
    }
    alt_plan_free(&p);
    return rc;
}
