/* Memory plan, lowering, LLVM emission and linking of every stage, and the
 * memory report beside the planner's prediction (DIR/stages.txt, appended
 * to plan.txt). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends.h"
#include "compile_launch.h"
#include "compile_stage.h"
#include "llvm_emit.h"
#include "lower_stage.h"
#include "memplan.h"
#include "planner/schedule.h"
#include "stage_link.h"

/* Every parameter held by more than one stage, in one plan-wide order
 * (stage, then the stage's parameter order), with its stages: every rank
 * makes one communicator per entry in this order. */
static char *shared_lines(const CompPlan *p, const PartStage *ps) {
    size_t cap = 256, n = 0;
    char *out = malloc(cap);
    out[0] = 0;
    for (int s = 0; s < p->nstages; s++)
        for (int k = 0; k < ps[s].nparams; k++) {
            const PartParam *pp = &ps[s].params[k];
            if (!pp->shared)
                continue;
            int first = 1;
            for (int q = 0; q < s && first; q++)
                for (int j = 0; j < ps[q].nparams; j++)
                    if (!strcmp(ps[q].params[j].name, pp->name))
                        first = 0;
            if (!first)
                continue;
            char *esc = lower_config_name(pp->name);
            char line[4096];
            int w = snprintf(line, sizeof line, "shared %s stages", esc);
            free(esc);
            for (int q = 0; q < p->nstages; q++)
                for (int j = 0; j < ps[q].nparams; j++)
                    if (!strcmp(ps[q].params[j].name, pp->name) && w < (int)sizeof line - 16)
                        w += snprintf(line + w, sizeof line - (size_t)w, " %d", q);
            snprintf(line + w, sizeof line - (size_t)w, "\n");
            size_t l = strlen(line);
            if (n + l + 1 > cap) {
                cap = (n + l + 1) * 2;
                out = realloc(out, cap);
            }
            memcpy(out + n, line, l + 1);
            n += l;
        }
    return out;
}

/* `link PEER direct|cpu` for every stage this one exchanges boundary
 * tensors with (docs/STAGE_ABI.md): the transport of the cluster link
 * between the two stages' meshes (plan.json cluster.links); two stages on
 * one mesh talk over its own interconnect, device-direct.  Nothing without
 * link information (a plan without cluster.links): the runtime then uses
 * the CPU-mediated path, which is always correct. */
static char *link_lines(const CompPlan *p, const PartStage *ps, int s) {
    size_t cap = 64 + (size_t)ps[s].nxfers * 32, n = 0;
    char *out = malloc(cap);
    out[0] = 0;
    if (!p->nlinks)
        return out;
    const char *me = p->stages[s].mesh;
    for (int peer = 0; peer < p->nstages; peer++) {
        int used = 0;
        for (int k = 0; k < ps[s].nxfers && !used; k++)
            used = ps[s].xfers[k].peer == peer;
        if (!used || peer == s)
            continue;
        const char *other = p->stages[peer].mesh;
        int direct = !strcmp(me, other), found = direct;
        for (int l = 0; l < p->nlinks && !found; l++) {
            const CpLink *k = &p->links[l];
            if ((!strcmp(k->a, me) && !strcmp(k->b, other)) ||
                (!strcmp(k->a, other) && !strcmp(k->b, me))) {
                found = 1;
                direct = !k->cpu_mediated;
            }
        }
        n += (size_t)snprintf(out + n, cap - n, "link %d %s\n", peer, direct ? "direct" : "cpu");
    }
    return out;
}

/* config with `extra` inserted before its final "end" line (or appended). */
static char *config_with(const char *config, const char *extra) {
    size_t a = strlen(config), b = strlen(extra);
    char *out = malloc(a + b + 1);
    const char *end = strstr(config, "\nend\n");
    size_t cut = end ? (size_t)(end - config) + 1 : a;
    memcpy(out, config, cut);
    memcpy(out + cut, extra, b);
    memcpy(out + cut + b, config + cut, a - cut + 1);
    return out;
}

