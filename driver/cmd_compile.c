/* hetc compile: plan (hetc plan, or --plan FILE), then per stage: import at
 * the stage's local batch, training passes, partition (passes/partition.h),
 * memory plan + lowering (codegen/lower_stage.h), LLVM emission and link
 * into DIR/stage_K; the initial parameters as a layer-wise checkpoint
 * (DIR/init); launch.sh / srun.conf / job.sbatch / hostfile.  docs/STAGES.md. */
#include "cmd_compile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends.h"
#include "build_dir.h"
#include "cli.h"
#include "cmd_plan.h"
#include "compile_elastic.h"
#include "compile_launch.h"
#include "compile_opts.h"
#include "compile_plan.h"
#include "compile_stage.h"
#include "layers.h"
#include "loss.h"
#include "modules.h"
#include "planner/cost_model.h"
#include "planner/planner.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: hetc [compile] MODEL.onnx CLUSTER.yaml -o DIR [options]\n"
            "\n"
            "Plan the model onto the cluster (as hetc plan does: plan.json, plan.txt, timeline.*),\n"
            "then build one executable per pipeline stage and the launcher:\n"
            "  DIR/stage_K        stage K's program (LLVM-emitted, linked to hetrt)\n"
            "  DIR/init/          the initial parameters, a layer-wise checkpoint\n"
            "  DIR/launch.sh      one MPMD mpirun of every stage (--data FILE --steps N --resume\n"
            "                     --checkpoint-every N --checkpoint-dir DIR; --hostfile, --slurm)\n"
            "  DIR/srun.conf      Slurm --multi-prog; DIR/hostfile: hosts per mesh (template)\n"
            "  DIR/job.sbatch     the Slurm job in one file: sbatch DIR/job.sbatch --data FILE\n"
            "  DIR/stages.txt     per-stage memory plan beside the planner's prediction\n"
            "\n"
            "compile options:\n"
            "  --plan FILE            compile this plan.json instead of planning (edit a plan, or\n"
            "                         write one by hand: docs/PLAN_FORMAT.md)\n"
            "  --emit-llvm            also write DIR/stage_K.ll\n"
            "  --interpret-nodes      every node through the node interpreter (hetrt_node),\n"
            "                         no direct kernel calls (to compare the two; links it and\n"
            "                         embeds the IR text)\n"
            "  --no-fuse              one kernel call per node: no generated fused elementwise\n"
            "                         kernels (to compare; docs/CODEGEN.md)\n"
            "  --recompute none|full|selective  activation recompute of every stage, overriding\n"
            "                         the plan's per-stage \"recompute\" (docs/PARTITION.md)\n"
            "  --backend host|cuda    runtime the stage binaries link (default host): cuda runs\n"
            "                         nodes on an NVIDIA GPU (cuBLASLt, NCCL; docs/CUDA.md)\n"
            "  --steps N              default --steps of the stage binaries (default 100)\n"
            "training options (as hetc train):\n"
            "  --optimizer adamw|sgd  --lr X (1e-3)  --beta1 X (0.9)  --beta2 X (0.95)\n"
            "  --adam-eps X (1e-8)  --weight-decay X (0.1)  --momentum X (0.9)  --clip X (1.0)\n"
            "  --lr-schedule constant|cosine  --warmup N  --loss xent|xent:ignore=N\n"
            "plan options: see hetc plan --help (all accepted here; --microbatch is the\n"
            "rows of one microbatch, --global-batch the rows of one optimizer step).\n");
}

/* plan options that take a value (the rest of hetc plan's are flags) */
static const char *const PLAN_VALUE_OPTS[] = {
    "--global-batch", "--layers", "--threads", "--min-heavy", "--max-stages", "--plan-eps",
    "--imbalance", "--efficiency", "--schedule", "--profile-db", "--microbatch", "--max-tp",
    "--zero", "--planner", "--coarse-layers", NULL};

