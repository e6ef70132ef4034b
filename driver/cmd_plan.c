/* hetc plan: import, forward passes, modules, layers, profile, HAPT DP over
 * every mesh order, simulate the plan under its schedule, write
 * plan.json / plan.txt / timeline.json / timeline.svg (docs/PLAN_FORMAT.md).
 *
 * Batch handling: the import binds the batch dim to the microbatch b and the
 * sequence dim to --seq, so every layer figure is per microbatch; the DP
 * runs B = G / b microbatches.  A stage with dp ranks splits the microbatch
 * over them (cost_model.c divides FLOPs and activations by dp).
 */
#include "cmd_plan.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_plan_alt.h"
#include "compile_opts.h"
#include "cost_model.h"
#include "hapt_dp.h"
#include "layers.h"
#include "modules.h"
#include "plan_output.h"
#include "planners.h"
#include "simulate.h"

#define GIB 1073741824.0

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hetc plan MODEL.onnx CLUSTER.yaml -o DIR [options]\n"
            "\n"
            "(hetc compile, or hetc MODEL.onnx CLUSTER.yaml, plans the same way and then\n"
            "builds the per-stage executables and launch.sh: hetc compile --help.)\n"
            "\n"
            "Plan a heterogeneity-aware pipeline (HAPT): repeated modules, fine-grained\n"
            "layers, zero-redundant profiling, the DP of Eq. 13-24 over every mesh order,\n"
            "and a simulated iteration.  Writes DIR/plan.json, plan.txt, timeline.json,\n"
            "timeline.svg (docs/PLAN_FORMAT.md) and prints plan.txt.\n"
            "\n"
            "  --global-batch G       samples per iteration (default 8 x microbatch)\n"
            "  --microbatch b         samples per microbatch = the bound batch dim (default 1;\n"
            "                         --batch is the same option)\n"
            "  --layers N             target number of fine-grained layers (default: >= 4 per\n"
            "                         block, see passes/layers.h)\n"
            "  --schedule S           h1f1b (default) | 1f1b | eager1f1b | gpipe\n"
            "  --threads N            DP worker threads (default: CPUs online)\n"
            "  --plan-eps E           the planner's epsilon of Eq. 2 (default 0.1; AdamW's is\n"
            "                         hetc train / compile's --adam-eps)\n"
            "  --imbalance X          imbalance pruning threshold T of docs/CLUSTER.md\n"
            "                         (default 4; 0 = off)\n"
            "  --min-heavy Z          heavy ops a repeated module must hold (default 2)\n"
            "  --max-stages S         cap on pipeline stages (default: what keeps the DP\n"
            "                         table under 16M states per thread)\n"
            "  --efficiency F         fraction of peak FLOP/s GEMMs reach (default 0.5)\n"
            "  --profile-db FILE      measured per-layer costs (docs/PROFILE_DB.md); layers it\n"
            "                         lacks are costed by the analytic model\n"
            "  --write-profile-db FILE  write the analytic model's per-layer figures in the\n"
            "                         profile database format (a template for hetc profile)\n"
            "  --progress             print the live search progress line even when stderr is\n"
            "                         not a terminal (default: live on a terminal; otherwise\n"
            "                         one 'progress:' line every 10 s once the search has\n"
            "                         run 5 s, on stderr)\n"
            "  --no-progress          no progress lines\n"
            "  --time-limit SECONDS   stop the search after SECONDS and write the best plan\n"
            "                         found so far, marked as such in plan.txt, plan.json and\n"
            "                         on stderr (default: none)\n"
            "  --max-node-groups G    search a mesh of more than G nodes in G node groups or\n"
            "                         fewer (a heuristic, stated in the output; default 32;\n"
            "                         0 = every submesh shape, exact: slow beyond ~64 nodes)\n"
            "  --dp-divides-microbatch  only DP degrees that divide the microbatch rows (what the\n"
            "                         stage binaries run; hetc compile always sets it)\n"
            "  --max-tp N             largest tensor-parallel degree per stage (power of two,\n"
            "                         inside a node; default 8)\n"
            "  --zero auto|0|1|2      ZeRO stage inside a stage's DP group (default auto: the\n"
            "                         cheapest plan that fits memory)\n"
            "  --recompute auto|none|full|selective  activation recompute per stage (default auto)\n"
            "  --no-intra-op          tp = 1, ZeRO 0, no recompute (the plans before issue 9)\n"
            "  --planner NAME         one of these (the seed planners of docs/COMPARISON.md\n"
            "                         plan on the same layers and simulator):\n");
    planner_help(f, "    ");
    fprintf(f,
            "  --coarse-layers N      --planner coarse: merge the layers into N (default 8)\n"
            "  --autohet-profile exact|binary  --planner autohet: cost stages from every layer\n"
            "                         count, or from power-of-two counts composed (Eq. 5)\n"
            "  --baseline-equal       also simulate the same stages and submeshes with an\n"
            "                         equal number of layers per stage, and print the ratio\n"
            "  --dump-ir-after=modules,layers,plan  (or any pass) IR with module/layer/stage ids\n"
            "\n");
    compile_opts_help(f);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_double(const char *opt, const char *s, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (!end || *end || end == s || !isfinite(v) || v < 0) {
        fprintf(stderr, "hetc plan: %s expects a non-negative number, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

typedef struct PlanArgs {
    CompileOpts co;
    const char *cluster;
    int64_t global_batch, layers, threads, min_heavy, max_stages;
    double eps, imbalance, efficiency;
    int schedule;
    int baseline_equal;
    int dp_divides;          /* --dp-divides-microbatch: dp must divide the microbatch rows */
    int progress;            /* 1 --progress, -1 --no-progress, 0 default */
    double time_limit;       /* --time-limit (0: none) */
    int64_t max_groups;      /* --max-node-groups (default 32) */
    int64_t max_tp;          /* --max-tp (default 8) */
    int zero, recompute;     /* --zero, --recompute: -1 = auto (default) */
    int no_intra;            /* --no-intra-op */
    const char *profile_db, *write_profile_db;
    const char *planner;        /* --planner (NULL: hapt) */
    int64_t coarse_layers;
    int autohet_binary;         /* --autohet-profile binary (seed 001 Eq. 5) */
} PlanArgs;

static void progress_profile(void *arg, long done, long total)
{
    if (*(int *)arg)
        fprintf(stderr, "\rprofile: %ld / %ld candidates", done, total);
}

/* Profile only the shapes the DP searches (the node-group heuristic). */
typedef struct ShapeKeep {
    const ClusterSpec *c;
    int max_groups;
} ShapeKeep;

static int keep_shape(void *arg, int mesh, Submesh sub)
{
    const ShapeKeep *k = arg;
    return hapt_dp_searches_shape(k->c, k->max_groups, mesh, sub);
}

/* The DP runs in a worker so the main thread can print a progress line. */
typedef struct DpJob {
    const ClusterSpec *c;
    int L;
    CostOracle o;
    DpOptions opt;
    Plan plan;
    DpStats stats;
    IrError err;
    int rc;
    atomic_int done;
    DpProgress progress;
    PlannerOracleFn search; /* the planner table's entry (hapt_dp_plan) */
} DpJob;

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
static int run_dp(DpJob *j, int tty)
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
static void explain_memory(CostModel *cm, const ClusterSpec *c, const PlanLayer *layers, int L)
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
    if (need > maxmem)
        fprintf(stderr, "hetc plan: the model fits nowhere: layer %d alone needs at least %.2f GiB "
                "per device (16 bytes per parameter for weights, gradients, fp32 master and Adam "
                "states, the runtime reserve and one microbatch of activations) but the largest "
                "device (%s) has %.2f GiB\n", worst, need / GIB, bigdev, maxmem / GIB);
}

/* The equal-layers-per-stage baseline: the plan's stages, meshes and
 * submeshes with layers split as evenly as counts allow, costed by the same
 * oracle and simulated under the same schedule.  Returns its iteration time
 * (INFINITY when it cannot be built); *fits: every stage within memory. */
static double baseline_equal(const Plan *hp, CostModel *cm, const ClusterSpec *cl, int L,
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

int cmd_plan(int argc, char **argv)
{
    PlanArgs a;
    memset(&a, 0, sizeof a);
    compile_opts_init(&a.co);
    compile_opts_bind_extra_inputs(&a.co, stderr);
    a.eps = 0.1;
    a.imbalance = -1;
    a.efficiency = 0.5;
    a.min_heavy = 2;
    a.schedule = SCHED_H1F1B;
    a.max_tp = 8;
    a.zero = a.recompute = -1;
    a.max_groups = 32;
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = cli_opt(argc, argv, &i, "--microbatch", &v)) != 0) {
            if (r < 0 || cli_parse_i64("--microbatch", v, &a.co.batch)) return 2;
            continue;
        }
#define INTOPT(name, field)                                                     \
    if ((r = cli_opt(argc, argv, &i, name, &v)) != 0) {                         \
        if (r < 0 || cli_parse_i64(name, v, &a.field)) return 2;                \
        continue;                                                               \
    }
#define DBLOPT(name, field)                                                     \
    if ((r = cli_opt(argc, argv, &i, name, &v)) != 0) {                         \
        if (r < 0 || parse_double(name, v, &a.field)) return 2;                 \
        continue;                                                               \
    }
        INTOPT("--global-batch", global_batch)
        INTOPT("--layers", layers)
        INTOPT("--threads", threads)
        INTOPT("--min-heavy", min_heavy)
        INTOPT("--max-stages", max_stages)
        INTOPT("--coarse-layers", coarse_layers)
        if (cli_old_eps("plan", argv[i])) return 2;
        DBLOPT("--plan-eps", eps)
        DBLOPT("--imbalance", imbalance)
        DBLOPT("--efficiency", efficiency)
#undef INTOPT
#undef DBLOPT
        if ((r = cli_opt(argc, argv, &i, "--schedule", &v)) != 0) {
            if (r < 0) return 2;
            a.schedule = schedule_from_name(v);
            if (a.schedule < 0) {
                fprintf(stderr, "hetc plan: unknown schedule '%s' (h1f1b, 1f1b, eager1f1b, gpipe)\n", v);
                return 2;
            }
            continue;
        }
        if (!strcmp(argv[i], "--dp-divides-microbatch")) {
            a.dp_divides = 1;
            continue;
        }
        if (!strcmp(argv[i], "--no-intra-op")) {
            a.no_intra = 1;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--max-tp", &v)) != 0) {
            if (r < 0 || cli_parse_i64("--max-tp", v, &a.max_tp)) return 2;
            if (a.max_tp < 1 || a.max_tp > 1024 || (a.max_tp & (a.max_tp - 1))) {
                fprintf(stderr, "hetc plan: --max-tp expects a power of two >= 1, got '%s'\n", v);
                return 2;
            }
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--zero", &v)) != 0) {
            if (r < 0) return 2;
            if (strcmp(v, "auto") && strcmp(v, "0") && strcmp(v, "1") && strcmp(v, "2")) {
                fprintf(stderr, "hetc plan: --zero expects auto, 0, 1 or 2, got '%s'\n", v);
                return 2;
            }
            a.zero = strcmp(v, "auto") ? v[0] - '0' : -1;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--recompute", &v)) != 0) {
            if (r < 0) return 2;
            a.recompute = strcmp(v, "auto") ? recompute_from_name(v) : -1;
            if (strcmp(v, "auto") && a.recompute < 0) {
                fprintf(stderr, "hetc plan: --recompute expects auto, none, full or selective, "
                        "got '%s'\n", v);
                return 2;
            }
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--planner", &v)) != 0) {
            if (r < 0) return 2;
            if (!planner_find(v)) {
                char names[256];
                planner_names(names, sizeof names);
                fprintf(stderr, "hetc plan: unknown planner '%s' (%s)\n", v, names);
                return 2;
            }
            a.planner = v;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--autohet-profile", &v)) != 0) {
            if (r < 0) return 2;
            if (strcmp(v, "exact") && strcmp(v, "binary")) {
                fprintf(stderr, "hetc plan: --autohet-profile must be exact or binary, not '%s'\n", v);
                return 2;
            }
            a.autohet_binary = !strcmp(v, "binary");
            continue;
        }
        if (!strcmp(argv[i], "--baseline-equal")) {
            a.baseline_equal = 1;
            continue;
        }
        if (!strcmp(argv[i], "--progress") || !strcmp(argv[i], "--no-progress")) {
            a.progress = argv[i][2] == 'n' ? -1 : 1;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--time-limit", &v)) != 0) {
            if (r < 0 || parse_double("--time-limit", v, &a.time_limit)) return 2;
            if (!(a.time_limit > 0) || a.time_limit > 1e9) {
                fprintf(stderr, "hetc plan: --time-limit expects seconds > 0, got '%s'\n", v);
                return 2;
            }
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--max-node-groups", &v)) != 0) {
            if (r < 0 || cli_parse_i64("--max-node-groups", v, &a.max_groups)) return 2;
            if (a.max_groups > 1000000) {
                fprintf(stderr, "hetc plan: --max-node-groups expects 0..1000000, got '%s'\n", v);
                return 2;
            }
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--profile-db", &v)) != 0) {
            if (r < 0) return 2;
            a.profile_db = v;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--write-profile-db", &v)) != 0) {
            if (r < 0) return 2;
            a.write_profile_db = v;
            continue;
        }
        r = compile_opts_parse_one(&a.co, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "hetc plan: unknown option '%s' (see hetc plan --help)\n", argv[i]);
            return 2;
        }
        if (!model)
            model = argv[i];
        else if (!a.cluster)
            a.cluster = argv[i];
        else {
            fprintf(stderr, "hetc plan: unexpected argument '%s' (MODEL.onnx CLUSTER.yaml)\n", argv[i]);
            return 2;
        }
    }
    if (!model || !a.cluster) {
        usage(stderr);
        return 2;
    }
    a.co.model = model;
    if (a.co.batch <= 0) {
        if (a.co.batch == 0) {
            fprintf(stderr, "hetc plan: --microbatch must be >= 1\n");
            return 2;
        }
        a.co.batch = 1;
    }
    if (a.global_batch == 0)
        a.global_batch = 8 * a.co.batch;
    if (a.global_batch % a.co.batch) {
        fprintf(stderr, "hetc plan: --global-batch %lld is not divisible by --microbatch %lld "
                "(B = G / b microbatches must be whole)\n", (long long)a.global_batch,
                (long long)a.co.batch);
        return 2;
    }
    if (a.min_heavy < 1) {
        fprintf(stderr, "hetc plan: --min-heavy must be >= 1\n");
        return 2;
    }
    if (!(a.efficiency > 0 && a.efficiency <= 1)) {
        fprintf(stderr, "hetc plan: --efficiency must be in (0, 1]\n");
        return 2;
    }
    int B = (int)(a.global_batch / a.co.batch);
    int tty = isatty(2) || a.progress;             /* the profile's live line */
    int dp_progress = a.progress < 0 ? 0 : tty ? 1 : 2; /* run_dp */
    if (a.progress < 0)
        tty = 0;
    const char *out = a.co.out_dir ? a.co.out_dir : "build";
    char irdir[4096];
    snprintf(irdir, sizeof irdir, "%s/ir", out);
    IrError err = {{0}};
    int rc = 1;
    double t0 = now_s(), t_imp = 0, t_pass = 0, t_lay = 0, t_prof = 0, t_dp = 0, t_sim = 0;

    ClusterSpec cl;
    memset(&cl, 0, sizeof cl);
    if (cluster_load_yaml(a.cluster, &cl, &err)) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        return 1;
    }
    ProfileDb pdb;
    memset(&pdb, 0, sizeof pdb);
    if (a.profile_db && profile_db_load(a.profile_db, (int)a.co.batch, a.co.seq > 0 ? (int)a.co.seq : 0,
                                        cl.dtype, &pdb, &err)) {
        fprintf(stderr, "hetc plan: profile database: %s\n", err.msg);
        cluster_free(&cl);
        return 1;
    }
    IrGraph *g = NULL;
    PlanLayer *layers = NULL;
    LayerIntra *intra = NULL;  /* TP structure of the layers (issue 9) */
    CostModel *cm = NULL;
    Plan plan;
    memset(&plan, 0, sizeof plan);
    SimResult sim;
    memset(&sim, 0, sizeof sim);
    double *sync = NULL;
    ModuleReport mrep;
    memset(&mrep, 0, sizeof mrep);
    DpJob *job = calloc(1, sizeof *job);
    if (!job) {
        fprintf(stderr, "hetc plan: out of memory\n");
        goto out;
    }
    if (cli_mkdirs(out, &err) || (a.co.dump_after && cli_mkdirs(irdir, &err))) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        goto out;
    }
    PassContext ctx;
    pass_context_default(&ctx);
    ctx.dump_after = a.co.dump_after;
    ctx.dump_dir = irdir;
    ctx.verbose = a.co.verbose;

    /* 1. import + forward passes */
    double t = now_s();
    a.co.report_params = 1;
    g = compile_import(&a.co, NULL, 0, 0, &ctx, &err);
    if (!g || compile_check_token_shape(g, &a.co, "--microbatch", &err)) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        goto out;
    }
    /* A fixed-batch model runs its microbatch whole on every rank: the
     * stage binaries (--dp-divides-microbatch) can only run it at dp 1. */
    int64_t fixed_batch = -1;
    if (a.dp_divides && compile_fixed_batch(&a.co, &fixed_batch, &err)) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        goto out;
    }
    if (fixed_batch > 0)
        fprintf(stderr, "hetc plan: %s has a fixed batch of %lld rows: every stage gets dp 1 "
                "(to use data parallelism, " COMPILE_REEXPORT_HINT ")\n",
                a.co.model, (long long)fixed_batch);
    t_imp = now_s() - t;
    t = now_s();
    if (compile_run_passes(g, &a.co, &ctx, &err)) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        goto out;
    }
    t_pass = now_s() - t;

    /* 2. modules and layers */
    t = now_s();
    ModuleOptions mo;
    module_options_default(&mo);
    mo.min_heavy = (int)a.min_heavy;
    if (modules_detect(g, &mo, &mrep, &err) || pass_maybe_dump(g, "modules", &ctx, &err)) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        goto out;
    }
    ctx.dump_index++;
    module_report_print(stderr, &mrep, g);
    LayerOptions lo;
    layer_options_default(&lo);
    lo.target_layers = (int)a.layers;
    lo.param_dtype_bytes = dtype_size_bytes(cl.dtype);
    LayerSummary ls;
    if (layers_build(g, &lo, &layers, &ls, &err) || pass_maybe_dump(g, "layers", &ctx, &err)) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        goto out;
    }
    ctx.dump_index++;
    t_lay = now_s() - t;
    char per[64];
    if (ls.per_module < 0)
        snprintf(per, sizeof per, "%d modules per layer", -ls.per_module);
    else
        snprintf(per, sizeof per, "%d per module", ls.per_module);
    fprintf(stderr, "layers: %d (%s x %d modules, %d outside; <= %d heavy ops per "
            "layer); per microbatch of %lld x %lld tokens: %.3g fwd + %.3g bwd FLOP, %.3g GB "
            "parameters (%s)\n", ls.L, per, ls.modules, ls.outside_layers,
            ls.heavy_bound, (long long)a.co.batch, (long long)(a.co.seq > 0 ? a.co.seq : 0),
            ls.total_fwd_flops, ls.total_bwd_flops, ls.total_param_bytes / 1e9, cl.dtype);

    const PlannerDef *pd = planner_find(a.planner ? a.planner : planner_table[0].name);
    if (pd->layers) {
        PlanAltArgs pa = {a.planner, B, a.efficiency, (int)a.threads, (int)a.coarse_layers, out,
                          model, (long)a.global_batch, a.co.seq > 0 ? (long)a.co.seq : 0,
                          a.autohet_binary};
        rc = cmd_plan_alt(&pa, &cl, layers, ls.L);
        goto out;
    }

    /* 3. profile */
    CostOptions cop;
    int retried = 0;
    int inflight = 1;  /* K the intra-op choice sizes memory for (raised when memory binds) */