static double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }

/* The lowering options of one stage binary (slots, schedule, training). */
static void lower_opts(const CompileStages *cs, int *dp, int nslots, LeSched *ls, LowerOpts *lo) {
    const CompPlan *p = cs->plan;
    const CompileArgs *a = cs->args;
    int B = p->microbatches;
    memset(lo, 0, sizeof *lo);
    lo->nstages = p->nstages;
    lo->dp = dp;
    lo->rows = p->prows; /* a pipeline's rows of a microbatch (cs->rows with one) */
    lo->seq = cs->co->seq;
    lo->accum = B;
    lo->nslots = nslots;
    lo->sched = ls;
    lo->nsched = 2 * B;
    lo->optimizer = a->optimizer;
    lo->lr = a->lr;
    lo->lr_schedule = a->lr_schedule;
    lo->warmup = a->warmup;
    lo->steps = a->steps;
    lo->layers = cs->nlayers;
    lo->token_dtype = IR_UNDEF;
    lo->direct = !a->interpret_nodes;
    /* its direct-call table (CUDA: device arenas) */
    lo->backend = (a->backend ? a->backend : hetc_backend_host())->lower;
    /* generated fused kernels: the host's loops unless --no-fuse; CUDA's
     * NVPTX kernels only with --fuse (not yet run on a GPU, docs/CUDA.md) */
    lo->fuse = a->no_fuse ? 0 : a->fuse ? 2 : 1;
    lo->tp_reduce_bf16 = a->tp_reduce_bf16; /* --tp-reduce-dtype bf16 */
}

/* Stage s's config: the lowering's, with the shared-parameter, link, build
 * id and metrics records before its "end" (mps: the stages at this
 * binary's rows, for its flops). */
/* `rowtable S N0 .. N(dp-1)` for every stage with a row table
 * (heterogeneous DP): every binary splits boundary tensors by its
 * neighbours' rows too (runtime/rt.h rt_stage_row_split). */
static char *rowtable_lines(const CompPlan *p) {
    size_t cap = 64, n = 0;
    for (int s = 0; s < p->nstages; s++)
        cap += p->stages[s].row_table ? 32 + (size_t)p->stages[s].dp * 21 : 0;
    char *out = malloc(cap);
    out[0] = 0;
    for (int s = 0; s < p->nstages; s++) {
        if (!p->stages[s].row_table)
            continue;
        n += (size_t)snprintf(out + n, cap - n, "rowtable %d", s);
        for (int r = 0; r < p->stages[s].dp; r++)
            n += (size_t)snprintf(out + n, cap - n, " %lld", (long long)p->stages[s].row_table[r]);
        n += (size_t)snprintf(out + n, cap - n, "\n");
    }
    return out;
}

/* `pipes F0 .. F(J-1)` (several pipelines: each one's first stage): the
 * runtime reads pipeline j's rows [j rows, (j + 1) rows) of every data
 * microbatch and sums the step loss over the pipelines' last stages
 * (docs/STAGE_ABI.md).  Empty with one pipeline. */
static char *pipes_line(const CompPlan *p) {
    size_t cap = 16 + (size_t)(p->npipes > 1 ? p->npipes : 0) * 12, n = 0;
    char *out = malloc(cap);
    out[0] = 0;
    if (p->npipes < 2)
        return out;
    n += (size_t)snprintf(out + n, cap - n, "pipes");
    for (int j = 0; j < p->npipes; j++)
        n += (size_t)snprintf(out + n, cap - n, " %d", p->pipe_first[j]);
    snprintf(out + n, cap - n, "\n");
    return out;
}