static int parse_d(const char *opt, const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v)) {
        fprintf(stderr, "hetc compile: %s: '%s' is not a number\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cmd_compile(int argc, char **argv) {
    CompileArgs ca;
    memset(&ca, 0, sizeof ca);
    compile_args_default(&ca);
    const char *plan_file = NULL, *recompute = NULL;
    int64_t layers_opt = 0, min_heavy = 2;
    /* argv for hetc plan: everything that is not a compile / training option */
    char **pargv = calloc((size_t)argc + 8, sizeof *pargv);
    int pargc = 0;
    pargv[pargc++] = "plan";
    const char *model = NULL, *cluster = NULL;
    CompileOpts co;
    compile_opts_init(&co);
    compile_opts_bind_extra_inputs(&co, NULL); /* hetc plan says what it bound */
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
#define DBL(name, field)                                                      \
    if ((r = cli_opt(argc, argv, &i, name, &v)) != 0) {                       \
        if (r < 0 || parse_d(name, v, &ca.field)) goto bad;                   \
        continue;                                                             \
    }
#define I64(name, field)                                                      \
    if ((r = cli_opt(argc, argv, &i, name, &v)) != 0) {                       \
        if (r < 0 || cli_parse_i64(name, v, &ca.field)) goto bad;             \
        continue;                                                             \
    }
#define STR(name, field)                                                      \
    if ((r = cli_opt(argc, argv, &i, name, &v)) != 0) {                       \
        if (r < 0) goto bad;                                                  \
        ca.field = v;                                                         \
        continue;                                                             \
    }
        if (cli_old_eps("compile", argv[i])) goto bad;
        DBL("--lr", lr) DBL("--beta1", beta1) DBL("--beta2", beta2) DBL("--adam-eps", adam_eps)
        DBL("--weight-decay", weight_decay) DBL("--momentum", momentum) DBL("--clip", clip)
        I64("--steps", steps) I64("--warmup", warmup)
        STR("--optimizer", optimizer) STR("--lr-schedule", lr_schedule) STR("--loss", loss)
#undef DBL
#undef I64
#undef STR
        if ((r = cli_opt(argc, argv, &i, "--plan", &v)) != 0) {
            if (r < 0) goto bad;
            plan_file = v;
            continue;
        }
        if (!strcmp(argv[i], "--emit-llvm")) {
            ca.emit_llvm = 1;
            continue;
        }
        if (!strcmp(argv[i], "--interpret-nodes")) {
            ca.interpret_nodes = 1;
            continue;
        }
        if (!strcmp(argv[i], "--no-fuse")) {
            ca.no_fuse = 1;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--recompute", &v)) != 0) {
            PartRecompute rm;
            if (r < 0) goto bad;
            if (part_recompute_parse(v, &rm)) {
                fprintf(stderr, "hetc compile: --recompute %s: expected none, full or selective\n",
                        v);
                free(pargv);
                return 2;
            }
            recompute = v;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--backend", &v)) != 0) {
            if (r < 0) goto bad;
            const HetcBackend *be = hetc_backend_find(v);
            char names[200];
            hetc_backend_names(names, sizeof names);
            if (!be) {
                fprintf(stderr, "hetc compile: --backend must be %s, not '%s'\n", names, v);
                free(pargv);
                return 2;
            }
            if (!hetc_backend_available(be)) {
                fprintf(stderr, "hetc compile: --backend %s: this hetc was built without %s\n",
                        v, be->missing);
                free(pargv);
                return 2;
            }
            ca.backend = be;
            continue;
        }
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            free(pargv);
            return 0;
        }
        /* shared import options: ours too, and hetc plan's */
        int i0 = i;
        if ((r = compile_opts_parse_one(&co, argc, argv, &i)) != 0) {
            if (r < 0) goto bad;
            for (int k = i0; k <= i; k++) pargv[pargc++] = argv[k];
            continue;
        }
        int takes = 0;
        for (int k = 0; PLAN_VALUE_OPTS[k]; k++) {
            size_t n = strlen(PLAN_VALUE_OPTS[k]);
            if (!strncmp(argv[i], PLAN_VALUE_OPTS[k], n) && (argv[i][n] == 0 || argv[i][n] == '='))
                takes = argv[i][n] == 0 ? 2 : 1;
        }
        if (takes) {
            const char *name = argv[i];
            if ((r = cli_opt(argc, argv, &i, "--layers", &v)) > 0) {
                if (cli_parse_i64("--layers", v, &layers_opt)) goto bad;
            } else if ((r = cli_opt(argc, argv, &i, "--min-heavy", &v)) > 0) {
                if (cli_parse_i64("--min-heavy", v, &min_heavy)) goto bad;
            } else if ((r = cli_opt(argc, argv, &i, "--microbatch", &v)) > 0) {
                if (cli_parse_i64("--microbatch", v, &co.batch)) goto bad;
            } else if (takes == 2) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "hetc compile: %s needs a value\n", name);
                    goto bad;
                }
                i++;
            }
            if (r < 0) goto bad;
            for (int k = i0; k <= i; k++) pargv[pargc++] = argv[k];
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1]) { /* a plan flag: hetc plan judges it */
            pargv[pargc++] = argv[i];
            continue;
        }
        if (!model) model = argv[i];
        else if (!cluster) cluster = argv[i];
        else {
            fprintf(stderr, "hetc compile: unexpected argument '%s' (MODEL.onnx CLUSTER.yaml)\n",
                    argv[i]);
            goto bad;
        }
        pargv[pargc++] = argv[i];
    }
    if (!model || !cluster) {
        usage(stderr);
        goto bad;
    }
    if (strcmp(ca.optimizer, "adamw") && strcmp(ca.optimizer, "sgd")) {
        fprintf(stderr, "hetc compile: --optimizer must be adamw or sgd, not '%s'\n", ca.optimizer);
        goto bad;
    }
    if (strcmp(ca.lr_schedule, "constant") && strcmp(ca.lr_schedule, "cosine")) {
        fprintf(stderr, "hetc compile: --lr-schedule must be constant or cosine, not '%s'\n",
                ca.lr_schedule);
        goto bad;
    }
    if (ca.steps < 1) {
        fprintf(stderr, "hetc compile: --steps must be >= 1\n");
        goto bad;
    }
    co.model = model;
    /* everything is written into a fresh sibling of the output directory and
     * swapped in at the end (build_dir.h): a compile killed half-way leaves
     * the old build whole */
    const char *final = co.out_dir ? co.out_dir : "build";
    char out_tmp[4200];
    const char *out = out_tmp;
    /* the stage binaries split a microbatch's rows evenly over a stage's DP ranks (ZeRO,
     * recompute and TP they run): plan within that.  TP needs no
     * restriction: the planner offers tp > 1 only to stages holding whole attention /
     * MLP patterns that tp_shard shards at that tp (passes/planner/intra_ir.c). */
    pargv[pargc++] = "--dp-divides-microbatch";
    /* no --backend restriction either: the CUDA stage runtime runs TP and ZeRO on
     * NCCL (runtime/cuda/stage_coll_cuda.c, docs/CUDA.md) */
    double t0 = now_s();
    IrError err = {{0}};
    if (build_dir_begin(final, out_tmp, sizeof out_tmp, &err)) {
        fprintf(stderr, "hetc compile: %s\n", err.msg);
        free(pargv);
        return 1;
    }
    pargv[pargc++] = "-o"; /* the last -o wins: hetc plan writes into the new build */
    pargv[pargc++] = out_tmp;
    /* one id for this compile: every stage binary and launch.sh carry it and
     * check it at start-up */
    uint64_t build_id = build_dir_new_id();

    /* 1. the plan */
    char planpath[4200];
    if (plan_file) {
        snprintf(planpath, sizeof planpath, "%s", plan_file);
        co.ibinds.log = stderr; /* no hetc plan run to say what was bound */
    } else {
        int prc = cmd_plan(pargc, pargv);
        if (prc) {
            free(pargv);
            build_dir_abandon(final, out_tmp);
            return prc;
        }
        snprintf(planpath, sizeof planpath, "%s/plan.json", out);
    }
    free(pargv);
    pargv = NULL;
    double t_plan = now_s() - t0;
    CompPlan plan;
    if (comp_plan_read(planpath, &plan, &err)) {
        fprintf(stderr, "hetc compile: %s\n", err.msg);
        build_dir_abandon(final, out_tmp);
        return 1;
    }
    if (recompute && comp_plan_set_recompute(&plan, recompute, &err)) {
        fprintf(stderr, "hetc compile: %s\n", err.msg);
        comp_plan_free(&plan);
        build_dir_abandon(final, out_tmp);
        return 1;
    }
    int64_t rows = plan.global_batch / plan.microbatches;
    if (co.batch > 0 && co.batch != rows) {
        fprintf(stderr, "hetc compile: --microbatch %lld disagrees with the plan's %lld rows per "
                "microbatch (%s: global_batch / microbatches)\n", (long long)co.batch,
                (long long)rows, planpath);
        comp_plan_free(&plan);
        build_dir_abandon(final, out_tmp);
        return 1;
    }
    co.batch = rows;
    if (co.seq < 0 && plan.seq > 0)
        co.seq = plan.seq;

    /* 2. layer ids, on the graph the planner saw (same passes, same options) */
    int rc = 1;
    IrGraph *lg = NULL;
    LayerIndex lix = {0};
    int L = 0;
    ClusterSpec cl;
    memset(&cl, 0, sizeof cl);
    PassContext ctx;
    pass_context_default(&ctx);
    ctx.verbose = co.verbose;
    ModuleReport mrep;
    memset(&mrep, 0, sizeof mrep);
    PlanLayer *players = NULL;
    if (cluster_load_yaml(cluster, &cl, &err)) {
        fprintf(stderr, "hetc compile: %s\n", err.msg);
        goto done;
    }
    {
        CompileOpts lco = co;
        lco.dump_after = NULL;
        co.ibinds.log = NULL; /* said once; not again per stage */
        lco.report_params = 1;
        lg = compile_import(&lco, NULL, 0, 0, &ctx, &err);
        ModuleOptions mo;
        module_options_default(&mo);
        mo.min_heavy = (int)min_heavy;
        LayerOptions lo;
        layer_options_default(&lo);
        lo.target_layers = (int)layers_opt;
        lo.param_dtype_bytes = dtype_size_bytes(cl.dtype);
        LayerSummary ls;
        if (!lg || compile_run_passes(lg, &lco, &ctx, &err) ||
            modules_detect(lg, &mo, &mrep, &err) || layers_build(lg, &lo, &players, &ls, &err)) {
            fprintf(stderr, "hetc compile: %s\n", err.msg);
            goto done;
        }
        L = ls.L;
    }
    if (plan.stages[plan.nstages - 1].last_layer != L) {
        fprintf(stderr, "hetc compile: %s covers layers 1..%d but the model has %d layers with "
                "these options (pass the same --layers / --min-heavy / --microbatch / --seq the "
                "plan was made with)\n", planpath, plan.stages[plan.nstages - 1].last_layer, L);
        goto done;
    }
    if (layer_index_build(&lix, lg, &err)) {
        fprintf(stderr, "hetc compile: %s\n", err.msg);
        goto done;
    }
    fprintf(stderr, "compile: %d stages, %d layers, %d microbatches of %lld rows x %lld tokens "
            "per step\n", plan.nstages, L, plan.microbatches, (long long)rows,
            (long long)co.seq);

    /* 3. stages */
    CompileStages cs;
    memset(&cs, 0, sizeof cs);
    cs.plan = &plan;
    cs.args = &ca;
    cs.co = &co;
    cs.out_dir = out;
    cs.build_id = build_id;
    cs.nlayers = L;
    cs.layers = &lix;
    cs.plan_path = planpath;
    if (compile_stages(&cs, &err)) {
        fprintf(stderr, "hetc compile: %s\n", err.msg);
        compile_stages_free(&cs);
        goto done;
    }
    if (compile_write_launchers(out, final, &plan, build_id, &err) ||
        compile_write_elastic_env(out, argc, argv, model, cluster, &plan, &err)) {
        fprintf(stderr, "hetc compile: %s\n", err.msg);
        compile_stages_free(&cs);
        goto done;
    }
    compile_stages_free(&cs);
    if (build_dir_commit(final, out_tmp, &err)) {
        fprintf(stderr, "hetc compile: %s\n", err.msg);
        goto done;
    }
    out = final;
    fprintf(stderr, "compile: graphs %.2f s, initial parameters %.2f s, lower+emit+link %.2f s\n",
            cs.t_graphs, cs.t_init, cs.t_lower);
    fprintf(stderr, "compile: wrote %s/stage_0..%d, %s/init, %s/launch.sh in %.2f s (plan %.2f s)\n",
            out, plan.nstages - 1, out, out, now_s() - t0, t_plan);
    printf("run it: %s/launch.sh --data TOKENS.bin --steps %lld\n", out, (long long)ca.steps);
    fprintf(stderr, "compile: build id %016llx\n", (unsigned long long)build_id);
    rc = 0;
done:
    if (rc) build_dir_abandon(final, out_tmp);
    layer_index_free(&lix);
    free(players);
    module_report_free(&mrep);
    ir_graph_free(lg);
    cluster_free(&cl);
    comp_plan_free(&plan);
    return rc;
bad:
    free(pargv);
    return 2;
}