again:
    t = now_s();
    cost_options_default(&cop);
    cop.efficiency = a.efficiency;
    if (!a.no_intra) {
        if (!intra) {
            intra = calloc((size_t)ls.L, sizeof *intra);
            if (!intra || layer_intra_from_ir(g, layers, ls.L, intra, &err)) {
                fprintf(stderr, "hetc plan: %s\n", intra ? err.msg : "out of memory");
                goto out;
            }
        }
        cop.intra = intra;
        cop.max_tp = (int)a.max_tp;
        cop.zero_stage = a.zero;
        cop.recompute = a.recompute;
        cop.inflight = inflight;
    }
    if (a.dp_divides)
        cop.dp_divides = fixed_batch > 0 ? 1 : a.co.batch; /* 1: only dp 1 divides it */
    if (a.imbalance >= 0)
        cop.imbalance_threshold = a.imbalance;
    if (a.profile_db)
        cop.db = &pdb;
    if (retried)
        cop.imbalance_threshold = 0;
    cost_model_free(cm);
    cm = cost_model_new(&cl, layers, ls.L, &cop, &err);
    if (!cm) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        goto out;
    }
    ShapeKeep sk = {&cl, (int)a.max_groups};
    if (hapt_dp_units(&cl, sk.max_groups) < cluster_total_devices(&cl)
            ? cost_model_profile_shapes(cm, keep_shape, &sk, progress_profile, &tty)
            : cost_model_profile_all(cm, progress_profile, &tty)) {
        fprintf(stderr, "hetc plan: profile: out of memory\n");
        goto out;
    }
    if (tty)
        fputc('\n', stderr);
    t_prof += now_s() - t;
    CostCounters cc = cost_model_counters(cm);
    char line[512];
    cost_counters_summary(&cc, line, sizeof line);
    fprintf(stderr, "%s (imbalance threshold %g%s; memory: 16 B/parameter + runtime reserve + "
            "activations, K = 1)\n", line, cop.imbalance_threshold,
            cop.imbalance_threshold > 0 ? "" : " = off");
    if (a.profile_db) {
        cost_counters_db_summary(&cc, &pdb, line, sizeof line);
        fprintf(stderr, "%s\n", line);
    }
    if (a.write_profile_db && !retried) {
        if (cost_model_write_profile_db(cm, a.write_profile_db, (int)a.co.batch,
                                        a.co.seq > 0 ? (int)a.co.seq : 0, &err)) {
            fprintf(stderr, "hetc plan: %s\n", err.msg);
            goto out;
        }
        fprintf(stderr, "wrote %s (analytic per-layer figures)\n", a.write_profile_db);
    }

    /* 4. DP over every mesh order */
    t = now_s();
    memset(job, 0, sizeof *job);
    job->c = &cl;
    job->L = ls.L;
    job->search = pd->oracle;
    job->o = cost_model_oracle(cm);
    dp_options_default(&job->opt);
    job->opt.microbatches = B;
    job->opt.eps = a.eps;
    job->opt.schedule = (ScheduleKind)a.schedule;
    job->opt.tmax_comm_candidates = 1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    job->opt.threads = a.threads > 0 ? (int)a.threads : (int)(ncpu > 0 ? (ncpu > 16 ? 16 : ncpu) : 1);
    /* One t_max per thread per batch: a batch is evaluated against the best
     * known before it, so larger batches only run DPs a finished one would
     * have pruned (the result does not depend on it). */
    job->opt.batch = job->opt.threads;
    int D = hapt_dp_units(&cl, (int)a.max_groups); /* the DP's device dimension */
    if (a.max_stages > 0)
        job->opt.max_stages = (int)a.max_stages;
    else {
        /* the DP table holds (L + 2) x D x (S + 1) states per thread */
        long cap = (16L << 20) / ((long)(ls.L + 2) * D) - 1;
        int smax = ls.L < D ? ls.L : D;
        if (cap < smax)
            job->opt.max_stages = cap < cl.nmeshes ? cl.nmeshes : (int)cap;
    }
    /* the limit covers the whole command: what import, layers and profile
     * took is gone from the search's share (at least 1 ms is left: the
     * search then returns its fallback plan at once) */
    if (a.time_limit > 0) {
        double left = a.time_limit - (now_s() - t0);
        job->opt.time_limit = left > 1e-3 ? left : 1e-3;
    }
    job->opt.max_groups = (int)a.max_groups;
    int dprc = run_dp(job, dp_progress);
    t_dp += now_s() - t;
    if (dprc) {
        if (!retried && cop.imbalance_threshold > 0) {
            fprintf(stderr, "search: %s\nsearch: retrying with imbalance pruning off (a pruned "
                    "candidate may be the only one a slow link allows)\n", job->err.msg);
            retried = 1;
            goto again;
        }
        if (!a.no_intra && inflight < B) {
            /* memory bound the search: let the intra-op choice size each
             * stage for more microbatches in flight (TP, ZeRO, recompute) */
            inflight = inflight * 4 < B ? inflight * 4 : B;
            fprintf(stderr, "search: %s\nsearch: retrying with intra-op plans sized for K = %d "
                    "microbatches in flight\n", job->err.msg, inflight);
            goto again;
        }
        explain_memory(cm, &cl, layers, ls.L);
        fprintf(stderr, "hetc plan: no feasible plan: %s\n", job->err.msg);
        double act = 0, cap = 0;
        for (int l = 0; l < ls.L; l++)
            act += layers[l].act_bytes;
        for (int m = 0; m < cl.nmeshes; m++)
            cap += cl.meshes[m].dev.mem_bytes * cl.meshes[m].nodes * cl.meshes[m].per_node;
        fprintf(stderr, "hetc plan: binding constraint: memory (Eq. 24) is the usual one here: the "
                "model's weights, gradients and optimizer states take %.1f GiB once (16 B per "
                "parameter) and every DP replica holds its stage's share again; one microbatch of "
                "saved activations takes %.1f GiB and a stage keeps K_i of them in flight; the "
                "cluster has %.1f GiB in all.  Intra-op plans (TP, ZeRO, recompute) were %s: "
                "try a smaller --microbatch, more --layers, or --schedule 1f1b (smaller K_i)\n",
                ls.total_param_bytes / lo.param_dtype_bytes * 16 / GIB, act / GIB, cap / GIB,
                a.no_intra ? "off (--no-intra-op)" : "tried");
        goto out;
    }
    plan = job->plan;
    memset(&job->plan, 0, sizeof job->plan);
    DpStats *st = &job->stats;
    fprintf(stderr, "search: %ld mesh orders, %ld t_max candidates: %ld full DPs, pruned %ld low + "
            "%ld high + %ld by bound; %ld transitions; %.3f s (+ %.3f s tabulating, %d threads%s)\n",
            st->orders, st->tmax_candidates, st->tmax_evaluated, st->tmax_pruned_low,
            st->tmax_pruned_high, st->tmax_pruned_bound, st->transitions, st->seconds,
            st->seconds_tabulate, job->opt.threads,
            job->opt.max_stages ? ", stages capped" : "");
    if (plan.coarse_meshes)
        fprintf(stderr, "search: heuristic: %d mesh(es) searched in node groups (whole groups "
                "only, no sub-node stages there; %s)\n", plan.coarse_meshes,
                plan.time_limited && a.max_groups == 0
                    ? "the time limit's fallback search"
                    : "--max-node-groups 0 searches every shape");
    if (plan.time_limited)
        fprintf(stderr, "search: stopped by --time-limit %g s: this is the best plan found so far, "
                "not proven optimal\n", a.time_limit);

    /* 5. simulate */
    t = now_s();
    sync = calloc((size_t)plan.nstages, sizeof *sync);
    if (!sync) {
        fprintf(stderr, "hetc plan: out of memory\n");
        goto out;
    }
    for (int s = 0; s < plan.nstages; s++) {
        StageCost sc;
        const PlanStage *ps = &plan.stages[s];
        if (cost_model_stage(cm, ps->first_layer, ps->last_layer, ps->mesh, ps->sub, &sc) == 0 &&
            isfinite(sc.t_sync))
            sync[s] = sc.t_sync;
    }
    if (simulate_plan(&plan, sync, &sim, &err)) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        goto out;
    }
    t_sim = now_s() - t;

    /* 6. stage ids on nodes, outputs */
    for (int s = 0; s < plan.nstages; s++)
        for (int l = plan.stages[s].first_layer; l <= plan.stages[s].last_layer; l++)
            for (int q = layers[l - 1].first_node; q <= layers[l - 1].last_node; q++)
                if (!g->nodes[q]->dead && g->nodes[q]->layer_id == l)
                    g->nodes[q]->stage_id = s;
    if (pass_maybe_dump(g, "plan", &ctx, &err)) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        goto out;
    }
    PlanOutputInfo info;
    memset(&info, 0, sizeof info);
    info.model = model;
    info.global_batch = a.global_batch;
    info.seq = a.co.seq > 0 ? a.co.seq : 0;
    info.counters = &cc;
    if (plan_write_outputs(out, &plan, &cl, &info, sim.events, sim.nevents, &err)) {
        fprintf(stderr, "hetc plan: %s\n", err.msg);
        goto out;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/plan.txt", out);
    FILE *f = fopen(path, "r");
    if (f) {
        char buf[4096];
        size_t nr;
        while ((nr = fread(buf, 1, sizeof buf, f)) > 0)
            fwrite(buf, 1, nr, stdout);
        fclose(f);
    }
    fprintf(stderr, "simulated iteration %.4f s (%d stages, B = %d, %s), bubbles:", sim.iter_time,
            plan.nstages, B, schedule_name(plan.schedule));
    for (int s = 0; s < sim.nstages; s++)
        fprintf(stderr, " %.1f%%", 100 * sim.bubble[s]);
    fprintf(stderr, "\ntime: import %.3f s, passes %.3f s, modules+layers %.3f s, profile %.3f s, "
            "search %.3f s, simulate %.3f s, total %.3f s\nwrote %s/plan.json, plan.txt, "
            "timeline.json, timeline.svg\n", t_imp, t_pass, t_lay, t_prof, t_dp, t_sim,
            now_s() - t0, out);
    if (a.baseline_equal) {
        /* The baseline is costed without imbalance pruning: an equal split
         * may well give a slow mesh more than T times its share. */
        int fits = 0;
        double obj = INFINITY;
        CostOptions c0 = cop;
        c0.imbalance_threshold = 0;
        CostModel *cm0 = cost_model_new(&cl, layers, ls.L, &c0, &err);
        double tb = cm0 ? baseline_equal(&plan, cm0, &cl, ls.L, &fits, &obj, &err) : INFINITY;
        cost_model_free(cm0);
        if (isfinite(tb))
            fprintf(stderr, "baseline (equal layers per stage, same stages and submeshes): "
                    "iteration %.4f s%s, Eq. 13 %.4f s (HAPT: %.4f s simulated, %.4f s Eq. 13); "
                    "HAPT / baseline throughput %.3f\n", tb,
                    fits ? "" : " (exceeds device memory)", obj, sim.iter_time, plan.objective,
                    tb / sim.iter_time);
        else
            fprintf(stderr, "baseline (equal layers per stage): cannot be built (%s)\n",
                    err.msg[0] ? err.msg : "more stages than layers");
    }
    rc = 0;
out:
    if (job)
        plan_free(&job->plan);
    free(job);
    plan_free(&plan);
    sim_result_free(&sim);
    free(sync);
    cost_model_free(cm);
    free(intra);
    free(layers);
    module_report_free(&mrep);
    ir_graph_free(g);
    cluster_free(&cl);
    profile_db_free(&pdb);
    return rc;
}