static char *stage_config(const CompileStages *cs, const PartStage *ps, const PartStage *mps,
                          int s, const char *shared, const char *config) {
    char *links = link_lines(cs->plan, ps, s);
    char idline[96];
    /* `offload 1`: the runtime keeps the stage's parameters and optimizer
     * state in its host offload store; `grad_reduce bf16`: gradients cross
     * the wire in bf16 (--grad-reduce-dtype; docs/STAGE_ABI.md) */
    snprintf(idline, sizeof idline, "%s%sbuild %016llx\n",
             cs->plan->stages[s].offload ? "offload 1\n" : "",
             cs->args->grad_reduce_bf16 ? "grad_reduce bf16\n" : "",
             (unsigned long long)cs->build_id);
    char *mlines = compile_metrics_lines(cs, mps, s); /* flops at this binary's rows */
    size_t mlen = mlines ? strlen(mlines) : 0;
    char *extra = malloc(strlen(shared) + strlen(links) + strlen(idline) + mlen + 1);
    strcpy(extra, shared);
    strcat(extra, links);
    strcat(extra, idline);
    if (mlines) strcat(extra, mlines);
    free(mlines);
    char *cfg = config_with(config, extra);
    free(links);
    free(extra);
    return cfg;
}

/* One row of the memory table (rep), the stage's kernel lines (kern). */
static void report_stage(FILE *rep, FILE *kern, const CompPlan *p, const StageVariant *v,
                         const MemPlan *mp, const LowerStats *lst) {
    int s = v->stage, nranks = 0;
    for (int r = 0; r < p->stages[s].dp; r++) /* the DP ranks running this binary */
        nranks += comp_plan_rank_rows(p, s, r) == v->rows;
    char sname[48];
    snprintf(sname, sizeof sname, "%d%s", s, v->suffix[0] ? v->suffix + 1 : "");
    char pred[32] = "-"; /* the planner's arena part (plan.json mem_arena_pred_bytes) */
    if (p->stages[s].mem_arena_pred >= 0)
        snprintf(pred, sizeof pred, "%.2f", p->stages[s].mem_arena_pred / 1048576.0);
    fprintf(rep, "%5s  %5d  %5d  %10.2f  %9.2f  %9.2f  %12.2f  %11.2f  %9.2f  %11.3f  %15s\n",
            sname, nranks,
            mp->nslots, mp->param_bytes / 1048576.0, mp->grad_bytes / 1048576.0,
            mp->opt_bytes / 1048576.0, mp->slot_bytes / 1048576.0,
            mp->scratch_bytes / 1048576.0, mp->arena_bytes / 1048576.0,
            gib(p->stages[s].mem_pred), pred);
    /* what is still interpreted (issue 15): a line per stage after the table */
    fprintf(kern, "stage %s: %d nodes as direct kernel calls, %d interpreted (hetrt_node)%s%s\n",
            sname, lst->direct, lst->interp, lst->interp ? ": " : "", lst->interp_ops);
    if (lst->fused)
        fprintf(kern, "  fused: %d of them in %d generated elementwise kernels\n", lst->fused,
                lst->kernels);
    if (lst->interp && lst->why[0]) fprintf(kern, "  first: %s\n", lst->why);
    if (!v->suffix[0] && p->stages[s].nparts) { /* once a stage: where its DP group runs */
        const CpStage *c = &p->stages[s];
        fprintf(kern, "  DP group over %d meshes (plan.json parts; launch.sh rank_mesh):",
                c->nparts);
        for (int j = 0, r = 0; j < c->nparts; r += c->part_dp[j], j++) {
            fprintf(kern, "%s DP rank%s %d", j ? ";" : "", c->part_dp[j] > 1 ? "s" : "", r);
            if (c->part_dp[j] > 1)
                fprintf(kern, "-%d", r + c->part_dp[j] - 1);
            fprintf(kern, " on %s (rows", c->part_mesh[j]);
            for (int i = r; i < r + c->part_dp[j]; i++)
                fprintf(kern, " %lld", (long long)comp_plan_rank_rows(p, s, i));
            fprintf(kern, ")");
        }
        fprintf(kern, "\n");
    }
    if (p->stages[s].offload) { /* what the host store holds, beside the planner's figures */
        int64_t pb = 0, ob = 0; /* as runtime/stage/stage_offload.c lays the store out */
        for (int i = 0; i < mp->nparams; i++) {
            const MpParam *q = &mp->params[i];
            pb += q->bytes;
            ob += 4 * q->zlen * ((q->m_off >= 0) + (q->v_off >= 0));
        }
        fprintf(kern, "  offload: host store %.3f MiB per rank (fp32 parameters %.3f + optimizer "
                "state %.3f), copied into the arena before use and back after the update "
                "every step; the arena keeps their regions as the streamed working set (the "
                "planner counts 16 B per parameter on the host and 2 ministages' "
                "training-dtype weights and gradients on the device)\n",
                (double)(pb + ob) / 1048576.0, (double)pb / 1048576.0, (double)ob / 1048576.0);
    }
}

/* Ministages sharing devices (plan.json "group"): each is its own process
 * with its own arena, so a group's device holds all of them at once (not
 * Zorse's one ministage computed + one prefetched): said under the memory
 * table, per group, beside the planner's per-ministage prediction.
 * arena[s]: stage s's largest arena over its binaries. */
static void report_groups(FILE *rep, const CompPlan *p, const double *arena) {
    for (int s = 0; s < p->nstages; s++) {
        int n = 0;
        double sum = 0, pred = 0;
        for (int q = s; q < p->nstages; q++)
            if (p->stages[q].mate == s) {
                n++;
                sum += arena[q];
                pred = p->stages[q].mem_pred > pred ? p->stages[q].mem_pred : pred;
            }
        if (n < 2)
            continue;
        fprintf(rep, "group %d: stages", p->stages[s].group);
        for (int q = s; q < p->nstages; q++)
            if (p->stages[q].mate == s)
                fprintf(rep, " %d", q);
        fprintf(rep, " share stage %d's devices (launch.sh device_of): their arenas sum to "
                "%.2f MiB per device, every ministage's process holding its own (the planner's "
                "largest per-ministage prediction: %.3f GiB with its reserve)\n", s,
                sum / 1048576.0, gib(pred));
    }
}

/* DIR/stages.txt; and the same table at the end of plan.txt */
static int write_reports(const CompileStages *cs, const char *report, size_t report_len,
                         IrError *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/stages.txt", cs->out_dir);
    if (compile_write_file(path, report + 1, 0644, err))
        return -1;
    snprintf(path, sizeof path, "%s/plan.txt", cs->out_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *txt = malloc((size_t)n + report_len + 1);
    size_t got = fread(txt, 1, (size_t)n, f);
    fclose(f);
    txt[got] = 0;
    char *old = strstr(txt, "\nstage memory plan");
    if (old)
        *old = 0;
    strcat(txt, report);
    int rc = compile_write_file(path, txt, 0644, err);
    free(txt);
    return rc;
}

/* Emit stage s's program (prog, lowered from stage graph st) as the binary
 * DIR/stage_S<sfx>: object, link, --emit-llvm's .ll and .fused.txt, then
 * fsync and rename into place.  0 or an error (nothing left half-written). */
static int emit_binary(const CompileStages *cs, const HetcBackend *be, LeProgram *prog,
                       const LowerStats *lst, const PartStage *st, int s, const char *sfx,
                       IrError *err) {
    const CompileArgs *a = cs->args;
    char obj[4200], ll[4200], exe[4200], tmp[4300];
    snprintf(obj, sizeof obj, "%s/stage_%d%s.o", cs->out_dir, s, sfx);
    snprintf(ll, sizeof ll, "%s/stage_%d%s.ll", cs->out_dir, s, sfx);
    snprintf(exe, sizeof exe, "%s/stage_%d%s", cs->out_dir, s, sfx);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", exe, (int)getpid());
    LeOptions eo;
    memset(&eo, 0, sizeof eo);
    eo.obj_path = obj;
    eo.ll_path = a->emit_llvm ? ll : NULL;
    eo.exe_path = tmp;
    eo.cc = HETC_STAGE_CC;
    /* the backend is only the runtime library linked: the stage object
     * and its hetrt_* calls are the same (docs/CUDA.md); the node
     * interpreter and the IR parser only for a program that still calls
     * hetrt_node (docs/STAGE_ABI.md "Nodes") */
    const char *const *link = hetc_backend_link(be, lower_stage_interprets(prog));
    int nl = 0;
    while (link[nl])
        nl++;
    eo.nlink_args = nl;
    eo.link_args = link;
    eo.opt_level = 1;
    int erc = le_emit_program(prog, &eo, err);
    if (!erc && a->emit_llvm && lst->kernels) { /* DIR/stage_K.fused.txt */
        char fpath[4200];
        snprintf(fpath, sizeof fpath, "%s/stage_%d.fused.txt", cs->out_dir, s);
        FILE *ff = fopen(fpath, "w");
        if (!ff) erc = ir_errorf(err, "cannot write %s: %s", fpath, strerror(errno));
        else {
            lower_stage_print_fused(prog, st, ff);
            if (fclose(ff)) erc = ir_errorf(err, "cannot write %s", fpath);
        }
        /* a device backend's kernels as one PTX module (the binary holds one
         * per kernel): DIR/stage_K.ptx, what ptxas checks */
        snprintf(fpath, sizeof fpath, "%s/stage_%d.ptx", cs->out_dir, s);
        if (!erc && lower_stage_write_ptx(prog, fpath, err)) erc = -1;
    }
    unlink(obj);
    /* durable before the build directory is swapped in (build_dir.h) */
    int efd = erc ? -1 : open(tmp, O_RDONLY | O_CLOEXEC);
    if (!erc && (efd < 0 || fsync(efd) != 0))
        erc = ir_errorf(err, "%s: cannot fsync (%s)", tmp, strerror(errno));
    if (efd >= 0)
        close(efd);
    if (!erc && rename(tmp, exe))
        erc = ir_errorf(err, "%s: cannot rename into place (%s)", exe, strerror(errno));
    if (erc)
        unlink(tmp);
    return erc;
}

int compile_emit_stages(CompileStages *cs, PartStage *ps, const StageVariant *var, int nvar,
                        IrError *err) {
    const CompPlan *p = cs->plan;
    const CompileArgs *a = cs->args;
    const HetcBackend *be = a->backend ? a->backend : hetc_backend_host();
    int S = p->nstages, B = p->microbatches, rc = -1;
    int *warm = malloc((size_t)S * sizeof *warm), *dp = malloc((size_t)S * sizeof *dp);
    double *arena = calloc((size_t)S, sizeof *arena); /* report_groups' */
    for (int s = 0; s < S; s++) {
        warm[s] = p->stages[s].warmup;
        dp[s] = p->stages[s].dp;
    }
    /* each pipeline's own schedule (one with one pipeline) */
    int J = p->npipes > 1 ? p->npipes : 1;
    Schedule *sch = calloc((size_t)J, sizeof *sch);
    char *shared = NULL, *report = NULL;
    size_t report_len = 0;
    FILE *rep = open_memstream(&report, &report_len);
    char *kbuf = NULL; /* the per-stage direct / interpreted node counts */
    size_t klen = 0;
    FILE *kern = open_memstream(&kbuf, &klen);
    /* the offload store is host memory the host runtime copies through
     * (runtime/stage/stage_offload.c); the CUDA runtime has no such path yet */
    for (int s = 0; s < S; s++)
        if (p->stages[s].offload && be != hetc_backend_host()) {
            ir_errorf(err, "stage %d: \"offload\" (CPU offload) runs on the host backend only, "
                      "not --backend=%s", s, be->name);
            goto done;
        }
    for (int j = 0; j < J; j++) {
        int f = p->pipe_first ? p->pipe_first[j] : 0;
        int e = p->pipe_first ? p->pipe_first[j + 1] : S;
        if (schedule_build(e - f, B, warm + f, &sch[j], err)) {
            if (J > 1) ir_error_prefix(err, "pipeline %d schedule", j + 1);
            else ir_error_prefix(err, "schedule");
            goto done;
        }
    }
    shared = shared_lines(p, ps);
    char *rtab = rowtable_lines(p), *pl = pipes_line(p);
    char *both = malloc(strlen(shared) + strlen(rtab) + strlen(pl) + 1);
    strcpy(both, shared);
    strcat(both, rtab);
    strcat(both, pl);
    free(shared);
    free(rtab);
    free(pl);
    shared = both;
    fprintf(rep, "\nstage memory plan (per rank, %s %s backend; planner GiB: the planner's "
                 "prediction with its runtime reserve, pred arena MiB: without it)\n",
            !a->bf16_mixed ? "fp32"
            : a->bf16_sr   ? "bf16-mixed (the backward keeps bf16 Linear operands; weight copies "
                             "rounded stochastically)"
                           : "bf16-mixed (the backward keeps bf16 Linear operands)",
            be->name);
    fprintf(rep, "stage  ranks  slots  params MiB  grads MiB  optim MiB  act/slot MiB  scratch MiB"
                 "  arena MiB  planner GiB  pred arena MiB\n");
    for (int u = 0; u < nvar; u++) {
        int s = var[u].stage;
        PartStage *st = &ps[u];
        const char *sfx = var[u].suffix; /* "" for DP rank 0's rows; _lo, _rN: other counts */
        LeSched *ls = malloc((size_t)2 * B * sizeof *ls);
        int f, e;
        comp_plan_pipe_range(p, s, &f, &e);
        const Schedule *ps_sch = &sch[p->pipe_first ? p->stages[s].pipe : 0];
        for (int i = 0; i < 2 * B; i++) {
            ls[i].kind = ps_sch->actions[s - f][i].kind;
            ls[i].microbatch = ps_sch->actions[s - f][i].mb;
        }
        LowerOpts lo;
        lower_opts(cs, dp, ps_sch->warmup[s - f], ls, &lo);
        LeProgram prog;
        MemPlan mp;
        char *config = NULL;
        LowerStats lst;
        if (lower_stage_stats(st, &lo, &prog, &config, &mp, &lst, err)) {
            free(ls);
            ir_error_prefix_stage(err, NULL, s);
            goto done;
        }
        char *cfg = stage_config(cs, ps, st, s, shared, config);
        prog.config = cfg;
        int erc = emit_binary(cs, be, &prog, &lst, &ps[s], s, sfx, err);
        report_stage(rep, kern, p, &var[u], &mp, &lst);
        arena[s] = (double)mp.arena_bytes > arena[s] ? (double)mp.arena_bytes : arena[s];
        lower_stats_free(&lst);
        lower_stage_free(&prog);
        memplan_free(&mp);
        free(config);
        free(cfg);
        free(ls);
        if (erc) {
            ir_error_prefix_stage(err, NULL, s);
            goto done;
        }
    }
    report_groups(rep, p, arena);
    fclose(kern);
    kern = NULL;
    fprintf(rep, "\nstage kernels (nodes lowered to direct kernel calls; the rest run by the "
                 "node interpreter, linked into those binaries only)\n%s", kbuf);
    fflush(rep);
    fclose(rep);
    rep = NULL;
    fputs(report + 1, stderr);
    if (write_reports(cs, report, report_len, err))
        goto done;
    rc = 0;
done:
    if (kern)
        fclose(kern);
    free(kbuf);
    if (rep)
        fclose(rep);
    free(report);
    free(shared);
    for (int j = 0; sch && j < J; j++)
        schedule_free(&sch[j]);
    free(sch);
    free(warm);
    free(dp);
    free(arena);
    return rc;
}
